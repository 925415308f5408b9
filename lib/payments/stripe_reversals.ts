/**
 * Refunds and disputes of Stripe top-ups, taken back from the wallet the payment credited: the
 * credits a payer got their money back for are not left to spend. What the wallet no longer has
 * (already spent, or held by requests in flight) is owed and taken as money comes back to it.
 *
 * Each event may arrive late, twice, concurrently or out of order; every step is keyed by a marker
 * the wallet writes once (the refund's or dispute's id), so replays change nothing, and a step
 * that undoes another (a failed refund, a won dispute) first makes sure what it undoes was done.
 */
import type Stripe from "stripe";
import { keys, type StripePaymentRecord } from "@/lib/db.ts";
import { formatUsd, type Logger, type Micros } from "@/lib/core/mod.ts";
import { WalletNotFoundError, type Wallets } from "@/lib/billing/mod.ts";
import { centsToMicros } from "./top_up.ts";

interface Deps {
  kv: Deno.Kv;
  wallets: Wallets;
  log: Logger;
}

export type ReversalOutcome =
  | { status: "taken_back"; appId: string; amount: Micros; owed: Micros }
  | { status: "already_taken_back"; appId: string }
  | { status: "given_back"; appId: string; amount: Micros }
  /** An inquiry (`warning_…`): Stripe moved no money, so nothing is taken. */
  | { status: "inquiry" }
  /** No top-up of ours was paid by this payment (another product, or paid before this was kept). */
  | { status: "unmatched" };

/** Remembers which app a paid top-up credited, for its refunds and disputes; kept once written. */
export async function rememberStripePayment(
  kv: Deno.Kv,
  paymentIntentId: string,
  payment: { appId: string; sessionId: string; amount: Micros },
): Promise<void> {
  await kv.atomic()
    .check({ key: keys.stripePayment(paymentIntentId), versionstamp: null })
    .set(keys.stripePayment(paymentIntentId), payment satisfies StripePaymentRecord)
    .commit();
}

const idOf = (value: string | { id: string } | null | undefined): string | null =>
  typeof value === "string" ? value : value?.id ?? null;

async function paymentOf(deps: Deps, paymentIntentId: string | null, event: Stripe.Event) {
  const entry = paymentIntentId
    ? await deps.kv.get<StripePaymentRecord>(keys.stripePayment(paymentIntentId))
    : null;
  if (!entry?.value) {
    deps.log({
      level: "warn",
      event: "stripe_reversal_unmatched",
      stripeEvent: event.id,
      type: event.type,
      paymentIntent: paymentIntentId,
    });
    return null;
  }
  return entry;
}

/**
 * The refund events (one Refund object each, sent for every refund since API version
 * 2024-10-28.acacia). A refund's amount is taken back once whatever its status, and given back
 * once if it failed or was canceled: any order of its events ends in the same ledger.
 */
export const REFUND_EVENTS = new Set(["refund.created", "refund.updated", "refund.failed"]);

const UNDONE_REFUND = new Set(["failed", "canceled"]);

