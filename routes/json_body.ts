/**
 * A request's JSON body, for every API route. Its size is not checked here: each route that reads
 * a body sits behind bodyLimit (body_limit.ts), which refuses one over the limit before it is read.
 */
import type { Context } from "hono";
import { ApiError } from "@/lib/core/mod.ts";
import type { Env } from "./middleware.ts";
import { bodyTimeout, BodyTimeoutError, withinBodyDeadline } from "./body_limit.ts";

/** Stateless when not streaming, so one serves every request. */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });
/**
 * JSON.parse makes `__proto__` an own property, which Object.assign or a copy by assignment (Zod's
 * own parsing among them) would then take as the prototype. A body naming it is refused rather
 * than quietly changed: dropping it would send on something other than what the client wrote.
 * `constructor` and `prototype` are left alone: as own properties of parsed data they change
 * nothing, and they are real names in tool schemas and metadata.
 */
const POLLUTING_KEY = "__proto__";
/** Also any \\u escape, which could spell the polluting key. */
const POLLUTING_PATTERN = /__proto__|\\u/;

/** The body as strict UTF-8 JSON, or the one a middleware (idempotency) has already read. */
export async function jsonBody<E extends Env>(c: Context<E>): Promise<unknown> {
  // A body of `null` was read too: reading it again would find it used up.
  const read = c.get("jsonBody");
  return read !== undefined ? read : await readJsonBody(c.req.raw);
}

export async function readJsonBody(request: Request): Promise<unknown> {
  const type = request.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type.trim())) {
    throw new ApiError("invalid_json", "Content-Type must be application/json.");
  }
  let bytes: Uint8Array;
  try {
    // A body that reaches here is small (bodyLimit reads a larger one as it arrives, within the
    // deadline, and hands on its bytes): it is read at once, within the deadline all the same,
    // since a client trickling it a byte a second would otherwise hold its request for as long
    // as it liked.
    bytes = new Uint8Array(await withinBodyDeadline(request.arrayBuffer(), Date.now()));
  } catch (error) {
    if (error instanceof BodyTimeoutError) throw bodyTimeout();
    // The client broke off the upload (or went away): its fault, not a server error.
    throw new ApiError("invalid_json", "The request body could not be read to its end.");
  }
  let text: string;
  try {
    text = STRICT_UTF8.decode(bytes);
  } catch {
    throw new ApiError("invalid_json", "The request body is not valid UTF-8.");
  }
  let polluting = false;
  let parsed: unknown;
  try {
    // The reviver costs a call per value; only a body that could name a polluting key needs it.
    parsed = POLLUTING_PATTERN.test(text)
      ? JSON.parse(text, (key, value) => {
        if (key !== POLLUTING_KEY) return value;
        polluting = true;
        return undefined;
      })
      : JSON.parse(text);
  } catch (error) {
    // Valid JSON nested deeper than the parser's stack is refused as such, not called invalid.
    throw new ApiError(
      "invalid_json",
      error instanceof RangeError
        ? "The request body is nested too deeply."
        : "The request body is not valid JSON.",
    );
  }
  if (polluting) {
    throw new ApiError(
      "invalid_json",
      `The request body has a key named "${POLLUTING_KEY}", which Tollbooth does not accept (it would set an object's prototype).`,
    );
  }
  return parsed;
}
