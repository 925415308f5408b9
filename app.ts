import { Hono } from "hono";
import type { Catalog } from "./lib/catalog.ts";
import type { Config } from "./lib/config.ts";
import { ApiError } from "./lib/errors.ts";
import { Gateway } from "./lib/gateway.ts";
import { jsonLogger, type Logger } from "./lib/log.ts";
import { createProviders } from "./lib/providers/index.ts";
import { Wallets } from "./lib/wallet.ts";
import { errorsPage } from "./routes/docs/errors.tsx";
import {
  type Env,
  errorHandler,
  requestContext,
  requireApiKey,
  requireSupportedVersion,
} from "./routes/middleware.ts";
import { homePage } from "./routes/pages/home.tsx";
import { modelsPage } from "./routes/pages/models.tsx";
import { notFoundPage } from "./routes/pages/not_found.tsx";
import { securityHeaders } from "./routes/security_headers.ts";
import { serveStatic } from "./routes/static.ts";
import { chatCompletions } from "./routes/v1/chat/completions.ts";

export interface AppDeps {
  kv: Deno.Kv;
  config: Config;
  catalog: Catalog;
  log?: Logger;
  /** Replaces the global fetch for upstream calls (tests). */
  fetch?: typeof fetch;
}

/** Builds the whole service around one KV handle; no listening, so tests can call `fetch` directly. */
export function createApp(deps: AppDeps) {
  const { kv, config, catalog } = deps;
  const log = deps.log ?? jsonLogger;
  const wallets = new Wallets(kv, { leaseMs: config.reservationTtlSeconds * 1000 });
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
  });
  const docsBaseUrl = config.publicUrl;

  const app = new Hono<Env>();
  app.use("*", requestContext(log));
  app.use("*", securityHeaders);
  app.onError(errorHandler(log, docsBaseUrl));

  app.post(
    "/v1/chat/completions",
    requireApiKey(kv),
    requireSupportedVersion,
    chatCompletions(gateway, { maxBodyBytes: config.maxBodyBytes, docsBaseUrl }),
  );
  app.all("/v1/*", (c) => {
    throw new ApiError("not_found", `No endpoint ${c.req.method} ${c.req.path}.`);
  });

  app.get("/", (c) => c.html(homePage(config.publicUrl)));
  app.get("/models", (c) => c.html(modelsPage(catalog)));
  app.get("/docs/errors", (c) => c.html(errorsPage()));
  app.get("/static/*", serveStatic(new URL("./static/", import.meta.url)));
  app.notFound((c) => c.html(notFoundPage(), 404));

  return { app, wallets, gateway };
}
