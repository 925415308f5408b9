const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/**
 * CSPRNG bytes drawn a block at a time: ids are made several times per request, and one
 * getRandomValues call per id cost more than the id itself. Each byte is used once.
 */
const pool = new Uint8Array(4096);
let poolAt = pool.length;

function randomByte(): number {
  if (poolAt === pool.length) {
    crypto.getRandomValues(pool);
    poolAt = 0;
  }
  return pool[poolAt++];
}

/** Random base-36 text with at least `bits` bits of entropy from the CSPRNG. */
export function randomToken(bits = 128): string {
  const length = Math.ceil(bits / Math.log2(36));
  let out = "";
  while (out.length < length) {
    const byte = randomByte();
    // Rejection sampling keeps every character uniform (256 is not a multiple of 36).
    if (byte < 252) out += ALPHABET[byte % 36];
  }
  return out;
}

/** Identifier that sorts by creation time: prefix, 10 chars of ms timestamp, 16 random chars. */
export function newId(prefix: string, now = Date.now()): string {
  return `${prefix}_${now.toString(36).padStart(10, "0")}${randomToken(80)}`;
}

/**
 * Whether `id` could be one of our ids (`newId`'s are 27 to 31 characters). Text from a URL is
 * held to this before it becomes part of a storage key: KV throws on keys over 2 KiB.
 */
export function isPlausibleId(id: string): boolean {
  return id.length > 0 && id.length <= 64;
}

export function newRequestId(): string {
  return newId("req");
}
