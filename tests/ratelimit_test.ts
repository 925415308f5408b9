import assert from "node:assert/strict";
import fc from "fast-check";
import OpenAI from "openai";
import { keys, type RateLimitOverrides } from "@/lib/db.ts";
import { issueKey } from "@/lib/tenants/mod.ts";
import { rotateKey, Wallets } from "@/lib/billing/mod.ts";
import {
  formatDuration,
  RateWindows,
  retryAfterSeconds,
  setRateLimits,
  WINDOW_MS,
} from "@/lib/billing/ratelimit.ts";
import { countPromptTokens } from "@/lib/gateway/tokens.ts";
import { runAdmin } from "@/scripts/admin.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  startService,
  type TestService,
  userMessage,
} from "./helpers.ts";

const ECHO = "tollbooth/echo";
const T0 = Date.UTC(2026, 6, 29, 12, 0, 0);

/** A clock that stands still until a test moves it. */
function manualClock(start = T0) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms) };
}

async function withService(
  options: { rpm?: number; tpm?: number; now?: () => number },
  fn: (s: TestService) => Promise<void>,
) {
  const env: Record<string, string> = {};
  if (options.rpm) env.RATE_LIMIT_RPM = String(options.rpm);
  if (options.tpm) env.RATE_LIMIT_TPM = String(options.tpm);
  const service = await startService({ env, now: options.now });
  try {
    await fn(service);
    await assertAuditClean(service.kv);
  } finally {
    await service.close();
  }
}

const RESET = /^(?:0s|\d+ms|(?:\d+h)?(?:\d+m)?\d+(?:\.\d{1,3})?s)$/;

/** Parses the six headers, checking their form; fails when one is missing. */
function rateHeaders(res: Response) {
  const int = (name: string) => {
    const value = res.headers.get(name);
    assert.match(value ?? "", /^\d+$/, name);
    return Number(value);
  };
  const reset = (name: string) => {
    const value = res.headers.get(name) ?? "";
    assert.match(value, RESET, name);
    return parseDuration(value);
  };
  return {
    limitRequests: int("x-ratelimit-limit-requests"),
    remainingRequests: int("x-ratelimit-remaining-requests"),
    resetRequestsMs: reset("x-ratelimit-reset-requests"),
    limitTokens: int("x-ratelimit-limit-tokens"),
    remainingTokens: int("x-ratelimit-remaining-tokens"),
    resetTokensMs: reset("x-ratelimit-reset-tokens"),
  };
}

/** Go's duration notation, as clients such as go-openai parse it. */
function parseDuration(text: string): number {
  let ms = 0;
  for (const [, n, unit] of text.matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s)/g)) {
    ms += Number(n) * { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }[unit]!;
  }
  return Math.round(ms);
}

async function assertRateLimited(res: Response) {
  assert.equal(res.status, 429);
  const body = await res.json();
  assert.equal(body.error.code, "rate_limit_exceeded");
  assert.equal(body.error.type, "rate_limit_error");
  assert.equal(body.error.doc_url, `${PUBLIC_URL}/docs/errors#rate_limit_exceeded`);
  const retryAfter = res.headers.get("retry-after") ?? "";
  assert.match(retryAfter, /^[1-9]\d*$/);
  return { retryAfter: Number(retryAfter), message: body.error.message as string };
}

function hi(maxTokens = 10) {
  return { model: ECHO, messages: userMessage("Hi"), max_tokens: maxTokens };
}

Deno.test("reset durations are written like OpenAI's: 250ms, 1s, 1.5s, 6m0s, 1m30s", () => {
  const cases: [number, string][] = [
    [0, "0s"],
    [12, "12ms"],
    [250, "250ms"],
    [1000, "1s"],
    [1500, "1.5s"],
    [59_929, "59.929s"],
    [60_000, "1m0s"],
    [90_000, "1m30s"],
    [360_000, "6m0s"],
    [3_600_000, "1h0m0s"],
    [85_656_648, "23h47m36.648s"],
  ];
  for (const [ms, text] of cases) {
    assert.equal(formatDuration(ms), text);
    assert.equal(parseDuration(text), ms);
  }
});

