/**
 * Management keys: an owner's credentials for the management API. Like API keys they are shown
 * once and stored only as a SHA-256 hash; their prefix (`tbm_`) keeps them apart from app keys.
 */
import {
  countLiveIndexed,
  getManyChunked,
  isPlausibleId,
  newId,
  NotFoundError,
  randomToken,
  sha256Hex,
} from "@/lib/core/mod.ts";
import { keys, type ManagementKeyHashEntry, type ManagementKeyRecord } from "@/lib/db.ts";

const KEY_PREFIX = "tbm_";
const KEY_BODY_LENGTH = 40;
const KEY_PATTERN = /^tbm_[0-9a-z]{40}$/;
const DISPLAY_PREFIX_LENGTH = 10;
/** A handful per owner is plenty; the cap keeps a leaked session from minting thousands. */
export const MAX_MANAGEMENT_KEYS = 20;

export class TooManyManagementKeysError extends Error {}

export async function issueManagementKey(
  kv: Deno.Kv,
  ownerId: string,
  name: string,
  now = Date.now(),
): Promise<{ record: ManagementKeyRecord; managementKey: string }> {
  // Counted and issued in one checked commit: concurrent issues cannot pass the bound together. A
  // failed commit means another issue committed, so the retries end at the bound at the latest.
  for (;;) {
    const issued = await kv.get<number>(keys.ownerManagementKeysIssued(ownerId));
    if (await countLiveManagementKeys(kv, ownerId) >= MAX_MANAGEMENT_KEYS) {
      throw new TooManyManagementKeysError(
        `at most ${MAX_MANAGEMENT_KEYS} live management keys; revoke one first`,
      );
    }
    const managementKey = KEY_PREFIX +
      randomToken(207).slice(0, KEY_BODY_LENGTH).padEnd(KEY_BODY_LENGTH, "0");
    const record: ManagementKeyRecord = {
      id: newId("mk", now),
      ownerId,
      name,
      prefix: managementKey.slice(0, DISPLAY_PREFIX_LENGTH),
      hash: sha256Hex(managementKey),
      createdAt: now,
      revokedAt: null,
    };
    const result = await kv.atomic()
      .check(issued)
      .check({ key: keys.managementKeyByHash(record.hash), versionstamp: null })
      .set(keys.ownerManagementKeysIssued(ownerId), (issued.value ?? 0) + 1)
      .set(keys.managementKey(record.id), record)
      .set(
        keys.managementKeyByHash(record.hash),
        { keyId: record.id, ownerId } satisfies ManagementKeyHashEntry,
      )
      .set(keys.ownerManagementKey(ownerId, record.id), true)
      .commit();
    if (result.ok) return { record, managementKey };
  }
}

/**
 * The owner's management keys that are not revoked: a revocation marks its index entry, so only
 * the records of unmarked keys are read (see countLiveIndexed).
 */
export function countLiveManagementKeys(kv: Deno.Kv, ownerId: string): Promise<number> {
  return countLiveIndexed<ManagementKeyRecord>(
    kv,
    keys.ownerManagementKeys(ownerId),
    keys.managementKey,
    (key) => key.revokedAt === null,
  );
}

/** The owner behind a raw management key, or null when it is malformed, unknown or revoked. */
export async function authenticateManagementKey(
  kv: Deno.Kv,
  raw: string,
): Promise<ManagementKeyHashEntry | null> {
  if (!KEY_PATTERN.test(raw)) return null;
  return (await kv.get<ManagementKeyHashEntry>(keys.managementKeyByHash(sha256Hex(raw)))).value;
}

/** Revoked keys a listing shows at most, the newest; the older ones are counted, not read. */
export const REVOKED_KEYS_SHOWN = 20;

/**
 * An owner's management keys, newest first: every live one and the newest revoked ones, and how
 * many older revoked keys were left out. Only the owner's own churn grows the revoked, and the
 * records read stay within the live bound and REVOKED_KEYS_SHOWN however long it goes on.
 */
export async function listManagementKeys(
  kv: Deno.Kv,
  ownerId: string,
): Promise<{ keys: ManagementKeyRecord[]; olderRevoked: number }> {
  const marked: string[] = [];
  const ids: string[] = [];
  for await (const entry of kv.list({ prefix: keys.ownerManagementKeys(ownerId) })) {
    // Revocation marks the index entry false; one revoked before the mark reads true and is read.
    (entry.value === false ? marked : ids).push(String(entry.key[2]));
  }
  // Ids sort by creation time: the last are the newest.
  const olderRevoked = Math.max(0, marked.length - REVOKED_KEYS_SHOWN);
  ids.push(...marked.slice(olderRevoked));
  const entries = await getManyChunked<ManagementKeyRecord>(
    kv,
    ids.map((id) => keys.managementKey(id)),
  );
  const out = entries.flatMap((e) => e.value ? [e.value] : []);
  return {
    keys: out.sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1)),
    olderRevoked,
  };
}

/** Revokes an owner's key: the hash index goes in the same commit, so it fails at once. */
export async function revokeManagementKey(
  kv: Deno.Kv,
  ownerId: string,
  keyId: string,
  now = Date.now(),
): Promise<ManagementKeyRecord> {
  if (!isPlausibleId(keyId)) throw new NotFoundError(`no management key ${keyId.slice(0, 64)}`);
  for (;;) {
    const entry = await kv.get<ManagementKeyRecord>(keys.managementKey(keyId));
    if (!entry.value || entry.value.ownerId !== ownerId) {
      throw new NotFoundError(`no management key ${keyId}`);
    }
    if (entry.value.revokedAt !== null) return entry.value;
    const revoked = { ...entry.value, revokedAt: now };
    const result = await kv.atomic()
      .check(entry)
      .set(keys.managementKey(keyId), revoked)
      .delete(keys.managementKeyByHash(revoked.hash))
      .set(keys.ownerManagementKey(ownerId, keyId), false)
      .commit();
    if (result.ok) return revoked;
  }
}

/**
 * Revokes every live management key of the owner, each as revokeManagementKey does, and returns
 * how many it revoked: an owner who fears a key leaked with the password ends them in one step.
 */
export async function revokeAllManagementKeys(
  kv: Deno.Kv,
  ownerId: string,
  now = Date.now(),
): Promise<number> {
  let revoked = 0;
  for await (const entry of kv.list({ prefix: keys.ownerManagementKeys(ownerId) })) {
    if (entry.value === false) continue;
    const before = await kv.get<ManagementKeyRecord>(keys.managementKey(String(entry.key[2])));
    if (!before.value || before.value.revokedAt !== null) continue;
    await revokeManagementKey(kv, ownerId, before.value.id, now);
    revoked++;
  }
  return revoked;
}
