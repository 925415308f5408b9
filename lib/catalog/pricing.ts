import type { Model } from "./catalog.ts";
import { componentsCost, type Micros, tokensCost } from "@/lib/core/mod.ts";

/**
 * What a provider billed, in the compatible shape: `promptTokens` is all the input the model read
 * (cached and cache-written included), `completionTokens` all the output (reasoning included). The
 * other counts say which part of those was billed at another price, or was reasoning.
 */
export interface Usage {
  promptTokens: number;
  completionTokens: number;
  /** Part of the prompt read from the provider's cache (billed at the cache-read price). */
  cachedTokens?: number;
  /** Part of the prompt written to the provider's cache (billed at the cache-write price). */
  cacheWriteTokens?: number;
  /** Part of the completion spent reasoning (billed at the output price, like the rest). */
  reasoningTokens?: number;
}

/** The reservation taken before the model runs: the input bound plus the whole output cap. */
export function reservationCost(model: Model, promptTokens: number, maxTokens: number): Micros {
  // Any part of the prompt may be billed as a cache write (Anthropic: 1.25 times the input price),
  // so the input is reserved at the dearer of the two prices.
  const inputPrice = model.cacheWritePrice > model.inputPrice
    ? model.cacheWritePrice
    : model.inputPrice;
  return tokensCost(promptTokens, maxTokens, inputPrice, model.outputPrice);
}

/**
 * Every component at its own price, exact, rounded up once. A provider that reports more cached
 * or cache-written tokens than the prompt holds is not believed past the prompt: the input price
 * is never traded for a cheaper one beyond what was read.
 */
export function usageCost(model: Model, usage: Usage): Micros {
  const cacheWrite = Math.min(usage.cacheWriteTokens ?? 0, usage.promptTokens);
  const cached = Math.min(usage.cachedTokens ?? 0, usage.promptTokens - cacheWrite);
  return componentsCost([
    [usage.promptTokens - cached - cacheWrite, model.inputPrice],
    [cached, model.cacheReadPrice],
    [cacheWrite, model.cacheWritePrice],
    [usage.completionTokens, model.outputPrice],
  ]);
}