Deno.test("Retry-After is whole seconds, rounded up, never 0", () => {
  assert.equal(retryAfterSeconds(0), 1);
  assert.equal(retryAfterSeconds(1), 1);
  assert.equal(retryAfterSeconds(1000), 1);
  assert.equal(retryAfterSeconds(1001), 2);
  assert.equal(retryAfterSeconds(59_999), 60);
});

Deno.test("the (N+1)th request in a window gets 429 with Retry-After; after waiting it, the next passes", () => {
  const clock = manualClock();
  return withService({ rpm: 3, now: clock.now }, async (s) => {
    const { appId, apiKey } = await s.newApp();
    for (const remaining of [2, 1, 0]) {
      const ok = await s.chat(apiKey, hi());
      assert.equal(ok.status, 200);
      await ok.body?.cancel();
      const h = rateHeaders(ok);
      assert.equal(h.limitRequests, 3);
      assert.equal(h.remainingRequests, remaining);
    }
    const before = await s.wallet(appId);
    const refused = await s.chat(apiKey, hi());
    const h = rateHeaders(refused);
    const { retryAfter, message } = await assertRateLimited(refused);
    // Three requests drain at 3 a minute: one fits again after 20 s, the bucket is empty after 60 s.
    assert.equal(retryAfter, 20);
    assert.equal(h.remainingRequests, 0);
    assert.equal(h.resetRequestsMs, 60_000);
    assert.match(message, /3 requests per minute/);

    // Nothing reserved, nothing charged, nothing counted.
    assert.deepEqual(await s.wallet(appId), before);
    assert.equal(
      (await Array.fromAsync(s.kv.list({ prefix: keys.appReservations(appId) }))).length,
      0,
    );

    // A stream over the limit gets a real 429 too, not a 200 with an error event.
    await assertRateLimited(await s.chat(apiKey, { ...hi(), stream: true }));

    clock.advance(retryAfter * 1000 - 1);
    const early = await s.chat(apiKey, hi());
    assert.equal((await assertRateLimited(early)).retryAfter, 1);

    clock.advance(1);
    const after = await s.chat(apiKey, hi());
    assert.equal(after.status, 200);
    await after.body?.cancel();
    assert.equal(rateHeaders(after).remainingRequests, 0);
  });
});

Deno.test("a 429 carries retry-after-ms, the exact wait the openai SDK reads first, beside Retry-After, the same wait rounded up to whole seconds", () => {
  const clock = manualClock();
  return withService({ rpm: 3, now: clock.now }, async (s) => {
    const { apiKey } = await s.newApp();
    for (let i = 0; i < 3; i++) await (await s.chat(apiKey, hi())).body?.cancel();
    // One request fits again 20 s after the three.
    clock.advance(12_345);
    const refused = await s.chat(apiKey, hi());
    assert.equal(refused.headers.get("retry-after-ms"), "7655");
    assert.equal((await assertRateLimited(refused)).retryAfter, 8);

    clock.advance(7654);
    const early = await s.chat(apiKey, hi());
    assert.equal(early.headers.get("retry-after-ms"), "1");
    assert.equal((await assertRateLimited(early)).retryAfter, 1);
    clock.advance(1);
    const after = await s.chat(apiKey, hi());
    assert.equal(after.status, 200);
    await after.body?.cancel();
  });
});

