/**
 * Top-ups paid through Stripe Checkout: one Checkout Session per purchase, with the price fixed
 * here; and the fulfilment shared by the webhook and the receipt page, which credits a paid session
 * exactly once and only for the amount our own metadata and Stripe's total agree on, or refunds it
 * when its wallet can take no more (stripe_refusals.ts).
 */
import Stripe from "stripe";
import { type AppRecord, keys, type LedgerEntry, type StripePaymentRecord } from "@/lib/db.ts";
import { formatUsd, isRecord, type Logger, type Micros } from "@/lib/core/mod.ts";
import {
  centsToMicros,
  creditTopUp,
  findTopUpEntry,
  isTopUpAmount,
  microsToCents,
} from "./top_up.ts";
import { WalletCreditLimitError, WalletNotFoundError, type Wallets } from "@/lib/billing/mod.ts";
import {
  DISPUTE_EVENTS,
  idOf,
  REFUND_EVENTS,
  rememberStripePayment,
  type ReversalOutcome,
  takeBackDispute,
  takeBackRefund,
} from "./stripe_reversals.ts";
import {
  findRefusedTopUp,
  refundAgainAfterFailure,
  refundFailedError,
  type RefundOutcome,
  refundRefusedTopUp,
} from "./stripe_refusals.ts";

export type { Stripe };
export type CheckoutSession = Stripe.Checkout.Session;

/** A Stripe client on the fetch HTTP client; `api` points it elsewhere (a local fake in tests). */
export function createStripeClient(
  secretKey: string,
  api?: { host: string; port: number; protocol: "http" | "https" },
): Stripe {
  return new Stripe(secretKey, {
    httpClient: Stripe.createFetchHttpClient(),
    maxNetworkRetries: 2,
    timeout: 20_000,
    ...api,
  });
}

export interface CheckoutInput {
  app: AppRecord;
  amount: Micros;
  successUrl: string;
  cancelUrl: string;
  /** The same form posted twice opens the same session instead of a second one. */
  idempotencyKey: string;
}

/** How long a Checkout Session this service opened can be looked up from its receipt page. */
const CHECKOUT_SESSION_KEPT_MS = 3 * 24 * 60 * 60 * 1000;

export async function createCheckoutSession(
  deps: { stripe: Stripe; kv: Deno.Kv },
  input: CheckoutInput,
): Promise<{ id: string; url: string }> {
  const { stripe } = deps;
  const { app, amount } = input;
  if (!isTopUpAmount(amount)) throw new RangeError(`${amount} micro-USD is not a top-up amount`);
  const usd = formatUsd(amount).replace(/\.0+$/, "");
  const session = await stripe.checkout.sessions.create({
    mode: "payment",
    submit_type: "pay",
    client_reference_id: app.id,
    line_items: [{
      quantity: 1,
      price_data: {
        currency: "usd",
        unit_amount: microsToCents(amount),
        product_data: {
          name: `${app.name} credits — ${usd} USD`,
          description: `One-time purchase: ${usd} USD of credits for ${app.name}, no fees.`,
        },
      },
    }],
    metadata: { app_id: app.id, amount_micros: String(amount), top_up_token: app.topUpToken },
    payment_intent_data: {
      description: `${app.name} credits — ${usd} USD`,
      metadata: { app_id: app.id, amount_micros: String(amount) },
    },
    success_url: input.successUrl,
    cancel_url: input.cancelUrl,
  }, { idempotencyKey: input.idempotencyKey });
  if (!session.url) throw new Error(`Checkout Session ${session.id} has no url`);
  await deps.kv.set(keys.checkoutSession(app.id, session.id), Date.now(), {
    expireIn: CHECKOUT_SESSION_KEPT_MS,
  });
  return { id: session.id, url: session.url };
}

export type FulfilOutcome =
  | { status: "credited"; entry: LedgerEntry; appId: string }
  | { status: "already_credited"; appId: string }
  | { status: "not_paid"; appId: string | null }
  | { status: "not_ours" }
  | { status: "refused"; reason: string; appId: string | null }
  | RefundOutcome;

type FulfilDeps = { kv: Deno.Kv; wallets: Wallets; log: Logger; stripe: Stripe };

/**
 * Credits a Checkout Session if it is paid and its amounts agree, or refunds it if its wallet can
 * take no more; safe to call any number of times, from any process, in any order (the marker, and
 * the refusal's record, are the session's id).
 */
