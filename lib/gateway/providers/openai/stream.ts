/**
 * The stream converter of the OpenAI kind: chunks pass whole (tool-call fragments, reasoning,
 * refusal, logprobs); the usage, cumulative where a server repeats it, is taken from the last
 * chunk that carries it and kept with its details for the client's own usage chunk. It is handed
 * on as soon as it comes, whichever chunk carries it (OpenAI's own chunk without choices; the
 * last content chunk of Gemini, Mistral or Together, and every one of Gemini's; xAI's one before
 * last), so that a stream cut or left before its end is charged by the provider's count, hidden
 * reasoning included, rather than by ours of what it showed.
 */
import { isRecord } from "@/lib/core/mod.ts";
import { parseSse } from "../../sse.ts";
import type { BodyReader } from "../http1.ts";
import { isTokenCount, parseOpenAiUsage, promptCacheCounts } from "../usage.ts";
import { eventJson } from "../http.ts";
import { convertBatches, oneBatch } from "../part_batches.ts";
import {
  type ChatCompletionChunk,
  ProviderError,
  type StreamPart,
  upstreamErrorFields,
  upstreamErrorMessage,
} from "../types.ts";

export function openAiStreamParts(
  batches: AsyncIterable<{ data: string }[]>,
): AsyncGenerator<StreamPart[]> {
  let usage: ParsedUsage = null;
  let finished = false;
  return convertBatches(batches, {
    take(event, parts) {
      if (event.data === "[DONE]") return true;
      const obj = eventJson(event.data);
      if (!obj) return false;
      // OpenAI's shape, and older vLLM's (the error object itself, object: "error").
      if (obj.error || obj.object === "error") {
        throw new ProviderError(
          "stream_cut",
          `upstream error in stream: ${
            upstreamErrorMessage(obj) ?? JSON.stringify(obj).slice(0, 200)
          }`,
          { upstreamError: upstreamErrorFields(obj) },
        );
      }
      // Some servers repeat cumulative usage on every chunk: never a sum, and a cumulative count
      // never shrinks, so a later usage smaller than one before (a trailing zero) is not the bill.
      // A usage goes out after its chunk's content, which it counts.
      let reported: StreamPart | null = null;
      if (obj.usage != null) {
        const parsed = parseOpenAiUsage(obj.usage);
        const later = laterUsage(usage, parsed);
        if (later !== usage) {
          usage = later!;
          reported = { type: "usage", usage: usage.usage, raw: usage.raw };
        } else if (!parsed) {
          // Counts without a usable completion count (null): the prompt's is still the upstream's,
          // its cache reads and writes priced as the final usage's would be.
          reported = promptCounts(obj.usage);
        }
      }
      if (Array.isArray(obj.choices) && obj.choices.length > 0) {
        dropMalformedEntries(obj);
        // The client gets the usage in a chunk of its own, at the end. OpenAI sends `usage: null`
        // on every other chunk: it is unset in place (JSON leaves it out) rather than copied away,
        // which cost a tenth of relaying a chunk.
        if (obj.usage !== undefined) obj.usage = undefined;
        if ((obj.choices as ChatCompletionChunk["choices"]).some((c) => c?.finish_reason)) {
          finished = true;
        }
        parts.push({ type: "chunk", chunk: obj as ChatCompletionChunk });
      }
      if (reported) parts.push(reported);
      return false;
    },
    // Nothing is held back: every usage was handed on with the batch that brought it.
    finished: () => finished,
  }, "upstream stream ended before it finished");
}

/**
 * A whole (non-streamed) completion as the one chunk its stream would add up to: each choice's
 * message as its delta, tool calls numbered as a stream numbers them, the usage kept.
 */
export function completionAsChunk(json: unknown): Record<string, unknown> {
  // An error a server answers with 200 (as it would in a stream): its reason, not "not a completion".
  if (isObject(json) && !Array.isArray(json.choices) && (json.error || json.object === "error")) {
    throw new ProviderError(
      "upstream_error",
      `upstream failed: ${upstreamErrorMessage(json) ?? JSON.stringify(json).slice(0, 200)}`,
      { upstreamError: upstreamErrorFields(json) },
    );
  }
  if (!isObject(json) || !Array.isArray(json.choices)) {
    throw new ProviderError("malformed_response", "the upstream's answer is not a chat completion");
  }
  const choices = json.choices.map((choice) => {
    if (!isObject(choice)) return choice;
    const { message, ...rest } = choice;
    const delta: Record<string, unknown> = isObject(message) ? { ...message } : {};
    if (Array.isArray(delta.tool_calls)) {
      delta.tool_calls = delta.tool_calls.map((call, index) =>
        isObject(call) ? { index, ...call } : call
      );
    }
    return { ...rest, delta };
  });
  return { ...json, object: "chat.completion.chunk", choices };
}