Deno.test("token limits bite on a large max_tokens before the request runs, and settle gives back the unused", () => {
  const clock = manualClock();
  return withService({ tpm: 1000, now: clock.now }, async (s) => {
    const { apiKey } = await s.newApp();
    const prompt = countPromptTokens(userMessage("Hi"));
    // A stream keeps its reservation, tokens included, until it ends.
    const streaming = await s.chat(apiKey, { ...hi(600), stream: true });
    assert.equal(streaming.status, 200);
    assert.equal(rateHeaders(streaming).remainingTokens, 1000 - (prompt + 600));

    const refused = await s.chat(apiKey, hi(600));
    const h = rateHeaders(refused);
    const { retryAfter, message } = await assertRateLimited(refused);
    // The refused request is not counted.
    assert.equal(h.remainingRequests, 599);
    assert.equal(h.remainingTokens, 1000 - (prompt + 600));
    // (prompt+600) * 2 - 1000 tokens must drain at 1000 a minute.
    assert.equal(retryAfter, retryAfterSeconds(((prompt + 600) * 2 - 1000) * 60));
    assert.match(message, /1000 tokens per minute/);

    // The stream ends having used prompt + 1 token; the rest of its reservation is given back.
    await streaming.text();
    const fits = await s.chat(apiKey, hi(600));
    assert.equal(fits.status, 200);
    const usage = (await fits.json()).usage;
    assert.equal(
      rateHeaders(fits).remainingTokens,
      1000 - (prompt + 1) - usage.total_tokens,
    );
  });
});

