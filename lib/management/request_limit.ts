/**
 * Requests per minute of each management key: a leaked or runaway key could otherwise create and
 * revoke API keys (revoked ones are kept) and read reports as fast as it can send.
 *
 * Fixed one-minute windows, one counter per key and window in KV, so every process on the KV
 * shares the count. Requests are counted by a checked increment: the count a commit read is still
 * the count when it commits, so requests at the same time cannot pass the limit together, and a
 * refused request writes nothing. The counter expires with its window.
 *
 * A process counts the requests of one key that arrive together in one commit (as the wallet
 * group-commits its operations): requests at once would otherwise each retry once per request
 * ahead of it, a burst of n costing KV about n²/2 commits.
 */
import { keys } from "@/lib/db.ts";

const MANAGEMENT_WINDOW_MS = 60_000;

export type ManagementAdmission =
  | { ok: true }
  /** Whole seconds to the end of the window, never 0 (a client would retry at once). */
  | { ok: false; retryAfter: number };

/** Tries at one group's commit before its requests are told to wait a second (KV is failing). */
const COUNT_TRIES = 10;

export class ManagementRequestLimit {
  readonly #waiting = new Map<string, PromiseWithResolvers<ManagementAdmission>[]>();

  constructor(
    private readonly kv: Deno.Kv,
    private readonly limit: number,
    private readonly now: () => number,
  ) {}

  /** Counts a request of the management key, unless the key has made `limit` in this window. */
  admit(keyId: string): Promise<ManagementAdmission> {
    const waiter = Promise.withResolvers<ManagementAdmission>();
    const queue = this.#waiting.get(keyId);
    if (queue) {
      queue.push(waiter);
    } else {
      this.#waiting.set(keyId, [waiter]);
      // The requests of this tick join the first count.
      queueMicrotask(() => this.#count(keyId));
    }
    return waiter.promise;
  }

  async #count(keyId: string) {
    const queue = this.#waiting.get(keyId)!;
    while (queue.length > 0) {
      const group = queue.splice(0, queue.length);
      try {
        const admitted = await this.#countGroup(keyId, group.length);
        group.forEach((waiter, i) =>
          waiter.resolve(i < admitted.count ? { ok: true } : admitted.refusal)
        );
      } catch (error) {
        for (const waiter of group) waiter.reject(error);
      }
    }
    this.#waiting.delete(keyId);
  }

  /** Admits as many of `wanted` as the window has room for, in one checked commit. */
  async #countGroup(keyId: string, wanted: number) {
    for (let attempt = 0; attempt < COUNT_TRIES; attempt++) {
      const now = this.now();
      const window = Math.floor(now / MANAGEMENT_WINDOW_MS);
      const untilEnd = (window + 1) * MANAGEMENT_WINDOW_MS - now;
      const refusal = { ok: false as const, retryAfter: Math.max(1, Math.ceil(untilEnd / 1000)) };
      const key = keys.managementKeyRequests(keyId, window);
      const counted = await this.kv.get<number>(key);
      const count = counted.value ?? 0;
      const admitted = Math.min(wanted, Math.max(0, this.limit - count));
      if (admitted === 0) return { count: 0, refusal };
      const result = await this.kv.atomic()
        .check(counted)
        .set(key, count + admitted, { expireIn: untilEnd })
        .commit();
      // Failed: another process counted meanwhile; read again.
      if (result.ok) return { count: admitted, refusal };
    }
    return { count: 0, refusal: { ok: false as const, retryAfter: 1 } };
  }
}
