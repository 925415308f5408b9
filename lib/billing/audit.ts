import {
  keys,
  type LedgerEntry,
  type ReservationRecord,
  type UsageRecord,
  type WalletRecord,
  type WalletSliceRecord,
} from "@/lib/db.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { creditedOf, givesBack, takesBack } from "./ledger.ts";

export interface WalletAudit {
  appId: string;
  ok: boolean;
  problems: string[];
  available: string;
  reserved: string;
  spent: string;
  credited: string;
  /** Taken back for refunds and chargebacks; `owed`: still to be taken (outside the invariant). */
  refunded: string;
  owed: string;
  /** Usage beyond what reservations and the balance covered, never charged: outside the invariant. */
  uncharged: string;
  liveReservations: number;
  expiredReservations: number;
}

export interface AuditReport {
  ok: boolean;
  apps: number;
  problems: number;
  totals: {
    available: string;
    reserved: string;
    spent: string;
    credited: string;
    refunded: string;
    owed: string;
    uncharged: string;
  };
  /** The apps with uncharged usage, most first. */
  unchargedApps: { appId: string; uncharged: string }[];
  wallets: WalletAudit[];
}

/**
 * Checks the money invariant of every wallet against its own records: the wallet's fields add up,
 * the reservations sum to `reserved`, the usage records sum to `spent`, the ledger sums to the credits
 * and to what refunds and chargebacks took back (or still owe).
 * Uncharged usage is reported beside it: the usage records' `uncharged` must sum to the app's
 * uncharged counter (what `show-app` and the dashboard show).
 */
export async function auditWallets(kv: Deno.Kv, now = Date.now()): Promise<AuditReport> {
  const wallets: WalletAudit[] = [];
  const totals = {
    available: 0,
    reserved: 0,
    spent: 0,
    credited: 0,
    refunded: 0,
    owed: 0,
    uncharged: 0,
  };
  const unchargedApps: { appId: string; micros: number }[] = [];
  for await (const entry of kv.list<WalletRecord>({ prefix: keys.allWallets() })) {
    const appId = String(entry.key[1]);
    const audit = await auditWallet(kv, appId, now);
    wallets.push(audit.report);
    totals.available += entry.value.available;
    totals.reserved += entry.value.reserved;
    totals.spent += entry.value.spent;
    totals.credited += creditedOf(entry.value);
    totals.refunded += entry.value.refunded ?? 0;
    totals.owed += entry.value.owed ?? 0;
    totals.uncharged += audit.uncharged;
    if (audit.uncharged > 0) unchargedApps.push({ appId, micros: audit.uncharged });
  }
  unchargedApps.sort((a, b) => b.micros - a.micros || a.appId.localeCompare(b.appId));
  const problems = wallets.reduce((n, w) => n + w.problems.length, 0);
  return {
    ok: problems === 0,
    apps: wallets.length,
    problems,
    totals: {
      available: formatUsd(totals.available),
      reserved: formatUsd(totals.reserved),
      spent: formatUsd(totals.spent),
      credited: formatUsd(totals.credited),
      refunded: formatUsd(totals.refunded),
      owed: formatUsd(totals.owed),
      uncharged: formatUsd(totals.uncharged),
    },
    unchargedApps: unchargedApps.map((a) => ({ appId: a.appId, uncharged: formatUsd(a.micros) })),
    wallets,
  };
}

