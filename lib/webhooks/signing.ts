/**
 * Webhook signatures, Stripe's scheme: `Tollbooth-Signature: t=<unix seconds>,v1=<hex>` where the
 * hex is HMAC-SHA256 with the endpoint's secret over `<t>.<raw body>`. Receivers recompute it,
 * compare in constant time and refuse old timestamps (replays).
 */
import { createHmac } from "node:crypto";
import { randomToken, timingSafeEqualStrings } from "@/lib/core/mod.ts";

export const SIGNATURE_HEADER = "Tollbooth-Signature";
/** How old a signed timestamp a receiver should accept (what Stripe's libraries default to). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export function newWebhookSecret(): string {
  return `whsec_${randomToken(192)}`;
}

function signatureOf(secret: string, timestamp: number, body: string): string {
  return createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex");
}

export function signatureHeader(secret: string, timestamp: number, body: string): string {
  return `t=${timestamp},v1=${signatureOf(secret, timestamp, body)}`;
}

/** True when the header signs this body with this secret, within the tolerance of `now`. */
export function verifySignature(
  secret: string,
  header: string,
  body: string,
  nowSeconds: number,
  toleranceSeconds = DEFAULT_TOLERANCE_SECONDS,
): boolean {
  const parts = header.split(",").map((p) => p.split("="));
  const t = Number(parts.find(([k]) => k === "t")?.[1]);
  if (!Number.isSafeInteger(t) || Math.abs(nowSeconds - t) > toleranceSeconds) return false;
  const expected = signatureOf(secret, t, body);
  return parts.some(([k, v]) =>
    k === "v1" && v !== undefined && timingSafeEqualStrings(v, expected)
  );
}
