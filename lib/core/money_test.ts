import assert from "node:assert/strict";
import { formatPricePerMTok, formatUsd, parsePricePerMTok, parseUsd, tokensCost } from "./money.ts";

Deno.test("amounts format with exactly six fractional digits", () => {
  assert.equal(formatUsd(0), "0.000000");
  assert.equal(formatUsd(1), "0.000001");
  assert.equal(formatUsd(4_998_214), "4.998214");
  assert.equal(formatUsd(50_000_000), "50.000000");
  assert.equal(formatUsd(-15), "-0.000015");
});

Deno.test("USD strings parse exactly to micro-USD", () => {
  assert.equal(parseUsd("10"), 10_000_000);
  assert.equal(parseUsd("10.00"), 10_000_000);
  assert.equal(parseUsd("0.000001"), 1);
  assert.equal(parseUsd("4.998214"), 4_998_214);
  for (const bad of ["", "-1", "1.0000001", "1e3", "abc", "1.", ".5", "NaN"]) {
    assert.throws(() => parseUsd(bad), RangeError, bad);
  }
});

Deno.test("prices per million tokens are exact integers of pico-USD per token", () => {
  assert.equal(parsePricePerMTok("0.15"), 150_000n);
  assert.equal(parsePricePerMTok("15.00"), 15_000_000n);
  assert.equal(formatPricePerMTok(150_000n), "0.15");
  assert.equal(formatPricePerMTok(2_500_000n), "2.50");
  assert.equal(formatPricePerMTok(10_000_000n), "10.00");
});

Deno.test("a cost is summed exactly and rounded up once to the micro-dollar", () => {
  const input = parsePricePerMTok("0.15");
  const output = parsePricePerMTok("0.60");
  // 10 × 0.15 + 3 × 0.60 = 3.3 µUSD → 4, not 2 + 2 (each part rounded) nor 3 (rounded down).
  assert.equal(tokensCost(10, 3, input, output), 4);
  assert.equal(tokensCost(0, 0, input, output), 0);
  // Exact multiples are not rounded.
  assert.equal(tokensCost(1_000_000, 0, input, output), 150_000);
  assert.equal(tokensCost(1_000_000, 1_000_000, input, output), 750_000);
  assert.equal(tokensCost(1, 0, 1n, 0n), 1, "one pico-dollar still costs a micro-dollar");
});

Deno.test("a fraction of a micro-dollar is not an amount: formatting one is refused", () => {
  assert.throws(() => formatUsd(1.5), RangeError);
  assert.throws(() => formatUsd(Number.MAX_SAFE_INTEGER + 1), RangeError);
});

Deno.test("USD strings are read with surrounding whitespace ignored", () => {
  assert.equal(parseUsd(" 5.25\n"), 5_250_000);
});
