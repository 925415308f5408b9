import assert from "node:assert/strict";
import { formatUsd, NotFoundError, parseUsd } from "@/lib/core/mod.ts";
import {
  getRateLimits,
  getSpendCaps,
  getSpendCounter,
  rotateKey,
  setRateLimits,
  setSpendCaps,
} from "@/lib/billing/mod.ts";
import { issueKey } from "@/lib/tenants/mod.ts";
import {
  serveLoopback,
  spendDownTo,
  type TestService,
  usageRecords,
  userMessage,
  withService,
} from "./helpers.ts";

/**
 * Caps the scope so that, after the request just made (which spent `cost` and held `reserved`), an
 * identical request no longer fits by one micro-dollar.
 */
async function capJustBelowNext(
  s: TestService,
  appId: string,
  target: { keyId: string } | { endUser: true },
  window: "total" | "daily",
) {
  const [last] = (await usageRecords(s.kv, appId)).slice(-1);
  const cap = last.cost + last.reserved - 1;
  await setSpendCaps(s.kv, appId, target, { [window]: cap });
  return { cap, remaining: last.reserved - 1 };
}

const request = (content: string, extra: Record<string, unknown> = {}) => ({
  model: "tollbooth/lorem",
  messages: userMessage(content),
  max_tokens: 8000,
  ...extra,
});

