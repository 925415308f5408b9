/**
 * The gateway's side of the wallet: reserve a planned amount or refuse it (402 with the top-up
 * link, 429, a spend cap, a revoked key), settle a request's usage at the model's prices, release.
 * Also what this process remembers for that: each app's last seen balance and its lazy sweeps.
 */
import { getApp, topUpUrl } from "@/lib/tenants/mod.ts";
import { type Model, type Usage, usageCost } from "@/lib/catalog/mod.ts";
import type { ReservationRecord, UsageOutcome } from "@/lib/db.ts";
import { ApiError, formatUsd, type Micros } from "@/lib/core/mod.ts";
import {
  type CountedTokens,
  KeyRevokedError,
  rateLimitRefusal,
  releaseExpiredReservations,
  type ReserveInput,
  spendCapRefusal,
  type Wallets,
} from "@/lib/billing/mod.ts";
import type { Caller, RequestTrace } from "./caller.ts";

/** What a request asks the wallet to reserve, and how to say so when it is refused. */
export interface PlannedReservation {
  amount: Micros;
  /** Counted against the tokens-per-minute limit. */
  tokens: number;
  /** What the amount covers, for the 402 message: "prompt plus max_tokens 100". */
  covers: string;
  counted?: CountedTokens;
  /** A smaller reservation from an exact count, when one can be had (null when it cannot). */
  refine?: () => Promise<PlannedReservation | null>;
}

export interface WalletDeskDeps {
  kv: Deno.Kv;
  wallets: Wallets;
  publicUrl: string;
  log: (fields: Record<string, unknown>) => void;
  /** A reservation above this share of the app's last seen balance is counted exactly first. */
  exactCountShare?: number;
}

/**
 * A settle that failed for good (KV down, or locked past every try, as `cause` tells): nothing was
 * charged and the request is answered so. `unbilled` is what a log line of the loss carries: the
 * usage and what it cost (the wallet records it as the app's uncharged usage once KV lets it).
 */
export class SettleFailedError extends Error {
  readonly unbilled: Record<string, unknown>;

  constructor(unbilled: Record<string, unknown>, cause: unknown) {
    super(`settle failed: ${(cause as Error)?.message ?? cause}`, { cause });
    this.unbilled = unbilled;
  }
}

const DEFAULT_EXACT_COUNT_SHARE = 0.5;
/** The lazy sweep of one app's expired reservations runs at most this often (per process). */
const LAZY_SWEEP_EVERY_MS = 1_000;

export class WalletDesk {
  readonly #deps: WalletDeskDeps;
  readonly #lastLazySweep = new Map<string, number>();
  /** Each app's balance as this process last saw it (after a reserve or settle): a hint only. */
  readonly #lastAvailable = new Map<string, Micros>();

  constructor(deps: WalletDeskDeps) {
    this.#deps = deps;
  }

