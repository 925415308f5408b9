/**
 * Every request body is read within a limit while it streams: a declared Content-Length over the
 * limit is refused before a byte is read (the HTTP server holds a body to the length it declared),
 * and a chunked body is read up to the limit and refused at the first byte beyond, its upload
 * cancelled. Nothing larger than the limit is ever held in memory.
 */
import type { Context, MiddlewareHandler } from "hono";
import { ApiError, concatBytes } from "@/lib/core/mod.ts";
import { messagePage } from "@/routes/pages/message.tsx";

/** What a route answers to a body over its limit, or to one broken off mid-upload. */
export type BodyRefusal = (
  c: Context,
  problem: "too_large" | "broken",
  maxBytes: number,
) => Response | Promise<Response>;

export function bodyLimit(maxBytes: number, refuse: BodyRefusal): MiddlewareHandler {
  return async function bodyLimit(c, next) {
    const request = c.req.raw;
    // The length is looked at before the body: touching request.body makes a stream of it, and
    // a body then read whole through that stream costs more than one read without it.
    const declared = request.headers.get("content-length");
    if (declared !== null && !request.headers.has("transfer-encoding")) {
      if (Number(declared) > maxBytes) {
        await request.body?.cancel().catch(() => {});
        return await refuse(c, "too_large", maxBytes);
      }
      return await next();
    }
    if (!request.body) return await next();
    const read = await readUpTo(request.body, maxBytes);
    // A body broken off mid-upload is refused too: a part of a body is never handed on.
    if (typeof read === "string") return await refuse(c, read, maxBytes);
    c.req.raw = new Request(request, { body: read });
    return await next();
  };
}

/**
 * The whole body, "too_large" as soon as it passes `maxBytes` (the rest is never read), or "broken"
 * when the upload broke off.
 */
async function readUpTo(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
): Promise<Uint8Array<ArrayBuffer> | "too_large" | "broken"> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    let next;
    try {
      next = await reader.read();
    } catch {
      return "broken";
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
  throw new ApiError(
    "request_too_large",
    `The request body exceeds the limit of ${maxBytes} bytes.`,
  );
};

/** A page's answer: a page that says what happened (413 for too large, 400 for broken off). */
export const pageBodyRefusal: BodyRefusal = (c, problem, maxBytes) =>
  problem === "broken"
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
