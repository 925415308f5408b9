/**
 * Every request body is read within a limit while it streams: a declared Content-Length over the
 * limit is refused before a byte is read (the HTTP server holds a body to the length it declared),
 * and a chunked body is read up to the limit and refused at the first byte beyond, its upload
 * cancelled. Nothing larger than the limit is ever held in memory, nor more than was sent: a body
 * declared larger than PRESIZED_READ_BYTES is read as it arrives, since reading it whole at once
 * sizes a buffer by its declared length first (a client that declares 4 MB and sends one byte held
 * 8 MB). A body read here (any larger one, any chunked one, and every form's) not whole
 * BODY_READ_TIMEOUT_MS after reading began is refused (408): a trickled upload holds its
 * connection, and is cut off. A small API body is read at once by readJsonBody, within the same
 * deadline.
 */
import zlib from "node:zlib";
import { promisify } from "node:util";
import type { Context, MiddlewareHandler } from "hono";
import { ApiError, concatBytes, CONFIG_DEFAULTS } from "@/lib/core/mod.ts";
import { messagePage } from "@/routes/pages/message.tsx";

/**
 * How long a body may take to arrive (BODY_READ_TIMEOUT_MS): one setting for the process, which
 * serves one configuration; the app sets it as it starts.
 */
let readTimeoutMs: number = CONFIG_DEFAULTS.BODY_READ_TIMEOUT_MS;

export function setBodyReadTimeout(ms: number): void {
  readTimeoutMs = ms;
}
type Decoder = (bytes: Uint8Array, options: { maxOutputLength: number }) => Promise<Uint8Array>;

/** Deno's node:zlib has zstd (Node 22.15's), which its bundled Node types do not declare yet. */
const { zstdDecompress } = zlib as unknown as {
  zstdDecompress: (
    bytes: Uint8Array,
    options: { maxOutputLength: number },
    callback: (error: Error | null, result: Uint8Array) => void,
  ) => void;
};

const inflate: Decoder = promisify(zlib.inflate);
const inflateRaw: Decoder = promisify(zlib.inflateRaw);

/**
 * `deflate` is zlib's format (RFC 9110, 8.4.1.2), but some clients send the bare deflate stream
 * without its wrapper, as the RFC notes and browsers take: a body that is not zlib's is read as
 * one, within the same limit.
 */
