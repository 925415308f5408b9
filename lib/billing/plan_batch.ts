/**
 * The pure decisions of a wallet batch: which queued operations fit in one commit, which reserves
 * a revoked key refuses, and what every operation decides against the running wallet. No I/O: the
 * engine (`wallet.ts`) reads, commits, and only then applies the answers.
 */
import {
  keys,
  type LedgerEntry,
  type ReservationRecord,
  type SpendCapsRecord,
  type SpendCounter,
  type SpendScope,
  type UsageRecord,
  utcDay,
  type WalletRecord,
  type WalletSliceRecord,
} from "@/lib/db.ts";
import { formatUsd, type Micros, newId } from "@/lib/core/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";
import type { RateLimitStatus, RateWindows } from "./ratelimit.ts";
import { creditedOf, setUsage } from "./ledger.ts";
import {
  capBreach,
  cappedScopes,
  capRoom,
  counterId,
  currentCounter,
  heldCounterId,
  holdOn,
  releaseOn,
  reservationCappedScopes,
  spendOn,
} from "./spend_caps.ts";
import {
  type CreditInput,
  type CreditResult,
  DebitBeyondCreditsError,
  type DebitInput,
  type DebitResult,
  type DebitReversalInput,
  type DebitReversalResult,
  KeyRevokedError,
  MAX_WALLET_CREDITS,
  type ReleaseResult,
  type RenewResult,
  type ReserveInput,
  type ReserveResult,
  type SettleInput,
  type SettleResult,
  WalletCreditLimitError,
} from "./wallet_types.ts";

/** One queued operation on an app's wallet, with the promise it answers. */
export type Op =
  | { kind: "reserve"; input: ReserveInput; done: Settler<ReserveResult> }
  | {
    kind: "settle";
    reservationId: string;
    input: SettleInput;
    /**
     * A settle that failed for good earlier, its request answered as not charged: the hold ends
     * and the usage is recorded as uncharged, nothing taken from the wallet.
     */
    unbilled?: true;
    done: Settler<SettleResult>;
  }
  | {
    kind: "release";
    reservationId: string;
    onlyIfExpiredAt?: number;
    done: Settler<ReleaseResult>;
  }
  | {
    kind: "renew";
    reservationId: string;
    done: Settler<RenewResult>;
  }
  | { kind: "credit"; input: CreditInput; done: Settler<CreditResult> }
  /** Takes a refunded or disputed payment back: what is available, the rest owed. */
  | { kind: "debit"; input: DebitInput; done: Settler<DebitResult> }
  /** Gives back what a debit took (a refund failed, a dispute won): what is owed forgiven first. */
  | { kind: "debit_reversal"; input: DebitReversalInput; done: Settler<DebitReversalResult> }
  /** Moves money (and a block of the rate window) into a process's slice, creating or growing it. */
  | { kind: "slice_grant"; grant: SliceGrantInput; done: Settler<SliceGrantResult> }
  /** Gives a slice's unspent money back to the wallet and posts its spent; deletes the slice. */
  | {
    kind: "slice_return";
    sliceId: string;
    onlyIfExpiredAt?: number;
    /** The part of the slice's rate block its process did not use (unknown after a crash). */
    unusedRate?: { requests: number; tokens: number };
    done: Settler<SliceReturnResult>;
  }
  /**
   * Gives part of a live slice's unspent money back to the wallet (its process knows the part no
   * hold or unposted charge needs), and its rate block's unused part to the app's window; the
   * slice stays, with its holds.
   */
  | {
    kind: "slice_give_back";
    sliceId: string;
    amount: Micros;
    unusedRate: { requests: number; tokens: number };
    done: Settler<SliceGiveBackResult>;
  }
  /**
   * Posts a charge whose slice is gone (its process stalled past the slice's lease and a sweeper
   * returned it): charged from the wallet's available, never beyond it.
   */
  | {
    kind: "charge";
    usage: UsageRecord;
    /**
     * What the caller can charge elsewhere (a slice's hold and free money): when the wallet's
     * available cannot beat it, nothing is charged here (`settled: false`).
     */
    floor?: Micros;
    done: Settler<SettleResult>;
  };

