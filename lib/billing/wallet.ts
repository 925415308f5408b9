import type { KeyGuard } from "@/lib/tenants/mod.ts";
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
  type RateLimitOverrides,
  type RateLimits,
  type RateWindowsRecord,
  type ReservationRecord,
  type UsageRecord,
  utcDay,
  type WalletRecord,
} from "@/lib/db.ts";
import { type Micros, newId, randomToken } from "@/lib/core/mod.ts";
import { type RateBreach, type RateLimitStatus, RateWindows } from "./ratelimit.ts";

export interface ReserveInput {
  amount: Micros;
  keyId: string;
  requestId: string;
  model: string;
  /** Tokens counted against the rate limit (prompt + max_tokens), corrected at settle. */
  tokens?: number;
  /**
   * The API key's index entry as the caller last saw it (possibly from a cache). The commit checks
   * it, so a key revoked anywhere fails its next reserve with KeyRevokedError at no extra read.
   */
  keyGuard?: KeyGuard;
}

/** `rate` is present when the wallets enforce rate limits. */
export type ReserveResult =
  | { ok: true; reservation: ReservationRecord; available: Micros; rate?: RateLimitStatus }
  | {
    ok: false;
    reason: "insufficient_credits";
    available: Micros;
    reserved: Micros;
    rate?: RateLimitStatus;
  }
  /** Refused for rate before money was considered: nothing reserved, nothing counted. */
  | {
    ok: false;
    reason: "rate_limited" | "rate_too_large";
    available: Micros;
    reserved: Micros;
    rate: RateLimitStatus;
    breach: RateBreach;
    /** For `rate_limited`: how long until the request would fit. */
    retryAfterMs: number;
  };

/** Usage of a settled request; cost is what the usage is worth, not yet what is charged. */
export type SettleInput =
  & Omit<UsageRecord, "id" | "appId" | "cost" | "uncharged" | "reserved" | "createdAt">
  & {
    cost: Micros;
  };

export type SettleResult =
  | {
    settled: true;
    charged: Micros;
    uncharged: Micros;
    available: Micros;
    usage: UsageRecord;
    rate?: RateLimitStatus;
  }
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

export type ReleaseResult = { released: boolean; available: Micros; rate?: RateLimitStatus };

export class WalletNotFoundError extends Error {
  constructor(appId: string) {
    super(`no wallet for app ${appId}`);
  }
}

export class WalletUnavailableError extends Error {}

/** The key guarding a reserve no longer exists: it was revoked since the caller looked it up. */
export class KeyRevokedError extends Error {}

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
  /**
   * Operations committed together at most. A settle writes 3 mutations (plus the batch's shared
   * counters), so 128 stay well under KV's 1000 mutations and 80 KiB of keys per commit.
   */
  maxBatch?: number;
  /** Commit attempts before giving up under conflicts or KV errors. */
  maxAttempts?: number;
  now?: () => number;
  /** Default requests and tokens per minute per app and key; without it nothing is rate limited. */
  rateLimits?: RateLimits;
}

export interface WalletStats {
  commits: number;
  conflicts: number;
  unknownOutcomes: number;
  readFailures: number;
  opsCommitted: number;
}

/**
 * KV allows 10 checks per atomic operation on self-hosted denokv: the wallet's, the rate-limit
 * overrides', and the rest shared by credit markers and API-key guards.
 */
const MAX_EXTRA_CHECKS = 8;
interface KnownWallet {
  entry: Deno.KvEntry<WalletRecord>;
  reservations: Map<string, ReservationRecord>;
  rateWindows: Deno.KvEntryMaybe<RateWindowsRecord>;
  rateOverrides: Deno.KvEntryMaybe<RateLimitOverrides>;
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
  /** Per app: the wallet entry as our last commit left it, and the holds we know to be live. */
  readonly #known = new Map<string, KnownWallet>();
  /** Apps whose remembered wallet was recently found stale: read them first until then. */
  readonly #contendedUntil = new Map<string, number>();
  readonly #leaseMs: number;
  readonly #maxBatch: number;
  readonly #maxAttempts: number;
  readonly #now: () => number;
  readonly #rateLimits: RateLimits | null;

