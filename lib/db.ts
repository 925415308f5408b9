/**
 * Every Deno KV key shape of Tollbooth, and the records stored under them. Nothing else in the code
 * base builds a key by hand.
 */
import type { Micros } from "@/lib/core/mod.ts";

export const keys = {
  app: (appId: string) => ["apps", appId] as const,
  appsByOwner: (ownerId: string, appId: string) => ["apps_by_owner", ownerId, appId] as const,
  ownerApps: (ownerId: string) => ["apps_by_owner", ownerId] as const,
  appByTopUpToken: (token: string) => ["apps_by_top_up_token", token] as const,
  /** A replaced top-up address: its receipt links still show the payments made through it. */
  appByRetiredTopUpToken: (token: string) => ["apps_by_retired_top_up_token", token] as const,

  wallet: (appId: string) => ["wallets", appId] as const,
  walletBatch: (appId: string, batchId: string) => ["wallet_batches", appId, batchId] as const,
  ledgerEntry: (appId: string, entryId: string) => ["ledger", appId, entryId] as const,
  ledger: (appId: string) => ["ledger", appId] as const,
  creditMarker: (marker: string) => ["credit_markers", marker] as const,
  devPurchase: (purchaseId: string) => ["dev_purchases", purchaseId] as const,
  /** A Checkout Session this service opened for an app: only those are looked up at Stripe. */
  checkoutSession: (appId: string, sessionId: string) =>
    ["checkout_sessions", appId, sessionId] as const,
  /** A credited Stripe payment by its PaymentIntent: where its refunds and disputes are taken from. */
  stripePayment: (paymentIntentId: string) => ["stripe_payments", paymentIntentId] as const,
  /**
   * A paid Stripe top-up its wallet could not take (filled to its credit limit after the checkout
   * opened), by Checkout Session: refunded instead of credited, and how that refund went.
   */
  refusedTopUp: (sessionId: string) => ["refused_top_ups", sessionId] as const,
  serverSecret: (name: string) => ["server_secrets", name] as const,

  apiKey: (keyId: string) => ["api_keys", keyId] as const,
  apiKeyByHash: (hash: string) => ["api_keys_by_hash", hash] as const,
  /**
   * An app's key index: true while the key is live, false once it is revoked (written by the
   * revocation; a key revoked before that was so reads true until a count of live keys finds it).
   */
  appApiKey: (appId: string, keyId: string) => ["app_api_keys", appId, keyId] as const,
  appApiKeys: (appId: string) => ["app_api_keys", appId] as const,
  apiKeyLastUsed: (keyId: string) => ["api_key_last_used", keyId] as const,
  /**
   * The id of the app's newest key, rewritten by every commit that adds a key to the app (an issue,
   * a rotation): an issue checks it, so the live keys it counted are still all there are when it
   * commits.
   */
  appApiKeysIssued: (appId: string) => ["app_api_keys_issued", appId] as const,
  /**
   * A count raised by every revocation and rotation of one of the app's keys: a slice post that
   * re-read more keys than its commit could check checks this instead, so no key is revoked
   * between that read and the commit unseen.
   */
  appApiKeyRevocations: (appId: string) => ["app_api_key_revocations", appId] as const,

  reservation: (appId: string, reservationId: string) =>
    ["reservations", appId, reservationId] as const,
  appReservations: (appId: string) => ["reservations", appId] as const,
  allReservations: () => ["reservations"] as const,
  reservationExpiry: (leaseUntil: number, appId: string, reservationId: string) =>
    ["reservation_expiries", leaseUntil, appId, reservationId] as const,
  reservationExpiries: () => ["reservation_expiries"] as const,
  /** Slices of a wallet's balance held by one process each (see lib/billing/slices.ts). */
  walletSlice: (appId: string, sliceId: string) => ["wallet_slices", appId, sliceId] as const,
  appWalletSlices: (appId: string) => ["wallet_slices", appId] as const,
  allWalletSlices: () => ["wallet_slices"] as const,
  /** The last time a reserve was refused while other slices of the wallet held its money. */
  walletSliceRecall: (appId: string) => ["wallet_slice_recalls", appId] as const,

  usage: (appId: string, usageId: string) => ["usage", appId, usageId] as const,
  /**
   * A charged request's usage record, by the request's id, written in the commit that charges it:
   * an Idempotency-Key claim taken over after a crash asks it whether the first run was charged.
   */
  chargedRequest: (requestId: string) => ["charged_requests", requestId] as const,
  appUsage: (appId: string) => ["usage", appId] as const,
  dailySpend: (appId: string, day: string) => ["daily_spend", appId, day] as const,
  appDailySpend: (appId: string) => ["daily_spend", appId] as const,
  /**
   * The usage records created on the UTC day (Deno.KvU64): each commit that writes some adds how
   * many, so a usage rollup of the day made at this value is current while the value stands.
   * (Before 2026-11-28 each such commit added one: a day written then has a version below its
   * records, and is summed whole when it changes.)
   */
  usageDayVersion: (appId: string, day: string) => ["usage_day_versions", appId, day] as const,
  /**
   * The usage records created on the UTC day that builds since 2026-11-28 wrote (Deno.KvU64), raised
   * with `usageDayVersion` in the same commit: while the two agree no older build wrote to the day,
   * and a rollup summing as many records is the whole day (usage_report.ts).
   */
  usageDayRecords: (appId: string, day: string) => ["usage_day_records", appId, day] as const,
  /** Part `chunk` of a day's usage summed per `grouping`, cached (see usage_report.ts). */
  usageRollupChunk: (appId: string, day: string, grouping: UsageRollupGrouping, chunk: number) =>
    ["usage_rollups", appId, day, grouping, chunk] as const,
  modelSpend: (appId: string, model: string) => ["model_spend", appId, model] as const,
  appModelSpend: (appId: string) => ["model_spend", appId] as const,
  /** An app's uncharged usage since it was created (Deno.KvU64), summed in the settle's commit. */
  appUncharged: (appId: string) => ["app_uncharged", appId] as const,
  allWallets: () => ["wallets"] as const,
  allApps: () => ["apps"] as const,

  /** Rate-limit windows of an app and its keys; written only by wallet batches (see ratelimit.ts). */
  rateWindows: (appId: string) => ["rate_windows", appId] as const,
  /** Per-app and per-key limits that replace the defaults; written by operators and dashboards. */
  rateLimitOverrides: (appId: string) => ["rate_limit_overrides", appId] as const,
  /** How many apps an owner has made, in total and on the day of the last: bounds starter credits. */
  ownerAppCount: (ownerId: string) => ["owner_app_counts", ownerId] as const,
  /** Service-wide sums (Deno.KvU64) written in the same commit as what they count. */
  serviceTotal: (name: ServiceTotal) => ["service_totals", name] as const,
  /**
   * A claimed Idempotency-Key within its scope (`app:<id>:key:<id>` for the API, see
   * `apiKeyScope`; `owner:<id>` for the management API); the recorded response's body lives in
   * parts beside it, under the claim's id.
   */
  idempotency: (scope: string, key: string) => ["idempotency", scope, key] as const,
  idempotencyBodyPart: (scope: string, key: string, claimId: string, part: number) =>
    ["idempotency_bodies", scope, key, claimId, part] as const,
  /** An owner's management keys (`tbm_…`): stored hashed, indexed by hash and by owner. */
  managementKey: (keyId: string) => ["management_keys", keyId] as const,
  managementKeyByHash: (hash: string) => ["management_keys_by_hash", hash] as const,
  /** True while the management key is live, false once revoked (as `appApiKey`). */
  ownerManagementKey: (ownerId: string, keyId: string) =>
    ["owner_management_keys", ownerId, keyId] as const,
  ownerManagementKeys: (ownerId: string) => ["owner_management_keys", ownerId] as const,
  /**
   * Rewritten by every management key issued to the owner: the issue checks it, so the live keys
   * it counted are still all there are when it commits.
   */
  ownerManagementKeysIssued: (ownerId: string) =>
    ["owner_management_keys_issued", ownerId] as const,
  /**
   * Requests an owner's management keys have made, together, in a one-minute window (a number),
   * raised by a checked increment; expires with its window.
   */
  managementOwnerRequests: (ownerId: string, window: number) =>
    ["management_owner_requests", ownerId, window] as const,
  /** An app's webhook endpoint, signing secret and low-balance threshold. */
  webhookSettings: (appId: string) => ["webhook_settings", appId] as const,
  allWebhookSettings: () => ["webhook_settings"] as const,
  /** What the low-balance and top-up detection has already seen of an app's wallet. */
  webhookWatch: (appId: string) => ["webhook_watch", appId] as const,
  /** Pending until delivered or given up; then kept `WEBHOOK_EVENT_RETENTION_MS` (expireIn). */
  webhookEvent: (appId: string, eventId: string) => ["webhook_events", appId, eventId] as const,
  appWebhookEvents: (appId: string) => ["webhook_events", appId] as const,
  /**
   * An app's deliveries due at `dueAt` (or leased by a deliverer until then). Per app, so that a
   * deliverer takes each app's share without reading past another app's backlog.
   */
  webhookOutbox: (appId: string, dueAt: number, eventId: string) =>
    ["webhook_app_outbox", appId, dueAt, eventId] as const,
  appWebhookOutbox: (appId: string) => ["webhook_app_outbox", appId] as const,
  /**
   * Apps that may have outbox entries: set in every commit that writes one, removed (checked) by a
   * deliverer that found the app's outbox empty. Deliverers go round these.
   */
  webhookOutboxApp: (appId: string) => ["webhook_outbox_apps", appId] as const,
  webhookOutboxApps: () => ["webhook_outbox_apps"] as const,
  /** The outbox of earlier versions, one queue for all apps (`[…, dueAt, eventId]`): drained. */
  legacyWebhookOutbox: () => ["webhook_outbox"] as const,
  /** When the app's last dashboard test events were queued, to hold them to a few a minute. */
  webhookTestSends: (appId: string) => ["webhook_test_sends", appId] as const,
  /** The app's spend caps (per key, and per end user); written by owners, checked by batches. */
  spendCaps: (appId: string) => ["spend_caps", appId] as const,
  /** What a capped key or end user holds and has spent; written only by wallet batches. */
  spendCounter: (appId: string, scope: SpendScope, id: string) =>
    ["spend_counters", appId, scope, id] as const,
  /** A stored Responses API response of an app: its head; the body is in chunks beside it. */
  storedResponse: (appId: string, responseId: string) =>
    ["stored_responses", appId, responseId] as const,
  storedResponseChunk: (appId: string, responseId: string, index: number) =>
    ["stored_response_chunks", appId, responseId, index] as const,
  /** Its output items alone, in chunks too: what an `item_reference` reads. */
  storedResponseOutputChunk: (appId: string, responseId: string, index: number) =>
    ["stored_response_output_chunks", appId, responseId, index] as const,
  /** Its response object, output aside, in chunks: what `GET /v1/responses/{id}` reads. */
  storedResponseObjectChunk: (appId: string, responseId: string, index: number) =>
    ["stored_response_object_chunks", appId, responseId, index] as const,
  /**
   * Its request's input items, in chunks: their ids and ends, then each item, so that a page of
   * `GET /v1/responses/{id}/input_items` reads the ids and its own items.
   */
  storedResponseInputChunk: (appId: string, responseId: string, index: number) =>
    ["stored_response_input_chunks", appId, responseId, index] as const,
  /** The stored response an output item belongs to, for `item_reference` inputs. */
  storedResponseItem: (appId: string, itemId: string) =>
    ["stored_response_items", appId, itemId] as const,
  /**
   * Claude's signed thinking of an answer that called tools, by the app and the id of the answer's
   * first tool call, in chunks: given back to a request that answers those calls without it (see
   * lib/gateway/thinking_memory.ts). Expires with `expireIn`.
   */
  signedThinkingChunk: (appId: string, toolCallId: string, index: number) =>
    ["signed_thinking", appId, toolCallId, index] as const,
  appSignedThinking: (appId: string) => ["signed_thinking", appId] as const,
  /** Read (never written) by /readyz to prove KV answers. */
  readinessProbe: () => ["readiness_probe"] as const,
  owner: (ownerId: string) => ["owners", ownerId] as const,
  ownerByEmail: (email: string) => ["owners_by_email", email] as const,
  /** Sessions are stored under the SHA-256 of their id, never the id itself. */
  session: (sessionHash: string) => ["sessions", sessionHash] as const,
  /**
   * Each session of an owner, written in the session's own commit (value: its `expiresAt`), so that
   * a password change or reset can end them all.
   */
  ownerSession: (ownerId: string, sessionHash: string) =>
    ["owner_sessions", ownerId, sessionHash] as const,
  ownerSessions: (ownerId: string) => ["owner_sessions", ownerId] as const,
  /**
   * A new secret waiting, for a few minutes, for the one page of its session that shows it after
   * the form's redirect (lib/accounts/reveals.ts).
   */
  secretReveal: (sessionHash: string, revealId: string) =>
    ["secret_reveals", sessionHash, revealId] as const,
  /** One entry per counted attempt (sign-in not yet succeeded, or sign-up), per subject and window. */
  signInFailure: (scope: ThrottleScope, subject: string, window: number, failureId: string) =>
    ["sign_in_failures", scope, subject, window, failureId] as const,
  signInFailures: (scope: ThrottleScope, subject: string, window: number) =>
    ["sign_in_failures", scope, subject, window] as const,
  /** A subject's entries of every window; a range of subjects is listed between two of these. */
  signInFailuresOf: (scope: ThrottleScope, subject: string) =>
    ["sign_in_failures", scope, subject] as const,
};

