/**
 * Requests and tokens per minute, per app and per API key, the tighter winning.
 *
 * Each scope is a leaky bucket (the continuous form of a one-minute window, as OpenAI's limiter):
 * a request adds 1 to the request level and its tokens to the token level; both drain at `limit`
 * per minute. A request is admitted when both levels of both scopes stay within their limits.
 * `reset` is the time until the bucket is empty again ("back to its initial state"), and the wait
 * of a refused request is the time until enough has drained for it to fit.
 *
 * The windows live in one KV record per app, read and written by the wallet's group commit beside
 * the wallet itself: a reserve is decided for rate and money in the same step, with no extra round
 * trip, and instances sharing a KV share the limit through the wallet's versionstamp check.
 */
import {
  keys,
  type RateLimitOverrides,
  type RateLimits,
  type RateWindow,
  type RateWindowsRecord,
} from "@/lib/db.ts";
import { ApiError, NotFoundError } from "@/lib/core/mod.ts";

/** The window all limits are expressed in. */
export const WINDOW_MS = 60_000;
/** Beyond this a limit is a typo, and the scaled levels would leave the safe-integer range. */
export const MAX_LIMIT = 1_000_000_000;

export type Dimension = "requests" | "tokens";
export type Scope = "app" | "key";

export interface DimensionStatus {
  limit: number;
  remaining: number;
  /** Milliseconds until the bucket is empty. */
  resetMs: number;
}

/** What the `x-ratelimit-*` headers say: for each dimension, the tighter of key and app. */
export interface RateLimitStatus {
  requests: DimensionStatus;
  tokens: DimensionStatus;
}

export interface RateBreach {
  scope: Scope;
  dimension: Dimension;
  limit: number;
  requested: number;
}

export type Admission =
  | { ok: true; status: RateLimitStatus }
  /** Waiting `retryAfterMs` lets the request through (if nothing else uses the room meanwhile). */
  | {
    ok: false;
    reason: "rate_limited";
    retryAfterMs: number;
    breach: RateBreach;
    status: RateLimitStatus;
  }
  /** More tokens than the limit allows in a whole window: waiting never helps. */
  | { ok: false; reason: "too_large"; breach: RateBreach; status: RateLimitStatus };

export function emptyOverrides(): RateLimitOverrides {
  return { app: {}, keys: {} };
}

/**
 * A batch's running copy of an app's windows. Decisions are made against it in order; `record()`
 * gives what to write once the batch commits. No I/O.
 */
export class RateWindows {
  readonly #defaults: RateLimits;
  readonly #overrides: RateLimitOverrides;
  #app: RateWindow | null;
  readonly #keys: Map<string, RateWindow>;
  #changed = false;

  constructor(
    defaults: RateLimits,
    overrides: RateLimitOverrides | null,
    record: RateWindowsRecord | null,
  ) {
    this.#defaults = defaults;
    this.#overrides = overrides ?? emptyOverrides();
    this.#app = record?.app ?? null;
    this.#keys = new Map(Object.entries(record?.keys ?? {}));
  }

  get changed(): boolean {
    return this.#changed;
  }

