/**
 * What the two strict provider fakes (openai_upstream.ts, anthropic_upstream.ts) share: a loopback
 * server that records every request, a scripted-answer queue, an SSE body with fault knobs, and
 * image-size reading for the providers' image-token rules. Nothing here imports the service.
 */

/** One request as it reached a fake: what a test asserts to prove what crossed the wire. */
export interface ReceivedRequest {
  method: string;
  path: string;
  /** Header names lower-cased, as HTTP has them. */
  headers: Record<string, string>;
  /** The raw body text ("" for none). */
  raw: string;
  /** The parsed JSON body, or undefined when the body was not JSON. */
  body: unknown;
  /** What the fake answered: its HTTP status. */
  status?: number;
}

/** Faults any scripted answer may carry, the knobs the older fakes' tests use. */
export interface FaultKnobs {
  /** Waits this long before answering at all (time to first byte). */
  delayMs?: number;
  /** Waits this long between two streamed events. */
  chunkDelayMs?: number;
  /** Streams this many SSE events, then drops the connection (no terminal event). */
  cutAfterEvents?: number;
  /** After the events (or after `cutAfterEvents` of them), stays open and silent. */
  stallAfterEvents?: number;
  /** Extra response headers (e.g. retry-after, request-id). */
  headers?: Record<string, string>;
}

export function headersObject(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, key) => out[key] = value);
  return out;
}

/** Waits for a condition another task makes true (up to 2 s unless told), failing with `what`. */
export async function until(
  condition: () => boolean | Promise<boolean>,
  what: string,
  { timeoutMs = 2_000 } = {},
) {
  for (let i = 0; i < timeoutMs / 10; i++) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A wait that ends early when the caller goes away, so shutting a server down never hangs. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0) return resolve();
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

export interface Loopback {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Deno.serve on 127.0.0.1 and a free port; in-flight streams are cancelled on close. */
export function serveOnLoopback(handler: (request: Request) => Promise<Response>): Loopback {
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {}, signal: controller.signal },
    handler,
  );
  const { port } = server.addr as Deno.NetAddr;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: async () => {
      controller.abort();
      await server.finished;
    },
  };
}

const encoder = new TextEncoder();

/**
 * An SSE response of pre-rendered events (each a complete "event: …\ndata: …\n\n" or "data: …\n\n"
 * block), honouring the fault knobs. A cut errors the body, so the server drops the connection
 * mid-response as a real upstream failure would.
 */
export function sseBody(
  events: string[],
  faults: FaultKnobs,
  signal: AbortSignal,
  contentType = "text/event-stream; charset=utf-8",
): Response {
  let i = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (i > 0 && faults.chunkDelayMs) await sleep(faults.chunkDelayMs, signal);
      if (faults.stallAfterEvents !== undefined && i >= faults.stallAfterEvents) {
        return new Promise<void>((resolve) => {
          timer = setTimeout(resolve, 60_000);
          signal.addEventListener("abort", () => resolve(), { once: true });
        });
      }
      if (faults.cutAfterEvents !== undefined && i >= faults.cutAfterEvents) {
        controller.error(new Error("fake upstream cut the stream"));
        return;
      }
      if (i < events.length) {
        controller.enqueue(encoder.encode(events[i++]));
        return;
      }
      controller.close();
    },
    cancel() {
      clearTimeout(timer);
    },
  });
  return new Response(body, {
    headers: { "content-type": contentType, "cache-control": "no-cache", ...faults.headers },
  });
}

/** A FIFO of scripted answers with a fallback, so a test states what the model says next. */
export class ScriptQueue<T> {
  #queue: T[] = [];
  constructor(private fallback: T) {}
  push(...answers: T[]) {
    this.#queue.push(...answers);
  }
  setDefault(answer: T) {
    this.fallback = answer;
  }
  next(): T {
    return this.#queue.shift() ?? this.fallback;
  }
  get pending(): number {
    return this.#queue.length;
  }
}

// ---------------------------------------------------------------------------------------------
// Images: both providers bill images by their pixel size, so the fakes read it from the bytes.

export interface ImageInfo {
  mediaType: "image/png" | "image/jpeg" | "image/gif" | "image/webp";
  width: number;
  height: number;
}

export function base64Bytes(data: string): Uint8Array | null {
  try {
    const bin = atob(data.replace(/\s+/g, ""));
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  } catch {
    return null;
  }
}

