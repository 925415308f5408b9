import type { Model, Prices } from "./catalog.ts";
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
  /** Part of those writes kept for an hour (Anthropic; billed at the 1-hour write price). */
  cacheWrite1hTokens?: number;
  /** Part of the completion spent reasoning (billed at the output price, like the rest). */
  reasoningTokens?: number;
}

/**
 * The prices a request with this much input (cached and cache-written included) is billed at: the
 * long-context tier's once the input passes its size, as the providers with one bill the whole
 * request, output included.
 */
export function pricesFor(model: Model, promptTokens: number): Prices {
  const tier = model.longContext;
  return tier && promptTokens > tier.aboveInputTokens ? tier : model;
}

/**
 * The reservation taken before the model runs: the input bound plus the whole output cap, at the
 * prices of a request with that much input. A tier's prices are at least the model's (the catalog
 * holds them to it), so a bound above the size bounds the bill whichever side the real count
 * falls on, and one at or under it means the real count is too.
 */
export function reservationCost(
  model: Model,
  promptTokens: number,
  maxTokens: number,
  /** Whether the request asks for 1-hour cache writes (a breakpoint with `ttl: "1h"`). */
  hourWrites = false,
): Micros {
  const prices = pricesFor(model, promptTokens);
  // Any part of the prompt may be billed as a cache write (Anthropic: 1.25 times the input price,
  // twice it for an hour), so the input is reserved at the dearest of the prices it may be.
  let inputPrice = prices.inputPrice;
  if (prices.cacheWritePrice > inputPrice) inputPrice = prices.cacheWritePrice;
  if (hourWrites && prices.cacheWrite1hPrice > inputPrice) inputPrice = prices.cacheWrite1hPrice;
  return tokensCost(promptTokens, maxTokens, inputPrice, prices.outputPrice);
}

/**
 * The prompt's cache writes (the hour's among them) and reads as billed: none past the prompt, and
 * reads only where writes leave room.
 */
export function believedCacheCounts(usage: Usage) {
  const cacheWrite = Math.min(usage.cacheWriteTokens ?? 0, usage.promptTokens);
  const hourWrite = Math.min(usage.cacheWrite1hTokens ?? 0, cacheWrite);
  const cached = Math.min(usage.cachedTokens ?? 0, usage.promptTokens - cacheWrite);
  return { cached, cacheWrite, hourWrite };
}

/**
 * Every component at its own price, exact, rounded up once; all at the long-context tier's prices
 * when the prompt passed its size. A provider that reports more cached or cache-written tokens
 * than the prompt holds is not believed past the prompt: the input price is never traded for a
 * cheaper one beyond what was read.
 */
export function usageCost(model: Model, usage: Usage): Micros {
  const prices = pricesFor(model, usage.promptTokens);
  const { cached, cacheWrite, hourWrite } = believedCacheCounts(usage);
  const cost = componentsCost([
    [usage.promptTokens - cached - cacheWrite, prices.inputPrice],
    [cached, prices.cacheReadPrice],
    [cacheWrite - hourWrite, prices.cacheWritePrice],
    [hourWrite, prices.cacheWrite1hPrice],
    [usage.completionTokens, prices.outputPrice],
  ]);
  // A cost past 2^53 micro-USD (9 billion USD) comes only from counts no provider bills: held to
  // an amount the wallet can take, it is charged as far as the hold and balance go, the rest
  // recorded as uncharged, rather than failing the settle and charging nothing.
  return Math.min(cost, Number.MAX_SAFE_INTEGER);
}
