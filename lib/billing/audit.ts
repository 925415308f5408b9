import {
  keys,
  type LedgerEntry,
  type ReservationRecord,
  type UsageRecord,
  type WalletRecord,
  type WalletSliceRecord,
} from "@/lib/db.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import { creditedOf, givesBack, takesBack } from "./ledger.ts";

export interface WalletAudit {
  appId: string;
  ok: boolean;
  /**
   * False when the wallet kept changing under the audit (traffic too high): it could not be read at
   * one moment, so its books were not proved either way (`problems` says so).
   */
  consistent: boolean;
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
  usageRecords: number;
  liveReservations: number;
  expiredReservations: number;
}

export interface AuditReport {
  ok: boolean;
  apps: number;
  problems: number;
  /** Apps whose wallets could not be read at one moment (see `WalletAudit.consistent`). */
  unreadable: number;
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
 * How far behind its id's time a usage record or ledger entry may still be written: both are dated
 * when made (a charge at settle) and written by a later commit, a slice's post normally within
 * 100 ms, after a KV outage later; instances' clocks also differ by a few seconds. Records older
 * than this are summed once per scan; the newer ones are re-read with the wallet until it holds
 * still.
 */
export const AUDIT_LATE_RECORD_MARGIN_MS = 10 * 60_000;
/** Reads of the recent records and the wallet before an app is reported as unreadable. */
const MAX_TAIL_SCANS = 50;
/** Scans of all of an app's records, when the sums disagree, before it is reported unreadable. */
const MAX_FULL_SCANS = 3;

export interface AuditOptions {
  /** The moment reservations' leases are judged against (live or expired). */
  now?: number;
  lateRecordMarginMs?: number;
  maxTailScans?: number;
  maxFullScans?: number;
}

/**
 * Checks the money invariant of every wallet against its own records: the wallet's fields add up,
 * the reservations sum to `reserved`, the usage records sum to `spent`, the ledger sums to the credits
 * and to what refunds and chargebacks took back (or still owe).
 * Uncharged usage is reported beside it: the usage records' `uncharged` must sum to the app's
 * uncharged counter (what `show-app` and the dashboard show).
 * It runs beside a live service: see `auditWallet` for how it gets one consistent view.
 */
export async function auditWallets(kv: Deno.Kv, options: AuditOptions = {}): Promise<AuditReport> {
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
  let unreadable = 0;
  for await (const entry of kv.list<WalletRecord>({ prefix: keys.allWallets() })) {
    const appId = String(entry.key[1]);
    const audit = await auditWallet(kv, appId, options);
    wallets.push(audit.report);
    if (!audit.report.consistent) unreadable++;
    // The wallet as audited: the listing's copy may be older than the view the audit proved.
    const w = audit.wallet;
    totals.available += w.available;
    totals.reserved += w.reserved;
    totals.spent += w.spent;
    totals.credited += creditedOf(w);
    totals.refunded += w.refunded ?? 0;
    totals.owed += w.owed ?? 0;
    totals.uncharged += audit.uncharged;
    if (audit.uncharged > 0) unchargedApps.push({ appId, micros: audit.uncharged });
  }
  unchargedApps.sort((a, b) => b.micros - a.micros || a.appId.localeCompare(b.appId));
  const problems = wallets.reduce((n, w) => n + w.problems.length, 0);
  return {
    ok: problems === 0,
    apps: wallets.length,
    problems,
    unreadable,
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

/** What the audit adds up of an app's usage records and ledger entries (never the records). */
interface RecordSums {
  usageRecords: number;
  cost: Micros;
  uncharged: Micros;
  ledgerEntries: number;
  credits: Micros;
  /** Taken back by refunds and chargebacks, less what reversals gave back. */
  takenBack: Micros;
  starter: Micros;
  topUps: Micros;
}

/** The wallet, its slices, reservations and uncharged counter, and the recent records, at one moment. */
interface TailView {
  wallet: WalletRecord;
  slices: WalletSliceRecord[];
  reservations: { count: number; amount: Micros; expired: number };
  countedUncharged: Micros;
  recent: RecordSums;
}

/**
 * Audits one wallet at one moment (P): the wallet, its slices, reservations and uncharged counter
 * as one commit left them, against every usage record and ledger entry written by then.
 *
 * KV gives no snapshot across reads, so the view is proved instead: every commit that writes a
 * usage record or ledger entry, a reservation or the uncharged counter also writes the wallet or one
 * of its slices, so when their versionstamps are the same on both sides of the reads, nothing
 * between was written. Reading all of a large app's records takes seconds, longer than a busy
 * wallet holds still, so the records are split at the audit's start less
 * `AUDIT_LATE_RECORD_MARGIN_MS`: the older part is summed once (streamed, never held), the recent
 * part is re-read with the wallet until the wallet holds still across it (small, so it does soon).
 *
 * A record can still land in the older part after it was summed (written later than the margin,
 * after a long KV outage). Records are only ever added, so such a record leaves the older sums
 * short and the check fails: a failing check is never believed from one scan. All records are read
 * again, and problems are reported only once two scans in a row found the older part unchanged. A
 * clean result cannot hide a late record unless a real error offsets it to the micro-dollar in
 * every sum it touches. When the wallet never holds still for the recent part, or the older part
 * keeps changing, the app is reported unreadable (`consistent: false`) rather than guessed at.
 */
async function auditWallet(kv: Deno.Kv, appId: string, options: AuditOptions) {
  const now = options.now ?? Date.now();
  const cutoff = Date.now() - (options.lateRecordMarginMs ?? AUDIT_LATE_RECORD_MARGIN_MS);
  const maxTailScans = options.maxTailScans ?? MAX_TAIL_SCANS;
  // Two at least: a failing check is believed only when a second scan finds the same older part.
  const maxFullScans = Math.max(2, options.maxFullScans ?? MAX_FULL_SCANS);
  let previousOlder: RecordSums | null = null;
  let last: ReturnType<typeof judge> | null = null;
  for (let scan = 1; scan <= maxFullScans; scan++) {
    const older = await sumRecords(kv, appId, { before: cutoff });
    const view = await readStill(kv, appId, { cutoff, now, maxScans: maxTailScans });
    if (!view.still) {
      return judge(appId, view, older, [
        `could not get a consistent view: the wallet changed during each of ${maxTailScans} ` +
        `reads of its recent records (traffic too high); run the audit again`,
      ]);
    }
    last = judge(appId, view, older, []);
    if (last.report.ok) return last;
    if (previousOlder && sameSums(previousOlder, older)) return last;
    previousOlder = older;
  }
  return judge(appId, last!.view, previousOlder!, [
    `could not get a consistent view: older records kept being written during ${maxFullScans} ` +
    `scans (traffic too high, or records landing late); run the audit again`,
  ]);
}

/**
 * Reads the wallet, its slices, reservations, uncharged counter and the records from `cutoff` on,
 * again until the wallet and slices are unchanged across one read (`still`), at most `maxScans`.
 */
async function readStill(
  kv: Deno.Kv,
  appId: string,
  { cutoff, now, maxScans }: { cutoff: number; now: number; maxScans: number },
): Promise<TailView & { still: boolean }> {
  for (let scan = 1;; scan++) {
    const before = await kv.get<WalletRecord>(keys.wallet(appId));
    const wallet = before.value;
    if (!wallet) throw new Error(`no wallet for app ${appId}`);
    // Slices post charges without touching the wallet: they are read on both sides of the usage.
    const slicesBefore = await entries<WalletSliceRecord>(kv, keys.appWalletSlices(appId));
    const reservations = await sumReservations(kv, appId, now);
    const recent = await sumRecords(kv, appId, { from: cutoff });
    const counted = await kv.get<Deno.KvU64>(keys.appUncharged(appId));
    const slicesAfter = await entries<WalletSliceRecord>(kv, keys.appWalletSlices(appId));
    const after = await kv.get(keys.wallet(appId));
    const still = after.versionstamp === before.versionstamp &&
      versionsOf(slicesBefore) === versionsOf(slicesAfter);
    if (still || scan >= maxScans) {
      return {
        still,
        wallet,
        slices: slicesAfter.map((e) => e.value),
        reservations,
        countedUncharged: Number(counted.value?.value ?? 0n),
        recent,
      };
    }
    // A little apart, so that reads do not keep falling on a busy wallet's commits in step.
    await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(100, 5 * scan)));
  }
}

function judge(
  appId: string,
  view: TailView,
  older: RecordSums,
  unreadable: string[],
) {
  const { wallet: w, slices } = view;
  const records = addSums(older, view.recent);
  const problems: string[] = [...unreadable];
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
    view.reservations.amount + sum(slices, (s) => s.granted),
    w.reserved,
  );
  expect(
    "sum of usage records vs spent (wallet and slices)",
    records.cost,
    w.spent + sum(slices, (s) => s.spent),
  );
  for (const s of slices) {
    if (s.spent > s.granted) problems.push(`slice ${s.id} spent more than it was granted`);
  }
  expect("sum of credit ledger vs credits", records.credits, credited);
  // A reversal gives back what a refund or chargeback took: the net matches refunded + owed.
  expect("refund and chargeback ledger vs refunded + owed", records.takenBack, refunded + owed);
  expect("starter ledger vs starter", records.starter, w.starter);
  expect(
    "sum of usage uncharged vs the app's uncharged counter",
    records.uncharged,
    view.countedUncharged,
  );
  expect("top-up ledger vs top-ups", records.topUps, w.topUps);
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
  const { count, expired } = view.reservations;
  const report: WalletAudit = {
    appId,
    ok: problems.length === 0,
    consistent: unreadable.length === 0,
    problems,
    available: formatUsd(w.available),
    reserved: formatUsd(w.reserved),
    spent: formatUsd(w.spent),
    credited: formatUsd(credited),
    refunded: formatUsd(refunded),
    owed: formatUsd(owed),
    uncharged: formatUsd(records.uncharged),
    usageRecords: records.usageRecords,
    liveReservations: count - expired,
    expiredReservations: expired,
  };
  return { report, wallet: w, uncharged: records.uncharged, view };
}

