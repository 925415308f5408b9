import assert from "node:assert/strict";
import { ProviderError } from "../types.ts";
import { openAiCompletionResult } from "./response.ts";

Deno.test("an OpenAI completion passes whole: tool calls, refusal, logprobs and usage details", () => {
  const completion = {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "gpt-4.1-mini",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: null,
        refusal: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: "{}" } }],
        annotations: [],
      },
      logprobs: { content: [{ token: "x", logprob: -0.1, bytes: [120], top_logprobs: [] }] },
      finish_reason: "tool_calls",
    }],
    usage: {
      prompt_tokens: 2006,
      completion_tokens: 300,
      total_tokens: 2306,
      prompt_tokens_details: { cached_tokens: 1920, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 256 },
    },
    service_tier: "default",
  };
  const result = openAiCompletionResult(structuredClone(completion));
  assert.deepEqual(result.completion, completion);
  assert.deepEqual(result.usage, {
    promptTokens: 2006,
    completionTokens: 300,
    cachedTokens: 1920,
    reasoningTokens: 256,
  });
});

Deno.test("odd usage details are ignored, not fatal; no usage is null; no choices is malformed", () => {
  const base = { choices: [{ index: 0, message: { role: "assistant", content: "hi" } }] };
  const odd = openAiCompletionResult({
    ...base,
    usage: { prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: "?" },
  });
  assert.deepEqual(odd.usage, { promptTokens: 5, completionTokens: 1 });
  assert.equal(openAiCompletionResult(base).usage, null);
  assert.throws(
    () => openAiCompletionResult({ id: "x" }),
    (e) => e instanceof ProviderError && e.kind === "malformed_response",
  );
});
