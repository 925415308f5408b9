import assert from "node:assert/strict";
import type { RateLimitOverrides } from "@/lib/db.ts";
import {
  MAX_LIMIT,
  rateLimitHeaders,
  rateLimitRefusal,
  RateWindows,
  validLimit,
  WINDOW_MS,
} from "./ratelimit.ts";

const T0 = Date.UTC(2026, 6, 29, 12, 0, 0);

function windows(
  limits = { rpm: 60, tpm: 1_000 },
  keys: RateLimitOverrides["keys"] = {},
) {
  return new RateWindows(limits, { app: {}, keys }, null);
}

Deno.test("an empty bucket admits a request and then reports the limit less it, empty again a request's drain later", () => {
  const w = windows({ rpm: 60, tpm: 1_000 });
  assert.equal(w.check("key_a", 100, T0).ok, true);
  const status = w.consume("key_a", 100, T0);
  assert.deepEqual(status.requests, { limit: 60, remaining: 59, resetMs: 1_000 });
  assert.deepEqual(status.tokens, { limit: 1_000, remaining: 900, resetMs: 6_000 });
});

Deno.test("the level drains continuously: after a burst of 60 at 60 a minute, one more fits each second", () => {
  const w = windows({ rpm: 60, tpm: 1_000_000 });
  for (let i = 0; i < 60; i++) w.consume("key_a", 0, T0);
  const refused = w.check("key_a", 0, T0);
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  assert.equal(refused.retryAfterMs, 1_000);
  assert.deepEqual(refused.breach, {
    scope: "app",
    dimension: "requests",
    limit: 60,
    requested: 1,
  });
  assert.equal(w.check("key_a", 0, T0 + 999).ok, false);
  assert.equal(w.check("key_a", 0, T0 + 1_000).ok, true);
  w.consume("key_a", 0, T0 + 1_000);
  assert.equal(w.check("key_a", 0, T0 + 1_999).ok, false, "only one fitted, not the next");
});

Deno.test("a request's tokens must fit the room left; the wait is until enough has drained", () => {
  const w = windows({ rpm: 600, tpm: 1_000 });
  w.consume("key_a", 800, T0);
  assert.equal(w.check("key_a", 200, T0).ok, true);
  const refused = w.check("key_a", 300, T0);
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  assert.equal(refused.breach.dimension, "tokens");
  // 100 tokens too many, draining at 1,000 a minute: 6 seconds.
  assert.equal(refused.retryAfterMs, 6_000);
  assert.equal(w.check("key_a", 300, T0 + 6_000).ok, true);
});

Deno.test("a request needing more tokens than a whole minute allows is too large; exactly the limit fits", () => {
  const w = windows({ rpm: 60, tpm: 1_000 });
  const refused = w.check("key_a", 1_001, T0);
  assert.ok(!refused.ok && refused.reason === "too_large");
  assert.deepEqual(refused.breach, {
    scope: "app",
    dimension: "tokens",
    limit: 1_000,
    requested: 1_001,
  });
  assert.equal(w.check("key_a", 1_000, T0).ok, true);
});

Deno.test("a key with its own lower limit is refused on its own bucket while the app has room", () => {
  const w = windows({ rpm: 60, tpm: 1_000 }, { key_a: { rpm: 2 } });
  w.consume("key_a", 0, T0);
  w.consume("key_a", 0, T0);
  const refused = w.check("key_a", 0, T0);
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  assert.equal(refused.breach.scope, "key");
  assert.equal(refused.retryAfterMs, 30_000, "a request drains every 30 s at 2 a minute");
  assert.equal(w.check("key_b", 0, T0).ok, true);
});

Deno.test("a key's requests count against its app, so the app's limit binds every key together", () => {
  const w = windows({ rpm: 3, tpm: 1_000 });
  w.consume("key_a", 0, T0);
  w.consume("key_b", 0, T0);
  w.consume("key_c", 0, T0);
  const refused = w.check("key_d", 0, T0);
  assert.ok(!refused.ok);
  assert.equal(refused.breach.scope, "app");
});

