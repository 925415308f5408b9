/**
 * The only code that writes wallets, reservations, ledger entries and usage records.
 *
 * Hot wallets: every operation on one app's wallet inside this process is queued and the queue is
 * group-committed: one read of the wallet, every pending operation decided in order against the
 * running balance (a reserve that does not fit is refused while the others proceed), one atomic
 * commit guarded by a single check on the wallet's versionstamp. Conflicts therefore only come from
 * other processes, and are retried with bounded, jittered backoff.
 *
 * Why one check is enough: every batch rewrites the wallet entry, and every change to a reservation
 * happens in a batch. Reservations are read after the wallet, so a reservation changed by another
 * process after our wallet read implies a newer wallet versionstamp, and our commit fails its check.
 */
import {
  keys,
  type LedgerEntry,
  type ReservationRecord,
  type UsageRecord,
  utcDay,
  type WalletRecord,
} from "./db.ts";
import { newId, randomToken } from "./ids.ts";
import type { Micros } from "./money.ts";

export interface ReserveInput {
  amount: Micros;
  keyId: string;
  requestId: string;
  model: string;
}

export type ReserveResult =
  | { ok: true; reservation: ReservationRecord; available: Micros }
  | { ok: false; available: Micros; reserved: Micros };

/** Usage of a settled request; cost is what the usage is worth, not yet what is charged. */
export type SettleInput =
  & Omit<UsageRecord, "id" | "appId" | "cost" | "uncharged" | "reserved" | "createdAt">
  & {
    cost: Micros;
  };

export type SettleResult =
  | { settled: true; charged: Micros; uncharged: Micros; available: Micros; usage: UsageRecord }
  /** The reservation was already released (by the sweeper): nothing is charged twice. */
  | { settled: false; available: Micros };

export interface CreditInput {
  amount: Micros;
  kind: LedgerEntry["kind"];
  reason: string;
  reference?: string | null;
  /** A key that is written with the credit; a second credit with the same marker changes nothing. */
  marker?: string;
}

export type CreditResult =
  | { credited: true; entry: LedgerEntry; available: Micros }
  | { credited: false; duplicate: true; available: Micros };

export type ReleaseResult = { released: boolean; available: Micros };

export class WalletNotFoundError extends Error {
  constructor(appId: string) {
    super(`no wallet for app ${appId}`);
  }
}

export class WalletUnavailableError extends Error {}

type Op =
  | { kind: "reserve"; input: ReserveInput; done: Settler<ReserveResult> }
  | { kind: "settle"; reservationId: string; input: SettleInput; done: Settler<SettleResult> }
  | {
    kind: "release";
    reservationId: string;
    onlyIfExpiredAt?: number;
    done: Settler<ReleaseResult>;
  }
  | {
    kind: "renew";
    reservationId: string;
    done: Settler<{ renewed: boolean; leaseUntil: number }>;
  }
  | { kind: "credit"; input: CreditInput; done: Settler<CreditResult> };

interface Settler<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

export interface WalletOptions {
  /** How long a reservation is held before the sweeper may release it. */
  leaseMs: number;
  /** Operations committed together at most (mutations stay well under KV's 1000 per commit). */
  maxBatch?: number;
  /** Commit attempts before giving up under conflicts or KV errors. */
  maxAttempts?: number;
  now?: () => number;
}

export interface WalletStats {
  commits: number;
  conflicts: number;
  unknownOutcomes: number;
  readFailures: number;
  opsCommitted: number;
}

/** KV allows 10 checks per atomic operation on self-hosted denokv; one is the wallet's. */
const MAX_MARKER_CHECKS = 9;
/** How long a batch marker is kept to resolve a commit whose outcome was unknown. */
const BATCH_MARKER_MS = 60 * 60 * 1000;

export class Wallets {
  readonly stats: WalletStats = {
    commits: 0,
    conflicts: 0,
    unknownOutcomes: 0,
    readFailures: 0,
    opsCommitted: 0,
  };
  readonly #kv: Deno.Kv;
  readonly #queues = new Map<string, Op[]>();
  readonly #leaseMs: number;
  readonly #maxBatch: number;
  readonly #maxAttempts: number;
  readonly #now: () => number;

