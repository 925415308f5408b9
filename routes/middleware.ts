import type { Context, MiddlewareHandler } from "hono";
import {
  ApiError,
  causedByBusyKv,
  errorBody,
  type Logger,
  logSoon,
  newRequestId,
  type RequestLogLine,
  requestLogLine,
} from "@/lib/core/mod.ts";
import type { RequestTrace } from "@/lib/gateway/mod.ts";
import type { KeyCache, KeyGuard } from "@/lib/tenants/mod.ts";

export const API_VERSION = "2026-07-29";

export type Env = {
  Variables: {
    requestId: string;
    trace: RequestTrace;
    caller: {
      appId: string;
      keyId: string;
      /** The first key of the rotations that led to this one (see ApiKeyRecord). */
      originalKeyId?: string;
      keyGuard?: KeyGuard;
      idempotent?: true;
    };
    /** Set when the log line is written later, by the end of a stream. */
    deferLog: boolean;
    /** The owner a management key acts for (management API routes). */
    manager: { ownerId: string; keyId: string };
    /** The JSON body, when a middleware (idempotency) has already read it. */
    jsonBody: unknown;
    /** Answered from an Idempotency-Key's record: nothing reserved, so no commit checked the key. */
    replayed: boolean;
    /** Writes the request's one log line (and feeds the metrics); later calls do nothing. */
    finishRequest: () => void;
  };
};

/** Request id and version on every response, one log line per request, errors in the spec's shape. */
export function requestContext(
  log: Logger,
  observe?: (line: RequestLogLine) => void,
): MiddlewareHandler<Env> {
  return async (c, next) => {
    const requestId = newRequestId();
    const started = performance.now();
    c.set("requestId", requestId);
    c.set("trace", {});
    let finished = false;
    c.set("finishRequest", () => {
      if (finished) return;
      finished = true;
      const line = requestLogLine({
        requestId,
        method: c.req.method,
        path: c.req.path,
        status: c.res.status,
        totalMs: performance.now() - started,
      }, c.get("trace"));
      // The metrics count the request at once (a scrape right after the answer sees it); the
      // line's redaction and serialisation wait until the answer is out.
      observe?.(line);
      logSoon(() => log(line));
    });
    c.header("Tollbooth-Request-Id", requestId);
    // The openai SDK reads a request's id from this header only (`_request_id`, an APIError's
    // requestID): the id support asks for is then at hand in the client.
    c.header("x-request-id", requestId);
    c.header("Tollbooth-Version", API_VERSION);
    await next();
    if (c.get("deferLog")) return;
    c.get("finishRequest")();
  };
}

/** Paths a program calls (the API, Stripe's webhook): their errors are JSON, never a page. */
const MACHINE_PATHS = /^\/(v1|webhooks)\//;

/**
 * Messages are sent as they are: an upstream's reason is rid of our keys where the gateway quotes
 * it, and the rest is ours or the client's own (searching it for our keys would answer guesses).
 */
function apiErrorResponse(c: Context<Env>, error: ApiError, docsBaseUrl: string): Response {
  for (const [name, value] of Object.entries(error.headers)) c.header(name, value);
  c.get("trace").errorCode = error.code;
  return c.json(error.body(docsBaseUrl), error.status as 400);
}

/** The KV file's lock held by other instances past every retry: a moment's wait, not a fault. */
const BUSY_ERROR = new ApiError(
  "service_unavailable",
  "The service is busy for a moment; nothing was charged. Retry after the seconds in Retry-After.",
  { headers: { "Retry-After": "1" } },
);

/**
 * Unexpected exceptions become a 500 in the same shape, logged with the request id. Pages outside
 * the API get `htmlPage` instead, when given.
 */
