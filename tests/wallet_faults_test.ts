import assert from "node:assert/strict";
import { createApp } from "@/lib/tenants/mod.ts";
import { keys, type ReservationRecord, type UsageRecord, type WalletRecord } from "@/lib/db.ts";
import { sweepExpiredReservations } from "@/lib/billing/mod.ts";
import { Wallets } from "@/lib/billing/wallet.ts";
import { type SettleInput, WalletUnavailableError } from "@/lib/billing/wallet_types.ts";
import { type Fault, faultyKv, type Step } from "./faulty_kv.ts";
import { assertAuditClean } from "./helpers.ts";
import { openKv } from "@/lib/core/mod.ts";

const RESERVED = 1_000;
const COST = 700;

function usageOf(cost: number, requestId = "req_fault"): SettleInput {
  return {
    requestId,
    keyId: "key_fault",
    model: "tollbooth/echo",
    provider: "tollbooth",
    promptTokens: 3,
    completionTokens: 4,
    cost,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
  };
}

async function list<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<T[]> {
  const out: T[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry.value);
  return out;
}

async function walletOf(kv: Deno.Kv, appId: string) {
  return (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
}

/** One app on a fresh store, and a Wallets whose KV fails where the plan says. */
async function setup(plan: (step: Step, index: number) => Fault, maxAttempts?: number) {
  const real = await Deno.openKv(":memory:");
  const { app } = await createApp(real, { name: "faults" });
  const faulty = faultyKv(real, plan);
  const wallets = new Wallets(faulty.kv, { leaseMs: 60_000, maxAttempts });
  return { real, faulty, wallets, appId: app.id };
}

async function reserveAndSettle(wallets: Wallets, appId: string) {
  const reserved = await wallets.reserve(appId, {
    amount: RESERVED,
    keyId: "key_fault",
    requestId: "req_fault",
    model: "tollbooth/echo",
  });
  assert.ok(reserved.ok);
  const settled = await wallets.settle(appId, reserved.reservation.id, usageOf(COST));
  return { reserved, settled };
}

Deno.test("a KV failure injected at each step of reserve and settle is resolved: reservation and charge happen exactly once", async () => {
  // The steps of a clean reserve then settle, to know where faults can go.
  const clean = await setup(() => "ok");
  await reserveAndSettle(clean.wallets, clean.appId);
  const steps = [...clean.faulty.steps];
  clean.real.close();
  // The reserve reads the wallet (with its rate state) and commits; the settle trusts what that
  // commit left and only commits.
  assert.deepEqual(steps, ["getMany", "commit", "commit"]);

  const cases: { index: number; step: Step; fault: Fault }[] = [];
  steps.forEach((step, index) => {
    cases.push({ index, step, fault: "throw" });
    if (step === "commit") cases.push({ index, step, fault: "throw_after_commit" });
  });
  for (const c of cases) {
    const label = `${c.fault} at step ${c.index} (${c.step})`;
    const { real, faulty, wallets, appId } = await setup((_, i) => i === c.index ? c.fault : "ok");
    try {
      const { settled } = await reserveAndSettle(wallets, appId);
      assert.equal(faulty.injected.length, 1, label);
      assert.ok(settled.settled, label);
      assert.equal(settled.charged, COST, label);
      const wallet = await walletOf(real, appId);
      assert.equal(wallet.spent, COST, label);
      assert.equal(wallet.reserved, 0, label);
      assert.equal(wallet.available, 5_000_000 - COST, label);
      assert.equal((await list(real, keys.appReservations(appId))).length, 0, label);
      const usage = await list<UsageRecord>(real, keys.appUsage(appId));
      assert.deepEqual(usage.map((u) => u.cost), [COST], label);
      await assertAuditClean(real);
    } finally {
      real.close();
    }
  }
});

Deno.test("a reserve whose commit was applied but cannot be confirmed fails, and the sweeper releases the reservation", async () => {
  // Commit applied then throws; the five re-reads of the batch marker fail too.
  const { real, wallets, appId } = await setup((step, i) =>
    i === 1 ? "throw_after_commit" : i > 1 && i <= 6 && step === "get" ? "throw" : "ok"
  );
  try {
    await assert.rejects(
      wallets.reserve(appId, { amount: RESERVED, keyId: "k", requestId: "r", model: "m" }),
      WalletUnavailableError,
    );
    const reservations = await list<ReservationRecord>(real, keys.appReservations(appId));
    assert.equal(reservations.length, 1, "the commit did apply");
    await assertAuditClean(real);
    const sweeper = new Wallets(real, { leaseMs: 60_000 });
    const released = await sweepExpiredReservations(real, sweeper, reservations[0].leaseUntil);
    assert.equal(released, 1);
    const wallet = await walletOf(real, appId);
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [5_000_000, 0, 0]);
    await assertAuditClean(real);
  } finally {
    real.close();
  }
});