Deno.test("a request whose tokens exceed a whole minute's limit is a 400 on max_tokens, not a 429", () =>
  withService({ tpm: 500 }, async (s) => {
    const { appId, apiKey } = await s.newApp();
    const before = await s.wallet(appId);
    const res = await s.chat(apiKey, hi(600));
    assert.equal(res.status, 400);
    assert.equal(res.headers.get("retry-after"), null);
    assert.equal(rateHeaders(res).limitTokens, 500);
    const body = await res.json();
    assert.equal(body.error.code, "invalid_parameter");
    assert.equal(body.error.param, "max_tokens");
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("that 400 names max_completion_tokens when the client capped its output with it", () =>
  withService({ tpm: 500 }, async (s) => {
    const { appId, apiKey } = await s.newApp();
    const before = await s.wallet(appId);
    const { max_tokens, ...rest } = hi(600);
    const res = await s.chat(apiKey, { ...rest, max_completion_tokens: max_tokens });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error.param, "max_completion_tokens");
    assert.match(
      body.error.message,
      /prompt plus max_completion_tokens\b.*Lower max_completion_tokens\./,
    );
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("x-ratelimit headers are exact: remaining and reset follow the tokens actually used", () => {
  const clock = manualClock();
  return withService({ rpm: 100, tpm: 10_000, now: clock.now }, async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, hi());
    const total = (await res.json()).usage.total_tokens;
    const h = rateHeaders(res);
    assert.deepEqual(h, {
      limitRequests: 100,
      remainingRequests: 99,
      resetRequestsMs: WINDOW_MS / 100,
      limitTokens: 10_000,
      remainingTokens: 10_000 - total,
      resetTokensMs: Math.ceil(total * WINDOW_MS / 10_000),
    });
    assert.equal(res.headers.get("x-ratelimit-reset-requests"), "600ms");

    clock.advance(300);
    const half = rateHeaders(await s.chat(apiKey, hi()));
    // Half of the first request has drained: two requests' worth minus 300 ms.
    assert.equal(half.remainingRequests, 98);
    assert.equal(half.resetRequestsMs, 2 * 600 - 300);
  });
});

Deno.test("every authenticated response carries the headers: 400, 402, stream; a 401 does not", () =>
  withService({ rpm: 50 }, async (s) => {
    const { appId, apiKey } = await s.newApp();
    const badJson = await s.chat(apiKey, "{not json");
    assert.equal(badJson.status, 400);
    await badJson.body?.cancel();
    // Refused before the limiter: shown, not counted.
    assert.equal(rateHeaders(badJson).remainingRequests, 50);

    const badVersion = await s.chat(apiKey, hi(), {
      headers: { "tollbooth-version": "1999-01-01" },
    });
    assert.equal(badVersion.status, 400);
    await badVersion.body?.cancel();
    assert.equal(rateHeaders(badVersion).remainingRequests, 50);

    const stream = await s.chat(apiKey, { ...hi(), stream: true });
    assert.equal(stream.status, 200);
    await stream.text();
    assert.equal(rateHeaders(stream).remainingRequests, 49);

    const reserved = await reserveWholeBalance(s, appId);
    const broke = await s.chat(apiKey, hi());
    assert.equal(broke.status, 402);
    await broke.body?.cancel();
    // A 402 ran nothing, so it counts nothing.
    assert.equal(rateHeaders(broke).remainingRequests, 49);
    await reserved.release();

    const anonymous = await s.chat("tb_" + "0".repeat(36), hi());
    assert.equal(anonymous.status, 401);
    await anonymous.body?.cancel();
    assert.equal(anonymous.headers.get("x-ratelimit-limit-requests"), null);
  }));

/** Reserves the whole balance from outside the service, as another request in flight would. */
async function reserveWholeBalance(s: TestService, appId: string) {
  const wallets = new Wallets(s.kv, { leaseMs: 60_000 });
  const reserved = await wallets.reserve(appId, {
    amount: (await s.wallet(appId)).available,
    keyId: "key_other",
    requestId: "req_other",
    model: ECHO,
  });
  assert.ok(reserved.ok);
  return { release: () => wallets.release(appId, reserved.reservation.id) };
}

Deno.test("rate is decided before money: over its limit with an empty wallet is a 429, not a 402", () => {
  const clock = manualClock();
  return withService({ rpm: 1, now: clock.now }, async (s) => {
    const { appId, apiKey } = await s.newApp();
    const first = await s.chat(apiKey, hi());
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const reserved = await reserveWholeBalance(s, appId);
    await assertRateLimited(await s.chat(apiKey, hi()));
    clock.advance(WINDOW_MS);
    const broke = await s.chat(apiKey, hi());
    assert.equal(broke.status, 402);
    assert.equal((await broke.json()).error.code, "insufficient_credits");
    await reserved.release();
  });
});

Deno.test("the app's limit is shared by its keys; a key's own lower limit binds that key only", () => {
  const clock = manualClock();
  return withService({ rpm: 3, now: clock.now }, async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const other = await issueKey(s.kv, appId, "second", "operator");
    await setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" }, keyId);

    const a = await s.chat(apiKey, hi());
    assert.equal(a.status, 200);
    await a.body?.cancel();
    // The key's own limit is the tighter one in its headers.
    assert.equal(rateHeaders(a).limitRequests, 1);
    const limited = await assertRateLimited(await s.chat(apiKey, hi()));
    assert.match(limited.message, /this API key/);

    for (const remaining of [1, 0]) {
      const b = await s.chat(other.apiKey, hi());
      assert.equal(b.status, 200);
      await b.body?.cancel();
      assert.deepEqual(
        [rateHeaders(b).limitRequests, rateHeaders(b).remainingRequests],
        [3, remaining],
      );
    }
    const appLimited = await assertRateLimited(await s.chat(other.apiKey, hi()));
    assert.match(appLimited.message, /this app/);
  });
});

Deno.test("admin set-limits overrides an app's limits, show-app reports them, default restores", () => {
  const clock = manualClock();
  return withService({ rpm: 100, tpm: 50_000, now: clock.now }, async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const defaults = { rpm: 100, tpm: 50_000 };
    const set = await runAdmin(
      ["set-limits", "--app", appId, "--rpm", "2", "--tpm", "9000"],
      s.kv,
      PUBLIC_URL,
      defaults,
    );
    assert.deepEqual(set.output, { app_id: appId, rpm: 2, tpm: 9000 });
    const shown = await runAdmin(["show-app", "--app", appId], s.kv, PUBLIC_URL, defaults);
    assert.deepEqual((shown.output as { rate_limits: unknown }).rate_limits, { rpm: 2, tpm: 9000 });

    const res = await s.chat(apiKey, hi());
    await res.body?.cancel();
    assert.equal(rateHeaders(res).limitRequests, 2);
    assert.equal(rateHeaders(res).limitTokens, 9000);

    const forKey = await runAdmin(
      ["set-limits", "--app", appId, "--key", keyId, "--rpm", "1"],
      s.kv,
      PUBLIC_URL,
      defaults,
    );
    assert.deepEqual(forKey.output, { app_id: appId, key_id: keyId, rpm: 1, tpm: 9000 });
    const shownKey = await runAdmin(["show-app", "--app", appId], s.kv, PUBLIC_URL, defaults);
    assert.deepEqual(
      (shownKey.output as { keys: { rate_limits: unknown }[] }).keys[0].rate_limits,
      { rpm: 1, tpm: 9000 },
    );
    await assert.rejects(
      runAdmin(
        ["set-limits", "--app", appId, "--key", "key_nope", "--rpm", "1"],
        s.kv,
        PUBLIC_URL,
        defaults,
      ),
      /no live key/,
    );

    const cleared = await runAdmin(
      ["set-limits", "--app", appId, "--rpm", "default"],
      s.kv,
      PUBLIC_URL,
      defaults,
    );
    assert.deepEqual(cleared.output, { app_id: appId, rpm: 100, tpm: 9000 });
    await assert.rejects(
      runAdmin(["set-limits", "--app", appId, "--rpm", "0"], s.kv, PUBLIC_URL, defaults),
      /--rpm must be an integer/,
    );
    await assert.rejects(
      runAdmin(["set-limits", "--app", "app_nope", "--rpm", "5"], s.kv, PUBLIC_URL, defaults),
      /no app/,
    );
  });
});

Deno.test("two instances on one KV enforce one shared limit", async () => {
  const dir = await Deno.makeTempDir();
  const clock = manualClock();
  const env = { RATE_LIMIT_RPM: "4" };
  const a = await startService({ env, kvPath: `${dir}/kv.sqlite3`, now: clock.now });
  const b = await startService({ env, kvPath: `${dir}/kv.sqlite3`, now: clock.now });
  try {
    const { apiKey } = await a.newApp();
    // Concurrently on both instances: exactly four of ten get through.
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).chat(apiKey, hi())),
    );
    const statuses = await Promise.all(results.map(async (r) => {
      await r.body?.cancel();
      return r.status;
    }));
    assert.deepEqual(statuses.filter((x) => x === 200).length, 4, String(statuses));
    assert.deepEqual(statuses.filter((x) => x === 429).length, 6, String(statuses));
    await assertAuditClean(a.kv);
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the openai SDK's automatic retry honours our retry-after-ms and then succeeds", async () => {
  // 6000 tokens a minute drain at 100 a second: a nearly full bucket frees room in seconds.
  const service = await startService({ env: { RATE_LIMIT_TPM: "6000" } });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    service.handle,
  );
  try {
    const { apiKey } = await service.newApp();
    const baseURL = `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}/v1`;
    // Fill the bucket with a request the echo model answers in full (it keeps its tokens at
    // settle): about 5990 of 6000 tokens, so a 250-token request must wait about 2.5 s.
    const text = "lorem ".repeat(2990);
    const textTokens = countPromptTokens(userMessage(text)) - countPromptTokens(userMessage(""));
    assert.ok(countPromptTokens(userMessage(text)) + textTokens <= 6000);
    const fill = await service.chat(apiKey, {
      model: ECHO,
      messages: userMessage(text),
      max_tokens: textTokens,
    });
    assert.equal(fill.status, 200);
    await fill.body?.cancel();

    const seen: {
      status: number;
      retryAfter: string | null;
      retryAfterMs: string | null;
      at: number;
    }[] = [];
    const client = new OpenAI({
      baseURL,
      apiKey,
      maxRetries: 2,
      fetch: async (input: string | URL | Request, init?: RequestInit) => {
        const res = await fetch(input, init);
        seen.push({
          status: res.status,
          retryAfter: res.headers.get("retry-after"),
          retryAfterMs: res.headers.get("retry-after-ms"),
          at: Date.now(),
        });
        return res;
      },
    });
    const completion = await client.chat.completions.create({
      model: ECHO,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 250,
    });
    assert.equal(completion.choices[0].message.content, "Hi");
    assert.deepEqual(seen.map((r) => r.status), [429, 200]);
    // It waits the exact wait, which the whole seconds of Retry-After round up, and it is enough.
    const waited = seen[1].at - seen[0].at;
    const wait = Number(seen[0].retryAfterMs);
    assert.equal(Number(seen[0].retryAfter), Math.ceil(wait / 1000));
    assert.ok(waited >= wait - 50, `waited ${waited} ms`);
    await service.wallets.drain();
    await assertAuditClean(service.kv);
  } finally {
    await server.shutdown();
    await service.close();
  }
});

