/**
 * The response converter of the Anthropic kind: a Messages message as a chat.completion. Text
 * becomes `content`, `tool_use` blocks `tool_calls` (the answer tool standing in for
 * `response_format` becomes the content), thinking `reasoning_content`, and the counts the usage:
 * prompt = input + cache writes + cache reads, the reads shown as `cached_tokens`.
 */
import { z } from "zod";
import type { Usage } from "@/lib/catalog/mod.ts";
import { usageObject } from "../usage.ts";
import { type ChatCompletion, type CompletionResult, ProviderError } from "../types.ts";

const Count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

/** Tolerant: counts that are missing or odd are absent, never an error. */
const UsageSchema = z.looseObject({
  input_tokens: Count.nullish().catch(null),
  cache_creation_input_tokens: Count.nullish().catch(null),
  cache_read_input_tokens: Count.nullish().catch(null),
  output_tokens: Count.nullish().catch(null),
});

const BlockSchema = z.looseObject({
  type: z.string(),
  text: z.string().optional().catch(undefined),
  thinking: z.string().optional().catch(undefined),
  id: z.string().optional().catch(undefined),
  name: z.string().optional().catch(undefined),
  input: z.unknown().optional(),
});

const MessageSchema = z.looseObject({
  id: z.string().optional().catch(undefined),
  content: z.array(BlockSchema),
  stop_reason: z.string().nullish().catch(null),
  usage: z.unknown().optional(),
});

/** Token counts as reported so far; each report is cumulative, so the latest value of a field wins. */
export interface Counts {
  input: number | null;
  cacheWrite: number | null;
  cacheRead: number | null;
  output: number | null;
}

export const NO_COUNTS: Counts = { input: null, cacheWrite: null, cacheRead: null, output: null };

export function mergeCounts(previous: Counts, raw: unknown): Counts {
  const parsed = UsageSchema.safeParse(raw);
  if (!parsed.success) return previous;
  const u = parsed.data;
  return {
    input: u.input_tokens ?? previous.input,
    cacheWrite: u.cache_creation_input_tokens ?? previous.cacheWrite,
    cacheRead: u.cache_read_input_tokens ?? previous.cacheRead,
    output: u.output_tokens ?? previous.output,
  };
}

/** Cache writes and cache reads are input the model read: they count as prompt tokens. */
export function promptTokensOf(c: Counts): number | null {
  return c.input === null ? null : c.input + (c.cacheWrite ?? 0) + (c.cacheRead ?? 0);
}

export function usageOfCounts(c: Counts): Usage | null {
  const prompt = promptTokensOf(c);
  if (prompt === null || c.output === null) return null;
  const usage: Usage = { promptTokens: prompt, completionTokens: c.output };
  usage.cachedTokens = c.cacheRead ?? 0;
  usage.cacheWriteTokens = c.cacheWrite ?? 0;
  return usage;
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

/** The finish reason once the answer tool is known: its call is the answer, not a tool call. */
export function finishReasonWithTools(stopReason: unknown, otherToolCalls: number): string | null {
  const reason = finishReason(stopReason);
  return reason === "tool_calls" && otherToolCalls === 0 ? "stop" : reason;
}

export function anthropicCompletionResult(
  json: unknown,
  meta: { requestId: string; upstreamModel: string; answerTool: string | null },
): CompletionResult {
  const parsed = MessageSchema.safeParse(json);
  if (!parsed.success) {
    throw new ProviderError("malformed_response", "upstream answered 200 without a message");
  }
  const message = parsed.data;
  let text = "";
  let reasoning = "";
  const toolCalls: {
    id: string;
    type: "function";
    function: { name: string; arguments: string };
  }[] = [];
  for (const block of message.content) {
    if (block.type === "text" && block.text) text += block.text;
    else if (block.type === "thinking" && block.thinking) reasoning += block.thinking;
    else if (block.type === "tool_use" && block.name) {
      const args = JSON.stringify(block.input ?? {});
      if (block.name === meta.answerTool) text += args;
      else {
        toolCalls.push({
          id: block.id ?? `toolu_${toolCalls.length}`,
          type: "function",
          function: { name: block.name, arguments: args },
        });
      }
    }
  }
  const usage = usageOfCounts(mergeCounts(NO_COUNTS, message.usage));
  const completion: ChatCompletion = {
    id: message.id ?? `msg-${meta.requestId}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: meta.upstreamModel,
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: text === "" && toolCalls.length ? null : text,
        ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        ...(reasoning ? { reasoning_content: reasoning } : {}),
      },
      finish_reason: finishReasonWithTools(message.stop_reason, toolCalls.length),
    }],
  };
  if (usage) completion.usage = usageObject(usage);
  return { completion, usage };
}