async function auditWallet(kv: Deno.Kv, appId: string, now = Date.now()) {
  // One consistent moment is needed; retry while a batch commits between the reads.
  for (;;) {
    const before = await kv.get<WalletRecord>(keys.wallet(appId));
    const w = before.value;
    if (!w) throw new Error(`no wallet for app ${appId}`);
    const reservations = await collect<ReservationRecord>(kv, keys.appReservations(appId));
    // Slices post charges without touching the wallet: they are read on both sides of the usage.
    const slicesBefore = await entries<WalletSliceRecord>(kv, keys.appWalletSlices(appId));
    const usage = await collect<UsageRecord>(kv, keys.appUsage(appId));
    const ledger = await collect<LedgerEntry>(kv, keys.ledger(appId));
    const counted = await kv.get<Deno.KvU64>(keys.appUncharged(appId));
    const slicesAfter = await entries<WalletSliceRecord>(kv, keys.appWalletSlices(appId));
    const after = await kv.get(keys.wallet(appId));
    if (after.versionstamp !== before.versionstamp) continue;
    if (versionsOf(slicesBefore) !== versionsOf(slicesAfter)) continue;
    const slices = slicesAfter.map((e) => e.value);

    const problems: string[] = [];
    const credited = creditedOf(w);
    const refunded = w.refunded ?? 0;
    const owed = w.owed ?? 0;
    const expect = (label: string, actual: number, wanted: number) => {
      if (actual !== wanted) {
        problems.push(`${label}: ${formatUsd(actual)} != ${formatUsd(wanted)}`);
      }
    };
    expect(
      "available + reserved + spent vs credits less refunded",
      w.available + w.reserved + w.spent,
      credited - refunded,
    );
    expect(
      "sum of reservations and slices vs reserved",
      sum(reservations, (r) => r.amount) + sum(slices, (s) => s.granted),
      w.reserved,
    );
    expect(
      "sum of usage records vs spent (wallet and slices)",
      sum(usage, (u) => u.cost),
      w.spent + sum(slices, (s) => s.spent),
    );
    for (const s of slices) {
      if (s.spent > s.granted) problems.push(`slice ${s.id} spent more than it was granted`);
    }
    const credits = ledger.filter((l) => !takesBack(l.kind) && !givesBack(l.kind));
    expect("sum of credit ledger vs credits", sum(credits, (l) => l.amount), credited);
    // A reversal gives back what a refund or chargeback took: the net matches refunded + owed.
    expect(
      "refund and chargeback ledger vs refunded + owed",
      sum(ledger, (l) => takesBack(l.kind) ? l.amount : givesBack(l.kind) ? -l.amount : 0),
      refunded + owed,
    );
    expect(
      "starter ledger vs starter",
      sum(ledger.filter((l) => l.kind === "starter"), (l) => l.amount),
      w.starter,
    );
    const uncharged = sum(usage, (u) => u.uncharged);
    expect(
      "sum of usage uncharged vs the app's uncharged counter",
      uncharged,
      Number(counted.value?.value ?? 0n),
    );
    expect(
      "top-up ledger vs top-ups",
      sum(ledger.filter((l) => l.kind === "top_up"), (l) => l.amount),
      w.topUps,
    );
    for (
      const [label, value] of Object.entries({
        available: w.available,
        reserved: w.reserved,
        spent: w.spent,
        refunded,
        owed,
      })
    ) {
      if (!Number.isSafeInteger(value) || value < 0) problems.push(`${label} is ${value}`);
    }
    const expired = reservations.filter((r) => r.leaseUntil <= now).length;
    const report: WalletAudit = {
      appId,
      ok: problems.length === 0,
      problems,
      available: formatUsd(w.available),
      reserved: formatUsd(w.reserved),
      spent: formatUsd(w.spent),
      credited: formatUsd(credited),
      refunded: formatUsd(refunded),
      owed: formatUsd(owed),
      uncharged: formatUsd(uncharged),
      liveReservations: reservations.length - expired,
      expiredReservations: expired,
    };
    return { report, wallet: w, uncharged };
  }
}

async function entries<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<Deno.KvEntry<T>[]> {
  const out: Deno.KvEntry<T>[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry);
  return out;
}

function versionsOf(list: Deno.KvEntry<unknown>[]): string {
  return list.map((e) => e.versionstamp).join(",");
}

async function collect<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<T[]> {
  const out: T[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry.value);
  return out;
}

function sum<T>(items: T[], f: (item: T) => number): number {
  return items.reduce((n, item) => n + f(item), 0);
}
