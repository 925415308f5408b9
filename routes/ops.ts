import { type Logger, timingSafeEqualStrings } from "@/lib/core/mod.ts";
import type { Context } from "hono";
import type { Catalog } from "@/lib/catalog/mod.ts";
import { keys } from "@/lib/db.ts";
import {
  type MetricsSnapshot,
  PROMETHEUS_CONTENT_TYPE,
  type ServiceMetrics,
} from "@/lib/ops/mod.ts";
import { bearerToken, type Env } from "./middleware.ts";

const KV_PROBE_TIMEOUT_MS = 2_000;

/** GET /healthz: the process is up and serving HTTP. Nothing else is checked. */
export function healthz(c: Context<Env>) {
  c.header("Cache-Control", "no-store");
  return c.json({ status: "ok" });
}

/**
 * GET /readyz: this instance should receive traffic: KV answers a strong read, the catalog has
 * models, and the process is not shutting down (a draining instance answers 503 so that the load
 * balancer stops sending to it). Anyone may ask, so a KV failure is answered "error" and its own
 * words (paths, the store's messages) go to the log.
 */
export function readyz(
  deps: { kv: Deno.Kv; catalog: Catalog; draining: () => boolean; log: Logger },
) {
  return async (c: Context<Env>) => {
    c.header("Cache-Control", "no-store");
    const checks = {
      kv: await probeKv(deps.kv, deps.log),
      catalog: deps.catalog.models.length > 0 ? "ok" : "no models loaded",
      shutdown: deps.draining() ? "draining" : "ok",
    };
    const ready = Object.values(checks).every((v) => v === "ok");
    return c.json({ status: ready ? "ready" : "not_ready", checks }, ready ? 200 : 503);
  };
}

async function probeKv(kv: Deno.Kv, log: Logger): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const timeout = new Promise<string>((resolve) => {
      timer = setTimeout(
        () => resolve(`no answer in ${KV_PROBE_TIMEOUT_MS} ms`),
        KV_PROBE_TIMEOUT_MS,
      );
    });
    return await Promise.race([
      kv.get(keys.readinessProbe()).then(() => "ok"),
      timeout,
    ]);
  } catch (error) {
    log({
      level: "error",
      event: "readiness_kv_failed",
      error: String((error as Error)?.message ?? error),
    });
    return "error";
  } finally {
    clearTimeout(timer);
  }
}

/**
 * GET /metrics: Prometheus text format, for operators only. Without METRICS_TOKEN the endpoint does
 * not exist (404, so a deployment that forgot the token exposes nothing); with it, a request without
 * `Authorization: Bearer <METRICS_TOKEN>` gets 401. Under several workers on one port, whichever
 * answers adds what the others counted (`siblings`), so every scrape sees the whole process.
 */
export function metricsEndpoint(
  deps: {
    kv: Deno.Kv;
    metrics: ServiceMetrics;
    token: string | undefined;
    siblings?: () => Promise<MetricsSnapshot[]>;
  },
) {
  return async (c: Context<Env>) => {
    if (!deps.token) return c.notFound();
    const token = bearerToken(c);
    if (token === null || !timingSafeEqualStrings(token, deps.token)) {
      c.header("WWW-Authenticate", 'Bearer realm="metrics"');
      return c.text("Unauthorized: send Authorization: Bearer <METRICS_TOKEN>.\n", 401);
    }
    c.header("Cache-Control", "no-store");
    c.header("Content-Type", PROMETHEUS_CONTENT_TYPE);
    const others = await deps.siblings?.() ?? [];
    return c.body(await deps.metrics.scrape(deps.kv, Date.now(), others));
  };
}
