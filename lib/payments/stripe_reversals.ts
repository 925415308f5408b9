/**
 * Refunds and disputes of Stripe top-ups, taken back from the wallet the payment credited: the
 * credits a payer got their money back for are not left to spend. What the wallet no longer has
 * (already spent, or held by requests in flight) is owed and taken as money comes back to it.
 *
 * Each event may arrive late, twice, concurrently or out of order; every step is keyed by a marker
 * the wallet writes once (the refund's or dispute's id), so replays change nothing, and a step
 * that undoes another (a failed refund, a won dispute) first makes sure what it undoes was done.
 * Likewise a reversal of a payment not yet credited here first credits it (its Checkout Session,
 * asked of Stripe, marked by its id like any credit), then takes back; unless that payment was
 * refused at its wallet's credit limit and refunded by us (stripe_refusals.ts): nothing was
 * credited, so nothing is taken, and if our refund failed it is made again.
 */
import type Stripe from "stripe";
import {
  type CreditMarkerRecord,
  keys,
  type LedgerEntry,
  type StripePaymentRecord,
} from "@/lib/db.ts";
import { formatUsd, type Logger, type Micros } from "@/lib/core/mod.ts";
import { WalletNotFoundError, type Wallets } from "@/lib/billing/mod.ts";
import { centsToMicros } from "./top_up.ts";

interface Deps {
  kv: Deno.Kv;
  wallets: Wallets;
  log: Logger;
  /**
   * The payment a reversal names when no credit of it was seen yet: Stripe does not order its
   * events, so a refund may come before its checkout's completion. Credits the payment first if
   * it is one of our top-ups (returning its record), the Checkout Session's id if it is one its
   * wallet could not take (refunded instead), null if it is not ours; throws when Stripe cannot be
   * asked or the refund still owed fails, so the event is answered 5xx and delivered again.
   */
  creditUnseenPayment: (
    paymentIntentId: string,
  ) => Promise<StripePaymentRecord | { refusedSessionId: string } | null>;
  /**
   * Stripe reports that a refund of a payment refused at its wallet's limit failed or was
   * canceled: if it is the refund recorded, it is owed again and made again (stripe_refusals.ts).
   * Throws when that new refund fails, so the event is answered 5xx and delivered again.
   */
  refundAgainAfterFailure: (
    sessionId: string,
    failure: { refundId: string; status: string; stripeEvent: string; type: string },
  ) => Promise<{ status: "refunded"; refundId: string | null } | { status: "superseded" }>;
}

export type ReversalOutcome =
  | { status: "taken_back"; appId: string; amount: Micros; owed: Micros }
  | { status: "already_taken_back"; appId: string }
  | { status: "given_back"; appId: string; amount: Micros }
  /** A failed refund's or won dispute's event again: what it gives back was given back before. */
  | { status: "already_given_back"; appId: string }
  /** An inquiry (`warning_…`): Stripe moved no money, so nothing is taken. */
  | { status: "inquiry" }
  /** No top-up of ours was paid by this payment (another product on the Stripe account). */
  | { status: "unmatched" }
  /** A payment refused at its wallet's credit limit and refunded by us: nothing to take back. */
  | { status: "never_credited" }
  /** Our refund of such a payment failed: it was made again. */
  | { status: "refunded_again"; refundId: string | null }
  /**
   * In a currency other than USD, of which the amount says nothing in USD: nothing is taken, and
   * the operator is told what to settle by hand.
   */
  | { status: "not_usd"; appId: string };

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

/** A Stripe field that is an id or the expanded object: its id. */
export const idOf = (value: string | { id: string } | null | undefined): string | null =>
  typeof value === "string" ? value : value?.id ?? null;

/** A refund or dispute of a top-up, as both are taken back and given back. */
interface Reversal {
  /** The refund's or dispute's id: each is taken back once, and given back once. */
  id: string;
  kind: "refund" | "chargeback";
  paymentIntent: string | null;
  /** The amount in `currency`'s smallest unit: cents when it is USD, what top-ups are paid in. */
  cents: number;
  currency: string;
  /** The refund failed or was canceled, the dispute was won: what was taken is given back. */
  undone: boolean;
  /** Why, for the ledger entry that gives it back ("failed", "won"). */
  because: string;
}

const WORDING = {
  refund: {
    taken: (usd: string) => `Refund of ${usd} USD of a Stripe top-up`,
    given: (usd: string, because: string) => `The refund of ${usd} USD ${because}: given back`,
    markers: { taken: "stripe_refund", given: "stripe_refund_undone" },
    logs: { taken: "top_up_refunded", given: "top_up_refund_undone" },
  },
  chargeback: {
    taken: (usd: string) => `Chargeback of ${usd} USD: a Stripe top-up was disputed`,
    given: (usd: string) => `Dispute won: the chargeback of ${usd} USD is given back`,
    markers: { taken: "stripe_dispute", given: "stripe_dispute_won" },
    logs: { taken: "top_up_disputed", given: "top_up_dispute_won" },
  },
} as const;

