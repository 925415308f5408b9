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
 * Memory: a SharedArrayBuffer of `slots` records (lock word, generation, waiting workers, last
 * handed to, streak); an app maps to a slot by hash, so two apps may share one (a needless wait or
 * read, never a wrong decision). The lock word holds its owner's index plus one. A worker that
 * wants a held lock sets its bit among the waiting. On release with others waiting, the holder
 * frees the lock, and its next batch, ready at once, usually takes it again without waiting for
 * another thread to wake; after MAX_STREAK such releases in a row (by any holders) the lock is
 * handed to the next waiting worker after the one it was last handed to, round robin, so every
 * waiter gets it within a bounded number of turns. Inside a worker, turns on one slot queue in
 * order, so only one of them competes with the other workers. A lock whose holders make no
 * progress for `waitMs` (its holder died or hangs) is taken over; the supervisor also frees what a
 * dead worker held.
 */

import { MAX_SERVE_WORKERS } from "@/lib/core/mod.ts";

/** How long one holder may keep a lock that others wait for before it is taken over. */
const WAIT_MS = 2_000;
const DEFAULT_SLOTS = 1_024;
const WORDS_PER_SLOT = 5;
const LOCK = 0;
const GENERATION = 1;
const WAITING = 2;
/** The worker the lock was last handed to (index plus one): where the round robin goes on. */
const LAST_HOLDER = 3;
const STREAK = 4;
/**
 * Turns a worker may take in a row while others wait. Each handover wakes another thread (tens of
 * µs idle, a millisecond on a busy machine) while nobody commits; strict turns made the per-request
 * path's p50 at 500 req/s on two workers 25 ms against 4–18 ms when the holder could keep it.
 */
const MAX_STREAK = 4;

interface CommitTurn {
  /** The wallet's generation when the turn began: equal to the one remembered, memory is fresh. */
  readonly generation: number;
  /**
   * Ends the turn; `committed` (or possibly committed) bumps the generation. Returns the
   * generation this turn's commit left, or -1 when another's bump is in it too (memory stale).
   */
  end(committed: boolean): number;
}

export class CommitLocks {
  readonly #words: Int32Array;
  readonly #slots: number;
  readonly #index: number;
  readonly #waitMs: number;
  /** Per slot: the last of this worker's turns on it, which the next one waits for. */
  readonly #queued = new Map<number, Promise<void>>();
  /** Locks taken over from a holder that kept them past `waitMs`. */
  takenOver = 0;

  /** The shared memory for `slots` wallets (a power of two), made by the supervisor. */
  static memory(slots = DEFAULT_SLOTS): SharedArrayBuffer {
    return new SharedArrayBuffer(slots * WORDS_PER_SLOT * Int32Array.BYTES_PER_ELEMENT);
  }

  /** Frees every lock a dead worker held and forgets it among the waiting. */
  static releaseOwner(memory: SharedArrayBuffer, index: number) {
    const words = new Int32Array(memory);
    for (let base = 0; base < words.length; base += WORDS_PER_SLOT) {
      Atomics.and(words, base + WAITING, ~(1 << index));
      if (Atomics.compareExchange(words, base + LOCK, index + 1, 0) === index + 1) {
        Atomics.notify(words, base + LOCK);
      }
    }
  }

  constructor(memory: SharedArrayBuffer, index: number, options: { waitMs?: number } = {}) {
    if (!Number.isInteger(index) || index < 0 || index >= MAX_SERVE_WORKERS) {
      throw new RangeError(`a commit lock owner is 0 to ${MAX_SERVE_WORKERS - 1}, got ${index}`);
    }
    this.#words = new Int32Array(memory);
    this.#slots = this.#words.length / WORDS_PER_SLOT;
    this.#index = index;
    this.#waitMs = options.waitMs ?? WAIT_MS;
  }

