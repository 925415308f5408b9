import assert from "node:assert/strict";
import { mergeCounts, NO_COUNTS, usageOfCounts } from "./response.ts";

const START = {
  input_tokens: 10,
  cache_creation_input_tokens: 900,
  cache_read_input_tokens: 100,
  cache_creation: { ephemeral_5m_input_tokens: 300, ephemeral_1h_input_tokens: 600 },
  output_tokens: 1,
};

Deno.test("cache writes kept for an hour are read from cache_creation and kept through later reports", () => {
  const counts = mergeCounts(mergeCounts(NO_COUNTS, START), { output_tokens: 42 });
  assert.deepEqual(usageOfCounts(counts, true), {
    promptTokens: 1010,
    completionTokens: 42,
    cachedTokens: 100,
    cacheWriteTokens: 900,
    cacheWrite1hTokens: 600,
  });
});

Deno.test("writes with no breakdown are an hour's when the request asked for any, else none are", () => {
  const { cache_creation: _, ...bare } = START;
  const counts = mergeCounts(NO_COUNTS, bare);
  assert.equal(usageOfCounts(counts, true)?.cacheWrite1hTokens, 900);
  assert.equal(usageOfCounts(counts, false)?.cacheWrite1hTokens, 0);
  // An odd breakdown is no breakdown.
  const odd = mergeCounts(NO_COUNTS, {
    ...bare,
    cache_creation: { ephemeral_1h_input_tokens: -1 },
  });
  assert.equal(usageOfCounts(odd, true)?.cacheWrite1hTokens, 900);
});

Deno.test("a later report that counts less than an earlier one is not the bill: input repeated as zeros keeps the prompt", () => {
  const zeroed = mergeCounts(mergeCounts(NO_COUNTS, START), {
    input_tokens: 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    output_tokens: 50,
  });
  assert.deepEqual(usageOfCounts(zeroed, true), {
    promptTokens: 1010,
    completionTokens: 50,
    cachedTokens: 100,
    cacheWriteTokens: 900,
    cacheWrite1hTokens: 600,
  });
  // The same counts again, or larger ones, are taken; an output that shrinks is not.
  const grown = mergeCounts(zeroed, { input_tokens: 20, output_tokens: 7 });
  assert.equal(usageOfCounts(grown, true)?.promptTokens, 1020);
  assert.equal(usageOfCounts(grown, true)?.completionTokens, 50);
});