export function errorHandler(
  log: Logger,
  docsBaseUrl: string,
  htmlPage?: (requestId: string) => string,
) {
  return (err: Error, c: Context<Env>): Response => {
    if (err instanceof ApiError) return apiErrorResponse(c, err, docsBaseUrl);
    if (causedByBusyKv(err)) return apiErrorResponse(c, BUSY_ERROR, docsBaseUrl);
    log({
      level: "error",
      requestId: c.get("requestId"),
      event: "unhandled_error",
      error: err?.message,
      stack: err?.stack,
    });
    c.get("trace").errorCode = "internal_error";
    if (htmlPage && !MACHINE_PATHS.test(c.req.path)) {
      return c.html(htmlPage(c.get("requestId")), 500);
    }
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

/** What an error answer that replaces another keeps of its headers: the request's own. */
const KEPT_ON_ERROR = new Set(["tollbooth-request-id", "x-request-id", "tollbooth-version"]);

const INVALID_KEY_MESSAGE = "Invalid API key: it is malformed, unknown or revoked.";

/**
 * Keys come from the in-memory cache, so this is only for routes that reserve before they answer
 * 200: the reserve's commit checks that the key still exists. An error answer of a cached key, and
 * a replayed one, are checked here, so a revoked key gets its 401 before any other answer.
 */
export function requireApiKey(cache: KeyCache): MiddlewareHandler<Env> {
  return async (c, next) => {
    const key = await cache.authenticate(bearerKey(c));
    if (!key) throw new ApiError("invalid_api_key", INVALID_KEY_MESSAGE);
    c.set("caller", callerOf(key));
    Object.assign(c.get("trace"), { appId: key.appId, keyId: key.keyId });
    await next();
    const error = c.error;
    if (!error && !c.get("replayed")) return;
    if (error instanceof ApiError && error.code === "invalid_api_key") cache.forget(key.hash);
    else if (key.cached && !(await cache.stillValid(key))) {
      // The error answer is built on the answer it replaces, whose headers would carry over: a
      // revoked key's 401 said Idempotent-Replayed with the replay's cost and balance.
      for (const name of [...c.res.headers.keys()]) {
        if (!KEPT_ON_ERROR.has(name)) {
          c.res.headers.delete(name);
        }
      }
      throw new ApiError("invalid_api_key", INVALID_KEY_MESSAGE);
    }
  };
}

/**
 * For routes that answer without reserving (GET /v1/models): no commit will check the key there,
 * so a key found in the cache is read once more, and a revoked key is refused on its next request.
 */
export function requireLiveApiKey(cache: KeyCache): MiddlewareHandler<Env> {
  return async (c, next) => {
    const key = await cache.authenticate(bearerKey(c));
    if (!key || (key.cached && !(await cache.stillValid(key)))) {
      throw new ApiError("invalid_api_key", INVALID_KEY_MESSAGE);
    }
    c.set("caller", callerOf(key));
    Object.assign(c.get("trace"), { appId: key.appId, keyId: key.keyId });
    await next();
  };
}

/** The token of an `Authorization: Bearer <token>` header, or null when there is none. */
export function bearerToken(c: Context): string | null {
  return /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "")?.[1] ?? null;
}

/** The caller an authenticated key stands for. */
function callerOf(
  key: { appId: string; keyId: string; originalKeyId?: string; keyGuard?: KeyGuard },
): Env["Variables"]["caller"] {
  return {
    appId: key.appId,
    keyId: key.keyId,
    originalKeyId: key.originalKeyId,
    keyGuard: key.keyGuard,
  };
}

function bearerKey(c: Context<Env>): string {
  const token = bearerToken(c);
  if (token === null) {
    // A header that is there but not one bearer token (another scheme, or two headers, which
    // arrive joined by a comma) is no missing key: the client is to look at what it sends.
    throw new ApiError(
      "invalid_api_key",
      c.req.header("authorization")?.trim()
        ? "Malformed Authorization header. Send it once, as 'Authorization: Bearer <API_KEY>'."
        : "Missing API key. Send 'Authorization: Bearer <API_KEY>'.",
    );
  }
  return token;
}

export const requireSupportedVersion: MiddlewareHandler<Env> = async (c, next) => {
  const header = c.req.header("tollbooth-version");
  if (header === undefined || header.trim() === API_VERSION) return await next();
  // A header sent twice (a proxy adding what the client sent) arrives joined by commas; an empty
  // one pins nothing.
  const versions = new Set(header.split(",").map((v) => v.trim()).filter(Boolean));
  if (versions.size > 1 || (versions.size === 1 && !versions.has(API_VERSION))) {
    const asked = [...versions].join(", ");
    // Echo only what looks like a version: a secret pasted into the wrong header is not repeated.
    const shown = /^\d{4}-\d{2}-\d{2}$/.test(asked) ? `'${asked}'` : "(not a date)";
    throw new ApiError(
      "unsupported_version",
      `Unsupported Tollbooth-Version ${shown}. The only version served is ${API_VERSION}.`,
    );
  }
  await next();
};