  /** A turn must be ended: the next turns of this worker on its slot wait for it. */
  async begin(appId: string): Promise<CommitTurn> {
    const slot = hash(appId) & (this.#slots - 1);
    const base = slot * WORDS_PER_SLOT;
    const previous = this.#queued.get(slot);
    const mine = Promise.withResolvers<void>();
    this.#queued.set(slot, mine.promise);
    const leave = () => {
      mine.resolve();
      if (this.#queued.get(slot) === mine.promise) this.#queued.delete(slot);
    };
    if (previous) await previous;
    try {
      await this.#acquire(base);
    } catch (error) {
      // Handed over in the moment before it failed: passed on, or freed.
      this.#release(base);
      leave();
      throw error;
    }
    const words = this.#words;
    const generation = Atomics.load(words, base + GENERATION);
    let ended = false;
    return {
      generation,
      end: (committed) => {
        if (ended) throw new Error("a commit turn ends once");
        ended = true;
        let next = generation;
        if (committed) {
          const before = Atomics.add(words, base + GENERATION, 1);
          next = before === generation ? (before + 1) | 0 : -1;
        }
        this.#release(base);
        leave();
        return next;
      },
    };
  }

  async #acquire(base: number) {
    const words = this.#words;
    const me = this.#index + 1;
    if (Atomics.compareExchange(words, base + LOCK, 0, me) !== 0) await this.#wait(base);
  }

  async #wait(base: number) {
    const words = this.#words;
    const me = this.#index + 1;
    const bit = 1 << this.#index;
    Atomics.or(words, base + WAITING, bit);
    try {
      // What shows the lock's holders make progress: who holds it, the commits, the streak.
      let progress = "";
      let heldSince = 0;
      for (;;) {
        const current = Atomics.load(words, base + LOCK);
        if (current === me) return; // handed over
        if (current === 0) {
          if (Atomics.compareExchange(words, base + LOCK, 0, me) === 0) return;
          continue;
        }
        const now = performance.now();
        const seen = `${current}:${Atomics.load(words, base + GENERATION)}:${
          Atomics.load(words, base + STREAK)
        }`;
        if (seen !== progress) {
          progress = seen;
          heldSince = now;
        }
        const left = heldSince + this.#waitMs - now;
        if (left <= 0) {
          // Its holder died or hangs: the lock only saves work (the check guards the money).
          if (Atomics.compareExchange(words, base + LOCK, current, me) === current) {
            this.takenOver++;
            return;
          }
          continue;
        }
        // V8 resolves the wait outside Deno's event loop: a timer keeps the loop alive meanwhile,
        // and a little past V8's own timeout, which is delivered after it.
        const wait = Atomics.waitAsync(words, base + LOCK, current, left);
        if (wait.async) {
          const keepAlive = setTimeout(() => {}, left + 100);
          await wait.value;
          clearTimeout(keepAlive);
        }
      }
    } finally {
      Atomics.and(words, base + WAITING, ~bit);
    }
  }

  /**
   * Frees the lock, or, after MAX_STREAK releases in a row with workers waiting (whoever held the
   * lock), hands it to the next waiting worker after the one it was last handed to.
   */
  #release(base: number) {
    const words = this.#words;
    const me = this.#index + 1;
    // Taken over meanwhile (this turn outlived the wait): the lock is no longer this worker's.
    if (Atomics.load(words, base + LOCK) !== me) return;
    const waiting = Atomics.load(words, base + WAITING) & ~(1 << this.#index);
    let next = 0;
    if (waiting === 0) Atomics.store(words, base + STREAK, 0);
    else if (Atomics.add(words, base + STREAK, 1) + 1 >= MAX_STREAK) {
      const last = Atomics.load(words, base + LAST_HOLDER); // an index plus one, or 0
      const after = last >= 31 ? 0 : waiting & ~((1 << last) - 1);
      const pick = after !== 0 ? after : waiting;
      next = 31 - Math.clz32(pick & -pick) + 1;
      Atomics.store(words, base + STREAK, 0);
      Atomics.store(words, base + LAST_HOLDER, next);
    }
    // Every change is told: a worker may have begun to wait after `waiting` was read.
    if (Atomics.compareExchange(words, base + LOCK, me, next) === me) {
      Atomics.notify(words, base + LOCK);
    }
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
