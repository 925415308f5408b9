import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import {
  releaseExpiredReservations,
  sweepExpiredReservations,
  Wallets,
} from "@/lib/billing/mod.ts";
import { createApp } from "@/app.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig, requestLogLine } from "@/lib/core/mod.ts";
import { usageCost } from "@/lib/catalog/mod.ts";
import { WalletDesk } from "@/lib/gateway/wallet_desk.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  spendDownTo,
  startService,
  testCatalogFile,
  userMessage,
} from "./helpers.ts";

const LINE = { method: "POST", path: "/v1/chat/completions", status: 200, totalMs: 1 };

const reserveInput = (requestId: string, amount = 1_000) => ({
  amount,
  keyId: "key_t",
  requestId,
  model: "tollbooth/echo",
});

Deno.test("the sweeper releases reservations whose lease ran out, and only those", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    let now = 1_000_000;
    const wallets = new Wallets(s.kv, { leaseMs: 10_000, now: () => now });
    const old = await wallets.reserve(appId, reserveInput("old", 3_000));
    now += 5_000;
    const fresh = await wallets.reserve(appId, reserveInput("fresh", 2_000));
    assert.ok(old.ok && fresh.ok);
    assert.equal(await sweepExpiredReservations(s.kv, wallets, now + 5_000), 1);
    const w = await s.wallet(appId);
    assert.equal(w.reserved, 2_000);
    assert.equal(w.available, 5_000_000 - 2_000);
    assert.equal((await s.kv.get(keys.reservation(appId, old.reservation.id))).value, null);
    assert.equal(
      await sweepExpiredReservations(s.kv, wallets, now + 5_000),
      0,
      "a second sweep changes nothing",
    );
    await wallets.release(appId, fresh.reservation.id);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a settle that arrives after the sweeper released the reservation charges nothing and never twice", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    const wallets = new Wallets(s.kv, { leaseMs: 1 });
    const r = await wallets.reserve(appId, reserveInput("late", 5_000));
    assert.ok(r.ok);
    await new Promise((res) => setTimeout(res, 5));
    assert.equal(await sweepExpiredReservations(s.kv, wallets), 1);
    const settled = await wallets.settle(appId, r.reservation.id, {
      requestId: "late",
      keyId: "key_t",
      model: "tollbooth/echo",
      provider: "tollbooth",
      promptTokens: 10,
      completionTokens: 10,
      cost: 4_000,
      streamed: false,
      outcome: "completed",
      countedLocally: false,
    });
    assert.equal(settled.settled, false);
    const w = await s.wallet(appId);
    assert.deepEqual([w.available, w.reserved, w.spent], [5_000_000, 0, 0]);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a request settled after the sweeper released its reservation is charged nothing and its warning says what it cost", async () => {
  const s = await startService();
  try {
    const { appId, keyId } = await s.newApp();
    const wallets = new Wallets(s.kv, { leaseMs: 1 });
    const logs: Record<string, unknown>[] = [];
    const desk = new WalletDesk({
      kv: s.kv,
      wallets,
      publicUrl: PUBLIC_URL,
      log: (line) => logs.push(line),
    });
    const model = s.catalog.get("tollbooth/echo")!;
    const r = await wallets.reserve(appId, { ...reserveInput("late", 5_000), keyId });
    assert.ok(r.ok);
    await new Promise((res) => setTimeout(res, 5));
    assert.equal(await sweepExpiredReservations(s.kv, wallets), 1);
    const trace = {};
    const usage = { promptTokens: 1_000, completionTokens: 1_000 };
    const settled = await desk.settle({ appId, keyId }, r.reservation, model, usage, {
      requestId: "late",
      streamed: false,
      outcome: "completed",
      countedLocally: false,
    }, trace);
    const cost = usageCost(model, usage);
    assert.ok(cost > 0);
    assert.equal(settled.charged, 0);
    assert.deepEqual(logs, [{
      level: "warn",
      requestId: "late",
      event: "settle_after_release",
      appId,
      model: "tollbooth/echo",
      notCharged: cost,
    }]);
    assert.equal(requestLogLine({ ...LINE, requestId: "late" }, trace).cost, 0);
    const w = await s.wallet(appId);
    assert.deepEqual([w.available, w.reserved, w.spent], [5_000_000, 0, 0]);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a renewed lease keeps a long stream's reservation from the sweeper", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    let now = 0;
    const wallets = new Wallets(s.kv, { leaseMs: 1_000, now: () => now });
    const r = await wallets.reserve(appId, reserveInput("long"));
    assert.ok(r.ok);
    now = 900;
    const renewed = await wallets.renew(appId, r.reservation.id);
    assert.deepEqual(renewed, { renewed: true, leaseUntil: 1_900 });
    assert.equal(await sweepExpiredReservations(s.kv, wallets, 1_500), 0);
    assert.equal(await sweepExpiredReservations(s.kv, wallets, 1_900), 1);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("an app blocked only by reservations of a dead process is unblocked at once, without waiting for the cron", async () => {
  const s = await startService();
  try {
    const { appId, apiKey } = await s.newApp();
    await spendDownTo(s.kv, appId, 20_000);
    // A process that died with almost everything reserved, its lease long gone.
    const dead = new Wallets(s.kv, { leaseMs: 1, now: () => Date.now() - 60_000 });
    const stale = await dead.reserve(appId, reserveInput("dead", 19_950));
    assert.ok(stale.ok);
    const res = await s.chat(apiKey, {
      model: "tollbooth/echo",
      messages: userMessage("hi"),
      max_tokens: 100,
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    assert.equal((await s.wallet(appId)).reserved, 0);
    assert.equal(await releaseExpiredReservations(s.kv, s.wallets, appId), 0);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a flood of 402s looks for an app's expired reservations at most once a second", async () => {
  const real = await Deno.openKv(":memory:");
  let reservationScans = 0;
  const kv = new Proxy(real, {
    get(target, prop) {
      if (prop === "list") {
        return (selector: Deno.KvListSelector, options?: Deno.KvListOptions) => {
          if ("prefix" in selector && selector.prefix[0] === "reservations") reservationScans++;
          return target.list(selector, options);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const env = { PUBLIC_URL };
  const { app, wallets } = createApp({
    kv,
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(), env),
    log: () => {},
  });
  try {
    const { app: record, key } = await createAppRecord(real, { name: "flooded" });
    await spendDownTo(real, record.id, 100);
    const live = await new Wallets(real, { leaseMs: 60_000 }).reserve(
      record.id,
      reserveInput("live", 50),
    );
    assert.ok(live.ok);
    for (let i = 0; i < 10; i++) {
      const res = await app.fetch(
        new Request(`${PUBLIC_URL}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "tollbooth/echo", messages: userMessage("hi") }),
        }),
      );
      assert.equal(res.status, 402);
      await res.body?.cancel();
    }
    assert.equal(reservationScans, 1);
  } finally {
    await wallets.drain();
    real.close();
  }
});