Deno.test("the wait is the longest of both dimensions and both scopes", () => {
  const w = windows({ rpm: 60, tpm: 1_000 }, { key_a: { rpm: 1 } });
  w.consume("key_a", 900, T0);
  const refused = w.check("key_a", 200, T0);
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  // Key requests: 1 a minute, 60 s to make room. Tokens: 100 over at 1,000 a minute, 6 s.
  assert.equal(refused.retryAfterMs, 60_000);
  assert.deepEqual(refused.breach, { scope: "key", dimension: "requests", limit: 1, requested: 1 });
  const tokensFirst = windows({ rpm: 60, tpm: 1_000 });
  tokensFirst.consume("key_a", 900, T0);
  const byTokens = tokensFirst.check("key_a", 200, T0);
  assert.ok(!byTokens.ok && byTokens.reason === "rate_limited");
  assert.equal(byTokens.retryAfterMs, 6_000);
  assert.equal(byTokens.breach.dimension, "tokens");
});

Deno.test("corrected tokens give back what was not used, and a level never drops below empty", () => {
  const w = windows({ rpm: 60, tpm: 1_000 });
  w.consume("key_a", 800, T0);
  const held = { reserved: 800, since: T0 };
  assert.equal(w.adjustTokens("key_a", -750, T0, held).tokens.remaining, 950);
  assert.equal(w.adjustTokens("key_a", -5_000, T0, held).tokens.remaining, 1_000);
  assert.equal(w.adjustTokens("key_a", 400, T0, held).tokens.remaining, 600);
});

Deno.test("a settle gives back no more than what is left of its own count: a long request's unused hold, drained, frees nothing", () => {
  const w = windows({ rpm: 1_000, tpm: 6_000 });
  // A holds 1,000 tokens at T0; at 100 tokens a second its count has drained by T0 + 10 s.
  w.consume("key_a", 1_000, T0);
  const later = T0 + 12_000;
  // A burst fills the window at 12 s.
  w.consume("key_a", 6_000, later);
  assert.equal(w.status("key_a", later).tokens.remaining, 0);
  // A settles having used 15 tokens: its 985 unused tokens had long drained.
  w.adjustTokens("key_a", 15 - 1_000, later, { reserved: 1_000, since: T0 });
  assert.equal(w.status("key_a", later).tokens.remaining, 0, "the burst's count stands");
  // Settled 4 s after its reserve, a hold of 1,000 has 600 left of its count to give back.
  const b = windows({ rpm: 1_000, tpm: 6_000 });
  b.consume("key_a", 1_000, T0);
  b.adjustTokens("key_a", -1_000, T0 + 4_000, { reserved: 1_000, since: T0 });
  assert.equal(b.status("key_a", T0 + 4_000).tokens.remaining, 6_000);
});

Deno.test("a correction of zero tokens writes nothing", () => {
  const w = windows();
  w.adjustTokens("key_a", 0, T0, { reserved: 0, since: T0 });
  assert.equal(w.changed, false);
  w.consume("key_a", 1, T0);
  assert.equal(w.changed, true);
});

Deno.test("a clock behind the window's last write never drains it backwards", () => {
  const w = windows({ rpm: 60, tpm: 1_000 });
  w.consume("key_a", 500, T0);
  const record = w.record(T0);
  const behind = new RateWindows({ rpm: 60, tpm: 1_000 }, null, record);
  assert.deepEqual(behind.status("key_a", T0 - 5_000), w.status("key_a", T0));
  assert.equal(behind.record(T0 - 5_000).app?.at, T0, "the window keeps its later time");
});

Deno.test("the status shown is the tighter scope: less room left, or on a tie the longer reset", () => {
  const w = windows({ rpm: 60, tpm: 1_000 }, { key_a: { rpm: 10, tpm: 1_000 } });
  w.consume("key_a", 100, T0);
  const status = w.status("key_a", T0);
  assert.deepEqual(status.requests, { limit: 10, remaining: 9, resetMs: 6_000 });
  // Tokens tie at 900 left on both scopes; both reset in 6 s.
  assert.deepEqual(status.tokens, { limit: 1_000, remaining: 900, resetMs: 6_000 });
  assert.deepEqual(w.status("key_b", T0).requests, { limit: 60, remaining: 59, resetMs: 1_000 });
});

