import {
  countLiveIndexed,
  getManyChunked,
  newId,
  NotFoundError,
  randomToken,
  sha256Hex,
} from "@/lib/core/mod.ts";
import { type ApiKeyHashEntry, type ApiKeyRecord, keys } from "@/lib/db.ts";

/**
 * A key's hash-index entry as a caller last saw it. The wallet's reserve commit checks it, so a key
 * revoked anywhere fails its next request at no extra read; updated in place when a batch finds the
 * entry rewritten but still there.
 */
export interface KeyGuard {
  key: Deno.KvKey;
  versionstamp: string;
}

const KEY_PREFIX = "tb_";
/** 36 base-36 characters: 186 bits from the CSPRNG. */
const KEY_BODY_LENGTH = 36;
const KEY_PATTERN = /^tb_[0-9a-z]{36}$/;
const DISPLAY_PREFIX_LENGTH = 8;

export interface IssuedKey {
  record: ApiKeyRecord;
  /** The raw key: returned once, never stored. */
  apiKey: string;
}

function generateRawKey(): string {
  return KEY_PREFIX + randomToken(186).slice(0, KEY_BODY_LENGTH).padEnd(KEY_BODY_LENGTH, "0");
}

/** An API key's name has 1 to this many characters once trimmed, wherever it is given. */
export const MAX_KEY_NAME_CHARS = 60;

/** The key name `value` stands for, trimmed, or null when it is empty or too long. */
export function keyNameOf(value: string): string | null {
  const name = value.trim();
  return name.length >= 1 && name.length <= MAX_KEY_NAME_CHARS ? name : null;
}

/**
 * How many live (not revoked) keys an app may have when a key is issued, or `"operator"`: the
 * operator's keys are not held to it (they still count against it).
 */
export type KeyIssueBound = { maxLiveKeys: number } | "operator";

/** The app has as many live keys as its bound allows. */
export class KeyLimitError extends Error {
  constructor(readonly max: number) {
    super(
      `This app has ${max} live API key${
        max === 1 ? "" : "s"
      }, the most an app may have. Revoke a key it no longer uses first; rotating a key replaces it and is always allowed.`,
    );
  }
}

/**
 * A key record and the writes that store it with its indexes (for use inside an atomic op). The
 * writes rewrite the app's `appApiKeysIssued` marker, so an issue counting the app's live keys at
 * the same time fails its commit and counts again.
 */
export function prepareKey(
  appId: string,
  name: string,
  now = Date.now(),
  /** The first key of the chain a rotation's replacement continues (see ApiKeyRecord). */
  originalKeyId?: string,
) {
  const apiKey = generateRawKey();
  const record: ApiKeyRecord = {
    id: newId("key", now),
    appId,
    name,
    prefix: apiKey.slice(0, DISPLAY_PREFIX_LENGTH),
    hash: sha256Hex(apiKey),
    createdAt: now,
    revokedAt: null,
    ...(originalKeyId ? { originalKeyId } : {}),
  };
  const hashEntry: ApiKeyHashEntry = {
    keyId: record.id,
    appId,
    ...(originalKeyId ? { originalKeyId } : {}),
  };
  const write = (atomic: Deno.AtomicOperation) =>
    atomic
      .check({ key: keys.apiKeyByHash(record.hash), versionstamp: null })
      .set(keys.apiKey(record.id), record)
      .set(keys.apiKeyByHash(record.hash), hashEntry)
      .set(keys.appApiKey(appId, record.id), true)
      .set(keys.appApiKeysIssued(appId), record.id);
  return { issued: { record, apiKey } satisfies IssuedKey, write };
}

/**
 * Writes another area (billing, which this one does not import) commits together with a key's
 * issue or revocation, made afresh for each attempt from what it reads then. They must check what
 * they read, so that a commit on stale reads fails and the attempt is made again.
 */
