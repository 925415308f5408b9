/**
 * The wallet engine: the only code that commits wallets, reservations, ledger entries and usage
 * records. What each batch does is decided by the pure `planBatch` (plan_batch.ts); the public
 * types are in wallet_types.ts.
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
  type RateLimitOverrides,
  type RateLimits,
  type RateWindowsRecord,
  type ReservationRecord,
  type SpendCapsRecord,
  type SpendCounter,
  type WalletRecord,
} from "@/lib/db.ts";
import { randomToken } from "@/lib/core/mod.ts";
import { RateWindows } from "./ratelimit.ts";
import {
  countersNeeded,
  guardId,
  keyGuards,
  type Op,
  planBatch,
  refuseRevokedKeys,
  type Settler,
  takeBatch,
} from "./plan_batch.ts";
import {
  type CreditInput,
  type CreditResult,
  type ReleaseResult,
  type RenewResult,
  type ReserveInput,
  type ReserveResult,
  type SettleInput,
  type SettleResult,
  WalletNotFoundError,
  type WalletOptions,
  type WalletStats,
  WalletUnavailableError,
} from "./wallet_types.ts";

interface KnownWallet {
  entry: Deno.KvEntry<WalletRecord>;
  reservations: Map<string, ReservationRecord>;
  rateWindows: Deno.KvEntryMaybe<RateWindowsRecord>;
  rateOverrides: Deno.KvEntryMaybe<RateLimitOverrides>;
  spendCaps: Deno.KvEntryMaybe<SpendCapsRecord>;
}

/** A commit applied but whose versionstamp we never saw: nothing may be cached from it. */
const UNKNOWN_VERSION = "";
/** How long an app whose remembered wallet proved stale is read before each batch. */
const CONTENDED_MS = 1_000;
/** Wallets remembered at most; past it the memory is dropped and rebuilt by reads. */
const MAX_KNOWN_WALLETS = 10_000;
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
  /** Per app: the wallet entry as our last commit left it, and the reservations we know to be live. */
  readonly #known = new Map<string, KnownWallet>();
  /** Apps whose remembered wallet was recently found stale: read them first until then. */
  readonly #contendedUntil = new Map<string, number>();
  readonly #leaseMs: number;
  readonly #maxBatch: number;
  readonly #maxAttempts: number;
  readonly #now: () => number;
  readonly #rateLimits: RateLimits | null;
  readonly #onMoneyMoved: ((appId: string) => void) | undefined;

  constructor(kv: Deno.Kv, options: WalletOptions) {
    this.#kv = kv;
    this.#leaseMs = options.leaseMs;
    this.#maxBatch = options.maxBatch ?? 128;
    this.#maxAttempts = options.maxAttempts ?? 40;
    this.#now = options.now ?? Date.now;
    this.#rateLimits = options.rateLimits ?? null;
    this.#onMoneyMoved = options.onMoneyMoved;
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

  renew(appId: string, reservationId: string): Promise<RenewResult> {
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
    // Trust what our own last commit left, if we have it, unless another process has been writing
    // this wallet lately: then the memory is mostly stale and each try would cost a failed commit.
    let useMemory = (this.#contendedUntil.get(appId) ?? 0) <= this.#now();
    let commitFailed = false;
    for (let attempt = 1;; attempt++) {
      // The versionstamp checks catch any other writer and the retry reads afresh. The rate
      // windows and limit overrides come in the same read as the wallet: no extra round trip.
      const cached = useMemory ? this.#known.get(appId) : undefined;
      useMemory = false;
      let walletEntry, rateWindowsEntry, rateOverridesEntry, spendCapsEntry, reservations, markers;
      let counters;
      try {
        // A failed commit may be a revoked key rather than a wallet conflict: look before retrying.
        if (commitFailed) ops = await this.#refreshKeyGuards(ops);
        if (ops.length === 0) return;
        [walletEntry, rateWindowsEntry, rateOverridesEntry, spendCapsEntry] = cached
          ? [cached.entry, cached.rateWindows, cached.rateOverrides, cached.spendCaps]
          : await this.#kv.getMany<
            [WalletRecord, RateWindowsRecord, RateLimitOverrides, SpendCapsRecord]
          >([
            walletKey,
            keys.rateWindows(appId),
            keys.rateLimitOverrides(appId),
            keys.spendCaps(appId),
          ]);
        [reservations, markers] = await Promise.all([
          this.#readReservations(appId, ops, cached?.reservations),
          this.#readMarkers(ops),
        ]);
        // Like reservations, counters are read after the wallet and written only with it.
        counters = await this.#readCounters(appId, ops, spendCapsEntry.value, reservations);
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
        rate: this.#rateLimits
          ? new RateWindows(
            this.#rateLimits,
            rateOverridesEntry.value,
            rateWindowsEntry.value,
          )
          : undefined,
        spendCaps: spendCapsEntry.value,
        counters,
      });
      if (plan.unchanged) {
        // Only refusals and no-ops: nothing to write. A refusal is final when decided on a fresh
        // read; one decided from memory is checked against the store first (the memory may be
        // missing money another process has since freed).
        if (cached) continue;
        plan.resolveAll();
        return;
      }
      const atomic = this.#kv.atomic().check(walletEntry);
      // Limits changed by an operator make the commit fail, and the retry reads them.
      if (plan.rateLimited) atomic.check(rateOverridesEntry);
      // So do caps changed by an owner, even from none: a cached wallet never misses a new cap.
      atomic.check(spendCapsEntry);
      for (const marker of plan.markerChecks) {
        atomic.check({ key: keys.creditMarker(marker), versionstamp: null });
      }
      for (const guard of keyGuards(ops).values()) atomic.check(guard);
      plan.write(atomic);
      atomic.set(walletKey, plan.wallet);
      atomic.set(keys.walletBatch(appId, batchId), now, { expireIn: BATCH_MARKER_MS });

      let versionstamp: string | null;
      try {
        const result = await atomic.commit();
        versionstamp = result.ok ? result.versionstamp : null;
      } catch (error) {
        // The commit may or may not have been applied: the batch marker tells.
        this.stats.unknownOutcomes++;
        this.#known.delete(appId);
        versionstamp = await this.#batchCommitted(appId, batchId, error) ? UNKNOWN_VERSION : null;
      }
      if (versionstamp !== null) {
        this.stats.commits++;
        this.stats.opsCommitted += ops.length;
        const rateWindows = plan.rateRecord
          ? { key: keys.rateWindows(appId), value: plan.rateRecord, versionstamp }
          : rateWindowsEntry;
        this.#remember(appId, versionstamp, plan.wallet, plan.reservations, cached?.reservations, {
          rateWindows,
          rateOverrides: rateOverridesEntry,
          spendCaps: spendCapsEntry,
        });
        plan.resolveAll();
        if (this.#onMoneyMoved && ops.some((op) => op.kind === "settle" || op.kind === "credit")) {
          try {
            this.#onMoneyMoved(appId);
          } catch {
            // A listener's failure is its own; the batch is committed and answered.
          }
        }
        return;
      }
      this.#known.delete(appId);
      if (cached) this.#contendedUntil.set(appId, this.#now() + CONTENDED_MS);
      commitFailed = true;
      this.stats.conflicts++;
      if (attempt >= this.#maxAttempts) {
        throw new WalletUnavailableError(`wallet ${appId}: too many conflicts`);
      }
      await sleep(Math.random() * Math.min(50, 2 ** attempt));
    }
  }

  /** Keeps the committed wallet and the reservations this process knows are live, for the next batch. */
  #remember(
    appId: string,
    versionstamp: string,
    wallet: WalletRecord,
    touched: Map<string, ReservationRecord | null>,
    previous: Map<string, ReservationRecord> | undefined,
    rate: Pick<KnownWallet, "rateWindows" | "rateOverrides" | "spendCaps">,
  ) {
    if (versionstamp === UNKNOWN_VERSION) return;
    const reservations = previous ?? new Map<string, ReservationRecord>();
    for (const [id, r] of touched) r ? reservations.set(id, r) : reservations.delete(id);
    if (this.#known.size >= MAX_KNOWN_WALLETS && !this.#known.has(appId)) {
      this.#known.clear();
      this.#contendedUntil.clear();
    }
    this.#known.set(appId, {
      entry: { key: keys.wallet(appId), value: wallet, versionstamp },
      reservations,
      ...rate,
    });
  }

  /** Refuses the reserves whose key is gone and takes the current versionstamp of the others. */
  async #refreshKeyGuards(ops: Op[]): Promise<Op[]> {
    const guards = [...keyGuards(ops).values()];
    if (guards.length === 0) return ops;
    const entries = await this.#kv.getMany(guards.map((g) => g.key));
    return refuseRevokedKeys(
      ops,
      new Map(guards.map((g, i) => [guardId(g), entries[i].versionstamp])),
    );
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
    known: Map<string, ReservationRecord> | undefined,
  ): Promise<Map<string, ReservationRecord | null>> {
    const out = new Map<string, ReservationRecord | null>();
    const unknown: string[] = [];
    for (const op of ops) {
      if (!("reservationId" in op) || out.has(op.reservationId)) continue;
      const r = known?.get(op.reservationId);
      if (r) out.set(op.reservationId, r);
      else unknown.push(op.reservationId);
    }
    // Read after the wallet: a reservation changed since then implies a newer wallet, which fails our check.
    for (let i = 0; i < unknown.length; i += 10) {
      const chunk = [...new Set(unknown.slice(i, i + 10))];
      const entries = await this.#kv.getMany<ReservationRecord[]>(
        chunk.map((id) => keys.reservation(appId, id)),
      );
      chunk.forEach((id, j) => out.set(id, entries[j].value));
    }
    return out;
  }

  async #readCounters(
    appId: string,
    ops: Op[],
    caps: SpendCapsRecord | null,
    reservations: Map<string, ReservationRecord | null>,
  ): Promise<Map<string, SpendCounter | null>> {
    const out = new Map<string, SpendCounter | null>();
    const needed = countersNeeded(ops, caps, reservations);
    for (let i = 0; i < needed.length; i += 10) {
      const chunk = needed.slice(i, i + 10);
      const entries = await this.#kv.getMany<SpendCounter[]>(
        chunk.map((n) => keys.spendCounter(appId, n.scope, n.id)),
      );
      chunk.forEach((n, j) => out.set(`${n.scope}:${n.id}`, entries[j].value));
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

function assertAmount(amount: number) {
  if (!Number.isSafeInteger(amount) || amount < 0) {
    throw new RangeError(`invalid micro-USD amount: ${amount}`);
  }
}

function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}