Deno.test("a 502 gives its tokens back: nothing ran, nothing counts but the request", () => {
  const clock = manualClock();
  return withService({ tpm: 5000, now: clock.now }, async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "nokey/gpt",
      messages: userMessage("Hi"),
      max_tokens: 1000,
    });
    assert.equal(res.status, 502);
    await res.body?.cancel();
    const h = rateHeaders(res);
    assert.equal(h.remainingTokens, 5000);
    assert.equal(h.remainingRequests, 599);
  });
});

Deno.test("only keys with limits of their own keep a window, and idle windows are pruned", () => {
  const clock = manualClock();
  return withService({ rpm: 10, now: clock.now }, async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const other = await issueKey(s.kv, appId, "second", "operator");
    const plain = await issueKey(s.kv, appId, "third", "operator");
    await setRateLimits(s.kv, appId, { rpm: 5 }, { by: "operator" }, keyId);
    await setRateLimits(s.kv, appId, { rpm: 5 }, { by: "operator" }, other.record.id);
    await (await s.chat(plain.apiKey, hi())).body?.cancel();
    await (await s.chat(apiKey, hi())).body?.cancel();
    const record = async () =>
      (await s.kv.get<{ keys: Record<string, unknown> }>(keys.rateWindows(appId))).value!;
    assert.deepEqual(Object.keys((await record()).keys), [keyId]);
    clock.advance(WINDOW_MS);
    await (await s.chat(other.apiKey, hi())).body?.cancel();
    assert.deepEqual(Object.keys((await record()).keys), [other.record.id]);
  });
});

