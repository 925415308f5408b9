import { z } from "zod";

/** Process configuration read once from the environment. */
export interface Config {
  port: number;
  kvPath: string | undefined;
  modelsFile: string;
  publicUrl: string;
  reservationTtlSeconds: number;
  rateLimitRpm: number;
  rateLimitTpm: number;
  /** Requests a minute each management key may make. */
  managementRateLimitRpm: number;
  maxBodyBytes: number;
  /** A request body not whole this long after reading began is refused (408). */
  bodyReadTimeoutMs: number;
  /** The largest answer an Idempotency-Key records for replays. */
  idempotencyReplayMaxBytes: number;
  upstreamTimeoutMs: number;
  /**
   * Anthropic requests whose bound-based reservation exceeds this percentage of the balance are
   * counted exactly first (count_tokens, free), and the count may take at most this long.
   */
  exactCountPercent: number;
  countTokensTimeoutMs: number;
  /** Stripe Checkout for top-ups; both are set or neither. */
  stripeSecretKey: string | undefined;
  stripeWebhookSecret: string | undefined;
  /** "dev": the explicit opt-in to the test checkout (no real money) outside `deno task dev`. */
  payments: "dev" | undefined;
  /** Bearer token of GET /metrics; unset, the endpoint does not exist (404). */
  metricsToken: string | undefined;
  /** How long in-flight requests may run after SIGTERM/SIGINT before the process exits anyway. */
  shutdownGraceMs: number;
  /** Webhook endpoints may be plain http on a loopback address (development and tests only). */
  webhookAllowLoopback: boolean;
  /** Bounds on starter credits: apps an owner may make, in all and per UTC day. */
  maxAppsPerOwner: number;
  maxAppCreationsPerDay: number;
  /** Live (not revoked) API keys an app may have; the operator's keys are not held to it. */
  maxLiveKeysPerApp: number;
  /** Accounts one client address may make per UTC day. */
  maxSignupsPerAddressPerDay: number;
  /**
   * The request header a trusted proxy puts the client's address in; unset, the connection's own
   * address is used and no header is believed. `trustedProxyCount` proxies append to
   * X-Forwarded-For (the address is the entry that many from the right).
   */
  trustedProxyHeader: string | undefined;
  trustedProxyCount: number;
  /**
   * Serve hot wallets from slices of their balance held by this process (lib/billing/slices.ts):
   * no commit on a request's path, charges posted within ~50 ms (or at once when 64 wait),
   * bounded loss on SIGKILL.
   */
  /**
   * Wallet slices: "auto" serves an app from a slice once it is hot in this process
   * (WALLET_SLICE_HOT_RPS), "on" always, "off" never (a commit per reserve and settle).
   */
  walletSlices: "auto" | "on" | "off";
  walletSliceHotRps: number;
  /** How long a slice's settled charges may wait to be posted together (the loss bound on SIGKILL). */
  walletSlicePostMs: number;
  /** When set, the wallet counters are logged (`wallet_stats`) this often, in ms. */
  walletStatsLogMs: number | undefined;
  /** Let several processes listen on the same port (Linux's SO_REUSEPORT). */
  reusePort: boolean;
  /**
   * How many workers (each its own thread, isolate and KV handle) serve the port in this process:
   * a number, or `"auto"` (main.ts resolves it: one per core where the kernel balances a shared
   * port, one elsewhere and under `--dev`).
   */
  serveWorkers: number | "auto";
  /** Workers gather a light load's connections on the first one (lib/ops/connection_steering.ts). */
  connectionSteering: boolean;
  /**
   * Start a non-streamed call's upstream while its reservation commits, when the wallet as this
   * process last committed it says the reservation fits (lib/gateway/gateway.ts).
   */
  optimisticUpstream: boolean;
  env: Record<string, string | undefined>;
}

/** Workers of one process at most: they take turns on wallet commits by one bit each (an Int32). */
export const MAX_SERVE_WORKERS = 31;

/** The longest delay a timer holds: beyond it setTimeout and setInterval fire after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

type Range = readonly [min: number, max: number];

/**
 * An integer of decimal digits only, within `range`: `Number()` would also take `0x1F41`, `1e3`
 * and ` 12 `, none of which an operator means as written.
 */
function integerWithin(v: string, [min, max]: Range, ctx: z.RefinementCtx, or = ""): number {
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (n >= min && n <= max) return n;
  ctx.addIssue({
    code: "custom",
    message: `must be ${or}an integer from ${min} to ${max}, got ${JSON.stringify(v)}`,
  });
  return z.NEVER;
}

/**
 * The base of every `top_up_url` and doc link handed to clients: a plain http(s) address, a path
 * prefix allowed. A query, fragment or credentials would end up in the middle of every link built
 * on it, and another scheme (`javascript:`) would make those links run or mail something.
 */