/**
 * What an account throttle counts: sign-in attempts per email and per address, a password change's
 * guesses of the current password per session, sign-up attempts per address (in the throttle's
 * window), accounts made per address (per UTC day).
 */
export type ThrottleScope =
  | "email"
  | "email_ip"
  | "ip"
  | "session"
  | "signup_ip"
  | "signup_ip_day"
  | "checkout_ip";

/** The service-wide sums under `keys.serviceTotal`. */
export type ServiceTotal = "starter_credits_granted" | "apps_created" | "uncharged";

export interface OwnerAppCountRecord {
  /** Apps made for the owner, by the owner or by the operator. */
  total: number;
  /** UTC day (YYYY-MM-DD) of the last app made, and how many were made that day. */
  day: string;
  onDay: number;
}

export interface AppRecord {
  id: string;
  name: string;
  ownerId: string | null;
  createdAt: number;
  topUpToken: string;
  /** Where the top-up page links back to (absolute https, or http://localhost); absent: no link. */
  topUpReturnUrl?: string | null;
  /** Whether the public top-up page shows the wallet balance; absent means no. */
  topUpShowBalance?: boolean;
}

/** What `keys.stripePayment` holds: the credited top-up a PaymentIntent paid for. */
export interface StripePaymentRecord {
  appId: string;
  sessionId: string;
  /** What the payment credited, in micro-USD. */
  amount: Micros;
}