for (const slices of ["off", "on"]) {
  Deno.test(`200 concurrent requests against a key's total cap: holds count, so spent never passes the cap (WALLET_SLICES=${slices})`, () =>
    withService(async (s) => {
      const { appId, apiKey, keyId } = await s.newApp();
      // Each request holds ~12,300 µUSD (8000 output tokens at 1.50/M) and costs far less: counting
      // only what was spent, all 200 would start at once and spend well past the cap.
      const cap = 60_000;
      await setSpendCaps(s.kv, appId, { keyId }, { total: cap });
      const server = serveLoopback(s.handle);
      try {
        const responses = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
          const res = await fetch(`${server.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
            body: JSON.stringify(request(`request ${i}`)),
          });
          return { status: res.status, headers: res.headers, body: await res.json() };
        }));
        const ok = responses.filter((r) => r.status === 200);
        const capped = responses.filter((r) => r.status === 402);
        assert.equal(ok.length + capped.length, 200);
        assert.ok(ok.length > 0 && capped.length > 0);
        for (const r of capped) {
          assert.equal(r.body.error.code, "key_spend_cap_exceeded");
          assert.equal(r.body.error.type, "spend_cap_error");
          assert.equal(r.body.error.cap, "total");
          assert.equal(r.body.error.cap_amount, "0.060000");
        }
        const charged = ok.reduce(
          (n, r) => n + parseUsd(r.headers.get("tollbooth-request-cost")!),
          0,
        );
        await s.wallets.drain();
        const counter = await getSpendCounter(s.kv, appId, "key", keyId);
        assert.equal(counter.held, 0);
        assert.equal(counter.total, charged, "the counter is exactly what was charged");
        assert.ok(counter.total <= cap, `spent ${counter.total} ≤ cap ${cap}`);
        assert.equal((await s.wallet(appId)).spent, charged);
      } finally {
        await server.close();
      }
    }, { env: { WALLET_SLICES: slices } }));
}

Deno.test("a key's daily cap refuses for the rest of the UTC day (a 402 with the balance and top-up page, as every 402) and allows again the next day", async () => {
  let clock = Date.parse("2026-07-29T12:00:00Z");
  await withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { daily: 1_000_000 });
    assert.equal((await s.chat(apiKey, request("same"))).status, 200);
    const { remaining } = await capJustBelowNext(s, appId, { keyId }, "daily");
    const refused = await s.chat(apiKey, request("same"));
    assert.equal(refused.status, 402);
    const error = (await refused.json()).error;
    assert.equal(error.code, "key_spend_cap_exceeded");
    assert.equal(error.cap, "daily");
    assert.equal(error.remaining, (remaining / 1e6).toFixed(6));
    // Every 402 body carries the wallet's balance and top-up page (the spec's 402 body).
    assert.equal(error.balance, formatUsd((await s.wallet(appId)).available));
    assert.match(error.top_up_url, /\/top-up\/[0-9a-z]+$/);
    assert.equal((await getSpendCounter(s.kv, appId, "key", keyId, clock)).held, 0);

    clock = Date.parse("2026-07-30T00:00:01Z");
    assert.equal((await s.chat(apiKey, request("next day"))).status, 200);
  }, { now: () => clock });
});

Deno.test("an end user's cap stops that end user only; the key's other end users go on", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await setSpendCaps(s.kv, appId, { endUser: true }, { total: 1_000_000 });
    assert.equal((await s.chat(apiKey, request("same", { user: "alice" }))).status, 200);
    await capJustBelowNext(s, appId, { endUser: true }, "total");
    const refused = await s.chat(apiKey, request("same", { user: "alice" }));
    assert.equal(refused.status, 402);
    const error = (await refused.json()).error;
    assert.equal(error.code, "user_spend_cap_exceeded");
    assert.equal(error.param, "user");
    assert.equal((await s.chat(apiKey, request("c", { user: "bob" }))).status, 200);
    // Requests without a user are not end-user capped.
    assert.equal((await s.chat(apiKey, request("d"))).status, 200);
  }));

Deno.test("an end user's cap holds on /v1/responses as on chat, and the usage record names them", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await setSpendCaps(s.kv, appId, { endUser: true }, { total: 1 });
    const ask = (user: string) =>
      s.post(apiKey, "/responses", { model: "tollbooth/echo", input: "hi", user });
    const refused = await ask("alice");
    assert.equal(refused.status, 402);
    assert.equal((await refused.json()).error.code, "user_spend_cap_exceeded");
    // An empty name names no end user: not capped, and recorded without one.
    const nobody = await ask("");
    assert.equal(nobody.status, 200);
    await nobody.body?.cancel();
    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.user, undefined);
  }));

Deno.test("an end user's cap holds on /v1/embeddings as on chat, and the usage record names them", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    // A short embedding costs the smallest charge, one micro-dollar: the cap allows one.
    await setSpendCaps(s.kv, appId, { endUser: true }, { total: 1 });
    const embed = async (user: string) => {
      const res = await s.post(apiKey, "/embeddings", {
        model: "tollbooth/embed",
        input: "hi",
        user,
      });
      return { status: res.status, body: await res.json() };
    };
    assert.equal((await embed("alice")).status, 200);
    const refused = await embed("alice");
    assert.equal(refused.status, 402);
    assert.equal(refused.body.error.code, "user_spend_cap_exceeded");
    assert.equal((await embed("bob")).status, 200);
    const users = (await usageRecords(s.kv, appId)).map((r) => r.user).sort();
    assert.deepEqual(users, ["alice", "bob"]);
  }));

Deno.test("a burst of end users with the longest names is served: a wallet batch too large for one KV commit commits in parts", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await setSpendCaps(s.kv, appId, { endUser: true }, { total: 1_000_000 });
    // 256 characters of 3 UTF-8 bytes each: every end user's counter keys are long, and a batch
    // of a hundred reserves passes KV's 80 KiB of keys per commit.
    const user = (i: number) => "界".repeat(250) + String(i).padStart(6, "0");
    const answers = await Promise.all(Array.from({ length: 160 }, async (_, i) => {
      const res = await s.chat(apiKey, request("hi", { max_tokens: 5, user: user(i) }));
      await res.body?.cancel();
      return res.status;
    }));
    assert.deepEqual(new Set(answers), new Set([200]));
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 160);
    assert.equal(new Set(records.map((r) => r.user)).size, 160);
  }, { env: { WALLET_SLICES: "off", RATE_LIMIT_RPM: "100000" } }));

Deno.test("an empty wallet is insufficient_credits even under a cap, and a cap is not the wallet's 402", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 4_000_000 });
    await spendDownTo(s.kv, appId, 1_000);
    const res = await s.chat(apiKey, request("poor"));
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "insufficient_credits");
  }));

Deno.test("a request that fails upstream gives its hold back to the cap", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 20_000 });
    const failed = await s.chat(apiKey, { ...request("x"), model: "nokey/gpt", max_tokens: 100 });
    assert.equal(failed.status, 502);
    const counter = await getSpendCounter(s.kv, appId, "key", keyId);
    assert.deepEqual([counter.held, counter.total], [0, 0]);
    assert.equal((await s.chat(apiKey, request("after"))).status, 200);
  }));

Deno.test("a cap set while a wallet is remembered in memory applies from the very next request", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    assert.equal((await s.chat(apiKey, request("warm"))).status, 200);
    await setSpendCaps(s.kv, appId, { keyId }, { total: 1 });
    const res = await s.chat(apiKey, request("capped"));
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "key_spend_cap_exceeded");
  }));

Deno.test("under wallet slices, a cap set while a slice is live applies once the slice has posted", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    assert.equal((await s.chat(apiKey, request("warm"))).status, 200);
    await setSpendCaps(s.kv, appId, { keyId }, { total: 1 });
    // The slice admits in memory; its next post checks the caps entry and finds it changed.
    await s.chat(apiKey, request("admitted before the post"));
    await new Promise((r) => setTimeout(r, 200)); // posts run every 50 ms; idle slices stay 1 s
    const res = await s.chat(apiKey, request("capped"));
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "key_spend_cap_exceeded");
  }, { env: { WALLET_SLICES: "on" } }));

Deno.test("under wallet slices, an end users' cap set while the slice has nothing to post applies within one recall check", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    assert.equal((await s.chat(apiKey, request("warm"))).status, 200);
    // Held in the slice and not settled (a long stream's): the slice stays in use with nothing
    // to post, so no post would find the new cap.
    const inFlight = await s.wallets.reserve(appId, {
      amount: 1_000,
      keyId,
      requestId: "req_in_flight",
      model: "tollbooth/lorem",
    });
    assert.ok(inFlight.ok);
    await new Promise((r) => setTimeout(r, 150)); // the warm request's charge is posted
    await setSpendCaps(s.kv, appId, { endUser: true }, { total: 1 });
    await new Promise((r) => setTimeout(r, 300)); // recalls are looked for every 100 ms
    const res = await s.chat(apiKey, request("capped", { user: "carol" }));
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "user_spend_cap_exceeded");
    assert.equal((await getSpendCounter(s.kv, appId, "user", "carol")).total, 0);
    await s.wallets.release(appId, inFlight.reservation.id);
  }, { env: { WALLET_SLICES: "on" } }));

Deno.test("a rotated key keeps its spend cap and what it spent: the new key is refused once the remainder is spent", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    // Spending counts from when a cap is first set.
    await setSpendCaps(s.kv, appId, { keyId }, { total: 4_000_000 });
    assert.equal((await s.chat(apiKey, request("one"))).status, 200);
    const [first] = await usageRecords(s.kv, appId);
    // Room for exactly one more identical request after the first, counted across the rotation.
    const cap = 2 * first.cost + first.reserved - 1;
    await setSpendCaps(s.kv, appId, { keyId }, { total: cap });
    const { issued } = await rotateKey(s.kv, keyId);
    assert.equal((await s.chat(apiKey, request("one"))).status, 401, "the old key is revoked");
    const caps = await getSpendCaps(s.kv, appId);
    assert.equal(caps.keys[issued.record.id].total, cap);
    assert.equal(caps.keys[keyId], undefined);
    assert.equal((await getSpendCounter(s.kv, appId, "key", issued.record.id)).total, first.cost);

    let refused: Response | undefined;
    for (let i = 0; i < 5 && !refused; i++) {
      const res = await s.chat(issued.apiKey, request("one"));
      if (res.status === 402) refused = res;
      else assert.equal((await res.json()).object, "chat.completion");
    }
    assert.ok(refused, "the new key is capped");
    const records = await usageRecords(s.kv, appId);
    assert.ok(records.length >= 2, "the new key spent the remainder first");
    const spent = records.reduce((n, r) => n + r.cost, 0);
    const { error } = await refused.json();
    assert.equal(error.code, "key_spend_cap_exceeded");
    // What remains counts the old key's spend too.
    assert.equal(parseUsd(error.remaining), cap - spent);
  }));

Deno.test("a request of the old key in flight across a rotation settles on the cap the new key counts on", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 100_000 });
    const held = await s.wallets.reserve(appId, {
      amount: 40_000,
      keyId,
      requestId: "req_in_flight",
      model: "tollbooth/lorem",
    });
    assert.ok(held.ok);
    const { issued } = await rotateKey(s.kv, keyId);
    const newKey = issued.record.id;
    // The hold counts against the new key as it did against the old one.
    assert.equal((await getSpendCounter(s.kv, appId, "key", newKey)).held, 40_000);
    await s.wallets.settle(appId, held.reservation.id, {
      requestId: "req_in_flight",
      keyId,
      model: "tollbooth/lorem",
      provider: "tollbooth",
      promptTokens: 1,
      completionTokens: 1,
      cost: 30_000,
      streamed: false,
      outcome: "completed",
      countedLocally: false,
    });
    const counter = await getSpendCounter(s.kv, appId, "key", newKey);
    assert.deepEqual([counter.held, counter.total], [0, 30_000]);
    assert.equal((await s.chat(apiKey, request("old"))).status, 401);
  }));

Deno.test("under wallet slices, the old key of a rotated capped key is not served uncapped from a slice: it is refused, and the key's counter holds every charge of the key", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 4_000_000 });
    // An uncapped key of the app has it served from a slice.
    const other = await issueKey(s.kv, appId, "uncapped", "operator");
    assert.equal((await s.chat(other.apiKey, request("slice"))).status, 200);
    // The capped key is known to this process: its authentication and its caps are remembered.
    assert.equal((await s.chat(apiKey, request("before"))).status, 200);
    const { issued } = await rotateKey(s.kv, keyId);
    // The new key's first request reads the caps again, which no longer name the old key.
    assert.equal((await s.chat(issued.apiKey, request("new key"))).status, 200);
    const old = await s.chat(apiKey, request("old key"));
    assert.equal(old.status, 401, "the old key is revoked");
    await s.wallets.drain();
    const capped = (await usageRecords(s.kv, appId)).filter((u) => u.keyId !== other.record.id);
    const counter = await getSpendCounter(s.kv, appId, "key", issued.record.id);
    assert.equal(counter.total, capped.reduce((n, u) => n + u.cost, 0));
  }, { env: { WALLET_SLICES: "on" } }));

Deno.test("under wallet slices, a key rotated before its first reserve in a process (authenticated, then rotated away) is refused, not served uncapped from a slice outside its lineage's counter", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 4_000_000 });
    // This process reads the caps, which name the first key.
    assert.equal((await s.chat(apiKey, request("first key"))).status, 200);
    // The key's next secret authenticates here (a refused body reserves nothing, the key is
    // remembered), and is rotated away before it ever reserves: no caps this process reads name it.
    const { issued: second } = await rotateKey(s.kv, keyId);
    assert.equal((await s.chat(second.apiKey, { model: "tollbooth/lorem" })).status, 400);
    const { issued: third } = await rotateKey(s.kv, second.record.id);
    // An uncapped key of the app has it served from a slice granted after both rotations (one
    // granted before is recalled by them), and the new key's first request reads the caps again.
    const other = await issueKey(s.kv, appId, "uncapped", "operator");
    assert.equal((await s.chat(other.apiKey, request("slice"))).status, 200);
    assert.equal((await s.chat(third.apiKey, request("third key"))).status, 200);
    const old = await s.chat(second.apiKey, request("second key, rotated"));
    await s.wallets.drain();
    const capped = (await usageRecords(s.kv, appId)).filter((u) => u.keyId !== other.record.id);
    const counter = await getSpendCounter(s.kv, appId, "key", third.record.id);
    assert.equal(
      counter.total,
      capped.reduce((n, u) => n + u.cost, 0),
      "the key's usage uncounted",
    );
    assert.equal(old.status, 401, "the rotated key is revoked");
  }, { env: { WALLET_SLICES: "on" } }));

Deno.test("a cap lowered on a key that a rotation replaced meanwhile is refused, not left on the revoked key while its replacement spends past it", () =>
  withService(async (s) => {
    const { appId, keyId } = await s.newApp();
    await setSpendCaps(s.kv, appId, { keyId }, { total: 4_000_000 });
    // The owner's call found the key live; the rotation commits before its cap is written.
    const { issued } = await rotateKey(s.kv, keyId);
    const lowered = await setSpendCaps(s.kv, appId, { keyId }, { total: 1 }).then(
      () => "stored",
      (error) => error,
    );
    const server = serveLoopback(s.handle);
    try {
      await Promise.all(Array.from({ length: 20 }, async (_, i) => {
        const res = await fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${issued.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify(request(`after the lowering ${i}`)),
        });
        await res.body?.cancel();
      }));
    } finally {
      await server.close();
    }
    await s.wallets.drain();
    const spent = (await usageRecords(s.kv, appId)).reduce((n, u) => n + u.cost, 0);
    const counter = await getSpendCounter(s.kv, appId, "key", issued.record.id);
    assert.equal(counter.total, spent);
    assert.ok(
      lowered instanceof NotFoundError,
      `the cap was ${lowered} on the revoked key, and its replacement spent ${spent} past it`,
    );
    assert.equal((await getSpendCaps(s.kv, appId)).keys[issued.record.id].total, 4_000_000);
  }));

Deno.test("a key's own rate limit survives its rotation", () =>
  withService(async (s) => {
    const { appId, keyId } = await s.newApp();
    await setRateLimits(s.kv, appId, { rpm: 2 }, { by: "operator" }, keyId);
    const { issued } = await rotateKey(s.kv, keyId);
    const limits = await getRateLimits(s.kv, {
      rpm: s.config.rateLimitRpm,
      tpm: s.config.rateLimitTpm,
    }, appId);
    assert.equal(limits.keys[issued.record.id].rpm, 2);
    assert.equal(limits.keys[keyId], undefined);
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const res = await s.chat(issued.apiKey, { ...request(`r${i}`), max_tokens: 10 });
      statuses.push(res.status);
      await res.body?.cancel();
    }
    assert.deepEqual(statuses, [200, 200, 429]);
  }));
