/**
 * Several workers serving one port from one process: each is a thread with its own isolate,
 * event loop and KV handle, listening with SO_REUSEPORT so that the kernel spreads connections
 * among them. One JavaScript thread is what bounds a Deno server's throughput; workers let one
 * instance use every core. Money stays exact across them for the same reason it does across
 * instances: every wallet write is a checked KV commit (slices are per worker).
 *
 * The main thread only supervises: it starts the workers, restarts one that fails, relays the
 * metric snapshots a /metrics scrape adds up, and stops them all on a signal. The workers share two
 * things in memory: the commit locks, and the board of busy shares by which a light load's
 * connections are gathered on the first worker (connection_steering.ts).
 */
import { CommitLocks } from "@/lib/billing/mod.ts";
import { type Logger, within } from "@/lib/core/mod.ts";
import { LoadBoard } from "./connection_steering.ts";
import type { MetricsSnapshot } from "./metrics.ts";

/** Beyond this many workers on one KV file, their commits queue behind each other's. */
const MAX_AUTO_WORKERS = 16;
/** How long a scrape waits for the other workers' snapshots before using their last ones. */
const SNAPSHOT_WAIT_MS = 1_000;
/**
 * A worker that failed after the pool served is started again after this pause, doubled per
 * failure in a row (a restart that fails before it listens counts), up to the maximum.
 */
const RESTART_DELAY_MS = 1_000;
const MAX_RESTART_DELAY_MS = 30_000;

/** Supervisor to worker. */
export type ToWorker =
  | {
    type: "start";
    index: number;
    devServer: boolean;
    port: number;
    /** The workers' shared commit locks (CommitLocks). */
    commitLocks: SharedArrayBuffer;
    /** The workers' busy shares (LoadBoard), by which they steer connections. */
    loadBoard: SharedArrayBuffer;
    /**
     * The catalog file's content as the process read and checked it at start: a worker restarted
     * later serves the same catalog as its siblings, whatever the file says by then.
     */
    catalogSource: unknown;
  }
  | { type: "stop"; signal: string }
  | { type: "snapshot"; id: number }
  | { type: "siblings"; id: number; snapshots: MetricsSnapshot[] };

/** Worker to supervisor. */
export type FromWorker =
  | { type: "listening"; port: number }
  | { type: "stopped" }
  /** It cannot serve for a reason the operator must fix (the KV store, the port). */
  | { type: "failed"; reason: string }
  | { type: "snapshot"; id: number; snapshot: MetricsSnapshot }
  | { type: "siblings"; id: number };

/**
 * How many workers to run. `auto`: one per core (at most 16) where the kernel balances one port
 * among listeners (Linux); one under `--dev`, on other systems, on Deno Deploy (which runs
 * isolates itself) and with an in-memory KV (workers would each get their own).
 */
export function serveWorkerCount(
  setting: number | "auto",
  where: { devServer: boolean; os: string; cores: number; deploy: boolean; kvPath?: string },
): number {
  if (where.kvPath === ":memory:") return 1;
  if (setting !== "auto") return setting;
  if (where.devServer || where.os !== "linux" || where.deploy) return 1;
  return Math.max(1, Math.min(where.cores, MAX_AUTO_WORKERS));
}

interface Slot {
  index: number;
  worker: Worker | null;
  listening: boolean;
  /** The last snapshot it sent: used when it is slow to answer, so counters never go down. */
  lastSnapshot: MetricsSnapshot | null;
  stopped: PromiseWithResolvers<void> | null;
  /** Failures since it last listened: the restart delay doubles with each. */
  failures: number;
}

export class WorkerPool {
  readonly #slots: Slot[];
  readonly #entry: URL;
  readonly #devServer: boolean;
  readonly #log: Logger;
  readonly #catalogSource: unknown;
  #stopping = false;
  #port = 0;
  #othersStarted = false;
  #nextId = 0;
  readonly #waiting = new Map<number, (snapshot: MetricsSnapshot) => void>();
  #started = Promise.withResolvers<void>();
  readonly #commitLocks = CommitLocks.memory();
  readonly #loadBoard: LoadBoard;
  /** Every worker listened once: from then on a failed worker is restarted, never the start failed. */
  #serving = false;