/** What `keys.refusedTopUp` holds: a paid top-up never credited, and its refund through Stripe. */
export interface RefusedTopUpRecord {
  appId: string;
  sessionId: string;
  paymentIntentId: string;
  /** What the payment would have credited, in micro-USD; the whole payment is refunded. */
  amount: Micros;
  /** Why it was not credited. */
  reason: string;
  refusedAt: number;
  /**
   * The refund once Stripe made it (`id` null when Stripe answered that the payment was already
   * refunded, by hand or by an attempt whose answer was lost); null while it is still owed.
   */
  refund: { id: string | null; status: string; at: number } | null;
  /** Refund attempts Stripe refused or did not answer; each retry uses a new idempotency key. */
  failedAttempts: number;
  lastError?: string;
}

/** What `keys.creditMarker` holds: the ledger entry the marked credit wrote. */
export interface CreditMarkerRecord {
  appId: string;
  entryId: string;
}

/** A purchase in the development payment mode, waiting for its test checkout to be confirmed. */
export interface DevPurchaseRecord {
  id: string;
  appId: string;
  amount: Micros;
  createdAt: number;
}

/**
 * Invariant: available + reserved + spent = starter + topUps + operatorCredits − refunded.
 * `refunded` and `owed` are absent on wallets from before refunds were taken back (read as 0).
 */
