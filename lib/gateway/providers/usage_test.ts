import assert from "node:assert/strict";
import { parseOpenAiUsage, usageObject } from "./usage.ts";

Deno.test("odd usage details are ignored, not fatal; no usable counts is null", () => {
  const odd = parseOpenAiUsage({
    prompt_tokens: 5,
    completion_tokens: 1,
    prompt_tokens_details: "?",
  });
  assert.deepEqual(odd?.usage, { promptTokens: 5, completionTokens: 1 });
  assert.equal(parseOpenAiUsage(undefined), null);
  assert.equal(parseOpenAiUsage({ prompt_tokens: -1, completion_tokens: 1 }), null);
});

Deno.test("usage details are read and written back: cached and reasoning tokens", () => {
  const raw = {
    prompt_tokens: 2006,
    completion_tokens: 300,
    total_tokens: 2306,
    prompt_tokens_details: { cached_tokens: 1920, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 256 },
  };
  const parsed = parseOpenAiUsage(raw);
  assert.deepEqual(parsed?.usage, {
    promptTokens: 2006,
    completionTokens: 300,
    cachedTokens: 1920,
    reasoningTokens: 256,
  });
  assert.equal(parsed?.raw, raw, "the upstream's own object is kept for the client");
  assert.deepEqual(usageObject(parsed!.usage), {
    prompt_tokens: 2006,
    completion_tokens: 300,
    total_tokens: 2306,
    prompt_tokens_details: { cached_tokens: 1920 },
    completion_tokens_details: { reasoning_tokens: 256 },
  });
});
