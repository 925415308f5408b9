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
  type SliceRecallRecord,
  type SpendCapsRecord,
  type SpendCounter,
  type UsageRecord,
  utcDay,
  type WalletRecord,
  type WalletSliceRecord,
} from "@/lib/db.ts";
import {
  CONFIG_DEFAULTS,
  getManyChunked,
  KvBusyError,
  type Micros,
  newId,
  randomToken,
} from "@/lib/core/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";
import type { CommitLocks } from "./commit_locks.ts";
import { LocalSlice } from "./slices.ts";
import { setUsage } from "./ledger.ts";
import { cappedScopes } from "./spend_caps.ts";
import { RateWindows } from "./ratelimit.ts";
import {
  countersNeeded,
  guardId,
  keyGuards,
  markerOf,
  type Op,
  planBatch,
  refuseRevokedKeys,
  type Settler,
  type SliceGiveBackResult,
  type SliceGrantResult,
  sliceIdOf,
  type SliceReturnResult,
  takeBatch,
} from "./plan_batch.ts";
import {
  type CreditInput,
  type CreditResult,
  type DebitInput,
  type DebitResult,
  type DebitReversalInput,
  type DebitReversalResult,
  type ReleaseResult,
  type RenewResult,
  type ReserveInput,
  type ReserveResult,
  type SettleInput,
  type SettleResult,
  type SliceOptions,
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
  /** The commit locks' generation our commit left (0 without locks): another means a sibling wrote. */
  generation: number;
}

/** A commit applied but whose versionstamp we never saw: nothing may be cached from it. */
const UNKNOWN_VERSION = "";
/** KV's refusals of a write beyond its limits (a value over 64 KiB, too many mutations, ...). */
const KV_LIMIT_EXCEEDED = /too large|too many (checks|mutations)/i;
/** How long an app whose remembered wallet proved stale is read before each batch. */
const CONTENDED_MS = 1_000;
/** Wallets remembered at most; past it the memory is dropped and rebuilt by reads. */
const MAX_KNOWN_WALLETS = 10_000;
const MAX_KNOWN_KEYS = 10_000;
/** How long a batch marker is kept to resolve a commit whose outcome was unknown. */
const BATCH_MARKER_MS = 60 * 60 * 1000;
/** Charges posted in one slice commit at most (KV's mutation and size budgets per commit). */
const MAX_POST = 128;
/**
 * Keys' index entries a post checks in its commit: with the slice's own and the caps', KV's 10
 * checks per commit (self-hosted denokv). More keys charged since the last post are read instead.
 */
const POST_KEY_CHECKS = 8;
/**
 * Pending charges that start a post at once instead of at the next tick: a hot slice posts in
 * batches of this size, so its posts stay small and its unposted charges few, while a slice at a
 * moderate pace posts once per tick (a post is a durable commit: its cost is per commit).
 */
const POST_AT_COUNT = 64;
/** A slice's first grant covers this many requests like the one that asked; later ones its pace. */
const SLICE_REQUESTS = 64;
/** A slice is only taken when the grant covers this many requests like the one that asked. */
const SLICE_MIN_REQUESTS = 4;
/**
 * How many times a reserve waits for its app's slice to grow before it takes the per-request path.
 * Each grant covers every reserve waiting when it is planned, so a reserve that arrived during a
 * grant is covered by the next one: two waits suffice unless the wallet runs dry.
 */
const SLICE_TRIES = 8;

/** How often a process holding a slice looks for a recall of it (see #answerRecall). */
const RECALL_CHECK_MS = 100;
/**
 * How long a reserve refused for money other processes' slices hold waits for them to give it
 * back: they look every RECALL_CHECK_MS and give it back in one commit.
 */
const RECALL_WAIT_MS = 500;
const RECALL_POLL_MS = 10;
const RECALL_KEEP_MS = 60_000;

/** Reserves waiting for a slice to grow: what the next grant must cover beyond the app's pace. */
interface SliceDemand {
  count: number;
  amount: Micros;
  tokens: number;
}

/** Operations after whose commit the app's balance watchers (webhooks) look again. */
const MONEY_MOVING = new Set<Op["kind"]>(["settle", "credit", "debit", "debit_reversal"]);

/**
 * A batch of reserves only (nothing answered yet, nothing to lose) stops at a KV busy past its own
 * retries: each further try would wait out the lock as long again (40 tries, 80 s), and the client
 * is better told 503 with Retry-After. Money that moves keeps every try.
 */
function givesUpBusy(ops: Op[], error: unknown): boolean {
  return error instanceof KvBusyError && ops.every((op) => op.kind === "reserve");
}

export class Wallets {
  readonly stats: WalletStats = {
    commits: 0,
    conflicts: 0,
    unknownOutcomes: 0,
    readFailures: 0,
    opsCommitted: 0,
    sliceGrants: 0,
    sliceReturns: 0,
    slicePosts: 0,
    sliceAdmitted: 0,
    sliceFallbacks: 0,
    sliceRecalls: 0,
    sliceGiveBacks: 0,
    optimisticStarts: 0,
    mispredictions: 0,
    mispredictionExposureMicros: 0,
    abandonedCalls: 0,
    abandonedExposureMicros: 0,
    endedEarlyCalls: 0,
    endedEarlyExposureMicros: 0,
    orphanCharges: 0,
    unbilledSettles: 0,
    unbilledMicros: 0,
    unbilledRecordedMicros: 0,
    commitLockTakeovers: 0,
  };
  readonly #kv: Deno.Kv;
  readonly #queues = new Map<string, Op[]>();
  /** Per app: the wallet entry as our last commit left it, and the holds we know to be live. */
  readonly #known = new Map<string, KnownWallet>();
  /** Apps whose remembered wallet was recently found stale: read them first until then. */
  readonly #contendedUntil = new Map<string, number>();
  #predicts = false;
  /** Per app, the amounts of this process's reserves not yet answered (for predictFits). */
  readonly #deciding = new Map<string, Micros>();
  /** Per app, until when its last reserve refused for rate would still be refused. */
  readonly #rateLimitedUntil = new Map<string, number>();
  readonly #leaseMs: number;
  readonly #maxBatch: number;
  readonly #maxAttempts: number;
  readonly #now: () => number;
  readonly #rateLimits: RateLimits | null;
  /** Holds whose lease is renewed while their request runs: app id, then reservation ids. */
  readonly #kept = new Map<string, Set<string>>();
  #keepTimer: ReturnType<typeof setInterval> | null = null;
  /** Slices (null: the per-request protocol only). */
  readonly #sliceOptions: (Required<Omit<SliceOptions, "hotPerSecond">> & SliceOptions) | null;
  /** This process's slice of each app it serves, and the slice of each hold admitted in one. */
  readonly #slices = new Map<string, LocalSlice>();
  readonly #sliceOfReservation = new Map<string, LocalSlice>();
  readonly #growing = new Map<string, Promise<boolean>>();
  readonly #posting = new Map<LocalSlice, Promise<void>>();
  readonly #returning = new Map<LocalSlice, Promise<void>>();
  /** Slices a sweeper gave back while this process still held reservations in them. */
  readonly #orphaned = new WeakSet<LocalSlice>();
  /** Charges of orphaned slices that failed, each waiting to be tried again (#retryCharges). */
  readonly #retries = new Map<() => Promise<void>, UsageRecord[]>();
  /** Those retries running now: drain waits for them. */
  readonly #retrying = new Set<Promise<void>>();
  /** Usage of settles that failed for good, each waiting to be recorded (#recordUnbilled). */
  readonly #unbilled = new Set<() => Promise<void>>();
  /** Per app: the recall this process is making for a refused reserve (see #reclaim). */
  readonly #reclaiming = new Map<string, Promise<boolean>>();
  /** Per app: until when this process takes no new slice, having answered a recall. */
  readonly #recallAnswered = new Map<string, number>();
  /** Per app: until when a refused reserve does not recall again, the last recall having failed. */
  readonly #recallFutile = new Map<string, number>();
  /** Gives back of free money under way, per slice: drain waits for them. */
  readonly #givingBack = new Map<LocalSlice, Promise<Micros>>();
  /** Per app: the reserves waiting for its slice to grow (see SliceDemand). */
  readonly #waiting = new Map<string, SliceDemand>();
  /** Reserves per app in its current one-second window (auto slices: is the app hot?). */
  readonly #pace = new Map<string, { since: number; reserves: number }>();
  /**
   * Per slice id: the tail of its grant, post and return commits. They all write the slice record
   * and check its versionstamp, so inside one process they run one after another and never fail
   * each other's check; only another process (a sweeper) can.
   */
  readonly #sliceLocks = new Map<string, Promise<void>>();
  #sliceTimer: ReturnType<typeof setInterval> | null = null;
  /** Set by the drain before an exit: nothing will post a slice's charge later. */
  #exiting = false;
  readonly #onMoneyMoved: ((appId: string) => void) | undefined;
  readonly #locks: CommitLocks | undefined;
  /**
   * Each app's spend caps entry as this process last read it (slices serve uncapped only). Every
   * slice post checks it, so a cap set meanwhile is seen within one post.
   */
  readonly #capsSeen = new Map<string, Deno.KvEntryMaybe<SpendCapsRecord>>();
  /**
   * Keys whose caps #capsSeen is known to hold: each key's first reserve in this process reads the
   * caps afresh, so that a key issued with a cap after this process last read them is never
   * admitted by a slice as uncapped.
   */
  readonly #keysWithCapsSeen = new Set<string>();
  /**
   * Keys whose caps entry went away while this process watched: a rotation moves the entry to the
   * replacement, a revocation's prune drops it (so does lifting the caps of a key counting on its
   * own counter). Without an entry such a key reads as uncapped, so a slice would admit the
   * requests a rotated or revoked key authenticated before, charged outside the counter its cap
   * counts on; they take the per-request path instead, whose key check refuses them (a key whose
   * caps were lifted is served there too, a commit a request: correct, only not from a slice).
   */
  readonly #keysThatLeftCaps = new Set<string>();
  readonly #capsReading = new Map<string, Promise<Deno.KvEntryMaybe<SpendCapsRecord>>>();

