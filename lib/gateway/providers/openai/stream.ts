/**
 * The stream converter of the OpenAI kind: chunks pass whole (tool-call fragments, reasoning,
 * refusal, logprobs); the usage, cumulative where a server repeats it, is taken from the last
 * chunk that carries it and kept with its details for the client's own usage chunk.
 */
import { parseSse } from "../../sse.ts";
import { parseOpenAiUsage } from "../usage.ts";
import { eventJson } from "../http.ts";
import { type ChatCompletionChunk, ProviderError, type StreamPart } from "../types.ts";

export async function* openAiStreamParts(
  events: AsyncIterable<{ data: string }>,
  onEvent: () => void = () => {},
): AsyncGenerator<StreamPart> {
  let usage: ReturnType<typeof parseOpenAiUsage> = null;
  let finished = false;
  for await (const event of events) {
    onEvent();
    if (event.data === "[DONE]") {
      finished = true;
      break;
    }
    const obj = eventJson(event.data);
    if (!obj) continue;
    if (obj.error) {
      throw new ProviderError("stream_cut", `upstream error in stream: ${errorText(obj.error)}`);
    }
    // Some servers repeat cumulative usage on every chunk: the last one wins, never a sum.
    if (obj.usage != null) usage = parseOpenAiUsage(obj.usage) ?? usage;
    if (Array.isArray(obj.choices) && obj.choices.length > 0) {
      // Usage is handed on once, at the end; a chunk without it is passed as parsed, uncopied.
      let chunk = obj;
      if ("usage" in obj) {
        const { usage: _dropped, ...rest } = obj;
        chunk = rest;
      }
      if ((chunk.choices as ChatCompletionChunk["choices"]).some((c) => c?.finish_reason)) {
        finished = true;
      }
      yield { type: "chunk", chunk: chunk as ChatCompletionChunk };
    }
  }
  if (!finished) throw new ProviderError("stream_cut", "upstream stream ended before it finished");
  if (usage) yield { type: "usage", usage: usage.usage, raw: usage.raw };
}

export function openAiSseParts(body: ReadableStream<Uint8Array>, onEvent: () => void) {
  return openAiStreamParts(parseSse(body, (event) => event.data === "[DONE]"), onEvent);
}

function errorText(error: unknown): string {
  if (error && typeof error === "object" && "message" in error) return String(error.message);
  return String(error);
}