/** Reads the format and pixel size from an image's header (PNG, JPEG, GIF, WebP), or null. */
export function imageInfo(bytes: Uint8Array): ImageInfo | null {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const at = (i: number, ...sig: number[]) => sig.every((b, k) => bytes[i + k] === b);
  // PNG: 8-byte signature, then the IHDR chunk whose data starts with width and height (BE).
  if (bytes.length >= 24 && at(0, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) {
    return { mediaType: "image/png", width: view.getUint32(16), height: view.getUint32(20) };
  }
  // GIF: "GIF8?a", then logical screen width and height (LE).
  if (bytes.length >= 10 && at(0, 0x47, 0x49, 0x46, 0x38)) {
    return {
      mediaType: "image/gif",
      width: view.getUint16(6, true),
      height: view.getUint16(8, true),
    };
  }
  // WebP: RIFF....WEBP, then a VP8 / VP8L / VP8X chunk.
  if (bytes.length >= 30 && at(0, 0x52, 0x49, 0x46, 0x46) && at(8, 0x57, 0x45, 0x42, 0x50)) {
    const chunk = String.fromCharCode(...bytes.subarray(12, 16));
    if (chunk === "VP8 ") {
      return {
        mediaType: "image/webp",
        width: view.getUint16(26, true) & 0x3fff,
        height: view.getUint16(28, true) & 0x3fff,
      };
    }
    if (chunk === "VP8L") {
      const b = view.getUint32(21, true);
      return { mediaType: "image/webp", width: (b & 0x3fff) + 1, height: ((b >> 14) & 0x3fff) + 1 };
    }
    if (chunk === "VP8X") {
      const w = bytes[24] | (bytes[25] << 8) | (bytes[26] << 16);
      const h = bytes[27] | (bytes[28] << 8) | (bytes[29] << 16);
      return { mediaType: "image/webp", width: w + 1, height: h + 1 };
    }
    return null;
  }
  // JPEG: walk the segments to the first start-of-frame marker (SOF0..SOF15 but DHT/JPG/DAC).
  if (bytes.length >= 4 && at(0, 0xff, 0xd8)) {
    let i = 2;
    while (i + 9 < bytes.length) {
      if (bytes[i] !== 0xff) return null;
      const marker = bytes[i + 1];
      if (marker === 0xd8 || (marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) {
        i += 2;
        continue;
      }
      const length = view.getUint16(i + 2);
      if (
        marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
      ) {
        return {
          mediaType: "image/jpeg",
          height: view.getUint16(i + 5),
          width: view.getUint16(i + 7),
        };
      }
      i += 2 + length;
    }
  }
  return null;
}

/** Splits "data:<type>;base64,<data>" into its parts, or null when it is no base64 data URL. */
export function parseDataUrl(url: string): { mediaType: string; data: string } | null {
  const match = /^data:([^;,]+)((?:;[^;,]+)*);base64,(.*)$/s.exec(url);
  return match ? { mediaType: match[1].toLowerCase(), data: match[3] } : null;
}

// ---------------------------------------------------------------------------------------------
// Test images: tiny valid PNGs of any declared size (only the header is read for billing).

let crcTable: Uint32Array | undefined;
function crc32(bytes: Uint8Array): number {
  crcTable ??= Uint32Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  let crc = 0xffffffff;
  for (const b of bytes) crc = crcTable[(crc ^ b) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/**
 * The base64 of a PNG header (signature + IHDR) declaring `width`×`height`: enough for the fakes'
 * size reading and for both providers' media-type sniffing, without megabytes of pixels.
 */
export function pngBase64(width: number, height: number): string {
  const ihdr = new Uint8Array(17);
  const v = new DataView(ihdr.buffer);
  ihdr.set([0x49, 0x48, 0x44, 0x52]); // "IHDR"
  v.setUint32(4, width);
  v.setUint32(8, height);
  ihdr.set([8, 6, 0, 0, 0], 12); // 8-bit RGBA, deflate, no filter, no interlace
  const png = new Uint8Array(8 + 4 + 17 + 4);
  png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  new DataView(png.buffer).setUint32(8, 13);
  png.set(ihdr, 12);
  new DataView(png.buffer).setUint32(29, crc32(ihdr));
  let bin = "";
  for (const b of png) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** A JPEG header (SOI + SOF0) declaring `width`×`height`, base64. */
export function jpegBase64(width: number, height: number): string {
  const bytes = [0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11, 0x08, height >> 8, height & 0xff];
  bytes.push(width >> 8, width & 0xff, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01);
  bytes.push(0xff, 0xd9);
  return btoa(String.fromCharCode(...bytes));
}

/**
 * The base64 of a sample PDF of `pages` pages (a catalog, a page tree and its pages, a cross
 * reference table): what the Anthropic fake reads a page count from, and a reader opens.
 */
export function samplePdfBase64(pages: number): string {
  const objects = [
    "<< /Type /Catalog /Pages 2 0 R >>",
    `<< /Type /Pages /Kids [${
      Array.from({ length: pages }, (_, i) => `${i + 3} 0 R`).join(" ")
    }] /Count ${pages} >>`,
    ...Array.from(
      { length: pages },
      () => "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
    ),
  ];
  let pdf = "%PDF-1.4\n";
  const offsets = objects.map((body, i) => {
    const at = pdf.length;
    pdf += `${i + 1} 0 obj\n${body}\nendobj\n`;
    return at;
  });
  const xref = pdf.length;
  pdf += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const at of offsets) pdf += `${String(at).padStart(10, "0")} 00000 n \n`;
  pdf += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return btoa(pdf);
}

/** What a request body holds at a validation error's path (undefined where it stops). */
export function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v = root;
  for (const p of path) {
    if (v === null || typeof v !== "object") return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}