export async function fulfilCheckoutSession(
  deps: FulfilDeps,
  session: CheckoutSession,
): Promise<FulfilOutcome> {
  const appId = session.metadata?.app_id ?? null;
  const refuse = (reason: string): FulfilOutcome => {
    deps.log({
      level: "error",
      event: "top_up_refused",
      reason,
      sessionId: session.id,
      appId,
      amountTotal: session.amount_total,
      currency: session.currency,
      metadata: session.metadata,
    });
    return { status: "refused", reason, appId };
  };
  if (!session.metadata?.app_id && !session.metadata?.amount_micros) {
    // Signed by Stripe but not opened by this service (another product on the same account).
    deps.log({ level: "warn", event: "checkout_session_not_ours", sessionId: session.id });
    return { status: "not_ours" };
  }
  if (session.mode !== "payment") return refuse("the session is not a one-time payment");
  if (!appId || session.client_reference_id !== appId) {
    return refuse("the session's app_id and client_reference_id disagree or are missing");
  }
  if (session.payment_status !== "paid") return { status: "not_paid", appId };
  const claimed = session.metadata?.amount_micros ?? "";
  const amount = /^[0-9]{1,12}$/.test(claimed) ? Number(claimed) : NaN;
  if (!isTopUpAmount(amount)) return refuse(`amount_micros ${claimed} is not a top-up amount`);
  if (session.currency !== "usd" || session.amount_total === null) {
    return refuse("the session is not in USD");
  }
  if (centsToMicros(session.amount_total) !== amount) {
    return refuse(`amount_total ${session.amount_total} cents does not match ${claimed} micro-USD`);
  }
  const paymentIntentId = idOf(session.payment_intent);
  const refundInstead = async (reason: string): Promise<FulfilOutcome> => {
    if (!paymentIntentId) return refuse(`${reason}; the session names no PaymentIntent to refund`);
    return await refundRefusedTopUp(deps, {
      appId,
      sessionId: session.id,
      paymentIntentId,
      amount,
      reason,
    });
  };
  // A payment refused once is never credited after: it is refunded, or its refund still owed.
  const refused = await findRefusedTopUp(deps.kv, session.id);
  if (refused) return await refundInstead(refused.reason);
  try {
    const result = await creditTopUp(deps.wallets, appId, {
      source: "stripe",
      reference: session.id,
      amount,
    });
    // After the credit (a refused one must not be taken back); a crash before this is mended by
    // Stripe's next delivery of the event, which finds the session already credited.
    if (paymentIntentId) {
      await rememberStripePayment(deps.kv, paymentIntentId, {
        appId,
        sessionId: session.id,
        amount,
      });
    }
    if (!result.credited) return { status: "already_credited", appId };
    deps.log({
      event: "top_up_credited",
      appId,
      sessionId: session.id,
      amount: formatUsd(amount),
      balance: formatUsd(result.available),
    });
    return { status: "credited", entry: result.entry, appId };
  } catch (error) {
    if (error instanceof WalletNotFoundError) {
      return refuse(`no wallet for app ${appId}`);
    }
    // Only if the wallet was credited to its limit between the checkout's opening (which checks
    // for room) and the payment: no later delivery could credit it either (a wallet's credits
    // only grow), so the payer gets the money back.
    if (error instanceof WalletCreditLimitError) return await refundInstead(error.message);
    throw error;
  }
}

/**
 * The events that can complete a payment; with refunds and disputes (stripe_reversals.ts), the
 * only ones acted on: everything else is acknowledged and ignored.
 */
const FULFILLING_EVENTS = new Set([
  "checkout.session.completed",
  "checkout.session.async_payment_succeeded",
]);

export async function handleStripeEvent(
  deps: FulfilDeps,
  event: Stripe.Event,
): Promise<FulfilOutcome | ReversalOutcome | { status: "ignored" }> {
  // Signed but without an object to act on: nothing Stripe sends, and nothing to retry.
  if (!isRecord(event) || !isRecord(event.data) || !isRecord(event.data.object)) {
    return { status: "ignored" };
  }
  const object = event.data.object as { object?: string };
  const reversalDeps = {
    ...deps,
    creditUnseenPayment: (paymentIntentId: string) => creditUnseenPayment(deps, paymentIntentId),
    refundAgainAfterFailure: async (
      sessionId: string,
      failure: Parameters<typeof refundAgainAfterFailure>[2],
    ) => {
      const outcome = await refundAgainAfterFailure(deps, sessionId, failure);
      if (outcome.status === "refund_failed") throw refundFailedError(sessionId);
      return outcome;
    },
  };
  if (REFUND_EVENTS.has(event.type) && object.object === "refund") {
    return await takeBackRefund(reversalDeps, event, object as Stripe.Refund);
  }
  if (DISPUTE_EVENTS.has(event.type) && object.object === "dispute") {
    return await takeBackDispute(reversalDeps, event, object as Stripe.Dispute);
  }
  if (!FULFILLING_EVENTS.has(event.type)) return { status: "ignored" };
  const session = event.data.object as CheckoutSession;
  if (session.object !== "checkout.session") return { status: "ignored" };
  const outcome = await fulfilCheckoutSession(deps, session);
  if (outcome.status === "refund_failed") throw refundFailedError(session.id);
  return outcome;
}