  constructor(kv: Deno.Kv, options: WalletOptions) {
    this.#kv = kv;
    this.#leaseMs = options.leaseMs;
    this.#maxBatch = options.maxBatch ?? 64;
    this.#maxAttempts = options.maxAttempts ?? 40;
    this.#now = options.now ?? Date.now;
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }

  reserve(appId: string, input: ReserveInput): Promise<ReserveResult> {
    assertAmount(input.amount);
    return this.#enqueue(appId, (done) => ({ kind: "reserve", input, done }));
  }

  settle(appId: string, reservationId: string, input: SettleInput): Promise<SettleResult> {
    assertAmount(input.cost);
    return this.#enqueue(appId, (done) => ({ kind: "settle", reservationId, input, done }));
  }

  release(appId: string, reservationId: string, onlyIfExpiredAt?: number): Promise<ReleaseResult> {
    return this.#enqueue(
      appId,
      (done) => ({ kind: "release", reservationId, onlyIfExpiredAt, done }),
    );
  }

  renew(appId: string, reservationId: string): Promise<{ renewed: boolean; leaseUntil: number }> {
    return this.#enqueue(appId, (done) => ({ kind: "renew", reservationId, done }));
  }

  credit(appId: string, input: CreditInput): Promise<CreditResult> {
    assertAmount(input.amount);
    if (input.amount === 0) throw new RangeError("a credit must be positive");
    return this.#enqueue(appId, (done) => ({ kind: "credit", input, done }));
  }

  /** Resolves once every queued operation has been committed or refused. */
  async drain(): Promise<void> {
    while (this.#queues.size > 0) await new Promise((r) => setTimeout(r, 1));
  }

  #enqueue<T>(appId: string, make: (done: Settler<T>) => Op): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const op = make({ resolve, reject } as Settler<T>);
      const queue = this.#queues.get(appId);
      if (queue) {
        queue.push(op);
        return;
      }
      this.#queues.set(appId, [op]);
      // Let the operations of this tick join the first batch.
      queueMicrotask(() => this.#drainQueue(appId));
    });
  }

  async #drainQueue(appId: string): Promise<void> {
    const queue = this.#queues.get(appId)!;
    while (queue.length > 0) {
      const batch = takeBatch(queue, this.#maxBatch);
      try {
        await this.#commitBatch(appId, batch);
      } catch (error) {
        for (const op of batch) op.done.reject(error);
      }
    }
    this.#queues.delete(appId);
  }

  async #commitBatch(appId: string, ops: Op[]): Promise<void> {
    const walletKey = keys.wallet(appId);
    for (let attempt = 1;; attempt++) {
      let walletEntry, reservations, markers;
      try {
        walletEntry = await this.#kv.get<WalletRecord>(walletKey);
        reservations = await this.#readReservations(appId, ops);
        markers = await this.#readMarkers(ops);
      } catch (error) {
        // A failed read changed nothing: retry it rather than fail (and lose) a whole batch.
        this.stats.readFailures++;
        if (attempt >= this.#maxAttempts) {
          throw new WalletUnavailableError(`wallet ${appId}: KV reads failing`, { cause: error });
        }
        await sleep(Math.random() * Math.min(50, 2 ** attempt));
        continue;
      }
      if (walletEntry.value === null || walletEntry.versionstamp === null) {
        throw new WalletNotFoundError(appId);
      }

      const batchId = randomToken(96);
      const now = this.#now();
      const plan = planBatch({
        appId,
        ops,
        wallet: walletEntry.value,
        reservations,
        markers,
        now,
        leaseMs: this.#leaseMs,
      });
      const atomic = this.#kv.atomic().check(walletEntry);
      for (const marker of plan.markerChecks) {
        atomic.check({ key: keys.creditMarker(marker), versionstamp: null });
      }
      plan.write(atomic);
      atomic.set(walletKey, plan.wallet);
      atomic.set(keys.walletBatch(appId, batchId), now, { expireIn: BATCH_MARKER_MS });

      let committed: boolean;
      try {
        committed = (await atomic.commit()).ok;
      } catch (error) {
        // The commit may or may not have been applied: the batch marker tells.
        this.stats.unknownOutcomes++;
        committed = await this.#batchCommitted(appId, batchId, error);
      }
      if (committed) {
        this.stats.commits++;
        this.stats.opsCommitted += ops.length;
        plan.resolveAll();
        return;
      }
      this.stats.conflicts++;
      if (attempt >= this.#maxAttempts) {
        throw new WalletUnavailableError(`wallet ${appId}: too many conflicts`);
      }
      await sleep(Math.random() * Math.min(50, 2 ** attempt));
    }
  }

  async #batchCommitted(appId: string, batchId: string, cause: unknown): Promise<boolean> {
    for (let i = 0; i < 5; i++) {
      try {
        const marker = await this.#kv.get(keys.walletBatch(appId, batchId));
        return marker.versionstamp !== null;
      } catch {
        await sleep(20 * (i + 1));
      }
    }
    throw new WalletUnavailableError(`wallet ${appId}: commit outcome unknown`, { cause });
  }

  async #readReservations(
    appId: string,
    ops: Op[],
  ): Promise<Map<string, Deno.KvEntryMaybe<ReservationRecord>>> {
    const ids = [...new Set(ops.flatMap((op) => "reservationId" in op ? [op.reservationId] : []))];
    const out = new Map<string, Deno.KvEntryMaybe<ReservationRecord>>();
    for (let i = 0; i < ids.length; i += 10) {
      const chunk = ids.slice(i, i + 10);
      const entries = await this.#kv.getMany<ReservationRecord[]>(
        chunk.map((id) => keys.reservation(appId, id)),
      );
      chunk.forEach((id, j) => out.set(id, entries[j]));
    }
    return out;
  }

  async #readMarkers(ops: Op[]): Promise<Set<string>> {
    const markers = ops.flatMap((op) =>
      op.kind === "credit" && op.input.marker ? [op.input.marker] : []
    );
    const present = new Set<string>();
    if (markers.length === 0) return present;
    const entries = await this.#kv.getMany(markers.map((m) => keys.creditMarker(m)));
    entries.forEach((e, i) => e.versionstamp !== null && present.add(markers[i]));
    return present;
  }
}