const publicUrl = z.string().optional().transform((v, ctx) => {
  if (v === undefined || v === "") return undefined;
  const url = URL.parse(v);
  if (
    !url || (url.protocol !== "http:" && url.protocol !== "https:") || /[?#]/.test(v) ||
    url.username || url.password
  ) {
    ctx.addIssue({
      code: "custom",
      message:
        `must be an http(s) URL without query, fragment or credentials, such as https://tollbooth.example.com, got ${
          JSON.stringify(v)
        }`,
    });
    return z.NEVER;
  }
  return url.href.replace(/\/+$/, "");
});

const integerIn = (fallback: number, range: Range) =>
  z.string().optional().transform((v, ctx) =>
    v === undefined || v === "" ? fallback : integerWithin(v, range, ctx)
  );

/**
 * The numeric defaults, by environment variable: the one place they are written (the README's
 * table is checked against it by tests/config_defaults_test.ts).
 */
export const CONFIG_DEFAULTS = {
  RESERVATION_TTL_SECONDS: 600,
  WALLET_SLICE_POST_MS: 100,
  WALLET_SLICE_HOT_RPS: 50,
  RATE_LIMIT_RPM: 600,
  RATE_LIMIT_TPM: 2_000_000,
  // Five a second, sustained: more than any dashboard or sync job needs, and a leaked key's writes
  // (revoked keys are kept) are held to that.
  MANAGEMENT_RATE_LIMIT_RPM: 300,
  MAX_BODY_BYTES: 4 * 1024 * 1024,
  // A 4 MiB body takes about 34 s at 1 Mbit/s: a minute lets slow links finish and cuts trickles.
  BODY_READ_TIMEOUT_MS: 60_000,
  // Every chat answer fits with room to spare; a batch of float embeddings may not, and recording
  // it would store tens of MB per request in KV for a day, paid by nobody.
  IDEMPOTENCY_REPLAY_MAX_BYTES: 8 * 1024 * 1024,
  // Longer than a reasoning model may think before its first byte: a timeout cuts work the
  // provider still bills, so it errs long.
  UPSTREAM_TIMEOUT_MS: 120_000,
  // count_tokens is free but rate-limited: asked only where the bound decides, and never waited on
  // for long (the bound then stands).
  EXACT_COUNT_PERCENT: 50,
  COUNT_TOKENS_TIMEOUT_MS: 2_000,
  SHUTDOWN_GRACE_MS: 10_000,
  // One account's reach is 3 apps (15.00 USD of starter credits); one address makes 2 accounts a
  // day of at most 2 apps each that day: 4 apps, 20.00 USD, a day.
  MAX_APPS_PER_OWNER: 3,
  MAX_APP_CREATIONS_PER_DAY: 2,
  MAX_SIGNUPS_PER_ADDRESS_PER_DAY: 2,
  // A key per customer of a small reseller, with room; the bound keeps an owner (or a leaked
  // management key) from growing an app's live keys and every count of them without end.
  MAX_LIVE_KEYS_PER_APP: 100,
  TRUSTED_PROXY_COUNT: 1,
} as const;

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * The values each numeric variable accepts, smallest and largest: anything outside is refused at
 * start with the variable's name (the README's table states them; tests/config_defaults_test.ts
 * checks both). Every duration fits a timer (MAX_TIMER_MS), derived ones included.
 */
export const CONFIG_RANGES = {
  // 0 asks the OS for a free port (tests); the listening log line says which.
  PORT: [0, 65_535],
  // A crashed process's holds stay reserved this long: a day is already long for money to sit
  // idle. Live requests renew their lease every third of it (a timer).
  RESERVATION_TTL_SECONDS: [1, 86_400],
  // The bound of `set-limits` and the dashboard (lib/billing/ratelimit.ts's MAX_LIMIT): beyond it
  // the scaled levels leave the safe-integer range.
  RATE_LIMIT_RPM: [1, 1_000_000_000],
  RATE_LIMIT_TPM: [1, 1_000_000_000],
  // Each request is counted in one commit on its key's counter.
  MANAGEMENT_RATE_LIMIT_RPM: [1, 1_000_000],
  // Bodies are read whole into memory before they are parsed.
  MAX_BODY_BYTES: [1, 256 * 1024 * 1024],
  // A 256 MiB body at 1 Mbit/s takes 36 minutes.
  BODY_READ_TIMEOUT_MS: [1, HOUR_MS],
  // A recorded answer is kept in KV for a day.
  IDEMPOTENCY_REPLAY_MAX_BYTES: [1, 64 * 1024 * 1024],
  UPSTREAM_TIMEOUT_MS: [1, HOUR_MS],
  // Of the balance: above 100 no reservation could ever qualify.
  EXACT_COUNT_PERCENT: [1, 100],
  // A request waits for the count before it starts.
  COUNT_TOKENS_TIMEOUT_MS: [1, 60_000],
  // main.ts waits this plus its workers' margin (a timer).
  SHUTDOWN_GRACE_MS: [1, HOUR_MS],
  MAX_APPS_PER_OWNER: [1, 10_000],
  MAX_APP_CREATIONS_PER_DAY: [1, 10_000],
  MAX_SIGNUPS_PER_ADDRESS_PER_DAY: [1, 10_000],
  // Each new key counts the app's live keys.
  MAX_LIVE_KEYS_PER_APP: [1, 10_000],
  TRUSTED_PROXY_COUNT: [1, 10],
  // What a SIGKILL may lose: more than a minute's charges is not a bound worth having.
  WALLET_SLICE_POST_MS: [1, 60_000],
  WALLET_SLICE_HOT_RPS: [1, 1_000_000],
  WALLET_STATS_LOG_MS: [1, DAY_MS],
  // Workers take turns on wallet commits through one bit each in shared memory (commit_locks.ts).
  SERVE_WORKERS: [1, MAX_SERVE_WORKERS],
} as const satisfies Record<string, Range>;

