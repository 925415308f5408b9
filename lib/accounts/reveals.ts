/**
 * A secret shown once on the page a form's POST redirects to (Post/Redirect/Get), so that reloading
 * that page never posts the form again. The POST leaves the secret under the signed-in session for
 * a few minutes; the page's GET takes it, reading and deleting it in one commit, and shows it. KV
 * holds it sealed with a key made from the session's id, which KV never holds (only its hash): a
 * copy of the database shows no secret, and another session cannot open it.
 */
import { keys, type SecretRevealRecord, type SecretRevealSubject } from "@/lib/db.ts";
import { newId, sha256Hex } from "@/lib/core/mod.ts";

/** Long enough for a slow redirect, short enough that an unopened secret does not linger. */
export const REVEAL_TTL_MS = 10 * 60 * 1000;

/** A new secret with what it is: each page shows its own kinds, of its own app. */
export type Reveal = SecretRevealSubject & { secret: string };
/** A new app's first API key, a new key, or a rotated key's replacement. */
export type ApiKeyReveal = Reveal & { kind: "new_app" | "new_key" | "rotated_key" };
/** An app's first webhook signing secret, or the one that replaced it. */
export type WebhookSecretReveal = Reveal & {
  kind: "new_webhook_secret" | "replaced_webhook_secret";
};
export type ManagementKeyReveal = Reveal & { kind: "new_management_key" };

/** The reveals the page of an app's new API key shows. */
export const apiKeyRevealOf = (appId: string) => (reveal: Reveal): reveal is ApiKeyReveal =>
  (reveal.kind === "new_app" || reveal.kind === "new_key" || reveal.kind === "rotated_key") &&
  reveal.appId === appId;

/** The reveals the webhooks page of an app shows. */
export const webhookSecretRevealOf =
  (appId: string) => (reveal: Reveal): reveal is WebhookSecretReveal =>
    (reveal.kind === "new_webhook_secret" || reveal.kind === "replaced_webhook_secret") &&
    reveal.appId === appId;

/** The reveals the management keys' page shows: the session is its owner's. */
export const isManagementKeyReveal = (reveal: Reveal): reveal is ManagementKeyReveal =>
  reveal.kind === "new_management_key";

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
  const { secret: _, ...subject } = reveal;
  const record: SecretRevealRecord = { ...subject, sealed, iv, expiresAt: now + REVEAL_TTL_MS };
  await kv.set(keys.secretReveal(sha256Hex(sessionId), revealId), record, {
    expireIn: REVEAL_TTL_MS,
  });
  return revealId;
}

/**
 * The session's reveal of that id if it is one `shownHere`, deleted as it is read: null when
 * unknown, expired or already taken (by a reload, or a second tab racing this one). A reveal of
 * another page is left for that page.
 */
export async function takeReveal<T extends Reveal>(
  kv: Deno.Kv,
  sessionId: string,
  revealId: string,
  shownHere: (reveal: Reveal) => reveal is T,
  now = Date.now(),
): Promise<T | null> {
  if (!/^rev_[0-9a-z]{26}$/.test(revealId)) return null;
  const key = keys.secretReveal(sha256Hex(sessionId), revealId);
  const entry = await kv.get<SecretRevealRecord>(key);
  if (!entry.value || entry.value.expiresAt <= now) return null;
  const { sealed, iv, expiresAt: _, ...subject } = entry.value;
  const opened = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv },
    await sealingKey(sessionId),
    sealed,
  );
  const reveal: Reveal = { ...subject, secret: new TextDecoder().decode(opened) };
  if (!shownHere(reveal)) return null;
  const taken = await kv.atomic().check(entry).delete(key).commit();
  return taken.ok ? reveal : null;
}