  constructor(kv: Deno.Kv, options: WalletOptions) {
    this.#kv = kv;
    this.#leaseMs = options.leaseMs;
    this.#maxBatch = options.maxBatch ?? 128;
    this.#maxAttempts = options.maxAttempts ?? 40;
    this.#now = options.now ?? Date.now;
    this.#rateLimits = options.rateLimits ?? null;
    this.#sliceOptions = options.slices
      ? {
        leaseMs: options.slices.leaseMs ?? 10_000,
        postEveryMs: options.slices.postEveryMs ?? CONFIG_DEFAULTS.WALLET_SLICE_POST_MS,
        idleMs: options.slices.idleMs ?? 1_000,
        hotPerSecond: options.slices.hotPerSecond,
      }
      : null;
    this.#onMoneyMoved = options.onMoneyMoved;
    this.#locks = options.locks;
    // Counted by the locks themselves, read where the stats are.
    Object.defineProperty(this.stats, "commitLockTakeovers", {
      get: () => this.#locks?.takenOver ?? 0,
      enumerable: true,
    });
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }

  reserve(appId: string, input: ReserveInput): Promise<ReserveResult> {
    assertAmount(input.amount);
    const reserving = this.#servedFromSlice(appId)
      ? this.#reserveInSlice(appId, input)
      : this.#reserveOrReclaim(appId, input);
    // Only a process that predicts (OPTIMISTIC_UPSTREAM) keeps what predictions need.
    if (!this.#predicts) return reserving;
    // What this process has asked for and not yet been answered: the wallet as last committed
    // does not show it, so a prediction subtracts it.
    this.#deciding.set(appId, (this.#deciding.get(appId) ?? 0) + input.amount);
    return reserving.then((result) => {
      if (!result.ok && result.reason === "rate_limited") {
        this.#rateLimitedUntil.set(appId, this.#now() + result.retryAfterMs);
      }
      return result;
    }).finally(() => {
      const left = (this.#deciding.get(appId) ?? 0) - input.amount;
      if (left > 0) this.#deciding.set(appId, left);
      else this.#deciding.delete(appId);
    });
  }

  /**
   * The per-request reserve. Refused for credits while slices (this process's or others') hold
   * free money of the app, it asks for that money back and tries once more: a slice never makes a
   * request fail that the app's balance covers.
   */
  async #reserveOrReclaim(appId: string, input: ReserveInput): Promise<ReserveResult> {
    const reserve = () =>
      this.#enqueue<ReserveResult>(appId, (done) => ({ kind: "reserve", input, done }));
    const result = await reserve();
    if (result.ok || result.reason !== "insufficient_credits" || !this.#sliceOptions) return result;
    // Slices' money is in the wallet's reserved (their grants, holds and all): when not even that
    // would cover the request, no slice is disturbed and no KV is read for it.
    if (result.available + result.reserved < input.amount) return result;
    return await this.#reclaim(appId, input.amount, result.available) ? reserve() : result;
  }

  /**
   * Whether this reserve goes to the app's slice: always with slices on; in auto, once the app is
   * hot here (a quiet app keeps a commit per request, whose check sees a revoked key or a new cap
   * at once), or once its commits met another writer's (workers, processes or instances sharing
   * its traffic, each below the pace: their per-request commits would fight over the wallet), and
   * for as long as its slice is live.
   */
  #servedFromSlice(appId: string): boolean {
    if (!this.#sliceOptions) return false;
    const hot = this.#sliceOptions.hotPerSecond;
    if (hot === undefined || this.#slices.has(appId)) return true;
    const now = this.#now();
    if ((this.#contendedUntil.get(appId) ?? 0) > now) return true;
    let pace = this.#pace.get(appId);
    if (!pace || now - pace.since >= 1_000) {
      if (!pace && this.#pace.size >= MAX_KNOWN_WALLETS) this.#pace.clear();
      pace = { since: now, reserves: 0 };
      this.#pace.set(appId, pace);
    }
    return ++pace.reserves >= hot;
  }

  settle(appId: string, reservationId: string, input: SettleInput): Promise<SettleResult> {
    assertAmount(input.cost);
    const slice = this.#sliceOfReservation.get(reservationId);
    if (slice) {
      this.#sliceOfReservation.delete(reservationId);
      // Beyond what the slice can charge: the rest of the wallet may pay.
      if (!this.#orphaned.has(slice) && input.cost > slice.cover(reservationId)) {
        return this.#settleOverflow(appId, slice, reservationId, input);
      }
      return this.#settleInSlice(appId, slice, reservationId, input);
    }
    return this.#settleAlone(appId, reservationId, input);
  }

  /** A settle in its own wallet commit, whose failure for good is a loss recorded later. */
  #settleAlone(appId: string, reservationId: string, input: SettleInput): Promise<SettleResult> {
    return this.#enqueue<SettleResult>(
      appId,
      (done) => ({ kind: "settle", reservationId, input, done }),
    ).catch((error) => {
      this.stats.unbilledSettles++;
      this.stats.unbilledMicros += input.cost;
      if (error instanceof WalletUnavailableError) {
        this.#recordUnbilled(appId, reservationId, input);
      }
      throw error;
    });
  }

  /**
   * A settle failed for good and its request was answered as not charged; its hold stays until
   * its lease runs out. A second later (and again until KV lets it) the hold is ended in a commit
   * that records the usage as the app's uncharged, charging nothing: the loss shows where uncharged
   * usage does, counted once, as the hold ends once. A hold already gone (the sweeper released it)
   * is not recorded: a settle whose outcome stayed unknown, which may have charged, looks the same.
   * No retried settle charges it: the answer said nothing was.
   */
  #recordUnbilled(appId: string, reservationId: string, input: SettleInput) {
    // Nothing is charged, so no retry of an Idempotency-Key is told that it was.
    const { idempotent: _, ...uncharged } = input;
    const attempt = async () => {
      let result: SettleResult;
      try {
        result = await this.#enqueue<SettleResult>(appId, (done) => ({
          kind: "settle",
          reservationId,
          input: uncharged,
          unbilled: true,
          done,
        }));
      } catch (error) {
        if (error instanceof WalletUnavailableError && !this.#exiting) {
          this.#recordUnbilled(appId, reservationId, input);
        }
        return;
      }
      if (result.settled) this.stats.unbilledRecordedMicros += result.uncharged;
    };
    this.#unbilled.add(this.#inASecond(attempt, this.#unbilled));
  }

