import assert from "node:assert/strict";
import OpenAI from "openai";
import { revokeKey } from "@/lib/billing/mod.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  serveLoopback,
  startService,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import { API_VERSION } from "@/routes/middleware.ts";

const ONE = "/models/{model}";

async function withService(
  fn: (s: TestService, app: { appId: string; apiKey: string; keyId: string }) => Promise<void>,
  options: Parameters<typeof startService>[0] = {},
) {
  const s = await startService(options);
  try {
    await fn(s, await s.newApp());
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

Deno.test("GET /v1/models lists every catalog model in OpenAI's list shape with type, context and prices", () =>
  withService(async (s, { apiKey }) => {
    const res = await s.get(apiKey, "/models");
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.object, "list");
    assert.deepEqual(body.data.map((m: { id: string }) => m.id), s.catalog.models.map((m) => m.id));
    const echo = body.data.find((m: { id: string }) => m.id === "tollbooth/echo");
    assert.deepEqual(echo, {
      id: "tollbooth/echo",
      object: "model",
      created: Date.parse(API_VERSION) / 1000,
      owned_by: "tollbooth",
      type: "chat",
      context_tokens: 32768,
      max_output_tokens: 8192,
      pricing: { input_usd_per_mtok: "0.50", output_usd_per_mtok: "1.50" },
    });
    const fake = body.data.find((m: { id: string }) => m.id === "fake/gpt");
    assert.deepEqual(fake.pricing, { input_usd_per_mtok: "2.00", output_usd_per_mtok: "8.00" });
    assert.equal(fake.owned_by, "fake");
  }));

Deno.test("GET /v1/models/{model} answers one model, its slash sent plain or percent-encoded", () =>
  withService(async (s, { apiKey }) => {
    for (const path of ["/models/tollbooth/tiny", "/models/tollbooth%2Ftiny"]) {
      const res = await s.get(apiKey, path, { template: ONE });
      assert.equal(res.status, 200, path);
      const model = await res.json();
      assert.equal(model.id, "tollbooth/tiny");
      assert.equal(model.object, "model");
      assert.equal(model.context_tokens, 64);
      assert.equal(model.max_output_tokens, 32);
    }
  }));

Deno.test("GET /v1/models/{model} of a model off the list is 404 not_found with param model", () =>
  withService(async (s, { apiKey }) => {
    const res = await s.get(apiKey, "/models/openai/gpt-9", { template: ONE });
    assert.equal(res.status, 404);
    const { error } = await res.json();
    assert.equal(error.code, "not_found");
    assert.equal(error.param, "model");
    assert.match(error.message, /openai\/gpt-9/);
    assert.ok(res.headers.get("x-ratelimit-limit-requests"), "rate-limit headers on the 404");
  }));

Deno.test("listing models needs a live app key: missing, unknown and revoked keys get 401", () =>
  withService(async (s, { apiKey, keyId }) => {
    for (const key of [null, "tb_not_a_real_key_000000000000000000000000"]) {
      const res = await s.get(key, "/models");
      assert.equal(res.status, 401);
      assert.equal((await res.json()).error.code, "invalid_api_key");
      assert.equal(res.headers.get("x-ratelimit-limit-requests"), null);
    }
    // The key is cached by its first use; its revocation still counts from the next request.
    assert.equal((await s.get(apiKey, "/models")).status, 200);
    await revokeKey(s.kv, keyId);
    const revoked = await s.get(apiKey, "/models");
    assert.equal(revoked.status, 401);
    assert.equal((await revoked.json()).error.code, "invalid_api_key");
  }));

Deno.test("listing models is free and not counted against the rate limits, yet shows them", () =>
  withService(async (s, { appId, apiKey }) => {
    const before = await s.wallet(appId);
    for (let i = 0; i < 5; i++) {
      const res = await s.get(apiKey, i % 2 ? "/models" : "/models/tollbooth/echo", {
        template: i % 2 ? "/models" : ONE,
      });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("x-ratelimit-limit-requests"), "2");
      assert.equal(res.headers.get("x-ratelimit-remaining-requests"), "2");
      assert.equal(res.headers.get("tollbooth-request-cost"), null);
    }
    assert.deepEqual(await s.wallet(appId), before);
    assert.deepEqual(await usageRecords(s.kv, appId), []);
    // Both requests of the minute are still there for paid calls.
    for (let i = 0; i < 2; i++) {
      const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
      assert.equal(chat.status, 200);
      await chat.body?.cancel();
    }
    assert.equal((await s.get(apiKey, "/models")).status, 200);
  }, { env: { RATE_LIMIT_RPM: "2" } }));

Deno.test("listing models refuses an unsupported Tollbooth-Version like every API call", () =>
  withService(async (s, { apiKey }) => {
    const res = await s.get(apiKey, "/models", { headers: { "tollbooth-version": "2020-01-01" } });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, "unsupported_version");
    assert.equal(res.headers.get("tollbooth-version"), API_VERSION);
    assert.ok(res.headers.get("tollbooth-request-id"));
  }));

Deno.test("the openai npm client lists and retrieves models", async () => {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { apiKey } = await s.newApp();
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
    const ids: string[] = [];
    for await (const model of client.models.list()) ids.push(model.id);
    assert.deepEqual(ids, s.catalog.models.map((m) => m.id));
    const one = await client.models.retrieve("fake/gpt");
    assert.equal(one.id, "fake/gpt");
    assert.equal(one.owned_by, "fake");
    await assert.rejects(client.models.retrieve("fake/none"), OpenAI.NotFoundError);
  } finally {
    await server.close();
    await s.close();
  }
});

Deno.test("GET /v1/models/{model} with an id longer than any model's is 404 not_found with param model, never a 500", () =>
  withService(async (s, { apiKey }) => {
    for (const id of ["a".repeat(5000), "x%2F".repeat(200), "tollbooth/" + "a".repeat(600)]) {
      const res = await s.get(apiKey, `/models/${id}`, { template: ONE });
      assert.equal(res.status, 404, id.slice(0, 20));
      const { error } = await res.json();
      assert.equal(error.code, "not_found");
      assert.equal(error.param, "model");
    }
  }));

Deno.test("the models page shows each model's cache prices, the hour's writes beside the 5-minute ones", async () => {
  const shipped = JSON.parse(
    await Deno.readTextFile(new URL("../config/models.json", import.meta.url)),
  );
  await withService(async (s) => {
    const res = await s.handle(new Request(`${PUBLIC_URL}/models`));
    assert.equal(res.status, 200);
    const html = await res.text();
    const claude = s.catalog.models.find((m) =>
      m.cacheWrite1hUsdPerMTok !== null && m.cacheWrite1hUsdPerMTok !== m.cacheWriteUsdPerMTok
    );
    assert.ok(claude, "the shipped catalog has a model with an hour's cache price");
    const row = new RegExp(`<code>${claude.id}</code>.*?</tr>`, "s").exec(html)?.[0] ?? "";
    assert.ok(row.includes(`$${claude.cacheReadUsdPerMTok}`), row);
    assert.ok(
      row.includes(`$${claude.cacheWriteUsdPerMTok} (1 h: $${claude.cacheWrite1hUsdPerMTok})`),
      row,
    );
    assert.match(html, /cached-input price/);
  }, { catalogFile: shipped });
});
