/**
 * Several Tollbooth processes on one KV file (the local stand-in for Deno Deploy's KV and for a
 * self-hosted denokv) behave as one service: one wallet, no overdraft, exact totals, a revocation
 * seen by every instance.
 */
import assert from "node:assert/strict";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { parsePrometheus } from "./prometheus.ts";
import { admin, chat, type Instance, instanceFiles, PRICEY, startInstance } from "./instances.ts";

async function withInstances(
  count: number,
  fn: (ctx: { instances: Instance[]; kv: Deno.Kv; kvPath: string }) => Promise<void>,
) {
  const files = await instanceFiles({ models: [PRICEY] });
  const env = {
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    // These tests are about money and keys; the rate limiter must not be what refuses requests.
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
    METRICS_TOKEN: "multi-instance-metrics",
  };
  const instances = await Promise.all(Array.from({ length: count }, () => startInstance(env)));
  const kv = await Deno.openKv(files.kvPath);
  try {
    await fn({ instances, kv, kvPath: files.kvPath });
    for (const instance of instances) assert.equal((await instance.stop()).code, 0);
  } finally {
    kv.close();
    await Promise.all(instances.map((i) => i.stop()));
    await files.remove();
  }
}

Deno.test("two instances under concurrent load on one app: no overdraft, exact totals, audit clean", () =>
  withInstances(2, async ({ instances, kv, kvPath }) => {
    const { app, key } = await createAppRecord(kv, { name: "shared" });
    // Each request reserves about 0.05 USD and costs about 0.05 USD (50 tokens at 1000 USD/M): the
    // 5.00 USD cover about a hundred; 160 are sent, 40 at a time per instance, then the rest one
    // at a time.
    const body = {
      model: PRICEY.id,
      messages: [{ role: "user", content: "go" }],
      max_tokens: 50,
    };
    const results: { status: number; cost: string | null; balance: string | null }[] = [];
    const send = async (instance: Instance) => {
      const res = await chat(instance, key.apiKey, body);
      const out = {
        status: res.status,
        cost: res.headers.get("tollbooth-request-cost"),
        balance: res.headers.get("tollbooth-balance"),
      };
      await res.body?.cancel();
      results.push(out);
      return out;
    };
    for (let wave = 0; wave < 2; wave++) {
      await Promise.all(
        Array.from({ length: 80 }, (_, i) => send(instances[i % instances.length])),
      );
    }
    // One instance may refuse while the other's slice still holds money its own requests did not
    // need; an idle slice goes back within a second. Then what is left is served one at a time,
    // until both instances refuse.
    await new Promise((r) => setTimeout(r, 1_500));
    for (let i = 0, refusedInARow = 0; refusedInARow < instances.length && i < 200; i++) {
      const { status } = await send(instances[i % instances.length]);
      refusedInARow = status === 402 ? refusedInARow + 1 : 0;
    }
    const statuses = new Set(results.map((r) => r.status));
    assert.deepEqual([...statuses].sort(), [200, 402], "some paid, the rest refused for credits");
    for (const r of results.filter((r) => r.status === 200)) {
      assert.match(r.balance!, /^\d+\.\d{6}$/, "a balance is never negative");
    }

    // Counters are per instance and add up to the whole load; the reservation gauges are service-wide.
    const scrapes = await Promise.all(instances.map(async (instance) => {
      const res = await fetch(`${instance.url}/metrics`, {
        headers: { authorization: "Bearer multi-instance-metrics" },
      });
      return parsePrometheus(await res.text());
    }));
    const total = (status: string) =>
      scrapes.reduce(
        (sum, m) =>
          sum + (m.value("tollbooth_chat_completions_total", { model: PRICEY.id, status }) ?? 0),
        0,
      );
    assert.equal(total("200"), results.filter((r) => r.status === 200).length);
    assert.equal(total("402"), results.filter((r) => r.status === 402).length);
    for (const m of scrapes) {
      assert.equal(m.value("tollbooth_reservations_outstanding"), 0);
      assert.ok(m.value("tollbooth_wallet_commits_total")! > 0);
    }

    // Stopped, every instance has posted and given back any slice of the wallet it held (an app
    // whose commits met another writer's is served from slices): the wallet's own record is final.
    for (const instance of instances) assert.equal((await instance.stop()).code, 0);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    const charged = results
      .filter((r) => r.status === 200)
      .reduce((sum, r) => sum + parseUsd(r.cost!), 0);
    assert.equal(
      wallet.spent,
      charged,
      "what the headers said left the wallet, to the micro-dollar",
    );
    assert.equal(wallet.reserved, 0);
    assert.ok(wallet.available >= 0);
    assert.equal(wallet.available + wallet.spent, 5_000_000);
    assert.ok(wallet.available < 60_000, "the wallet was drained down to less than one request");

    const audit = await admin(kvPath, "audit");
    assert.equal(audit.code, 0, audit.stderr);
    assert.equal(audit.output.ok, true);
    assert.equal(audit.output.totals.spent, formatUsd(charged));
  }));

Deno.test("a key revoked with the admin command is refused by every instance at once", () =>
  withInstances(2, async ({ instances, kv, kvPath }) => {
    const { key } = await createAppRecord(kv, { name: "revoke" });
    const body = { model: PRICEY.id, messages: [{ role: "user", content: "go" }], max_tokens: 1 };
    for (const instance of instances) {
      const res = await chat(instance, key.apiKey, body);
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    const revoked = await admin(kvPath, "revoke-key", "--key", key.record.id);
    assert.equal(revoked.code, 0, revoked.stderr);
    for (const instance of instances) {
      const res = await chat(instance, key.apiKey, body);
      assert.equal(res.status, 401);
      assert.equal((await res.json()).error.code, "invalid_api_key");
    }
    const audit = await admin(kvPath, "audit");
    assert.equal(audit.code, 0, audit.stderr);
  }));
