/**
 * What limits an API key (its spend caps, its rate-limit override) follows it through its issue
 * and its revocation, in the same commit as the key: a key asked for with a cap is never live
 * without it, and a revoked key leaves nothing behind in the app's records once its requests in
 * flight have settled; the records are one KV value each (64 KiB at most), read by every wallet
 * batch. Rotation is in key_rotation.ts.
 */
import { type ApiKeyRecord, keys, type RateLimitOverrides, type SpendCaps } from "@/lib/db.ts";
import type { SpendCapsRecord, SpendCounter } from "@/lib/db.ts";
import {
  type IssuedKey,
  issueKey,
  type KeyIssueBound,
  KeyLimitError,
  revokeKeyRecord,
} from "@/lib/tenants/mod.ts";
import { NotFoundError } from "@/lib/core/mod.ts";
import { hasCap, validCaps, withoutRevokedKeys } from "./spend_caps.ts";

/** A key asked for with a spend cap was not issued: the cap could not be stored. */
export class KeyCapNotStoredError extends Error {
  constructor(cause: unknown) {
    super("the key's spend cap could not be stored, so the key was not issued", { cause });
  }
}

/**
 * Issues a key with its spend caps in the one commit that issues it (held to `bound` as
 * `issueKey`), and with the caps record's entries of revoked keys dropped. When that commit
 * fails, nothing is issued: a `KeyCapNotStoredError`.
 */
export async function issueKeyWithCaps(
  kv: Deno.Kv,
  appId: string,
  name: string,
  bound: KeyIssueBound,
  caps: Partial<SpendCaps>,
): Promise<{ issued: IssuedKey; caps: SpendCapsRecord }> {
  const valid = validCaps(caps);
  let written: SpendCapsRecord | null = null;
  try {
    const issued = await issueKey(kv, appId, name, bound, async (key) => {
      const entry = await kv.get<SpendCapsRecord>(keys.spendCaps(appId));
      const { record, checks } = await withoutRevokedKeys(
        kv,
        appId,
        structuredClone(entry.value ?? { keys: {}, endUser: null }),
      );
      if (hasCap(valid)) record.keys[key.id] = valid;
      written = record;
      return (atomic) => atomic.check(entry, ...checks).set(keys.spendCaps(appId), record);
    });
    return { issued, caps: written! };
  } catch (error) {
    if (error instanceof KeyLimitError || error instanceof NotFoundError) throw error;
    throw new KeyCapNotStoredError(error);
  }
}

/**
 * Revokes a key (see `revokeKeyRecord`) and, in the same commit, drops its rate-limit override and
 * its spend caps, unless requests of the key are in flight: their settles must still be held to
 * its cap, so its entry then stays until a later write of the caps finds nothing held on its
 * counter (`withoutRevokedKeys`). The counter read is checked in the commit, as are both records;
 * the wallet's batches check them too, so a batch that read them before retries on the new ones.
 * The key's spend counter stays (it is its own KV entry).
 */
export async function revokeKey(
  kv: Deno.Kv,
  keyId: string,
  now = Date.now(),
): Promise<ApiKeyRecord> {
  return await revokeKeyRecord(kv, keyId, now, async (key) => {
    const [caps, overrides] = await kv.getMany<[SpendCapsRecord, RateLimitOverrides]>([
      keys.spendCaps(key.appId),
      keys.rateLimitOverrides(key.appId),
    ]);
    const keyCaps = caps.value?.keys[keyId];
    const counter = keyCaps
      ? await kv.get<SpendCounter>(keys.spendCounter(key.appId, "key", keyCaps.counter ?? keyId))
      : null;
    return (atomic) => {
      atomic.check(caps).check(overrides);
      if (counter && (counter.value?.held ?? 0) === 0) {
        const next = structuredClone(caps.value!);
        delete next.keys[keyId];
        atomic.check(counter).set(keys.spendCaps(key.appId), next);
      }
      if (overrides.value && keyId in overrides.value.keys) {
        const next = structuredClone(overrides.value);
        delete next.keys[keyId];
        atomic.set(keys.rateLimitOverrides(key.appId), next);
      }
      return atomic;
    };
  });
}