  /** Reserves (sweeping the app's expired reservations once before a refusal), or throws 402/429. */
  async reserveOrRefuse(
    caller: Caller,
    model: Model,
    planned: PlannedReservation,
    requestId: string,
    trace: RequestTrace,
  ): Promise<{ reservation: ReservationRecord; available: Micros }> {
    // A reservation that takes most of what the app was last seen to have is decided exactly before it
    // is tried (where a count can refine it): with the bound, a few such requests would starve
    // each other.
    const lastSeen = this.#lastAvailable.get(caller.appId);
    const share = this.#deps.exactCountShare ?? DEFAULT_EXACT_COUNT_SHARE;
    let refine = planned.refine;
    if (refine && lastSeen !== undefined && planned.amount > lastSeen * share) {
      refine = undefined;
      planned = await planned.refine!() ?? planned;
    }
    const inputOf = (planned: PlannedReservation) => ({
      amount: planned.amount,
      keyId: caller.keyId,
      requestId,
      model: model.id,
      tokens: planned.tokens,
      keyGuard: caller.keyGuard,
      user: caller.user,
    });
    let input = inputOf(planned);
    let result = await this.#reserve(caller, input, trace, planned.counted);
    if (!result.ok && result.reserved > 0 && this.#lazySweepDue(caller.appId)) {
      // Reservations left by a crashed instance must not block an app until the cron sweeper runs.
      const released = await releaseExpiredReservations(
        this.#deps.kv,
        this.#deps.wallets,
        caller.appId,
      );
      if (released > 0) result = await this.#reserve(caller, input, trace, planned.counted);
    }
    // The bound does not fit the balance, or a spend cap's room: the exact count decides, before
    // any call to the model.
    const refined = !result.ok && refine ? await refine() : null;
    if (!result.ok && refined) {
      planned = refined;
      input = inputOf(planned);
      const room = result.reason === "spend_cap"
        ? Math.min(result.available, result.breach.remaining)
        : result.available;
      if (planned.amount <= room) {
        result = await this.#reserve(caller, input, trace, planned.counted);
      }
    }
    this.#rememberAvailable(caller.appId, result.available);
    const { amount } = planned;
    if (!result.ok && result.reason === "spend_cap") {
      throw spendCapRefusal(result.breach, await this.#walletOfRefusal(caller, result.available));
    }
    if (!result.ok) {
      throw new ApiError(
        "insufficient_credits",
        `This request needs ${
          formatUsd(amount)
        } USD reserved (${planned.covers} at ${model.id} prices); the balance is ${
          formatUsd(result.available)
        } USD.`,
        { extra: await this.#walletOfRefusal(caller, result.available) },
      );
    }
    trace.reserved = amount;
    return { reservation: result.reservation, available: result.available };
  }

  /** What every 402 body carries: the balance and where the app's users add to it. */
  async #walletOfRefusal(caller: Caller, available: Micros) {
    const app = await getApp(this.#deps.kv, caller.appId);
    return { balance: formatUsd(available), top_up_url: topUpUrl(this.#deps.publicUrl, app) };
  }

  #rememberAvailable(appId: string, available: Micros) {
    if (this.#lastAvailable.size >= 10_000) this.#lastAvailable.clear();
    this.#lastAvailable.set(appId, available);
  }

  /** Reserves, or throws the refusal for rate: rate is decided first, so a 429 is never a 402. */
  async #reserve(
    caller: Caller,
    input: ReserveInput,
    trace: RequestTrace,
    counted?: CountedTokens,
  ) {
    const result = await this.#deps.wallets.reserve(caller.appId, input).catch((error) => {
      // The key was revoked (on any instance) since this process cached it.
      if (!(error instanceof KeyRevokedError)) throw error;
      throw new ApiError(
        "invalid_api_key",
        "Invalid API key: it is malformed, unknown or revoked.",
      );
    });
    if (result.rate) trace.rateLimit = result.rate;
    if (!result.ok && result.reason !== "insufficient_credits" && result.reason !== "spend_cap") {
      throw rateLimitRefusal(result.reason, result.breach, result.retryAfterMs, counted);
    }
    return result;
  }

  async settle(
    caller: Caller,
    reservation: ReservationRecord,
    model: Model,
    usage: Usage,
    info: { requestId: string; streamed: boolean; outcome: UsageOutcome; countedLocally: boolean },
    trace: RequestTrace,
  ) {
    const cost = usageCost(model, usage);
    const result = await this.#deps.wallets.settle(caller.appId, reservation.id, {
      requestId: info.requestId,
      keyId: caller.keyId,
      ...(caller.user === undefined ? {} : { user: caller.user }),
      ...(caller.idempotent ? { idempotent: true as const } : {}),
      model: model.id,
      provider: model.provider.name,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      ...usageDetails(usage),
      cost,
      streamed: info.streamed,
      outcome: info.outcome,
      countedLocally: info.countedLocally,
    }).catch((error) => {
      throw new SettleFailedError({
        appId: caller.appId,
        model: model.id,
        promptTokens: usage.promptTokens,
        completionTokens: usage.completionTokens,
        ...usageDetails(usage),
        notCharged: cost,
      }, error);
    });
    this.#rememberAvailable(caller.appId, result.available);
    trace.promptTokens = usage.promptTokens;
    trace.completionTokens = usage.completionTokens;
    trace.outcome = info.outcome;
    if (!result.settled) {
      // The sweeper released the reservation first: the request is not charged, and never twice.
      // What it cost is the operator's loss; it is not in the uncharged counters (no usage record
      // is written for a reservation that is gone, since a retried settle looks the same), so the
      // warning says how much.
      this.#deps.log({
        level: "warn",
        requestId: info.requestId,
        event: "settle_after_release",
        appId: caller.appId,
        model: model.id,
        notCharged: cost,
      });
      trace.cost = 0;
      return { charged: 0, available: result.available };
    }
    trace.cost = result.charged;
    trace.uncharged = result.uncharged;
    if (result.rate) trace.rateLimit = result.rate;
    return { charged: result.charged, available: result.available };
  }

  /**
   * Whether a would-be 402 may look for expired reservations of this app now. Leases last minutes, so once
   * a second is plenty, and a flood of 402s does not turn into a scan of the app's reservations each.
   */
  #lazySweepDue(appId: string): boolean {
    const now = Date.now();
    if ((this.#lastLazySweep.get(appId) ?? 0) > now - LAZY_SWEEP_EVERY_MS) return false;
    if (this.#lastLazySweep.size >= 10_000) this.#lastLazySweep.clear();
    this.#lastLazySweep.set(appId, now);
    return true;
  }

  async release(caller: Caller, reservation: ReservationRecord, trace: RequestTrace) {
    const result = await this.#deps.wallets.release(caller.appId, reservation.id);
    if (result.rate) trace.rateLimit = result.rate;
    trace.cost = 0;
    trace.outcome = "released";
  }
}

/** The components beyond prompt and completion, recorded only when the provider reported them. */
function usageDetails(usage: Usage) {
  const details: Pick<
    Usage,
    "cachedTokens" | "cacheWriteTokens" | "cacheWrite1hTokens" | "reasoningTokens"
  > = {};
  if (usage.cachedTokens) details.cachedTokens = usage.cachedTokens;
  if (usage.cacheWriteTokens) details.cacheWriteTokens = usage.cacheWriteTokens;
  if (usage.cacheWrite1hTokens) details.cacheWrite1hTokens = usage.cacheWrite1hTokens;
  if (usage.reasoningTokens) details.reasoningTokens = usage.reasoningTokens;
  return details;
}
