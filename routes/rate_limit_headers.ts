import type { MiddlewareHandler } from "hono";
import {
  rateLimitHeaders as headersOf,
  type RateLimitStatus,
  readRateLimitStatus,
} from "@/lib/billing/mod.ts";
import type { RateLimits } from "@/lib/db.ts";
import type { Env } from "./middleware.ts";

/**
 * The `x-ratelimit-*` headers on every authenticated response, errors included. A request that
 * reached the wallet carries the status its reserve (or settle) computed; one refused before that
 * (a 400 for its body or version) is not counted, and gets the current status from one read.
 */
export function rateLimitHeaders(
  kv: Deno.Kv,
  defaults: RateLimits,
  now: () => number,
): MiddlewareHandler<Env> {
  return async (c, next) => {
    await next();
    let status: RateLimitStatus | undefined = c.get("trace").rateLimit;
    if (!status) {
      try {
        status = await readRateLimitStatus(kv, defaults, c.get("caller"), now());
      } catch {
        // Headers are advisory: a KV hiccup must not turn a 400 into a 500.
        return;
      }
    }
    // Set on the response already made: Hono's c.header() would copy the whole response per header.
    const headers = c.res.headers;
    for (const [name, value] of Object.entries(headersOf(status))) headers.set(name, value);
  };
}
