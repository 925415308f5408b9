import { countPromptTokens, splitIntoTokenTexts } from "../../tokens.ts";
import { randomToken } from "@/lib/core/mod.ts";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  Provider,
  StreamPart,
  UpstreamRequest,
} from "../types.ts";

const LOREM =
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt " +
  "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris " +
  "nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit " +
  "esse cillum dolore eu fugiat nulla pariatur. Excepteur sint occaecat cupidatat non proident, sunt in " +
  "culpa qui officia deserunt mollit anim id est laborum.";

/**
 * The built-in model: deterministic, free of network, and billed like any other. `echo` answers
 * with the last user message; `lorem` with a fixed paragraph. Both stop at `max_tokens`.
 */
export function createSimulator(options: { tokenDelayMs: number }): Provider {
  function answer(request: UpstreamRequest) {
    const text = request.model.upstreamModel === "lorem"
      ? LOREM
      : request.messages.findLast((m) => m.role === "user")?.content ?? "";
    const all = splitIntoTokenTexts(text);
    const pieces = all.slice(0, request.maxTokens);
    return {
      pieces,
      finishReason: pieces.length < all.length ? "length" : "stop",
      promptTokens: countPromptTokens(request.messages),
    };
  }

  return {
    complete(request) {
      const { pieces, finishReason, promptTokens } = answer(request);
      request.signal.throwIfAborted();
      const completion: ChatCompletion = {
        id: `chatcmpl-${randomToken(96)}`,
        object: "chat.completion",
        created: Math.floor(Date.now() / 1000),
        model: request.model.upstreamModel,
        choices: [{
          index: 0,
          message: { role: "assistant", content: pieces.join("") },
          finish_reason: finishReason,
        }],
        usage: {
          prompt_tokens: promptTokens,
          completion_tokens: pieces.length,
          total_tokens: promptTokens + pieces.length,
        },
      };
      return Promise.resolve({
        completion,
        usage: { promptTokens, completionTokens: pieces.length },
      });
    },

    stream(request) {
      const { pieces, finishReason, promptTokens } = answer(request);
      const id = `chatcmpl-${randomToken(96)}`;
      const created = Math.floor(Date.now() / 1000);
      const model = request.model.upstreamModel;
      const chunk = (delta: ChatCompletionChunk["choices"][0]["delta"], finish: string | null) => ({
        type: "chunk" as const,
        chunk: {
          id,
          object: "chat.completion.chunk" as const,
          created,
          model,
          choices: [{ index: 0, delta, finish_reason: finish }],
        },
      });
      async function* parts(): AsyncGenerator<StreamPart> {
        yield chunk({ role: "assistant", content: "" }, null);
        for (const piece of pieces) {
          if (options.tokenDelayMs > 0) await delay(options.tokenDelayMs, request.signal);
          request.signal.throwIfAborted();
          yield chunk({ content: piece }, null);
        }
        yield chunk({}, finishReason);
        yield { type: "usage", usage: { promptTokens, completionTokens: pieces.length } };
      }
      return Promise.resolve(parts());
    },
  };
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