/** A numeric variable with a default: its default when unset, else an integer within its range. */
const numericSetting = (name: keyof typeof CONFIG_DEFAULTS & keyof typeof CONFIG_RANGES) =>
  integerIn(CONFIG_DEFAULTS[name], CONFIG_RANGES[name]);

const EnvSchema = z.object({
  PORT: integerIn(8000, CONFIG_RANGES.PORT),
  KV_PATH: z.string().optional(),
  MODELS_FILE: z.string().optional(),
  PUBLIC_URL: publicUrl,
  RESERVATION_TTL_SECONDS: numericSetting("RESERVATION_TTL_SECONDS"),
  RATE_LIMIT_RPM: numericSetting("RATE_LIMIT_RPM"),
  RATE_LIMIT_TPM: numericSetting("RATE_LIMIT_TPM"),
  MANAGEMENT_RATE_LIMIT_RPM: numericSetting("MANAGEMENT_RATE_LIMIT_RPM"),
  MAX_BODY_BYTES: numericSetting("MAX_BODY_BYTES"),
  BODY_READ_TIMEOUT_MS: numericSetting("BODY_READ_TIMEOUT_MS"),
  IDEMPOTENCY_REPLAY_MAX_BYTES: numericSetting("IDEMPOTENCY_REPLAY_MAX_BYTES"),
  UPSTREAM_TIMEOUT_MS: numericSetting("UPSTREAM_TIMEOUT_MS"),
  EXACT_COUNT_PERCENT: numericSetting("EXACT_COUNT_PERCENT"),
  COUNT_TOKENS_TIMEOUT_MS: numericSetting("COUNT_TOKENS_TIMEOUT_MS"),
  STRIPE_SECRET_KEY: z.string().optional(),
  STRIPE_WEBHOOK_SECRET: z.string().optional(),
  PAYMENTS: z.enum(["dev"]).optional().or(z.literal("").transform(() => undefined)),
  METRICS_TOKEN: z.string().optional(),
  SHUTDOWN_GRACE_MS: numericSetting("SHUTDOWN_GRACE_MS"),
  WEBHOOK_ALLOW_LOOPBACK: z.enum(["1", "true", "0", "false", ""]).optional(),
  MAX_APPS_PER_OWNER: numericSetting("MAX_APPS_PER_OWNER"),
  MAX_APP_CREATIONS_PER_DAY: numericSetting("MAX_APP_CREATIONS_PER_DAY"),
  MAX_SIGNUPS_PER_ADDRESS_PER_DAY: numericSetting("MAX_SIGNUPS_PER_ADDRESS_PER_DAY"),
  MAX_LIVE_KEYS_PER_APP: numericSetting("MAX_LIVE_KEYS_PER_APP"),
  TRUSTED_PROXY_HEADER: z.string().optional().transform((v, ctx) => {
    const name = v?.trim().toLowerCase();
    if (!name) return undefined;
    if (!/^[a-z0-9-]+$/.test(name)) {
      ctx.addIssue({ code: "custom", message: `must be a header name, got ${JSON.stringify(v)}` });
      return z.NEVER;
    }
    return name;
  }),
  TRUSTED_PROXY_COUNT: numericSetting("TRUSTED_PROXY_COUNT"),
  WALLET_SLICE_POST_MS: numericSetting("WALLET_SLICE_POST_MS"),
  WALLET_STATS_LOG_MS: integerIn(0, CONFIG_RANGES.WALLET_STATS_LOG_MS).transform((n) =>
    n || undefined
  ),
  REUSE_PORT: z.enum(["on", "off"]).optional().or(z.literal("").transform(() => undefined)),
  SERVE_WORKERS: z.string().optional().transform((v, ctx): number | "auto" =>
    v === undefined || v === "" || v === "auto"
      ? "auto"
      : integerWithin(v, CONFIG_RANGES.SERVE_WORKERS, ctx, '"auto" or ')
  ),
  CONNECTION_STEERING: z.enum(["auto", "off"]).optional().or(
    z.literal("").transform(() => undefined),
  ),
  WALLET_SLICES: z.enum(["auto", "on", "off"]).optional().or(
    z.literal("").transform(() => undefined),
  ),
  WALLET_SLICE_HOT_RPS: numericSetting("WALLET_SLICE_HOT_RPS"),
  OPTIMISTIC_UPSTREAM: z.enum(["on", "off"]).optional().or(
    z.literal("").transform(() => undefined),
  ),
});