export interface WalletRecord {
  available: Micros;
  reserved: Micros;
  spent: Micros;
  starter: Micros;
  topUps: Micros;
  operatorCredits: Micros;
  /** Taken back from the wallet for refunded and disputed payments (less disputes won). */
  refunded?: Micros;
  /**
   * Taken back but not yet found: the money was already spent or held when the refund came. It is
   * taken as money becomes available (holds ending, later top-ups) before anything is reserved.
   * Outside the invariant: it never left the wallet.
   */
  owed?: Micros;
}

export type CreditKind = "starter" | "top_up" | "operator_credit";
/**
 * Payments taken back: refunded (by the payee) or charged back (a dispute). `refund_reversed` gives
 * back a refund that failed or was canceled, `chargeback_reversed` a chargeback whose dispute was
 * won.
 */
export type DebitKind = "refund" | "chargeback" | "refund_reversed" | "chargeback_reversed";

export interface LedgerEntry {
  id: string;
  kind: CreditKind | DebitKind;
  /** Positive for every kind: `refund` and `chargeback` take it, the others add it. */
  amount: Micros;
  reason: string;
  /** External reference (a payment session id) for receipts; null for internal credits. */
  reference: string | null;
  createdAt: number;
  /** The wallet's available balance and money owed just after it; absent before 2026-11-29. */
  balanceAfter?: Micros;
  owedAfter?: Micros;
}

