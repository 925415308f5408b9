/**
 * Requests per minute of each owner's management API: a leaked or runaway key could otherwise
 * create and revoke API keys (revoked ones are kept) and read reports as fast as it can send. The
 * count is the owner's, not each key's: an owner may hold several management keys, and a count per
 * key would multiply the limit by them.
 *
 * Fixed one-minute windows, one counter per owner and window in KV, so every process on the KV
 * shares the count. Requests are counted by a checked increment: the count a commit read is still
 * the count when it commits, so requests at the same time cannot pass the limit together, and a
 * refused request writes nothing. The counter expires with its window.
 *
 * A process counts the requests of one owner that arrive together in one commit, whichever of the
 * owner's keys sent them (as the wallet group-commits its operations): requests at once would
 * otherwise each retry once per request ahead of it, a burst of n costing KV about n²/2 commits.
 */
import { keys } from "@/lib/db.ts";

const MANAGEMENT_WINDOW_MS = 60_000;

/** The owner's window after a request: what its `x-ratelimit-*-requests` headers say. */
export interface ManagementWindowStatus {
  limit: number;
  /** Requests left in the window after this one. */
  remaining: number;
  /** Milliseconds to the end of the window. */
  resetMs: number;
}

export type ManagementAdmission =
  | { ok: true; status: ManagementWindowStatus }
  /** Whole seconds to the end of the window, never 0 (a client would retry at once). */
  | { ok: false; retryAfter: number; status: ManagementWindowStatus };

/** Tries at one group's commit before its requests are told to wait a second (KV is failing). */
const COUNT_TRIES = 10;

export class ManagementRequestLimit {
  readonly #waiting = new Map<string, PromiseWithResolvers<ManagementAdmission>[]>();

  constructor(
    private readonly kv: Deno.Kv,
    private readonly limit: number,
    private readonly now: () => number,
  ) {}

  /** Counts a request of the owner's, unless the owner's keys have made `limit` in this window. */
  admit(ownerId: string): Promise<ManagementAdmission> {
    const waiter = Promise.withResolvers<ManagementAdmission>();
    const queue = this.#waiting.get(ownerId);
    if (queue) {
      queue.push(waiter);
    } else {
      this.#waiting.set(ownerId, [waiter]);
      // The requests of this tick join the first count.
      queueMicrotask(() => this.#count(ownerId));
    }
    return waiter.promise;
  }

  async #count(ownerId: string) {
    const queue = this.#waiting.get(ownerId)!;
    while (queue.length > 0) {
      const group = queue.splice(0, queue.length);
      try {
        const admissions = await this.#countGroup(ownerId, group.length);
        group.forEach((waiter, i) => waiter.resolve(admissions[i]));
      } catch (error) {
        for (const waiter of group) waiter.reject(error);
      }
    }
    this.#waiting.delete(ownerId);
  }

  /**
   * Admits as many of `wanted` as the window has room for, in one checked commit; the answers in
   * the group's order, each admitted one with the room left after it.
   */
  async #countGroup(ownerId: string, wanted: number): Promise<ManagementAdmission[]> {
    for (let attempt = 0; attempt < COUNT_TRIES; attempt++) {
      const now = this.now();
      const window = Math.floor(now / MANAGEMENT_WINDOW_MS);
      const untilEnd = (window + 1) * MANAGEMENT_WINDOW_MS - now;
      const key = keys.managementOwnerRequests(ownerId, window);
      const counted = await this.kv.get<number>(key);
      const count = counted.value ?? 0;
      const admitted = Math.min(wanted, Math.max(0, this.limit - count));
      if (admitted > 0) {
        const result = await this.kv.atomic()
          .check(counted)
          .set(key, count + admitted, { expireIn: untilEnd })
          .commit();
        // Failed: another process counted meanwhile; read again.
        if (!result.ok) continue;
      }
      const statusAfter = (requests: number) => ({
        limit: this.limit,
        remaining: Math.max(0, this.limit - requests),
        resetMs: untilEnd,
      });
      const refusal = {
        ok: false as const,
        retryAfter: Math.max(1, Math.ceil(untilEnd / 1000)),
        status: statusAfter(this.limit),
      };
      return Array.from(
        { length: wanted },
        (_, i) =>
          i < admitted ? { ok: true as const, status: statusAfter(count + i + 1) } : refusal,
      );
    }
    // Nothing was counted; the window's room is unknown, so the answers say none for the second.
    const refusal = {
      ok: false as const,
      retryAfter: 1,
      status: { limit: this.limit, remaining: 0, resetMs: 1000 },
    };
    return Array.from({ length: wanted }, () => refusal);
  }
}
