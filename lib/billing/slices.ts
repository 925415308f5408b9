/**
 * A process's slice of one app's wallet, in memory: the telecom way (RFC 4006 quota grants) and
 * TigerBeetle's pending/post transfers. The wallet's batch moves money (and a block of the app's
 * rate window) into a durable slice record in one commit; this process then admits reservations against
 * it without a commit, settles them in memory, and posts the charges (usage records and the
 * slice's `spent`) in batches on the slice record, which only this process writes: processes
 * sharing a KV no longer collide on the wallet's versionstamp for every request.
 *
 * Crash semantics (SIGKILL at any instant):
 * - nothing is overcharged and nothing overdrawn: reservations only ever take the slice's free money,
 *   and the slice's money left the wallet's available when it was granted;
 * - a reservation admitted but not settled is never charged (as a reservation released by the sweeper);
 * - a charge settled (its answer may be out, with its Tollbooth-Request-Cost) but not yet posted
 *   is lost: at most the charges of the requests settled in the last `postEveryMs` plus one post
 *   commit (and one grant commit of the same slice, which a post waits for); under load (64
 *   waiting charges start a post at once, and what settled during a post is posted next) about what
 *   settles during two commits, and never more than the slice's granted money;
 * - once the slice's lease has run out any sweeper returns it: the wallet gets its unspent part
 *   back and its posted spent, and the audit is exact again.
 *
 * Without a crash nothing settled is lost: a post whose commit KV cannot say applied (it threw, and
 * its batch marker cannot be read back) keeps its charges aside until their usage records, written
 * in the same commit, tell (a second later, then each second): the committed ones stay posted, the
 * others go back to the slice while it is live, else to the wallet; `drain` resolves them first.
 *
 * Pure bookkeeping: the engine (wallet.ts) does every read and commit.
 */
import type { ReservationRecord, UsageRecord, WalletSliceRecord } from "@/lib/db.ts";
import { type Micros, newId } from "@/lib/core/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";
import type { RateLimitStatus } from "./ratelimit.ts";
import type { ReserveInput, SettleInput, SettleResult } from "./wallet_types.ts";

export interface SliceHold {
  reservation: ReservationRecord;
}

export class LocalSlice {
  record: WalletSliceRecord;
  /** The slice entry's versionstamp as this process last committed it. */
  versionstamp: string;
  /** Money neither posted, pending, nor held. */
  free: Micros;
  /** The rate block's requests and tokens not yet used (tokens may go below 0: used beyond). */
  requestsLeft: number;
  tokensLeft: number;
  readonly reservations = new Map<string, ReservationRecord>();
  /** Settled here, not yet posted: usage records and what they charge. */
  pending: UsageRecord[] = [];
  pendingSpent: Micros = 0;
  /** Keys used since the last post: each post re-checks their index entries (revocation). */
  readonly guards = new Map<string, KeyGuard>();
  readonly revokedKeys = new Set<string>();
  /** The versionstamp of the commit that granted the slice: a key revoked since may be on it. */
  readonly grantedVersionstamp: string;
  keysWithOwnLimits: Set<string>;
  /** The wallet's available outside slices as this process last committed or read it (for answers). */
  walletAvailable: Micros;
  rate: RateLimitStatus | undefined;
  /** No new reservations: the slice is being returned or replaced. */
  closing = false;
  /**
   * No new reservations either: a reserve was refused for money this slice held. Its free money
   * goes back to the wallet, and the slice goes back once its holds end.
   */
  recalled = false;
  /** The newest recall this slice has answered, and when this process last looked for one. */
  recallAnswered = 0;
  recallCheckedAt = 0;
  lastUsed: number;
  /** When its charges were last posted (or it was granted): the next post is due postEveryMs on. */
  postedAt: number;
  /** Money settled, reservations admitted and tokens used since the last grant: the app's pace. */
  spentSinceGrant: Micros = 0;
  admittedSinceGrant = 0;
  tokensSinceGrant = 0;

