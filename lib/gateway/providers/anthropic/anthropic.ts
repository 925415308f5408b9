import type { Usage } from "@/lib/catalog/mod.ts";
import { parseSse } from "../../sse.ts";
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatMessage,
  type Provider,
  ProviderError,
  type StreamPart,
  type UpstreamRequest,
} from "../types.ts";
import { callUpstream, readAnswerJson, upstreamIdleGuard } from "../http.ts";

export const ANTHROPIC_VERSION = "2023-06-01";

export interface AnthropicOptions {
  /** e.g. https://api.anthropic.com (the path /v1/messages is appended). */
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

/**
 * Anthropic's Messages API behind the compatible chat-completions shape: the request is translated
 * to a Messages request, and the message (or its event stream) back to chat.completion(.chunk)s.
 */
export function createAnthropicProvider(options: AnthropicOptions): Provider {
  const url = `${options.baseUrl.replace(/\/v1$/, "")}/v1/messages`;

  function send(request: UpstreamRequest, stream: boolean) {
    if (!options.apiKey) {
      throw new ProviderError("not_configured", `provider key ${options.apiKeyEnv} is not set`);
    }
    return callUpstream({
      url,
      headers: {
        "x-api-key": options.apiKey,
        "anthropic-version": ANTHROPIC_VERSION,
        "content-type": "application/json",
      },
      body: JSON.stringify(messagesRequest(request, stream)),
      signal: request.signal,
      timeoutMs: options.timeoutMs,
      fetch: options.fetch,
    });
  }

  return {
    async complete(request) {
      const json = await readAnswerJson(await send(request, false));
      const message = json as AnthropicMessage;
      if (!message || typeof message !== "object" || !Array.isArray(message.content)) {
        throw new ProviderError("malformed_response", "upstream answered 200 without a message");
      }
      const usage = usageOf(mergeCounts(NO_COUNTS, message.usage));
      const completion: ChatCompletion = {
        id: String(message.id ?? `msg-${request.requestId}`),
        object: "chat.completion",
        created: Math.floor(Date.now() / 1000),
        model: request.model.upstreamModel,
        choices: [{
          index: 0,
          message: { role: "assistant", content: textOf(message.content) },
          finish_reason: finishReason(message.stop_reason),
        }],
      };
      if (usage) {
        completion.usage = {
          prompt_tokens: usage.promptTokens,
          completion_tokens: usage.completionTokens,
          total_tokens: usage.promptTokens + usage.completionTokens,
        };
      }
      return { completion, usage };
    },

    async stream(request) {
      const { response, idle } = await send(request, true);
      return parts(response.body!, idle, request);
    },
  };
}

/** The Messages request for a compatible one. Fields with no Messages equivalent are dropped. */
export function messagesRequest(request: UpstreamRequest, stream: boolean) {
  const system = request.messages.filter((m) => m.role === "system").map((m) => m.content);
  const body: Record<string, unknown> = {
    model: request.model.upstreamModel,
    max_tokens: request.maxTokens,
    messages: conversation(request.messages),
  };
  if (system.length) body.system = system.join("\n\n");
  const p = request.passthrough;
  if (typeof p.stop === "string") body.stop_sequences = [p.stop];
  else if (Array.isArray(p.stop) && p.stop.length) body.stop_sequences = p.stop;
  for (const field of ["temperature", "top_p", "top_k"]) {
    if (typeof p[field] === "number") body[field] = p[field];
  }
  if (typeof p.user === "string") body.metadata = { user_id: p.user };
  if (stream) body.stream = true;
  return body;
}

/** Messages has no system role and wants turns to alternate: consecutive turns are merged. */
function conversation(messages: ChatMessage[]) {
  const turns: { role: "user" | "assistant"; content: string }[] = [];
  for (const m of messages) {
    if (m.role === "system") continue;
    const last = turns.at(-1);
    if (last && last.role === m.role) last.content += `\n\n${m.content}`;
    else turns.push({ role: m.role, content: m.content });
  }
  return turns;
}

interface AnthropicMessage {
  id?: string;
  content: { type: string; text?: string }[];
  stop_reason?: string | null;
  usage?: unknown;
}

function textOf(content: AnthropicMessage["content"]): string {
  return content.filter((b) => b.type === "text" && typeof b.text === "string").map((b) => b.text)
    .join("");
}

export function finishReason(stopReason: unknown): string | null {
  switch (stopReason) {
    case "end_turn":
    case "stop_sequence":
    case "pause_turn":
      return "stop";
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length";
    case "tool_use":
      return "tool_calls";
    case "refusal":
      return "content_filter";
    case null:
    case undefined:
      return null;
    default:
      return "stop";
  }
}

/** Token counts as reported so far; each report is cumulative, so the latest value of a field wins. */
interface Counts {
  input: number | null;
  cacheWrite: number | null;
  cacheRead: number | null;
  output: number | null;
}

const NO_COUNTS: Counts = { input: null, cacheWrite: null, cacheRead: null, output: null };

function mergeCounts(previous: Counts, raw: unknown): Counts {
  if (!raw || typeof raw !== "object") return previous;
  const u = raw as Record<string, unknown>;
  return {
    input: count(u.input_tokens) ?? previous.input,
    cacheWrite: count(u.cache_creation_input_tokens) ?? previous.cacheWrite,
    cacheRead: count(u.cache_read_input_tokens) ?? previous.cacheRead,
    output: count(u.output_tokens) ?? previous.output,
  };
}

/** Cache writes and cache reads are input the model read: they count as prompt tokens. */
function promptTokensOf(c: Counts): number | null {
  return c.input === null ? null : c.input + (c.cacheWrite ?? 0) + (c.cacheRead ?? 0);
}

function usageOf(c: Counts): Usage | null {
  const prompt = promptTokensOf(c);
  return prompt === null || c.output === null
    ? null
    : { promptTokens: prompt, completionTokens: c.output };
}

function count(v: unknown): number | null {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? v : null;
}

async function* parts(
  body: ReadableStream<Uint8Array>,
  idle: ReturnType<typeof upstreamIdleGuard>,
  request: UpstreamRequest,
): AsyncGenerator<StreamPart> {
  let id = `msg-${request.requestId}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (
    delta: ChatCompletionChunk["choices"][number]["delta"],
    finish: string | null = null,
  ): StreamPart => ({
    type: "chunk",
    chunk: {
      id,
      object: "chat.completion.chunk",
      created,
      model: request.model.upstreamModel,
      choices: [{ index: 0, delta, finish_reason: finish }],
    },
  });
  let counts = NO_COUNTS;
  let stopped = false;
  try {
    for await (const event of parseSse(body)) {
      idle.touch();
      let json: Record<string, unknown>;
      try {
        json = JSON.parse(event.data);
      } catch (cause) {
        throw new ProviderError("malformed_response", "upstream sent an event that is not JSON", {
          cause,
        });
      }
      if (!json || typeof json !== "object") continue;
      switch (json.type ?? event.event) {
        case "message_start": {
          const message = (json.message ?? {}) as Record<string, unknown>;
          if (typeof message.id === "string") id = message.id;
          counts = mergeCounts(counts, message.usage);
          const prompt = promptTokensOf(counts);
          if (prompt !== null) yield { type: "prompt_tokens", promptTokens: prompt };
          yield chunk({ role: "assistant", content: "" });
          break;
        }
        case "content_block_delta": {
          const delta = json.delta as { type?: string; text?: unknown } | undefined;
          if (delta?.type === "text_delta" && typeof delta.text === "string" && delta.text) {
            yield chunk({ content: delta.text });
          }
          break;
        }
        case "message_delta": {
          counts = mergeCounts(counts, json.usage);
          const stopReason = (json.delta as { stop_reason?: unknown } | undefined)?.stop_reason;
          if (stopReason) {
            yield chunk({}, finishReason(stopReason));
            // The final counts are known now: a stream cut before message_stop still bills them.
            const usage = usageOf(counts);
            if (usage) yield { type: "usage", usage };
          }
          break;
        }
        case "message_stop":
          stopped = true;
          break;
        case "error":
          throw new ProviderError(
            "stream_cut",
            `upstream error in stream: ${errorText(json.error)}`,
          );
        default: // ping, content_block_start/stop, and event types added later carry no text
          break;
      }
      if (stopped) break;
    }
  } catch (error) {
    throw idle.translate(error);
  } finally {
    idle.stop();
  }
  if (!stopped) throw new ProviderError("stream_cut", "upstream stream ended before message_stop");
  const usage = usageOf(counts);
  if (usage) yield { type: "usage", usage };
}

function errorText(error: unknown): string {
  if (error && typeof error === "object") {
    const e = error as { type?: unknown; message?: unknown };
    return [e.type, e.message].filter((x) => typeof x === "string").join(": ") || "unknown";
  }
  return String(error);
}
