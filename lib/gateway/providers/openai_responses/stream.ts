/**
 * The stream converter of the OpenAI Responses kind: the Responses API's semantic events as
 * chat.completion.chunks. A `function_call` item opens a tool call (`index`, `id` from its
 * `call_id`, `type`, `function.name`) and its argument deltas follow as `function.arguments`
 * pieces; text and refusal deltas are `content` and `refusal`; reasoning summaries (and the
 * reasoning text of models that show it) are `reasoning_content`; a reasoning item's encrypted
 * content is one `reasoning_details` entry, sent with the others in one delta once the reasoning
 * is over (the openai SDK's stream helpers keep only the last value of a delta field they do not
 * know). Each message item is a paragraph of chat's one content; one with a `phase` (commentary
 * or final answer) opens with a delta of its `phase` alone, or with the blank line before it as
 * its `content`, so that /v1/responses can give each message as an item of its own (chat's one
 * message keeps the last phase). The usage comes with the last event, `response.completed` or
 * `response.incomplete`.
 */
import { isRecord } from "@/lib/core/mod.ts";
import { isMessagePhase, type MessagePhase } from "../../chat_request.ts";
import { openAiReasoningDetail, type ReasoningDetail } from "../../reasoning_details.ts";
import { eventJson } from "../http.ts";
import { convertBatches } from "../part_batches.ts";
import {
  type ChatCompletionChunk,
  ProviderError,
  type StreamPart,
  upstreamErrorFields,
  upstreamErrorMessage,
} from "../types.ts";
import { parseOpenAiUsage } from "../usage.ts";

export interface ResponsesStreamMeta {
  requestId: string;
  upstreamModel: string;
}

type Delta = ChatCompletionChunk["choices"][number]["delta"];
type Json = Record<string, unknown>;

/**
 * A Responses usage in the chat shape the rest of the gateway reads (parseOpenAiUsage): input
 * tokens are the prompt's, cached ones among them, and output tokens count the reasoning.
 */
export function chatUsageOf(usage: unknown): unknown {
  if (!isRecord(usage)) return null;
  const input = isRecord(usage.input_tokens_details) ? usage.input_tokens_details : {};
  const output = isRecord(usage.output_tokens_details) ? usage.output_tokens_details : {};
  const prompt: Json = {};
  if (input.cached_tokens !== undefined) prompt.cached_tokens = input.cached_tokens;
  if (input.cache_write_tokens !== undefined) prompt.cache_write_tokens = input.cache_write_tokens;
  const completion: Json = {};
  if (output.reasoning_tokens !== undefined) completion.reasoning_tokens = output.reasoning_tokens;
  return {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.total_tokens,
    ...(Object.keys(prompt).length > 0 ? { prompt_tokens_details: prompt } : {}),
    ...(Object.keys(completion).length > 0 ? { completion_tokens_details: completion } : {}),
  };
}

/** A choice's `logprobs` as chat completions give them. */
interface ChatLogprobs {
  content: TokenLogprob[];
  refusal: null;
}

interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs?: TokenLogprob[];
}

const encoder = new TextEncoder();

/** One token's logprob, read tolerantly; chat gives each token's UTF-8 bytes beside it. */
function tokenLogprob(raw: unknown, top: boolean): TokenLogprob | null {
  if (!isRecord(raw) || typeof raw.token !== "string" || typeof raw.logprob !== "number") {
    return null;
  }
  const bytes = Array.isArray(raw.bytes) && raw.bytes.length > 0
    ? raw.bytes as number[]
    : [...encoder.encode(raw.token)];
  const out: TokenLogprob = { token: raw.token, logprob: raw.logprob, bytes };
  if (top) {
    const alternatives = Array.isArray(raw.top_logprobs) ? raw.top_logprobs : [];
    out.top_logprobs = alternatives.flatMap((t) => tokenLogprob(t, false) ?? []);
  }
  return out;
}

/** A text delta's logprobs (asked for with `include`) as a chat chunk's, or null. */
function chatLogprobs(raw: unknown): ChatLogprobs | null {
  if (!Array.isArray(raw) || raw.length === 0) return null;
  return { content: raw.flatMap((t) => tokenLogprob(t, true) ?? []), refusal: null };
}