/**
 * What an operator's `deno task admin debit --reference ID` is (scripts/admin.ts): a Stripe
 * dispute's id (`dp_`, or `du_` before 2019) a chargeback, any other id a refund; marked as the
 * webhook marks its own taking back, so one reversal is taken once, by the webhook or by hand.
 */
export function operatorTakeBack(reference: string): {
  kind: "refund" | "chargeback";
  marker: string;
} {
  const kind = /^(dp|du)_/.test(reference) ? "chargeback" : "refund";
  return { kind, marker: `${WORDING[kind].markers.taken}:${reference}` };
}

/**
 * What an operator's `deno task admin credit --reversal-of ID` gives back (scripts/admin.ts): what
 * `debit --reference ID` or the webhook took back (`taken`, that debit's marker), marked as the
 * webhook marks its own giving back, so one reversal is given back once, by the webhook or by hand.
 */
export function operatorGiveBack(reference: string): {
  kind: "refund_reversed" | "chargeback_reversed";
  taken: string;
  marker: string;
} {
  const { kind, marker: taken } = operatorTakeBack(reference);
  return {
    kind: kind === "refund" ? "refund_reversed" : "chargeback_reversed",
    taken,
    marker: `${WORDING[kind].markers.given}:${reference}`,
  };
}

/** The command that settles a reversal the webhook could not, its amount in USD left to fill in. */
function settleCommand(appId: string, reversal: Reversal): string {
  const what = reversal.kind === "refund" ? "Refund" : "Chargeback";
  const reason =
    `${what} ${reversal.id} of a Stripe top-up, paid in ${reversal.currency.toUpperCase()}`;
  return `deno task admin debit --app ${appId} --amount USD --reason "${reason}" ` +
    `--reference ${reversal.id}`;
}

/**
 * The command that gives back what the operator took by hand for a reversal since undone: what
 * that debit took, so no amount is left to fill in; refused if nothing was taken.
 */
function giveBackCommand(appId: string, reversal: Reversal): string {
  const what = reversal.kind === "refund" ? "refund" : "dispute";
  return `deno task admin credit --app ${appId} --reversal-of ${reversal.id} ` +
    `--reason "The ${what} ${reversal.id} ${reversal.because}: given back"`;
}

/**
 * Takes the reversal's amount back from the wallet its payment credited (never more than the
 * payment credited), once; an undone one is then given back, once. The taking comes first even
 * for an event that undoes it, so any order of events ends in the same ledger.
 */
