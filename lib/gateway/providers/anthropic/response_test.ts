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
