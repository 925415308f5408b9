/**
 * Requests per minute of each management key: a leaked or runaway key could otherwise create and
 * revoke API keys (revoked ones are kept) and read reports as fast as it can send.
 *
 * Fixed one-minute windows, one counter per key and window in KV, so every process on the KV
 * shares the count. A request is counted by a checked increment: the count it saw is still the
 * count when it commits, so requests at the same time cannot pass the limit together, and a
 * refused request writes nothing. The counter expires with its window.
 */
import { keys } from "@/lib/db.ts";

export const MANAGEMENT_WINDOW_MS = 60_000;

export type ManagementAdmission =
  | { ok: true }
  /** Whole seconds to the end of the window, never 0 (a client would retry at once). */
  | { ok: false; retryAfter: number };

/** Counts a request of the management key, unless the key has made `limit` in this window. */
export async function admitManagementRequest(
  kv: Deno.Kv,
  keyId: string,
  limit: number,
  now: number,
): Promise<ManagementAdmission> {
  const window = Math.floor(now / MANAGEMENT_WINDOW_MS);
  const untilEnd = (window + 1) * MANAGEMENT_WINDOW_MS - now;
  const key = keys.managementKeyRequests(keyId, window);
  // A failed commit means another request was counted: the retries end at the limit at the latest.
  for (;;) {
    const counted = await kv.get<number>(key);
    const count = counted.value ?? 0;
    if (count >= limit) return { ok: false, retryAfter: Math.max(1, Math.ceil(untilEnd / 1000)) };
    const result = await kv.atomic()
      .check(counted)
      .set(key, count + 1, { expireIn: untilEnd })
      .commit();
    if (result.ok) return { ok: true };
  }
}
