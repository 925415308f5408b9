/** Usage in the compatible wire shape: read tolerantly from upstreams, written for clients. */
import { z } from "zod";
import { believedCacheCounts, type Usage } from "@/lib/catalog/mod.ts";
import { formatUsd, isRecord, type Micros } from "@/lib/core/mod.ts";
import type { UsageObject } from "./types.ts";

/**
 * The most tokens a provider's count is believed at: ten times the largest context window (10M)
 * any model has. A count past it is no bill but a fault, read as a missing count; below it, at the
 * catalog's dearest price, a request's cost stays a safe integer of micro-USD.
 */
export const MAX_REPORTED_TOKENS = 100_000_000;

/** A token count as a provider reports it: a whole number within MAX_REPORTED_TOKENS. */
export const TokenCount = z.number().int().nonnegative().max(MAX_REPORTED_TOKENS);

export function isTokenCount(value: unknown): value is number {
  return TokenCount.safeParse(value).success;
}

/** What comes back is read tolerantly: unknown fields are kept, odd details are ignored. */
const UsageSchema = z.looseObject({
  prompt_tokens: TokenCount,
  completion_tokens: TokenCount,
  total_tokens: TokenCount.nullish().catch(null),
  prompt_tokens_details: z.looseObject({
    cached_tokens: TokenCount.nullish().catch(null),
    /** GPT-5.6 on: input written to the prompt cache, billed above the input price. */
    cache_write_tokens: TokenCount.nullish().catch(null),
  }).nullish().catch(null),
  completion_tokens_details: z.looseObject({ reasoning_tokens: TokenCount.nullish().catch(null) })
    .nullish().catch(null),
  /** DeepSeek's names for cache hits, without prompt_tokens_details. */
  prompt_cache_hit_tokens: TokenCount.nullish().catch(null),
});

/**
 * The usage of an OpenAI-shaped answer and the object itself, or null when it has no usable counts.
 * OpenAI counts reasoning within completion_tokens; a server that counts it apart still bills it
 * as output: reasoning above completion_tokens is added to them, and a total above prompt plus
 * completion (Gemini's thinking, absent from its completion_tokens) is output too. The object a
 * client sees then says the completion tokens it was billed for.
 */
export function parseOpenAiUsage(raw: unknown): { usage: Usage; raw: UsageObject } | null {
  const parsed = UsageSchema.safeParse(raw);
  if (!parsed.success) return null;
  const u = parsed.data;
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  let completion = u.completion_tokens;
  if (reasoning && reasoning > completion) completion += reasoning;
  if (u.total_tokens && u.total_tokens > u.prompt_tokens + completion) {
    completion = u.total_tokens - u.prompt_tokens;
  }
  const usage: Usage = { promptTokens: u.prompt_tokens, completionTokens: completion };
  Object.assign(usage, promptCacheCounts(raw));
  if (reasoning) usage.reasoningTokens = reasoning;
  const shown = completion === u.completion_tokens ? raw as UsageObject : {
    ...raw as UsageObject,
    completion_tokens: completion,
    total_tokens: u.prompt_tokens + completion,
  };
  return { usage, raw: shown };
}

const PromptCacheSchema = UsageSchema.pick({
  prompt_tokens_details: true,
  prompt_cache_hit_tokens: true,
});

/**
 * The prompt's cache reads and writes a usage reports (OpenAI's details, DeepSeek's hit count),
 * read alone so that a usage without a usable completion count still prices its prompt as the
 * final one would.
 */
export function promptCacheCounts(
  raw: unknown,
): Pick<Usage, "cachedTokens" | "cacheWriteTokens"> {
  const parsed = PromptCacheSchema.safeParse(raw);
  if (!parsed.success) return {};
  const u = parsed.data;
  const counts: Pick<Usage, "cachedTokens" | "cacheWriteTokens"> = {};
  const cached = u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens;
  if (cached) counts.cachedTokens = cached;
  const written = u.prompt_tokens_details?.cache_write_tokens;
  if (written) counts.cacheWriteTokens = written;
  return counts;
}

/**
 * The usage a client is shown: the provider's object (details kept) or ours, with `cost`, what
 * left the wallet. What an upstream says it cost us (OpenRouter's `cost`, `cost_details`,
 * `is_byok`) is the operator's business, not the client's.
 */
export function clientUsage(raw: UsageObject | null, usage: Usage, charged: Micros): UsageObject {
  const { cost: _cost, cost_details: _details, is_byok: _byok, ...shown } = raw ??
    usageObject(usage);
  // The counts as billed, over whatever the provider wrote: a total it left out or got wrong, or
  // cached tokens past the prompt, would tell the client another bill than the one it paid.
  shown.prompt_tokens = usage.promptTokens;
  shown.completion_tokens = usage.completionTokens;
  shown.total_tokens = usage.promptTokens + usage.completionTokens;
  if (raw && (shown.prompt_tokens_details || usage.cachedTokens || usage.cacheWriteTokens)) {
    const { cached, cacheWrite } = believedCacheCounts(usage);
    const details = isRecord(shown.prompt_tokens_details) ? shown.prompt_tokens_details : {};
    shown.prompt_tokens_details = {
      ...details,
      cached_tokens: cached,
      ...(cacheWrite || "cache_write_tokens" in details ? { cache_write_tokens: cacheWrite } : {}),
    };
  }
  return { ...shown, cost: formatUsd(charged) } as UsageObject;
}

/** A usage object for a client, details included, from counts we hold. */
export function usageObject(usage: Usage): UsageObject {
  const out: UsageObject = {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
  if (usage.cachedTokens !== undefined || usage.cacheWriteTokens !== undefined) {
    out.prompt_tokens_details = { cached_tokens: usage.cachedTokens ?? 0 };
    if (usage.cacheWriteTokens !== undefined) {
      out.prompt_tokens_details.cache_write_tokens = usage.cacheWriteTokens;
    }
  }
  if (usage.reasoningTokens !== undefined) {
    out.completion_tokens_details = { reasoning_tokens: usage.reasoningTokens };
  }
  return out;
}
