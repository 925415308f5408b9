/**
 * A path segment longer than any id or token names nothing, and a segment of a few KB would not
 * even fit a storage key (Deno KV refuses keys over 2 KiB with an exception, a 500). Such paths
 * get the app's 404 here, before any route looks anything up.
 */
import type { MiddlewareHandler } from "hono";
import { ApiError } from "@/lib/core/mod.ts";
import { notFoundPage } from "@/routes/pages/not_found.tsx";

/**
 * Far above the longest id (about 30 characters), top-up token (64) or catalog model id, even
 * percent-encoded; far below KV's key limit. Counted on the encoded path, whose length bounds the
 * decoded bytes.
 */
export const MAX_PATH_SEGMENT_CHARS = 512;

/** The path parameter a segment fills in the management API, named by the segment before it. */
const PARAM_AFTER: Record<string, string> = { apps: "app_id", keys: "key_id" };

/**
 * `routesOwnTheirs`: path prefixes whose routes look nothing up in storage and answer any unknown
 * id themselves, with what only they can add (the caller's rate-limit headers on a model's 404).
 */
export function boundedPathSegments(routesOwnTheirs: string[] = []): MiddlewareHandler {
  return async function boundedPathSegments(c, next) {
    const url = c.req.url;
    // A URL no longer than the bound has no segment beyond it: the common case costs no parsing.
    if (url.length <= MAX_PATH_SEGMENT_CHARS) return await next();
    const segments = new URL(url).pathname.split("/");
    const at = segments.findIndex((s) => s.length > MAX_PATH_SEGMENT_CHARS);
    const path = c.req.path;
    if (at === -1 || routesOwnTheirs.some((prefix) => path.startsWith(prefix))) {
      return await next();
    }
    if (!path.startsWith("/v1/")) return c.html(notFoundPage(), 404);
    const message = `Nothing exists at this path: a segment of it is ${
      segments[at].length
    } characters long, and no id is longer than ${MAX_PATH_SEGMENT_CHARS}.`;
    // The management API answers an unknown app or key with resource_not_found; any other
    // unknown path is not_found.
    const param = path.startsWith("/v1/management/") ? PARAM_AFTER[segments[at - 1]] : undefined;
    if (param) throw new ApiError("resource_not_found", message, { param });
    throw new ApiError("not_found", message);
  };
}
