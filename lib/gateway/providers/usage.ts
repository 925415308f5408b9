/** Usage in the compatible wire shape: read tolerantly from upstreams, written for clients. */
import { z } from "zod";
import type { Usage } from "@/lib/catalog/mod.ts";
import type { UsageObject } from "./types.ts";

const Count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

/** What comes back is read tolerantly: unknown fields are kept, odd details are ignored. */
const UsageSchema = z.looseObject({
  prompt_tokens: Count,
  completion_tokens: Count,
  prompt_tokens_details: z.looseObject({ cached_tokens: Count.nullish().catch(null) }).nullish()
    .catch(null),
  completion_tokens_details: z.looseObject({ reasoning_tokens: Count.nullish().catch(null) })
    .nullish().catch(null),
});

/** The usage of an OpenAI-shaped answer and the object itself, or null when it has no usable counts. */
export function parseOpenAiUsage(raw: unknown): { usage: Usage; raw: UsageObject } | null {
  const parsed = UsageSchema.safeParse(raw);
  if (!parsed.success) return null;
  const u = parsed.data;
  const usage: Usage = { promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens };
  const cached = u.prompt_tokens_details?.cached_tokens;
  if (cached) usage.cachedTokens = cached;
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  if (reasoning) usage.reasoningTokens = reasoning;
  return { usage, raw: raw as UsageObject };
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
