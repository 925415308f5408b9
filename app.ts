import { Hono } from "hono";
import type { Catalog } from "@/lib/catalog/mod.ts";
import { ApiError, type Config, jsonLogger, type Logger } from "@/lib/core/mod.ts";
import { createStripeClient, FormTokens, paymentMode, type Stripe } from "@/lib/payments/mod.ts";
import { Gateway, providerKeyRedactor, Responses, ResponseStore } from "@/lib/gateway/mod.ts";
import { KeyCache } from "@/lib/tenants/mod.ts";
import { type MetricsSnapshot, openApiDocument, ServiceMetrics } from "@/lib/ops/mod.ts";
import { createProviders } from "@/lib/gateway/providers/mod.ts";
import { type CommitLocks, Wallets } from "@/lib/billing/mod.ts";
import { IdempotencyStore } from "@/lib/idempotency/mod.ts";
import { WebhookDeliverer, WebhookWatcher } from "@/lib/webhooks/mod.ts";
import { apiKeyScope, idempotency } from "@/routes/idempotency.ts";
import { rateLimitHeaders } from "./routes/rate_limit_headers.ts";
import { errorsPage } from "@/routes/docs/errors.tsx";
import { endpointsPage } from "@/routes/docs/endpoints.tsx";
import { loadExamples } from "@/routes/docs/examples.ts";
import { managementDocsPage } from "@/routes/docs/management.tsx";
import { webhooksDocsPage } from "@/routes/docs/webhooks.tsx";
import {
  billingPage,
  operationsPage,
  quickStartPage,
  rateLimitsPage,
  versioningPage,
} from "@/routes/docs/guides.tsx";
import {
  API_VERSION,
  type Env,
  errorHandler,
  requestContext,
  requireApiKey,
  requireLiveApiKey,
  requireSupportedVersion,
} from "@/routes/middleware.ts";
import { accountRoutes } from "@/routes/accounts.tsx";
import { dashboardRoutes } from "@/routes/dashboard/index.ts";
import { homePage } from "@/routes/pages/home.tsx";
import { modelsPage } from "@/routes/pages/models.tsx";
import { healthz, metricsEndpoint, readyz } from "@/routes/ops.ts";
import { notFoundPage } from "@/routes/pages/not_found.tsx";
import { serverErrorPage } from "@/routes/pages/server_error.tsx";
import { securityHeaders } from "@/routes/security_headers.ts";
import { boundedPathSegments } from "@/routes/path_bound.ts";
import { serveStatic } from "@/routes/static.ts";
import { topUpRoutes } from "@/routes/top_up.tsx";
import { chatCompletions } from "@/routes/v1/chat/completions.ts";
import { MAX_EVENT_BYTES, stripeWebhook } from "@/routes/webhooks/stripe.ts";
import { apiBodyRefusal, bodyLimit, setBodyReadTimeout } from "@/routes/body_limit.ts";
import { modelRoutes } from "@/routes/v1/models.ts";
import { embeddings } from "@/routes/v1/embeddings.ts";
import { responsesRoute, storedResponseRoutes } from "@/routes/v1/responses.ts";
import { managementRoutes } from "@/routes/v1/management.ts";

export interface AppDeps {
  kv: Deno.Kv;
  config: Config;
  catalog: Catalog;
  log?: Logger;
  /** Replaces the global fetch for upstream calls (tests). */
  fetch?: typeof fetch;
  /** `deno task dev`: top-ups use the test checkout when no Stripe key is set. */
  devServer?: boolean;
  /** Replaces the Stripe client built from STRIPE_SECRET_KEY (tests point it at a fake). */
  stripe?: Stripe;
  /** Replaces the clock of wallets, rate limits and the sign-in and sign-up throttles (tests). */
  now?: () => number;
  /** The metric values of the other workers on this port (SERVE_WORKERS), for /metrics. */
  siblingMetrics?: () => Promise<MetricsSnapshot[]>;
  /** The workers on this port take turns committing one wallet (SERVE_WORKERS). */
  commitLocks?: CommitLocks;
  /** Replaces the wallet's tries of a failing commit (tests: a settle that fails for good). */
  walletMaxAttempts?: number;
}