  constructor(kv: Deno.Kv, options: WalletOptions) {
    this.#kv = kv;
    this.#leaseMs = options.leaseMs;
    this.#maxBatch = options.maxBatch ?? 128;
    this.#maxAttempts = options.maxAttempts ?? 40;
    this.#now = options.now ?? Date.now;
    this.#rateLimits = options.rateLimits ?? null;
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
    // Trust what our own last commit left, if we have it, unless another process has been writing
    // this wallet lately: then the memory is mostly stale and each try would cost a failed commit.
    let useMemory = (this.#contendedUntil.get(appId) ?? 0) <= this.#now();
    let commitFailed = false;
    for (let attempt = 1;; attempt++) {
      // The versionstamp checks catch any other writer and the retry reads afresh. The rate
      // windows and limit overrides come in the same read as the wallet: no extra round trip.
      const cached = useMemory ? this.#known.get(appId) : undefined;
      useMemory = false;
      let walletEntry, rateWindowsEntry, rateOverridesEntry, reservations, markers;
      try {
        // A failed commit may be a revoked key rather than a wallet conflict: look before retrying.
        if (commitFailed) ops = await this.#refreshKeyGuards(ops);
        if (ops.length === 0) return;
        [walletEntry, rateWindowsEntry, rateOverridesEntry] = cached
          ? [cached.entry, cached.rateWindows, cached.rateOverrides]
          : await this.#kv.getMany<[WalletRecord, RateWindowsRecord, RateLimitOverrides]>(
            [walletKey, keys.rateWindows(appId), keys.rateLimitOverrides(appId)],
          );
        [reservations, markers] = await Promise.all([
          this.#readReservations(appId, ops, cached?.reservations),
          this.#readMarkers(ops),
        ]);
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
        });
        plan.resolveAll();
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

  /** Keeps the committed wallet and the holds this process knows are live, for the next batch. */
  #remember(
    appId: string,
    versionstamp: string,
    wallet: WalletRecord,
    touched: Map<string, ReservationRecord | null>,
    previous: Map<string, ReservationRecord> | undefined,
    rate: Pick<KnownWallet, "rateWindows" | "rateOverrides">,
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
    const current = new Map(guards.map((g, i) => [guardId(g), entries[i].versionstamp]));
    return ops.filter((op) => {
      if (op.kind !== "reserve" || !op.input.keyGuard) return true;
      const versionstamp = current.get(guardId(op.input.keyGuard));
      if (!versionstamp) {
        op.done.reject(new KeyRevokedError(`API key ${op.input.keyId} was revoked`));
        return false;
      }
      // In place: the caller's cache holds the same object and so stops failing this check.
      op.input.keyGuard.versionstamp = versionstamp;
      return true;
    });
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
    // Read after the wallet: a hold changed since then implies a newer wallet, which fails our check.
    for (let i = 0; i < unknown.length; i += 10) {
      const chunk = [...new Set(unknown.slice(i, i + 10))];
      const entries = await this.#kv.getMany<ReservationRecord[]>(
        chunk.map((id) => keys.reservation(appId, id)),
      );
      chunk.forEach((id, j) => out.set(id, entries[j].value));
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
  let extraChecks = 0;
  const guarded = new Set<string>();
  let n = 0;
  while (n < queue.length && n < maxBatch) {
    const op = queue[n];
    if (op.kind === "credit" && op.input.marker) {
      if (extraChecks === MAX_EXTRA_CHECKS) break;
      extraChecks++;
    }
    const guard = op.kind === "reserve" ? op.input.keyGuard : undefined;
    if (guard && !guarded.has(guardId(guard))) {
      if (extraChecks === MAX_EXTRA_CHECKS) break;
      extraChecks++;
      guarded.add(guardId(guard));
    }
    n++;
  }
  return queue.splice(0, n);
}

/** The distinct key guards of a batch's reserves (the first versionstamp seen for each key). */
function keyGuards(ops: Op[]): Map<string, KeyGuard> {
  const guards = new Map<string, KeyGuard>();
  for (const op of ops) {
    const guard = op.kind === "reserve" ? op.input.keyGuard : undefined;
    if (guard && !guards.has(guardId(guard))) guards.set(guardId(guard), guard);
  }
  return guards;
}

function guardId(guard: KeyGuard): string {
  return JSON.stringify(guard.key);
}

interface PlanInput {
  appId: string;
  ops: Op[];
  wallet: WalletRecord;
  reservations: Map<string, ReservationRecord | null>;
  markers: Set<string>;
  now: number;
  leaseMs: number;
  /** The app's rate windows, when rate limits are enforced; written back with the wallet. */
  rate?: RateWindows;
}

/**
 * Decides every operation of a batch in order against a running copy of the wallet. Pure: the
 * writes and the answers are only produced here, applied by the caller once the commit succeeded.
 */
export function planBatch(input: PlanInput) {
  const { appId, now } = input;
  const wallet = { ...input.wallet };
  const live = new Map<string, ReservationRecord | null>();
  for (const [id, r] of input.reservations) live.set(id, r);
  const touched = new Map<string, ReservationRecord | null>();
  const markersSeen = new Set(input.markers);
  const markerChecks: string[] = [];
  const writes: ((atomic: Deno.AtomicOperation) => void)[] = [];
  const answers: (() => void)[] = [];
  // Per-batch totals: one mutation per counter instead of one per settle (KV's mutation budget,
  // and the commit's cost, grow with mutations).
  const keysUsed = new Set<string>();
  const modelSpend = new Map<string, Micros>();

  const dropReservation = (r: ReservationRecord) => {
    live.set(r.id, null);
    touched.set(r.id, null);
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
        const tokens = op.input.tokens ?? 0;
        const admission = input.rate?.check(op.input.keyId, tokens, now);
        if (admission && !admission.ok) {
          const answer = rateRefused(admission, wallet);
          answers.push(() => op.done.resolve(answer));
          break;
        }
        if (wallet.available < amount) {
          const answer = {
            ok: false as const,
            reason: "insufficient_credits" as const,
            available: wallet.available,
            reserved: wallet.reserved,
            rate: admission?.status,
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
          tokens,
        };
        const rate = input.rate?.consume(op.input.keyId, tokens, now);
        live.set(reservation.id, reservation);
        touched.set(reservation.id, reservation);
        writes.push((a) =>
          a.set(keys.reservation(appId, reservation.id), reservation)
            .set(keys.reservationExpiry(reservation.leaseUntil, appId, reservation.id), true)
        );
        const answer = { ok: true as const, reservation, available: wallet.available, rate };
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
        const rate = input.rate?.adjustTokens(
          r.keyId,
          op.input.promptTokens + op.input.completionTokens - (r.tokens ?? 0),
          now,
        );
        const usage: UsageRecord = {
          ...op.input,
          id: newId("use", now),
          appId,
          cost: charged,
          uncharged: op.input.cost - charged,
          reserved: r.amount,
          createdAt: now,
        };
        writes.push((a) => a.set(keys.usage(appId, usage.id), usage));
        keysUsed.add(usage.keyId);
        if (charged > 0) modelSpend.set(usage.model, (modelSpend.get(usage.model) ?? 0) + charged);
        const answer = {
          settled: true as const,
          charged,
          uncharged: usage.uncharged,
          available: wallet.available,
          usage,
          rate,
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
        // Nothing ran (or what ran is unknown after a crash): its tokens go back to the limit.
        const rate = releasable
          ? input.rate?.adjustTokens(r.keyId, -(r.tokens ?? 0), now)
          : undefined;
        const answer = { released: Boolean(releasable), available: wallet.available, rate };
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
        touched.set(r.id, renewed);
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

  let daySpend = 0;
  for (const [model, spent] of modelSpend) {
    daySpend += spent;
    writes.push((a) => a.sum(keys.modelSpend(appId, model), BigInt(spent)));
  }
  if (daySpend > 0) {
    writes.push((a) => a.sum(keys.dailySpend(appId, utcDay(now)), BigInt(daySpend)));
  }
  for (const keyId of keysUsed) writes.push((a) => a.set(keys.apiKeyLastUsed(keyId), now));

  const rateRecord = input.rate?.changed ? input.rate.record(now) : null;
  if (rateRecord) writes.push((a) => a.set(keys.rateWindows(appId), rateRecord));

  return {
    wallet,
    /** Nothing to write: every operation was refused or found nothing to do. */
    unchanged: writes.length === 0 && rateRecord === null,
    /** Whether this batch enforced rate limits, and the windows it wrote (null: unchanged). */
    rateLimited: input.rate !== undefined,
    rateRecord,
    /** Holds created, renewed (record) or removed (null) by this batch. */
    reservations: touched,
    markerChecks,
    write(atomic: Deno.AtomicOperation) {
      for (const w of writes) w(atomic);
    },
    resolveAll() {
      for (const a of answers) a();
    },
  };
}

function rateRefused(
  admission: Extract<ReturnType<RateWindows["check"]>, { ok: false }>,
  wallet: WalletRecord,
): Extract<ReserveResult, { reason: "rate_limited" | "rate_too_large" }> {
  return {
    ok: false,
    reason: admission.reason === "too_large" ? "rate_too_large" : "rate_limited",
    available: wallet.available,
    reserved: wallet.reserved,
    rate: admission.status,
    breach: admission.breach,
    retryAfterMs: admission.reason === "rate_limited" ? admission.retryAfterMs : 0,
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
