const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/** Random base-36 text with at least `bits` bits of entropy from the CSPRNG. */
export function randomToken(bits = 128): string {
  const length = Math.ceil(bits / Math.log2(36));
  const bytes = crypto.getRandomValues(new Uint8Array(length * 2));
  let out = "";
  // Rejection sampling keeps every character uniform (256 is not a multiple of 36).
  for (const byte of bytes) {
    if (byte >= 252) continue;
    out += ALPHABET[byte % 36];
    if (out.length === length) return out;
  }
  return out + randomToken(bits - out.length * Math.log2(36));
}

/** Identifier that sorts by creation time: prefix, 10 chars of ms timestamp, 16 random chars. */
export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}_${now.toString(36).padStart(10, "0")}${randomToken(80)}`;
}

export function newRequestId(): string {
  return newId("req");
}
