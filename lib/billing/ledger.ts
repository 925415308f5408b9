/**
 * What a wallet's record and its ledger entries mean in money: what was credited, and which
 * entries take a payment back or give it back again. One place for the views, the audit and the
 * scripts.
 */
import {
  CHARGED_REQUEST_RETENTION_MS,
  type ChargedRequest,
  keys,
  type LedgerEntry,
  type UsageRecord,
  type WalletRecord,
} from "@/lib/db.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";

/** Starter credits, top-ups and operator credits: what was ever put into the wallet. */
export function creditedOf(wallet: WalletRecord): Micros {
  return wallet.starter + wallet.topUps + wallet.operatorCredits;
}

/**
 * A wallet's figures as the management API and the admin CLI show them, in USD strings, with the
 * app's usage that nothing covered (`unchargedOf`), which is not part of `spent`.
 */
export function walletFigures(wallet: WalletRecord, uncharged: Micros) {
  return {
    balance: formatUsd(wallet.available),
    reserved: formatUsd(wallet.reserved),
    spent: formatUsd(wallet.spent),
    credited: formatUsd(creditedOf(wallet)),
    refunded: formatUsd(wallet.refunded ?? 0),
    owed: formatUsd(wallet.owed ?? 0),
    uncharged: formatUsd(uncharged),
  };
}

/** A refund or a chargeback: money taken back out of the wallet (shown negative, like charges). */
export function takesBack(kind: LedgerEntry["kind"]): boolean {
  return kind === "refund" || kind === "chargeback";
}

/** A failed refund or a won dispute: what a refund or chargeback took, given back. */
export function givesBack(kind: LedgerEntry["kind"]): boolean {
  return kind === "refund_reversed" || kind === "chargeback_reversed";
}

/**
 * Writes a usage record and, for a request sent with an Idempotency-Key, in the same operation its
 * index by request id, which tells a retry of the key that the first run was charged (see
 * keys.chargedRequest). Only those: the index costs every charge a write (2.6% of a request's CPU).
 */
export function setUsage(atomic: Deno.AtomicOperation, appId: string, usage: UsageRecord) {
  atomic.set(keys.usage(appId, usage.id), usage);
  if (!usage.idempotent) return;
  const charged: ChargedRequest = { appId, usageId: usage.id, cost: usage.cost };
  atomic.set(keys.chargedRequest(usage.requestId), charged, {
    expireIn: CHARGED_REQUEST_RETENTION_MS,
  });
}
