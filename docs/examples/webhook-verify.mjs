// Node: verify Tollbooth-Signature (Stripe's scheme) over the raw body, before parsing it.
import { createHmac, timingSafeEqual } from "node:crypto";

export function verifyTollboothSignature(rawBody, header, secret, toleranceSeconds = 300) {
  const pairs = header.split(",").map((part) => {
    const i = part.indexOf("=");
    return [part.slice(0, i), part.slice(i + 1)];
  });
  const t = Number(pairs.find(([k]) => k === "t")?.[1]);
  if (!t || Math.abs(Date.now() / 1000 - t) > toleranceSeconds) return false;
  const expected = createHmac("sha256", secret).update(`${t}.${rawBody}`).digest();
  return pairs.some(([k, v]) => {
    if (k !== "v1") return false;
    const got = Buffer.from(v, "hex");
    return got.length === expected.length && timingSafeEqual(got, expected);
  });
}
// Then act once per event: remember the `id`s you have handled, since delivery is at least once.
