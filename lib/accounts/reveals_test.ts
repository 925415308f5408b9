import assert from "node:assert/strict";
import { keys, type SecretRevealRecord } from "@/lib/db.ts";
import { sha256Hex } from "@/lib/core/mod.ts";
import {
  apiKeyRevealOf,
  isManagementKeyReveal,
  leaveReveal,
  type Reveal,
  REVEAL_TTL_MS,
  takeReveal,
  webhookSecretRevealOf,
} from "./reveals.ts";

const SESSION = "s".repeat(39);
const REVEAL = {
  kind: "new_app",
  appId: "app_1",
  name: "default",
  secret: "tb_000000000000000000000000000000000000",
} satisfies Reveal;
const API_KEY_PAGE = apiKeyRevealOf("app_1");

async function withKv(fn: (kv: Deno.Kv) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await fn(kv);
  } finally {
    kv.close();
  }
}

Deno.test("a reveal is taken once: the second read finds nothing", () =>
  withKv(async (kv) => {
    const id = await leaveReveal(kv, SESSION, REVEAL);
    assert.deepEqual(await takeReveal(kv, SESSION, id, API_KEY_PAGE), REVEAL);
    assert.equal(await takeReveal(kv, SESSION, id, API_KEY_PAGE), null);
  }));

Deno.test("another session cannot take a reveal", () =>
  withKv(async (kv) => {
    const id = await leaveReveal(kv, SESSION, REVEAL);
    assert.equal(await takeReveal(kv, "t".repeat(39), id, API_KEY_PAGE), null);
    assert.deepEqual(await takeReveal(kv, SESSION, id, API_KEY_PAGE), REVEAL);
  }));

Deno.test("KV holds a reveal's secret sealed, never as text", () =>
  withKv(async (kv) => {
    const id = await leaveReveal(kv, SESSION, REVEAL);
    const stored = (await kv.get<SecretRevealRecord>(keys.secretReveal(sha256Hex(SESSION), id)))
      .value!;
    assert.ok(!JSON.stringify(stored).includes(REVEAL.secret));
    assert.ok(!new TextDecoder().decode(stored.sealed).includes(REVEAL.secret));
  }));

Deno.test("a reveal past its time is gone", () =>
  withKv(async (kv) => {
    const now = Date.now();
    const id = await leaveReveal(kv, SESSION, REVEAL, now);
    assert.equal(await takeReveal(kv, SESSION, id, API_KEY_PAGE, now + REVEAL_TTL_MS), null);
  }));

Deno.test("a reveal asked for on another page is left for its own page", () =>
  withKv(async (kv) => {
    const id = await leaveReveal(kv, SESSION, REVEAL);
    assert.equal(await takeReveal(kv, SESSION, id, apiKeyRevealOf("app_2")), null);
    assert.equal(await takeReveal(kv, SESSION, id, webhookSecretRevealOf("app_1")), null);
    assert.equal(await takeReveal(kv, SESSION, id, isManagementKeyReveal), null);
    assert.deepEqual(await takeReveal(kv, SESSION, id, API_KEY_PAGE), REVEAL);
  }));

Deno.test("a management key's and a webhook secret's reveals come back as left", () =>
  withKv(async (kv) => {
    const managementKey: Reveal = {
      kind: "new_management_key",
      name: "billing",
      secret: "tbm_0000000000000000000000000000000000000000",
    };
    const webhookSecret: Reveal = {
      kind: "replaced_webhook_secret",
      appId: "app_1",
      secret: "whsec_00000000000000000000000000000000000000",
    };
    const managementKeyId = await leaveReveal(kv, SESSION, managementKey);
    const webhookSecretId = await leaveReveal(kv, SESSION, webhookSecret);
    assert.deepEqual(
      await takeReveal(kv, SESSION, managementKeyId, isManagementKeyReveal),
      managementKey,
    );
    assert.deepEqual(
      await takeReveal(kv, SESSION, webhookSecretId, webhookSecretRevealOf("app_1")),
      webhookSecret,
    );
  }));