export interface SliceGrantInput {
  sliceId: string;
  /** Money wanted; the grant is at most 1/SLICE_SHARE of what is available. */
  want: Micros;
  /** Below this the slice is not worth it (the balance is low): nothing is granted. */
  minimum: Micros;
  rateWant: { requests: number; tokens: number };
  /** The tokens of the request that asked: a block smaller than this is refused. */
  minimumTokens: number;
  leaseMs: number;
  /**
   * The grant adds to a slice this process holds. Its entry being gone means a sweeper returned it
   * once its lease ran out, with the money this process still counts free in it: nothing is
   * granted then (`gone`), rather than a fresh entry under the old id that the process would add
   * that returned money to.
   */
  grows: boolean;
}

export type SliceGrantResult =
  | {
    granted: Micros;
    requests: number;
    tokens: number;
    record: WalletSliceRecord;
    available: Micros;
    /** Keys with limits of their own: served by the per-request path, never by a slice. */
    keysWithOwnLimits: string[];
    rate?: RateLimitStatus;
    /** The grant's commit ("" when its outcome was unknown and then found applied). */
    versionstamp: string;
  }
  | { granted: 0; available: Micros; gone?: true };

export type SliceReturnResult = { returned: boolean; available: Micros };

export type SliceGiveBackResult =
  | { given: Micros; record: WalletSliceRecord; available: Micros; versionstamp: string }
  | { given: 0; available: Micros };

/** A slice takes at most this fraction of the wallet's available money at each grant. */
const SLICE_SHARE = 8;
/** A slice's rate block is at most this fraction of each app limit. */
const SLICE_RATE_SHARE = 1 / 16;

export interface Settler<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/**
 * KV allows 10 checks per atomic operation on self-hosted denokv: the wallet's, the rate-limit
 * overrides', the spend caps', and the rest shared by credit markers and API-key guards.
 */
const MAX_EXTRA_CHECKS = 7;

/** Takes the next operations that fit in one commit: the batch size and the check budget. */
export function takeBatch(queue: Op[], maxBatch: number): Op[] {
  let extraChecks = 0;
  const guarded = new Set<string>();
  let n = 0;
  while (n < queue.length && n < maxBatch) {
    const op = queue[n];
    if (markerOf(op)) {
      if (extraChecks === MAX_EXTRA_CHECKS) break;
      extraChecks++;
    }
    const guard = op.kind === "reserve" ? op.input.keyGuard : undefined;
    if (guard && !guarded.has(guardId(guard))) {
      if (extraChecks === MAX_EXTRA_CHECKS) break;
      extraChecks++;
      guarded.add(guardId(guard));
    }
    const slice = sliceIdOf(op);
    if (slice && !guarded.has(`slice:${slice}`)) {
      if (extraChecks === MAX_EXTRA_CHECKS) break;
      extraChecks++;
      guarded.add(`slice:${slice}`);
    }
    n++;
  }
  return queue.splice(0, n);
}

/** The marker an operation writes once (a credit's, a debit's): checked absent by the commit. */
export function markerOf(op: Op): string | undefined {
  if (op.kind === "credit" || op.kind === "debit" || op.kind === "debit_reversal") {
    return op.input.marker;
  }
  return undefined;
}

/** The slice an operation reads and writes (its entry is checked by the batch's commit). */
export function sliceIdOf(op: Op): string | undefined {
  if (op.kind === "slice_grant") return op.grant.sliceId;
  if (op.kind === "slice_return" || op.kind === "slice_give_back") return op.sliceId;
  return undefined;
}