export const DEFAULT_MODELS_FILE = new URL("../../config/models.json", import.meta.url).pathname;

export class ConfigError extends Error {}

export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(`environment variable ${issue.path.join(".")}: ${issue.message}`);
  }
  const e = parsed.data;
  if (e.KV_PATH && /^https?:\/\//.test(e.KV_PATH) && !env.DENO_KV_ACCESS_TOKEN) {
    // Deno would only say it cannot connect: the denokv server refuses a client without it.
    throw new ConfigError(
      "environment variable KV_PATH is a denokv URL: set DENO_KV_ACCESS_TOKEN to its access token",
    );
  }
  const stripeSecretKey = e.STRIPE_SECRET_KEY || undefined;
  const stripeWebhookSecret = e.STRIPE_WEBHOOK_SECRET || undefined;
  if (Boolean(stripeSecretKey) !== Boolean(stripeWebhookSecret)) {
    // A key without the secret takes money that no webhook can credit; refuse to start instead.
    throw new ConfigError(
      "environment variables STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET: set both or neither",
    );
  }
  if (e.PAYMENTS === "dev" && stripeSecretKey) {
    // The test checkout credits anyone for free: on a server set up for real payments that is a
    // leak, and Stripe's own events would go unanswered.
    throw new ConfigError(
      "environment variable PAYMENTS=dev (the free test checkout) cannot be set with STRIPE_SECRET_KEY: unset one",
    );
  }
  return {
    port: e.PORT,
    kvPath: e.KV_PATH,
    modelsFile: e.MODELS_FILE ?? DEFAULT_MODELS_FILE,
    publicUrl: e.PUBLIC_URL ?? `http://localhost:${e.PORT}`,
    reservationTtlSeconds: e.RESERVATION_TTL_SECONDS,
    rateLimitRpm: e.RATE_LIMIT_RPM,
    rateLimitTpm: e.RATE_LIMIT_TPM,
    managementRateLimitRpm: e.MANAGEMENT_RATE_LIMIT_RPM,
    maxBodyBytes: e.MAX_BODY_BYTES,
    bodyReadTimeoutMs: e.BODY_READ_TIMEOUT_MS,
    idempotencyReplayMaxBytes: e.IDEMPOTENCY_REPLAY_MAX_BYTES,
    upstreamTimeoutMs: e.UPSTREAM_TIMEOUT_MS,
    exactCountPercent: e.EXACT_COUNT_PERCENT,
    countTokensTimeoutMs: e.COUNT_TOKENS_TIMEOUT_MS,
    stripeSecretKey,
    stripeWebhookSecret,
    payments: e.PAYMENTS,
    metricsToken: e.METRICS_TOKEN || undefined,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    webhookAllowLoopback: e.WEBHOOK_ALLOW_LOOPBACK === "1" || e.WEBHOOK_ALLOW_LOOPBACK === "true",
    maxAppsPerOwner: e.MAX_APPS_PER_OWNER,
    maxAppCreationsPerDay: e.MAX_APP_CREATIONS_PER_DAY,
    maxSignupsPerAddressPerDay: e.MAX_SIGNUPS_PER_ADDRESS_PER_DAY,
    maxLiveKeysPerApp: e.MAX_LIVE_KEYS_PER_APP,
    trustedProxyHeader: e.TRUSTED_PROXY_HEADER,
    trustedProxyCount: e.TRUSTED_PROXY_COUNT,
    walletSlices: e.WALLET_SLICES ?? "auto",
    walletSliceHotRps: e.WALLET_SLICE_HOT_RPS,
    walletSlicePostMs: e.WALLET_SLICE_POST_MS,
    walletStatsLogMs: e.WALLET_STATS_LOG_MS,
    reusePort: e.REUSE_PORT === "on",
    serveWorkers: e.SERVE_WORKERS,
    connectionSteering: e.CONNECTION_STEERING !== "off",
    optimisticUpstream: e.OPTIMISTIC_UPSTREAM === "on",
    env,
  };
}
