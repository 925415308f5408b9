/**
 * Embedding vectors in the two encodings of OpenAI's API: a JSON array of floats, or base64 of
 * the little-endian float32 bytes. A compatible server that ignores `encoding_format` still
 * gives the client the encoding it asked for.
 */

export type EncodingFormat = "float" | "base64";

export function toBase64(vector: readonly number[]): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  vector.forEach((x, i) => view.setFloat32(i * 4, x, true));
  let binary = "";
  // Chunks keep String.fromCharCode's argument count within the engine's limit.
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The floats of a base64 vector; null when it is not base64 of whole float32s. */
export function fromBase64(text: string): number[] | null {
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    return null;
  }
  if (binary.length % 4 !== 0) return null;
  const view = new DataView(Uint8Array.from(binary, (c) => c.charCodeAt(0)).buffer);
  const out: number[] = new Array(binary.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

/** Whether a base64 vector decodes to whole float32s, without making the floats. */
function isFloat32Base64(text: string): boolean {
  try {
    return atob(text).length % 4 === 0;
  } catch {
    return false;
  }
}

/**
 * The vector in the format asked for; null when a base64 vector does not decode to whole float32s,
 * whichever format was asked: passed on as it came, a client's SDK failed decoding it after the
 * charge.
 */
export function inFormat(
  embedding: readonly number[] | string,
  format: EncodingFormat,
): number[] | string | null {
  if (typeof embedding === "string") {
    if (format === "float") return fromBase64(embedding);
    return isFloat32Base64(embedding) ? embedding : null;
  }
  return format === "float" ? [...embedding] : toBase64(embedding);
}
