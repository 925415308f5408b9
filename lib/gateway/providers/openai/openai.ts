import type { Provider, UpstreamRequest } from "../types.ts";
import {
  guardedParts,
  ignoredStream,
  postWithBearer,
  readAnswerJson,
  streamedOrWhole,
  wholeAnswer,
} from "../http.ts";
import { isReasoningModel, openAiRequestBody, runsProjectTier } from "./request.ts";
import { openAiAnswerParts, openAiSseParts } from "./stream.ts";
import { embeddingsAnswerBytes, embeddingsBody, readEmbeddingsAnswer } from "./embeddings.ts";

export interface OpenAiOptions {
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  /** Whether a stream asks for its usage with `stream_options` (see openAiRequestBody). */
  streamOptions?: boolean;
  /** Whether assistants' `reasoning_content` is sent back (see openAiRequestBody). */
  forwardReasoningContent?: boolean;
  /** Whether assistants' `reasoning_details` are sent back (see openAiRequestBody). */
  forwardReasoningDetails?: boolean;
  /** Whether the server takes the `allowed_tools` tool choice (see openAiRequestBody). */
  allowedTools?: boolean;
  /** False: the upstream is asked for whole answers (an OpenAI organization not verified). */
  streaming?: boolean;
  fetch?: typeof fetch;
}

/**
 * Any server that speaks OpenAI's chat-completions wire format: OpenAI itself, Groq, Together,
 * DeepSeek, Mistral, Gemini's compatible endpoint, vLLM, Ollama. Usage is asked for, except of a
 * server that refuses to be asked and reports it unasked.
 */
export function createOpenAiProvider(options: OpenAiOptions): Provider {
  const post = (path: string, body: unknown, signal: AbortSignal) =>
    postWithBearer(options, path, body, signal);
  const pinDefaultTier = runsProjectTier(options.baseUrl);

  /**
   * Chat is streamed (a non-streamed request is assembled from the stream), except from a
   * provider that may not be streamed to: its whole answer is then made into its stream's parts.
   */
  function body(request: UpstreamRequest, stream: boolean) {
    return openAiRequestBody(request, stream, {
      streamOptions: options.streamOptions,
      forwardReasoningContent: options.forwardReasoningContent,
      forwardReasoningDetails: options.forwardReasoningDetails,
      allowedTools: options.allowedTools,
      pinDefaultTier,
    });
  }

  async function whole(request: UpstreamRequest) {
    const sent = body(request, false);
    return openAiAnswerParts(await wholeAnswer(options, "/chat/completions", sent, request));
  }

  const choose = streamedOrWhole(options.streaming);

  return {
    stream(request) {
      return choose(request.model.upstreamModel, async () => {
        const sent = body(request, true);
        const call = await post("/chat/completions", sent, request.signal);
        const whole = await ignoredStream(call, request.maxTokens, sent);
        if (whole !== null) return openAiAnswerParts(whole);
        return guardedParts(openAiSseParts(call.response.body!, call.idle.touch), call);
      }, () => whole(request));
    },

    billsHiddenWork(request) {
      return isReasoningModel(request.model) ||
        request.request.params.reasoning_effort !== undefined;
    },

    async embed(request) {
      const answer = await post("/embeddings", embeddingsBody(request), request.signal);
      const json = await readAnswerJson(answer, embeddingsAnswerBytes(request));
      return readEmbeddingsAnswer(json, request);
    },
  };
}
