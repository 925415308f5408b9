/**
 * Signed form tokens for anonymous forms: a form posted back must carry a token this server issued
 * for the same purpose (the page it was rendered on) within the last hours. The HMAC key lives in
 * KV, created once, so every process behind one database accepts the others' tokens.
 */
import { keys } from "@/lib/db.ts";
import { randomToken } from "@/lib/core/mod.ts";

const MAX_AGE_MS = 6 * 60 * 60 * 1000;
const encoder = new TextEncoder();

export class FormTokens {
  readonly #kv: Deno.Kv;
  #key: Promise<CryptoKey> | undefined;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  /** A token for forms about `purpose`: `<issued ms, base 36>.<nonce>.<hex HMAC>`. */
  async issue(purpose: string, now = Date.now()): Promise<string> {
    const body = `${now.toString(36)}.${randomToken(64)}`;
    return `${body}.${await this.#sign(purpose, body)}`;
  }

  /** True only for an unexpired token issued by this server for exactly this purpose. */
  async verify(purpose: string, token: unknown, now = Date.now()): Promise<boolean> {
    if (typeof token !== "string" || token.length > 200) return false;
    const match = /^([0-9a-z]{1,12})\.([0-9a-z]{1,40})\.([0-9a-f]{64})$/.exec(token);
    if (!match) return false;
    const issuedAt = parseInt(match[1], 36);
    if (!(issuedAt <= now + 60_000 && now - issuedAt <= MAX_AGE_MS)) return false;
    const key = await this.#loadKey();
    return crypto.subtle.verify(
      "HMAC",
      key,
      hexToBytes(match[3]),
      encoder.encode(`${purpose}\n${match[1]}.${match[2]}`),
    );
  }

  async #sign(purpose: string, body: string): Promise<string> {
    const key = await this.#loadKey();
    const mac = await crypto.subtle.sign("HMAC", key, encoder.encode(`${purpose}\n${body}`));
    return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  #loadKey(): Promise<CryptoKey> {
    this.#key ??= this.#readOrCreateSecret().then((secret) =>
      crypto.subtle.importKey(
        "raw",
        secret,
        { name: "HMAC", hash: "SHA-256" },
        false,
        ["sign", "verify"],
      )
    ).catch((error) => {
      this.#key = undefined;
      throw error;
    });
    return this.#key;
  }

  async #readOrCreateSecret(): Promise<Uint8Array<ArrayBuffer>> {
    const key = keys.serverSecret("form_tokens");
    for (let attempt = 0; attempt < 5; attempt++) {
      const existing = await this.#kv.get<Uint8Array<ArrayBuffer>>(key);
      if (existing.value) return existing.value;
      const secret = crypto.getRandomValues(new Uint8Array(32));
      const created = await this.#kv.atomic().check({ key, versionstamp: null }).set(key, secret)
        .commit();
      if (created.ok) return secret;
    }
    throw new Error("could not read or create the form token secret");
  }
}

function hexToBytes(hex: string): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return bytes;
}
