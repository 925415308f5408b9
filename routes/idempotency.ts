import type { Context, MiddlewareHandler } from "hono";
import { ApiError, formatUsd, type Logger } from "@/lib/core/mod.ts";
import {
  canonicalBodyHash,
  type IdempotencyStore,
  validIdempotencyKey,
} from "@/lib/idempotency/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { readJsonBody } from "@/routes/json_body.ts";

/**
 * The scope of a paid API request's keys: the calling API key, so that the customers a reseller
 * gives a key each neither replay nor block each other's requests. A key that replaced a rotated
 * one has the scope of the chain's first key: a client retrying with the new secret is the same
 * customer, and ran again its request would be charged twice.
 */
export function apiKeyScope(
  caller: { appId: string; keyId: string; originalKeyId?: string },
): string {
  return `app:${caller.appId}:key:${caller.originalKeyId ?? caller.keyId}`;
}

/** The response headers a replay repeats; the others describe the replay itself. */
const REPLAYED_HEADERS = [
  "content-type",
  "tollbooth-request-cost",
  "tollbooth-balance",
  "tollbooth-provider",
  "x-should-retry",
];

/**
 * `Idempotency-Key` on a POST with a JSON body (or none, on a `bodyless` route). Without the
 * header the request passes untouched. With it: the first request runs; a repeat to the same
 * endpoint with the same body gets the first one's status, headers and body again
 * (`Idempotent-Replayed: true`), without running; another endpoint or body is 422
 * `idempotency_key_reused`; a repeat while the first runs is 409 `idempotency_key_in_use`; a
 * repeat of an answer too large to have been recorded is 422 `idempotency_replay_too_large`.
 *
 * Answers that were charged are recorded: every success, and a 502 `upstream_interrupted` that
 * charged what the provider produced (it carries `Tollbooth-Request-Cost`). Any other failure
 * (400, 402, 429, 502, 500…) charged nothing, so its key is given back and a retry with the same
 * key runs afresh, which is what a client retrying a 502 or a 429 wants.
 *
 * The body is read here (within the limit) and handed on as `jsonBody`, so the handler does not
 * read it twice.
 */
export function idempotency<E extends Env>(
  store: IdempotencyStore,
  options: {
    /** Keys are private to this scope (an API key, an owner). */
    scope: (c: Context<E>) => string;
    log: Logger;
    /**
     * What of a body is kept for replays. A secret minted by the request (a new API key) must not
     * be stored in the clear, so such routes blank it here and a replay shows it as null.
     */
    recordedBody?: (body: Uint8Array) => Uint8Array;
    /** The route takes no request body: none is read, so an empty one is fine. */
    bodyless?: boolean;
    /**
     * The route streams when the body says `stream: true`: a stream is not replayed, so such a
     * body is refused here. A route that cannot stream refuses the field as its own handler does.
     */
    streams?: boolean;
  },
): MiddlewareHandler<E> {
  return async (c, next) => {
    const key = c.req.header("idempotency-key");
    if (key === undefined) return await next();
    if (!validIdempotencyKey(key)) {
      throw new ApiError(
        "invalid_parameter",
        "Idempotency-Key must be 1 to 255 visible ASCII characters, such as a UUID.",
        { param: "Idempotency-Key" },
      );
    }
    // A route without a request body (a revoke) is the same request whatever was sent, or nothing:
    // its identity is that of `{}`, what clients sent it before empty bodies were accepted.
    const body = options.bodyless ? {} : await readJsonBody(c.req.raw);
    if (options.streams && (body as { stream?: unknown } | null)?.stream === true) {
      throw new ApiError(
        "idempotency_key_with_stream",
        "Idempotency-Key is not supported on streamed requests: send the stream without it, or the request without stream: true.",
        { param: "stream" },
      );
    }
    if (!options.bodyless) c.set("jsonBody", body);
    const scope = options.scope(c);
    const bodyHash = canonicalBodyHash(body);
    const requestId = c.get("requestId");
    const endpoint = `${c.req.method} ${c.req.path}`;
    const claim = await store.claim(scope, key, bodyHash, requestId, endpoint);

    if (claim.kind === "reused") {
      throw new ApiError(
        "idempotency_key_reused",
        claim.differs === "endpoint"
          ? `This Idempotency-Key was already used for another endpoint (${claim.endpoint}). Use a new key for a new request.`
          : "This Idempotency-Key was already used with a different request body. Use a new key for a new request.",
      );
    }
    if (claim.kind === "in_use") {
      throw new ApiError(
        "idempotency_key_in_use",
        "A request with this Idempotency-Key is still running. Retry shortly to get its answer.",
      );
    }
    if (claim.kind === "too_large") {
      throw new ApiError(
        "idempotency_replay_too_large",
        `The first request with this Idempotency-Key (${claim.requestId}) succeeded and was charged, but its answer (${claim.bytes} bytes) is over the ${claim.limit} bytes kept for replays, so it cannot be given again. This request was not run; send a new key to run it again.`,
      );
    }
    if (claim.kind === "answer_lost") {
      throw new ApiError(
        "idempotency_answer_lost",
        `The first request with this Idempotency-Key (${claim.requestId}) was charged ${
          formatUsd(claim.cost)
        } USD, but the server stopped before recording its answer, so it cannot be given again. This request was not run and not charged; send a new key to run it again.`,
      );
    }
    if (claim.kind === "replay") {
      const trace = c.get("trace");
      trace.outcome = "idempotent_replay";
      c.set("replayed", true);
      trace.cost = 0;
      const { response } = claim;
      for (const [name, value] of Object.entries(response.headers)) c.header(name, value);
      c.header("Idempotent-Replayed", "true");
      c.header("Tollbooth-Original-Request-Id", claim.requestId);
      return c.body(response.body.slice().buffer, response.status as 200);
    }

    // The claim lives as long as the request: renewed like a reservation, three times a lease.
    const renewal = setInterval(
      () => store.renew(scope, key, claim).catch(() => {}),
      store.leaseMs / 3,
    );
    // Its charge, if any, is indexed by request id in the commit that makes it: what a retry of
    // this key reads should this process die before the answer is recorded.
    const caller = c.get("caller");
    if (caller) c.set("caller", { ...caller, idempotent: true });
    try {
      await next();
    } catch (error) {
      await store.abandon(scope, key, claim).catch(() => {});
      throw error;
    } finally {
      clearInterval(renewal);
    }
    const res = c.res;
    try {
      const charged = res.headers.has("tollbooth-request-cost");
      if ((c.error || res.status < 200 || res.status > 299) && !charged) {
        await store.abandon(scope, key, claim);
        return;
      }
      const headers: Record<string, string> = {};
      for (const name of REPLAYED_HEADERS) {
        const value = res.headers.get(name);
        if (value !== null) headers[name] = value;
      }
      const sent = new Uint8Array(await res.clone().arrayBuffer());
      const recorded = options.recordedBody ? options.recordedBody(sent) : sent;
      const recordedNow = await store.complete(scope, key, claim, requestId, bodyHash, {
        status: res.status,
        headers,
        body: recorded,
      });
      if (!recordedNow) throw new Error("the claim was taken over before the answer was recorded");
    } catch (error) {
      // The answer stands (it was charged); only its record is missing, so a repeat after the
      // lease would run again. Said loudly, since it is the one way a key can charge twice.
      options.log({
        level: "error",
        requestId,
        event: "idempotency_record_failed",
        error: (error as Error)?.message,
      });
    }
  };
}