export type WritesWithKey = (
  key: ApiKeyRecord,
) => Promise<(atomic: Deno.AtomicOperation) => Deno.AtomicOperation>;

/**
 * Issues a key to the app, held to the bound of live keys. Counted and issued in one checked
 * commit: every commit adding a key to the app rewrites the marker read before the count, so
 * concurrent issues cannot pass the bound together, and a rotation committed during the count
 * (which could read as a key fewer) sends it back to count again. A failed commit means another
 * one committed: the retries end at the bound at the latest. `withKey` writes in the same commit.
 */
export async function issueKey(
  kv: Deno.Kv,
  appId: string,
  name: string,
  bound: KeyIssueBound,
  withKey?: WritesWithKey,
): Promise<IssuedKey> {
  for (;;) {
    const [app, marker] = await kv.getMany([keys.app(appId), keys.appApiKeysIssued(appId)]);
    if (app.versionstamp === null) throw new NotFoundError(`no app ${appId}`);
    if (bound !== "operator" && await countLiveKeys(kv, appId) >= bound.maxLiveKeys) {
      throw new KeyLimitError(bound.maxLiveKeys);
    }
    const { issued, write } = prepareKey(appId, name);
    const alongside = withKey
      ? await withKey(issued.record)
      : (atomic: Deno.AtomicOperation) => atomic;
    const result = await alongside(write(kv.atomic().check(app).check(marker))).commit();
    if (result.ok) return issued;
  }
}

/**
 * The app's keys that are not revoked, from its key index: a revocation marks its entry, so only
 * the records of unmarked keys are read (see countLiveIndexed).
 */
export function countLiveKeys(kv: Deno.Kv, appId: string): Promise<number> {
  return countLiveIndexed<ApiKeyRecord>(
    kv,
    keys.appApiKeys(appId),
    keys.apiKey,
    (key) => key.revokedAt === null,
  );
}

/** The ids of the app's keys, live and revoked, from its key index. */
async function appKeyIds(kv: Deno.Kv, appId: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const entry of kv.list({ prefix: keys.appApiKeys(appId) })) {
    ids.push(String(entry.key[2]));
  }
  return ids;
}

/** Resolves a raw bearer key to its key and app, or null when it is malformed, unknown or revoked. */
export async function authenticateKey(
  kv: Deno.Kv,
  rawKey: string,
): Promise<ApiKeyHashEntry | null> {
  if (!KEY_PATTERN.test(rawKey)) return null;
  const entry = await kv.get<ApiKeyHashEntry>(keys.apiKeyByHash(sha256Hex(rawKey)));
  return entry.value;
}

/** A key that authenticated, with the index entry that must still exist when it is charged. */
export interface AuthenticatedKey extends ApiKeyHashEntry {
  hash: string;
  keyGuard: KeyGuard;
  /** True when it came from the cache, so it was not re-read for this request. */
  cached: boolean;
}

/**
 * Known keys in memory, so a request pays no KV read to authenticate. Revocation anywhere deletes
 * the key's hash index entry; every reserve checks that entry's versionstamp in its commit (see
 * `ReserveInput.keyGuard`), so a revoked key fails its next paid request on every instance, and is
 * then dropped from here. Unknown keys are never cached: a key issued elsewhere works at once.
 *
 * Entries are found by the raw key, so a known key is not hashed again: SHA-256 of the key was
 * about 2% of a request's CPU at 500 req/s. The raw keys of recently used keys thus stay in this
 * process's memory, as the providers' keys always do.
 */
export class KeyCache {
  readonly #kv: Deno.Kv;
  readonly #maxEntries: number;
  readonly #entries = new Map<string, Omit<AuthenticatedKey, "cached">>();

  constructor(kv: Deno.Kv, maxEntries = 10_000) {
    this.#kv = kv;
    this.#maxEntries = maxEntries;
  }

