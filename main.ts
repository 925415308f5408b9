import { createApp } from "./app.ts";
import { CatalogError, loadCatalogFile } from "@/lib/catalog/mod.ts";
import { ConfigError, flushLogs, jsonLogger, loadConfig, openKv } from "@/lib/core/mod.ts";
import { sweepExpiredReservations } from "@/lib/billing/mod.ts";
import { devBanner } from "@/lib/ops/mod.ts";

/** Set once the service runs; the cron below calls it. */
let sweep: (() => Promise<void>) | null = null;

// Deno Deploy only registers crons defined at the top level of the entry module, before serving.
Deno.cron("sweep expired reservations", "* * * * *", async () => {
  await sweep?.();
});

/** How long the wallet may take to commit the settles of finished requests after the grace. */
const FINAL_COMMIT_MS = 2_000;

async function main() {
  let config, catalog;
  try {
    config = loadConfig(Deno.env.toObject());
    catalog = await loadCatalogFile(config.modelsFile, config.env);
  } catch (error) {
    if (error instanceof ConfigError || error instanceof CatalogError) {
      console.error(`Tollbooth cannot start: ${error.message}`);
      Deno.exit(1);
    }
    throw error;
  }
  const kv = await openKv(config.kvPath);
  const devServer = Deno.args.includes("--dev");
  const { app, wallets, payments, webhooks, startDraining } = createApp({
    kv,
    config,
    catalog,
    log: jsonLogger,
    devServer,
  });
  if (payments === "dev") {
    jsonLogger({
      level: "warn",
      event: "test_payments",
      message: "top-ups use the TEST checkout: anyone can add credits without paying",
    });
  } else if (payments === "unavailable") {
    jsonLogger({
      level: "warn",
      event: "payments_unavailable",
      message: "no STRIPE_SECRET_KEY: the top-up pages show purchases as unavailable",
    });
  }

  sweep = async () => {
    try {
      const released = await sweepExpiredReservations(kv, wallets);
      if (released > 0) jsonLogger({ event: "reservations_swept", released });
    } catch (error) {
      jsonLogger({ level: "error", event: "sweep_failed", error: String(error) });
    }
  };
  // A long-lived process also sweeps on its own, often enough for short TTLs.
  const sweepEveryMs = Math.min(60_000, Math.max(1_000, (config.reservationTtlSeconds * 1000) / 4));
  const sweeper = setInterval(() => sweep?.(), sweepEveryMs);
  await sweep();
  // Each process delivers due webhook events (leased, so never two at once) and looks over every
  // app with webhooks now and then, for what a crashed process detected but never queued.
  webhooks.deliverer.start(1_000);
  const webhookSweep = setInterval(() => {
    webhooks.watcher.sweep().catch((error) =>
      jsonLogger({ level: "error", event: "webhook_sweep_failed", error: String(error) })
    );
  }, 60_000);

  const server = Deno.serve({
    port: config.port,
    // Several processes on one port, balanced by the kernel (Linux): one per core on one KV.
    reusePort: config.reusePort,
    onListen: ({ port }) => {
      jsonLogger({
        event: "listening",
        port,
        url: config.publicUrl,
        kv: config.kvPath ?? "default",
        models: catalog.models.length,
        payments,
      });
      if (devServer) {
        const baseUrl = config.env.PUBLIC_URL ? config.publicUrl : `http://localhost:${port}`;
        console.error(devBanner({ baseUrl, catalog, testCheckout: payments === "dev" }));
      }
    },
  }, app.fetch);

  let shuttingDown = false;
  /**
   * Stop accepting connections, let in-flight requests (streams included) finish and settle for at
   * most SHUTDOWN_GRACE_MS, then exit 0. A request still running at the deadline is cut: its
   * reservation stays in KV with its lease, and the sweeper of any instance releases it once the lease runs out.
   */
  const shutdown = async (signal: Deno.Signal) => {
    if (shuttingDown) {
      jsonLogger({ level: "warn", event: "shutdown_forced", signal });
      flushLogs();
      Deno.exit(1);
    }
    shuttingDown = true;
    const started = performance.now();
    jsonLogger({ event: "shutting_down", signal, graceMs: config.shutdownGraceMs });
    startDraining();
    clearInterval(sweeper);
    clearInterval(webhookSweep);
    const drained = await within(server.shutdown(), config.shutdownGraceMs);
    const committed = await within(wallets.drain(), FINAL_COMMIT_MS);
    await within(
      Promise.all([webhooks.deliverer.stop(), webhooks.watcher.idle()]),
      FINAL_COMMIT_MS,
    );
    jsonLogger({
      event: "shut_down",
      inFlightFinished: drained,
      walletCommitted: committed,
      ms: Math.round(performance.now() - started),
    });
    jsonLogger({ event: "wallet_stats", ...wallets.stats });
    kv.close();
    flushLogs();
    Deno.exit(0);
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    try {
      Deno.addSignalListener(signal, () => shutdown(signal));
    } catch {
      // Platforms without signals (Deno Deploy, Windows' SIGTERM) stop the isolate themselves.
    }
  }
  // Not on a signal: Deno opens its inspector on SIGUSR1, which then taxes every request.
  if (config.walletStatsLogMs) {
    setInterval(
      () => jsonLogger({ event: "wallet_stats", ...wallets.stats }),
      config.walletStatsLogMs,
    );
  }
}

/** Whether `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  try {
    return await Promise.race([promise.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

if (import.meta.main) await main();
