/**
 * One interval for many watched things (calls waiting on an upstream, streams whose client may
 * stall, bodies read to their end), rather than a timer per thing: at a moderate pace a timer set
 * per request, or its last tick after the request had ended, was a turn of the event loop each.
 *
 * It runs at the shortest period any watched thing asked for, never keeps the process alive (the
 * things themselves do), and stops at a tick that finds nothing watched, not when the last thing
 * leaves: at a moderate rate the set empties between almost every two requests.
 */
export class Sweep<T> {
  readonly #watched = new Set<T>();
  readonly #visit: (item: T, now: number) => boolean;
  #timer: ReturnType<typeof setInterval> | null = null;
  #everyMs = Infinity;

  /**
   * `visit` checks one item at a tick and returns true when the item is done with (it then leaves
   * the watch); it must not watch the same item again. A visit that throws drops its item only.
   */
  constructor(visit: (item: T, now: number) => boolean) {
    this.#visit = visit;
  }

  /** Watches `item`, checked at least every `periodMs`. */
  watch(item: T, periodMs: number) {
    this.#watched.add(item);
    if (periodMs >= this.#everyMs) return;
    this.#stop();
    this.#timer = setInterval(() => this.#tick(), periodMs);
    Deno.unrefTimer(this.#timer);
    this.#everyMs = periodMs;
  }

  forget(item: T) {
    this.#watched.delete(item);
  }

  has(item: T): boolean {
    return this.#watched.has(item);
  }

  get size(): number {
    return this.#watched.size;
  }

  #tick() {
    const now = Date.now();
    for (const item of this.#watched) {
      let done: boolean;
      try {
        done = this.#visit(item, now);
      } catch (error) {
        // A timer's exception would end the process; one item's must not cost the others.
        console.error("a sweep's check failed", error);
        done = true;
      }
      if (done) this.#watched.delete(item);
    }
    if (this.#watched.size === 0) this.#stop();
  }

  #stop() {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#everyMs = Infinity;
  }
}
