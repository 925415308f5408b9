import type { Context, MiddlewareHandler } from "hono";
import { ApiError, errorBody } from "../lib/errors.ts";
import type { RequestTrace } from "../lib/gateway.ts";
import { newRequestId } from "../lib/ids.ts";
import { authenticateKey } from "../lib/keys.ts";
import type { Logger } from "../lib/log.ts";

export const API_VERSION = "2026-07-29";

export type Env = {
  Variables: {
    requestId: string;
    trace: RequestTrace;
    caller: { appId: string; keyId: string };
    /** Set when the log line is written later, by the end of a stream. */
    deferLog: boolean;
  };
};

/** Request id and version on every response, one log line per request, errors in the spec's shape. */
export function requestContext(log: Logger): MiddlewareHandler<Env> {
  return async (c, next) => {
    const requestId = newRequestId();
    const started = performance.now();
    c.set("requestId", requestId);
    c.set("trace", {});
    c.header("Tollbooth-Request-Id", requestId);
    c.header("Tollbooth-Version", API_VERSION);
    await next();
    if (c.get("deferLog")) return;
    const trace = c.get("trace");
    log({
      requestId,
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      ms: Math.round((performance.now() - started) * 10) / 10,
      ...trace,
    });
  };
}

export function apiErrorResponse(c: Context<Env>, error: ApiError, docsBaseUrl: string): Response {
  for (const [name, value] of Object.entries(error.headers)) c.header(name, value);
  c.get("trace").errorCode = error.code;
  return c.json(error.body(docsBaseUrl), error.status as 400);
}

/** Unexpected exceptions become a 500 in the same shape, logged with the request id. */
export function errorHandler(log: Logger, docsBaseUrl: string) {
  return (err: Error, c: Context<Env>): Response => {
    if (err instanceof ApiError) return apiErrorResponse(c, err, docsBaseUrl);
    log({
      level: "error",
      requestId: c.get("requestId"),
      event: "unhandled_error",
      error: err?.message,
      stack: err?.stack,
    });
    c.get("trace").errorCode = "internal_error";
    return c.json(
      errorBody(
        "internal_error",
        `Internal error. Quote request id ${c.get("requestId")} to support.`,
        docsBaseUrl,
      ),
      500,
    );
  };
}

export function requireApiKey(kv: Deno.Kv): MiddlewareHandler<Env> {
  return async (c, next) => {
    const header = c.req.header("authorization") ?? "";
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) {
      throw new ApiError(
        "invalid_api_key",
        "Missing API key. Send 'Authorization: Bearer <API_KEY>'.",
      );
    }
    const entry = await authenticateKey(kv, match[1]);
    if (!entry) {
      throw new ApiError(
        "invalid_api_key",
        "Invalid API key: it is malformed, unknown or revoked.",
      );
    }
    c.set("caller", entry);
    Object.assign(c.get("trace"), { appId: entry.appId, keyId: entry.keyId });
    await next();
  };
}

export const requireSupportedVersion: MiddlewareHandler<Env> = async (c, next) => {
  const asked = c.req.header("tollbooth-version");
  if (asked !== undefined && asked.trim() !== API_VERSION) {
    // Echo only what looks like a version: a secret pasted into the wrong header is not repeated.
    const shown = /^\d{4}-\d{2}-\d{2}$/.test(asked.trim()) ? `'${asked.trim()}'` : "(not a date)";
    throw new ApiError(
      "unsupported_version",
      `Unsupported Tollbooth-Version ${shown}. The only version served is ${API_VERSION}.`,
    );
  }
  await next();
};
