/**
 * Owner sessions in KV. The browser holds a random id; KV holds only its SHA-256, so a leaked
 * database does not hand out live sessions.
 */
import { keys, type OwnerRecord, type SessionRecord } from "@/lib/db.ts";
import { randomToken, sha256Hex } from "@/lib/core/mod.ts";

export const SESSION_TTL_MS = 7 * 24 * 60 * 60 * 1000;

export interface NewSession {
  /** Goes into the cookie; never stored. */
  sessionId: string;
  record: SessionRecord;
}

export async function createSession(
  kv: Deno.Kv,
  ownerId: string,
  now = Date.now(),
): Promise<NewSession> {
  const sessionId = randomToken(192);
  const record: SessionRecord = {
    ownerId,
    csrfToken: randomToken(128),
    createdAt: now,
    expiresAt: now + SESSION_TTL_MS,
  };
  await kv.set(keys.session(sha256Hex(sessionId)), record, { expireIn: SESSION_TTL_MS });
  return { sessionId, record };
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

export async function endSession(kv: Deno.Kv, sessionId: string): Promise<void> {
  await kv.delete(keys.session(sha256Hex(sessionId)));
}

/** A signed-in visitor: the session as stored and the owner it belongs to. */
export interface Session {
  id: string;
  record: SessionRecord;
  owner: OwnerRecord;
}
