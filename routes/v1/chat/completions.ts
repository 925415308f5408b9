import type { Context } from "hono";
import { parseChatRequest } from "../../../lib/chat_request.ts";
import { ApiError, errorBody } from "../../../lib/errors.ts";
import type { Gateway, StreamOutcome } from "../../../lib/gateway.ts";
import { formatUsd } from "../../../lib/money.ts";
import { encodeSseData } from "../../../lib/sse.ts";
import type { Env } from "../../middleware.ts";

/** POST /v1/chat/completions: createChatCompletion. */
export function chatCompletions(
  gateway: Gateway,
  options: { maxBodyBytes: number; docsBaseUrl: string },
) {
  return async (c: Context<Env>) => {
    const body = await readJsonBody(c.req.raw, options.maxBodyBytes);
    const request = parseChatRequest(body);
    const caller = c.get("caller");
    const requestId = c.get("requestId");
    const trace = c.get("trace");

    if (!request.stream) {
      const outcome = await gateway.complete(caller, request, requestId, trace);
      c.header("Tollbooth-Balance", formatUsd(outcome.available));
      c.header("Tollbooth-Request-Cost", formatUsd(outcome.charged));
      return c.json(outcome.completion);
    }

    const outcome = await gateway.stream(caller, request, requestId, trace);
    c.set("deferLog", true);
    c.header("Tollbooth-Balance", formatUsd(outcome.available));
    c.header("Content-Type", "text/event-stream; charset=utf-8");
    c.header("Cache-Control", "no-cache");
    c.header("X-Accel-Buffering", "no");
    return c.body(sseBody(outcome, options.docsBaseUrl));
  };
}

function sseBody(outcome: StreamOutcome, docsBaseUrl: string): ReadableStream<Uint8Array> {
  let failed = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await outcome.events.next();
      if (next.done) {
        if (!failed) controller.enqueue(encodeSseData("[DONE]"));
        controller.close();
        return;
      }
      const event = next.value;
      if (event.type === "chunk") {
        controller.enqueue(encodeSseData(JSON.stringify(event.chunk)));
      } else {
        failed = true;
        controller.enqueue(
          encodeSseData(
            JSON.stringify(errorBody(event.error.code, event.error.message, docsBaseUrl)),
          ),
        );
      }
    },
    cancel() {
      return outcome.cancel();
    },
  });
}

const POLLUTING_KEYS = new Set(["__proto__", "constructor", "prototype"]);

/**
 * Reads the body within the size limit (checked before parsing, and while reading when the length
 * is not declared), as strict UTF-8 JSON.
 */
export async function readJsonBody(request: Request, maxBytes: number): Promise<unknown> {
  const type = request.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type.trim())) {
    throw new ApiError("invalid_json", "Content-Type must be application/json.");
  }
  const declared = Number(request.headers.get("content-length"));
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge(maxBytes);
  const bytes = await readLimited(request.body, maxBytes);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ApiError("invalid_json", "The request body is not valid UTF-8.");
  }
  try {
    return JSON.parse(text, (key, value) => POLLUTING_KEYS.has(key) ? undefined : value);
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

async function readLimited(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<Uint8Array> {
  if (!body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      size += chunk.byteLength;
      if (size > maxBytes) throw tooLarge(maxBytes);
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof ApiError) throw error;
    // The client broke off the upload (or went away): its fault, not a server error.
    throw new ApiError("invalid_json", "The request body could not be read to its end.");
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

function tooLarge(maxBytes: number) {
  return new ApiError(
    "request_too_large",
    `The request body exceeds the limit of ${maxBytes} bytes.`,
  );
}