  constructor(
    options: { count: number; entry: URL; devServer: boolean; log: Logger; catalogSource: unknown },
  ) {
    this.#entry = options.entry;
    this.#catalogSource = options.catalogSource;
    this.#devServer = options.devServer;
    this.#log = options.log;
    this.#loadBoard = new LoadBoard(LoadBoard.memory(options.count));
    this.#slots = Array.from({ length: options.count }, (_, index) => ({
      index,
      worker: null,
      listening: false,
      lastSnapshot: null,
      stopped: null,
      failures: 0,
    }));
  }

  /**
   * Starts the first worker, then the others on the port it took (PORT=0 picks one); rejects if
   * one fails before it listens (a bad start would only repeat). The workers share the port by
   * SO_REUSEPORT, which would let any other process share it too: unless `sharedPort`, the port
   * must be free first, so that a second instance (an old one, or one on another KV file) is
   * refused rather than handed part of the traffic.
   */
  start(port: number, { sharedPort = false } = {}): Promise<void> {
    if (!sharedPort && port !== 0) assertPortFree(port);
    this.#port = port;
    this.#spawn(this.#slots[0]);
    return this.#started.promise;
  }

  /** Asks every worker to drain and stop; resolves when all have, or after `deadlineMs`. */
  async stop(signal: string, deadlineMs: number): Promise<boolean> {
    this.#stopping = true;
    const live = this.#slots.filter((s) => s.worker);
    for (const slot of live) {
      slot.stopped = Promise.withResolvers<void>();
      this.#post(slot, { type: "stop", signal });
    }
    const finished = await within(Promise.all(live.map((s) => s.stopped!.promise)), deadlineMs);
    for (const slot of this.#slots) {
      slot.worker?.terminate();
      slot.worker = null;
    }
    return finished;
  }

  #spawn(slot: Slot) {
    const worker = new Worker(this.#entry, { type: "module", name: `worker-${slot.index}` });
    slot.worker = worker;
    slot.listening = false;
    slot.lastSnapshot = null;
    worker.onmessage = (event: MessageEvent<FromWorker>) => this.#receive(slot, event.data);
    worker.onerror = (event) => {
      // Handled here, or the error would end the whole process and every other worker's requests.
      event.preventDefault();
      this.#failed(slot, worker, event.message);
    };
    worker.onmessageerror = () => this.#failed(slot, worker, "unreadable message");
    this.#post(slot, {
      type: "start",
      index: slot.index,
      devServer: this.#devServer,
      port: this.#port,
      commitLocks: this.#commitLocks,
      loadBoard: this.#loadBoard.buffer,
      catalogSource: this.#catalogSource,
    });
  }

  #failed(slot: Slot, worker: Worker, reason: string) {
    if (slot.worker !== worker) return;
    worker.terminate();
    slot.worker = null;
    // A commit it was making ends with its thread: its turn must not block the others.
    CommitLocks.releaseOwner(this.#commitLocks, slot.index);
    // Its siblings stop steering connections towards it with their next response, not once its
    // share is stale.
    this.#loadBoard.clear(slot.index);
    slot.stopped?.resolve();
    this.#log({ level: "error", event: "worker_failed", worker: slot.index, error: reason });
    if (!this.#serving) {
      this.#started.reject(new Error(`worker ${slot.index} failed before it listened: ${reason}`));
      return;
    }
    if (this.#stopping) return;
    const delay = Math.min(MAX_RESTART_DELAY_MS, RESTART_DELAY_MS * 2 ** slot.failures++);
    setTimeout(() => {
      if (this.#stopping || slot.worker !== null) return;
      // Again: a thread that outlived terminate() a moment may have taken one since.
      CommitLocks.releaseOwner(this.#commitLocks, slot.index);
      this.#spawn(slot);
    }, delay);
  }

  #receive(slot: Slot, message: FromWorker) {
    switch (message.type) {
      case "listening":
        slot.listening = true;
        if (slot.index === 0 && !this.#othersStarted) {
          this.#othersStarted = true;
          this.#port = message.port;
          for (const other of this.#slots.slice(1)) this.#spawn(other);
        }
        slot.failures = 0;
        if (!this.#serving && this.#slots.every((s) => s.listening)) {
          this.#serving = true;
          this.#started.resolve();
        }
        return;
      case "stopped":
        slot.stopped?.resolve();
        return;
      case "failed":
        if (slot.worker) this.#failed(slot, slot.worker, message.reason);
        return;
      case "snapshot":
        slot.lastSnapshot = message.snapshot;
        this.#waiting.get(message.id)?.(message.snapshot);
        return;
      case "siblings":
        this.#siblingsOf(slot).then((snapshots) =>
          this.#post(slot, { type: "siblings", id: message.id, snapshots })
        );
        return;
    }
  }

  /** The other workers' metric snapshots: fresh ones, or the last one of a worker slow to answer. */
  #siblingsOf(asking: Slot): Promise<MetricsSnapshot[]> {
    const others = this.#slots.filter((s) => s !== asking && s.worker);
    return Promise.all(others.map((slot) => {
      const id = this.#nextId++;
      return new Promise<MetricsSnapshot>((resolve) => {
        const timer = setTimeout(() => done(slot.lastSnapshot ?? {}), SNAPSHOT_WAIT_MS);
        const done = (snapshot: MetricsSnapshot) => {
          clearTimeout(timer);
          this.#waiting.delete(id);
          resolve(snapshot);
        };
        this.#waiting.set(id, done);
        this.#post(slot, { type: "snapshot", id });
      });
    }));
  }

  #post(slot: Slot, message: ToWorker) {
    slot.worker?.postMessage(message);
  }
}

/** Throws unless the port can be bound alone: a listener of any other process holds it. */
function assertPortFree(port: number) {
  let probe: Deno.Listener;
  try {
    probe = Deno.listen({ port });
  } catch (error) {
    if (!(error instanceof Deno.errors.AddrInUse)) throw error;
    throw new Error(
      `port ${port} is already in use by another process; set REUSE_PORT=on to share it on purpose`,
    );
  }
  probe.close();
}