export interface ApiKeyRecord {
  id: string;
  appId: string;
  name: string;
  /** First characters of the raw key, enough to recognise it, useless to an attacker. */
  prefix: string;
  hash: string;
  createdAt: number;
  revokedAt: number | null;
  /**
   * The key a chain of rotations that replaced it began with; absent on a key no rotation made.
   * A rotation changes the secret, not the customer: its Idempotency-Keys stay the customer's.
   */
  originalKeyId?: string;
}

export interface ApiKeyHashEntry {
  keyId: string;
  appId: string;
  /** As on the key's record, for the requests it authenticates. */
  originalKeyId?: string;
}

/** A key of the management API: acts for its owner over all of the owner's apps. */
export interface ManagementKeyRecord {
  id: string;
  ownerId: string;
  name: string;
  /** First characters of the raw key, enough to recognise it. */
  prefix: string;
  hash: string;
  createdAt: number;
  revokedAt: number | null;
}

export interface ManagementKeyHashEntry {
  keyId: string;
  ownerId: string;
}

export type SpendScope = "key" | "user";

/** Caps in micro-USD; null: no such cap. Daily and monthly are UTC calendar windows. */
export interface SpendCaps {
  total: Micros | null;
  daily: Micros | null;
  monthly: Micros | null;
}

/**
 * A key's caps, and the counter they are counted on when it is not the key's own: a rotated key's
 * replacement keeps counting on its predecessor's, so the spend so far stays counted against the
 * cap and the holds of the old key's requests in flight are released where they were taken.
 */
export interface KeySpendCaps extends SpendCaps {
  /** The key id the counter (`keys.spendCounter(app, "key", id)`) is kept under; absent: its own. */
  counter?: string;
}

export interface SpendCapsRecord {
  /** An entry may have no cap left and only `counter`, so that a cap set again counts on. */
  keys: Record<string, KeySpendCaps>;
  /** The caps of each end user of the app (the request's `user`); null: none. */
  endUser: SpendCaps | null;
}

export interface SpendCounter {
  /** Reserved by the scope's requests in flight: counts against every cap until settled. */
  held: Micros;
  total: Micros;
  /** UTC day (YYYY-MM-DD) and month (YYYY-MM) that the two sums below belong to. */
  day: string;
  daySpent: Micros;
  month: string;
  monthSpent: Micros;
}

