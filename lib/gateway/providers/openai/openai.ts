import { type Provider, ProviderError, type UpstreamRequest } from "../types.ts";
import { callUpstream, readAnswerJson } from "../http.ts";
import { openAiRequestBody } from "./request.ts";
import { openAiCompletionResult } from "./response.ts";
import { openAiSseParts } from "./stream.ts";

export interface OpenAiOptions {
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

/**
 * Any server that speaks OpenAI's chat-completions wire format: OpenAI itself, Groq, Together,
 * DeepSeek, Mistral, Gemini's compatible endpoint, vLLM, Ollama. Usage is always asked for.
 */
export function createOpenAiProvider(options: OpenAiOptions): Provider {
  const url = `${options.baseUrl}/chat/completions`;

  function send(request: UpstreamRequest, stream: boolean) {
    if (!options.apiKey) {
      throw new ProviderError("not_configured", `provider key ${options.apiKeyEnv} is not set`);
    }
    return callUpstream({
      url,
      headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(openAiRequestBody(request, stream)),
      signal: request.signal,
      timeoutMs: options.timeoutMs,
      fetch: options.fetch,
    });
  }

  return {
    async complete(request) {
      return openAiCompletionResult(await readAnswerJson(await send(request, false)));
    },

    async stream(request) {
      const { response, idle } = await send(request, true);
      return (async function* () {
        try {
          yield* openAiSseParts(response.body!, idle.touch);
        } catch (error) {
          throw idle.translate(error);
        } finally {
          idle.stop();
        }
      })();
    },
  };
}
