/**
 * One running Tollbooth: its KV, app, background jobs and HTTP server. main.ts runs one on its own
 * thread, or one per worker (worker.ts) when SERVE_WORKERS asks for several on one port.
 */
import { createApp } from "./app.ts";
import type { Catalog } from "@/lib/catalog/mod.ts";
import { type Config, flushLogs, jsonLogger, openKv, within } from "@/lib/core/mod.ts";
import { type CommitLocks, sweepExpiredReservations } from "@/lib/billing/mod.ts";
import {
  ADMIN_SHARED_SETTINGS,
  ConnectionSteering,
  devBanner,
  type LoadBoard,
  type MetricsSnapshot,
} from "@/lib/ops/mod.ts";

/** How long the wallet may take to commit the settles of finished requests after the grace. */
const FINAL_COMMIT_MS = 2_000;

/** The port cannot be listened on (another process holds it, or it needs privileges). */
export class ListenError extends Error {}

export interface ServiceOptions {
  config: Config;
  catalog: Catalog;
  devServer: boolean;
  /** Several listeners on one port (workers): the kernel balances connections among them. */
  reusePort: boolean;
  /** Added to every `wallet_stats` line, so that lines of several workers can be told apart. */
  worker?: number;
  /** What the other workers counted, for a scrape of /metrics that any worker may answer. */
  siblingMetrics?: () => Promise<MetricsSnapshot[]>;
  /** Shared with the other workers on this port: one wallet's commits take turns. */
  commitLocks?: CommitLocks;
  /** Shared with the other workers on this port: their busy shares, to steer connections by. */
  loadBoard?: LoadBoard;
  onListen?: (port: number) => void;
}

export interface RunningService {
  /** Sweeps expired reservations (the cron calls it). */
  sweep(): Promise<void>;
  /** This service's own metric values, for a sibling's scrape. */
  metricsSnapshot(): MetricsSnapshot;
  /**
   * Stops accepting connections, lets in-flight requests (streams included) finish and settle for
   * at most SHUTDOWN_GRACE_MS, commits the wallet and closes KV. A request still running at the
   * deadline is cut: its reservation stays in KV with its lease, and the sweeper of any instance
   * releases it once the lease runs out.
   */
  stop(signal: string): Promise<void>;
}

export async function startService(options: ServiceOptions): Promise<RunningService> {
  const { config, catalog, devServer } = options;
  const kv = await openKv(config.kvPath);
  const { app, wallets, payments, webhooks, metrics, startDraining } = createApp({
    kv,
    config,
    catalog,
    log: jsonLogger,
    devServer,
    siblingMetrics: options.siblingMetrics,
    commitLocks: options.commitLocks,
  });
  const workerField = options.worker === undefined ? {} : { worker: options.worker };
  // One worker of a process runs the jobs that scan the whole KV (any instance may, so a single
  // one suffices per process); if it fails, its restart takes them up again.
  const background = options.worker === undefined || options.worker === 0;
  if (background) warnAboutPayments(payments);

  const sweep = async () => {
    try {
      const released = await sweepExpiredReservations(kv, wallets);
      if (released > 0) jsonLogger({ event: "reservations_swept", released, ...workerField });
    } catch (error) {
      jsonLogger({ level: "error", event: "sweep_failed", error: String(error) });
    }
  };
  // A long-lived process also sweeps on its own, often enough for short TTLs.
  const sweepEveryMs = Math.min(60_000, Math.max(1_000, (config.reservationTtlSeconds * 1000) / 4));
  const sweeper = background ? setInterval(sweep, sweepEveryMs) : undefined;
  if (background) await sweep();
  // It also delivers due webhook events (leased, so never two at once) and looks over every app
  // with webhooks now and then, for what a crashed process detected but never queued.
  if (background) webhooks.deliverer.start(1_000);
  const webhookSweep = background
    ? setInterval(() => {
      webhooks.watcher.sweep().catch((error) =>
        jsonLogger({ level: "error", event: "webhook_sweep_failed", error: String(error) })
      );
    }, 60_000)
    : undefined;
  const statsLog = config.walletStatsLogMs
    ? setInterval(
      () => jsonLogger({ event: "wallet_stats", ...workerField, ...wallets.stats }),
      config.walletStatsLogMs,
    )
    : undefined;

  const steering = config.connectionSteering && options.loadBoard &&
      options.loadBoard.workers > 1 && options.worker !== undefined
    ? new ConnectionSteering(options.loadBoard, options.worker)
    : null;

  // Once per process: workers share the file, and the first one speaks for it.
  if (background) {
    for (const message of catalog.warnings ?? []) {
      jsonLogger({ level: "warn", event: "catalog_warning", message });
    }
  }
  const server = listen({
    port: config.port,
    reusePort: options.reusePort,
    onListen: ({ port }) => {
      jsonLogger({
        event: "listening",
        port,
        url: config.publicUrl,
        kv: config.kvPath ?? "default",
        models: catalog.models.length,
        payments,
        ...workerField,
      });
      if (devServer) {
        const baseUrl = config.env.PUBLIC_URL ? config.publicUrl : `http://localhost:${port}`;
        const shared = Object.fromEntries(
          ADMIN_SHARED_SETTINGS.flatMap((name) => {
            const value = config.env[name];
            return value === undefined ? [] : [[name, value]];
          }),
        );
        console.error(devBanner({ baseUrl, catalog, testCheckout: payments === "dev", shared }));
      }
      // Only a worker that listens may have connections steered towards it.
      if (steering?.start()) metrics.countSteeredConnections(() => steering.markedResponses);
      options.onListen?.(port);
    },
  }, steering ? steering.wrap(app.fetch) : app.fetch);

  return {
    sweep,
    metricsSnapshot: () => metrics.snapshot(),
    async stop(signal) {
      const started = performance.now();
      jsonLogger({
        event: "shutting_down",
        signal,
        graceMs: config.shutdownGraceMs,
        ...workerField,
      });
      startDraining();
      steering?.stop();
      clearInterval(sweeper);
      clearInterval(webhookSweep);
      clearInterval(statsLog);
      const drained = await within(server.shutdown(), config.shutdownGraceMs);
      const committed = await within(wallets.drainForExit(), FINAL_COMMIT_MS);
      await within(
        Promise.all([webhooks.deliverer.stop(), webhooks.watcher.idle()]),
        FINAL_COMMIT_MS,
      );
      // The requests' own lines (written with the next batch of lines) come before the last words.
      flushLogs();
      jsonLogger({
        event: "shut_down",
        inFlightFinished: drained,
        walletCommitted: committed,
        // Micro-USD of answered charges whose commit failed and that wait for a retry: lost now.
        chargesPending: wallets.pendingCharges,
        ms: Math.round(performance.now() - started),
        ...workerField,
      });
      jsonLogger({ event: "wallet_stats", ...workerField, ...wallets.stats });
      kv.close();
      flushLogs();
    },
  };
}

function listen(
  options: Deno.ServeTcpOptions,
  handler: Deno.ServeHandler<Deno.NetAddr>,
): Deno.HttpServer<Deno.NetAddr> {
  try {
    return Deno.serve(options, handler);
  } catch (error) {
    throw new ListenError(
      `PORT ${options.port} cannot be listened on: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
}

function warnAboutPayments(payments: string) {
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
}
