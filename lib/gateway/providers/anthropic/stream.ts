/**
 * The stream converter of the Anthropic kind: Messages events as chat.completion.chunks, streamed
 * the way OpenAI streams them. A `tool_use` block opens a tool call (`index`, `id`, `type`,
 * `function.name`, empty arguments) and its `input_json_delta`s follow as `function.arguments`
 * pieces; thinking arrives as `reasoning_content`, and the thinking blocks once more, whole and
 * signed, as `reasoning_details` entries (for the client to send back), in one delta when the
 * thinking is over; the answer tool's input streams as content.
 */
import { isRecord } from "@/lib/core/mod.ts";
import { claudeReasoningDetail, type ClaudeThinkingBlock } from "../../reasoning_details.ts";
import { usageObject } from "../usage.ts";
import { eventJson } from "../http.ts";
import { convertBatches } from "../part_batches.ts";
import {
  type ChatCompletionChunk,
  ProviderError,
  type StreamPart,
  upstreamErrorFields,
} from "../types.ts";
import {
  cacheCountsOf,
  type Counts,
  finishReasonWithTools,
  mergeCounts,
  NO_COUNTS,
  promptTokensOf,
  usageOfCounts,
} from "./response.ts";

export interface AnthropicStreamMeta {
  requestId: string;
  upstreamModel: string;
  /** Whether the request asked for 1-hour cache writes (priced dearer). */
  hourWrites: boolean;
  answerTool: string | null;
  /**
   * The route's model thinks by budget: an answer that ends calling tools hands on its signed
   * thinking as a `signed_thinking` part, to be kept for a client that drops it.
   */
  keepsThinking?: boolean;
}

type Delta = ChatCompletionChunk["choices"][number]["delta"];