Deno.test("only keys with limits of their own keep a window in the record", () => {
  const w = windows({ rpm: 60, tpm: 1_000 }, { key_a: { rpm: 10 } });
  w.consume("key_a", 10, T0);
  w.consume("key_b", 10, T0);
  const record = w.record(T0);
  assert.deepEqual(Object.keys(record.keys), ["key_a"]);
  assert.deepEqual(record.app, { requests: 2 * WINDOW_MS, tokens: 20 * WINDOW_MS, at: T0 });
});

Deno.test("the record drains every window to its time and drops those emptied", () => {
  const w = windows({ rpm: 60, tpm: 1_000 }, { key_a: { rpm: 10 } });
  w.consume("key_a", 100, T0);
  const half = w.record(T0 + 3_000);
  assert.deepEqual(half.app, {
    requests: 0,
    tokens: 100 * WINDOW_MS - 3_000 * 1_000,
    at: T0 + 3_000,
  });
  assert.deepEqual(half.keys.key_a, {
    requests: 60_000 - 30_000,
    tokens: 100 * WINDOW_MS - 3_000 * 1_000,
    at: T0 + 3_000,
  });
  assert.deepEqual(w.record(T0 + WINDOW_MS), { app: null, keys: {} });
});

Deno.test("the six x-ratelimit headers say the status, resets as durations", () => {
  const w = windows({ rpm: 60, tpm: 1_000 });
  const status = w.consume("key_a", 250, T0);
  assert.deepEqual(rateLimitHeaders(status), {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-limit-tokens": "1000",
    "x-ratelimit-remaining-tokens": "750",
    "x-ratelimit-reset-tokens": "15s",
  });
});

Deno.test("a request refused for rate is a 429 with Retry-After in whole seconds and retry-after-ms exact, naming whose limit", () => {
  const error = rateLimitRefusal(
    "rate_limited",
    { scope: "key", dimension: "requests", limit: 6, requested: 1 },
    1_001,
  );
  assert.equal(error.status, 429);
  assert.equal(error.code, "rate_limit_exceeded");
  assert.deepEqual(error.headers, { "retry-after": "2", "retry-after-ms": "1001" });
  assert.match(error.message, /this API key: 6 requests per minute/);
  assert.match(error.message, /Nothing was reserved or charged/);
});

Deno.test("a request that can never fit is a 400 on max_tokens, not a 429 a client would retry", () => {
  const error = rateLimitRefusal(
    "rate_too_large",
    { scope: "app", dimension: "tokens", limit: 1_000, requested: 1_001 },
    0,
  );
  assert.equal(error.status, 400);
  assert.equal(error.code, "invalid_parameter");
  assert.equal(error.param, "max_tokens");
  assert.deepEqual(error.headers, {});
  assert.match(error.message, /1001 tokens .* limit of 1000 tokens per minute for this app/);
});

Deno.test("a request that counts other tokens than a chat's names the field that lowers them", () => {
  const breach = { scope: "key", dimension: "tokens", limit: 100, requested: 150 } as const;
  const counted = { what: "the inputs", param: "input" };
  const tooLarge = rateLimitRefusal("rate_too_large", breach, 0, counted);
  assert.equal(tooLarge.param, "input");
  assert.match(tooLarge.message, /150 tokens \(the inputs\).*Lower input\./);
  const later = rateLimitRefusal("rate_limited", breach, 500, counted);
  assert.match(later.message, /this request counts 150: the inputs/);
});

Deno.test("a limit is a whole number from 1 to a billion", () => {
  for (const ok of [1, 60, MAX_LIMIT]) assert.equal(validLimit(ok), true, String(ok));
  for (const bad of [0, -1, 1.5, MAX_LIMIT + 1, NaN, Infinity]) {
    assert.equal(validLimit(bad), false, String(bad));
  }
});
