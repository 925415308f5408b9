import assert from "node:assert/strict";
import { keys, type SecretRevealRecord } from "@/lib/db.ts";
import { sha256Hex } from "@/lib/core/mod.ts";
import { leaveReveal, type Reveal, REVEAL_TTL_MS, takeReveal } from "./reveals.ts";

const SESSION = "s".repeat(39);
const REVEAL: Reveal = {
  kind: "new_app",
  appId: "app_1",
  name: "default",
  secret: "tb_000000000000000000000000000000000000",
};

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
    assert.deepEqual(await takeReveal(kv, SESSION, id), REVEAL);
    assert.equal(await takeReveal(kv, SESSION, id), null);
  }));

Deno.test("another session cannot take a reveal", () =>
  withKv(async (kv) => {
    const id = await leaveReveal(kv, SESSION, REVEAL);
    assert.equal(await takeReveal(kv, "t".repeat(39), id), null);
    assert.deepEqual(await takeReveal(kv, SESSION, id), REVEAL);
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
    assert.equal(await takeReveal(kv, SESSION, id, now + REVEAL_TTL_MS), null);
  }));