/** The smallest id `newId(prefix, ms)` can make: records before it were made before `ms`. */
function idAt(prefix: string, ms: number): string {
  return `${prefix}_${Math.max(0, ms).toString(36).padStart(10, "0")}`;
}

/**
 * Sums an app's usage records and ledger entries made before `before`, or from `from` on: the two
 * ranges split every record between them (ids begin with their time).
 */
async function sumRecords(
  kv: Deno.Kv,
  appId: string,
  range: { before: number } | { from: number },
): Promise<RecordSums> {
  const sums = emptySums();
  const within = (prefix: Deno.KvKey, idPrefix: string): Deno.KvListSelector =>
    "before" in range
      ? { prefix, end: [...prefix, idAt(idPrefix, range.before)] }
      : { prefix, start: [...prefix, idAt(idPrefix, range.from)] };
  for await (
    const { value: u } of kv.list<UsageRecord>(within(keys.appUsage(appId), "use"), {
      batchSize: 500,
    })
  ) {
    sums.usageRecords++;
    sums.cost += u.cost;
    sums.uncharged += u.uncharged;
  }
  for await (
    const { value: l } of kv.list<LedgerEntry>(within(keys.ledger(appId), "led"), {
      batchSize: 500,
    })
  ) {
    sums.ledgerEntries++;
    if (takesBack(l.kind)) sums.takenBack += l.amount;
    else if (givesBack(l.kind)) sums.takenBack -= l.amount;
    else sums.credits += l.amount;
    if (l.kind === "starter") sums.starter += l.amount;
    if (l.kind === "top_up") sums.topUps += l.amount;
  }
  return sums;
}