async function takeBack(
  deps: Deps,
  event: Stripe.Event,
  reversal: Reversal,
): Promise<ReversalOutcome> {
  const { id, kind } = reversal;
  const wording = WORDING[kind];
  let payment = reversal.paymentIntent
    ? (await deps.kv.get<StripePaymentRecord>(keys.stripePayment(reversal.paymentIntent))).value
    : null;
  if (!payment && reversal.paymentIntent) {
    const unseen = await deps.creditUnseenPayment(reversal.paymentIntent);
    if (unseen && "refusedSessionId" in unseen) {
      return await neverCredited(deps, event, reversal, unseen.refusedSessionId);
    }
    payment = unseen;
  }
  const amount = Math.min(centsToMicros(reversal.cents), payment?.amount ?? Infinity);
  const currency = reversal.currency.toLowerCase();
  const usdAmount = currency === "usd";
  const unmatched = (why: string): ReversalOutcome => {
    // Not taken back from any wallet: the operator's to settle by hand, so the amount is told.
    deps.log({
      level: "warn",
      event: "stripe_reversal_unmatched",
      why,
      stripeEvent: event.id,
      type: event.type,
      paymentIntent: reversal.paymentIntent,
      ...(usdAmount ? { amount: formatUsd(amount) } : { amount: reversal.cents, currency }),
    });
    return { status: "unmatched" };
  };
  if (!payment) return unmatched("no top-up of ours was paid by this payment");
  if (!usdAmount) {
    // Top-ups are charged in USD, but a refund or dispute may be in the currency the payer was
    // shown: its amount read as cents could take back ten or a hundred times the money (15,000
    // won is 11 USD, not 150). What it is in USD is the operator's to find and settle, with the
    // command `settle` names; and one undone since is theirs to give back, if they took it, as
    // this webhook would have (the command refuses when nothing was taken).
    deps.log({
      level: "error",
      event: "stripe_reversal_not_usd",
      stripeEvent: event.id,
      type: event.type,
      appId: payment.appId,
      reference: id,
      kind,
      paymentIntent: reversal.paymentIntent,
      amount: reversal.cents,
      currency,
      credited: formatUsd(payment.amount),
      ...(reversal.undone
        ? { undone: reversal.because, settle: giveBackCommand(payment.appId, reversal) }
        : { settle: settleCommand(payment.appId, reversal) }),
    });
    return { status: "not_usd", appId: payment.appId };
  }
  const usd = formatUsd(amount);
  let taken;
  try {
    taken = await deps.wallets.debit(payment.appId, {
      amount,
      kind,
      reason: wording.taken(usd),
      reference: id,
      marker: `${wording.markers.taken}:${id}`,
    });
  } catch (error) {
    if (!(error instanceof WalletNotFoundError)) throw error;
    return unmatched(`the app ${payment.appId} has no wallet any more`);
  }
  let { appId } = payment;
  if (reversal.undone) {
    // What this reversal's debit took: an operator may have taken it by hand before its first
    // event, for another amount or from another app, and no more than that debit is given back.
    const debit = taken.debited
      ? { appId, amount: taken.entry.amount }
      : await debitTaken(deps.kv, `${wording.markers.taken}:${id}`);
    appId = debit.appId;
    const back = await deps.wallets.reverseDebit(appId, {
      amount: debit.amount,
      kind: kind === "refund" ? "refund_reversed" : "chargeback_reversed",
      reason: wording.given(formatUsd(debit.amount), reversal.because),
      reference: id,
      marker: `${wording.markers.given}:${id}`,
    });
    if (!back.reversed) return { status: "already_given_back", appId };
    deps.log({
      event: wording.logs.given,
      appId,
      reference: id,
      amount: formatUsd(back.entry.amount),
    });
    return { status: "given_back", appId, amount: back.entry.amount };
  }
  if (!taken.debited) return { status: "already_taken_back", appId };
  deps.log({
    level: kind === "chargeback" ? "warn" : "info",
    event: wording.logs.taken,
    appId,
    reference: id,
    paymentIntent: reversal.paymentIntent,
    amount: usd,
    owed: formatUsd(taken.owed),
  });
  return { status: "taken_back", appId, amount, owed: taken.owed };
}

/** The app and amount of the debit `marker` marks (written once, with its ledger entry). */
async function debitTaken(kv: Deno.Kv, marker: string): Promise<{ appId: string; amount: Micros }> {
  const marked = (await kv.get<CreditMarkerRecord>(keys.creditMarker(marker))).value!;
  const entry = (await kv.get<LedgerEntry>(keys.ledgerEntry(marked.appId, marked.entryId))).value!;
  return { appId: marked.appId, amount: entry.amount };
}

/**
 * A reversal of a payment that was refunded instead of credited: usually the events of that refund
 * itself. Nothing was credited, so nothing is taken; but if that refund failed or was canceled,
 * the payer has neither the credits nor the money: the refund is owed again, and made again.
 */
async function neverCredited(
  deps: Deps,
  event: Stripe.Event,
  reversal: Reversal,
  sessionId: string,
): Promise<ReversalOutcome> {
  if (!reversal.undone || reversal.kind !== "refund") return { status: "never_credited" };
  const again = await deps.refundAgainAfterFailure(sessionId, {
    refundId: reversal.id,
    status: reversal.because,
    stripeEvent: event.id,
    type: event.type,
  });
  if (again.status === "superseded") return { status: "never_credited" };
  return { status: "refunded_again", refundId: again.refundId };
}

/**
 * The refund events (one Refund object each, sent for every refund since API version
 * 2024-10-28.acacia). A refund is taken back whatever its status, and given back if it failed or
 * was canceled.
 */
export const REFUND_EVENTS = new Set(["refund.created", "refund.updated", "refund.failed"]);

const UNDONE_REFUND = new Set(["failed", "canceled"]);

export function takeBackRefund(
  deps: Deps,
  event: Stripe.Event,
  refund: Stripe.Refund,
): Promise<ReversalOutcome> {
  return takeBack(deps, event, {
    id: refund.id,
    kind: "refund",
    paymentIntent: idOf(refund.payment_intent),
    cents: refund.amount,
    currency: refund.currency,
    undone: UNDONE_REFUND.has(refund.status ?? ""),
    because: refund.status ?? "",
  });
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
  return await takeBack(deps, event, {
    id: dispute.id,
    kind: "chargeback",
    paymentIntent: idOf(dispute.payment_intent),
    cents: dispute.amount,
    currency: dispute.currency,
    undone: event.type === "charge.dispute.funds_reinstated" || dispute.status === "won",
    because: "won",
  });
}