export interface ReservationRecord {
  id: string;
  appId: string;
  keyId: string;
  requestId: string;
  model: string;
  amount: Micros;
  createdAt: number;
  leaseUntil: number;
  /** Tokens counted against the rate limit at reserve (prompt + max_tokens); corrected at settle. */
  tokens?: number;
  /** The app's end user, for per-end-user caps. */
  user?: string;
  /** The spend counters holding this reservation (its key's, its end user's), when capped. */
  capped?: SpendScope[];
  /** The key counter holding it when not the key's own (see `KeySpendCaps.counter`). */
  keyCounter?: string;
  /** Set when the reservation was admitted in memory against this process's slice (never stored). */
  sliceId?: string;
}

/**
 * A slice of a wallet's balance, taken by one process in one commit and spent by it in memory.
 * Invariants with the wallet: `reserved` = sum of reservations + sum of slices' `granted`; the usage
 * records sum to `spent` + sum of slices' `spent`. Only its process writes it (posting usage,
 * renewing its lease), and the wallet's batch when it grows or returns it.
 */
export interface WalletSliceRecord {
  id: string;
  appId: string;
  /** Money moved from the wallet's available into the slice; counted in the wallet's reserved. */
  granted: Micros;
  /** Charges posted against the slice (their usage records are written); never above granted. */
  spent: Micros;
  /** Requests and tokens taken from the app's rate window for the slice, returned unused. */
  rateRequests: number;
  rateTokens: number;
  createdAt: number;
  /** Past it (its process died or stalled), any sweeper returns the slice's unspent part. */
  leaseUntil: number;
}

/**
 * A process refused a reserve for credits while slices of the wallet held the money it lacked:
 * every slice granted before `at` stops admitting and gives its free money back.
 */
export interface SliceRecallRecord {
  at: number;
}

export type UsageOutcome = "completed" | "upstream_cut" | "client_closed";

/** How long a charged request stays findable by its id: longer than any Idempotency-Key lives. */
export const CHARGED_REQUEST_RETENTION_MS = 48 * 60 * 60 * 1000;

export interface ChargedRequest {
  appId: string;
  usageId: string;
  cost: number;
}

export interface UsageRecord {
  id: string;
  requestId: string;
  appId: string;
  keyId: string;
  model: string;
  provider: string;
  /** All the input the model read, cached and cache-written tokens included. */
  promptTokens: number;
  /** All the output, reasoning included. */
  completionTokens: number;
  /** Part of the prompt read from the provider's cache, billed at the cache-read price. */
  cachedTokens?: number;
  /** Part of the prompt written to the provider's cache, billed at the cache-write price. */
  cacheWriteTokens?: number;
  /** Part of those writes kept for an hour (Anthropic), billed at the 1-hour write price. */
  cacheWrite1hTokens?: number;
  /** Part of the completion the model spent reasoning (billed at the output price). */
  reasoningTokens?: number;
  /** What left the wallet. */
  cost: Micros;
  /**
   * Cost of the usage beyond what its reservation and the wallet's balance could cover: never
   * charged (the wallet never goes below zero), the operator's loss. Not part of `spent`.
   */
  uncharged: Micros;
  reserved: Micros;
  streamed: boolean;
  outcome: UsageOutcome;
  /** True when the upstream gave no usage and the tokens were counted by us. */
  countedLocally: boolean;
  /** The app's end user, from the request's `user` field (OpenAI's convention); absent: none. */
  user?: string;
  /**
   * Sent with an Idempotency-Key: the commit that charges it also indexes it by request id
   * (keys.chargedRequest), which a retry of the key reads after a crash.
   */
  idempotent?: true;
  createdAt: number;
}

export function emptyWallet(): WalletRecord {
  return { available: 0, reserved: 0, spent: 0, starter: 0, topUps: 0, operatorCredits: 0 };
}

/**
 * What a usage rollup sums per: a report's own grouping, or `detail` (model, key and end user
 * together) for a report filtered by any of them.
 */
