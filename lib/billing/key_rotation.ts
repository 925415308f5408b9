/**
 * Rotating an API key: the replacement is issued, the old key revoked, and what limits the key
 * (its spend caps with what it has spent against them, its rate-limit override) moved to the
 * replacement, all in one commit. A rotation is a change of secret, not of customer: a reseller's
 * capped key must not come back uncapped, nor with its spend forgotten.
 */
import { NotFoundError } from "@/lib/core/mod.ts";
import {
  type ApiKeyRecord,
  keys,
  type RateLimitOverrides,
  type RateWindowsRecord,
  type SpendCapsRecord,
} from "@/lib/db.ts";
import { type IssuedKey, prepareKey } from "@/lib/tenants/mod.ts";
import { capsAfterRotation } from "./spend_caps.ts";

/**
 * The caps and overrides records are checked in the commit; the wallet's batches check them too, so
 * a batch that read them before the rotation retries on the new ones (no window with neither key
 * capped, or both). A key's rate window moves only with its overrides, so such a batch also retries
 * rather than write the old key's window back. The old key's hash index goes in the same commit, so its cached
 * authentications fail their next reserve (the key guard), as for a revocation.
 */
export async function rotateKey(
  kv: Deno.Kv,
  keyId: string,
  now = Date.now(),
): Promise<{ issued: IssuedKey; revoked: ApiKeyRecord }> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const entry = await kv.get<ApiKeyRecord>(keys.apiKey(keyId));
    if (!entry.value || entry.value.revokedAt !== null) {
      throw new NotFoundError(`no live key ${keyId}`);
    }
    const { appId } = entry.value;
    const [caps, overrides, windows, counter] = await kv.getMany<
      [SpendCapsRecord, RateLimitOverrides, RateWindowsRecord, unknown]
    >([
      keys.spendCaps(appId),
      keys.rateLimitOverrides(appId),
      keys.rateWindows(appId),
      keys.spendCounter(appId, "key", keyId),
    ]);
    const revoked = { ...entry.value, revokedAt: now };
    const { issued, write } = prepareKey(
      appId,
      revoked.name,
      now,
      revoked.originalKeyId ?? keyId,
    );
    const newId = issued.record.id;
    const atomic = kv.atomic()
      .check(entry)
      .check(caps)
      .check(overrides)
      .set(keys.apiKey(keyId), revoked)
      .delete(keys.apiKeyByHash(revoked.hash))
      .set(keys.appApiKey(appId, keyId), false)
      .sum(keys.appApiKeyRevocations(appId), 1n);
    const nextCaps = capsAfterRotation(caps.value, keyId, newId, counter.versionstamp !== null);
    if (nextCaps) atomic.set(keys.spendCaps(appId), nextCaps);
    const keyLimits = overrides.value?.keys[keyId];
    if (overrides.value && keyLimits) {
      const next = structuredClone(overrides.value);
      next.keys[newId] = keyLimits;
      delete next.keys[keyId];
      atomic.set(keys.rateLimitOverrides(appId), next);
      // The minute's use goes with the limit: a fresh window would let a rotation spend it again.
      const window = windows.value?.keys[keyId];
      if (windows.value && window) {
        const { [keyId]: _, ...others } = windows.value.keys;
        atomic.check(windows).set(keys.rateWindows(appId), {
          ...windows.value,
          keys: { ...others, [newId]: window },
        });
      }
    }
    if ((await write(atomic).commit()).ok) return { issued, revoked };
  }
  throw new Error("key rotation conflicted; try again");
}
