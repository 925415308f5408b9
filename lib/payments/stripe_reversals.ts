/**
 * Refunds and disputes of Stripe top-ups, taken back from the wallet the payment credited: the
 * credits a payer got their money back for are not left to spend. What the wallet no longer has
 * (already spent, or held by requests in flight) is owed and taken as money comes back to it.
 *
 * Each event may arrive late, twice, concurrently or out of order; every step is keyed by a marker
 * the wallet writes once, so replays change nothing and a later event mends an earlier step a
 * crash cut short.
 */
import type Stripe from "stripe";
import { keys, type StripePaymentRecord } from "@/lib/db.ts";
import { formatUsd, type Logger, type Micros } from "@/lib/core/mod.ts";
import { WalletNotFoundError, type Wallets } from "@/lib/billing/mod.ts";
import { centsToMicros, microsToCents } from "./top_up.ts";

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
  const record: StripePaymentRecord = { ...payment, refundClaims: [] };
  await kv.atomic()
    .check({ key: keys.stripePayment(paymentIntentId), versionstamp: null })
    .set(keys.stripePayment(paymentIntentId), record)
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
 * `charge.refunded`: Stripe gives the charge's refunds as a running total. A rise past the highest
 * total seen is first claimed on the payment's record (one commit, so concurrent deliveries claim
 * it once), then every claim is taken under its own marker: a claim whose debit a crash cut off is
 * taken by the next delivery of any refund event of the payment.
 */
export async function takeBackRefund(
  deps: Deps,
  event: Stripe.Event,
  charge: Stripe.Charge,
): Promise<ReversalOutcome> {
  const paymentIntentId = idOf(charge.payment_intent);
  const entry = await paymentOf(deps, paymentIntentId, event);
  if (!entry || !paymentIntentId) return { status: "unmatched" };
  let current: Deno.KvEntryMaybe<StripePaymentRecord> = entry;
  let payment = entry.value!;
  // Never more than the payment credited, whatever the charge says.
  const total = Math.min(charge.amount_refunded, microsToCents(payment.amount));
  for (;;) {
    const highest = Math.max(0, ...payment.refundClaims.map((c) => c.to));
    if (total <= highest) break;
    const claimed: StripePaymentRecord = {
      ...payment,
      refundClaims: [...payment.refundClaims, { from: highest, to: total }],
    };
    const committed = await deps.kv.atomic()
      .check(current)
      .set(keys.stripePayment(paymentIntentId), claimed)
      .commit();
    if (committed.ok) {
      payment = claimed;
      break;
    }
    // Another delivery claimed first; the record is never deleted, so it is still there.
    current = await deps.kv.get<StripePaymentRecord>(keys.stripePayment(paymentIntentId));
    payment = current.value!;
  }
  let taken = 0;
  let owed = 0;
  for (const claim of payment.refundClaims) {
    const amount = centsToMicros(claim.to - claim.from);
    const result = await debit(deps, payment.appId, {
      amount,
      kind: "refund",
      reason: `Refund of ${formatUsd(amount)} USD of a Stripe top-up`,
      reference: paymentIntentId,
      marker: `stripe_refund:${paymentIntentId}:${claim.to}`,
    });
    if (result?.debited) {
      taken += amount;
      owed = result.owed;
    }
  }
  if (taken === 0) return { status: "already_taken_back", appId: payment.appId };
  deps.log({
    event: "top_up_refunded",
    appId: payment.appId,
    paymentIntent: paymentIntentId,
    amount: formatUsd(taken),
    owed: formatUsd(owed),
  });
  return { status: "taken_back", appId: payment.appId, amount: taken, owed };
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