/**
 * The codes of a failed response that refuse the request as sent (a prompt or an image OpenAI
 * will not take: the SDK's `ResponseError.code`), which no retry or fallback changes.
 */
const REFUSING_CODE = /^(?:invalid_|image_|empty_image|failed_to_download_image|unsupported_image)/;

/**
 * The failure of a `response.failed` or `error` event: a refusal of the request is a bad request
 * (the client's 400, with OpenAI's words), a rate limit the provider's 429, anything else a cut.
 * Before the first output the call fails whole: nothing is charged.
 */
function failure(event: unknown, fallback: string): ProviderError {
  const fields = upstreamErrorFields(event);
  const said = upstreamErrorMessage(event) ?? fallback;
  if (fields.code && REFUSING_CODE.test(fields.code)) {
    return new ProviderError("bad_request", said, { upstreamError: fields });
  }
  if (fields.code === "rate_limit_exceeded") {
    return new ProviderError("rate_limited", said, { upstreamError: fields });
  }
  return new ProviderError("stream_cut", `upstream error in stream: ${said}`, {
    upstreamError: fields,
  });
}

/** Why an incomplete response stopped, in chat's words. */
function incompleteFinish(response: Json): string {
  const details = isRecord(response.incomplete_details) ? response.incomplete_details : {};
  return details.reason === "content_filter" ? "content_filter" : "length";
}

/**
 * A whole (non-streamed) Response as the events its stream would have sent, for the converter
 * below: each output item added, its text, refusal, summary, reasoning text or arguments as one
 * delta, the item done; then the response's end by its status.
 */
export function responseAsEvents(response: unknown): { event: string; data: string }[] {
  if (!isRecord(response) || !Array.isArray(response.output)) {
    throw new ProviderError("malformed_response", "the upstream's answer is not a response");
  }
  const events: { event: string; data: string }[] = [];
  const push = (event: Json) =>
    events.push({ event: event.type as string, data: JSON.stringify(event) });
  push({ type: "response.created", response: { ...response, output: [], usage: null } });
  response.output.forEach((item, at) => {
    if (!isRecord(item)) return;
    const parts = (field: string) => Array.isArray(item[field]) ? item[field].filter(isRecord) : [];
    if (item.type === "reasoning") {
      push({
        type: "response.output_item.added",
        output_index: at,
        item: { ...item, summary: [] },
      });
      parts("summary").forEach((part, index) => {
        push({
          type: "response.reasoning_summary_text.delta",
          output_index: at,
          summary_index: index,
          delta: part.text,
        });
      });
      for (const part of parts("content")) {
        push({ type: "response.reasoning_text.delta", output_index: at, delta: part.text });
      }
    } else if (item.type === "message") {
      push({
        type: "response.output_item.added",
        output_index: at,
        item: { ...item, content: [] },
      });
      for (const part of parts("content")) {
        if (part.type === "output_text") {
          push({
            type: "response.output_text.delta",
            output_index: at,
            delta: part.text,
            logprobs: part.logprobs,
          });
        } else if (part.type === "refusal") {
          push({ type: "response.refusal.delta", output_index: at, delta: part.refusal });
        }
      }
    } else if (item.type === "function_call") {
      push({
        type: "response.output_item.added",
        output_index: at,
        item: { ...item, arguments: "" },
      });
      push({
        type: "response.function_call_arguments.delta",
        output_index: at,
        delta: item.arguments,
      });
    }
    push({ type: "response.output_item.done", output_index: at, item });
  });
  const end = response.status === "incomplete"
    ? "response.incomplete"
    : response.status === "failed"
    ? "response.failed"
    : "response.completed";
  push({ type: end, response });
  return events;
}