  constructor(
    record: WalletSliceRecord,
    versionstamp: string,
    grant: {
      requests: number;
      tokens: number;
      available: Micros;
      keysWithOwnLimits: string[];
      rate?: RateLimitStatus;
    },
    now: number,
  ) {
    this.record = record;
    this.versionstamp = versionstamp;
    this.grantedVersionstamp = versionstamp;
    this.free = record.granted - record.spent;
    this.requestsLeft = grant.requests;
    this.tokensLeft = grant.tokens;
    this.walletAvailable = grant.available;
    this.keysWithOwnLimits = new Set(grant.keysWithOwnLimits);
    this.rate = grant.rate;
    this.lastUsed = now;
    this.postedAt = now;
  }

  /** A grant committed into this slice: more money and rate room. */
  grew(
    record: WalletSliceRecord,
    versionstamp: string,
    grant: {
      granted: Micros;
      requests: number;
      tokens: number;
      available: Micros;
      keysWithOwnLimits: string[];
      rate?: RateLimitStatus;
    },
  ) {
    // The grant read the record after every post of this process (they take turns on a slice),
    // and a post whose outcome was unknown may have committed: its spent is the record's.
    this.record = { ...record };
    this.versionstamp = versionstamp;
    this.free += grant.granted;
    this.requestsLeft += grant.requests;
    this.tokensLeft += grant.tokens;
    this.walletAvailable = grant.available;
    this.keysWithOwnLimits = new Set(grant.keysWithOwnLimits);
    this.rate = grant.rate ?? this.rate;
    this.spentSinceGrant = 0;
    this.admittedSinceGrant = 0;
    this.tokensSinceGrant = 0;
  }

  /**
   * Money given back to the wallet (slice_give_back): the record as that commit left it, spent
   * included (a post whose outcome was unknown may have committed before it).
   */
  gaveBack(record: WalletSliceRecord, versionstamp: string) {
    this.record = { ...record };
    this.versionstamp = versionstamp;
  }

  /** Whether a request with this key and these tokens is served by the slice at all. */
  serves(keyId: string, tokens: number): boolean {
    return !this.closing && !this.recalled && !this.keysWithOwnLimits.has(keyId) &&
      !this.revokedKeys.has(keyId) &&
      tokens >= 0;
  }

