import assert from "node:assert/strict";
import type { Config } from "@/lib/core/mod.ts";
import {
  centsToMicros,
  isTopUpAmount,
  microsToCents,
  paymentMarker,
  paymentMode,
  paymentSourceOf,
  topUpAmountOfChoice,
  validateReturnUrl,
} from "./top_up.ts";

Deno.test("a form choice is one of 5, 10, 25 or 50 written plainly, in micro-USD", () => {
  assert.equal(topUpAmountOfChoice("5"), 5_000_000);
  assert.equal(topUpAmountOfChoice("10"), 10_000_000);
  assert.equal(topUpAmountOfChoice("25"), 25_000_000);
  assert.equal(topUpAmountOfChoice("50"), 50_000_000);
  for (const bad of ["1", "100", "10.00", "9.99", "-5", "0", "05", "1e1", "", "10 ", " 5", "0x5"]) {
    assert.equal(topUpAmountOfChoice(bad), null, JSON.stringify(bad));
  }
  for (const bad of [25, null, undefined, ["25"], { amount: "25" }]) {
    assert.equal(topUpAmountOfChoice(bad), null, String(bad));
  }
});

Deno.test("only the four offered amounts are top-up amounts", () => {
  for (const usd of [5, 10, 25, 50]) assert.equal(isTopUpAmount(usd * 1_000_000), true);
  for (const micros of [0, 1, 4_999_999, 5_000_001, 20_000_000, 100_000_000]) {
    assert.equal(isTopUpAmount(micros), false, String(micros));
  }
});

Deno.test("amounts convert exactly between micro-USD and Stripe's cents", () => {
  assert.equal(microsToCents(25_000_000), 2_500);
  assert.equal(centsToMicros(2_500), 25_000_000);
  assert.equal(centsToMicros(microsToCents(5_000_000)), 5_000_000);
});

Deno.test("purchases are paid by Stripe when its keys are set, the test checkout only when asked for, else unavailable", () => {
  const config = (c: Partial<Config>) => c as Config;
  assert.equal(paymentMode(config({ stripeSecretKey: "sk_test_x" }), false), "stripe");
  assert.equal(paymentMode(config({ stripeSecretKey: "sk_test_x" }), true), "stripe");
  assert.equal(
    paymentMode(config({ payments: "dev", stripeSecretKey: "sk_test_x" }), false),
    "dev",
  );
  assert.equal(paymentMode(config({ payments: "dev" }), false), "dev");
  assert.equal(paymentMode(config({}), true), "dev");
  assert.equal(paymentMode(config({}), false), "unavailable");
});

Deno.test("a payment's marker names its source and reference, so each payment credits once", () => {
  assert.equal(paymentMarker("stripe", "cs_test_abc"), "stripe:cs_test_abc");
  assert.equal(paymentMarker("dev", "devp_x"), "dev:devp_x");
  assert.notEqual(paymentMarker("stripe", "x"), paymentMarker("dev", "x"));
});

Deno.test("a receipt reference is a Checkout Session id or a test purchase id, nothing else", () => {
  assert.equal(paymentSourceOf("cs_test_a1B2c3"), "stripe");
  assert.equal(paymentSourceOf("cs_live_a1B2c3"), "stripe");
  assert.equal(paymentSourceOf(`devp_${"0".repeat(26)}`), "dev");
  for (
    const bad of [
      "",
      "cs_",
      "cs_test_",
      "cs_prod_abc",
      "cs_test_a-b",
      `cs_test_${"a".repeat(251)}`,
      `devp_${"0".repeat(25)}`,
      `devp_${"A".repeat(26)}`,
      "pi_123",
    ]
  ) {
    assert.equal(paymentSourceOf(bad), null, bad);
  }
});

Deno.test("return URLs must be absolute https, or http on localhost", () => {
  assert.equal(validateReturnUrl("https://example.com/a"), "https://example.com/a");
  assert.equal(validateReturnUrl("http://localhost:3000/x"), "http://localhost:3000/x");
  assert.equal(validateReturnUrl("http://127.0.0.1:3000/"), "http://127.0.0.1:3000/");
  for (
    const bad of [
      "http://example.com",
      "javascript:alert(1)",
      "//evil.example",
      "/relative",
      "data:text/html,x",
      "https://user:pass@example.com",
      "http://localhost.evil.example",
      "ftp://example.com",
      "",
      `https://example.com/${"a".repeat(2000)}`,
    ]
  ) {
    assert.throws(() => validateReturnUrl(bad), RangeError, bad);
  }
});
