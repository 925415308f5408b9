import type { MiddlewareHandler } from "hono";
import { requestRateLimitHeaders } from "@/lib/billing/mod.ts";
import { ApiError } from "@/lib/core/mod.ts";
import { ManagementRequestLimit } from "@/lib/management/mod.ts";
import type { Env } from "./middleware.ts";

/**
 * Holds each owner's management keys, together, to `limit` requests a minute; runs after the key is
 * authenticated and before anything else, so a refused request reads and writes nothing more.
 * Every answer it counted or refused carries the owner's window in the paid API's request headers
 * (`x-ratelimit-*-requests`), errors included.
 */
export function managementRateLimit(
  kv: Deno.Kv,
  limit: number,
  now: () => number,
): MiddlewareHandler<Env> {
  const requests = new ManagementRequestLimit(kv, limit, now);
  return async (c, next) => {
    const admission = await requests.admit(c.get("manager").ownerId);
    const headers = requestRateLimitHeaders(admission.status);
    if (!admission.ok) {
      throw new ApiError(
        "rate_limit_exceeded",
        `Rate limit reached for this account's management keys: ${limit} requests per minute, shared by all of them. Retry after ${admission.retryAfter} s. Nothing was done.`,
        { headers: { ...headers, "retry-after": String(admission.retryAfter) } },
      );
    }
    await next();
    // Set on the response already made: Hono's c.header() would copy the whole response per header.
    for (const [name, value] of Object.entries(headers)) c.res.headers.set(name, value);
  };
}