async function sumReservations(kv: Deno.Kv, appId: string, now: number) {
  const out = { count: 0, amount: 0, expired: 0 };
  for await (
    const { value: r } of kv.list<ReservationRecord>({ prefix: keys.appReservations(appId) })
  ) {
    out.count++;
    out.amount += r.amount;
    if (r.leaseUntil <= now) out.expired++;
  }
  return out;
}

function emptySums(): RecordSums {
  return {
    usageRecords: 0,
    cost: 0,
    uncharged: 0,
    ledgerEntries: 0,
    credits: 0,
    takenBack: 0,
    starter: 0,
    topUps: 0,
  };
}

function addSums(a: RecordSums, b: RecordSums): RecordSums {
  const out = emptySums();
  for (const k of Object.keys(out) as (keyof RecordSums)[]) out[k] = a[k] + b[k];
  return out;
}

function sameSums(a: RecordSums, b: RecordSums): boolean {
  return (Object.keys(a) as (keyof RecordSums)[]).every((k) => a[k] === b[k]);
}

async function entries<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<Deno.KvEntry<T>[]> {
  const out: Deno.KvEntry<T>[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry);
  return out;
}

function versionsOf(list: Deno.KvEntry<unknown>[]): string {
  return list.map((e) => e.versionstamp).join(",");
}

function sum<T>(items: T[], f: (item: T) => number): number {
  return items.reduce((n, item) => n + f(item), 0);
}
