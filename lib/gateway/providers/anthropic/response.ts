/**
 * What the Anthropic kind's answers share, streamed or assembled: the counts as usage (prompt =
 * input + cache writes + cache reads, the reads shown as `cached_tokens`) and the finish reason.
 */
import { z } from "zod";
import type { Usage } from "@/lib/catalog/mod.ts";
import { TokenCount } from "../usage.ts";

/** Tolerant: counts that are missing or odd are absent, never an error. */
const UsageSchema = z.looseObject({
  input_tokens: TokenCount.nullish().catch(null),
  cache_creation_input_tokens: TokenCount.nullish().catch(null),
  cache_read_input_tokens: TokenCount.nullish().catch(null),
  output_tokens: TokenCount.nullish().catch(null),
  // The writes by how long they are kept: the 1-hour ones bill dearer.
  cache_creation: z.looseObject({ ephemeral_1h_input_tokens: TokenCount.nullish().catch(null) })
    .nullish().catch(null),
});

/** Token counts as reported so far; each report is cumulative, so the latest value of a field wins. */
export interface Counts {
  input: number | null;
  cacheWrite: number | null;
  /** Part of the writes kept for an hour. */
  cacheWrite1h: number | null;
  cacheRead: number | null;
  output: number | null;
}

export const NO_COUNTS: Counts = {
  input: null,
  cacheWrite: null,
  cacheWrite1h: null,
  cacheRead: null,
  output: null,
};

/**
 * The counts after a report. Reports are cumulative, so one that counts less than an earlier one
 * is not the bill: a server that repeats the input's counts as zeros in its `message_delta` would
 * otherwise wipe the prompt's charge. The input's counts are taken or kept together (their sum
 * decides), the output's by itself.
 */
export function mergeCounts(previous: Counts, raw: unknown): Counts {
  const parsed = UsageSchema.safeParse(raw);
  if (!parsed.success) return previous;
  const u = parsed.data;
  const reported: Counts = {
    input: u.input_tokens ?? previous.input,
    cacheWrite: u.cache_creation_input_tokens ?? previous.cacheWrite,
    cacheWrite1h: u.cache_creation?.ephemeral_1h_input_tokens ?? previous.cacheWrite1h,
    cacheRead: u.cache_read_input_tokens ?? previous.cacheRead,
    output: u.output_tokens ?? previous.output,
  };
  const input = (promptTokensOf(reported) ?? 0) < (promptTokensOf(previous) ?? 0)
    ? previous
    : reported;
  return {
    input: input.input,
    cacheWrite: input.cacheWrite,
    cacheWrite1h: input.cacheWrite1h,
    cacheRead: input.cacheRead,
    output: (reported.output ?? 0) < (previous.output ?? 0) ? previous.output : reported.output,
  };
}

/** Cache writes and cache reads are input the model read: they count as prompt tokens. */
export function promptTokensOf(c: Counts): number | null {
  if (c.input === null) return null;
  return c.input + (c.cacheWrite ?? 0) + (c.cacheRead ?? 0);
}

/**
 * The input's counts by price. A request that asked for 1-hour writes and got no breakdown of them
 * has every write priced as an hour's, the dearer: never below what Anthropic bills.
 */
export function cacheCountsOf(
  c: Counts,
  hourWrites: boolean,
): Pick<Usage, "cachedTokens" | "cacheWriteTokens" | "cacheWrite1hTokens"> {
  const cacheWriteTokens = c.cacheWrite ?? 0;
  return {
    cachedTokens: c.cacheRead ?? 0,
    cacheWriteTokens,
    cacheWrite1hTokens: c.cacheWrite1h ?? (hourWrites ? cacheWriteTokens : 0),
  };
}

export function usageOfCounts(c: Counts, hourWrites: boolean): Usage | null {
  const prompt = promptTokensOf(c);
  if (prompt === null || c.output === null) return null;
  return { promptTokens: prompt, completionTokens: c.output, ...cacheCountsOf(c, hourWrites) };
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
