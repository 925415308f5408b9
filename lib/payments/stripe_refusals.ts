/**
 * A paid top-up its wallet cannot take is refunded, not kept: the wallet was credited to its limit
 * between the checkout's opening (which checks for room) and the payment, so no later delivery
 * could credit it either. The refund is the whole payment, made through Stripe's Refunds API once
 * per Checkout Session; its record (keys.refusedTopUp) is written before the first attempt and
 * says whether the refund is still owed, so a failed attempt is retried by the next delivery of
 * the event (or the next view of the receipt) and a made one never again. A refund Stripe made and
 * later reports failed or canceled (the payer's bank returned it) is owed again and made anew.
 */
import Stripe from "stripe";
import { keys, type RefusedTopUpRecord } from "@/lib/db.ts";
import { ApiError, formatUsd, type Logger, type Micros } from "@/lib/core/mod.ts";

interface Deps {
  kv: Deno.Kv;
  log: Logger;
  stripe: Stripe;
}

export type RefundOutcome =
  | { status: "refunded"; appId: string; refundId: string | null }
  /** Stripe refused the refund or did not answer: it is still owed, and tried again next time. */
  | { status: "refund_failed"; appId: string; error: string };

/** The refusal recorded for a Checkout Session, or null if its payment was never refused. */
export async function findRefusedTopUp(
  kv: Deno.Kv,
  sessionId: string,
): Promise<RefusedTopUpRecord | null> {
  return (await kv.get<RefusedTopUpRecord>(keys.refusedTopUp(sessionId))).value;
}

/**
 * The key of one refund attempt. Stripe keeps the answer to a key for 24 hours, errors included,
 * so a retry under the first attempt's key would be answered the same refusal: each failed attempt
 * moves to a new key. Racing deliveries read the same count and share a key, so Stripe makes one
 * refund for them; and the refund is always the whole payment, which Stripe refunds once at most
 * (a second is `charge_already_refunded`), whatever the key.
 */
export function refundIdempotencyKey(sessionId: string, failedAttempts: number): string {
  const base = `top-up-refund:${sessionId}`;
  return failedAttempts === 0 ? base : `${base}:retry-${failedAttempts}`;
}

/**
 * Refunds a refused top-up's payment unless its record says it is refunded already: the record is
 * written first (once), each outcome after. Safe to call any number of times, concurrently, from
 * any process: `top_up_refunded` is logged by the one call that records the refund.
 */
export async function refundRefusedTopUp(
  deps: Deps,
  refusal: {
    appId: string;
    sessionId: string;
    paymentIntentId: string;
    amount: Micros;
    reason: string;
  },
): Promise<RefundOutcome> {
  const { kv, log, stripe } = deps;
  const key = keys.refusedTopUp(refusal.sessionId);
  await kv.atomic().check({ key, versionstamp: null }).set(
    key,
    {
      ...refusal,
      refusedAt: Date.now(),
      refund: null,
      failedAttempts: 0,
    } satisfies RefusedTopUpRecord,
  ).commit();
  const record = await findRefusedTopUp(kv, refusal.sessionId);
  if (!record) throw new Error(`the refusal of ${refusal.sessionId} was not recorded`);
  const { appId } = record;
  if (record.refund) return { status: "refunded", appId, refundId: record.refund.id };

  let refund: NonNullable<RefusedTopUpRecord["refund"]>;
  try {
    const made = await stripe.refunds.create({
      payment_intent: record.paymentIntentId,
      metadata: { app_id: appId, checkout_session: record.sessionId },
    }, { idempotencyKey: refundIdempotencyKey(record.sessionId, record.failedAttempts) });
    refund = { id: made.id, status: made.status ?? "pending", at: Date.now() };
  } catch (error) {
    if (!isAlreadyRefunded(error)) return await recordFailure(deps, record, error);
    refund = { id: null, status: "already_refunded", at: Date.now() };
  }
  const recorded = await updateRefusal(
    kv,
    record.sessionId,
    (current) => current.refund ? null : { ...current, refund },
  );
  if (!recorded) {
    const current = await findRefusedTopUp(kv, record.sessionId);
    return { status: "refunded", appId, refundId: current?.refund?.id ?? refund.id };
  }
  log({
    event: "top_up_refunded",
    appId,
    sessionId: record.sessionId,
    paymentIntent: record.paymentIntentId,
    refund: refund.id,
    refundStatus: refund.status,
    amount: formatUsd(record.amount),
    credited: false,
    reason: record.reason,
  });
  return { status: "refunded", appId, refundId: refund.id };
}

export type RefundAgainOutcome =
  | RefundOutcome
  /** The failed refund is not the one recorded: a newer one was made since (or is being made). */
  | { status: "superseded"; appId: string; refundId: string | null };

