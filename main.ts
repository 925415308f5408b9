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
  const { app, wallets } = createApp({ kv, config, catalog, log: jsonLogger });

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
      });
    },
  }, app.fetch);

  const shutdown = async () => {
    jsonLogger({ event: "shutting_down" });
    clearInterval(sweeper);
    const timeout = new Promise((r) => setTimeout(r, SHUTDOWN_GRACE_MS));
    await Promise.race([server.shutdown(), timeout]);
    await Promise.race([wallets.drain(), timeout]);
    jsonLogger({ event: "wallet_stats", ...wallets.stats });
    kv.close();
    Deno.exit(0);
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(signal, shutdown);
  // `kill -USR1 <pid>` logs the wallet's commit and conflict counters (read by `deno task bench`).
  Deno.addSignalListener("SIGUSR1", () => jsonLogger({ event: "wallet_stats", ...wallets.stats }));
}

if (import.meta.main) await main();
