import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import { createApp as createAppRecord, issueKey, KeyCache } from "@/lib/tenants/mod.ts";
import { revokeKey } from "@/lib/billing/mod.ts";
import { assertAuditClean, startService, userMessage } from "./helpers.ts";

const ECHO = "tollbooth/echo";
const HELLO = { model: ECHO, messages: userMessage("Hello"), max_tokens: 20 };

/** Two app instances (two processes' worth: each its own KV handle and caches) on one KV file. */
async function withTwoInstances(
  fn: (
    a: Awaited<ReturnType<typeof startService>>,
    b: Awaited<ReturnType<typeof startService>>,
  ) => Promise<void>,
) {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const a = await startService({ kvPath });
  const b = await startService({ kvPath });
  try {
    await fn(a, b);
    await assertAuditClean(a.kv);
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a key authenticated once is served from memory without a KV read", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { key } = await createAppRecord(kv, { name: "cache" });
    let reads = 0;
    const counting = new Proxy(kv, {
      get(target, prop) {
        const value = Reflect.get(target, prop);
        if (prop === "get") reads++;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const cache = new KeyCache(counting);
    const first = await cache.authenticate(key.apiKey);
    const second = await cache.authenticate(key.apiKey);
    assert.equal(reads, 1);
    assert.equal(first?.cached, false);
    assert.equal(second?.cached, true);
    assert.equal(second?.keyId, key.record.id);
    assert.equal(await cache.authenticate("tb_" + "0".repeat(36)), null, "unknown key");
    assert.equal(await cache.authenticate("tb_" + "0".repeat(36)), null, "never cached");
    assert.equal(reads, 3);
  } finally {
    kv.close();
  }
});

Deno.test("a key revoked on another instance fails its very next request with 401", () =>
  withTwoInstances(async (a, b) => {
    const { appId, apiKey, keyId } = await a.newApp();
    // Instance b learns the key and serves it from its cache.
    assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    await revokeKey(a.kv, keyId);
    const res = await b.chat(apiKey, HELLO);
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.code, "invalid_api_key");
    assert.equal((await b.chat(apiKey, HELLO)).status, 401, "and every request after");
    const wallet = await b.wallet(appId);
    assert.equal(wallet.reserved, 0, "the refused request reserves nothing");
    const usage = [];
    for await (const entry of a.kv.list({ prefix: keys.appUsage(appId) })) usage.push(entry);
    assert.equal(usage.length, 2, "only the two requests before the revocation were billed");
  }));

Deno.test("a quiet app's second revoked key fails its very next request too: a refused key does not make the app contended", () =>
  withTwoInstances(async (a, b) => {
    const { appId, apiKey, keyId } = await a.newApp();
    const useThenRevoke = async (raw: string, id: string) => {
      for (let i = 0; i < 2; i++) assert.equal((await b.chat(raw, HELLO)).status, 200);
      await revokeKey(a.kv, id);
      const res = await b.chat(raw, HELLO);
      assert.equal(res.status, 401);
      await res.body?.cancel();
    };
    await useThenRevoke(apiKey, keyId);
    // The first refusal failed b's wallet commit on the key's guard, not on another writer: the
    // app must stay on the per-request path, whose next commit sees the next revocation.
    const second = await issueKey(a.kv, appId, "second", "operator");
    await useThenRevoke(second.apiKey, second.record.id);
    const usage = [];
    for await (const entry of a.kv.list({ prefix: keys.appUsage(appId) })) usage.push(entry);
    assert.equal(usage.length, 4, "only the requests before each revocation were billed");
  }));

Deno.test("a revoked cached key gets 401 before any other error of its request", () =>
  withTwoInstances(async (a, b) => {
    const { apiKey, keyId } = await a.newApp();
    assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    await revokeKey(a.kv, keyId);
    const res = await b.chat(apiKey, { model: "no/such-model", messages: userMessage("Hi") });
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.code, "invalid_api_key");
    assert.match(res.headers.get("tollbooth-request-id") ?? "", /^req_/);
  }));

Deno.test("a cached key's own errors stay what they are while it is valid", () =>
  withTwoInstances(async (a, b) => {
    const { apiKey } = await a.newApp();
    assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    const res = await b.chat(apiKey, { model: "no/such-model", messages: userMessage("Hi") });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, "model_not_found");
  }));

Deno.test("a revoked key fails on the next request while its other requests are in flight", () =>
  withTwoInstances(async (a, b) => {
    const { apiKey, keyId } = await a.newApp();
    const other = await a.newApp("other app");
    assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    assert.equal((await b.chat(other.apiKey, HELLO)).status, 200);
    await revokeKey(a.kv, keyId);
    const statuses = await Promise.all(
      Array.from({ length: 10 }, (_, i) => b.chat(i % 2 ? apiKey : other.apiKey, HELLO))
        .map(async (p) => {
          const res = await p;
          await res.body?.cancel();
          return res.status;
        }),
    );
    assert.deepEqual(statuses, [200, 401, 200, 401, 200, 401, 200, 401, 200, 401]);
  }));