Deno.test("Retry-After is exact: a refused request fits after retryAfterMs, and not 1 ms sooner", () => {
  // At least every limit drawn below: the app's own limits are held at or below the defaults.
  const defaults = { rpm: 50, tpm: 5000 };
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 50 }),
      fc.integer({ min: 10, max: 5000 }),
      fc.option(fc.record({ rpm: fc.integer({ min: 1, max: 50 }) }), { nil: undefined }),
      fc.array(
        fc.record({
          advance: fc.integer({ min: 0, max: 5000 }),
          tokens: fc.integer({ min: 0, max: 800 }),
        }),
        { maxLength: 40 },
      ),
      (rpm, tpm, keyOverride, steps) => {
        const overrides: RateLimitOverrides = {
          app: { rpm, tpm },
          keys: keyOverride ? { key_a: keyOverride } : {},
        };
        let windows = new RateWindows(defaults, overrides, null);
        let now = T0;
        for (const step of steps) {
          now += step.advance;
          const admission = windows.check("key_a", step.tokens, now);
          for (const d of [admission.status.requests, admission.status.tokens]) {
            assert.ok(d.remaining >= 0 && d.remaining <= d.limit);
          }
          if (admission.ok) {
            windows.consume("key_a", step.tokens, now);
            continue;
          }
          if (admission.reason === "too_large") {
            assert.ok(step.tokens > tpm);
            continue;
          }
          const later = (ms: number) =>
            new RateWindows(defaults, overrides, windows.record(now)).check(
              "key_a",
              step.tokens,
              now + ms,
            );
          assert.ok(admission.retryAfterMs >= 1);
          assert.equal(later(admission.retryAfterMs).ok, true);
          assert.equal(later(admission.retryAfterMs - 1).ok, false);
          windows = new RateWindows(defaults, overrides, windows.record(now));
        }
      },
    ),
    { numRuns: 300 },
  );
});