/**
 * Stripe reports that a refund of a refused top-up failed or was canceled (days later, at the
 * payer's bank): the payer has neither the credits nor the money. If the refund recorded is that
 * one, the record says the refund is owed again (one checked write: of racing or redelivered events,
 * one reopens it), and it is made again at once under the next retry key. A refund recorded with no
 * id (Stripe answered "already refunded") may be the failed one too: it is reopened, and if another
 * refund does hold the money, Stripe answers the retry "already refunded" again. A failure of an
 * older refund than the one recorded changes nothing: the newer one is the payer's money.
 */
export async function refundAgainAfterFailure(
  deps: Deps,
  sessionId: string,
  failure: { refundId: string; status: string; stripeEvent: string; type: string },
): Promise<RefundAgainOutcome> {
  const { kv, log } = deps;
  const isTheRecordedRefund = (current: RefusedTopUpRecord) =>
    current.refund !== null &&
    (current.refund.id === failure.refundId || current.refund.id === null);
  const reopened = await updateRefusal(
    kv,
    sessionId,
    (current) =>
      isTheRecordedRefund(current)
        ? {
          ...current,
          refund: null,
          failedAttempts: current.failedAttempts + 1,
          lastError: `Stripe reported refund ${failure.refundId} ${failure.status}`,
        }
        : null,
  );
  const record = reopened ?? await findRefusedTopUp(kv, sessionId);
  if (!record) throw new Error(`no refusal recorded for ${sessionId}`);
  const reported = {
    event: "top_up_refund_failed",
    appId: record.appId,
    sessionId,
    paymentIntent: record.paymentIntentId,
    amount: formatUsd(record.amount),
    stripeEvent: failure.stripeEvent,
    type: failure.type,
    reference: failure.refundId,
  };
  if (record.refund) {
    log({
      ...reported,
      level: "info",
      why: `Stripe reports an earlier refund ${failure.status}; refund ${
        record.refund.id ?? "(already refunded)"
      } was made since`,
    });
    return { status: "superseded", appId: record.appId, refundId: record.refund.id };
  }
  // Owed: reopened by this event, or by a racing one (whose attempt shares this one's key).
  const retry = await refundRefusedTopUp(deps, record);
  log({
    ...reported,
    level: "error",
    why:
      `Stripe reports the refund of a payment never credited ${failure.status}: it is owed again`,
    failedAttempts: record.failedAttempts,
    retry: retry.status,
    ...(retry.status === "refunded" ? { refund: retry.refundId } : { error: retry.error }),
  });
  return retry;
}

/** Stripe's answer when the payment has no money left to refund: it is back with the payer. */
function isAlreadyRefunded(error: unknown): boolean {
  return error instanceof Stripe.errors.StripeInvalidRequestError &&
    error.code === "charge_already_refunded";
}

async function recordFailure(
  deps: Deps,
  record: RefusedTopUpRecord,
  error: unknown,
): Promise<RefundOutcome> {
  const message = error instanceof Error ? error.message : String(error);
  const failed = await updateRefusal(
    deps.kv,
    record.sessionId,
    (current) =>
      current.refund ? null : {
        ...current,
        failedAttempts: current.failedAttempts + 1,
        lastError: message.slice(0, 500),
      },
  );
  // Another delivery made the refund meanwhile (this one's attempt shared its key, or was refused
  // as a second refund): it is done.
  if (!failed) {
    const current = await findRefusedTopUp(deps.kv, record.sessionId);
    return { status: "refunded", appId: record.appId, refundId: current?.refund?.id ?? null };
  }
  deps.log({
    level: "error",
    event: "top_up_refund_failed",
    appId: record.appId,
    sessionId: record.sessionId,
    paymentIntent: record.paymentIntentId,
    amount: formatUsd(record.amount),
    reason: record.reason,
    failedAttempts: failed.failedAttempts,
    error: message,
    retry: "on Stripe's next delivery of the event, or the next view of the receipt",
  });
  return { status: "refund_failed", appId: record.appId, error: message };
}

/** Rewrites the record with `change` (null: leave it), checked against concurrent writes. */
async function updateRefusal(
  kv: Deno.Kv,
  sessionId: string,
  change: (current: RefusedTopUpRecord) => RefusedTopUpRecord | null,
): Promise<RefusedTopUpRecord | null> {
  const key = keys.refusedTopUp(sessionId);
  for (let attempt = 0; attempt < 10; attempt++) {
    const entry = await kv.get<RefusedTopUpRecord>(key);
    if (!entry.value) throw new Error(`no refusal recorded for ${sessionId}`);
    const next = change(entry.value);
    if (!next) return null;
    if ((await kv.atomic().check(entry).set(key, next).commit()).ok) return next;
  }
  throw new Error(`the refusal of ${sessionId} changed concurrently; try again`);
}

/**
 * Answered to a webhook delivery whose payment is still to be refunded: any non-2xx makes Stripe
 * deliver the event again later, which tries the refund again.
 */
export function refundFailedError(sessionId: string): ApiError {
  return new ApiError(
    "refund_failed",
    `The payment of Checkout Session ${sessionId} could not be credited (its wallet holds the most credits a wallet may), and refunding it through Stripe failed this time: see the top_up_refund_failed log line. Deliver the event again to retry the refund.`,
  );
}