export function anthropicStreamParts(
  batches: AsyncIterable<{ event: string | null; data: string }[]>,
  meta: AnthropicStreamMeta,
): AsyncGenerator<StreamPart[]> {
  // OpenAI's shape of id, the message's own inside it so that it can be traced at Anthropic.
  let id = `chatcmpl-${meta.requestId}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta: Delta, finish: string | null = null): StreamPart => ({
    type: "chunk",
    chunk: {
      id,
      object: "chat.completion.chunk",
      created,
      model: meta.upstreamModel,
      // Claude has no logprobs; OpenAI's chunks say so with null.
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    },
  });
  let counts: Counts = NO_COUNTS;
  let stopped = false;
  /**
   * Content block index -> what it streams: a tool call's index, or the answer; `input` is whether
   * any of its input has streamed yet.
   */
  const blocks = new Map<
    number,
    { kind: "tool"; index: number; input: boolean } | { kind: "answer"; input: boolean }
  >();
  let toolCalls = 0;
  /** Content block index -> the thinking block it is, filled as it streams. */
  const thinking = new Map<number, ClaudeThinkingBlock>();
  let details = 0;
  /**
   * The details of thinking blocks that ended, sent in one delta when the next other block
   * starts (or the message ends): a client library that keeps only the last value of a delta
   * field it does not know (the openai SDK's stream helpers) still gets them all.
   */
  let ended: ReturnType<typeof claudeReasoningDetail>[] = [];
  /** Every detail sent, for a `signed_thinking` part. */
  const sentDetails: ReturnType<typeof claudeReasoningDetail>[] = [];
  /** The first tool call's id as Claude gave it (the client echoes it), if it gave one. */
  let firstToolCallId: string | null = null;
  const flushDetails = (parts: StreamPart[]) => {
    if (ended.length === 0) return;
    parts.push(chunk({ reasoning_details: ended }));
    sentDetails.push(...ended);
    ended = [];
  };
  /**
   * With a response_format served by the answer tool the content is that tool's input, JSON only:
   * text the model writes beside it (thinking leaves the tool unforced, so Claude may say "Here is
   * the person." first) is held back, dropped once the answer tool is called and released as the
   * content at the end if it never is. The provider bills it either way (`unshown_output`).
   */
  const holdsText = meta.answerTool !== null;
  let held = "";
  /** A stop reason was seen: the answer's finish chunk is out. */
  let finished = false;
  let dropped = "";
  let answered = false;
  const unshown = (parts: StreamPart[]) =>
    parts.push({ type: "unshown_output", text: dropped + held });
  /**
   * A tool called without arguments streams no input at all (input {} at its start, then at most
   * one empty partial_json), while OpenAI's clients parse the arguments as JSON: such a block ends
   * with "{}", as OpenAI would have sent. Only once the message says why it stopped: a call the
   * output cap cut before its input began is not a call without arguments.
   */
  const endInput = (index: number, parts: StreamPart[]) => {
    const block = blocks.get(index);
    if (!block || block.input) return;
    block.input = true;
    if (block.kind === "answer") parts.push(chunk({ content: "{}" }));
    else {
      parts.push(chunk({ tool_calls: [{ index: block.index, function: { arguments: "{}" } }] }));
    }
  };
  /** Converts one event into `parts`. */
  const take = (event: { event: string | null; data: string }, parts: StreamPart[]) => {
    const json = eventJson(event.data);
    if (!json) return;
    switch (json.type ?? event.event) {
      case "message_start": {
        const message = (json.message ?? {}) as Record<string, unknown>;
        if (typeof message.id === "string") id = `chatcmpl-${message.id}`;
        counts = mergeCounts(counts, message.usage);
        const prompt = promptTokensOf(counts);
        if (prompt !== null) {
          // A stream cut before message_delta is billed by these: cache writes cost more than
          // input, and cache reads far less.
          parts.push({
            type: "prompt_tokens",
            promptTokens: prompt,
            ...cacheCountsOf(counts, meta.hourWrites),
          });
        }
        // As OpenAI's first chunk, whose refusal: null the assembled message keeps.
        parts.push(chunk({ role: "assistant", content: "", refusal: null }));
        break;
      }
      case "content_block_start": {
        const block = json.content_block as Record<string, unknown> | undefined;
        const index = Number(json.index);
        // Thinking, asked for or not (newer models think unasked and may not show it), is billed
        // as output: a client leaving from here on saves nothing.
        if (block?.type === "thinking" || block?.type === "redacted_thinking") {
          parts.push({ type: "hidden_work" });
          thinking.set(
            index,
            block.type === "thinking"
              ? {
                type: "thinking",
                thinking: typeof block.thinking === "string" ? block.thinking : "",
                signature: typeof block.signature === "string" ? block.signature : "",
              }
              : {
                type: "redacted_thinking",
                data: typeof block.data === "string" ? block.data : "",
              },
          );
          break;
        }
        flushDetails(parts);
        // A block started again at an index whose call had no input yet: that call ends as `{}`.
        endInput(index, parts);
        if (block?.type !== "tool_use" || typeof block.name !== "string") break;
        if (block.name === meta.answerTool) {
          blocks.set(index, { kind: "answer", input: false });
          answered = true;
          dropped += held;
          held = "";
          break;
        }
        const call = toolCalls++;
        if (call === 0 && typeof block.id === "string") firstToolCallId = block.id;
        blocks.set(index, { kind: "tool", index: call, input: false });
        parts.push(chunk({
          tool_calls: [{
            index: call,
            id: typeof block.id === "string" ? block.id : `toolu_${call}`,
            type: "function",
            function: { name: block.name, arguments: "" },
          }],
        }));
        break;
      }
      case "content_block_delta": {
        const delta = json.delta as Record<string, unknown> | undefined;
        if (delta?.type === "text_delta" && typeof delta.text === "string" && delta.text) {
          if (!holdsText) parts.push(chunk({ content: delta.text }));
          else {
            if (answered) dropped += delta.text;
            else held += delta.text;
            unshown(parts);
          }
        } else if (delta?.type === "thinking_delta" && typeof delta.thinking === "string") {
          if (delta.thinking) parts.push(chunk({ reasoning_content: delta.thinking }));
          const block = thinking.get(Number(json.index));
          if (block?.type === "thinking") block.thinking += delta.thinking;
        } else if (delta?.type === "signature_delta" && typeof delta.signature === "string") {
          const block = thinking.get(Number(json.index));
          if (block?.type === "thinking") block.signature += delta.signature;
        } else if (
          delta?.type === "input_json_delta" && typeof delta.partial_json === "string" &&
          delta.partial_json
        ) {
          const target = blocks.get(Number(json.index));
          if (target) target.input = true;
          if (target?.kind === "answer") parts.push(chunk({ content: delta.partial_json }));
          else if (target?.kind === "tool") {
            parts.push(chunk({
              tool_calls: [{
                index: target.index,
                function: { arguments: delta.partial_json },
              }],
            }));
          }
        }
        break;
      }
      case "message_delta": {
        counts = mergeCounts(counts, json.usage);
        const stopReason = (json.delta as { stop_reason?: unknown } | undefined)?.stop_reason;
        if (stopReason) {
          flushDetails(parts);
          if (stopReason !== "max_tokens") {
            for (const index of blocks.keys()) endInput(index, parts);
          }
          if (held) {
            // The answer tool was never called: the text is the answer.
            parts.push(chunk({ content: held }));
            held = "";
            unshown(parts);
          }
          const finish = finishReasonWithTools(stopReason, toolCalls);
          if (
            !finished && meta.keepsThinking && finish === "tool_calls" && firstToolCallId &&
            sentDetails.length > 0
          ) {
            parts.push({
              type: "signed_thinking",
              toolCallId: firstToolCallId,
              details: sentDetails.slice(),
            });
          }
          // One finish per answer: a second message_delta with a stop reason brings counts only.
          if (!finished) parts.push(chunk({}, finish));
          finished = true;
          // The final counts are known now: a stream cut before message_stop still bills them.
          const usage = usageOfCounts(counts, meta.hourWrites);
          if (usage) parts.push({ type: "usage", usage, raw: usageObject(usage) });
        }
        break;
      }
      case "content_block_stop": {
        const block = thinking.get(Number(json.index));
        if (!block) break;
        thinking.delete(Number(json.index));
        // Unsigned thinking cannot go back to Claude: it is not offered as a detail to send back.
        if (block.type === "thinking" && !block.signature) break;
        ended.push(claudeReasoningDetail(block, details++, meta.upstreamModel));
        break;
      }
      case "message_stop":
        stopped = true;
        break;
      case "error":
        throw new ProviderError(
          "stream_cut",
          `upstream error in stream: ${errorText(json.error)}`,
          { upstreamError: upstreamErrorFields(json) },
        );
      // ping, and event types added later
      default:
        break;
    }
  };
  return convertBatches(batches, {
    take(event, parts) {
      take(event, parts);
      return stopped;
    },
    // Only message_stop ends a message whole.
    finished: () => false,
    close(parts, cut) {
      // A cut's final counts were handed on with their message_delta.
      if (cut) return;
      const usage = usageOfCounts(counts, meta.hourWrites);
      if (usage) parts.push({ type: "usage", usage, raw: usageObject(usage) });
    },
  }, "upstream stream ended before message_stop");
}

/**
 * A whole (non-streamed) Message as the events its stream would have sent, for the converter
 * above: the message started without content, each block started empty, its text, thinking and
 * signature, or input as one delta, the block stopped; then its stop reason and usage.
 */
export function messageAsEvents(message: unknown): { event: string; data: string }[] {
  if (!isRecord(message) || !Array.isArray(message.content)) {
    throw new ProviderError("malformed_response", "the upstream's answer is not a message");
  }
  const events: { event: string; data: string }[] = [];
  const push = (event: Record<string, unknown>) =>
    events.push({ event: event.type as string, data: JSON.stringify(event) });
  push({
    type: "message_start",
    message: { ...message, content: [], stop_reason: null, stop_sequence: null },
  });
  message.content.forEach((block, index) => {
    if (!isRecord(block)) return;
    const delta = (delta: Record<string, unknown>) =>
      push({ type: "content_block_delta", index, delta });
    if (block.type === "text") {
      push({ type: "content_block_start", index, content_block: { ...block, text: "" } });
      if (typeof block.text === "string") delta({ type: "text_delta", text: block.text });
    } else if (block.type === "thinking") {
      push({
        type: "content_block_start",
        index,
        content_block: { ...block, thinking: "", signature: "" },
      });
      if (typeof block.thinking === "string") {
        delta({ type: "thinking_delta", thinking: block.thinking });
      }
      if (typeof block.signature === "string") {
        delta({ type: "signature_delta", signature: block.signature });
      }
    } else if (block.type === "tool_use" || block.type === "server_tool_use") {
      push({ type: "content_block_start", index, content_block: { ...block, input: {} } });
      if (block.input !== undefined) {
        delta({ type: "input_json_delta", partial_json: JSON.stringify(block.input) });
      }
    } else {
      push({ type: "content_block_start", index, content_block: block });
    }
    push({ type: "content_block_stop", index });
  });
  push({
    type: "message_delta",
    delta: {
      stop_reason: message.stop_reason ?? null,
      stop_sequence: message.stop_sequence ?? null,
    },
    usage: message.usage,
  });
  push({ type: "message_stop" });
  return events;
}

function errorText(error: unknown): string {
  if (error && typeof error === "object") {
    const e = error as { type?: unknown; message?: unknown };
    return [e.type, e.message].filter((x) => typeof x === "string").join(": ") || "unknown";
  }
  return String(error);
}