/** Takes the next operations that fit in one commit: the batch size and the check budget. */
function takeBatch(queue: Op[], maxBatch: number): Op[] {
  let markerChecks = 0;
  let n = 0;
  while (n < queue.length && n < maxBatch) {
    const op = queue[n];
    if (op.kind === "credit" && op.input.marker) {
      if (markerChecks === MAX_MARKER_CHECKS) break;
      markerChecks++;
    }
    n++;
  }
  return queue.splice(0, n);
}

interface PlanInput {
  appId: string;
  ops: Op[];
  wallet: WalletRecord;
  reservations: Map<string, Deno.KvEntryMaybe<ReservationRecord>>;
  markers: Set<string>;
  now: number;
  leaseMs: number;
}

/**
 * Decides every operation of a batch in order against a running copy of the wallet. Pure: the
 * writes and the answers are only produced here, applied by the caller once the commit succeeded.
 */
export function planBatch(input: PlanInput) {
  const { appId, now } = input;
  const wallet = { ...input.wallet };
  const live = new Map<string, ReservationRecord | null>();
  for (const [id, entry] of input.reservations) live.set(id, entry.value);
  const markersSeen = new Set(input.markers);
  const markerChecks: string[] = [];
  const writes: ((atomic: Deno.AtomicOperation) => void)[] = [];
  const answers: (() => void)[] = [];

  const dropReservation = (r: ReservationRecord) => {
    live.set(r.id, null);
    writes.push((a) =>
      a.delete(keys.reservation(appId, r.id)).delete(
        keys.reservationExpiry(r.leaseUntil, appId, r.id),
      )
    );
  };

  for (const op of input.ops) {
    switch (op.kind) {
      case "reserve": {
        const { amount } = op.input;
        if (wallet.available < amount) {
          const answer = {
            ok: false as const,
            available: wallet.available,
            reserved: wallet.reserved,
          };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        wallet.available -= amount;
        wallet.reserved += amount;
        const reservation: ReservationRecord = {
          id: newId("res", now),
          appId,
          keyId: op.input.keyId,
          requestId: op.input.requestId,
          model: op.input.model,
          amount,
          createdAt: now,
          leaseUntil: now + input.leaseMs,
        };
        live.set(reservation.id, reservation);
        writes.push((a) =>
          a.set(keys.reservation(appId, reservation.id), reservation)
            .set(keys.reservationExpiry(reservation.leaseUntil, appId, reservation.id), true)
        );
        const answer = { ok: true as const, reservation, available: wallet.available };
        answers.push(() => op.done.resolve(answer));
        break;
      }
      case "settle": {
        const r = live.get(op.reservationId);
        if (!r) {
          const answer = { settled: false as const, available: wallet.available };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        const charged = Math.min(op.input.cost, r.amount + wallet.available);
        wallet.reserved -= r.amount;
        wallet.available += r.amount - charged;
        wallet.spent += charged;
        dropReservation(r);
        const usage: UsageRecord = {
          ...op.input,
          id: newId("use", now),
          appId,
          cost: charged,
          uncharged: op.input.cost - charged,
          reserved: r.amount,
          createdAt: now,
        };
        writes.push((a) => {
          a.set(keys.usage(appId, usage.id), usage).set(keys.apiKeyLastUsed(usage.keyId), now);
          if (charged > 0) {
            a.sum(keys.dailySpend(appId, utcDay(now)), BigInt(charged));
            a.sum(keys.modelSpend(appId, usage.model), BigInt(charged));
          }
        });
        const answer = {
          settled: true as const,
          charged,
          uncharged: usage.uncharged,
          available: wallet.available,
          usage,
        };
        answers.push(() => op.done.resolve(answer));
        break;
      }
      case "release": {
        const r = live.get(op.reservationId);
        const releasable = r &&
          (op.onlyIfExpiredAt === undefined || r.leaseUntil <= op.onlyIfExpiredAt);
        if (releasable) {
          wallet.reserved -= r.amount;
          wallet.available += r.amount;
          dropReservation(r);
        }
        const answer = { released: Boolean(releasable), available: wallet.available };
        answers.push(() => op.done.resolve(answer));
        break;
      }
      case "renew": {
        const r = live.get(op.reservationId);
        if (!r) {
          answers.push(() => op.done.resolve({ renewed: false, leaseUntil: 0 }));
          break;
        }
        const renewed = { ...r, leaseUntil: now + input.leaseMs };
        live.set(r.id, renewed);
        writes.push((a) =>
          a.delete(keys.reservationExpiry(r.leaseUntil, appId, r.id))
            .set(keys.reservation(appId, r.id), renewed)
            .set(keys.reservationExpiry(renewed.leaseUntil, appId, r.id), true)
        );
        answers.push(() => op.done.resolve({ renewed: true, leaseUntil: renewed.leaseUntil }));
        break;
      }
      case "credit": {
        const { marker } = op.input;
        if (marker && markersSeen.has(marker)) {
          const answer = {
            credited: false as const,
            duplicate: true as const,
            available: wallet.available,
          };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        const entry: LedgerEntry = {
          id: newId("led", now),
          kind: op.input.kind,
          amount: op.input.amount,
          reason: op.input.reason,
          reference: op.input.reference ?? null,
          createdAt: now,
        };
        wallet.available += entry.amount;
        if (entry.kind === "starter") wallet.starter += entry.amount;
        else if (entry.kind === "top_up") wallet.topUps += entry.amount;
        else wallet.operatorCredits += entry.amount;
        if (marker) {
          markersSeen.add(marker);
          markerChecks.push(marker);
          writes.push((a) => a.set(keys.creditMarker(marker), { appId, entryId: entry.id }));
        }
        writes.push((a) => a.set(keys.ledgerEntry(appId, entry.id), entry));
        const answer = { credited: true as const, entry, available: wallet.available };
        answers.push(() => op.done.resolve(answer));
        break;
      }
    }
  }

  return {
    wallet,
    markerChecks,
    write(atomic: Deno.AtomicOperation) {
      for (const w of writes) w(atomic);
    },
    resolveAll() {
      for (const a of answers) a();
    },
  };
}

function assertAmount(amount: number) {
  if (!Number.isSafeInteger(amount) || amount < 0) {
    throw new RangeError(`invalid micro-USD amount: ${amount}`);
  }
}

function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}
