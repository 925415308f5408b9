import assert from "node:assert/strict";
import {
  clientUsage,
  isTokenCount,
  MAX_REPORTED_TOKENS,
  parseOpenAiUsage,
  usageObject,
} from "./usage.ts";

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

Deno.test("reasoning a server counts apart from completion_tokens is billed as output", () => {
  // Gemini's compatibility layer: thinking is in total_tokens, not in completion_tokens.
  const gemini = parseOpenAiUsage({ prompt_tokens: 9, completion_tokens: 3, total_tokens: 105 });
  assert.deepEqual(gemini?.usage, { promptTokens: 9, completionTokens: 96 });
  assert.equal(gemini?.raw.completion_tokens, 96, "the client is shown what it was billed for");
  assert.equal(gemini?.raw.total_tokens, 105);
  // Reasoning above completion_tokens cannot be inside them.
  const apart = parseOpenAiUsage({
    prompt_tokens: 1000,
    completion_tokens: 500,
    completion_tokens_details: { reasoning_tokens: 2000 },
  });
  assert.equal(apart?.usage.completionTokens, 2500);
  // OpenAI's own: reasoning within completion_tokens, the total their sum; nothing changes.
  const openai = { prompt_tokens: 10, completion_tokens: 300, total_tokens: 310 };
  const same = parseOpenAiUsage({
    ...openai,
    completion_tokens_details: { reasoning_tokens: 256 },
  });
  assert.equal(same?.usage.completionTokens, 300);
  assert.equal(same?.raw.completion_tokens, 300);
});

Deno.test("OpenAI's cache_write_tokens (GPT-5.6 on) are cache writes, kept in the object a client is shown", () => {
  const raw = {
    prompt_tokens: 5000,
    completion_tokens: 40,
    total_tokens: 5040,
    prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 3840 },
  };
  const parsed = parseOpenAiUsage(raw);
  assert.deepEqual(parsed?.usage, {
    promptTokens: 5000,
    completionTokens: 40,
    cachedTokens: 1024,
    cacheWriteTokens: 3840,
  });
  assert.deepEqual(parsed?.raw, raw);
});

Deno.test("DeepSeek's prompt_cache_hit_tokens are cache reads", () => {
  const parsed = parseOpenAiUsage({
    prompt_tokens: 1000,
    completion_tokens: 500,
    total_tokens: 1500,
    prompt_cache_hit_tokens: 800,
    prompt_cache_miss_tokens: 200,
  });
  assert.equal(parsed?.usage.cachedTokens, 800);
});

Deno.test("the usage a client is shown carries what left the wallet as cost, never the upstream's own price", () => {
  const raw = {
    prompt_tokens: 1000,
    completion_tokens: 500,
    total_tokens: 1500,
    cost: 0.0123,
    cost_details: { upstream_inference_cost: 0.0101 },
    is_byok: false,
    prompt_tokens_details: { cached_tokens: 0 },
  };
  const usage = { promptTokens: 1000, completionTokens: 500 };
  assert.deepEqual(clientUsage(raw, usage, 2_000), {
    prompt_tokens: 1000,
    completion_tokens: 500,
    total_tokens: 1500,
    prompt_tokens_details: { cached_tokens: 0 },
    cost: "0.002000",
  });
  assert.deepEqual(clientUsage(null, usage, 2_000), { ...usageObject(usage), cost: "0.002000" });
});

Deno.test("a count past what any model can bill is read as no count, not charged", () => {
  const past = MAX_REPORTED_TOKENS + 1;
  assert.equal(parseOpenAiUsage({ prompt_tokens: past, completion_tokens: 1 }), null);
  assert.equal(parseOpenAiUsage({ prompt_tokens: 1, completion_tokens: 2 ** 53 - 1 }), null);
  const reasoning = parseOpenAiUsage({
    prompt_tokens: 1,
    completion_tokens: 1,
    completion_tokens_details: { reasoning_tokens: past },
  });
  assert.deepEqual(reasoning?.usage, { promptTokens: 1, completionTokens: 1 });
  assert.equal(isTokenCount(MAX_REPORTED_TOKENS), true);
  for (const odd of [past, 1e15, -1, 1.5, "5", null]) assert.equal(isTokenCount(odd), false);
});

Deno.test("the usage a client is shown has the billed counts: a total left out or wrong, cached tokens past the prompt, set right; other details kept", () => {
  const billed = { promptTokens: 10, completionTokens: 5, cachedTokens: 60 };
  const shown = clientUsage(
    {
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: -100,
      prompt_tokens_details: { cached_tokens: 60, audio_tokens: 0 },
    },
    billed,
    42,
  );
  assert.deepEqual(shown, {
    prompt_tokens: 10,
    completion_tokens: 5,
    total_tokens: 15,
    prompt_tokens_details: { cached_tokens: 10, audio_tokens: 0 },
    cost: "0.000042",
  });
  const noTotal = clientUsage(
    { prompt_tokens: 3, completion_tokens: 4 } as never,
    { promptTokens: 3, completionTokens: 4 },
    1,
  );
  assert.deepEqual(noTotal, {
    prompt_tokens: 3,
    completion_tokens: 4,
    total_tokens: 7,
    cost: "0.000001",
  });
});
