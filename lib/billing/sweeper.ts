import { keys, type ReservationRecord, type WalletSliceRecord } from "@/lib/db.ts";
import type { Wallets } from "./wallet.ts";

/**
 * Releases the reservations of one app whose lease has run out (their request's process died, or never
 * settled). Each release is decided in the wallet's batch, so a settle racing it wins or loses whole.
 */
export async function releaseExpiredReservations(
  kv: Deno.Kv,
  wallets: Wallets,
  appId: string,
  now = Date.now(),
) {
  const expired: string[] = [];
  for await (const entry of kv.list<ReservationRecord>({ prefix: keys.appReservations(appId) })) {
    if (entry.value.leaseUntil <= now) expired.push(entry.value.id);
  }
  const results = await Promise.all(expired.map((id) => wallets.release(appId, id, now)));
  const slices = await returnExpiredSlices(kv, wallets, keys.appWalletSlices(appId), now);
  return results.filter((r) => r.released).length + slices;
}

/**
 * Gives back the slices whose lease ran out: their process died (its settled but unposted charges
 * are lost, within the bound slices.ts states) or stalled. Slices are few (one per process and
 * hot app), so they are listed rather than indexed by expiry.
 */
async function returnExpiredSlices(
  kv: Deno.Kv,
  wallets: Wallets,
  prefix: Deno.KvKey,
  now: number,
): Promise<number> {
  const pending: Promise<{ returned: boolean }>[] = [];
  for await (const entry of kv.list<WalletSliceRecord>({ prefix })) {
    const slice = entry.value;
    if (slice.leaseUntil <= now) {
      pending.push(wallets.returnExpiredSlice(slice.appId, slice.id, now));
    }
  }
  const results = await Promise.all(pending);
  return results.filter((r) => r.returned).length;
}

/** Releases every expired reservation of every app, oldest first, and says how many it released. */
export async function sweepExpiredReservations(kv: Deno.Kv, wallets: Wallets, now = Date.now()) {
  const pending: Promise<{ released: boolean }>[] = [];
  const iter = kv.list({
    prefix: keys.reservationExpiries(),
    end: [...keys.reservationExpiries(), now + 1],
  });
  for await (const entry of iter) {
    const [, , appId, reservationId] = entry.key as [string, number, string, string];
    pending.push(wallets.release(appId, reservationId, now));
  }
  const results = await Promise.all(pending);
  const slices = await returnExpiredSlices(kv, wallets, keys.allWalletSlices(), now);
  return results.filter((r) => r.released).length + slices;
}