const inflateEither: Decoder = (bytes, options) =>
  inflate(bytes, options).catch((error) => {
    if ((error as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") throw error;
    return inflateRaw(bytes, options);
  });

/**
 * The codings an API body may be sent in (Content-Encoding), as OpenAI's and Anthropic's APIs take
 * them; each decoded within the route's limit, which holds for what the body decodes to.
 */
const DECODERS: Record<string, Decoder> = {
  gzip: promisify(zlib.gunzip),
  "x-gzip": promisify(zlib.gunzip),
  deflate: inflateEither,
  br: promisify(zlib.brotliDecompress),
  zstd: promisify(zstdDecompress),
};

/** Up to this declared length a body is read at once (one read, the route's fast path). */
const PRESIZED_READ_BYTES = 16 * 1024;

/** What a route answers to a body over its limit, broken off mid-upload, or too slow to arrive. */
export type BodyRefusal = (
  c: Context,
  problem: "too_large" | "broken" | "timed_out",
  maxBytes: number,
) => Response | Promise<Response>;

export function bodyLimit(
  maxBytes: number,
  refuse: BodyRefusal,
  options: {
    /**
     * The route reads its body with readJsonBody: a small declared body is left to it, read at
     * once within the same deadline (see json_body.ts). Other routes get every body read here
     * first.
     */
    readsJson?: boolean;
  } = {},
): MiddlewareHandler {
  return async function bodyLimit(c, next) {
    const request = c.req.raw;
    // Only an API body is decoded: a form is never sent compressed, and a webhook's signature is
    // over the bytes as sent.
    const coding = options.readsJson ? contentCoding(request.headers) : null;
    // Own keys only: `constructor` is on every object, and Object() handed the body back as sent.
    if (coding !== null && !Object.hasOwn(DECODERS, coding)) {
      await request.body?.cancel().catch(() => {});
      // The header is named, not echoed whole: a client's 60 KB header makes no 60 KB error.
      const named = request.headers.get("content-encoding")!;
      throw new ApiError(
        "unsupported_content_encoding",
        `Content-Encoding ${
          JSON.stringify(named.length > 100 ? `${named.slice(0, 100)}…` : named)
        } is not supported: send the body as is, or in one of gzip, deflate, br or zstd.`,
      );
    }
    // The length is looked at before the body: touching request.body makes a stream of it, and
    // a body then read whole through that stream costs more than one read without it.
    const declared = request.headers.get("content-length");
    if (declared !== null && !request.headers.has("transfer-encoding")) {
      if (Number(declared) > maxBytes) {
        await request.body?.cancel().catch(() => {});
        return await refuse(c, "too_large", maxBytes);
      }
      if (options.readsJson && coding === null && Number(declared) <= PRESIZED_READ_BYTES) {
        return await next();
      }
    }
    if (!request.body) return await next();
    const read = await readUpTo(request.body, maxBytes);
    // A body broken off mid-upload is refused too: a part of a body is never handed on.
    if (typeof read === "string") return await refuse(c, read, maxBytes);
    if (coding === null) {
      c.req.raw = new Request(request, { body: read });
      return await next();
    }
    const decoded = await decode(read, coding, maxBytes);
    if (decoded === "too_large") return await refuse(c, "too_large", maxBytes);
    const headers = new Headers(request.headers);
    headers.delete("content-encoding");
    headers.delete("content-length");
    c.req.raw = new Request(request, { body: decoded, headers });
    return await next();
  };
}

/**
 * The body's one coding, lower-cased; null for none or `identity`. A list of codings (a body
 * compressed twice, which no client sends) is returned whole, and so refused as unknown.
 */
function contentCoding(headers: Headers): string | null {
  const header = headers.get("content-encoding");
  if (header === null) return null;
  const codings = header.split(",")
    .map((coding) => coding.trim().toLowerCase())
    .filter((coding) => coding !== "" && coding !== "identity");
  return codings.length === 0 ? null : codings.join(", ");
}

/**
 * The body decoded, "too_large" once its output passes `maxBytes` (what it decodes to is held to
 * the limit too: a few KiB of gzip can hold gigabytes of zeros).
 */
async function decode(
  bytes: Uint8Array,
  coding: string,
  maxBytes: number,
): Promise<Uint8Array<ArrayBuffer> | "too_large"> {
  try {
    return new Uint8Array(await DECODERS[coding](bytes, { maxOutputLength: maxBytes }));
  } catch (error) {
    if ((error as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE") return "too_large";
    throw new ApiError(
      "invalid_json",
      `The request body is not valid ${coding}, as its Content-Encoding says it is.`,
    );
  }
}

/**
 * Bodies being read, each with the moment it is overdue. One sweep a second finds the overdue
 * ones rather than a timer per body, which would cost every request a timer of its own; the sweep
 * stops once it finds nothing left to watch.
 */
const reading = new Map<symbol, { overdueAt: number; expire: () => void }>();
let sweep: ReturnType<typeof setInterval> | null = null;

function sweepOverdue() {
  const now = Date.now();
  for (const [id, read] of reading) {
    if (read.overdueAt > now) continue;
    reading.delete(id);
    read.expire();
  }
  if (reading.size === 0 && sweep !== null) {
    clearInterval(sweep);
    sweep = null;
  }
}

/** Thrown by `withinBodyDeadline` when the body is overdue. */
export class BodyTimeoutError extends Error {}

/**
 * `read` (of one body), refused with BodyTimeoutError once the read timeout has passed since
 * `startedAt`; `cancel` stops the read then, where the caller can. One promise settled by whichever
 * comes first rather than a race: every API request's body is read through here, and a race with
 * its own deadline promise and cleanup cost 3% of a request's CPU.
 */
export function withinBodyDeadline<T>(
  read: Promise<T>,
  startedAt: number,
  cancel?: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const id = Symbol();
    reading.set(id, {
      overdueAt: startedAt + readTimeoutMs,
      expire: () => {
        // Refused before the cancel, which ends the read as if the body were whole.
        reject(new BodyTimeoutError("the body did not arrive in time"));
        cancel?.();
      },
    });
    if (sweep === null) {
      const timer = setInterval(sweepOverdue, 1000);
      // A body still arriving never keeps the process from exiting.
      Deno.unrefTimer(timer);
      sweep = timer;
    }
    // Once overdue, the read may still end or fail as its connection closes: nobody awaits it.
    read.then((value) => {
      reading.delete(id);
      resolve(value);
    }, (error) => {
      reading.delete(id);
      reject(error);
    });
  });
}

/**
 * The whole body, "too_large" as soon as it passes `maxBytes` (the rest is never held: once the
 * refusal is sent, Deno's server reads and drops what the client still sends), "broken"
 * when the upload broke off, or "timed_out" when it did not arrive in time.
 */
async function readUpTo(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
): Promise<Uint8Array<ArrayBuffer> | "too_large" | "broken" | "timed_out"> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  const startedAt = Date.now();
  let size = 0;
  for (;;) {
    let next;
    try {
      next = await withinBodyDeadline(reader.read(), startedAt, () => {
        reader.cancel().catch(() => {});
      });
    } catch (error) {
      return error instanceof BodyTimeoutError ? "timed_out" : "broken";
    }
    if (next.done) break;
    size += next.value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      return "too_large";
    }
    chunks.push(next.value);
  }
  return concatBytes(chunks);
}

/** The API's and the webhook's answer, in the error shape of the spec. */
export const apiBodyRefusal: BodyRefusal = (_c, problem, maxBytes) => {
  if (problem === "broken") {
    throw new ApiError("invalid_json", "The request body could not be read to its end.");
  }
  if (problem === "timed_out") throw bodyTimeout();
  throw new ApiError(
    "request_too_large",
    `The request body exceeds the limit of ${maxBytes} bytes.`,
  );
};

/** A page's answer: a page that says what happened (413 for too large, 400 for broken off). */
export const pageBodyRefusal: BodyRefusal = (c, problem, maxBytes) =>
  problem === "timed_out"
    ? c.html(
      messagePage({
        title: "Form not received in time",
        message: `The form was still arriving ${
          readTimeoutMs / 1000
        } seconds later, so it was not read. Nothing was changed.`,
        session: null,
      }),
      408,
    )
    : problem === "broken"
    ? c.html(
      messagePage({
        title: "Form not received",
        message: "The form did not arrive whole, so it was not read. Nothing was changed.",
        session: null,
      }),
      400,
    )
    : c.html(
      messagePage({
        title: "Form too large",
        message: `This form sent more than ${
          Math.round(maxBytes / 1024)
        } KiB, far more than its fields can hold, so it was not read. Nothing was changed.`,
        session: null,
      }),
      413,
    );

export function bodyTimeout(): ApiError {
  return new ApiError(
    "request_timeout",
    `The request body had not arrived whole ${readTimeoutMs / 1000} seconds after reading began.`,
  );
}
