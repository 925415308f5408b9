/// <reference lib="deno.worker" />
/**
 * One of several workers serving the port (SERVE_WORKERS, lib/ops/workers.ts): a whole service on
 * this thread, started and stopped by main.ts's supervisor.
 */
import { catalogFromFile } from "@/lib/catalog/mod.ts";
import { KvOpenError, loadConfig } from "@/lib/core/mod.ts";
import { CommitLocks } from "@/lib/billing/mod.ts";
import { type FromWorker, LoadBoard, type MetricsSnapshot, type ToWorker } from "@/lib/ops/mod.ts";
import { ListenError, type RunningService, startService } from "./service.ts";

let service: RunningService | null = null;
let nextId = 0;
const waitingSiblings = new Map<number, (snapshots: MetricsSnapshot[]) => void>();
const send = (message: FromWorker) => self.postMessage(message);

/** Asks the supervisor for what the other workers counted. */
function siblingMetrics(): Promise<MetricsSnapshot[]> {
  const id = nextId++;
  return new Promise((resolve) => {
    waitingSiblings.set(id, resolve);
    send({ type: "siblings", id });
  });
}

self.onmessage = async (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  switch (message.type) {
    case "start": {
      // The supervisor checked both already; a failure here reaches it as this worker's error.
      const config = { ...loadConfig(Deno.env.toObject()), port: message.port };
      const catalog = catalogFromFile(config.modelsFile, message.catalogSource, config.env);
      service = await startService({
        config,
        catalog,
        devServer: message.devServer,
        reusePort: true,
        worker: message.index,
        siblingMetrics,
        commitLocks: new CommitLocks(message.commitLocks, message.index),
        loadBoard: new LoadBoard(message.loadBoard),
        onListen: (port) => send({ type: "listening", port }),
      }).catch((error) => {
        // Told as it is: thrown, it would reach the supervisor with a stack trace on stderr.
        if (!(error instanceof KvOpenError || error instanceof ListenError)) throw error;
        send({ type: "failed", reason: error.message });
        return null;
      });
      return;
    }
    case "stop":
      await service?.stop(message.signal);
      send({ type: "stopped" });
      return;
    case "snapshot":
      send({ type: "snapshot", id: message.id, snapshot: service?.metricsSnapshot() ?? {} });
      return;
    case "siblings":
      waitingSiblings.get(message.id)?.(message.snapshots);
      waitingSiblings.delete(message.id);
      return;
  }
};