/** A whole completion's parts: those of the one chunk it would have streamed, then its end. */
export function openAiAnswerParts(json: unknown): AsyncGenerator<StreamPart[]> {
  const chunk = JSON.stringify(completionAsChunk(json));
  return openAiStreamParts(oneBatch([{ data: chunk }, { data: "[DONE]" }]));
}

/** `onRead` hears of every read that brought bytes: the idle guard's sign of life. */
export function openAiSseParts(
  body: ReadableStream<Uint8Array> | BodyReader,
  onRead: () => void,
) {
  return openAiStreamParts(parseSse(body, (event) => event.data === "[DONE]", onRead));
}

type ParsedUsage = ReturnType<typeof parseOpenAiUsage>;

function laterUsage(before: ParsedUsage, next: ParsedUsage): ParsedUsage {
  if (!next) return before;
  if (!before) return next;
  const total = (u: NonNullable<ParsedUsage>) => u.usage.promptTokens + u.usage.completionTokens;
  return total(next) >= total(before) ? next : before;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object";

/**
 * A `null` (or other non-object) choice or tool call an upstream slips into a chunk is dropped
 * here, and so is a `tool_calls` that is not a list, so that nothing past this converter
 * (counting, assembly, the Responses events, a client's SDK) trips on it after the answer has
 * been charged.
 */
function dropMalformedEntries(obj: Record<string, unknown>) {
  let choices = obj.choices as unknown[];
  if (!choices.every(isObject)) obj.choices = choices = choices.filter(isObject);
  for (const choice of choices as { delta?: unknown }[]) {
    const delta = choice.delta;
    if (!isRecord(delta)) {
      // A string or a list where the delta belongs says nothing the answer can carry.
      if (delta != null) choice.delta = {};
      continue;
    }
    if (Array.isArray(delta.content)) splitContentParts(delta);
    // Text in any other type (a number) is no text a client's SDK takes as OpenAI streams it.
    else if (delta.content != null && typeof delta.content !== "string") delete delta.content;
    if (delta.tool_calls == null) continue;
    if (!Array.isArray(delta.tool_calls)) {
      delete delta.tool_calls;
      continue;
    }
    const calls: unknown[] = delta.tool_calls;
    if (!calls.every(isObject)) delta.tool_calls = calls.filter(isObject);
    for (const call of delta.tool_calls as Record<string, unknown>[]) fixCallFields(call);
  }
}

/**
 * A call's fields in the types OpenAI streams them: an id or name that is not a string is left
 * out, and arguments sent as an object (as some servers do) become its JSON, not "[object Object]"
 * in the arguments a client parses.
 */
function fixCallFields(call: Record<string, unknown>) {
  if (call.id != null && typeof call.id !== "string") delete call.id;
  if (call.type != null && typeof call.type !== "string") delete call.type;
  const fn = call.function;
  if (fn == null) return;
  if (!isRecord(fn)) {
    delete call.function;
    return;
  }
  if (fn.name != null && typeof fn.name !== "string") delete fn.name;
  if (fn.arguments != null && typeof fn.arguments !== "string") {
    fn.arguments = JSON.stringify(fn.arguments);
  }
}

/**
 * A delta whose `content` is a list of parts, as Mistral's reasoning models (Magistral, and Mistral
 * Small or Medium with `reasoning_effort`) stream it: `thinking` parts (their text parts) become
 * `reasoning_content` and `text` parts the `content` string, as every other compatible server
 * sends them; any other part (a citation's `reference`) is dropped. Passed on as a list, the
 * openai SDK wrote "[object Object]" into the answer, the AI SDK refused the chunk, and the
 * assembled answer of a non-streamed request lost its text.
 */
function splitContentParts(delta: Record<string, unknown>) {
  let text = "";
  let thinking = "";
  for (const part of delta.content as unknown[]) {
    if (!isObject(part)) continue;
    if (part.type === "text" && typeof part.text === "string") text += part.text;
    else if (part.type === "thinking" && Array.isArray(part.thinking)) {
      for (const inner of part.thinking) {
        if (isObject(inner) && typeof inner.text === "string") thinking += inner.text;
      }
    }
  }
  delta.content = text;
  if (thinking) {
    delta.reasoning_content = typeof delta.reasoning_content === "string"
      ? delta.reasoning_content + thinking
      : thinking;
  }
}

/** The prompt counts of a usage without a usable completion count, or null. */
function promptCounts(raw: unknown): StreamPart | null {
  const prompt = (raw as { prompt_tokens?: unknown }).prompt_tokens;
  if (!isTokenCount(prompt)) return null;
  return { type: "prompt_tokens", promptTokens: prompt, ...promptCacheCounts(raw) };
}