/** The distinct key guards of a batch's reserves (the first versionstamp seen for each key). */
export function keyGuards(ops: Op[]): Map<string, KeyGuard> {
  const guards = new Map<string, KeyGuard>();
  for (const op of ops) {
    const guard = op.kind === "reserve" ? op.input.keyGuard : undefined;
    if (guard && !guards.has(guardId(guard))) guards.set(guardId(guard), guard);
  }
  return guards;
}

export function guardId(guard: KeyGuard): string {
  return guard.key.join("\u0000");
}

/**
 * Given the current versionstamp of each guarded key's entry (null: gone), refuses the reserves
 * whose key was revoked and keeps the others, their guards brought up to date.
 */
export function refuseRevokedKeys(ops: Op[], current: Map<string, string | null>): Op[] {
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

export interface PlanInput {
  appId: string;
  ops: Op[];
  wallet: WalletRecord;
  reservations: Map<string, ReservationRecord | null>;
  /** The slices the batch's slice operations name, as read (null: none). */
  slices?: Map<string, WalletSliceRecord | null>;
  markers: Set<string>;
  now: number;
  leaseMs: number;
  /** The app's rate windows, when rate limits are enforced; written back with the wallet. */
  rate?: RateWindows;
  /** The app's spend caps, and the counters of the capped scopes this batch touches. */
  spendCaps?: SpendCapsRecord | null;
  counters?: Map<string, SpendCounter | null>;
}

/** The spend counters a batch needs read: the capped scopes of its reserves, settles and releases. */
export function countersNeeded(
  ops: Op[],
  caps: SpendCapsRecord | null,
  reservations: Map<string, ReservationRecord | null>,
): { scope: SpendScope; id: string }[] {
  const needed = new Map<string, { scope: SpendScope; id: string }>();
  const add = (scope: SpendScope, id: string) => needed.set(counterId(scope, id), { scope, id });
  for (const op of ops) {
    if (op.kind === "reserve") {
      for (const s of cappedScopes(caps, op.input.keyId, op.input.user)) add(s.scope, s.id);
    } else if (op.kind === "settle" || op.kind === "release") {
      const r = reservations.get(op.reservationId);
      if (!r) continue;
      for (const scope of r.capped ?? []) add(scope, heldCounterId(r, scope));
      for (const s of reservationCappedScopes(caps, r)) add(s.scope, s.id);
    }
  }
  return [...needed.values()];
}

export type BatchPlan = ReturnType<typeof planBatch>;

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
  const slices = new Map(input.slices ?? []);
  const markersSeen = new Set(input.markers);
  const markerChecks: string[] = [];
  const writes: ((atomic: Deno.AtomicOperation) => void)[] = [];
  const answers: ((versionstamp: string) => void)[] = [];
  // Per-batch totals: one mutation per counter instead of one per settle (KV's mutation budget,
  // and the commit's cost, grow with mutations).
  const keysUsed = new Set<string>();
  const modelSpend = new Map<string, Micros>();
  /** By each charge's own day, as its usage record and the usage report have it. */
  const daySpend = new Map<string, Micros>();
  /**
   * How many of the batch's usage records each day has, free ones too: their cached rollups are
   * outdated, and the day's version counts its records.
   */
  const usageDays = new Map<string, number>();
  let uncharged: Micros = 0;
  const caps = input.spendCaps ?? null;
  const counters = new Map(input.counters ?? []);
  const countersTouched = new Map<string, { scope: SpendScope; id: string }>();
  const counter = (scope: SpendScope, id: string) =>
    currentCounter(counters.get(counterId(scope, id)) ?? null, now);
  const putCounter = (scope: SpendScope, id: string, value: SpendCounter) => {
    counters.set(counterId(scope, id), value);
    countersTouched.set(counterId(scope, id), { scope, id });
  };

  const chargeUsage = (usage: UsageRecord) => {
    writes.push((a) => setUsage(a, appId, usage));
    keysUsed.add(usage.keyId);
    const day = utcDay(usage.createdAt);
    usageDays.set(day, (usageDays.get(day) ?? 0) + 1);
    if (usage.cost > 0) {
      modelSpend.set(usage.model, (modelSpend.get(usage.model) ?? 0) + usage.cost);
      daySpend.set(day, (daySpend.get(day) ?? 0) + usage.cost);
    }
    uncharged += usage.uncharged;
  };

  /** Set when the batch changed the wallet with no other write (money owed taken). */
  let walletChanged = false;
  /**
   * Money owed for a refund is taken before anything can be reserved or granted from the available
   * balance, and once more after the batch: holds released and credits made in it pay it first.
   */
  const collectOwed = () => {
    const owed = wallet.owed ?? 0;
    if (owed === 0 || wallet.available === 0) return;
    const take = Math.min(owed, wallet.available);
    wallet.available -= take;
    wallet.refunded = (wallet.refunded ?? 0) + take;
    wallet.owed = owed - take;
    walletChanged = true;
  };
  /** An answer decided now, delivered once the batch has committed. */
  const answerWith = <T>(done: Settler<T>, answer: T) => answers.push(() => done.resolve(answer));
  /**
   * A ledger entry, with the marker (checked absent by the commit) that makes it happen once, and
   * the wallet as the entry left it: a webhook announces the balance after each, however many
   * land before it looks.
   */
  const writeEntry = (made: LedgerEntry, marker: string | undefined) => {
    const entry = { ...made, balanceAfter: wallet.available, owedAfter: wallet.owed ?? 0 };
    if (marker) {
      markersSeen.add(marker);
      markerChecks.push(marker);
      writes.push((a) => a.set(keys.creditMarker(marker), { appId, entryId: entry.id }));
    }
    writes.push((a) => a.set(keys.ledgerEntry(appId, entry.id), entry));
    return entry;
  };

  const dropReservation = (r: ReservationRecord) => {
    live.set(r.id, null);
    touched.set(r.id, null);
    writes.push((a) =>
      a.delete(keys.reservation(appId, r.id)).delete(
        keys.reservationExpiry(r.leaseUntil, appId, r.id),
      )
    );
  };

  collectOwed();
  for (const op of input.ops) {
    if (op.kind === "reserve" || op.kind === "slice_grant") collectOwed();
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
        // A cap counts the reservations of requests in flight: a burst cannot pass it together.
        const scopes = cappedScopes(caps, op.input.keyId, op.input.user);
        const breach = scopes.map((s) => capBreach(s.scope, s.caps, counter(s.scope, s.id), amount))
          .find((b) => b !== null);
        if (breach) {
          const answer = {
            ok: false as const,
            reason: "spend_cap" as const,
            breach,
            available: wallet.available,
            reserved: wallet.reserved,
            rate: admission?.status,
          };
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
        if (op.input.user !== undefined) reservation.user = op.input.user;
        if (scopes.length > 0) {
          reservation.capped = scopes.map((s) => s.scope);
          const keyCounter = scopes.find((s) => s.scope === "key")?.id;
          if (keyCounter !== undefined && keyCounter !== op.input.keyId) {
            reservation.keyCounter = keyCounter;
          }
          for (const s of scopes) putCounter(s.scope, s.id, holdOn(counter(s.scope, s.id), amount));
        }
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
        // The reservation leaves the counters that held it; the charge is spent under every cap now set.
        const spendScopes = new Map<string, { scope: SpendScope; id: string; held: boolean }>();
        for (const scope of r.capped ?? []) {
          const id = heldCounterId(r, scope);
          spendScopes.set(counterId(scope, id), { scope, id, held: true });
        }
        const capped = reservationCappedScopes(caps, r);
        for (const s of capped) {
          if (!spendScopes.has(counterId(s.scope, s.id))) {
            spendScopes.set(counterId(s.scope, s.id), { ...s, held: false });
          }
        }
        // A cost above the hold is charged only as far as the balance and every cap have room:
        // the rest is uncharged, as the balance's is, so that no settle passes a cap either.
        let roomAboveHold = wallet.available;
        for (const s of capped) {
          const c = counter(s.scope, s.id);
          const othersHeld = c.held -
            (spendScopes.get(counterId(s.scope, s.id))?.held ? r.amount : 0);
          roomAboveHold = Math.min(roomAboveHold, capRoom(s.caps, c, othersHeld) - r.amount);
        }
        const charged = op.unbilled
          ? 0
          : Math.min(op.input.cost, r.amount + Math.max(0, roomAboveHold));
        wallet.reserved -= r.amount;
        wallet.available += r.amount - charged;
        wallet.spent += charged;
        dropReservation(r);
        for (const s of spendScopes.values()) {
          putCounter(
            s.scope,
            s.id,
            spendOn(counter(s.scope, s.id), s.held ? r.amount : 0, charged),
          );
        }
        const rate = input.rate?.adjustTokens(
          r.keyId,
          op.input.promptTokens + op.input.completionTokens - (r.tokens ?? 0),
          now,
          { reserved: r.tokens ?? 0, since: r.createdAt },
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
        chargeUsage(usage);
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
          leaseEnded(r.leaseUntil, op.onlyIfExpiredAt);
        if (releasable) {
          wallet.reserved -= r.amount;
          wallet.available += r.amount;
          dropReservation(r);
          for (const scope of r.capped ?? []) {
            const id = heldCounterId(r, scope);
            putCounter(scope, id, releaseOn(counter(scope, id), r.amount));
          }
        }
        // Nothing ran (or what ran is unknown after a crash): its tokens go back to the limit.
        const rate = releasable
          ? input.rate?.adjustTokens(r.keyId, -(r.tokens ?? 0), now, {
            reserved: r.tokens ?? 0,
            since: r.createdAt,
          })
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
          answerWith(op.done, { credited: false, duplicate: true, available: wallet.available });
          break;
        }
        if (creditedOf(wallet) + op.input.amount > MAX_WALLET_CREDITS) {
          const refused = new WalletCreditLimitError(
            `a credit of ${formatUsd(op.input.amount)} USD would take the wallet's credits past ${
              formatUsd(MAX_WALLET_CREDITS)
            } USD, the most a wallet holds; nothing was credited`,
          );
          // Answered with the batch, so that a batch planned again refuses it again.
          answers.push(() => op.done.reject(refused));
          break;
        }
        const entry = ledgerEntryOf(op.input, op.input.kind, now);
        wallet.available += entry.amount;
        if (entry.kind === "starter") wallet.starter += entry.amount;
        else if (entry.kind === "top_up") wallet.topUps += entry.amount;
        else wallet.operatorCredits += entry.amount;
        collectOwed();
        answerWith(op.done, {
          credited: true,
          entry: writeEntry(entry, marker),
          available: wallet.available,
        });
        break;
      }
      case "debit": {
        const { marker } = op.input;
        if (markersSeen.has(marker)) {
          answerWith(op.done, { debited: false, duplicate: true, available: wallet.available });
          break;
        }
        const takeable = creditedOf(wallet) - (wallet.refunded ?? 0) - (wallet.owed ?? 0);
        if (op.input.withinCredits && op.input.amount > takeable) {
          const refused = new DebitBeyondCreditsError(
            `a debit of ${formatUsd(op.input.amount)} USD is more than the wallet was credited ` +
              `and not yet taken back (${formatUsd(takeable)} USD); nothing was taken`,
          );
          answers.push(() => op.done.reject(refused));
          break;
        }
        const entry = ledgerEntryOf(op.input, op.input.kind, now);
        // A wallet never goes below zero: what is not available now is owed, and taken later.
        const taken = Math.min(entry.amount, wallet.available);
        wallet.available -= taken;
        wallet.refunded = (wallet.refunded ?? 0) + taken;
        wallet.owed = (wallet.owed ?? 0) + entry.amount - taken;
        answerWith(op.done, {
          debited: true,
          entry: writeEntry(entry, marker),
          taken,
          owed: wallet.owed,
          available: wallet.available,
        });
        break;
      }
      case "debit_reversal": {
        const { marker } = op.input;
        if (markersSeen.has(marker)) {
          answerWith(op.done, { reversed: false, duplicate: true, available: wallet.available });
          break;
        }
        const entry = ledgerEntryOf(op.input, op.input.kind, now);
        const forgiven = Math.min(entry.amount, wallet.owed ?? 0);
        // Never more than was taken: a reversal without its debit gives nothing back.
        const returned = Math.min(entry.amount - forgiven, wallet.refunded ?? 0);
        const given = { ...entry, amount: forgiven + returned };
        wallet.owed = (wallet.owed ?? 0) - forgiven;
        wallet.refunded = (wallet.refunded ?? 0) - returned;
        wallet.available += returned;
        answerWith(op.done, {
          reversed: true,
          entry: writeEntry(given, marker),
          available: wallet.available,
          owed: wallet.owed,
        });
        break;
      }
      case "slice_grant": {
        const { grant } = op;
        const existing = slices.get(grant.sliceId) ?? null;
        if (grant.grows && !existing) {
          const answer = { granted: 0 as const, available: wallet.available, gone: true as const };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        const money = Math.min(grant.want, Math.floor(wallet.available / SLICE_SHARE));
        let block = { requests: 0, tokens: 0 };
        let fits = money >= grant.minimum && money > 0;
        if (fits && input.rate) {
          block = input.rate.takeBlock(grant.rateWant, SLICE_RATE_SHARE, now);
          fits = block.requests >= 1 && block.tokens >= grant.minimumTokens;
          if (!fits) input.rate.giveBack(block.requests, block.tokens, now);
        }
        if (!fits) {
          const answer = { granted: 0 as const, available: wallet.available };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        wallet.available -= money;
        wallet.reserved += money;
        const record: WalletSliceRecord = existing
          ? {
            ...existing,
            granted: existing.granted + money,
            rateRequests: existing.rateRequests + block.requests,
            rateTokens: existing.rateTokens + block.tokens,
            leaseUntil: now + grant.leaseMs,
          }
          : {
            id: grant.sliceId,
            appId,
            granted: money,
            spent: 0,
            rateRequests: block.requests,
            rateTokens: block.tokens,
            createdAt: now,
            leaseUntil: now + grant.leaseMs,
          };
        slices.set(record.id, record);
        writes.push((a) => a.set(keys.walletSlice(appId, record.id), record));
        const answer = {
          granted: money,
          ...block,
          record,
          available: wallet.available,
          keysWithOwnLimits: input.rate?.keysWithOwnLimits() ?? [],
          rate: input.rate?.status("", now),
        };
        answers.push((versionstamp) => op.done.resolve({ ...answer, versionstamp }));
        break;
      }
      case "slice_return": {
        const slice = slices.get(op.sliceId);
        const returnable = slice &&
          leaseEnded(slice.leaseUntil, op.onlyIfExpiredAt);
        if (returnable) {
          wallet.reserved -= slice.granted;
          wallet.spent += slice.spent;
          wallet.available += slice.granted - slice.spent;
          slices.set(slice.id, null);
          writes.push((a) => a.delete(keys.walletSlice(appId, slice.id)));
          if (op.unusedRate) {
            input.rate?.giveBack(op.unusedRate.requests, op.unusedRate.tokens, now);
          }
        }
        const answer = { returned: Boolean(returnable), available: wallet.available };
        answers.push(() => op.done.resolve(answer));
        break;
      }
      case "slice_give_back": {
        const slice = slices.get(op.sliceId);
        if (!slice) {
          answerWith(op.done, { given: 0, available: wallet.available });
          break;
        }
        // Never below what the slice has posted: a crash then returns the rest as before.
        const given = Math.max(0, Math.min(op.amount, slice.granted - slice.spent));
        input.rate?.giveBack(op.unusedRate.requests, op.unusedRate.tokens, now);
        wallet.reserved -= given;
        wallet.available += given;
        const record: WalletSliceRecord = { ...slice, granted: slice.granted - given };
        slices.set(record.id, record);
        writes.push((a) => a.set(keys.walletSlice(appId, record.id), record));
        const answer = { given, record, available: wallet.available };
        answers.push((versionstamp) => op.done.resolve({ ...answer, versionstamp }));
        break;
      }
      case "charge": {
        const charged = Math.min(op.usage.cost, wallet.available);
        if (op.floor !== undefined && charged < op.floor) {
          const answer = { settled: false as const, available: wallet.available };
          answers.push(() => op.done.resolve(answer));
          break;
        }
        wallet.available -= charged;
        wallet.spent += charged;
        const usage = {
          ...op.usage,
          cost: charged,
          uncharged: op.usage.uncharged + op.usage.cost - charged,
        };
        chargeUsage(usage);
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
    }
  }

  collectOwed();
  for (const [model, spent] of modelSpend) {
    writes.push((a) => a.sum(keys.modelSpend(appId, model), BigInt(spent)));
  }
  for (const [day, spent] of daySpend) {
    writes.push((a) => a.sum(keys.dailySpend(appId, day), BigInt(spent)));
  }
  for (const [day, records] of usageDays) {
    writes.push((a) =>
      a.sum(keys.usageDayVersion(appId, day), BigInt(records))
        .sum(keys.usageDayRecords(appId, day), BigInt(records))
    );
  }
  if (uncharged > 0) {
    // Outside the wallet's invariant (it never left a wallet), so counted beside it: per app, and
    // service-wide for /metrics, in the commit that writes the usage records carrying it.
    writes.push((a) =>
      a.sum(keys.appUncharged(appId), BigInt(uncharged))
        .sum(keys.serviceTotal("uncharged"), BigInt(uncharged))
    );
  }
  for (const keyId of keysUsed) writes.push((a) => a.set(keys.apiKeyLastUsed(keyId), now));
  for (const [cid, { scope, id }] of countersTouched) {
    const value = counters.get(cid)!;
    writes.push((a) => a.set(keys.spendCounter(appId, scope, id), value));
  }

  const rateRecord = input.rate?.changed ? input.rate.record(now) : null;
  if (rateRecord) writes.push((a) => a.set(keys.rateWindows(appId), rateRecord));

  return {
    wallet,
    /** Nothing to write: every operation was refused or found nothing to do. */
    unchanged: writes.length === 0 && rateRecord === null && !walletChanged,
    /** Whether this batch enforced rate limits, and the windows it wrote (null: unchanged). */
    rateLimited: input.rate !== undefined,
    rateRecord,
    /** Holds created, renewed (record) or removed (null) by this batch. */
    reservations: touched,
    /** The slices as the batch leaves them (null: returned). */
    slices,
    markerChecks,
    write(atomic: Deno.AtomicOperation) {
      for (const w of writes) w(atomic);
    },
    /** `versionstamp`: the commit's ("" when unknown), for the slices it wrote. */
    resolveAll(versionstamp = "") {
      for (const a of answers) a(versionstamp);
    },
  };
}

function ledgerEntryOf(
  input: { amount: Micros; reason: string; reference?: string | null },
  kind: LedgerEntry["kind"],
  now: number,
): LedgerEntry {
  return {
    id: newId("led", now),
    kind,
    amount: input.amount,
    reason: input.reason,
    reference: input.reference ?? null,
    createdAt: now,
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

/** Whether a sweeper's release or return may go ahead: always for its owner, else once expired. */
function leaseEnded(leaseUntil: number, onlyIfExpiredAt: number | undefined): boolean {
  return onlyIfExpiredAt === undefined || leaseUntil <= onlyIfExpiredAt;
}
