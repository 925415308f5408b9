import { parseSse } from "../../sse.ts";
import { type Provider, ProviderError, type UpstreamRequest } from "../types.ts";
import {
  guardedParts,
  ignoredStream,
  postWithBearer,
  readAnswerJson,
  streamedOrWhole,
  wholeAnswer,
} from "../http.ts";
import { oneBatch } from "../part_batches.ts";
import { reasons, responsesRequestBody } from "./request.ts";
import { runsProjectTier } from "../openai/request.ts";
import { responseAsEvents, type ResponsesStreamMeta, responsesStreamParts } from "./stream.ts";
import { isTokenCount } from "../usage.ts";

export interface OpenAiResponsesOptions {
  /** e.g. https://api.openai.com/v1 (the path /responses is appended). */
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  /** Whether reasoning models are asked for summaries of their reasoning (see the catalog). */
  reasoningSummaries?: boolean;
  /** False: the upstream is asked for whole answers (an OpenAI organization not verified). */
  streaming?: boolean;
  fetch?: typeof fetch;
}

/** The input token count answers `{"object": "response.input_tokens", "input_tokens": N}`. */
const COUNT_ANSWER_BYTES = 64 * 1024;
/** The fields of a Responses request that the input token count takes (InputTokenCountParams). */
const COUNTED_FIELDS = new Set([
  "model",
  "input",
  "reasoning",
  "text",
  "tool_choice",
  "tools",
  "parallel_tool_calls",
]);

/** The events a Responses stream ends with; nothing after them is read. */
const LAST_EVENTS = new Set(["response.completed", "response.incomplete", "response.failed"]);

/**
 * OpenAI's Responses API behind the compatible chat-completions shape: the request is translated
 * to a Responses request, and its event stream back to chat.completion(.chunk)s. Chat is always
 * streamed: a non-streamed request is assembled from the stream.
 */
export function createOpenAiResponsesProvider(options: OpenAiResponsesOptions): Provider {
  const pinDefaultTier = runsProjectTier(options.baseUrl);
  const body = (request: UpstreamRequest) =>
    responsesRequestBody(request, {
      reasoningSummaries: options.reasoningSummaries,
      pinDefaultTier,
    });

  const post = (path: string, request: UpstreamRequest, body: Record<string, unknown>) =>
    postWithBearer(options, path, body, request.signal);

  /** A whole answer, made into the events its stream would have sent. */
  async function whole(request: UpstreamRequest, meta: ResponsesStreamMeta) {
    const json = await wholeAnswer(
      options,
      "/responses",
      { ...body(request), stream: false },
      request,
    );
    return responsesStreamParts(oneBatch(responseAsEvents(json)), meta);
  }

  const choose = streamedOrWhole(options.streaming);

  async function streamed(request: UpstreamRequest, meta: ResponsesStreamMeta) {
    const sent = body(request);
    const call = await post("/responses", request, sent);
    const whole = await ignoredStream(call, request.maxTokens, sent);
    if (whole !== null) return responsesStreamParts(oneBatch(responseAsEvents(whole)), meta);
    return guardedParts(
      responsesStreamParts(
        parseSse(
          call.response.body!,
          (event) => LAST_EVENTS.has(event.event ?? ""),
          call.idle.touch,
        ),
        meta,
      ),
      call,
    );
  }

  return {
    stream(request) {
      const model = request.model.upstreamModel;
      const meta = { requestId: request.requestId, upstreamModel: model };
      return choose(model, () => streamed(request, meta), () => whole(request, meta));
    },

    /** Reasoning is billed as output and never shown whole. */
    billsHiddenWork: reasons,

    /**
     * OpenAI's input token count for the same request: the input it bills, the reasoning items
     * sent back included, whose encrypted content the bound can only count by its bytes.
     */
    async countInputTokens(request) {
      const counted = Object.fromEntries(
        Object.entries(body(request)).filter(([field]) => COUNTED_FIELDS.has(field)),
      );
      const json = await readAnswerJson(
        await post("/responses/input_tokens", request, counted),
        COUNT_ANSWER_BYTES,
      );
      const tokens = (json as { input_tokens?: unknown })?.input_tokens;
      if (!isTokenCount(tokens)) {
        throw new ProviderError("malformed_response", "input_tokens answered without a count");
      }
      return tokens;
    },
  };
}
