/**
 * Comparison of secrets that are checked directly rather than hashed and looked up (a metrics
 * bearer token, a webhook signing secret): the time taken must not tell how many leading
 * characters matched.
 */
import { createHash } from "node:crypto";

const encoder = new TextEncoder();

/** SHA-256 of a secret, as hex: what is stored and looked up instead of API keys and session ids. */
export function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** True when both strings are equal; runs in time that depends only on their lengths. */
export function timingSafeEqualStrings(a: string, b: string): boolean {
  const left = encoder.encode(a);
  const right = encoder.encode(b);
  // Compare over the longer length so a short guess takes as long as a full one.
  const length = Math.max(left.length, right.length);
  let difference = left.length ^ right.length;
  for (let i = 0; i < length; i++) {
    difference |= (left[i] ?? 0) ^ (right[i] ?? 0);
  }
  return difference === 0;
}
