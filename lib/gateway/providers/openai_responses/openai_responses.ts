import { parseSse } from "../../sse.ts";
import { type Provider, ProviderError, type UpstreamRequest } from "../types.ts";
import { callUpstream, guardedParts } from "../http.ts";
import { reasons, responsesRequestBody } from "./request.ts";
import { responsesStreamParts } from "./stream.ts";

export interface OpenAiResponsesOptions {
  /** e.g. https://api.openai.com/v1 (the path /responses is appended). */
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  /** Whether reasoning models are asked for summaries of their reasoning (see the catalog). */
  reasoningSummaries?: boolean;
  fetch?: typeof fetch;
}

/** The events a Responses stream ends with; nothing after them is read. */
const LAST_EVENTS = new Set(["response.completed", "response.incomplete", "response.failed"]);

/**
 * OpenAI's Responses API behind the compatible chat-completions shape: the request is translated
 * to a Responses request, and its event stream back to chat.completion(.chunk)s. Chat is always
 * streamed: a non-streamed request is assembled from the stream.
 */
export function createOpenAiResponsesProvider(options: OpenAiResponsesOptions): Provider {
  function post(request: UpstreamRequest) {
    if (!options.apiKey) {
      throw new ProviderError("not_configured", `provider key ${options.apiKeyEnv} is not set`);
    }
    const body = responsesRequestBody(request, { reasoningSummaries: options.reasoningSummaries });
    return callUpstream({
      url: `${options.baseUrl}/responses`,
      headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: request.signal,
      timeoutMs: options.timeoutMs,
      fetch: options.fetch,
    });
  }

  return {
    async stream(request) {
      const call = await post(request);
      return guardedParts(
        responsesStreamParts(
          parseSse(
            call.response.body!,
            (event) => LAST_EVENTS.has(event.event ?? ""),
            call.idle.touch,
          ),
          { requestId: request.requestId, upstreamModel: request.model.upstreamModel },
        ),
        call,
      );
    },

    /** Reasoning is billed as output and never shown whole. */
    billsHiddenWork: reasons,
  };
}
