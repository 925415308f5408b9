/**
 * The wallet's public face: what callers of `Wallets` pass, what they get back, and what it throws.
 */
import type { LedgerEntry, RateLimits, ReservationRecord, UsageRecord } from "@/lib/db.ts";
import type { CommitLocks } from "./commit_locks.ts";
import type { Micros } from "@/lib/core/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";
import type { RateBreach, RateLimitStatus } from "./ratelimit.ts";
import type { CapBreach } from "./spend_caps.ts";

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
  /** The app's end user (the request's `user`), for per-end-user caps. */
  user?: string;
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
  /** Over a spend cap of the key or of the end user (holds included): nothing reserved. */
  | {
    ok: false;
    reason: "spend_cap";
    breach: CapBreach;
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

/** Takes a refunded or disputed payment back from the wallet (see `WalletRecord.owed`). */
export interface DebitInput {
  amount: Micros;
  kind: "refund" | "chargeback";
  reason: string;
  /** The refund's or dispute's id; null for an operator's debit that names none. */
  reference: string | null;
  /** Written with the debit; a second debit with the same marker changes nothing. */
  marker: string;
  /**
   * Refused (DebitBeyondCreditsError) when more than the wallet was credited and not yet taken
   * back: an operator's typo's guard. Decided in the debit's commit, so debits at once from any
   * number of processes are held to it together.
   */
  withinCredits?: boolean;
}

export type DebitResult =
  | {
    debited: true;
    entry: LedgerEntry;
    /** What the available balance gave at once; the rest of `entry.amount` is owed. */
    taken: Micros;
    owed: Micros;
    available: Micros;
  }
  | { debited: false; duplicate: true; available: Micros };

/**
 * Gives back what a debit took when it is undone (a refund failed or canceled, a dispute won):
 * what is still owed of it is forgiven first, the rest returns to the available balance.
 */
export interface DebitReversalInput {
  amount: Micros;
  kind: "refund_reversed" | "chargeback_reversed";
  reason: string;
  reference: string;
  marker: string;
}

export type DebitReversalResult =
  | { reversed: true; entry: LedgerEntry; available: Micros; owed: Micros }
  | { reversed: false; duplicate: true; available: Micros };

export type ReleaseResult = { released: boolean; available: Micros; rate?: RateLimitStatus };

export type RenewResult = { renewed: boolean; leaseUntil: number };

export class WalletNotFoundError extends Error {
  constructor(appId: string) {
    super(`no wallet for app ${appId}`);
  }
}

export class WalletUnavailableError extends Error {}

/** The key guarding a reserve no longer exists: it was revoked since the caller looked it up. */
export class KeyRevokedError extends Error {}

/**
 * The most a wallet may be credited in all (starter, top-ups and operator credits): one billion
 * USD. Every sum the wallet keeps stays an exact integer far below 2^53 micro-dollars.
 */
export const MAX_WALLET_CREDITS: Micros = 1_000_000_000_000_000;

/** A credit that would take the wallet's credits past MAX_WALLET_CREDITS; nothing was written. */
export class WalletCreditLimitError extends RangeError {}

/** A debit `withinCredits` of more than the wallet was credited and not yet taken back. */
export class DebitBeyondCreditsError extends RangeError {}

export interface WalletOptions {
  /** How long a reservation lasts, unless renewed, before the sweeper may release it. */
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
  /**
   * Told, after a commit that settled or credited, which app's wallet changed (webhook detection).
   * Called synchronously and must return at once: it may only schedule work, never await it.
   */
  onMoneyMoved?: (appId: string) => void;
  /** Serve hot wallets from slices (slices.ts); without it every hold is its own commit. */
  slices?: SliceOptions;
  /** Workers of one process: their commits of one wallet take turns (commit_locks.ts). */
  locks?: CommitLocks;
}

export interface SliceOptions {
  /** A slice its process stopped renewing is given back by any sweeper after this long. */
  leaseMs?: number;
  /** Settled charges wait at most about this long (plus one commit) to be posted; 64 at once. */
  postEveryMs?: number;
  /** A slice without holds for this long is given back to its wallet. */
  idleMs?: number;
  /**
   * Serve an app from a slice only once it is hot: this many reserves within one second in this
   * process, or a commit of it that met another writer's within the last second (or a slice of it
   * still live). Unset, every app is served from slices.
   */
  hotPerSecond?: number;
}

export interface WalletStats {
  commits: number;
  conflicts: number;
  unknownOutcomes: number;
  readFailures: number;
  opsCommitted: number;
  /** Slices granted or grown, returned (by this process), posts of charges, holds admitted in one. */
  sliceGrants: number;
  sliceReturns: number;
  slicePosts: number;
  sliceAdmitted: number;
  /** Reserves that slices were on for but that took the per-request path (one commit each). */
  sliceFallbacks: number;
  /**
   * Recalls this process made (a reserve refused for money other processes' slices held), and
   * slices of this process that gave their free money back (recalled here or elsewhere).
   */
  sliceRecalls: number;
  sliceGiveBacks: number;
  /**
   * Upstream calls started while their reservation committed (the wallet as this process knew it
   * said it fits), and those whose reservation was then refused: upstream aborted, nothing charged.
   */
  optimisticStarts: number;
  mispredictions: number;
  /**
   * The holds the aborted calls would have taken, in micro-USD: an upper bound of what their
   * providers may bill for them (the hold bounds the whole call), which is the operator's.
   */
  mispredictionExposureMicros: number;
  /**
   * Upstream calls sent and then given up for the provider's timeout before any answer (a route
   * of a request, its fallbacks each counted), and the holds they were sent under: an upper bound
   * of what their providers may bill for them, which nobody is charged.
   */
  abandonedCalls: number;
  abandonedExposureMicros: number;
  /**
   * Calls that ended before their upstream finished (client gone or stalled, upstream cut) and
   * were charged by our own count of the output, the provider's usage never having come, and what
   * their holds covered beyond that charge: an upper bound of what their providers may bill beyond
   * it, which nobody is charged.
   */
  endedEarlyCalls: number;
  endedEarlyExposureMicros: number;
  /** Charges whose slice was gone when posted: charged from the wallet instead. */
  orphanCharges: number;
  /**
   * Settles that failed for good (KV down or locked past every try), their requests answered as
   * not charged, and what their usage cost: the operator's loss. Of it, what was recorded later as
   * the apps' uncharged usage (then also in the service's uncharged total); the rest was not,
   * its hold released by the sweeper first or the process gone before KV let it.
   */
  unbilledSettles: number;
  unbilledMicros: number;
  unbilledRecordedMicros: number;
  /** Commit locks (workers) taken over from a sibling that held one past its wait: it hung or died. */
  commitLockTakeovers: number;
}