export async function takeBackRefund(
  deps: Deps,
  event: Stripe.Event,
  refund: Stripe.Refund,
): Promise<ReversalOutcome> {
  const paymentIntentId = idOf(refund.payment_intent);
  const entry = await paymentOf(deps, paymentIntentId, event);
  if (!entry || !paymentIntentId) return { status: "unmatched" };
  const payment = entry.value!;
  // Never more than the payment credited, whatever the refund says.
  const amount = Math.min(centsToMicros(refund.amount), payment.amount);
  const taken = await debit(deps, payment.appId, {
    amount,
    kind: "refund",
    reason: `Refund of ${formatUsd(amount)} USD of a Stripe top-up`,
    reference: refund.id,
    marker: `stripe_refund:${refund.id}`,
  });
  if (taken === null) return { status: "unmatched" };
  if (UNDONE_REFUND.has(refund.status ?? "")) {
    const back = await deps.wallets.reverseDebit(payment.appId, {
      amount,
      kind: "refund_reversed",
      reason: `The refund of ${formatUsd(amount)} USD ${refund.status}: given back`,
      reference: refund.id,
      marker: `stripe_refund_undone:${refund.id}`,
    });
    if (!back.reversed) return { status: "already_taken_back", appId: payment.appId };
    deps.log({
      event: "top_up_refund_undone",
      appId: payment.appId,
      refund: refund.id,
      status: refund.status,
      amount: formatUsd(back.entry.amount),
    });
    return { status: "given_back", appId: payment.appId, amount: back.entry.amount };
  }
  if (!taken.debited) return { status: "already_taken_back", appId: payment.appId };
  deps.log({
    event: "top_up_refunded",
    appId: payment.appId,
    refund: refund.id,
    paymentIntent: paymentIntentId,
    amount: formatUsd(amount),
    owed: formatUsd(taken.owed),
  });
  return { status: "taken_back", appId: payment.appId, amount, owed: taken.owed };
}

/** The dispute events that move money: Stripe withdraws the amount, and reinstates it if won. */
export const DISPUTE_EVENTS = new Set([
  "charge.dispute.created",
  "charge.dispute.funds_withdrawn",
  "charge.dispute.funds_reinstated",
  "charge.dispute.closed",
]);

/**
 * A dispute's amount is taken back once (any of its events may come first); a dispute won is then
 * given back once. An inquiry (`warning_…` status) moves no money and takes nothing.
 */
export async function takeBackDispute(
  deps: Deps,
  event: Stripe.Event,
  dispute: Stripe.Dispute,
): Promise<ReversalOutcome> {
  if (dispute.status.startsWith("warning_")) return { status: "inquiry" };
  const paymentIntentId = idOf(dispute.payment_intent);
  const entry = await paymentOf(deps, paymentIntentId, event);
  if (!entry || !paymentIntentId) return { status: "unmatched" };
  const payment = entry.value!;
  const amount = Math.min(centsToMicros(dispute.amount), payment.amount);
  const taken = await debit(deps, payment.appId, {
    amount,
    kind: "chargeback",
    reason: `Chargeback of ${formatUsd(amount)} USD: a Stripe top-up was disputed`,
    reference: dispute.id,
    marker: `stripe_dispute:${dispute.id}`,
  });
  if (taken === null) return { status: "unmatched" };
  const won = event.type === "charge.dispute.funds_reinstated" || dispute.status === "won";
  if (won) {
    const back = await deps.wallets.reverseDebit(payment.appId, {
      amount,
      kind: "chargeback_reversed",
      reason: `Dispute won: the chargeback of ${formatUsd(amount)} USD is given back`,
      reference: dispute.id,
      marker: `stripe_dispute_won:${dispute.id}`,
    });
    if (back.reversed) {
      deps.log({
        event: "top_up_dispute_won",
        appId: payment.appId,
        dispute: dispute.id,
        amount: formatUsd(back.entry.amount),
      });
      return { status: "given_back", appId: payment.appId, amount: back.entry.amount };
    }
    return { status: "already_taken_back", appId: payment.appId };
  }
  if (!taken.debited) return { status: "already_taken_back", appId: payment.appId };
  deps.log({
    level: "warn",
    event: "top_up_disputed",
    appId: payment.appId,
    dispute: dispute.id,
    amount: formatUsd(amount),
    owed: formatUsd(taken.owed),
  });
  return { status: "taken_back", appId: payment.appId, amount, owed: taken.owed };
}

/** A debit of an app deleted since its top-up: logged, nothing to take. */
async function debit(deps: Deps, appId: string, input: Parameters<Wallets["debit"]>[1]) {
  try {
    return await deps.wallets.debit(appId, input);
  } catch (error) {
    if (!(error instanceof WalletNotFoundError)) throw error;
    deps.log({ level: "warn", event: "stripe_reversal_no_wallet", appId, marker: input.marker });
    return null;
  }
}
