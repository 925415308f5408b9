import { createApp } from "./app.ts";
import { CatalogError, loadCatalogFile } from "./lib/catalog.ts";
import { ConfigError, loadConfig } from "./lib/config.ts";
import { openKv } from "./lib/kv.ts";
import { jsonLogger } from "./lib/log.ts";
import { sweepExpiredReservations } from "./lib/sweeper.ts";

/** How long in-flight requests may take to finish after SIGTERM/SIGINT before we exit anyway. */
const SHUTDOWN_GRACE_MS = 10_000;

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
  const { app, wallets, payments } = createApp({
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

  const sweep = async () => {
    try {
      const released = await sweepExpiredReservations(kv, wallets);
      if (released > 0) jsonLogger({ event: "reservations_swept", released });
    } catch (error) {
      jsonLogger({ level: "error", event: "sweep_failed", error: String(error) });
    }
  };
  // Deno Deploy runs the cron; a long-lived process also sweeps on its own, often enough for short TTLs.
  Deno.cron("sweep expired reservations", "* * * * *", sweep);
  const sweepEveryMs = Math.min(60_000, Math.max(1_000, (config.reservationTtlSeconds * 1000) / 4));
  const sweeper = setInterval(sweep, sweepEveryMs);
  await sweep();

  const server = Deno.serve({
    port: config.port,
    onListen: ({ port }) => {
      jsonLogger({
        event: "listening",
        port,
        url: config.publicUrl,
        kv: config.kvPath ?? "default",
        models: catalog.models.length,
        payments,
      });
    },
  }, app.fetch);

  const shutdown = async () => {
    jsonLogger({ event: "shutting_down" });
    clearInterval(sweeper);
    const timeout = new Promise((r) => setTimeout(r, SHUTDOWN_GRACE_MS));
    await Promise.race([server.shutdown(), timeout]);
    await Promise.race([wallets.drain(), timeout]);
    kv.close();
    Deno.exit(0);
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(signal, shutdown);
}

if (import.meta.main) await main();