  async authenticate(rawKey: string): Promise<AuthenticatedKey | null> {
    const hit = this.#entries.get(rawKey);
    if (hit) return { ...hit, cached: true };
    if (!KEY_PATTERN.test(rawKey)) return null;
    const hash = sha256Hex(rawKey);
    const entry = await this.#kv.get<ApiKeyHashEntry>(keys.apiKeyByHash(hash));
    if (!entry.value || !entry.versionstamp) return null;
    const found = {
      keyId: entry.value.keyId,
      appId: entry.value.appId,
      ...(entry.value.originalKeyId ? { originalKeyId: entry.value.originalKeyId } : {}),
      hash,
      keyGuard: { key: entry.key, versionstamp: entry.versionstamp },
    };
    if (this.#entries.size >= this.#maxEntries) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
    this.#entries.set(rawKey, found);
    return { ...found, cached: false };
  }

  /** True when the key behind a cached authentication still exists (one read). */
  async stillValid(key: AuthenticatedKey): Promise<boolean> {
    const entry = await this.#kv.get(key.keyGuard.key);
    if (entry.versionstamp === null) this.forget(key.hash);
    return entry.versionstamp !== null;
  }

  /** Drops the key with this hash (it was revoked): rare, so a scan rather than a second index. */
  forget(hash: string): void {
    for (const [rawKey, entry] of this.#entries) {
      if (entry.hash === hash) this.#entries.delete(rawKey);
    }
  }
}

/**
 * Revokes a key: its hash index is removed in the same commit, so the next request fails, and so
 * are `withKey`'s writes. Billing's `revokeKey` is the one to call: it also drops what limited the
 * key, which would otherwise stay in the app's records for good.
 */
export async function revokeKeyRecord(
  kv: Deno.Kv,
  keyId: string,
  now = Date.now(),
  withKey?: WritesWithKey,
): Promise<ApiKeyRecord> {
  for (;;) {
    const entry = await kv.get<ApiKeyRecord>(keys.apiKey(keyId));
    if (!entry.value) throw new NotFoundError(`no key ${keyId}`);
    if (entry.value.revokedAt !== null) return entry.value;
    const revoked = { ...entry.value, revokedAt: now };
    const alongside = withKey
      ? await withKey(entry.value)
      : (atomic: Deno.AtomicOperation) => atomic;
    const result = await alongside(kv.atomic())
      .check(entry)
      .set(keys.apiKey(keyId), revoked)
      .delete(keys.apiKeyByHash(revoked.hash))
      .set(keys.appApiKey(revoked.appId, keyId), false)
      .sum(keys.appApiKeyRevocations(revoked.appId), 1n)
      .commit();
    if (result.ok) return revoked;
  }
}

/**
 * One key of an app with when it was last used, or null when the app has no such key: what a
 * route acting on one key reads, in one read whatever the number of the app's keys.
 */
export async function getAppKey(
  kv: Deno.Kv,
  appId: string,
  keyId: string,
): Promise<(ApiKeyRecord & { lastUsedAt: number | null }) | null> {
  const [record, lastUsed] = await kv.getMany<[ApiKeyRecord, number]>([
    keys.apiKey(keyId),
    keys.apiKeyLastUsed(keyId),
  ]);
  if (!record.value || record.value.appId !== appId) return null;
  return { ...record.value, lastUsedAt: lastUsed.value ?? null };
}

export async function listAppKeys(kv: Deno.Kv, appId: string) {
  const ids = await appKeyIds(kv, appId);
  const entries = await getManyChunked<unknown>(
    kv,
    ids.flatMap((id) => [keys.apiKey(id), keys.apiKeyLastUsed(id)]),
  );
  return ids.flatMap((_, i) => {
    const record = entries[2 * i].value as ApiKeyRecord | null;
    const lastUsedAt = (entries[2 * i + 1].value as number | null) ?? null;
    return record ? [{ ...record, lastUsedAt }] : [];
  });
}