export function responsesStreamParts(
  batches: AsyncIterable<{ event: string | null; data: string }[]>,
  meta: ResponsesStreamMeta,
): AsyncGenerator<StreamPart[]> {
  let id = `chatcmpl-${meta.requestId}`;
  let model = meta.upstreamModel;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (
    delta: Delta,
    finish: string | null = null,
    logprobs: ChatLogprobs | null = null,
  ): StreamPart => ({
    type: "chunk",
    chunk: {
      id,
      object: "chat.completion.chunk",
      created,
      model,
      choices: [{ index: 0, delta, logprobs, finish_reason: finish }],
    },
  });
  let started = false;
  let ended = false;
  /** Output index -> the tool call it is, and whether any of its arguments have streamed. */
  const calls = new Map<number, { index: number; streamed: boolean }>();
  /** Output index of a reasoning item -> the summary part it last showed text of. */
  const summaries = new Map<number, number>();
  let shownReasoning = false;
  let shownText = false;
  /** Whether the next text starts a message item after one that showed text. */
  let separate = false;
  /** The phase of the message item added, handed on with its first text or refusal. */
  let opening: MessagePhase | null = null;
  const openMessage = (parts: StreamPart[], text: boolean) => {
    if (!opening) return;
    // The blank line between two messages goes with the phase, not with the text: the
    // Responses API's converter drops it there, and chat's one content keeps it.
    parts.push(chunk({ phase: opening, ...(text && separate ? { content: "\n\n" } : {}) }));
    if (text) separate = false;
    opening = null;
  };
  let details = 0;
  let pending: ReasoningDetail[] = [];
  const flushDetails = (parts: StreamPart[]) => {
    if (pending.length === 0) return;
    parts.push(chunk({ reasoning_details: pending }));
    pending = [];
  };
  /** Whether a reasoning item has begun: work billed as output whether or not it shows. */
  let reasoned = false;
  const start = (parts: StreamPart[]) => {
    if (started) return;
    started = true;
    // As OpenAI's first chunk, whose refusal: null the assembled message keeps.
    parts.push(chunk({ role: "assistant", content: "", refusal: null }));
    // A client leaving from here on saves nothing.
    if (reasoned) parts.push({ type: "hidden_work" });
  };
  const reasoningText = (text: string, parts: StreamPart[], gap: boolean) => {
    if (!text) return;
    // Summary parts are paragraphs of their own, as OpenAI's own clients show them.
    parts.push(chunk({ reasoning_content: gap && shownReasoning ? `\n\n${text}` : text }));
    shownReasoning = true;
  };
  const finish = (response: Json, reason: string, parts: StreamPart[]) => {
    flushDetails(parts);
    for (const call of calls.values()) {
      // A call whose arguments never streamed is a call without arguments: as OpenAI would send.
      if (!call.streamed && reason !== "length") {
        parts.push(chunk({ tool_calls: [{ index: call.index, function: { arguments: "{}" } }] }));
      }
    }
    parts.push(chunk({}, reason));
    const usage = parseOpenAiUsage(chatUsageOf(response.usage));
    if (usage) parts.push({ type: "usage", usage: usage.usage, raw: usage.raw });
    ended = true;
  };

  const take = (event: { event: string | null; data: string }, parts: StreamPart[]) => {
    const json = eventJson(event.data);
    if (!json) return;
    switch (json.type ?? event.event) {
      case "response.created":
      case "response.in_progress": {
        const response = isRecord(json.response) ? json.response : {};
        if (typeof response.id === "string") id = `chatcmpl-${response.id}`;
        if (typeof response.model === "string") model = response.model;
        // No chunk yet: a response that fails before its first output (and reports no usage)
        // fails the call itself, so that the reservation is released whole, a fallback may serve
        // it, and the client gets the real status rather than a stream that breaks off.
        break;
      }
      case "response.output_item.added": {
        const item = isRecord(json.item) ? json.item : {};
        const at = Number(json.output_index);
        if (item.type === "reasoning") {
          // Nothing to show yet: a response that fails while it reasons (minutes, for the pro
          // models) fails the call, so that nothing is charged and a fallback may serve it.
          reasoned = true;
          if (started) parts.push({ type: "hidden_work" });
          break;
        }
        start(parts);
        flushDetails(parts);
        // A later message of the same answer (a model that comments before it answers) is a
        // paragraph of its own in chat's one content.
        if (item.type === "message") {
          separate = shownText;
          opening = isMessagePhase(item.phase) ? item.phase : null;
        }
        if (item.type !== "function_call" || typeof item.name !== "string") break;
        const call = { index: calls.size, streamed: false };
        calls.set(at, call);
        const args = typeof item.arguments === "string" ? item.arguments : "";
        if (args) call.streamed = true;
        parts.push(chunk({
          tool_calls: [{
            index: call.index,
            id: typeof item.call_id === "string" ? item.call_id : `call_${call.index}`,
            type: "function",
            function: { name: item.name, arguments: args },
          }],
        }));
        break;
      }
      case "response.output_text.delta":
        if (typeof json.delta === "string" && json.delta) {
          start(parts);
          flushDetails(parts);
          openMessage(parts, true);
          const text = separate ? `\n\n${json.delta}` : json.delta;
          separate = false;
          shownText = true;
          parts.push(chunk({ content: text }, null, chatLogprobs(json.logprobs)));
        }
        break;
      case "response.refusal.delta":
        if (typeof json.delta === "string" && json.delta) {
          start(parts);
          flushDetails(parts);
          openMessage(parts, false);
          parts.push(chunk({ refusal: json.delta }));
        }
        break;
      case "response.function_call_arguments.delta": {
        const call = calls.get(Number(json.output_index));
        if (!call || typeof json.delta !== "string" || !json.delta) break;
        call.streamed = true;
        parts.push(
          chunk({ tool_calls: [{ index: call.index, function: { arguments: json.delta } }] }),
        );
        break;
      }
      case "response.reasoning_summary_text.delta": {
        if (typeof json.delta !== "string") break;
        start(parts);
        const at = Number(json.output_index);
        const part = Number(json.summary_index);
        const gap = summaries.get(at) !== part;
        summaries.set(at, part);
        reasoningText(json.delta, parts, gap);
        break;
      }
      case "response.reasoning_text.delta":
        if (typeof json.delta === "string") {
          start(parts);
          reasoningText(json.delta, parts, false);
        }
        break;
      case "response.output_item.done": {
        const item = isRecord(json.item) ? json.item : {};
        const call = calls.get(Number(json.output_index));
        if (
          item.type === "function_call" && call && !call.streamed &&
          typeof item.arguments === "string" && item.arguments
        ) {
          // Arguments that came whole, with no delta before them.
          call.streamed = true;
          parts.push(
            chunk({ tool_calls: [{ index: call.index, function: { arguments: item.arguments } }] }),
          );
        }
        if (
          item.type === "reasoning" && typeof item.id === "string" &&
          typeof item.encrypted_content === "string" && item.encrypted_content
        ) {
          pending.push(openAiReasoningDetail(
            { id: item.id, encrypted_content: item.encrypted_content },
            details++,
            meta.upstreamModel,
          ));
        }
        break;
      }
      case "response.completed": {
        start(parts);
        const response = isRecord(json.response) ? json.response : {};
        finish(response, calls.size > 0 ? "tool_calls" : "stop", parts);
        break;
      }
      case "response.incomplete": {
        start(parts);
        const response = isRecord(json.response) ? json.response : {};
        finish(response, incompleteFinish(response), parts);
        break;
      }
      case "response.failed": {
        const response = isRecord(json.response) ? json.response : {};
        // What a failed response used is still billed: handed on before the failure.
        const usage = parseOpenAiUsage(chatUsageOf(response.usage));
        if (usage) parts.push({ type: "usage", usage: usage.usage, raw: usage.raw });
        throw failure({ error: response.error ?? {} }, "the response failed");
      }
      case "error":
        throw failure(json, JSON.stringify(json).slice(0, 200));
      // Part and item boundaries, annotations, and event types added later.
      default:
        break;
    }
  };
  return convertBatches(batches, {
    take(event, parts) {
      take(event, parts);
      return ended;
    },
    // Only response.completed or response.incomplete ends a response whole.
    finished: () => false,
  }, "upstream stream ended before response.completed");
}
