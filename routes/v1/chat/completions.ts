import type { Context } from "hono";
import { encodeSseData, type Gateway, parseChatRequest } from "@/lib/gateway/mod.ts";
import { ApiError, errorBody } from "@/lib/core/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { paidAnswerHeaders, paidEventStream } from "../paid_answer.ts";
import { readUpTo } from "@/routes/body_limit.ts";

/** POST /v1/chat/completions: createChatCompletion. */
export function chatCompletions(
  gateway: Gateway,
  options: { maxBodyBytes: number; docsBaseUrl: string; redact: (text: string) => string },
) {
  return async (c: Context<Env>) => {
    const body = c.get("jsonBody") ?? await readJsonBody(c.req.raw, options.maxBodyBytes);
    const request = parseChatRequest(body);
    // The end user the app names (OpenAI's `user`) is attributed on the usage record.
    const caller = { ...c.get("caller"), user: request.params.user ?? undefined };
    const requestId = c.get("requestId");
    const trace = c.get("trace");

    if (!request.stream) {
      const outcome = await gateway.complete(caller, request, requestId, trace);
      paidAnswerHeaders(c, outcome);
      return c.json(outcome.completion);
    }

    const outcome = await gateway.stream(caller, request, requestId, trace);
    return paidEventStream(c, outcome, (event) => {
      if (event.type === "chunk") return { bytes: encodeSseData(JSON.stringify(event.chunk)) };
      const { code, message } = event.error;
      const body = errorBody(code, options.redact(message), options.docsBaseUrl);
      return { bytes: encodeSseData(JSON.stringify(body)), errorCode: code };
    }, encodeSseData("[DONE]"));
  };
}

/** Stateless when not streaming, so one serves every request. */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });
const POLLUTING_KEYS = new Set(["__proto__", "constructor", "prototype"]);
/** Also any \\u escape, which could spell a polluting key. */
const POLLUTING_PATTERN = /__proto__|constructor|prototype|\\u/;

/**
 * Reads the body within the size limit (checked before parsing, and while reading when the length
 * is not declared), as strict UTF-8 JSON.
 */
export async function readJsonBody(request: Request, maxBytes: number): Promise<unknown> {
  const type = request.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type.trim())) {
    throw new ApiError("invalid_json", "Content-Type must be application/json.");
  }
  const length = request.headers.get("content-length");
  const declared = length === null ? NaN : Number(length);
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  // A declared length within the limit is enforced by the HTTP server: read it in one go, which
  // costs far less than iterating the body stream.
  const bytes = Number.isFinite(declared)
    ? new Uint8Array(await request.arrayBuffer())
    : await readLimited(request.body, maxBytes);
  let text: string;
  try {
    text = STRICT_UTF8.decode(bytes);
  } catch {
    throw new ApiError("invalid_json", "The request body is not valid UTF-8.");
  }
  try {
    // The reviver costs a call per value; only a body that could name a polluting key needs it.
    return POLLUTING_PATTERN.test(text)
      ? JSON.parse(text, (key, value) => POLLUTING_KEYS.has(key) ? undefined : value)
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
}

/** A body of undeclared length, read by the same bounded reader the body-limit middleware uses. */
async function readLimited(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<Uint8Array> {
  if (!body) return new Uint8Array();
  const read = await readUpTo(body, maxBytes);
  if (read === "too_large") throw tooLarge(maxBytes);
  // The client broke off the upload (or went away): its fault, not a server error.
  if (read === "broken") {
    throw new ApiError("invalid_json", "The request body could not be read to its end.");
  }
  return read;
}

function tooLarge(maxBytes: number) {
  return new ApiError(
    "request_too_large",
    `The request body exceeds the limit of ${maxBytes} bytes.`,
  );
}
