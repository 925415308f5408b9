/**
 * Owner sessions in KV. The browser holds a random id; KV holds only its SHA-256, so a leaked
 * database does not hand out live sessions.
 */
import { keys, type OwnerRecord, type SessionRecord } from "@/lib/db.ts";
import { getManyChunked, randomToken, sha256Hex } from "@/lib/core/mod.ts";

export const SESSION_TTL_MS = 7 * 24 * 60 * 60 * 1000;

/** Index entries ended per commit: two deletes each, well inside KV's mutations per commit. */
const SESSIONS_ENDED_PER_COMMIT = 200;

export interface NewSession {
  /** Goes into the cookie; never stored. */
  sessionId: string;
  record: SessionRecord;
}

/** A session of the owner's password as given, not stored yet (storeSession). */
export function newSession(
  owner: Pick<OwnerRecord, "id" | "passwordChangedAt">,
  now = Date.now(),
): NewSession {
  return {
    sessionId: randomToken(192),
    record: {
      ownerId: owner.id,
      csrfToken: randomToken(128),
      createdAt: now,
      expiresAt: now + SESSION_TTL_MS,
      ...(owner.passwordChangedAt === undefined
        ? {}
        : { passwordChangedAt: owner.passwordChangedAt }),
    },
  };
}

/** Adds the session, and the owner's index entry of it, to a commit. */
export function storeSession(
  atomic: Deno.AtomicOperation,
  { sessionId, record }: NewSession,
): Deno.AtomicOperation {
  const sessionHash = sha256Hex(sessionId);
  return atomic
    .set(keys.session(sessionHash), record, { expireIn: SESSION_TTL_MS })
    .set(keys.ownerSession(record.ownerId, sessionHash), record.expiresAt, {
      expireIn: SESSION_TTL_MS,
    });
}

/** A session of the owner's current password; the owner's index of sessions is written with it. */
export async function createSession(
  kv: Deno.Kv,
  owner: Pick<OwnerRecord, "id" | "passwordChangedAt">,
  now = Date.now(),
): Promise<NewSession> {
  const session = newSession(owner, now);
  const result = await storeSession(kv.atomic(), session).commit();
  if (!result.ok) throw new Error("the session could not be stored");
  return session;
}

/** The live session of an id, or null when unknown or expired (KV's expiry is only eventual). */
export async function findSession(
  kv: Deno.Kv,
  sessionId: string,
  now = Date.now(),
): Promise<SessionRecord | null> {
  if (!/^[0-9a-z]{20,64}$/.test(sessionId)) return null;
  const record = (await kv.get<SessionRecord>(keys.session(sha256Hex(sessionId)))).value;
  return record && record.expiresAt > now ? record : null;
}

/**
 * Whether the session belongs to the owner's password as it is now. A change or reset ends the
 * sessions it finds in the owner's index; this also ends the ones it could not find (begun before
 * the index existed, or by a sign-in that checked the old password while the change was made).
 */
export function isOfCurrentPassword(record: SessionRecord, owner: OwnerRecord): boolean {
  return record.ownerId === owner.id && record.passwordChangedAt === owner.passwordChangedAt;
}

export async function endSession(kv: Deno.Kv, sessionId: string, ownerId: string): Promise<void> {
  const sessionHash = sha256Hex(sessionId);
  await kv.atomic()
    .delete(keys.session(sessionHash))
    .delete(keys.ownerSession(ownerId, sessionHash))
    .commit();
}

/**
 * Ends every session of the owner not of its password as now (`passwordChangedAt`), and returns
 * how many live ones it ended. Run after the password's commit, which has already made them
 * sessions of an old password: this removes them from KV, in as many commits as they need. A
 * session begun with the new password meanwhile (the owner signing in elsewhere while thousands
 * end) is read as such and left alone.
 */
export async function endOwnerSessions(
  kv: Deno.Kv,
  ownerId: string,
  options: { passwordChangedAt: number | undefined; now?: number },
): Promise<number> {
  const now = options.now ?? Date.now();
  let ended = 0;
  let batch: Deno.KvEntry<number>[] = [];
  const flush = async () => {
    const sessions = await getManyChunked<SessionRecord>(
      kv,
      batch.map((entry) => keys.session(entry.key[2] as string)),
    );
    const atomic = kv.atomic();
    batch.forEach((entry, i) => {
      const session = sessions[i].value;
      if (session && session.passwordChangedAt === options.passwordChangedAt) return;
      if (session && entry.value > now) ended++;
      atomic.delete(sessions[i].key).delete(entry.key);
    });
    await atomic.commit();
    batch = [];
  };
  for await (const entry of kv.list<number>({ prefix: keys.ownerSessions(ownerId) })) {
    batch.push(entry);
    if (batch.length === SESSIONS_ENDED_PER_COMMIT) await flush();
  }
  if (batch.length > 0) await flush();
  return ended;
}

/** A signed-in visitor: the session as stored and the owner it belongs to. */
export interface Session {
  id: string;
  record: SessionRecord;
  owner: OwnerRecord;
}
