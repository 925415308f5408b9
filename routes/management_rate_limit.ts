import type { MiddlewareHandler } from "hono";
import { ApiError } from "@/lib/core/mod.ts";
import { ManagementRequestLimit } from "@/lib/management/mod.ts";
import type { Env } from "./middleware.ts";

/**
 * Holds each management key to `limit` requests a minute; runs after the key is authenticated and
 * before anything else, so a refused request reads and writes nothing more.
 */
export function managementRateLimit(
  kv: Deno.Kv,
  limit: number,
  now: () => number,
): MiddlewareHandler<Env> {
  const requests = new ManagementRequestLimit(kv, limit, now);
  return async (c, next) => {
    const admission = await requests.admit(c.get("manager").keyId);
    if (!admission.ok) {
      throw new ApiError(
        "rate_limit_exceeded",
        `Rate limit reached for this management key: ${limit} requests per minute. Retry after ${admission.retryAfter} s. Nothing was done.`,
        { headers: { "retry-after": String(admission.retryAfter) } },
      );
    }
    await next();
  };
}
