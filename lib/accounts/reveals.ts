/**
 * A secret shown once on the page a form's POST redirects to (Post/Redirect/Get), so that reloading
 * that page never posts the form again. The POST leaves the secret under the signed-in session for
 * a few minutes; the page's GET takes it, reading and deleting it in one commit, and shows it. KV
 * holds it sealed with a key made from the session's id, which KV never holds (only its hash): a
 * copy of the database shows no secret, and another session cannot open it.
 */
import { keys, type SecretRevealRecord } from "@/lib/db.ts";
import { newId, sha256Hex } from "@/lib/core/mod.ts";

/** Long enough for a slow redirect, short enough that an unopened secret does not linger. */
export const REVEAL_TTL_MS = 10 * 60 * 1000;

export interface Reveal {
  kind: SecretRevealRecord["kind"];
  appId: string;
  name: string;
  secret: string;
}

async function sealingKey(sessionId: string): Promise<CryptoKey> {
  const material = await crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(`tollbooth secret reveal\n${sessionId}`),
  );
  return await crypto.subtle.importKey("raw", material, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** Leaves `reveal` for the session's next page; returns the id that page is asked with. */
export async function leaveReveal(
  kv: Deno.Kv,
  sessionId: string,
  reveal: Reveal,
  now = Date.now(),
): Promise<string> {
  const revealId = newId("rev", now);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt(
      { name: "AES-GCM", iv },
      await sealingKey(sessionId),
      new TextEncoder().encode(reveal.secret),
    ),
  );
  const record: SecretRevealRecord = {
    kind: reveal.kind,
    appId: reveal.appId,
    name: reveal.name,
    sealed,
    iv,
    expiresAt: now + REVEAL_TTL_MS,
  };
  await kv.set(keys.secretReveal(sha256Hex(sessionId), revealId), record, {
    expireIn: REVEAL_TTL_MS,
  });
  return revealId;
}

/**
 * The session's reveal of that id, deleted as it is read: null when unknown, expired or already
 * taken (by a reload, or a second tab racing this one).
 */
export async function takeReveal(
  kv: Deno.Kv,
  sessionId: string,
  revealId: string,
  now = Date.now(),
): Promise<Reveal | null> {
  if (!/^rev_[0-9a-z]{26}$/.test(revealId)) return null;
  const key = keys.secretReveal(sha256Hex(sessionId), revealId);
  const entry = await kv.get<SecretRevealRecord>(key);
  if (!entry.value || entry.value.expiresAt <= now) return null;
  const taken = await kv.atomic().check(entry).delete(key).commit();
  if (!taken.ok) return null;
  const { kind, appId, name, sealed, iv } = entry.value;
  const opened = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv },
    await sealingKey(sessionId),
    sealed,
  );
  return { kind, appId, name, secret: new TextDecoder().decode(opened) };
}