Deno.test("a settle whose commit was applied but cannot be confirmed is never charged twice on retry", async () => {
  let failing = false;
  const { real, faulty, wallets, appId } = await setup((step) => {
    if (!failing) return "ok";
    if (step === "commit") return "throw_after_commit";
    return step === "get" ? "throw" : "ok";
  });
  try {
    const reserved = await wallets.reserve(appId, {
      amount: RESERVED,
      keyId: "k",
      requestId: "r",
      model: "m",
    });
    assert.ok(reserved.ok);
    failing = true;
    faulty.plan = (step, i) => {
      const first = faulty.steps.indexOf("commit", 2);
      if (step === "commit" && (first === -1 || first === i)) return "throw_after_commit";
      return step === "get" && first !== -1 && i > first && i <= first + 5 ? "throw" : "ok";
    };
    await assert.rejects(
      wallets.settle(appId, reserved.reservation.id, usageOf(COST)),
      WalletUnavailableError,
    );
    faulty.plan = () => "ok";
    const again = await wallets.settle(appId, reserved.reservation.id, usageOf(COST));
    assert.equal(again.settled, false, "the retry finds the reservation already settled");
    const wallet = await walletOf(real, appId);
    assert.deepEqual([wallet.spent, wallet.reserved], [COST, 0]);
    assert.equal((await list(real, keys.appUsage(appId))).length, 1);
    await assertAuditClean(real);
  } finally {
    real.close();
  }
});

Deno.test("KV down for longer than the retry budget fails the call and changes no money", async () => {
  let down = false;
  const { real, wallets, appId } = await setup(() => down ? "throw" : "ok", 4);
  try {
    const reserved = await wallets.reserve(appId, {
      amount: RESERVED,
      keyId: "k",
      requestId: "r",
      model: "m",
    });
    assert.ok(reserved.ok);
    down = true;
    await assert.rejects(wallets.settle(appId, reserved.reservation.id, usageOf(COST)));
    await assert.rejects(
      wallets.reserve(appId, { amount: RESERVED, keyId: "k", requestId: "r2", model: "m" }),
    );
    const wallet = await walletOf(real, appId);
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [
      5_000_000 - RESERVED,
      RESERVED,
      0,
    ]);
    await assertAuditClean(real);
    down = false;
    const settled = await wallets.settle(appId, reserved.reservation.id, usageOf(COST));
    assert.ok(settled.settled);
    await assertAuditClean(real);
  } finally {
    real.close();
  }
});

Deno.test("settlements racing the sweeper from another instance are applied once: settle or release, never both, never neither", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/race.sqlite3`;
  // Two handles on one file, opened as the service opens its KV: a write that meets the other's
  // lock for a moment ("database is locked") is tried again, as in production.
  const kvA = await openKv(path);
  const kvB = await openKv(path);
  try {
    const apps = [];
    for (let i = 0; i < 3; i++) apps.push((await createApp(kvA, { name: `race ${i}` })).app.id);
    // Two processes: A serves requests, B sweeps; both see every lease as already run out.
    const clock = { now: Date.now() };
    const a = new Wallets(kvA, { leaseMs: 1, now: () => clock.now });
    const b = new Wallets(kvB, { leaseMs: 1, now: () => clock.now });
    const reservations: { appId: string; id: string; cost: number }[] = [];
    for (const appId of apps) {
      for (let i = 0; i < 40; i++) {
        const r = await a.reserve(appId, { amount: 5_000, keyId: "k", requestId: "r", model: "m" });
        assert.ok(r.ok);
        reservations.push({ appId, id: r.reservation.id, cost: 1_000 + i * 97 });
      }
    }
    clock.now += 10;
    const settles = reservations.map((h) => a.settle(h.appId, h.id, usageOf(h.cost)));
    const releases = reservations.map((h) => b.release(h.appId, h.id, clock.now));
    const sweep = sweepExpiredReservations(kvB, b, clock.now);
    const [settled, released] = await Promise.all([
      Promise.all(settles),
      Promise.all(releases),
      sweep,
    ]);
    let charged = 0;
    reservations.forEach((h, i) => {
      assert.notEqual(settled[i].settled, released[i].released, `reservation ${i}: exactly one`);
      if (settled[i].settled) charged += h.cost;
    });
    let spent = 0;
    for (const appId of apps) {
      const w = await walletOf(kvA, appId);
      assert.equal(w.reserved, 0);
      spent += w.spent;
    }
    assert.equal(spent, charged);
    await assertAuditClean(kvA);
  } finally {
    kvA.close();
    kvB.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a commit KV refuses as beyond its limits fails at once with KV's own error, not as conflicts", async () => {
  const { real, faulty, wallets, appId } = await setup(() => "ok", 4);
  try {
    const before = faulty.steps.filter((s) => s === "commit").length;
    await assert.rejects(
      wallets.credit(appId, { amount: 1, kind: "operator_credit", reason: "r".repeat(70_000) }),
      (error: Error) => /Value too large/.test(error.message) && !/conflicts/.test(error.message),
    );
    assert.equal(faulty.steps.filter((s) => s === "commit").length - before, 1, "never retried");
    assert.equal((await walletOf(real, appId)).available, 5_000_000);
    await assertAuditClean(real);
  } finally {
    real.close();
  }
});

Deno.test("commits that keep throwing fail with their own error once the retries run out, not as conflicts", async () => {
  const { real, wallets, appId } = await setup((step) => step === "commit" ? "throw" : "ok", 3);
  try {
    await assert.rejects(
      wallets.credit(appId, { amount: 1, kind: "operator_credit", reason: "r" }),
      (error: Error) =>
        error instanceof WalletUnavailableError && /injected commit failure/.test(error.message) &&
        !/conflicts/.test(error.message),
    );
    assert.equal((await walletOf(real, appId)).available, 5_000_000);
  } finally {
    real.close();
  }
});
