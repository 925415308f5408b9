import type { Usage } from "@/lib/catalog/mod.ts";
import { parseSse } from "../../sse.ts";
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  type Provider,
  ProviderError,
  type StreamPart,
  type UpstreamRequest,
} from "../types.ts";
import { callUpstream, readAnswerJson, upstreamIdleGuard } from "../http.ts";

export interface OpenAiOptions {
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

/**
 * Any server that speaks OpenAI's chat-completions wire format: OpenAI itself, Groq, Together,
 * DeepSeek, Mistral, Gemini's compatible endpoint, vLLM, Ollama. Usage is always asked for.
 */
export function createOpenAiProvider(options: OpenAiOptions): Provider {
  const url = `${options.baseUrl}/chat/completions`;

  function send(request: UpstreamRequest, stream: boolean) {
    if (!options.apiKey) {
      throw new ProviderError("not_configured", `provider key ${options.apiKeyEnv} is not set`);
    }
    const body = {
      ...request.passthrough,
      model: request.model.upstreamModel,
      messages: request.messages,
      max_tokens: request.maxTokens,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    };
    return callUpstream({
      url,
      headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: request.signal,
      timeoutMs: options.timeoutMs,
      fetch: options.fetch,
    });
  }

  return {
    async complete(request) {
      const json = await readAnswerJson(await send(request, false));
      if (!isCompletion(json)) {
        throw new ProviderError(
          "malformed_response",
          "upstream answered 200 without a chat completion",
        );
      }
      return { completion: json, usage: usageOf(json.usage) };
    },

    async stream(request) {
      const { response, idle } = await send(request, true);
      return parts(response.body!, idle);
    },
  };
}

async function* parts(
  body: ReadableStream<Uint8Array>,
  idle: ReturnType<typeof upstreamIdleGuard>,
) {
  let usage: Usage | null = null;
  let finished = false;
  try {
    for await (const event of parseSse(body)) {
      idle.touch();
      if (event.data === "[DONE]") {
        finished = true;
        break;
      }
      let json: unknown;
      try {
        json = JSON.parse(event.data);
      } catch (cause) {
        throw new ProviderError("malformed_response", "upstream sent an event that is not JSON", {
          cause,
        });
      }
      if (!json || typeof json !== "object") continue;
      const obj = json as Record<string, unknown>;
      if (obj.error) {
        throw new ProviderError("stream_cut", `upstream error in stream: ${errorText(obj.error)}`);
      }
      // Some servers repeat cumulative usage on every chunk: the last one wins, never a sum.
      usage = usageOf(obj.usage) ?? usage;
      if (Array.isArray(obj.choices) && obj.choices.length > 0) {
        const { usage: _dropped, ...chunk } = obj;
        if (
          chunk.choices &&
          (chunk.choices as ChatCompletionChunk["choices"]).some((c) => c.finish_reason)
        ) {
          finished = true;
        }
        yield { type: "chunk", chunk: chunk as ChatCompletionChunk } satisfies StreamPart;
      }
    }
  } catch (error) {
    throw idle.translate(error);
  } finally {
    idle.stop();
  }
  if (!finished) throw new ProviderError("stream_cut", "upstream stream ended before it finished");
  if (usage) yield { type: "usage", usage } satisfies StreamPart;
}

export function usageOf(raw: unknown): Usage | null {
  if (!raw || typeof raw !== "object") return null;
  const u = raw as Record<string, unknown>;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens;
  if (!isCount(prompt) || !isCount(completion)) return null;
  return { promptTokens: prompt, completionTokens: completion };
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

function isCompletion(json: unknown): json is ChatCompletion {
  if (!json || typeof json !== "object") return false;
  const choices = (json as { choices?: unknown }).choices;
  return Array.isArray(choices) &&
    choices.every((c) => c && typeof c === "object" && "message" in c);
}

function errorText(error: unknown): string {
  if (error && typeof error === "object" && "message" in error) return String(error.message);
  return String(error);
}