  /**
   * `attempt` a second from now, or sooner when drain runs it first (as the exit waits for nothing
   * else): it leaves `waiting` once it starts, and is in #retrying while it runs.
   */
  #inASecond(
    attempt: () => Promise<void>,
    waiting: { delete(retry: () => Promise<void>): unknown },
  ): () => Promise<void> {
    const retry = () => {
      clearTimeout(timer);
      waiting.delete(retry);
      const running = attempt().finally(() => this.#retrying.delete(running));
      this.#retrying.add(running);
      return running;
    };
    const timer = setTimeout(retry, 1_000);
    Deno.unrefTimer(timer);
    return retry;
  }

  /**
   * A cost beyond the reservation and the slice's free money: the rest of the wallet pays, as on
   * the per-request path, the whole usage charged from it, unless its balance cannot beat what
   * the slice would charge, or the charge fails: then the slice settles it (never less, and its
   * posts retry).
   */
  async #settleOverflow(
    appId: string,
    slice: LocalSlice,
    reservationId: string,
    input: SettleInput,
  ): Promise<SettleResult> {
    const usage = slice.usageOutside(reservationId, input, this.#now());
    if (usage) {
      const floor = slice.cover(reservationId);
      const charged = await this.#enqueue<SettleResult>(
        appId,
        (done) => ({ kind: "charge", usage, floor, done }),
      ).catch(() => undefined);
      if (charged?.settled) {
        slice.chargedOutside(reservationId, input, this.#now());
        return charged;
      }
      // Failed, but its outcome may have been unknown: it may have charged all the same.
      let record: UsageRecord | null;
      try {
        record = charged === undefined ? await this.#committedUsage(appId, usage) : null;
      } catch {
        // KV can tell neither way: the slice must not charge it too. The reservation ends here
        // (a throw would leave it in the slice, renewed and never returned) and the charge is
        // tried again once KV tells whether it committed, as an orphaned slice's charges are.
        slice.chargedOutside(reservationId, input, this.#now());
        this.#retryCharges(appId, [usage]);
        return {
          settled: true,
          charged: usage.cost,
          uncharged: usage.uncharged,
          available: slice.available,
          usage,
        };
      }
      if (record) {
        slice.chargedOutside(reservationId, input, this.#now());
        return {
          settled: true,
          charged: record.cost,
          uncharged: record.uncharged,
          available: slice.available,
          usage: record,
        };
      }
    }
    return this.#settleInSlice(appId, slice, reservationId, input);
  }

  /**
   * After a charge failed: its usage record if it committed all the same (an outcome left
   * unknown), else null. The record is written in the charge's own commit, so it tells; while KV
   * cannot tell, this throws rather than let the slice charge the same usage a second time.
   */
  async #committedUsage(appId: string, usage: UsageRecord): Promise<UsageRecord | null> {
    for (let attempt = 1;; attempt++) {
      try {
        return (await this.#kv.get<UsageRecord>(keys.usage(appId, usage.id))).value;
      } catch (error) {
        if (attempt >= 5) {
          throw new WalletUnavailableError(`usage ${usage.id}: charge outcome unknown`, {
            cause: error,
          });
        }
        await sleep(20 * attempt);
      }
    }
  }

  #settleInSlice(
    appId: string,
    slice: LocalSlice,
    reservationId: string,
    input: SettleInput,
  ): Promise<SettleResult> {
    const result = slice.settle(reservationId, input, this.#now());
    if (result?.settled && this.#orphaned.has(slice)) {
      // A sweeper gave the slice back and nothing posts it any more: unless taken from the
      // wallet now, the answer would state a cost that never left it.
      slice.takePending(Number.MAX_SAFE_INTEGER);
      this.stats.orphanCharges++;
      return this.#enqueue(appId, (done) => ({ kind: "charge", usage: result.usage, done }));
    }
    if (result?.settled && this.#exiting) return this.#postAll(slice).then(() => result);
    if (result?.settled) this.#postIfDue(slice);
    if (result) return Promise.resolve(result);
    return this.#settleAlone(appId, reservationId, input);
  }

  release(appId: string, reservationId: string, onlyIfExpiredAt?: number): Promise<ReleaseResult> {
    const slice = this.#sliceOfReservation.get(reservationId);
    if (slice) {
      this.#sliceOfReservation.delete(reservationId);
      const released = slice.release(reservationId, this.#now());
      return Promise.resolve({ released, available: slice.available });
    }
    return this.#enqueue(
      appId,
      (done) => ({ kind: "release", reservationId, onlyIfExpiredAt, done }),
    );
  }

  renew(appId: string, reservationId: string): Promise<RenewResult> {
    // A hold in a slice lives as long as the slice, whose lease this process renews.
    const slice = this.#sliceOfReservation.get(reservationId);
    if (slice) return Promise.resolve({ renewed: true, leaseUntil: slice.record.leaseUntil });
    return this.#enqueue(appId, (done) => ({ kind: "renew", reservationId, done }));
  }

  /**
   * Whether a reservation of `amount` fits the wallet as this process last committed it (or its
   * slice): a prediction, for starting work early; only `reserve` decides. False when this process
   * has not committed the wallet yet or the app has spend caps.
   */
  predictFits(appId: string, amount: Micros): boolean {
    this.#predicts = true;
    // Spend caps are decided in the reservation's commit only: an app with any is not predicted.
    const caps = this.#capsSeen.get(appId);
    if (!caps || caps.value !== null) return false;
    // Rate limits are decided there too: an app refused for rate here is not predicted until its
    // wait is over, or every refused request would call its provider all the same.
    const rateLimitedUntil = this.#rateLimitedUntil.get(appId);
    if (rateLimitedUntil !== undefined) {
      if (rateLimitedUntil > this.#now()) return false;
      this.#rateLimitedUntil.delete(appId);
    }
    // The reserves of this process still being decided come off what it last saw: a burst of
    // requests each predicted alone would all start on money only some of them get.
    const deciding = this.#deciding.get(appId) ?? 0;
    const slice = this.#slices.get(appId);
    if (slice && !slice.closing && !slice.recalled) return slice.available - deciding >= amount;
    const known = this.#known.get(appId);
    if (!known || (this.#contendedUntil.get(appId) ?? 0) > this.#now()) return false;
    return known.entry.value.available - deciding >= amount;
  }

  /**
   * Gives back a slice whose lease ran out (its process died or stalled): its unspent money to the
   * wallet's available, its posted charges to the wallet's spent. For sweepers; never a live slice.
   */
  returnExpiredSlice(
    appId: string,
    sliceId: string,
    expiredAt: number,
  ): Promise<SliceReturnResult> {
    return this.#enqueue(
      appId,
      (done) => ({ kind: "slice_return", sliceId, onlyIfExpiredAt: expiredAt, done }),
    );
  }

  /**
   * Renews a hold's lease while its request runs, until the returned function is called. One timer
   * per process renews every kept hold (three times per lease, so a late tick or a slow commit
   * never lets the sweeper release a live hold); the renewals of one app share its batch.
   */
  keepAlive(appId: string, reservationId: string): () => void {
    if (this.#sliceOfReservation.has(reservationId)) return () => {};
    let held = this.#kept.get(appId);
    if (!held) this.#kept.set(appId, held = new Set());
    held.add(reservationId);
    this.#keepTimer ??= setInterval(() => this.#renewKept(), Math.max(100, this.#leaseMs / 3));
    return () => {
      const set = this.#kept.get(appId);
      if (!set?.delete(reservationId) || set.size > 0) return;
      this.#kept.delete(appId);
      if (this.#kept.size === 0 && this.#keepTimer !== null) {
        clearInterval(this.#keepTimer);
        this.#keepTimer = null;
      }
    };
  }

  #renewKept() {
    for (const [appId, ids] of this.#kept) {
      for (const id of ids) this.renew(appId, id).catch(() => {});
    }
  }

  credit(appId: string, input: CreditInput): Promise<CreditResult> {
    assertAmount(input.amount);
    if (input.amount === 0) throw new RangeError("a credit must be positive");
    return this.#enqueue(appId, (done) => ({ kind: "credit", input, done }));
  }

  /**
   * Takes a refunded or disputed payment back, once per marker: from the available balance, and
   * what that cannot give is owed, taken before anything is reserved as money comes back.
   */
  async debit(appId: string, input: DebitInput): Promise<DebitResult> {
    assertAmount(input.amount);
    if (input.amount === 0) throw new RangeError("a debit must be positive");
    const result = await this.#enqueue<DebitResult>(
      appId,
      (done) => ({ kind: "debit", input, done }),
    );
    // The unspent money of the app's slices is the app's too: recalled, it pays the debt now
    // rather than being spent first. Without the recall the debt is still paid, later. Recalled
    // also by a process that keeps no slices itself (an operator's debit): others may hold some.
    if (result.debited && result.owed > 0) {
      await this.#recallForDebt(appId).catch(() => {});
    }
    return result;
  }

  /** Gives back what a debit took, once per marker (see DebitReversalInput). */
  reverseDebit(appId: string, input: DebitReversalInput): Promise<DebitReversalResult> {
    assertAmount(input.amount);
    if (input.amount === 0) throw new RangeError("a reversal must be positive");
    return this.#enqueue(appId, (done) => ({ kind: "debit_reversal", input, done }));
  }

  /**
   * The last drain, before the process exits. A request still running (one past the shutdown's
   * grace) may settle into a slice during it or after it, when no post is coming: each such charge
   * is posted before its settle answers, so no answer states a cost that never left the wallet.
   */
  drainForExit(): Promise<void> {
    this.#exiting = true;
    return this.drain();
  }

  /**
   * Resolves once every queued operation has been committed or refused, every settled charge of
   * a slice posted, every slice without holds given back to its wallet, and every failed charge
   * (and unbilled usage) waiting for its retry tried once more.
   */
  async drain(): Promise<void> {
    await Promise.all([...this.#reclaiming.values(), ...this.#givingBack.values()]);
    // One slice failing its post does not keep the others, or the retries, from theirs.
    let failure: unknown = null;
    const postAndReturn = async () => {
      for (const slice of this.#slices.values()) {
        try {
          await this.#postAll(slice);
          if (slice.reservations.size === 0) await this.#returnSlice(slice);
        } catch (error) {
          failure ??= error;
        }
      }
    };
    await postAndReturn();
    // Answered charges waiting to be tried again: now, once, rather than never after the exit;
    // and those already being tried. A post's charges found uncommitted go back to their slice
    // if it is still live, so the slices post once more.
    await Promise.all([...this.#retries.keys(), ...this.#unbilled].map((retry) => retry()));
    await Promise.all(this.#retrying);
    // Once more where the first round failed or charges came back: what this second round cannot
    // post or return is what stays so, and its failure is the one to tell.
    if (failure !== null || [...this.#slices.values()].some((slice) => slice.pending.length > 0)) {
      failure = null;
      await postAndReturn();
    }
    while (this.#queues.size > 0) await new Promise((r) => setTimeout(r, 1));
    if (failure !== null) throw failure;
  }

  /**
   * Micro-USD of answered charges that failed and wait for a retry: what an exit now leaves
   * uncharged (the shutdown log reports it).
   */
  get pendingCharges(): Micros {
    let total = 0;
    for (const usage of this.#retries.values()) for (const u of usage) total += u.cost;
    return total;
  }

  // ---- slices (see slices.ts) ------------------------------------------------------------------

  async #reserveInSlice(appId: string, input: ReserveInput): Promise<ReserveResult> {
    // Spend caps are decided in the reservation's commit; a slice admits without one. So a request
    // under a cap takes the per-request path; the caps are read first for an app this process has
    // not yet committed, and for a key it has not served yet (one issued with a cap is held to it
    // from its first request). A cap set on a key while a slice is live applies from this process's
    // next commit of the wallet, which reads the caps, or from its next post, which checks them.
    const caps = ((this.#keysWithCapsSeen.has(input.keyId) && this.#capsSeen.get(appId)) ||
      await this.#readCaps(appId, input.keyId, input.keyGuard)).value;
    if (
      cappedScopes(caps, input.keyId, input.user).length > 0 ||
      this.#keysThatLeftCaps.has(input.keyId)
    ) {
      this.stats.sliceFallbacks++;
      return this.#reserveOrReclaim(appId, input);
    }
    const tokens = input.tokens ?? 0;
    for (let attempt = 0; attempt < SLICE_TRIES; attempt++) {
      const slice = this.#slices.get(appId);
      if (slice) {
        const admitted = slice.admit(input, this.#now());
        if (admitted) {
          this.stats.sliceAdmitted++;
          this.#sliceOfReservation.set(admitted.reservation.id, slice);
          return { ok: true, ...admitted };
        }
        if (!slice.closing && !slice.serves(input.keyId, tokens)) break;
      }
      // A new slice now would take again the money a recall just brought back for someone.
      if ((this.#recallAnswered.get(appId) ?? 0) > Date.now()) break;
      // Counted while it waits, so the grant planned meanwhile covers it.
      const waiting = this.#waiting.get(appId) ?? { count: 0, amount: 0, tokens: 0 };
      this.#waiting.set(appId, waiting);
      waiting.count++;
      waiting.amount += input.amount;
      waiting.tokens += tokens;
      let grew: boolean;
      try {
        grew = await this.#growSlice(appId, input, slice);
      } finally {
        waiting.count--;
        waiting.amount -= input.amount;
        waiting.tokens -= tokens;
        if (waiting.count === 0 && this.#waiting.get(appId) === waiting) {
          this.#waiting.delete(appId);
        }
      }
      if (!grew) break;
    }
    // A low balance, tight limits, a key with limits of its own, a revoked key or a recalled
    // slice: one commit each.
    this.stats.sliceFallbacks++;
    return this.#reserveOrReclaim(appId, input);
  }

  /**
   * After a reserve of `amount` was refused with `available` outside slices: this process's slice
   * gives its free money back at once; if that is not enough and other processes' slices hold the
   * rest, they are recalled and this waits up to RECALL_WAIT_MS for the money. Whether trying
   * again can succeed. Refusals of one app at once share one recall.
   */
  #reclaim(appId: string, amount: Micros, available: Micros): Promise<boolean> {
    let running = this.#reclaiming.get(appId);
    if (!running) {
      running = this.#recallSlices(appId, amount, available)
        .catch(() => false)
        .finally(() => this.#reclaiming.delete(appId));
      this.#reclaiming.set(appId, running);
    }
    return running;
  }

  async #recallSlices(appId: string, amount: Micros, available: Micros): Promise<boolean> {
    const freed = await this.#recallOwn(appId);
    if (available + freed >= amount) return true;
    // A flood of refusals while the slices' holds keep the money is answered at once, not after
    // a wait each.
    if ((this.#recallFutile.get(appId) ?? 0) > Date.now()) return freed > 0;
    // Their holds count in this, so it may promise more than comes back; never less.
    if (available + freed + await this.#unspentElsewhere(appId) < amount) return freed > 0;
    await this.#writeRecall(appId);
    const deadline = Date.now() + RECALL_WAIT_MS;
    while (Date.now() < deadline) {
      await sleep(RECALL_POLL_MS);
      const wallet = await this.#kv.get<WalletRecord>(keys.wallet(appId));
      if ((wallet.value?.available ?? 0) >= amount) return true;
    }
    if (this.#recallFutile.size >= MAX_KNOWN_WALLETS) this.#recallFutile.clear();
    this.#recallFutile.set(appId, Date.now() + 2 * RECALL_WAIT_MS);
    return freed > 0;
  }

  /** A refund or dispute left money owed: every slice of the app gives its free money back. */
  async #recallForDebt(appId: string) {
    await this.#recallOwn(appId);
    if (await this.#unspentElsewhere(appId) > 0) await this.#writeRecall(appId);
  }

  /** This process's slice of the app stops admitting and gives its free money back; how much. */
  #recallOwn(appId: string): Promise<Micros> {
    const own = this.#slices.get(appId);
    if (!own || own.closing) return Promise.resolve(0);
    this.#recall(own);
    return this.#giveBack(own);
  }

  /** What the live slices of other processes hold unspent (their holds included). */
  async #unspentElsewhere(appId: string): Promise<Micros> {
    const own = this.#slices.get(appId)?.record.id;
    const now = this.#now();
    let unspent = 0;
    for await (
      const entry of this.#kv.list<WalletSliceRecord>({ prefix: keys.appWalletSlices(appId) })
    ) {
      const slice = entry.value;
      if (slice.id !== own && slice.leaseUntil > now) unspent += slice.granted - slice.spent;
    }
    return unspent;
  }

  async #writeRecall(appId: string) {
    const recall: SliceRecallRecord = { at: this.#now() };
    // Kept a while only: a holder answers a recall made since its slice was created, once.
    await this.#kv.set(keys.walletSliceRecall(appId), recall, { expireIn: RECALL_KEEP_MS });
    this.stats.sliceRecalls++;
  }

  /**
   * Gives the slice's free money back to the wallet in one commit; what was given. The money
   * leaves the slice's free part before the commit, so nothing admits it meanwhile, and comes back
   * if the commit fails.
   */
  #giveBack(slice: LocalSlice): Promise<Micros> {
    const running = this.#givingBack.get(slice);
    if (running) return running.then(() => this.#giveBack(slice));
    const amount = slice.free;
    // A recalled slice admits nothing more: its unused rate room goes back with its money, or the
    // app's other requests would meet a limit that nothing uses.
    const unusedRate = { requests: slice.requestsLeft, tokens: slice.tokensLeft };
    const nothing = amount <= 0 && unusedRate.requests === 0 && unusedRate.tokens === 0;
    if (nothing || this.#orphaned.has(slice)) return Promise.resolve(0);
    slice.free = 0;
    slice.requestsLeft = 0;
    slice.tokensLeft = 0;
    /** Nothing was given back: the slice keeps its money and room. */
    const keep = () => {
      slice.free += amount;
      slice.requestsLeft += unusedRate.requests;
      slice.tokensLeft += unusedRate.tokens;
      return 0;
    };
    const appId = slice.record.appId;
    const sliceId = slice.record.id;
    const giving = this.#exclusive(
      sliceId,
      () =>
        this.#enqueue<SliceGiveBackResult>(
          appId,
          (done) => ({ kind: "slice_give_back", sliceId, amount, unusedRate, done }),
        ),
    ).then((result) => {
      if (!("record" in result)) return keep();
      slice.gaveBack(result.record, result.versionstamp);
      this.stats.sliceGiveBacks++;
      slice.free += amount - result.given;
      return result.given;
    }, keep).finally(() => this.#givingBack.delete(slice));
    this.#givingBack.set(slice, giving);
    return giving;
  }

  /**
   * A holder's side of a recall: a recall made since the slice was created stops its admissions
   * and gives its free money back; the slice goes back once its holds end (#sliceTick). The app's
   * spend caps and rate-limit overrides are read with it: a cap set meanwhile, or a key given
   * limits of its own (or a rotation carrying them to a new key), takes that key's requests off the
   * slice within one check, even while nothing is posted or granted; an app's limit lowered below
   * the one its block was cut from recalls the slice, and so does a key revoked or rotated (the
   * app's revocation count moved): its requests go by the per-request path, which refuses the
   * revoked key, within one check rather than at the next post, which a slow commit delays. So is
   * the wallet read, for the balance the slice's answers show.
   */
  async #answerRecall(slice: LocalSlice) {
    const appId = slice.record.appId;
    const [entry, caps, overrides, wallet, revocations] = await this.#kv.getMany<
      [SliceRecallRecord, SpendCapsRecord, RateLimitOverrides, WalletRecord, unknown]
    >([
      keys.walletSliceRecall(appId),
      keys.spendCaps(appId),
      keys.rateLimitOverrides(appId),
      keys.wallet(appId),
      keys.appApiKeyRevocations(appId),
    ]);
    this.#sawCaps(appId, caps);
    // Other processes' settles and top-ups: the balance this slice's answers show follows them.
    if (wallet.value) slice.walletAvailable = wallet.value.available;
    // Added, never dropped: a read older than a grant's must not put a limited key back on it.
    for (const keyId of Object.keys(overrides.value?.keys ?? {})) {
      slice.keysWithOwnLimits.add(keyId);
    }
    const at = entry.value?.at ?? 0;
    const recalled = at >= slice.record.createdAt && at > slice.recallAnswered;
    // Versionstamps grow with every commit: the count moved after the grant.
    const revoked = (revocations.versionstamp ?? "") > slice.grantedVersionstamp;
    if (!recalled && !revoked && !this.#limitLowered(slice, overrides.value)) return;
    if (recalled) slice.recallAnswered = at;
    this.#recall(slice);
    await this.#giveBack(slice);
  }

  /**
   * The app's rate limit is now below the one the slice's block was cut from: the block would
   * admit at the old pace, so the slice stops and the app's requests go by its window again.
   */
  #limitLowered(slice: LocalSlice, overrides: RateLimitOverrides | null): boolean {
    if (slice.recalled || !this.#rateLimits || !slice.rate) return false;
    const limits = new RateWindows(this.#rateLimits, overrides, null).limitsOf("app", "");
    return limits.rpm < slice.rate.requests.limit || limits.tpm < slice.rate.tokens.limit;
  }

  /** The slice admits nothing more, and no new slice of its app is taken while the recall lasts. */
  #recall(slice: LocalSlice) {
    slice.recalled = true;
    const appId = slice.record.appId;
    if (this.#recallAnswered.size >= MAX_KNOWN_WALLETS) this.#recallAnswered.clear();
    this.#recallAnswered.set(appId, Date.now() + RECALL_WAIT_MS);
  }

  /**
   * The app's spend caps for a request of `keyId`, read when this process has not served the key
   * yet (or knows no caps of the app): the read starts after the key authenticated, so it holds
   * whatever cap the key was issued with. Concurrent requests of the key share the read.
   *
   * A key rotated between its authentication and this read is no longer named by the caps (its
   * entry moved to the replacement), and #sawCaps cannot tell it left a record this process never
   * held with it: a key that lived a second between two reads of the caps here was served from a
   * slice as uncapped, outside the counter its cap counts on (the soak saw a counter 1,359 µUSD
   * short of its key's usage). So the key's index entry is read with the caps: gone, the key was
   * rotated or revoked, and it takes the per-request path, whose key check refuses it. A key named
   * by this read but not by a newer record this process already holds left the caps too.
   */
  #readCaps(
    appId: string,
    keyId: string,
    guard?: KeyGuard,
  ): Promise<Deno.KvEntryMaybe<SpendCapsRecord>> {
    let reading = this.#capsReading.get(keyId);
    if (!reading) {
      const read = guard
        ? this.#kv.getMany<[SpendCapsRecord, unknown]>([keys.spendCaps(appId), guard.key])
        : this.#kv.get<SpendCapsRecord>(keys.spendCaps(appId)).then((entry) =>
          [entry, null] as const
        );
      reading = read.then(([entry, index]) => {
        if (this.#keysWithCapsSeen.size >= MAX_KNOWN_KEYS) this.#keysWithCapsSeen.clear();
        this.#keysWithCapsSeen.add(keyId);
        const newest = this.#sawCaps(appId, entry);
        const gone = index !== null && index.versionstamp === null;
        if (gone || (entry.value?.keys[keyId] && !newest.value?.keys[keyId])) {
          if (this.#keysThatLeftCaps.size >= MAX_KNOWN_KEYS) this.#keysThatLeftCaps.clear();
          this.#keysThatLeftCaps.add(keyId);
        }
        return newest;
      }).finally(() => this.#capsReading.delete(keyId));
      this.#capsReading.set(keyId, reading);
    }
    return reading;
  }

  /**
   * Keeps the newer of what #capsSeen holds and `entry`, and returns it: reads finish out of order,
   * and a slice must never go back to caps from before a key was issued with one.
   */
  #sawCaps(
    appId: string,
    entry: Deno.KvEntryMaybe<SpendCapsRecord>,
  ): Deno.KvEntryMaybe<SpendCapsRecord> {
    const seen = this.#capsSeen.get(appId);
    if (seen && (seen.versionstamp ?? "") >= (entry.versionstamp ?? "")) return seen;
    if (!seen && this.#capsSeen.size >= MAX_KNOWN_WALLETS) this.#capsSeen.clear();
    for (const keyId of Object.keys(seen?.value?.keys ?? {})) {
      if (entry.value?.keys[keyId]) continue;
      if (this.#keysThatLeftCaps.size >= MAX_KNOWN_KEYS) this.#keysThatLeftCaps.clear();
      this.#keysThatLeftCaps.add(keyId);
    }
    this.#capsSeen.set(appId, entry);
    return entry;
  }

  /**
   * Grows this process's slice of the app (or takes a new one); false when nothing was granted.
   * The grant is sized when its batch is planned, to the app's in-flight demand: every reserve
   * then waiting, plus twice what the slice admitted and spent since its last grant (its pace).
   */
  #growSlice(appId: string, input: ReserveInput, slice: LocalSlice | undefined): Promise<boolean> {
    const inFlight = this.#growing.get(appId);
    if (inFlight) return inFlight;
    const options = this.#sliceOptions!;
    const live = slice && !slice.closing ? slice : undefined;
    const tokens = input.tokens ?? 0;
    const sliceId = live?.record.id ?? newId("slc", this.#now());
    const waiting = () => this.#waiting.get(appId) ?? { count: 0, amount: 0, tokens: 0 };
    const paceMoney = () => 2 * (live?.spentSinceGrant ?? 0);
    const paceRequests = () => 2 * (live?.admittedSinceGrant ?? 0);
    const paceTokens = () => 2 * (live?.tokensSinceGrant ?? 0);
    const grant = {
      sliceId,
      get want() {
        return Math.max(input.amount * SLICE_REQUESTS, waiting().amount + paceMoney());
      },
      minimum: input.amount * SLICE_MIN_REQUESTS,
      get rateWant() {
        const w = waiting();
        return {
          requests: Math.max(SLICE_REQUESTS, w.count + paceRequests()),
          tokens: Math.max(Math.max(1, tokens) * SLICE_REQUESTS, w.tokens + paceTokens()),
        };
      },
      minimumTokens: tokens,
      leaseMs: options.leaseMs,
      grows: live !== undefined,
    };
    const growing = this.#exclusive(
      sliceId,
      () =>
        this.#enqueue<SliceGrantResult>(appId, (done) => ({ kind: "slice_grant", grant, done }))
          .then(async (granted) => {
            if ("gone" in granted && live) {
              // Swept while this process stalled: what it settled in it is charged from the wallet.
              await this.#orphan(live);
              return false;
            }
            if (!("record" in granted)) return false;
            // An engine without rate limits grants no block and checks none: the slice's is
            // unbounded.
            const result = this.#rateLimits
              ? granted
              : { ...granted, requests: Infinity, tokens: Infinity };
            this.stats.sliceGrants++;
            const current = this.#slices.get(appId);
            if (current && current.record.id === sliceId) {
              current.grew(result.record, result.versionstamp, result);
            } else {
              this.#slices.set(
                appId,
                new LocalSlice(result.record, result.versionstamp, result, this.#now()),
              );
            }
            this.#sliceTimer ??= setInterval(() => this.#sliceTick(), this.#sliceTickMs());
            return true;
          }),
    ).catch(() => false).finally(() => this.#growing.delete(appId));
    this.#growing.set(appId, growing);
    return growing;
  }

  /** Runs `commit` after every earlier grant, post and return of this slice in this process. */
  #exclusive<T>(sliceId: string, commit: () => Promise<T>): Promise<T> {
    const previous = this.#sliceLocks.get(sliceId) ?? Promise.resolve();
    const run = previous.then(commit);
    const tail = run.then(() => {}, () => {});
    this.#sliceLocks.set(sliceId, tail);
    tail.then(() => {
      if (this.#sliceLocks.get(sliceId) === tail) this.#sliceLocks.delete(sliceId);
    });
    return run;
  }

  /**
   * Ticks come at least as often as recalls are looked for and leases must be renewed, whatever
   * the post interval: a long one must neither let a slice in use lapse nor keep a recalled one
   * out; posts keep their own interval.
   */
  #sliceTickMs(): number {
    const { postEveryMs, leaseMs } = this.#sliceOptions!;
    return Math.min(postEveryMs, RECALL_CHECK_MS, leaseMs / 3);
  }

  /** Posts pending charges, renews the leases of slices in use, gives back idle ones. */
  #sliceTick() {
    const now = this.#now();
    const { leaseMs, idleMs, postEveryMs } = this.#sliceOptions!;
    // The recall's checks keep the real clock's pace, whatever clock the leases are on.
    const realNow = Date.now();
    for (const slice of this.#slices.values()) {
      if (this.#posting.has(slice) || this.#returning.has(slice)) continue;
      if (!slice.closing && realNow - slice.recallCheckedAt >= RECALL_CHECK_MS) {
        slice.recallCheckedAt = realNow;
        this.#answerRecall(slice).catch(() => {});
      }
      const renewDue = slice.record.leaseUntil - now < (leaseMs * 2) / 3;
      // Half a tick early counts as due: a timer that fires a little early must not skip a post.
      const postDue = slice.pending.length > 0 &&
        now - slice.postedAt >= postEveryMs - this.#sliceTickMs() / 2;
      if (postDue || (renewDue && !slice.idle)) {
        this.#post(slice).catch(() => {});
      } else if (slice.idle && (slice.recalled || now - slice.lastUsed >= idleMs || renewDue)) {
        this.#returnSlice(slice).catch(() => {});
      }
    }
    if (this.#slices.size === 0 && this.#sliceTimer !== null) {
      clearInterval(this.#sliceTimer);
      this.#sliceTimer = null;
    }
  }

  async #postAll(slice: LocalSlice) {
    while (this.#posting.has(slice)) await this.#posting.get(slice);
    while (slice.pending.length > 0) await this.#post(slice);
  }

  /** One post (serialised per slice): the next pending charges, and the slice's lease renewed. */
  #post(slice: LocalSlice): Promise<void> {
    const running = this.#posting.get(slice);
    if (running) return running;
    const post = this.#exclusive(slice.record.id, () => this.#commitPost(slice))
      .finally(() => this.#posting.delete(slice));
    this.#posting.set(slice, post);
    // What settled during this commit posts next, without waiting for a settle or the tick; a
    // failed post leaves its retry to the tick rather than looping against a KV that is down.
    post.then(() => this.#postIfDue(slice), () => {});
    return post;
  }

  /** Starts a post when 64 charges wait and nothing else holds the slice (see POST_AT_COUNT). */
  #postIfDue(slice: LocalSlice) {
    if (
      slice.pending.length >= POST_AT_COUNT && !this.#posting.has(slice) &&
      !this.#returning.has(slice) && !this.#orphaned.has(slice)
    ) {
      this.#post(slice).catch(() => {});
    }
  }

  async #commitPost(slice: LocalSlice): Promise<void> {
    const appId = slice.record.appId;
    const sliceKey = keys.walletSlice(appId, slice.record.id);
    for (let attempt = 1;; attempt++) {
      // The keys charged since the last post are checked in the commit; past what its checks allow,
      // they are read first and the app's revocation count is checked in their place.
      const checkAll = slice.guards.size <= POST_KEY_CHECKS;
      const guards = checkAll ? [...slice.guards.values()] : [];
      const verified = checkAll ? null : await this.#verifyKeys(slice);
      const { usage, spent } = slice.takePending(MAX_POST);
      const now = this.#now();
      const record: WalletSliceRecord = {
        ...slice.record,
        spent: slice.record.spent + spent,
        leaseUntil: now + this.#sliceOptions!.leaseMs,
      };
      const postId = randomToken(96);
      const atomic = this.#kv.atomic().check({ key: sliceKey, versionstamp: slice.versionstamp });
      for (const guard of guards) atomic.check(guard);
      if (verified) atomic.check(verified.revocations);
      const caps = this.#capsSeen.get(appId);
      if (caps) atomic.check(caps);
      atomic.set(sliceKey, record);
      writeCharges(atomic, appId, usage, now);
      atomic.set(keys.walletBatch(appId, postId), now, { expireIn: BATCH_MARKER_MS });
      let versionstamp: string | null;
      try {
        versionstamp = await this.#commitMarked(appId, postId, atomic);
      } catch (error) {
        // KV cannot tell whether these answered charges were posted: posting them again could
        // charge them twice, dropping them could lose them. Their usage records, written in the
        // same commit, tell once KV answers again.
        if (usage.length > 0) this.#retryCharges(appId, usage, slice);
        throw error;
      }
      if (versionstamp !== null) {
        this.stats.slicePosts++;
        this.stats.commits++;
        this.stats.opsCommitted += usage.length;
        this.#moneyMoved(appId);
        slice.record = record;
        slice.postedAt = now;
        // After an unknown outcome the next post fails its check and reads the entry afresh.
        slice.versionstamp = versionstamp;
        for (const guard of guards) slice.guards.delete(guardKeyId(slice, guard));
        for (const keyId of verified?.keyIds ?? []) slice.guards.delete(keyId);
        return;
      }
      slice.putBack(usage, spent);
      this.stats.conflicts++;
      const [entry, capsEntry, ...current] = await this.#kv.getMany([
        sliceKey,
        keys.spendCaps(appId),
        ...guards.map((g) => g.key),
      ]);
      // A cap set since: requests under it take the per-request path from now on.
      this.#sawCaps(appId, capsEntry as Deno.KvEntryMaybe<SpendCapsRecord>);
      guards.forEach((guard, i) => {
        const keyId = guardKeyId(slice, guard);
        if (current[i].versionstamp === null) {
          // Revoked: later requests of the key take the per-request path, which refuses them.
          slice.revokedKeys.add(keyId);
          slice.guards.delete(keyId);
        } else {
          guard.versionstamp = current[i].versionstamp!;
        }
      });
      if (entry.versionstamp === null) return this.#orphan(slice);
      slice.versionstamp = entry.versionstamp;
      slice.record = { ...(entry.value as WalletSliceRecord) };
      if (attempt >= this.#maxAttempts) {
        throw new WalletUnavailableError(`slice ${slice.record.id}: posts failing`);
      }
      await sleep(Math.random() * Math.min(50, 2 ** attempt));
    }
  }

  /**
   * Reads the index entry of every key the slice charged since its last post, with the app's
   * revocation count: a key whose entry is gone was revoked (its later requests take the
   * per-request path, which refuses them). The post then checks the count, which every revocation
   * raises, so a key revoked after this read fails the post and is read again.
   */
  async #verifyKeys(slice: LocalSlice) {
    const appId = slice.record.appId;
    const pending = [...slice.guards];
    const [revocations, ...current] = await getManyChunked(this.#kv, [
      keys.appApiKeyRevocations(appId),
      ...pending.map(([, guard]) => guard.key),
    ]);
    const keyIds: string[] = [];
    pending.forEach(([keyId, guard], i) => {
      if (current[i].versionstamp === null) {
        slice.revokedKeys.add(keyId);
        slice.guards.delete(keyId);
      } else {
        guard.versionstamp = current[i].versionstamp!;
        keyIds.push(keyId);
      }
    });
    return {
      revocations: { key: revocations.key, versionstamp: revocations.versionstamp },
      keyIds,
    };
  }

  /**
   * The slice is gone: this process stalled past its lease and a sweeper gave it back. What was
   * settled in it is charged from the wallet now, never beyond its available money.
   */
  async #orphan(slice: LocalSlice) {
    slice.closing = true;
    this.#orphaned.add(slice);
    if (this.#slices.get(slice.record.appId) === slice) this.#slices.delete(slice.record.appId);
    const { usage } = slice.takePending(Number.MAX_SAFE_INTEGER);
    this.stats.orphanCharges += usage.length;
    await this.#chargeFromWallet(slice.record.appId, usage);
  }

  /**
   * Charges from the wallet what a slice that is gone had settled. Those costs were answered, so a
   * charge that fails (KV down past every retry, nothing committed) is tried again a second
   * later rather than dropped.
   */
  async #chargeFromWallet(appId: string, usage: UsageRecord[]): Promise<void> {
    const failed: UsageRecord[] = [];
    await Promise.all(
      usage.map((u) =>
        this.#enqueue(appId, (done) => ({ kind: "charge", usage: u, done })).catch(() => {
          failed.push(u);
        })
      ),
    );
    if (failed.length > 0) this.#retryCharges(appId, failed);
  }

  /**
   * A second later, charges again those of `usage` that did not commit. A charge whose outcome
   * stayed unknown may have: its usage record, written in the same commit, tells; while KV cannot
   * tell, it looks again later rather than risk charging twice. Charges of a post (`slice`) go
   * back to that slice while it is live, whose money already covers them; else to the wallet.
   */
  #retryCharges(appId: string, usage: UsageRecord[], slice?: LocalSlice) {
    const attempt = async () => {
      let uncommitted: UsageRecord[];
      try {
        const entries = await getManyChunked(this.#kv, usage.map((u) => keys.usage(appId, u.id)));
        uncommitted = usage.filter((_, j) => entries[j].versionstamp === null);
      } catch {
        return this.#retryCharges(appId, usage, slice);
      }
      if (uncommitted.length === 0) return;
      if (slice && !slice.closing && this.#slices.get(appId) === slice) {
        slice.putBack(uncommitted, uncommitted.reduce((n, u) => n + u.cost, 0));
        this.#postIfDue(slice);
        return;
      }
      await this.#chargeFromWallet(appId, uncommitted);
    };
    this.#retries.set(this.#inASecond(attempt, this.#retries), usage);
  }

  /** Gives an idle slice back to its wallet: its unspent money and unused rate block. */
  #returnSlice(slice: LocalSlice): Promise<void> {
    const running = this.#returning.get(slice);
    if (running) return running;
    slice.closing = true;
    const appId = slice.record.appId;
    const done = (async () => {
      await this.#postAll(slice);
      if (slice.reservations.size > 0) {
        slice.closing = false;
        return;
      }
      const result = await this.#exclusive(
        slice.record.id,
        () =>
          this.#enqueue<SliceReturnResult>(appId, (done) => ({
            kind: "slice_return",
            sliceId: slice.record.id,
            unusedRate: { requests: slice.requestsLeft, tokens: slice.tokensLeft },
            done,
          })),
      );
      if (result.returned) this.stats.sliceReturns++;
      if (this.#slices.get(appId) === slice) this.#slices.delete(appId);
    })().finally(() => this.#returning.delete(slice));
    this.#returning.set(slice, done);
    return done;
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
    while (queue.length > 0) await this.#commitInParts(appId, takeBatch(queue, this.#maxBatch));
    this.#queues.delete(appId);
  }

  /**
   * Commits a batch; one that KV refuses for its size (long end-user names make long counter keys)
   * is committed in halves instead, so that no operation fails for the others it was batched with.
   * KV refuses such a write before applying any of it.
   */
  async #commitInParts(appId: string, batch: Op[]): Promise<void> {
    try {
      await this.#commitBatch(appId, batch);
    } catch (error) {
      if (batch.length > 1 && KV_LIMIT_EXCEEDED.test(String((error as Error)?.message))) {
        const half = Math.ceil(batch.length / 2);
        await this.#commitInParts(appId, batch.slice(0, half));
        await this.#commitInParts(appId, batch.slice(half));
        return;
      }
      for (const op of batch) op.done.reject(error);
    }
  }

  async #commitBatch(appId: string, ops: Op[]): Promise<void> {
    const walletKey = keys.wallet(appId);
    // Trust what our own last commit left, if we have it, unless another process has been writing
    // this wallet lately: then the memory is mostly stale and each try would cost a failed commit.
    let useMemory = (this.#contendedUntil.get(appId) ?? 0) <= this.#now();
    let commitFailed = false;
    /** The wallet as remembered by a commit that failed: another writer if it has changed since. */
    let failedOn: string | null = null;
    /** Why the last commit failed when it threw rather than failed a check. */
    let commitError: unknown;
    let backoff = 0;
    for (let attempt = 1;; attempt++) {
      // Waited for outside the commit lock, so a sibling worker commits meanwhile.
      if (backoff > 0) await sleep(Math.random() * Math.min(50, 2 ** backoff));
      backoff = 0;
      const turn = await this.#locks?.begin(appId);
      let generation: number | undefined;
      let wrote = false;
      try {
        // The versionstamp checks catch any other writer and the retry reads afresh. The rate
        // windows and limit overrides come in the same read as the wallet: no extra round trip.
        const remembered = useMemory ? this.#known.get(appId) : undefined;
        // A sibling worker's commit since ours: the memory is stale, but not contended.
        const cached = remembered && remembered.generation === (turn?.generation ?? 0)
          ? remembered
          : undefined;
        useMemory = false;
        let walletEntry,
          rateWindowsEntry,
          rateOverridesEntry,
          spendCapsEntry,
          reservations,
          markers;
        let slices, counters;
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
          [reservations, markers, slices] = await Promise.all([
            this.#readReservations(appId, ops, cached?.reservations),
            this.#readMarkers(ops),
            this.#readSlices(appId, ops),
          ]);
          // Like reservations, counters are read after the wallet and written only with it.
          counters = await this.#readCounters(appId, ops, spendCapsEntry.value, reservations);
        } catch (error) {
          // A failed read changed nothing: retry it rather than fail (and lose) a whole batch.
          this.stats.readFailures++;
          if (attempt >= this.#maxAttempts || givesUpBusy(ops, error)) {
            throw new WalletUnavailableError(`wallet ${appId}: KV reads failing`, { cause: error });
          }
          backoff = attempt;
          continue;
        }
        if (walletEntry.value === null || walletEntry.versionstamp === null) {
          throw new WalletNotFoundError(appId);
        }
        // Only another writer of the wallet makes it contended: a check that failed on a revoked
        // key, a new cap or limit leaves the app a quiet one (whose next commit sees such things).
        if (failedOn !== null && walletEntry.versionstamp !== failedOn) {
          this.#contendedUntil.set(appId, this.#now() + CONTENDED_MS);
        }
        failedOn = null;
        this.#sawCaps(appId, spendCapsEntry);

        const batchId = randomToken(96);
        const now = this.#now();
        const plan = planBatch({
          appId,
          ops,
          wallet: walletEntry.value,
          reservations,
          slices: new Map([...slices].map(([id, e]) => [id, e.value])),
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
        // Slices are also written by their process's posts, outside this batch.
        for (const entry of slices.values()) atomic.check(entry);
        plan.write(atomic);
        atomic.set(walletKey, plan.wallet);
        atomic.set(keys.walletBatch(appId, batchId), now, { expireIn: BATCH_MARKER_MS });
        // A commit whose outcome stays unknown (#commitMarked throws) may have written the wallet.
        wrote = true;
        commitError = undefined;
        const versionstamp = await this.#commitMarked(appId, batchId, atomic, (error) => {
          commitError = error;
        });
        wrote = versionstamp !== null;
        if (versionstamp !== null) {
          generation = turn?.end(true) ?? 0;
          this.stats.commits++;
          this.stats.opsCommitted += ops.length;
          const rateWindows = plan.rateRecord
            ? { key: keys.rateWindows(appId), value: plan.rateRecord, versionstamp }
            : rateWindowsEntry;
          this.#remember(
            appId,
            versionstamp,
            plan.wallet,
            plan.reservations,
            cached?.reservations,
            {
              rateWindows,
              rateOverrides: rateOverridesEntry,
              spendCaps: spendCapsEntry,
              generation,
            },
          );
          // A slice's answers show the wallet outside it: holds made before the slice end here.
          const slice = this.#slices.get(appId);
          if (slice) slice.walletAvailable = plan.wallet.available;
          plan.resolveAll(versionstamp);
          if (ops.some((op) => MONEY_MOVING.has(op.kind))) {
            this.#moneyMoved(appId);
          }
          return;
        }
        this.#known.delete(appId);
        if (cached) failedOn = cached.entry.versionstamp;
        commitFailed = true;
        this.stats.conflicts++;
        if (attempt >= this.#maxAttempts || givesUpBusy(ops, commitError)) {
          throw commitError === undefined
            ? new WalletUnavailableError(`wallet ${appId}: too many conflicts`)
            : new WalletUnavailableError(
              `wallet ${appId}: commits failing: ${(commitError as Error)?.message}`,
              { cause: commitError },
            );
        }
        backoff = attempt;
      } finally {
        if (generation === undefined) turn?.end(wrote);
      }
    }
  }

  /**
   * Commits a write that carries the batch marker `markerId`: its versionstamp, or null when it
   * did not commit. A commit that throws may or may not have been applied: the marker tells, and
   * the wallet as remembered is dropped meanwhile; one that was not applied is also told to
   * `notApplied`. A write beyond KV's limits is refused before it reaches the store, and would be
   * on every retry: its error is thrown as it is.
   */
  async #commitMarked(
    appId: string,
    markerId: string,
    atomic: Deno.AtomicOperation,
    notApplied?: (error: unknown) => void,
  ): Promise<string | null> {
    try {
      const result = await atomic.commit();
      return result.ok ? result.versionstamp : null;
    } catch (error) {
      if (KV_LIMIT_EXCEEDED.test(String((error as Error)?.message))) throw error;
      this.stats.unknownOutcomes++;
      this.#known.delete(appId);
      if (await this.#batchCommitted(appId, markerId, error)) return UNKNOWN_VERSION;
      notApplied?.(error);
      return null;
    }
  }

  /** Tells the listener (webhook detection) that the app's balance moved; never waits for it. */
  #moneyMoved(appId: string) {
    try {
      this.#onMoneyMoved?.(appId);
    } catch {
      // A listener's failure is its own; the commit is done and answered.
    }
  }

  /** Keeps the committed wallet and the holds this process knows are live, for the next batch. */
  #remember(
    appId: string,
    versionstamp: string,
    wallet: WalletRecord,
    touched: Map<string, ReservationRecord | null>,
    previous: Map<string, ReservationRecord> | undefined,
    rate: Pick<KnownWallet, "rateWindows" | "rateOverrides" | "spendCaps" | "generation">,
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
    // Read after the wallet: a hold changed since then implies a newer wallet, which fails our check.
    const ids = [...new Set(unknown)];
    const entries = await getManyChunked<ReservationRecord>(
      this.#kv,
      ids.map((id) => keys.reservation(appId, id)),
    );
    ids.forEach((id, j) => out.set(id, entries[j].value));
    return out;
  }

  async #readSlices(
    appId: string,
    ops: Op[],
  ): Promise<Map<string, Deno.KvEntryMaybe<WalletSliceRecord>>> {
    const ids = [...new Set(ops.map(sliceIdOf).filter((id): id is string => id !== undefined))];
    const out = new Map<string, Deno.KvEntryMaybe<WalletSliceRecord>>();
    if (ids.length === 0) return out;
    const entries = await this.#kv.getMany<WalletSliceRecord[]>(
      ids.map((id) => keys.walletSlice(appId, id)),
    );
    ids.forEach((id, i) => out.set(id, entries[i]));
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
    const entries = await getManyChunked<SpendCounter>(
      this.#kv,
      needed.map((n) => keys.spendCounter(appId, n.scope, n.id)),
    );
    needed.forEach((n, j) => out.set(`${n.scope}:${n.id}`, entries[j].value));
    return out;
  }

  async #readMarkers(ops: Op[]): Promise<Set<string>> {
    const markers = ops.flatMap((op) => {
      const marker = markerOf(op);
      return marker ? [marker] : [];
    });
    const present = new Set<string>();
    if (markers.length === 0) return present;
    const entries = await this.#kv.getMany(markers.map((m) => keys.creditMarker(m)));
    entries.forEach((e, i) => e.versionstamp !== null && present.add(markers[i]));
    return present;
  }
}

/** The usage records of posted charges and the app's spend counters, as a settle batch writes. */
function writeCharges(
  atomic: Deno.AtomicOperation,
  appId: string,
  usage: UsageRecord[],
  now: number,
) {
  const keysUsed = new Set<string>();
  const modelSpend = new Map<string, Micros>();
  // By each charge's own day, as its usage record and the usage report have it: a slice's post
  // just after midnight carries charges settled before it.
  const daySpend = new Map<string, Micros>();
  const usageDays = new Map<string, number>();
  let uncharged = 0;
  for (const u of usage) {
    setUsage(atomic, appId, u);
    keysUsed.add(u.keyId);
    const day = utcDay(u.createdAt);
    usageDays.set(day, (usageDays.get(day) ?? 0) + 1);
    if (u.cost > 0) {
      modelSpend.set(u.model, (modelSpend.get(u.model) ?? 0) + u.cost);
      daySpend.set(day, (daySpend.get(day) ?? 0) + u.cost);
    }
    uncharged += u.uncharged;
  }
  // As a settle batch: uncharged usage is counted beside the wallet, per app and service-wide.
  if (uncharged > 0) {
    atomic.sum(keys.appUncharged(appId), BigInt(uncharged))
      .sum(keys.serviceTotal("uncharged"), BigInt(uncharged));
  }
  for (const [model, spent] of modelSpend) atomic.sum(keys.modelSpend(appId, model), BigInt(spent));
  for (const [day, spent] of daySpend) atomic.sum(keys.dailySpend(appId, day), BigInt(spent));
  // Outdates the cached usage rollups of each day a record lands on, however late it lands, and
  // counts the day's records (a rollup that sums as many is the whole day).
  for (const [day, records] of usageDays) {
    atomic.sum(keys.usageDayVersion(appId, day), BigInt(records))
      .sum(keys.usageDayRecords(appId, day), BigInt(records));
  }
  for (const keyId of keysUsed) atomic.set(keys.apiKeyLastUsed(keyId), now);
}

function guardKeyId(slice: LocalSlice, guard: KeyGuard): string {
  for (const [keyId, g] of slice.guards) if (g === guard) return keyId;
  return "";
}

function assertAmount(amount: number) {
  if (!Number.isSafeInteger(amount) || amount < 0) {
    throw new RangeError(`invalid micro-USD amount: ${amount}`);
  }
}

function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}