export type UsageRollupGrouping = "day" | "model" | "key" | "user" | "detail";

/**
 * A group of a rollup: its parts (`[group]`, or `[model, keyId, user]` for `detail`; a missing end
 * user is null), then its requests, prompt tokens, completion tokens and cost. An array rather than
 * an object: a day may have thousands of groups, and a value's size is bounded.
 */
export type UsageRollupRow = [...(string | null)[], number, number, number, Micros];

/** One part of a day's rollup; a rollup too large for one KV value is split over several. */
export interface UsageRollupChunk {
  /** The day's `usageDayVersion` the rollup was made at (0n: never written). */
  version: bigint;
  /** How many parts the rollup has. */
  chunks: number;
  rows: UsageRollupRow[];
  /**
   * How many records the rollup sums, and the id of the last in key order (null: none), on every
   * part (absent on rollups made before 2026-11-28): a later report adds the records after that id,
   * and the sum is the whole day when the day's version, which counts its records, agrees.
   */
  records?: number;
  lastId?: string | null;
}

/** UTC day of a timestamp, as YYYY-MM-DD. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** Requests and tokens per minute. */
export interface RateLimits {
  rpm: number;
  tpm: number;
}

/**
 * Limits that replace the defaults: for the app, and for single keys (which default to the app's).
 * `operator` is the operator's own limit of the app (`admin set-limits`), which replaces the
 * defaults as the app's ceiling; `app` and `keys` are held at or below that ceiling.
 */
export interface RateLimitOverrides {
  app: Partial<RateLimits>;
  keys: Record<string, Partial<RateLimits>>;
  operator?: Partial<RateLimits>;
}

/**
 * Usage of one rate-limit scope (an app or a key) at time `at`, in units × one-minute window in
 * milliseconds, so that the level drains by exactly `limit` per millisecond and stays an integer.
 */
export interface RateWindow {
  requests: number;
  tokens: number;
  at: number;
}

export interface RateWindowsRecord {
  app: RateWindow | null;
  /** Only keys with limits of their own and a non-empty window; others are pruned at each write. */
  keys: Record<string, RateWindow>;
}

/**
 * An Idempotency-Key's claim: `running` while its first request runs (a lease, so a crashed
 * process does not hold the key forever), then `done` with what to replay. Only results that
 * were charged are recorded; a request that failed without a charge gives its key back.
 */
export type IdempotencyRecord =
  & {
    claimId: string;
    /** SHA-256 of the canonical JSON body: a repeat must send the same request. */
    bodyHash: string;
    /**
     * The method and path it was claimed on (`POST /v1/chat/completions`): a repeat must be sent to
     * the same endpoint. Absent on records from before it was kept, which are compared on the body
     * alone until they expire.
     */
    endpoint?: string;
    /** The request that ran. */
    requestId: string;
  }
  & (
    | { state: "running"; leaseUntil: number }
    | {
      state: "done";
      status: number;
      /** The response headers that are replayed (content type, cost, balance, provider). */
      headers: Record<string, string>;
      /** The body is stored in this many parts (`keys.idempotencyBodyPart`), for KV's value size. */
      bodyParts: number;
      /** Set instead of parts when the body was over the replay limit: its size, not kept. */
      omittedBytes?: number;
      /** The replay limit it was over (another instance, or a later setting, may have another). */
      omittedOver?: number;
      storedAt: number;
    }
  );

export interface WebhookSettingsRecord {
  /** https (http only to a loopback address, in development and tests). */
  url: string;
  /** Signs every event (HMAC-SHA256); shown to the owner once. */
  secret: string;
  /** Below this balance (available + held), one `balance.low` event per crossing; null: none. */
  lowBalanceThreshold: Micros | null;
  updatedAt: number;
}

export interface WebhookWatchRecord {
  /** The balance was below the threshold when last looked at: the alert is spent until it rises. */
  below: boolean;
  /** The newest ledger entry already considered for the ledger's events (top-ups, refunds…). */
  ledgerSeen: string | null;
  /** The newest ledger entry when the endpoint was set: it and older ones are never announced. */
  announceAfter: string | null;
}