/**
 * A refund or dispute named a payment with no credit seen here: asks Stripe for the Checkout
 * Session that payment paid and fulfils it as its own completion event would (once, by the
 * session's marker), so the reversal has a credit to take back. Answering 5xx until the completion
 * event came instead would leave the refunded credits spendable for as long as Stripe's retries
 * wait (hours), and would never match a payment credited before payments were kept.
 */
async function creditUnseenPayment(
  deps: FulfilDeps,
  paymentIntentId: string,
): Promise<StripePaymentRecord | { refusedSessionId: string } | null> {
  const { data } = await deps.stripe.checkout.sessions.list({
    payment_intent: paymentIntentId,
    limit: 1,
  });
  if (data.length === 0) return null;
  const outcome = await fulfilCheckoutSession(deps, data[0]);
  if (outcome.status === "not_paid") {
    // A refund or dispute exists only for money received: Stripe's view is behind; ask again.
    throw new Error(`the session of ${paymentIntentId} is refunded but not yet paid`);
  }
  if (outcome.status === "refund_failed") throw refundFailedError(data[0].id);
  if (outcome.status === "refunded") return { refusedSessionId: data[0].id };
  if (outcome.status !== "credited" && outcome.status !== "already_credited") return null;
  return (await deps.kv.get<StripePaymentRecord>(keys.stripePayment(paymentIntentId))).value;
}

/** Receipt lookup for a session: our ledger entry when credited, else Stripe's word on it. */
export async function confirmCheckoutSession(
  deps: FulfilDeps,
  app: AppRecord,
  sessionId: string,
): Promise<
  | { status: "credited"; entry: LedgerEntry }
  | { status: "processing" }
  | { status: "unpaid" }
  | { status: "refused" }
  /** Not credited (its wallet could take no more) and refunded, or its refund to be retried. */
  | { status: "refunded" }
  | { status: "refund_pending" }
  | { status: "unknown" }
> {
  const credited = await findTopUpEntry(deps.kv, app.id, "stripe", sessionId);
  if (credited) return { status: "credited", entry: credited };
  const refused = await findRefusedTopUp(deps.kv, sessionId);
  if (refused?.appId === app.id && refused.refund) return { status: "refunded" };
  // Only sessions this service opened for the app are asked about: a receipt address with any
  // other id (top-up pages are public) would spend the account's Stripe API rate limit.
  const opened = refused?.appId === app.id ||
    (await deps.kv.get(keys.checkoutSession(app.id, sessionId))).versionstamp !== null;
  if (!opened) return { status: "unknown" };
  let session: CheckoutSession;
  try {
    session = await deps.stripe.checkout.sessions.retrieve(sessionId);
  } catch (error) {
    if (error instanceof Stripe.errors.StripeInvalidRequestError && error.statusCode === 404) {
      return { status: "unknown" };
    }
    deps.log({ level: "warn", event: "checkout_lookup_failed", sessionId, error: String(error) });
    return { status: "processing" };
  }
  if (session.metadata?.app_id !== app.id) return { status: "unknown" };
  // Stripe advises fulfilling on the landing page too: the webhook may be late or misconfigured.
  const outcome = await fulfilCheckoutSession(deps, session);
  if (outcome.status === "credited") return { status: "credited", entry: outcome.entry };
  if (outcome.status === "already_credited") {
    const entry = await findTopUpEntry(deps.kv, app.id, "stripe", sessionId);
    if (entry) return { status: "credited", entry };
  }
  if (outcome.status === "refused") return { status: "refused" };
  if (outcome.status === "refunded") return { status: "refunded" };
  if (outcome.status === "refund_failed") return { status: "refund_pending" };
  if (outcome.status === "not_ours") return { status: "unknown" };
  return session.status === "complete" ? { status: "processing" } : { status: "unpaid" };
}
