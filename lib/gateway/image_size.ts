/**
 * The pixel size of an image sent inline as a data URL, read from its header: providers bill
 * images by size, so the hold needs it. PNG, JPEG, GIF and WebP, the formats both providers take.
 */

export interface ImageSize {
  width: number;
  height: number;
  mediaType: "image/png" | "image/jpeg" | "image/gif" | "image/webp";
}

/**
 * The most a data URL's header (`data:image/png;base64`) may hold: a media type and a few
 * parameters. Read by a pattern, 4 MB of empty parameters overflowed its stack.
 */
const MAX_DATA_URL_HEADER = 256;

/** The media types a data URL of an image may state, whichever of them its bytes are. */
const IMAGE_MEDIA_TYPES = new Set([
  "image/png",
  "image/jpeg",
  "image/jpg",
  "image/gif",
  "image/webp",
]);

/** The media type and the base64 payload of a data URL; throws with the reason when it is not one. */
export function parseImageDataUrl(url: string): { mediaType: string; base64: string } {
  const comma = url.indexOf(",");
  const header = url.slice(0, comma);
  // data:<media type>[;<parameter>]*;base64
  const parts = comma > 0 && comma <= MAX_DATA_URL_HEADER && header.startsWith("data:")
    ? header.slice(5).split(";")
    : [];
  if (parts.length < 2 || parts[0] === "" || parts.at(-1) !== "base64") {
    throw new Error("is not a base64 data URL (data:image/png;base64,...)");
  }
  return { mediaType: parts[0].toLowerCase(), base64: url.slice(comma + 1) };
}

/** Throws, with a message fit for a 400, when the data URL is not a readable image. */
export function readImageSize(url: string): ImageSize {
  const { mediaType, base64 } = parseImageDataUrl(url);
  let bytes: Uint8Array;
  try {
    // Enough of the payload for any header we read; JPEG's size can sit after large metadata.
    bytes = base64Bytes(base64);
  } catch {
    throw new Error("has a payload that is not valid base64");
  }
  const size = pngSize(bytes) ?? gifSize(bytes) ?? webpSize(bytes) ?? jpegSize(bytes);
  if (!size) throw new Error("is not a PNG, JPEG, GIF or WebP image");
  // Many clients label every image image/jpeg: a mismatch between image types is taken, as OpenAI
  // takes it (it reads the bytes), and Claude is sent the type of the bytes (imageBlock).
  if (!IMAGE_MEDIA_TYPES.has(mediaType)) {
    throw new Error(`says ${mediaType} but holds a ${size.mediaType} image`);
  }
  if (size.width < 1 || size.height < 1) throw new Error("has an image without pixels");
  return size;
}

/**
 * The type an image's bytes are, from their first 12 (its signature): what a provider that checks
 * the label against the bytes (Claude) is sent. Decoding a whole image again per call (readImageSize)
 * only to learn this cost a multi-megabyte decode; null where the start is not one of the four.
 */
export function imageMediaTypeOf(base64: string): ImageSize["mediaType"] | null {
  let b: Uint8Array;
  try {
    b = base64Bytes(base64.slice(0, 64).replace(/\s+/g, "").slice(0, 16));
  } catch {
    return null;
  }
  if (b.length < 12) return null;
  if (ascii(b, 1, 3) === "PNG") return "image/png";
  if (ascii(b, 0, 4) === "GIF8") return "image/gif";
  if (ascii(b, 0, 4) === "RIFF" && ascii(b, 8, 4) === "WEBP") return "image/webp";
  return b[0] === 0xff && b[1] === 0xd8 ? "image/jpeg" : null;
}

function base64Bytes(base64: string): Uint8Array {
  const clean = base64.replace(/\s+/g, "");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(clean)) throw new Error("not base64");
  const binary = atob(clean);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function u16be(b: Uint8Array, i: number) {
  return (b[i] << 8) | b[i + 1];
}
function u16le(b: Uint8Array, i: number) {
  return b[i] | (b[i + 1] << 8);
}
function u24le(b: Uint8Array, i: number) {
  return b[i] | (b[i + 1] << 8) | (b[i + 2] << 16);
}
function u32be(b: Uint8Array, i: number) {
  return ((b[i] << 24) >>> 0) + ((b[i + 1] << 16) | (b[i + 2] << 8) | b[i + 3]);
}
function ascii(b: Uint8Array, i: number, n: number) {
  return String.fromCharCode(...b.subarray(i, i + n));
}