/** An app served from a wallet slice (its first request takes one), with a request in flight. */
async function busyOnSlice(s: TestService) {
  const app = await s.newApp();
  const warm = await s.chat(app.apiKey, hi());
  assert.equal(warm.status, 200);
  await warm.body?.cancel();
  // Held in the slice and not settled (a long stream's): the slice stays live with nothing to post.
  const inFlight = await s.wallets.reserve(app.appId, {
    amount: 1_000,
    keyId: app.keyId,
    requestId: "req_in_flight",
    model: ECHO,
  });
  assert.ok(inFlight.ok);
  return { ...app, release: () => s.wallets.release(app.appId, inFlight.reservation.id) };
}

async function sliceService(fn: (s: TestService) => Promise<void>) {
  const s = await startService({ env: { WALLET_SLICES: "on" } });
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

Deno.test("under wallet slices, a limit given to a busy key binds it within one recall check, not at the slice's next grant", () =>
  sliceService(async (s) => {
    const { appId, apiKey, keyId, release } = await busyOnSlice(s);
    await setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" }, keyId);
    await new Promise((r) => setTimeout(r, 300)); // slices look every 100 ms
    const first = await s.chat(apiKey, hi());
    assert.equal(first.status, 200);
    await first.body?.cancel();
    assert.equal(rateHeaders(first).limitRequests, 1, "served by the key's own window");
    await assertRateLimited(await s.chat(apiKey, hi()));
    await release();
  }));

Deno.test("under wallet slices, an app's limit lowered binds within one recall check, not at the slice's next grant", () =>
  sliceService(async (s) => {
    const { appId, apiKey, release } = await busyOnSlice(s);
    await setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" });
    await new Promise((r) => setTimeout(r, 300)); // slices look every 100 ms
    await assertRateLimited(await s.chat(apiKey, hi()));
    await release();
  }));

Deno.test("under wallet slices, a busy key with its own limit rotated mid-load: the new key is held to that limit", () =>
  sliceService(async (s) => {
    const { appId, keyId, release } = await busyOnSlice(s);
    await setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" }, keyId);
    const { issued } = await rotateKey(s.kv, keyId);
    await new Promise((r) => setTimeout(r, 300));
    const first = await s.chat(issued.apiKey, hi());
    assert.equal(first.status, 200);
    await first.body?.cancel();
    await assertRateLimited(await s.chat(issued.apiKey, hi()));
    await release();
  }));

Deno.test("a key limit set on a key that a rotation revoked is refused, not written where no key reads it", () =>
  withService({}, async (s) => {
    const { appId, keyId } = await s.newApp();
    const { issued } = await rotateKey(s.kv, keyId);
    await assert.rejects(
      setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" }, keyId),
      /no live key/,
    );
    const overrides = (await s.kv.get<RateLimitOverrides>(keys.rateLimitOverrides(appId))).value;
    assert.equal(overrides?.keys[keyId], undefined);
    await setRateLimits(s.kv, appId, { rpm: 1 }, { by: "operator" }, issued.record.id);
    const after = (await s.kv.get<RateLimitOverrides>(keys.rateLimitOverrides(appId))).value;
    assert.deepEqual(after?.keys[issued.record.id], { rpm: 1 });
  }));

Deno.test("a key with its own limit rotated after using it: the replacement starts with the minute's use, not an empty window", () => {
  const clock = manualClock();
  return withService({ now: clock.now }, async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setRateLimits(s.kv, appId, { rpm: 2 }, { by: "operator" }, keyId);
    for (let i = 0; i < 2; i++) {
      const used = await s.chat(apiKey, hi());
      assert.equal(used.status, 200);
      await used.body?.cancel();
    }
    const { issued } = await rotateKey(s.kv, keyId);
    await assertRateLimited(await s.chat(issued.apiKey, hi()));
    clock.advance(WINDOW_MS);
    const later = await s.chat(issued.apiKey, hi());
    assert.equal(later.status, 200);
    await later.body?.cancel();
    assert.equal(rateHeaders(later).limitRequests, 2);
  });
});
