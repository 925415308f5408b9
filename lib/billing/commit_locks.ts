/**
 * Commit locks shared by the workers of one process (SERVE_WORKERS): one wallet's batches commit
 * one worker at a time, and each lock carries a generation that every commit of the wallet bumps.
 *
 * Why: each worker's wallet engine trusts the wallet as its own last commit left it. Two workers
 * committing one wallet (a hot app's slice grants) otherwise meet on its versionstamp: the later
 * commit fails, is retried after a read, and the app is read before every batch for a second. With
 * the lock they take turns, and the generation tells a worker, before it commits, that a sibling
 * wrote the wallet since: it reads afresh instead of failing. Other processes are still caught by
 * the versionstamp check, as before; the lock only saves work, never guards money.
 *
 * Memory: a SharedArrayBuffer of `slots` pairs (lock word, generation); an app maps to a slot by
 * hash, so two apps may share one (a needless wait or read, never a wrong decision). A lock word
 * holds its owner's number plus one, so the supervisor can free what a dead worker held.
 */

/** How long a commit waits for its turn before it goes ahead unlocked (the check still guards it). */
const WAIT_MS = 2_000;
const DEFAULT_SLOTS = 1_024;

export interface CommitTurn {
  /** The wallet's generation when the turn began: equal to the one remembered, memory is fresh. */
  readonly generation: number;
  /** Ends the turn; `committed` bumps the generation and returns the new one. */
  end(committed: boolean): number;
}

export class CommitLocks {
  readonly #words: Int32Array;
  readonly #slots: number;
  readonly #owner: number;
  readonly #waitMs: number;
  /** Turns that waited past WAIT_MS and went ahead unlocked. */
  timeouts = 0;

  /** The shared memory for `slots` wallets (a power of two), made by the supervisor. */
  static memory(slots = DEFAULT_SLOTS): SharedArrayBuffer {
    return new SharedArrayBuffer(slots * 2 * Int32Array.BYTES_PER_ELEMENT);
  }

  /** Frees every lock a dead worker held; its half-done commit is settled by the checks. */
  static releaseOwner(memory: SharedArrayBuffer, owner: number) {
    const words = new Int32Array(memory);
    for (let i = 0; i < words.length; i += 2) {
      if (Atomics.compareExchange(words, i, owner + 1, 0) === owner + 1) Atomics.notify(words, i);
    }
  }

  constructor(memory: SharedArrayBuffer, owner: number, options: { waitMs?: number } = {}) {
    this.#words = new Int32Array(memory);
    this.#slots = this.#words.length / 2;
    this.#owner = owner + 1;
    this.#waitMs = options.waitMs ?? WAIT_MS;
  }

  async begin(appId: string): Promise<CommitTurn> {
    const lock = (hash(appId) & (this.#slots - 1)) * 2;
    const words = this.#words;
    const deadline = performance.now() + this.#waitMs;
    let held = true;
    for (;;) {
      const current = Atomics.compareExchange(words, lock, 0, this.#owner);
      if (current === 0) break;
      const left = deadline - performance.now();
      if (left <= 0) {
        held = false;
        this.timeouts++;
        break;
      }
      // V8 resolves the wait outside Deno's event loop: a timer keeps the loop alive meanwhile,
      // and a little past V8's own timeout, which is delivered after it.
      const wait = Atomics.waitAsync(words, lock, current, left);
      if (wait.async) {
        const keepAlive = setTimeout(() => {}, left + 100);
        await wait.value;
        clearTimeout(keepAlive);
      }
    }
    const generation = Atomics.load(words, lock + 1);
    return {
      generation,
      end: (committed) => {
        const next = committed ? Atomics.add(words, lock + 1, 1) + 1 : generation;
        if (held && Atomics.compareExchange(words, lock, this.#owner, 0) === this.#owner) {
          Atomics.notify(words, lock, 1);
        }
        return next;
      },
    };
  }
}

/** FNV-1a: cheap and spread enough for ids. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
