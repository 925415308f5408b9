import { parseSse } from "../../sse.ts";
import { type Provider, ProviderError, type UpstreamRequest } from "../types.ts";
import { callUpstream, guardedParts, ignoredStream, readAnswerJson } from "../http.ts";
import { oneBatch } from "../part_batches.ts";
import { asksHourCacheWrites, claudeThinks } from "../../chat_request.ts";
import { answerTool, messagesRequest, routeRules, withoutStrictTools } from "./request.ts";
import { anthropicStreamParts, messageAsEvents } from "./stream.ts";
import { isTokenCount } from "../usage.ts";

export { messagesRequest } from "./request.ts";
export { finishReason } from "./response.ts";

export const ANTHROPIC_VERSION = "2023-06-01";
/** count_tokens answers `{"input_tokens": N}`; anything far longer is not that answer. */
const COUNT_ANSWER_BYTES = 64 * 1024;
/** The fields of a Messages request that count_tokens takes (its documented body). */
const COUNTED_FIELDS = new Set([
  "model",
  "messages",
  "system",
  "thinking",
  "tool_choice",
  "tools",
  "output_config",
]);

export interface AnthropicOptions {
  /** e.g. https://api.anthropic.com (the path /v1/messages is appended). */
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

/** Anthropic's refusal of a request's strict schemas: their number, their size, their grammar. */
const STRICT_REFUSAL = /compil|grammar|too complex|\bstrict\b|optional parameters|union types/i;

function strictRefusal(error: unknown): boolean {
  return error instanceof ProviderError && error.kind === "bad_request" &&
    STRICT_REFUSAL.test(error.message);
}

/**
 * Anthropic's Messages API behind the compatible chat-completions shape: the request is translated
 * to a Messages request, and the message (or its event stream) back to chat.completion(.chunk)s.
 */
export function createAnthropicProvider(options: AnthropicOptions): Provider {
  const base = `${options.baseUrl.replace(/\/v1$/, "")}/v1/messages`;

  function post(url: string, request: UpstreamRequest, body: Record<string, unknown>) {
    if (!options.apiKey) {
      throw new ProviderError("not_configured", `provider key ${options.apiKeyEnv} is not set`);
    }
    return callUpstream({
      url,
      headers: {
        "x-api-key": options.apiKey,
        "anthropic-version": ANTHROPIC_VERSION,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
      signal: request.signal,
      timeoutMs: options.timeoutMs,
      fetch: options.fetch,
    });
  }

  const meta = (request: UpstreamRequest) => ({
    requestId: request.requestId,
    upstreamModel: request.model.upstreamModel,
    answerTool: answerTool(request)?.name ?? null,
    hourWrites: asksHourCacheWrites(request.request),
    keepsThinking: routeRules(request).thinking === "budget",
  });

  return {
    async stream(request) {
      let sent = messagesRequest(request, true);
      let call;
      try {
        call = await post(base, request, sent);
      } catch (error) {
        // Within the stated limits, strict schemas whose grammar Anthropic finds too large to
        // compile are still refused ("Schema is too complex for compilation."; how large is not
        // stated): the call is made once more unstrict, as it went before strictness was passed.
        const unstrict = strictRefusal(error) ? withoutStrictTools(sent) : null;
        if (!unstrict) throw error;
        sent = unstrict;
        call = await post(base, request, sent);
      }
      const whole = await ignoredStream(call, request.maxTokens, sent);
      if (whole !== null) {
        return anthropicStreamParts(oneBatch(messageAsEvents(whole)), meta(request));
      }
      return guardedParts(
        anthropicStreamParts(
          parseSse(
            call.response.body!,
            (event) => event.event === "message_stop",
            call.idle.touch,
          ),
          meta(request),
        ),
        call,
      );
    },

    /** Thinking bills in full while the stream shows a summary of it, or nothing. */
    billsHiddenWork(request) {
      return claudeThinks(request.request, routeRules(request), request.model.upstreamModel);
    },

    /** Anthropic's free token-counting endpoint: the input the same Messages request bills. */
    async countInputTokens(request) {
      // count_tokens takes only the fields that make the input (sampling fields are refused there).
      const messages = messagesRequest(request, false);
      const body = Object.fromEntries(
        Object.entries(messages).filter(([field]) => COUNTED_FIELDS.has(field)),
      );
      const json = await readAnswerJson(
        await post(`${base}/count_tokens`, request, body),
        COUNT_ANSWER_BYTES,
      );
      const tokens = (json as { input_tokens?: unknown })?.input_tokens;
      if (!isTokenCount(tokens)) {
        throw new ProviderError("malformed_response", "count_tokens answered without input_tokens");
      }
      return tokens;
    },
  };
}