export type WebhookEventType =
  | "balance.low"
  | "balance.topped_up"
  | "balance.taken_back"
  | "balance.given_back"
  | "webhook.test";

export interface WebhookAttempt {
  at: number;
  /** The receiver's HTTP status; null when it could not be reached. */
  status: number | null;
  error: string | null;
  durationMs: number;
}

export interface WebhookEventRecord {
  id: string;
  appId: string;
  type: WebhookEventType;
  /** The JSON body sent, byte for byte on every attempt. */
  payload: string;
  createdAt: number;
  state: "pending" | "delivered" | "failed";
  attempts: WebhookAttempt[];
  nextAttemptAt: number | null;
}

export interface WebhookOutboxEntry {
  appId: string;
}

export interface OwnerRecord {
  id: string;
  /** Normalised: trimmed and lower-cased. */
  email: string;
  /** `scrypt$N$r$p$salt$hash`, salt and hash in base64. */
  passwordHash: string;
  createdAt: number;
  /**
   * When the password was last changed or reset; a session of an earlier password (one begun
   * before it, even one the per-owner index never held) is over.
   */
  passwordChangedAt?: number;
}

export interface SessionRecord {
  ownerId: string;
  /** Sent back in a hidden field by every form of the session; checked on every POST. */
  csrfToken: string;
  createdAt: number;
  expiresAt: number;
  /** The owner's `passwordChangedAt` the session belongs to; it must still be the owner's. */
  passwordChangedAt?: number;
}

/**
 * What a secret reveal shows, and so on which page: what happened (its `kind`), to which app's
 * API key or webhook, or to which of the session owner's management keys.
 */
export type SecretRevealSubject =
  | {
    kind: "new_app" | "new_key" | "rotated_key";
    appId: string;
    /** The API key's name. */
    name: string;
  }
  | { kind: "new_webhook_secret" | "replaced_webhook_secret"; appId: string }
  | {
    kind: "new_management_key";
    /** The management key's name. */
    name: string;
  };

/** `keys.secretReveal`: a new secret, sealed so that only its session can open it. */
export type SecretRevealRecord = SecretRevealSubject & {
  /** The secret, AES-GCM under a key made from the session's id, which KV never holds. */
  sealed: Uint8Array<ArrayBuffer>;
  iv: Uint8Array<ArrayBuffer>;
  /** Past this time it is gone, whether or not KV has deleted it yet. */
  expiresAt: number;
};

/** The head of a stored response (`keys.storedResponse`); its JSON body is in `chunks` chunks. */
export interface StoredResponseRecord {
  id: string;
  createdAt: number;
  /** Past this time it is gone, whether or not KV has deleted it yet. */
  expiresAt: number;
  chunks: number;
  bytes: number;
  /**
   * Its output items' JSON, kept apart in `outputChunks` chunks; absent from responses stored
   * before it was, whose items are read from the body.
   */
  outputChunks?: number;
  outputBytes?: number;
  /**
   * Its response object (output aside) and its request's input items, kept apart likewise; absent
   * from responses stored before they were, whose body holds them (or, older still, not even it).
   */
  objectChunks?: number;
  objectBytes?: number;
  inputChunks?: number;
  inputBytes?: number;
  /** Where the input's items begin, after their ids and ends. */
  inputIndexBytes?: number;
  /**
   * Deleted by its app: kept as a marker until it would have expired, so that deleting again
   * answers as the first time did, while its body and items are gone.
   */
  deleted?: true;
}

/** `keys.signedThinkingChunk`: one piece of the JSON of the thinking's `reasoning_details`. */
export interface SignedThinkingChunkRecord {
  /** How many chunks the thinking was written in, all in one commit. */
  chunks: number;
  /** Past this time it is gone, whether or not KV has deleted it yet. */
  expiresAt: number;
  part: Uint8Array;
}

/** `keys.storedResponseItem`: which stored response holds the item. */
export interface StoredResponseItemRecord {
  responseId: string;
  expiresAt: number;
}