function pngSize(b: Uint8Array): ImageSize | null {
  if (b.length < 24 || ascii(b, 1, 3) !== "PNG" || ascii(b, 12, 4) !== "IHDR") return null;
  return { width: u32be(b, 16), height: u32be(b, 20), mediaType: "image/png" };
}

/**
 * The logical screen, widened to every frame's extent: a frame may reach past the screen its header
 * declares, and decoders (Pillow among them) grow the canvas to hold it, so a 1×1 screen around a
 * 2048×768 frame is billed as the frame.
 */
function gifSize(b: Uint8Array): ImageSize | null {
  if (b.length < 13 || !/^GIF8[79]a$/.test(ascii(b, 0, 6))) return null;
  let width = u16le(b, 6);
  let height = u16le(b, 8);
  const colorTableBytes = (packed: number) => (packed & 0x80 ? 3 << ((packed & 7) + 1) : 0);
  /** Past a chain of data sub-blocks (each a length byte, 0 ends it). */
  const skipSubBlocks = (i: number) => {
    while (i < b.length && b[i] !== 0) i += b[i] + 1;
    return i + 1;
  };
  let i = 13 + colorTableBytes(b[10]);
  while (i < b.length) {
    const block = b[i];
    if (block === 0x2c && i + 10 <= b.length) {
      width = Math.max(width, u16le(b, i + 1) + u16le(b, i + 5));
      height = Math.max(height, u16le(b, i + 3) + u16le(b, i + 7));
      // The descriptor, its color table, the LZW code size, then the image data.
      i = skipSubBlocks(i + 10 + colorTableBytes(b[i + 9]) + 1);
    } else if (block === 0x21 && i + 2 <= b.length) {
      i = skipSubBlocks(i + 2);
    } else {
      break; // the trailer, or bytes no decoder reads past either
    }
  }
  return { width, height, mediaType: "image/gif" };
}

function webpSize(b: Uint8Array): ImageSize | null {
  if (b.length < 30 || ascii(b, 0, 4) !== "RIFF" || ascii(b, 8, 4) !== "WEBP") return null;
  const chunk = ascii(b, 12, 4);
  if (chunk === "VP8X") {
    return { width: u24le(b, 24) + 1, height: u24le(b, 27) + 1, mediaType: "image/webp" };
  }
  if (chunk === "VP8 ") {
    // The frame header follows a 3-byte tag and the 9d 01 2a start code.
    if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) return null;
    return {
      width: u16le(b, 26) & 0x3fff,
      height: u16le(b, 28) & 0x3fff,
      mediaType: "image/webp",
    };
  }
  if (chunk === "VP8L") {
    if (b[20] !== 0x2f) return null;
    const bits = b[21] | (b[22] << 8) | (b[23] << 16) | (b[24] << 24);
    return {
      width: (bits & 0x3fff) + 1,
      height: ((bits >>> 14) & 0x3fff) + 1,
      mediaType: "image/webp",
    };
  }
  return null;
}

/** Walks the JPEG segments to the first start-of-frame marker, which holds the size. */
function jpegSize(b: Uint8Array): ImageSize | null {
  if (b.length < 4 || b[0] !== 0xff || b[1] !== 0xd8) return null;
  let i = 2;
  while (i + 9 < b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1];
    if (marker === 0xff) {
      i++;
      continue;
    }
    // Markers without a length: RSTn, SOI, TEM.
    if ((marker >= 0xd0 && marker <= 0xd8) || marker === 0x01) {
      i += 2;
      continue;
    }
    const length = u16be(b, i + 2);
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 &&
      marker !== 0xcc;
    if (isFrame) {
      return { height: u16be(b, i + 5), width: u16be(b, i + 7), mediaType: "image/jpeg" };
    }
    if (length < 2) return null;
    i += 2 + length;
  }
  return null;
}
