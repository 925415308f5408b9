/**
 * Connection steering between the workers of one process (SERVE_WORKERS): while the whole process
 * is lightly loaded, every worker but the first closes its keep-alive connections (a response with
 * `Connection: close`), so that the clients' reconnections gather on the first worker; when that
 * worker gets busy while another has room, it closes some of its own, and the kernel spreads the
 * reconnections among all the listeners again.
 *
 * Why: SO_REUSEPORT hands each new connection to a listener by hash, so a moderate load's few
 * keep-alive connections usually split between the workers. Each worker then sleeps between its
 * requests twice as long and runs them with colder caches: on the 2-core development machine two
 * workers whose connections split cost 0.75–0.83 ms of CPU per request at 500 req/s where all on
 * one cost 0.66 (a one-worker build 0.60–0.71; docs/speed.md). Under load every worker is needed, and nothing is closed.
 * This is what nginx's accept mutex did for its workers, done with the connections themselves.
 *
 * Each worker samples its own thread's CPU time every SAMPLE_MS and writes its busy share (CPU
 * time per wall time, 1 = a whole core) to a board in shared memory; each reads the others' from
 * it. A share older than STALE_MS (a worker stopped, hung or restarting) counts as absent: nobody
 * steers connections towards a first worker that is not there. Closing is rationed, one response
 * per SHED_EVERY_MS per worker, so that a load that starts while the process is idle moves at most
 * a few connections before the next sample sees it. A closed connection costs its client one
 * reconnection; an HTTP/2 connection ignores the header (Deno drops it), and stays where it is.
 * A request that asks for `Connection: close` is not marked, nor counted; an HTTP/1.0 request that
 * does not ask (its connection closes all the same) is, since Deno does not tell a request's
 * version.
 */

/** How often a worker samples its thread's CPU time. */
const SAMPLE_MS = 250;
/** A share older than this is a worker that no longer samples. */
const STALE_MS = 1_500;
/** The workers' shares summed below this: the first worker alone can serve it all. */
export const GATHER_BELOW = 0.6;
/** The first worker's share above this, while another's is below half of it: spread. */
export const SPREAD_ABOVE = 0.8;
/** At most one connection closed per this many milliseconds, per worker. */
const SHED_EVERY_MS = 25;
/** Linux's /proc reports CPU time in USER_HZ ticks, 100 a second on every architecture. */
const TICKS_PER_SECOND = 100;

const WORDS_PER_WORKER = 2;
const SHARE = 0;
/** When the share was written, in milliseconds since the epoch. */
const STAMP = 1;

/**
 * Whether a worker closes the connection of the response it is about to send, given every
 * worker's busy share (null: absent). Only the first worker gathers; the others shed towards it.
 */
export function closesConnections(index: number, shares: readonly (number | null)[]): boolean {
  const first = shares[0];
  if (first === null || first === undefined) return false;
  if (index !== 0) {
    let total = 0;
    for (const share of shares) total += share ?? 0;
    return total < GATHER_BELOW;
  }
  if (first <= SPREAD_ABOVE) return false;
  return shares.some((share, i) => i !== 0 && share !== null && share < SPREAD_ABOVE / 2);
}

/** The workers' busy shares, in memory shared by the workers of one process. */
export class LoadBoard {
  readonly #words: BigInt64Array;
  /** What the supervisor hands each worker. */
  readonly buffer: SharedArrayBuffer;

  constructor(buffer: SharedArrayBuffer) {
    this.buffer = buffer;
    this.#words = new BigInt64Array(buffer);
  }

  static memory(workers: number): SharedArrayBuffer {
    return new SharedArrayBuffer(workers * WORDS_PER_WORKER * BigInt64Array.BYTES_PER_ELEMENT);
  }

  get workers(): number {
    return this.#words.length / WORDS_PER_WORKER;
  }

