import { CatalogError, catalogFromFile, readCatalogFile } from "@/lib/catalog/mod.ts";
import { ConfigError, flushLogs, jsonLogger, KvOpenError, loadConfig } from "@/lib/core/mod.ts";
import { serveWorkerCount, WorkerPool } from "@/lib/ops/mod.ts";
import { ListenError, type RunningService, startService } from "./service.ts";

/** Set once the service runs on this thread; the cron below calls it. */
let sweep: (() => Promise<void>) | null = null;

// Deno Deploy only registers crons defined at the top level of the entry module, before serving.
// Under workers (SERVE_WORKERS) the first one sweeps on its own timer; the cron is for one thread.
Deno.cron("sweep expired reservations", "* * * * *", async () => {
  await sweep?.();
});

/** How long the workers may take after the grace to commit their wallets and close. */
const WORKER_STOP_MARGIN_MS = 5_000;

async function main() {
  let config, catalog, catalogSource;
  try {
    config = loadConfig(Deno.env.toObject());
    catalogSource = await readCatalogFile(config.modelsFile);
    catalog = catalogFromFile(config.modelsFile, catalogSource, config.env);
  } catch (error) {
    if (error instanceof ConfigError || error instanceof CatalogError) {
      console.error(`Tollbooth cannot start: ${error.message}`);
      Deno.exit(1);
    }
    throw error;
  }
  const devServer = Deno.args.includes("--dev");
  const workers = serveWorkerCount(config.serveWorkers, {
    devServer,
    os: Deno.build.os,
    cores: navigator.hardwareConcurrency,
    deploy: Deno.env.get("DENO_DEPLOYMENT_ID") !== undefined,
    kvPath: config.kvPath,
  });

  let shuttingDown = false;
  /** How this process stops its service, once it has started one. */
  const stopper = Promise.withResolvers<(signal: Deno.Signal) => Promise<void>>();
  /**
   * Stop accepting connections, let in-flight requests (streams included) finish and settle for at
   * most SHUTDOWN_GRACE_MS, then exit 0 (service.ts). A second signal exits at once; a signal that
   * comes while the service starts stops it as soon as it has.
   */
  const shutdown = async (signal: Deno.Signal) => {
    if (shuttingDown) {
      jsonLogger({ level: "warn", event: "shutdown_forced", signal });
      flushLogs();
      Deno.exit(1);
    }
    shuttingDown = true;
    const stop = await stopper.promise;
    await stop(signal);
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

  if (workers === 1) {
    let service: RunningService;
    try {
      service = await startService({ config, catalog, devServer, reusePort: config.reusePort });
    } catch (error) {
      if (!(error instanceof KvOpenError || error instanceof ListenError)) throw error;
      console.error(`Tollbooth cannot start: ${error.message}`);
      flushLogs();
      Deno.exit(1);
    }
    sweep = service.sweep;
    stopper.resolve((signal) => service.stop(signal));
  } else {
    const pool = new WorkerPool({
      count: workers,
      entry: new URL("./worker.ts", import.meta.url),
      devServer,
      log: jsonLogger,
      catalogSource,
    });
    try {
      await pool.start(config.port, { sharedPort: config.reusePort });
    } catch (error) {
      console.error(`Tollbooth cannot start: ${(error as Error).message}`);
      await pool.stop("startup_failed", WORKER_STOP_MARGIN_MS);
      flushLogs();
      Deno.exit(1);
    }
    jsonLogger({ event: "workers_listening", workers, port: config.port });
    stopper.resolve(async (signal) => {
      const stopped = await pool.stop(signal, config.shutdownGraceMs + WORKER_STOP_MARGIN_MS);
      if (!stopped) jsonLogger({ level: "warn", event: "workers_stop_late", signal });
    });
  }
  // Never on SIGUSR1: Deno opens its inspector on that signal, which then taxes every request.
}

if (import.meta.main) await main();
