import assert from "node:assert/strict";
import { buildCatalog } from "./catalog.ts";
import { reservationCost, usageCost } from "./pricing.ts";

function model(prices: Record<string, unknown>) {
  return buildCatalog({
    providers: { p: { kind: "simulator" } },
    models: [{
      id: "p/m",
      provider: "p",
      upstream_model: "m",
      context_tokens: 200_000,
      max_output_tokens: 8192,
      input_usd_per_mtok: "3.00",
      output_usd_per_mtok: "15.00",
      ...prices,
    }],
  }, {}).get("p/m")!;
}

Deno.test("every usage component is billed at its own price, summed exactly, rounded up once", () => {
  const sonnet = model({ cache_read_usd_per_mtok: "0.30", cache_write_usd_per_mtok: "3.75" });
  // 100 fresh input × 3 + 1000 cache reads × 0.30 + 50 cache writes × 3.75 + 80 output × 15,
  // in micro-USD per token: 300 + 300 + 187.5 + 1200 = 1987.5, rounded up once to 1988.
  assert.equal(
    usageCost(sonnet, {
      promptTokens: 1150,
      completionTokens: 80,
      cachedTokens: 1000,
      cacheWriteTokens: 50,
    }),
    1988,
  );
  // Rounding each component on its own would give 1989: the rule rounds once.
});

Deno.test("without cache prices in the catalog, cached input is billed at the input price", () => {
  const plain = model({});
  assert.equal(
    usageCost(plain, { promptTokens: 1000, completionTokens: 0, cachedTokens: 900 }),
    3000,
  );
});

Deno.test("reasoning tokens are part of the completion, billed once at the output price", () => {
  const plain = model({});
  assert.equal(
    usageCost(plain, { promptTokens: 0, completionTokens: 300, reasoningTokens: 256 }),
    4500,
  );
});

Deno.test("cached counts beyond the prompt are not believed: input is never made cheaper than read", () => {
  const cheap = model({ cache_read_usd_per_mtok: "0.30" });
  assert.equal(
    usageCost(cheap, { promptTokens: 10, completionTokens: 0, cachedTokens: 1_000_000 }),
    3,
  );
});

Deno.test("a reservation covers a prompt billed wholly as a cache write, at its dearer price", () => {
  const sonnet = model({ cache_read_usd_per_mtok: "0.30", cache_write_usd_per_mtok: "3.75" });
  const written = usageCost(sonnet, {
    promptTokens: 1000,
    completionTokens: 100,
    cacheWriteTokens: 1000,
  });
  assert.equal(written, 3750 + 1500);
  assert.ok(reservationCost(sonnet, 1000, 100) >= written);
  // Without a dearer cache-write price, the input price stands.
  assert.equal(reservationCost(model({}), 1000, 100), 3000 + 1500);
});

/** Sonnet's long-context rule: past 200K input tokens, the whole request at $6 / $22.50. */
function longContextModel() {
  return model({
    cache_read_usd_per_mtok: "0.30",
    cache_write_usd_per_mtok: "3.75",
    context_tokens: 1_000_000,
    long_context: {
      above_input_tokens: 200_000,
      input_usd_per_mtok: "6.00",
      output_usd_per_mtok: "22.50",
      cache_read_usd_per_mtok: "0.60",
      cache_write_usd_per_mtok: "7.50",
    },
  });
}

Deno.test("a request whose input passes the long-context size is billed at the tier's prices, every component", () => {
  const sonnet = longContextModel();
  const usage = { completionTokens: 1000, cachedTokens: 100_000, cacheWriteTokens: 1 };
  // At the size: the model's prices. 99,999 × 3 + 100,000 × 0.30 + 1 × 3.75 + 1,000 × 15.
  assert.equal(usageCost(sonnet, { ...usage, promptTokens: 200_000 }), 344_997 + 4);
  // One past it: the tier's. 100,000 × 6 + 100,000 × 0.60 + 1 × 7.50 + 1,000 × 22.50.
  assert.equal(usageCost(sonnet, { ...usage, promptTokens: 200_001 }), 682_508);
});

Deno.test("the reservation is at the tier's prices when the input bound passes the size, at the model's when not", () => {
  const sonnet = longContextModel();
  // Input at the dearer of input and cache write, output cap at the output price.
  assert.equal(reservationCost(sonnet, 200_000, 1000), 200_000 * 3.75 + 1000 * 15);
  assert.equal(reservationCost(sonnet, 200_001, 1000), 1_500_008 + 22_500);
});

Deno.test("a reservation above the size bounds the bill of any usage up to its bound, either side of the size", () => {
  const sonnet = longContextModel();
  for (const bound of [199_000, 200_000, 200_001, 250_000]) {
    const hold = reservationCost(sonnet, bound, 4096);
    for (const prompt of [bound - 2000, bound - 1, bound]) {
      for (const cached of [0, Math.floor(prompt / 2)]) {
        const cost = usageCost(sonnet, {
          promptTokens: prompt,
          completionTokens: 4096,
          cachedTokens: cached,
          cacheWriteTokens: prompt - cached,
        });
        assert.ok(cost <= hold, `bound ${bound}, prompt ${prompt}: ${cost} > ${hold}`);
      }
    }
  }
});

Deno.test("writes kept for an hour are billed at the 1-hour write price, and a request that asks for them is reserved at it", () => {
  const sonnet = model({
    cache_read_usd_per_mtok: "0.30",
    cache_write_usd_per_mtok: "3.75",
    cache_write_1h_usd_per_mtok: "6.00",
  });
  // 100 fresh × 3 + 300 five-minute writes × 3.75 + 600 one-hour writes × 6 + 10 output × 15.
  assert.equal(
    usageCost(sonnet, {
      promptTokens: 1000,
      completionTokens: 10,
      cacheWriteTokens: 900,
      cacheWrite1hTokens: 600,
    }),
    300 + 1125 + 3600 + 150,
  );
  const allHour = { promptTokens: 1000, completionTokens: 100, cacheWriteTokens: 1000 };
  const written = usageCost(sonnet, { ...allHour, cacheWrite1hTokens: 1000 });
  assert.equal(written, 6000 + 1500);
  assert.equal(reservationCost(sonnet, 1000, 100, true), written);
  assert.equal(reservationCost(sonnet, 1000, 100), 3750 + 1500, "no 1-hour breakpoint asked");
  // A provider reporting more hour writes than writes is not believed past the writes.
  assert.equal(
    usageCost(sonnet, { ...allHour, cacheWriteTokens: 10, cacheWrite1hTokens: 50 }),
    990 * 3 + 60 + 1500,
  );
});