  write(index: number, share: number, now = Date.now()) {
    Atomics.store(this.#words, index * WORDS_PER_WORKER + SHARE, BigInt(Math.round(share * 1000)));
    Atomics.store(this.#words, index * WORDS_PER_WORKER + STAMP, BigInt(Math.floor(now)));
  }

  /** A worker that stopped: its share is absent at once rather than once stale. */
  clear(index: number) {
    Atomics.store(this.#words, index * WORDS_PER_WORKER + STAMP, 0n);
  }

  /** Whether a worker's share is there: it samples, so it listens. */
  present(index: number, now = Date.now()): boolean {
    return Number(Atomics.load(this.#words, index * WORDS_PER_WORKER + STAMP)) >= now - STALE_MS;
  }

  shares(now = Date.now()): (number | null)[] {
    return Array.from({ length: this.workers }, (_, index) => {
      if (!this.present(index, now)) return null;
      return Number(Atomics.load(this.#words, index * WORDS_PER_WORKER + SHARE)) / 1000;
    });
  }
}

/** The calling thread's CPU time in milliseconds, or null where /proc cannot tell it. */
export function callingThreadCpuMs(): number | null {
  try {
    const stat = Deno.readTextFileSync("/proc/thread-self/stat");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? (ticks * 1000) / TICKS_PER_SECOND : null;
  } catch {
    return null;
  }
}

type Handler = (request: Request, info: Deno.ServeHandlerInfo<Deno.NetAddr>) =>
  | Response
  | Promise<Response>;

/** One worker's side of the steering: samples its thread, and marks the responses that close. */
export class ConnectionSteering {
  readonly #board: LoadBoard;
  readonly #index: number;
  readonly #clock: () => number;
  #timer: ReturnType<typeof setInterval> | undefined;
  #sampledAt = 0;
  #cpuMs = 0;
  #closing = false;
  #closedAt = -Infinity;
  /** Responses this worker has marked to close their connection. */
  markedResponses = 0;

  constructor(
    board: LoadBoard,
    index: number,
    options: {
      /** Milliseconds, for the rationing of closes. */
      clock?: () => number;
    } = {},
  ) {
    this.#board = board;
    this.#index = index;
    this.#clock = options.clock ?? (() => performance.now());
  }

  /** Starts sampling; false (and nothing steered) where the thread's CPU time cannot be read. */
  start(): boolean {
    const cpuMs = callingThreadCpuMs();
    if (cpuMs === null) return false;
    this.#cpuMs = cpuMs;
    this.#sampledAt = performance.now();
    const timer = setInterval(() => this.sample(), SAMPLE_MS);
    Deno.unrefTimer(timer);
    this.#timer = timer;
    return true;
  }

  stop() {
    clearInterval(this.#timer);
    this.#board.clear(this.#index);
    this.#closing = false;
  }

  /** Takes a sample now (the timer's work; tests call it). */
  sample(now = performance.now(), cpuMs = callingThreadCpuMs()) {
    if (cpuMs === null) return;
    const wallMs = now - this.#sampledAt;
    if (wallMs <= 0) return;
    this.#board.write(this.#index, Math.min(1, Math.max(0, (cpuMs - this.#cpuMs) / wallMs)));
    this.#cpuMs = cpuMs;
    this.#sampledAt = now;
    this.#closing = closesConnections(this.#index, this.#board.shares());
  }

  get closing(): boolean {
    return this.#closing;
  }

  /** The handler, with a response now and then marked to close its connection. */
  wrap(handler: Handler): Handler {
    return (request, info) => {
      if (!this.#closing) return handler(request, info);
      const now = this.#clock();
      if (now - this.#closedAt < SHED_EVERY_MS) return handler(request, info);
      // Gathering stops as soon as the first worker is gone from the board, not at the next sample.
      if (this.#index !== 0 && !this.#board.present(0)) return handler(request, info);
      if (request.headers.get("connection")?.toLowerCase().includes("close")) {
        return handler(request, info);
      }
      this.#closedAt = now;
      this.markedResponses++;
      return Promise.resolve(handler(request, info)).then(closingConnection);
    };
  }
}

function closingConnection(response: Response): Response {
  try {
    response.headers.set("connection", "close");
    return response;
  } catch {
    // Immutable headers (a response made by fetch or Response.redirect): a copy carries them.
    const headers = new Headers(response.headers);
    headers.set("connection", "close");
    return new Response(response.body, {
      status: response.status,
      statusText: response.statusText,
      headers,
    });
  }
}
