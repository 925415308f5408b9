import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import { createApp as createAppRecord, issueKey, KeyCache } from "@/lib/tenants/mod.ts";
import { KeyRevokedError, revokeKey, Wallets } from "@/lib/billing/mod.ts";
import {
  assertAuditClean,
  holdInput,
  settleInput,
  startService,
  until,
  userMessage,
} from "./helpers.ts";

const ECHO = "tollbooth/echo";
const HELLO = { model: ECHO, messages: userMessage("Hello"), max_tokens: 20 };

/** Two app instances (two processes' worth: each its own KV handle and caches) on one KV file. */
async function withTwoInstances(
  fn: (
    a: Awaited<ReturnType<typeof startService>>,
    b: Awaited<ReturnType<typeof startService>>,
  ) => Promise<void>,
  env?: Record<string, string>,
) {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const a = await startService({ kvPath, env });
  const b = await startService({ kvPath, env });
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

Deno.test("on a wallet slice, a key revoked on another instance is refused within a recall check, before any post", () =>
  withTwoInstances(async (a, b) => {
    const { apiKey, keyId } = await a.newApp();
    for (let i = 0; i < 3; i++) assert.equal((await b.chat(apiKey, HELLO)).status, 200);
    await revokeKey(a.kv, keyId);
    // The recall check runs every 100 ms; posts come a minute apart.
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(b.wallets.stats.slicePosts, 0, "nothing posted yet");
    const res = await b.chat(apiKey, HELLO);
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.code, "invalid_api_key");
    await b.wallets.drain();
  }, { WALLET_SLICES: "on", WALLET_SLICE_POST_MS: "60000" }));

Deno.test("on a wallet slice, a key revoked among more keys than a post's commit can check is refused within a recall check, the others served", async () => {
  // Posts come only from 64 waiting charges (the tick is a minute away).
  const s = await startService({
    env: { WALLET_SLICES: "on", WALLET_SLICE_POST_MS: "60000", RATE_LIMIT_RPM: "100000" },
  });
  try {
    const { appId, apiKey } = await s.newApp();
    const more = [];
    for (let i = 0; i < 19; i++) more.push(await issueKey(s.kv, appId, `key ${i}`, "operator"));
    // Twenty keys charged in the slice since its last post; the last one is then revoked.
    for (const raw of [apiKey, ...more.map((k) => k.apiKey)]) {
      assert.equal((await s.chat(raw, HELLO)).status, 200);
    }
    const revoked = more.at(-1)!;
    await revokeKey(s.kv, revoked.record.id);
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(s.wallets.stats.slicePosts, 0, "nothing posted");
    const res = await s.chat(revoked.apiKey, HELLO);
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.code, "invalid_api_key");
    assert.equal((await s.chat(more[0].apiKey, HELLO)).status, 200, "the other keys are served");
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("on a wallet slice, a key revoked between a post's read of its keys and its commit fails that commit and is caught by its retry", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    const cache = new KeyCache(s.kv);
    const issued = [];
    for (let i = 0; i < 12; i++) issued.push(await issueKey(s.kv, appId, `key ${i}`, "operator"));
    const authenticated = await Promise.all(
      issued.map(async (key) => (await cache.authenticate(key.apiKey))!),
    );
    // Read in the first of the post's reads (KV reads 10 keys at a time), with the count.
    const target = authenticated[1];
    // The revocation lands right after that read, before the post's commit.
    let armed = false;
    const kv = new Proxy(s.kv, {
      get(real, prop) {
        if (prop === "getMany") {
          return async (entries: Deno.KvKey[]) => {
            const read = await real.getMany(entries);
            if (armed && entries[0][0] === keys.appApiKeyRevocations(appId)[0]) {
              armed = false;
              await revokeKey(real, target.keyId);
            }
            return read;
          };
        }
        const value = Reflect.get(real, prop);
        return typeof value === "function" ? value.bind(real) : value;
      },
    });
    const wallets = new Wallets(kv, {
      leaseMs: 60_000,
      slices: { postEveryMs: 60_000, idleMs: 60_000 },
    });
    const charge = async (key: (typeof authenticated)[number], requestId: string) => {
      const held = await wallets.reserve(appId, {
        ...holdInput(requestId),
        keyId: key.keyId,
        keyGuard: key.keyGuard,
      });
      assert.ok(held.ok);
      await wallets.settle(appId, held.reservation.id, { ...settleInput(10), requestId });
    };
    for (const [i, key] of authenticated.entries()) await charge(key, `req_${i}`);
    armed = true;
    // The 64th waiting charge starts the post.
    for (let i = 12; i < 64; i++) await charge(authenticated[0], `req_${i}`);
    await until(() => wallets.stats.slicePosts >= 1, "the post of 64 waiting charges");
    assert.equal(armed, false, "the revocation landed between the read and the commit");
    assert.ok(wallets.stats.conflicts >= 1, "the commit failed its check of the revocations");
    await assert.rejects(
      wallets.reserve(appId, {
        ...holdInput("req_after"),
        keyId: target.keyId,
        keyGuard: target.keyGuard,
      }),
      KeyRevokedError,
    );
    await wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});