  /** Admits a reservation in memory, or null when the slice lacks the money or the rate room. */
  admit(
    input: ReserveInput,
    now: number,
  ): { reservation: ReservationRecord; available: Micros; rate?: RateLimitStatus } | null {
    const tokens = input.tokens ?? 0;
    if (!this.serves(input.keyId, tokens)) return null;
    if (this.free < input.amount || this.requestsLeft < 1 || this.tokensLeft < tokens) return null;
    // A reservation must not outlive the slice's lease unrenewed; the renewal runs well before.
    if (this.record.leaseUntil <= now) return null;
    this.free -= input.amount;
    this.requestsLeft -= 1;
    this.tokensLeft -= tokens;
    this.admittedSinceGrant += 1;
    this.tokensSinceGrant += tokens;
    this.lastUsed = now;
    if (input.keyGuard) this.guards.set(input.keyId, input.keyGuard);
    const reservation: ReservationRecord = {
      id: newId("res", now),
      appId: this.record.appId,
      keyId: input.keyId,
      requestId: input.requestId,
      model: input.model,
      amount: input.amount,
      createdAt: now,
      leaseUntil: this.record.leaseUntil,
      tokens,
      sliceId: this.record.id,
    };
    this.reservations.set(reservation.id, reservation);
    return { reservation, available: this.available, rate: this.#rateStatus() };
  }

  /** Settles a reservation in memory: the charge is pending until the next post commits it. */
  settle(reservationId: string, input: SettleInput, now: number): SettleResult | null {
    const r = this.#take(reservationId, input, now);
    if (!r) return null;
    // As the wallet path: the reservation and, beyond it, the slice's free money; never more.
    const charged = Math.min(input.cost, r.amount + this.free);
    this.free += r.amount - charged;
    this.pendingSpent += charged;
    this.spentSinceGrant += charged;
    const usage = this.#usage(r, input, charged, now);
    this.pending.push(usage);
    return {
      settled: true,
      charged,
      uncharged: usage.uncharged,
      available: this.available,
      usage,
      rate: this.#rateStatus(),
    };
  }

  /**
   * The usage record of a reservation whose cost exceeds what the slice holds, for the wallet to
   * charge whole instead; the reservation stays until `chargedOutside` or `settle` ends it.
   */
  usageOutside(reservationId: string, input: SettleInput, now: number): UsageRecord | null {
    const r = this.reservations.get(reservationId);
    return r ? this.#usage(r, input, input.cost, now) : null;
  }

  /** What settling here could charge at most: the reservation and the slice's free money. */
  cover(reservationId: string): Micros {
    return (this.reservations.get(reservationId)?.amount ?? 0) + this.free;
  }

  /**
   * Ends a reservation whose usage the wallet charged: its hold goes back to the free money, the
   * tokens used count against the slice's rate block.
   */
  chargedOutside(reservationId: string, input: SettleInput, now: number) {
    const r = this.#take(reservationId, input, now);
    if (r) this.free += r.amount;
  }

  #take(reservationId: string, input: SettleInput, now: number): ReservationRecord | null {
    const r = this.reservations.get(reservationId);
    if (!r) return null;
    this.reservations.delete(reservationId);
    this.tokensLeft += (r.tokens ?? 0) - (input.promptTokens + input.completionTokens);
    this.lastUsed = now;
    return r;
  }

  #usage(r: ReservationRecord, input: SettleInput, charged: Micros, now: number): UsageRecord {
    return {
      ...input,
      id: newId("use", now),
      appId: this.record.appId,
      cost: charged,
      uncharged: input.cost - charged,
      reserved: r.amount,
      createdAt: now,
    };
  }

  /** Releases a reservation: nothing ran (or what ran is unknown), its money and rate room come back. */
  release(reservationId: string, now: number): boolean {
    const r = this.reservations.get(reservationId);
    if (!r) return false;
    this.reservations.delete(reservationId);
    this.free += r.amount;
    this.tokensLeft += r.tokens ?? 0;
    this.lastUsed = now;
    return true;
  }

  /** Takes up to `max` pending charges for one post commit. */
  takePending(max: number): { usage: UsageRecord[]; spent: Micros } {
    const usage = this.pending.splice(0, max);
    const spent = usage.reduce((n, u) => n + u.cost, 0);
    this.pendingSpent -= spent;
    return { usage, spent };
  }

  /** A post failed: its charges go back in front of the queue. */
  putBack(usage: UsageRecord[], spent: Micros) {
    this.pending.unshift(...usage);
    this.pendingSpent += spent;
  }

  get idle(): boolean {
    return this.reservations.size === 0 && this.pending.length === 0;
  }

  /** Spendable as this process knows it: the wallet outside slices plus this slice's free part. */
  get available(): Micros {
    return this.walletAvailable + this.free;
  }

  #rateStatus(): RateLimitStatus | undefined {
    if (!this.rate) return undefined;
    // The block not yet used is room this process still has; the rest is as at the grant.
    return {
      requests: {
        ...this.rate.requests,
        remaining: Math.min(
          this.rate.requests.limit,
          this.rate.requests.remaining + Math.max(0, this.requestsLeft),
        ),
      },
      tokens: {
        ...this.rate.tokens,
        remaining: Math.min(
          this.rate.tokens.limit,
          this.rate.tokens.remaining + Math.max(0, this.tokensLeft),
        ),
      },
    };
  }
}