/** Builds the whole service around one KV handle; no listening, so tests can call `fetch` directly. */
export function createApp(deps: AppDeps) {
  const { kv, config, catalog } = deps;
  // No provider key leaves: not in a log line, not in an upstream's reason quoted to a client.
  const redactor = providerKeyRedactor(catalog);
  const log = redactor.logger(deps.log ?? jsonLogger);
  const now = deps.now ?? Date.now;
  const rateLimits = { rpm: config.rateLimitRpm, tpm: config.rateLimitTpm };
  // Webhook detection looks at a wallet after its commits, off the request's path.
  const webhookWatcher = new WebhookWatcher(kv, { now, log });
  const webhookDeliverer = new WebhookDeliverer(kv, { log });
  const wallets = new Wallets(kv, {
    leaseMs: config.reservationTtlSeconds * 1000,
    now,
    rateLimits,
    slices: config.walletSlices === "off" ? undefined : {
      // A slice outlives its process by at most this; never longer than a reservation would.
      leaseMs: Math.min(10_000, config.reservationTtlSeconds * 1000),
      postEveryMs: config.walletSlicePostMs,
      hotPerSecond: config.walletSlices === "auto" ? config.walletSliceHotRps : undefined,
    },
    onMoneyMoved: (appId) => webhookWatcher.nudge(appId),
    locks: deps.commitLocks,
    maxAttempts: deps.walletMaxAttempts,
  });
  const providers = createProviders(catalog, {
    timeoutMs: config.upstreamTimeoutMs,
    fetch: deps.fetch,
  });
  const gateway = new Gateway({
    kv,
    wallets,
    catalog,
    providers,
    publicUrl: config.publicUrl,
    log,
    clientStallMs: config.upstreamTimeoutMs,
    optimisticUpstream: config.optimisticUpstream,
    exactCountShare: config.exactCountPercent / 100,
    countTokensTimeoutMs: config.countTokensTimeoutMs,
  });
  const docsBaseUrl = config.publicUrl;
  const payments = paymentMode(config, deps.devServer ?? false);
  const stripe = payments === "stripe"
    ? deps.stripe ?? createStripeClient(config.stripeSecretKey!)
    : undefined;
  const metrics = new ServiceMetrics(wallets.stats);
  // A claim outlives any request that still holds money: the same lease as a reservation's.
  const idempotencyStore = new IdempotencyStore(kv, {
    leaseMs: config.reservationTtlSeconds * 1000,
    maxBodyBytes: config.idempotencyReplayMaxBytes,
    now,
  });
  /** Idempotency-Key on a paid POST: keys are private to the calling API key. */
  const paidIdempotency = (options: { streams: boolean }) =>
    idempotency(idempotencyStore, {
      scope: (c) => apiKeyScope(c.get("caller")),
      log,
      ...options,
    });
  const streamingIdempotency = paidIdempotency({ streams: true });
  let draining = false;

  setBodyReadTimeout(config.bodyReadTimeoutMs);
  const keyCache = new KeyCache(kv);
  const app = new Hono<Env>();
  app.use("*", requestContext(log, (line) => metrics.observeRequest(line)));
  app.use("*", securityHeaders);
  // A model's lookup is in the catalog in memory, and its 404 carries the caller's rate limits.
  app.use("*", boundedPathSegments(["/v1/models/"]));
  app.onError(errorHandler(log, docsBaseUrl, serverErrorPage));

  /** Paid endpoints: the reserve's commit checks the (cached) key; every answer shows the limits. */
  const paidApi = [
    requireApiKey(keyCache),
    rateLimitHeaders(kv, rateLimits, now),
    requireSupportedVersion,
    bodyLimit(config.maxBodyBytes, apiBodyRefusal, { readsJson: true }),
  ] as const;
  const freeApi = [
    requireLiveApiKey(keyCache),
    rateLimitHeaders(kv, rateLimits, now),
    requireSupportedVersion,
  ] as const;
  app.post(
    "/v1/chat/completions",
    ...paidApi,
    streamingIdempotency,
    chatCompletions(gateway, { docsBaseUrl }),
  );
  app.post(
    "/v1/embeddings",
    ...paidApi,
    paidIdempotency({ streams: false }),
    embeddings(gateway),
  );
  const responses = new Responses(gateway, new ResponseStore(kv, now), log);
  app.post(
    "/v1/responses",
    ...paidApi,
    streamingIdempotency,
    responsesRoute(responses),
  );
  const stored = storedResponseRoutes(responses);
  app.get("/v1/responses/:id", ...freeApi, stored.retrieve);
  app.delete("/v1/responses/:id", ...freeApi, stored.delete);
  app.get("/v1/responses/:id/input_items", ...freeApi, stored.inputItems);
  app.post("/v1/responses/:id/cancel", ...freeApi, stored.cancel);
  const models = modelRoutes(catalog, { created: Date.parse(API_VERSION) / 1000 });
  app.get("/v1/models", ...freeApi, models.list);
  app.get("/v1/models/:model{.+}", ...freeApi, models.retrieve);
  app.route(
    "/v1/management",
    managementRoutes({
      kv,
      publicUrl: config.publicUrl,
      idempotencyStore,
      log,
      keyBound: { maxLiveKeys: config.maxLiveKeysPerApp },
      requestsPerMinute: config.managementRateLimitRpm,
      now,
    }),
  );
  app.all("/v1/*", (c) => {
    throw new ApiError("not_found", `No endpoint ${c.req.method} ${c.req.path}.`);
  });

  app.route(
    "/top-up",
    topUpRoutes({
      kv,
      wallets,
      log,
      formTokens: new FormTokens(kv),
      mode: payments,
      stripe,
      publicUrl: config.publicUrl,
      proxyTrust: { header: config.trustedProxyHeader, count: config.trustedProxyCount },
    }),
  );
  app.post(
    "/webhooks/stripe",
    bodyLimit(MAX_EVENT_BYTES, apiBodyRefusal),
    stripeWebhook({ kv, wallets, log, stripe, webhookSecret: config.stripeWebhookSecret }),
  );

  app.get("/", (c) => c.html(homePage(config.publicUrl)));
  app.get("/models", (c) => c.html(modelsPage(catalog)));
  app.get("/docs/errors", (c) => c.html(errorsPage()));
  app.get(
    "/docs",
    async (c) => c.html(quickStartPage(config.publicUrl, API_VERSION, await loadExamples())),
  );
  app.get("/docs/endpoints", (c) => c.html(endpointsPage()));
  app.get("/docs/billing", (c) => c.html(billingPage()));
  app.get("/docs/rate-limits", (c) => c.html(rateLimitsPage(config)));
  app.get(
    "/docs/management",
    async (c) =>
      c.html(
        managementDocsPage(config.publicUrl, await loadExamples(), config.managementRateLimitRpm),
      ),
  );
  app.get("/docs/webhooks", async (c) => c.html(webhooksDocsPage(await loadExamples())));
  app.get("/docs/versioning", (c) => c.html(versioningPage(API_VERSION)));
  app.get("/docs/operations", (c) => c.html(operationsPage()));
  const openApi = openApiDocument(config.publicUrl, API_VERSION);
  app.get("/openapi.json", (c) => {
    c.header("Access-Control-Allow-Origin", "*");
    return c.json(openApi);
  });
  app.get("/healthz", healthz);
  app.get("/readyz", readyz({ kv, catalog, draining: () => draining, log }));
  app.get(
    "/metrics",
    metricsEndpoint({ kv, metrics, token: config.metricsToken, siblings: deps.siblingMetrics }),
  );
  app.route(
    "/",
    accountRoutes({
      kv,
      publicUrl: config.publicUrl,
      proxyTrust: { header: config.trustedProxyHeader, count: config.trustedProxyCount },
      signupsPerAddressPerDay: config.maxSignupsPerAddressPerDay,
      now,
    }),
  );
  app.route(
    "/dashboard",
    dashboardRoutes({
      kv,
      publicUrl: config.publicUrl,
      rateLimits,
      appCreation: {
        maxAppsPerOwner: config.maxAppsPerOwner,
        maxAppCreationsPerDay: config.maxAppCreationsPerDay,
      },
      keyBound: { maxLiveKeys: config.maxLiveKeysPerApp },
      webhooks: {
        watcher: webhookWatcher,
        deliverer: webhookDeliverer,
        allowLoopback: config.webhookAllowLoopback || (deps.devServer ?? false),
      },
      proxyTrust: { header: config.trustedProxyHeader, count: config.trustedProxyCount },
      now,
    }),
  );
  const staticRoot = new URL("./static/", import.meta.url);
  app.get("/static/*", serveStatic(staticRoot));
  // Browsers ask for it by this name on their own, whatever a page links.
  app.get("/favicon.ico", serveStatic(staticRoot, { file: "favicon.svg" }));
  app.notFound((c) => c.html(notFoundPage(), 404));

  /** Shutdown begins: /readyz answers 503 so that load balancers stop sending traffic here. */
  const startDraining = () => {
    draining = true;
  };
  const webhooks = { watcher: webhookWatcher, deliverer: webhookDeliverer };
  return { app, wallets, gateway, payments, metrics, webhooks, startDraining };
}
