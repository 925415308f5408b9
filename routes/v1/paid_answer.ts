/**
 * What every paid endpoint answers with: the wallet headers of a non-streamed answer, and a
 * stream of server-sent events whose request is logged once the stream has settled.
 */
import type { Context } from "hono";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import type { Env } from "@/routes/middleware.ts";

/** Balance, cost and provider of a settled, non-streamed answer. */
export function paidAnswerHeaders(
  c: Context<Env>,
  outcome: { available: Micros; charged: Micros; provider: string },
) {
  c.header("Tollbooth-Balance", formatUsd(outcome.available));
  c.header("Tollbooth-Request-Cost", formatUsd(outcome.charged));
  c.header("Tollbooth-Provider", outcome.provider);
}

/** One event as sent: its bytes, and the error code it ends the stream with, if it does. */
export interface EncodedEvent {
  bytes: Uint8Array;
  errorCode?: string;
}

/**
 * A streamed answer: balance after the reservation, provider, SSE headers, and the events as
 * `encode` writes them. `last` adds what follows the last event of a stream that did not fail
 * (`[DONE]` for chat). The request's log line is written when the stream has settled: at its
 * end, on an error, or when the client goes away (which stops the upstream through `cancel`).
 */
export function paidEventStream<E>(
  c: Context<Env>,
  outcome: {
    available: Micros;
    provider: string;
    /** In batches (what one read of the upstream brought), never an empty batch. */
    events: AsyncGenerator<E[]>;
    cancel(): Promise<void>;
    stalled: Promise<void>;
  },
  encode: (event: E) => EncodedEvent,
  last?: Uint8Array,
): Response {
  const trace = c.get("trace");
  c.set("deferLog", true);
  c.header("Tollbooth-Balance", formatUsd(outcome.available));
  c.header("Tollbooth-Provider", outcome.provider);
  c.header("Content-Type", "text/event-stream; charset=utf-8");
  c.header("Cache-Control", "no-cache");
  c.header("X-Accel-Buffering", "no");
  const onEnd = (errorCode?: string) => {
    if (errorCode) trace.errorCode = errorCode;
    c.get("finishRequest")();
  };
  // A client that stopped reading may hold its connection for good: its request is logged and
  // counted once its stream is settled, not when (if ever) the connection closes.
  outcome.stalled.then(() => onEnd());
  let failed: string | undefined;
  return c.body(
    new ReadableStream<Uint8Array>({
      async pull(controller) {
        let next;
        try {
          next = await outcome.events.next();
        } catch (error) {
          onEnd("internal_error");
          throw error;
        }
        if (next.done) {
          if (!failed && last) controller.enqueue(last);
          controller.close();
          onEnd(failed);
          return;
        }
        for (const event of next.value) {
          const encoded = encode(event);
          failed ??= encoded.errorCode;
          controller.enqueue(encoded.bytes);
        }
      },
      async cancel() {
        try {
          await outcome.cancel();
        } finally {
          onEnd();
        }
      },
    }),
  );
}

/**
 * The caller with the end user the app names (OpenAI's `user`, on chat, Responses and embeddings alike): its
 * spend caps apply and its usage records carry it. An empty name names no one.
 */
export function withEndUser<C extends object>(caller: C, user: string | null | undefined) {
  return { ...caller, user: user ? user : undefined };
}