  /** The operator's limits of the app: its own for this app, else the defaults. */
  get ceiling(): RateLimits {
    return ceilingOf(this.#defaults, this.#overrides);
  }

  /**
   * Limits set for the app or a key apply at or below the ceiling, whoever wrote them and when: a
   * record written before the ceiling was enforced cannot lift an app above it either.
   */
  limitsOf(scope: Scope, keyId: string): RateLimits {
    const ceiling = this.ceiling;
    const app = {
      rpm: Math.min(this.#overrides.app.rpm ?? ceiling.rpm, ceiling.rpm),
      tpm: Math.min(this.#overrides.app.tpm ?? ceiling.tpm, ceiling.tpm),
    };
    if (scope === "app") return app;
    const own = this.#overrides.keys[keyId] ?? {};
    return {
      rpm: Math.min(own.rpm ?? app.rpm, ceiling.rpm),
      tpm: Math.min(own.tpm ?? app.tpm, ceiling.tpm),
    };
  }

  /** Rate first: a request over its limit is refused here before money is considered. */
  check(keyId: string, tokens: number, now: number): Admission {
    let wait = 0;
    let breach: RateBreach | null = null;
    for (const scope of this.#scopes(keyId)) {
      const limits = this.limitsOf(scope, keyId);
      const level = drained(this.#window(scope, keyId), limits, now);
      if (tokens > limits.tpm) {
        const tooLarge = {
          scope,
          dimension: "tokens" as const,
          limit: limits.tpm,
          requested: tokens,
        };
        return {
          ok: false,
          reason: "too_large",
          breach: tooLarge,
          status: this.status(keyId, now),
        };
      }
      for (
        const [dimension, cost] of [["requests", 1], ["tokens", tokens]] as const
      ) {
        const limit = dimension === "requests" ? limits.rpm : limits.tpm;
        const needed = waitMs(level[dimension], cost, limit);
        if (needed > wait) {
          wait = needed;
          breach = { scope, dimension, limit, requested: cost };
        }
      }
    }
    const status = this.status(keyId, now);
    if (breach) return { ok: false, reason: "rate_limited", retryAfterMs: wait, breach, status };
    return { ok: true, status };
  }

  /** Counts an admitted request; call only after `check` said ok. */
  consume(keyId: string, tokens: number, now: number): RateLimitStatus {
    this.#add(keyId, 1, tokens, now);
    return this.status(keyId, now);
  }

  /**
   * Corrects the tokens of a request from what was reserved to what was used (may be negative).
   * A request's tokens drain from the window as time passes, so what it gives back is at most what
   * can be left of its own count: `reserved` tokens counted at `since`, drained at the app's pace.
   * Giving back more (a long request's unused hold, long drained) took other requests' counts off
   * the window and let a burst through at twice the limit.
   */
  adjustTokens(
    keyId: string,
    delta: number,
    now: number,
    held: { reserved: number; since: number },
  ): RateLimitStatus {
    let tokens = delta;
    if (tokens < 0) {
      const drainedSince = (Math.max(0, now - held.since) * this.limitsOf("app", keyId).tpm) /
        WINDOW_MS;
      tokens = -Math.min(-tokens, Math.max(0, held.reserved - drainedSince));
    }
    if (tokens !== 0) this.#add(keyId, 0, tokens, now);
    return this.status(keyId, now);
  }

  /**
   * Takes a block of the app's window for a wallet slice: at most `share` of each limit and what
   * room is left, so that slices of several processes never admit more than the limit. The block
   * counts as used until `giveBack` returns what the slice did not use.
   */
  takeBlock(
    want: { requests: number; tokens: number },
    share: number,
    now: number,
  ): { requests: number; tokens: number } {
    const limits = this.limitsOf("app", "");
    const level = drained(this.#app, limits, now);
    const requests = Math.min(
      want.requests,
      Math.floor(limits.rpm * share),
      Math.floor((limits.rpm * WINDOW_MS - level.requests) / WINDOW_MS),
    );
    const tokens = Math.min(
      want.tokens,
      Math.floor(limits.tpm * share),
      Math.floor((limits.tpm * WINDOW_MS - level.tokens) / WINDOW_MS),
    );
    if (requests <= 0 || tokens <= 0) return { requests: 0, tokens: 0 };
    this.#add("", requests, tokens, now);
    return { requests, tokens };
  }

  /** Returns the unused part of a slice's block (negative tokens: the slice used more). */
  giveBack(requests: number, tokens: number, now: number): void {
    if (requests !== 0 || tokens !== 0) this.#add("", -requests, -tokens, now);
  }

  /** Keys whose limits differ from the app's: a slice does not serve them (see slices.ts). */
  keysWithOwnLimits(): string[] {
    return Object.keys(this.#overrides.keys);
  }

  status(keyId: string, now: number): RateLimitStatus {
    const app = this.#scopeStatus("app", keyId, now);
    if (!this.#hasOwnLimits(keyId)) return app;
    const key = this.#scopeStatus("key", keyId, now);
    return {
      requests: tighter(app.requests, key.requests),
      tokens: tighter(app.tokens, key.tokens),
    };
  }

  /** The record to store: every window drained to `now`, empty key windows dropped. */
  record(now: number): RateWindowsRecord {
    const out: RateWindowsRecord = { app: null, keys: {} };
    if (this.#app) out.app = nonEmpty(drainedWindow(this.#app, this.limitsOf("app", ""), now));
    for (const [keyId, window] of this.#keys) {
      if (!this.#hasOwnLimits(keyId)) continue;
      const kept = nonEmpty(drainedWindow(window, this.limitsOf("key", keyId), now));
      if (kept) out.keys[keyId] = kept;
    }
    return out;
  }

  /**
   * A key with the app's limits needs no window of its own: its usage is part of the app's, which
   * drains at the same rate, so it can never be the tighter one. Only keys with limits of their
   * own are tracked, which keeps the record small however many keys an app has.
   */
  #hasOwnLimits(keyId: string): boolean {
    return Object.hasOwn(this.#overrides.keys, keyId);
  }

  #scopes(keyId: string): Scope[] {
    return this.#hasOwnLimits(keyId) ? ["key", "app"] : ["app"];
  }

  #window(scope: Scope, keyId: string): RateWindow | null {
    return scope === "app" ? this.#app : this.#keys.get(keyId) ?? null;
  }

  #add(keyId: string, requests: number, tokens: number, now: number) {
    this.#changed = true;
    const add = (window: RateWindow | null, limits: RateLimits): RateWindow => {
      const level = drained(window, limits, now);
      return {
        requests: Math.max(0, level.requests + requests * WINDOW_MS),
        tokens: Math.max(0, level.tokens + tokens * WINDOW_MS),
        at: now,
      };
    };
    this.#app = add(this.#app, this.limitsOf("app", keyId));
    if (this.#hasOwnLimits(keyId)) {
      this.#keys.set(keyId, add(this.#keys.get(keyId) ?? null, this.limitsOf("key", keyId)));
    }
  }

  #scopeStatus(scope: Scope, keyId: string, now: number) {
    const limits = this.limitsOf(scope, keyId);
    const level = drained(this.#window(scope, keyId), limits, now);
    return {
      requests: dimensionStatus(level.requests, limits.rpm),
      tokens: dimensionStatus(level.tokens, limits.tpm),
    };
  }
}

function ceilingOf(defaults: RateLimits, overrides: RateLimitOverrides | null): RateLimits {
  return {
    rpm: overrides?.operator?.rpm ?? defaults.rpm,
    tpm: overrides?.operator?.tpm ?? defaults.tpm,
  };
}

function drained(window: RateWindow | null, limits: RateLimits, now: number) {
  if (!window) return { requests: 0, tokens: 0 };
  // Another instance's clock may be slightly ahead: never drain backwards.
  const elapsed = Math.max(0, now - window.at);
  return {
    requests: Math.max(0, window.requests - elapsed * limits.rpm),
    tokens: Math.max(0, window.tokens - elapsed * limits.tpm),
  };
}

function drainedWindow(window: RateWindow, limits: RateLimits, now: number): RateWindow {
  return { ...drained(window, limits, now), at: Math.max(now, window.at) };
}

function nonEmpty(window: RateWindow): RateWindow | null {
  return window.requests === 0 && window.tokens === 0 ? null : window;
}

/** Milliseconds until `cost` more units fit under `limit`, given the current scaled level. */
function waitMs(level: number, cost: number, limit: number): number {
  const excess = level + cost * WINDOW_MS - limit * WINDOW_MS;
  return excess <= 0 ? 0 : Math.ceil(excess / limit);
}

function dimensionStatus(level: number, limit: number): DimensionStatus {
  return {
    limit,
    remaining: Math.max(0, Math.floor((limit * WINDOW_MS - level) / WINDOW_MS)),
    resetMs: Math.ceil(level / limit),
  };
}

/** The scope with less room left; on a tie, the one that takes longer to reset. */
function tighter(a: DimensionStatus, b: DimensionStatus): DimensionStatus {
  if (a.remaining !== b.remaining) return a.remaining < b.remaining ? a : b;
  return a.resetMs >= b.resetMs ? a : b;
}

/** `Retry-After` in whole seconds: rounded up, and never 0 (a client would retry at once). */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * The headers of a refusal that waiting `ms` lets through: `Retry-After` in whole seconds, and
 * `retry-after-ms` as OpenAI sends it beside it, which the openai SDK waits first. Both name the
 * same moment: the seconds are the milliseconds rounded up, so neither says to come back sooner
 * than the wait.
 */
export function retryAfterHeaders(ms: number): Record<string, string> {
  return {
    "retry-after": String(retryAfterSeconds(ms)),
    "retry-after-ms": String(Math.max(0, Math.ceil(ms))),
  };
}

/**
 * A duration in the form of OpenAI's reset headers (Go's `time.Duration` notation) at millisecond
 * precision: `0s`, `250ms`, `1s`, `1.5s`, `6m0s`, `1m30.25s`, `1h0m0s`.
 */
export function formatDuration(ms: number): string {
  ms = Math.max(0, Math.ceil(ms));
  if (ms === 0) return "0s";
  if (ms < 1000) return `${ms}ms`;
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const millis = ms % 60_000;
  const whole = Math.floor(millis / 1000);
  const fraction = String(millis % 1000).padStart(3, "0").replace(/0+$/, "");
  const seconds = `${whole}${fraction ? `.${fraction}` : ""}s`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0) return `${minutes}m${seconds}`;
  return seconds;
}

/** The three `x-ratelimit-*-requests` headers; the management API sends only these. */
export function requestRateLimitHeaders(requests: DimensionStatus): Record<string, string> {
  return {
    "x-ratelimit-limit-requests": String(requests.limit),
    "x-ratelimit-remaining-requests": String(requests.remaining),
    "x-ratelimit-reset-requests": formatDuration(requests.resetMs),
  };
}

/** The six `x-ratelimit-*` response headers. */
export function rateLimitHeaders(status: RateLimitStatus): Record<string, string> {
  return {
    ...requestRateLimitHeaders(status.requests),
    "x-ratelimit-limit-tokens": String(status.tokens.limit),
    "x-ratelimit-remaining-tokens": String(status.tokens.remaining),
    "x-ratelimit-reset-tokens": formatDuration(status.tokens.resetMs),
  };
}

/** What a request's tokens are made of, and the field that lowers them, for its refusal. */
export interface CountedTokens {
  what: string;
  param: string;
}

const CHAT_TOKENS: CountedTokens = { what: "prompt plus max_tokens", param: "max_tokens" };

/** The client error for a request refused for rate: 429 when waiting helps, 400 when it never will. */
export function rateLimitRefusal(
  reason: "rate_limited" | "rate_too_large",
  breach: RateBreach,
  retryAfterMs: number,
  counted: CountedTokens = CHAT_TOKENS,
): ApiError {
  const whose = breach.scope === "key" ? "this API key" : "this app";
  if (reason === "rate_too_large") {
    return new ApiError(
      "invalid_parameter",
      `This request counts ${breach.requested} tokens (${counted.what}) against a limit of ${breach.limit} tokens per minute for ${whose}, so it can never fit. Lower ${counted.param}. Nothing was charged.`,
      { param: counted.param },
    );
  }
  const seconds = retryAfterSeconds(retryAfterMs);
  const what = breach.dimension === "requests"
    ? `${breach.limit} requests per minute`
    : `${breach.limit} tokens per minute (this request counts ${breach.requested}: ${counted.what})`;
  return new ApiError(
    "rate_limit_exceeded",
    `Rate limit reached for ${whose}: ${what}. Retry after ${seconds} s. Nothing was reserved or charged.`,
    { headers: retryAfterHeaders(retryAfterMs) },
  );
}

// --- Reading and setting limits (operators, dashboards, and responses refused before reserve) ---

/** The current status of a key, without counting anything: one read of two records. */
export async function readRateLimitStatus(
  kv: Deno.Kv,
  defaults: RateLimits,
  caller: { appId: string; keyId: string },
  now: number,
): Promise<RateLimitStatus> {
  const windows = await readWindows(kv, defaults, caller.appId);
  return windows.status(caller.keyId, now);
}

export async function readWindows(
  kv: Deno.Kv,
  defaults: RateLimits,
  appId: string,
): Promise<RateWindows> {
  const [record, overrides] = await kv.getMany<[RateWindowsRecord, RateLimitOverrides]>([
    keys.rateWindows(appId),
    keys.rateLimitOverrides(appId),
  ]);
  return new RateWindows(defaults, overrides.value, record.value);
}

export interface EffectiveLimits {
  app: RateLimits;
  /** Only the keys with limits of their own; every other key has the app's. */
  keys: Record<string, RateLimits>;
  /** The most an owner may set: the operator's limits of this app. */
  ceiling: RateLimits;
}

/** The limits in force for an app and for each key that has its own. */
export async function getRateLimits(
  kv: Deno.Kv,
  defaults: RateLimits,
  appId: string,
): Promise<EffectiveLimits> {
  const overrides = (await kv.get<RateLimitOverrides>(keys.rateLimitOverrides(appId))).value;
  const windows = new RateWindows(defaults, overrides, null);
  const keyLimits: Record<string, RateLimits> = {};
  for (const keyId of Object.keys(overrides?.keys ?? {})) {
    keyLimits[keyId] = windows.limitsOf("key", keyId);
  }
  return { app: windows.limitsOf("app", ""), keys: keyLimits, ceiling: windows.ceiling };
}

/**
 * Who sets a limit. The operator sets the app's ceiling (and its limit) or a key's limit freely;
 * an owner sets the app's or a key's limit at or below the ceiling (the operator's limit of the
 * app, else `defaults`, the operator's RATE_LIMIT_RPM/TPM).
 */
export type LimitSetter = { by: "operator" } | { by: "owner"; defaults: RateLimits };

/** An owner asked for more than the operator allows. */
export class LimitAboveCeilingError extends RangeError {
  constructor(readonly limit: "rpm" | "tpm", readonly ceiling: number, asked: number) {
    const what = limit === "rpm" ? "Requests per minute" : "Tokens per minute";
    super(
      `${what} can be at most ${ceiling} for this app (the operator's limit), not ${asked}. Only the operator can raise it.`,
    );
  }
}

/**
 * Sets (a number) or clears (null) the app's limits, or one key's when `keyId` is given; fields
 * left undefined are unchanged. Takes effect at the next request of the app, on every instance.
 * The operator's app limit is the app's new ceiling and replaces the owner's; clearing it brings
 * back the defaults. An owner's limit above the ceiling throws LimitAboveCeilingError; the check
 * and the write are one commit, checked against the record read.
 */
export async function setRateLimits(
  kv: Deno.Kv,
  appId: string,
  change: { rpm?: number | null; tpm?: number | null },
  setter: LimitSetter,
  keyId?: string,
): Promise<RateLimitOverrides> {
  for (const [name, value] of Object.entries(change)) {
    if (value !== null && value !== undefined && !validLimit(value)) {
      throw new RangeError(`${name} must be an integer from 1 to ${MAX_LIMIT}, got ${value}`);
    }
  }
  for (;;) {
    const [app, current, key] = await kv.getMany<[unknown, RateLimitOverrides, unknown]>([
      keys.app(appId),
      keys.rateLimitOverrides(appId),
      keys.appApiKey(appId, keyId ?? ""),
    ]);
    if (app.versionstamp === null) throw new NotFoundError(`no app ${appId}`);
    // A revoked key's index entry stays (false): a limit written there would bind no key, while the
    // operator was told it was set (a rotation moves a key's limit to its replacement).
    if (keyId !== undefined && key.value !== true) {
      throw new NotFoundError(`no live key ${keyId} in app ${appId}`);
    }
    const next = structuredClone(current.value ?? emptyOverrides());
    const operatorOfApp = setter.by === "operator" && keyId === undefined;
    const target = operatorOfApp
      ? (next.operator ??= {})
      : keyId === undefined
      ? next.app
      : (next.keys[keyId] ??= {});
    for (const name of ["rpm", "tpm"] as const) {
      const value = change[name];
      if (value === undefined) continue;
      if (value === null) {
        delete target[name];
        continue;
      }
      if (setter.by === "owner") {
        const ceiling = ceilingOf(setter.defaults, current.value)[name];
        if (value > ceiling) throw new LimitAboveCeilingError(name, ceiling, value);
      }
      target[name] = value;
      if (operatorOfApp) delete next.app[name];
    }
    if (keyId !== undefined && Object.keys(target).length === 0) delete next.keys[keyId];
    if (operatorOfApp && Object.keys(target).length === 0) delete next.operator;
    // The key's entry is checked too: a rotation of a key without limits leaves the overrides as
    // they were, and this write would then land on the key it revoked.
    const result = await kv.atomic().check(current, ...(keyId === undefined ? [] : [key]))
      .set(keys.rateLimitOverrides(appId), next).commit();
    if (result.ok) return next;
  }
}

export function validLimit(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 1 && value <= MAX_LIMIT;
}
