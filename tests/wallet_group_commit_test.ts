import assert from "node:assert/strict";
import { createApp as createAppRecord, issueKey } from "@/lib/tenants/mod.ts";
import { revokeKey } from "@/lib/billing/mod.ts";
import { keys } from "@/lib/db.ts";
import type { WalletRecord } from "@/lib/db.ts";
import { Wallets } from "@/lib/billing/wallet.ts";
import { KeyRevokedError } from "@/lib/billing/wallet_types.ts";
import { openKv } from "@/lib/core/mod.ts";
import { assertAuditClean, settleInput } from "./helpers.ts";

const LEASE_MS = 60_000;

function reserveInput(amount: number, keyGuard?: { key: Deno.KvKey; versionstamp: string }) {
  return { amount, keyId: "key_test", requestId: "req_test", model: "tollbooth/echo", keyGuard };
}

/** The sum of the KvU64 spend counters under a prefix. */
async function counterTotal(kv: Deno.Kv, prefix: Deno.KvKey): Promise<number> {
  let total = 0n;
  for await (const entry of kv.list<Deno.KvU64>({ prefix })) total += entry.value.value;
  return Number(total);
}

async function walletOf(kv: Deno.Kv, appId: string): Promise<WalletRecord> {
  const entry = await kv.get<WalletRecord>(keys.wallet(appId));
  assert.ok(entry.value);
  return entry.value;
}

/** Counts the checks of every atomic operation, and can make a commit throw before or after it applies. */
function instrumentedKv(kv: Deno.Kv) {
  const control = {
    maxChecks: 0,
    commits: 0,
    failNext: null as null | "before" | "after",
  };
  const wrapAtomic = (op: Deno.AtomicOperation) => {
    let checks = 0;
    const proxy: Deno.AtomicOperation = new Proxy(op, {
      get(target, prop) {
        const value = Reflect.get(target, prop);
        if (typeof value !== "function") return value;
        if (prop === "commit") {
          return async () => {
            control.maxChecks = Math.max(control.maxChecks, checks);
            const failure = control.failNext;
            control.failNext = null;
            if (failure === "before") throw new Error("connection reset before the commit");
            const result = await target.commit();
            control.commits++;
            if (failure === "after") throw new Error("connection reset after the commit");
            return result;
          };
        }
        return (...args: unknown[]) => {
          if (prop === "check") checks += args.length;
          const result = (value as (...a: unknown[]) => unknown).apply(target, args);
          return result === target ? proxy : result;
        };
      },
    });
    return proxy;
  };
  const wrapped = new Proxy(kv, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (prop === "atomic") return () => wrapAtomic(target.atomic());
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { kv: wrapped, control };
}

async function withWallet(
  fn: (ctx: { kv: Deno.Kv; wallets: Wallets; appId: string }) => Promise<void>,
) {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "group commit" });
    const wallets = new Wallets(kv, { leaseMs: LEASE_MS });
    await fn({ kv, wallets, appId: app.id });
    await wallets.drain();
    await assertAuditClean(kv);
  } finally {
    kv.close();
  }
}

Deno.test("a reserve that does not fit is refused while the others of its batch proceed", () =>
  withWallet(async ({ kv, wallets, appId }) => {
    const commitsBefore = wallets.stats.commits;
    const [a, b, c] = await Promise.all([
      wallets.reserve(appId, reserveInput(2_000_000)),
      wallets.reserve(appId, reserveInput(4_000_000)),
      wallets.reserve(appId, reserveInput(3_000_000)),
    ]);
    assert.equal(wallets.stats.commits - commitsBefore, 1, "one commit for the three");
    assert.equal(a.ok, true);
    assert.equal(b.ok, false);
    assert.equal(c.ok, true);
    if (b.ok) throw new Error("unreachable");
    // Refused against the running balance of its batch, after the first reserve.
    assert.equal(b.available, 3_000_000);
    assert.equal(b.reserved, 2_000_000);
    const wallet = await walletOf(kv, appId);
    assert.equal(wallet.available, 0);
    assert.equal(wallet.reserved, 5_000_000);
    for (const r of [a, c]) {
      if (r.ok) await wallets.release(appId, r.reservation.id);
    }
    assert.equal((await walletOf(kv, appId)).available, 5_000_000);
  }));

Deno.test("a settle frees room for a later reserve of the same batch, not an earlier one", () =>
  withWallet(async ({ kv, wallets, appId }) => {
    const reserved = await wallets.reserve(appId, reserveInput(4_000_000));
    assert.ok(reserved.ok);
    const commitsBefore = wallets.stats.commits;
    const [early, settled, late] = await Promise.all([
      wallets.reserve(appId, reserveInput(3_000_000)),
      wallets.settle(appId, reserved.reservation.id, settleInput(1_000_000)),
      wallets.reserve(appId, reserveInput(3_000_000)),
    ]);
    assert.equal(wallets.stats.commits - commitsBefore, 1);
    assert.equal(early.ok, false, "decided before the settle: only 1.000000 available");
    assert.ok(settled.settled);
    assert.equal(settled.charged, 1_000_000);
    assert.equal(late.ok, true, "decided after the settle: 4.000000 available");
    const wallet = await walletOf(kv, appId);
    assert.deepEqual(
      { available: wallet.available, reserved: wallet.reserved, spent: wallet.spent },
      { available: 1_000_000, reserved: 3_000_000, spent: 1_000_000 },
    );
    if (late.ok) await wallets.settle(appId, late.reservation.id, settleInput(0));
  }));

Deno.test("a settle and a release of one reservation in the same batch charge it once", () =>
  withWallet(async ({ kv, wallets, appId }) => {
    const reserved = await wallets.reserve(appId, reserveInput(1_000_000));
    assert.ok(reserved.ok);
    const [settled, released] = await Promise.all([
      wallets.settle(appId, reserved.reservation.id, settleInput(400_000)),
      wallets.release(appId, reserved.reservation.id),
    ]);
    assert.ok(settled.settled);
    assert.equal(released.released, false);
    assert.equal((await walletOf(kv, appId)).available, 4_600_000);
  }));

Deno.test("batches stay within 10 checks: credits with markers are split across commits", async () => {
  const raw = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(raw, { name: "markers" });
    const { kv, control } = instrumentedKv(raw);
    const wallets = new Wallets(kv, { leaseMs: LEASE_MS });
    const credits = Array.from({ length: 20 }, (_, i) =>
      wallets.credit(app.id, {
        amount: 1_000,
        kind: "top_up",
        reason: "test",
        marker: `pay_${i}`,
      }));
    // A duplicate in the same burst is recognised even when it lands in a later batch.
    credits.push(
      wallets.credit(app.id, { amount: 1_000, kind: "top_up", reason: "test", marker: "pay_0" }),
    );
    const results = await Promise.all(credits);
    assert.equal(results.filter((r) => r.credited).length, 20);
    assert.equal(results.filter((r) => !r.credited).length, 1);
    assert.ok(control.maxChecks <= 10, `${control.maxChecks} checks in one commit`);
    assert.ok(wallets.stats.commits >= 3, "20 markers need at least 3 commits");
    assert.equal((await walletOf(raw, app.id)).topUps, 20_000);
    await assertAuditClean(raw);
  } finally {
    raw.close();
  }
});

Deno.test("batches stay within 10 checks: reserves of more than 9 keys are split", async () => {
  const raw = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(raw, { name: "many keys" });
    const guards = [];
    for (let i = 0; i < 12; i++) {
      const issued = await issueKey(raw, app.id, `k${i}`, "operator");
      const entry = await raw.get(keys.apiKeyByHash(issued.record.hash));
      guards.push({ key: entry.key, versionstamp: entry.versionstamp! });
    }
    const { kv, control } = instrumentedKv(raw);
    const wallets = new Wallets(kv, { leaseMs: LEASE_MS });
    const results = await Promise.all(
      guards.map((guard) => wallets.reserve(app.id, reserveInput(100_000, guard))),
    );
    assert.ok(results.every((r) => r.ok));
    assert.ok(control.maxChecks <= 10, `${control.maxChecks} checks in one commit`);
    assert.equal(wallets.stats.commits, 2);
    for (const r of results) if (r.ok) await wallets.release(app.id, r.reservation.id);
    await assertAuditClean(raw);
  } finally {
    raw.close();
  }
});

Deno.test("a reserve under a revoked key is refused while the others of its batch proceed", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app, key } = await createAppRecord(kv, { name: "revoked" });
    const other = await issueKey(kv, app.id, "other", "operator");
    const guardOf = async (hash: string) => {
      const entry = await kv.get(keys.apiKeyByHash(hash));
      return { key: entry.key, versionstamp: entry.versionstamp! };
    };
    const [g1, g2] = [await guardOf(key.record.hash), await guardOf(other.record.hash)];
    await revokeKey(kv, key.record.id);
    const wallets = new Wallets(kv, { leaseMs: LEASE_MS });
    const [revoked, fine] = await Promise.allSettled([
      wallets.reserve(app.id, reserveInput(100_000, g1)),
      wallets.reserve(app.id, reserveInput(100_000, g2)),
    ]);
    assert.equal(revoked.status, "rejected");
    assert.ok(revoked.status === "rejected" && revoked.reason instanceof KeyRevokedError);
    assert.equal(fine.status, "fulfilled");
    assert.ok(fine.status === "fulfilled" && fine.value.ok);
    const wallet = await walletOf(kv, app.id);
    assert.equal(wallet.reserved, 100_000);
    if (fine.status === "fulfilled" && fine.value.ok) {
      await wallets.release(app.id, fine.value.reservation.id);
    }
    await assertAuditClean(kv);
  } finally {
    kv.close();
  }
});

for (const when of ["before", "after"] as const) {
  Deno.test(`a commit that throws ${when} applying is applied exactly once`, async () => {
    const raw = await Deno.openKv(":memory:");
    try {
      const { app } = await createAppRecord(raw, { name: "unknown outcome" });
      const { kv, control } = instrumentedKv(raw);
      const wallets = new Wallets(kv, { leaseMs: LEASE_MS });

      control.failNext = when;
      const credit = await wallets.credit(app.id, {
        amount: 2_000_000,
        kind: "top_up",
        reason: "test",
        marker: `pay_${when}`,
      });
      assert.ok(credit.credited);
      control.failNext = when;
      const reserved = await wallets.reserve(app.id, reserveInput(3_000_000));
      assert.ok(reserved.ok);
      control.failNext = when;
      const settled = await wallets.settle(app.id, reserved.reservation.id, settleInput(1_234_567));
      assert.ok(settled.settled);

      assert.equal(wallets.stats.unknownOutcomes, 3);
      const wallet = await walletOf(raw, app.id);
      assert.deepEqual(
        { available: wallet.available, reserved: wallet.reserved, spent: wallet.spent },
        { available: 7_000_000 - 1_234_567, reserved: 0, spent: 1_234_567 },
      );
      assert.equal(wallet.topUps, 2_000_000);
      let usageRecords = 0;
      for await (const _ of raw.list({ prefix: keys.appUsage(app.id) })) usageRecords++;
      assert.equal(usageRecords, 1);
      await assertAuditClean(raw);
    } finally {
      raw.close();
    }
  });
}

Deno.test("two instances on one KV file never overdraw a wallet and settle exact totals", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/kv.sqlite3`;
  const kv1 = await Deno.openKv(path);
  // Opening a handle briefly locks the file (SQLite housekeeping): open the second one after the
  // first write, as a second instance would start beside a running one.
  const { app } = await createAppRecord(kv1, { name: "two instances" });
  const kv2 = await Deno.openKv(path);
  try {
    const w1 = new Wallets(kv1, { leaseMs: LEASE_MS });
    const w2 = new Wallets(kv2, { leaseMs: LEASE_MS });
    let spent = 0;
    // Rounds until the instances have actually conflicted, so the retry path is exercised.
    for (let round = 0; round < 10; round++) {
      const before = (await walletOf(kv1, app.id)).available;
      const amount = 300_000;
      const attempts = Array.from(
        { length: 40 },
        (_, i) => (i % 2 ? w1 : w2).reserve(app.id, reserveInput(amount)),
      );
      const results = await Promise.all(attempts);
      const granted = results.flatMap((r, i) => r.ok ? [{ r, w: i % 2 ? w1 : w2 }] : []);
      assert.equal(granted.length, Math.min(40, Math.floor(before / amount)), "exactly what fits");
      const wallet = await walletOf(kv2, app.id);
      assert.equal(wallet.available, before - granted.length * amount);
      assert.equal(wallet.reserved, granted.length * amount);
      // Settle from the other instance than the one that reserved.
      await Promise.all(granted.map(({ r, w }, i) => {
        if (!r.ok) throw new Error("unreachable");
        const cost = 1_000 + i;
        spent += cost;
        return (w === w1 ? w2 : w1).settle(app.id, r.reservation.id, settleInput(cost));
      }));
      if (w1.stats.conflicts + w2.stats.conflicts > 0 && round >= 1) break;
    }
    assert.ok(w1.stats.conflicts + w2.stats.conflicts > 0, "the instances conflicted");
    const wallet = await walletOf(kv1, app.id);
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.spent, spent);
    assert.equal(wallet.available, 5_000_000 - spent);
    assert.equal(await counterTotal(kv1, keys.appDailySpend(app.id)), spent);
    assert.equal(await counterTotal(kv1, keys.appModelSpend(app.id)), spent);
    await assertAuditClean(kv1);
  } finally {
    kv1.close();
    kv2.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a wallet written by another instance since our last commit is re-read, not trusted", async () => {
  const dir = await Deno.makeTempDir();
  // As the service opens it: a commit that meets the file briefly locked (opening the second
  // handle does that) is retried, not counted as a failed commit.
  const kv1 = await openKv(`${dir}/kv.sqlite3`);
  const kv2 = await openKv(`${dir}/kv.sqlite3`);
  try {
    const { app } = await createAppRecord(kv1, { name: "remembered" });
    const w1 = new Wallets(kv1, { leaseMs: LEASE_MS });
    const w2 = new Wallets(kv2, { leaseMs: LEASE_MS });
    const first = await w1.reserve(app.id, reserveInput(4_000_000));
    assert.ok(first.ok);
    await w2.credit(app.id, { amount: 2_000_000, kind: "operator_credit", reason: "test" });
    // Only fits with the other instance's credit: 1.000000 + 2.000000 available.
    const second = await w1.reserve(app.id, reserveInput(2_500_000));
    assert.ok(second.ok);
    assert.equal(second.available, 500_000);
    // Memory said it does not fit; a refusal from memory is checked against the store, not
    // committed, so the answer comes from the fresh wallet without a failed commit.
    assert.equal(w1.stats.conflicts, 0, "no commit was wasted on the stale memory");
    await w1.settle(app.id, first.reservation.id, settleInput(4_000_000));
    await w2.settle(app.id, second.reservation.id, settleInput(2_000_000));
    const wallet = await walletOf(kv2, app.id);
    assert.deepEqual(
      { available: wallet.available, reserved: wallet.reserved, spent: wallet.spent },
      { available: 1_000_000, reserved: 0, spent: 6_000_000 },
    );
    await assertAuditClean(kv1);
  } finally {
    kv1.close();
    kv2.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a batch of settles adds its charges to the spend counters once each", () =>
  withWallet(async ({ kv, wallets, appId }) => {
    const reservations = await Promise.all(
      [1, 2, 3, 4, 5].map(() => wallets.reserve(appId, reserveInput(100_000))),
    );
    const commitsBefore = wallets.stats.commits;
    await Promise.all(reservations.map((h, i) => {
      if (!h.ok) throw new Error("unreachable");
      return wallets.settle(appId, h.reservation.id, {
        ...settleInput(10_000 * (i + 1)),
        model: `m${i % 2}`,
      });
    }));
    assert.equal(wallets.stats.commits - commitsBefore, 1);
    assert.equal(await counterTotal(kv, keys.appDailySpend(appId)), 150_000);
    assert.equal((await kv.get<Deno.KvU64>(keys.modelSpend(appId, "m0"))).value?.value, 90_000n);
    assert.equal((await kv.get<Deno.KvU64>(keys.modelSpend(appId, "m1"))).value?.value, 60_000n);
    assert.equal(typeof (await kv.get(keys.apiKeyLastUsed("key_test"))).value, "number");
  }));

Deno.test("a key entry rewritten but still there costs one retry, and the guard heals", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app, key } = await createAppRecord(kv, { name: "rewritten key" });
    const indexKey = keys.apiKeyByHash(key.record.hash);
    const entry = await kv.get(indexKey);
    const guard = { key: entry.key, versionstamp: entry.versionstamp! };
    await kv.set(indexKey, entry.value);
    const wallets = new Wallets(kv, { leaseMs: LEASE_MS });
    const first = await wallets.reserve(app.id, reserveInput(100_000, guard));
    assert.ok(first.ok);
    assert.equal(wallets.stats.conflicts, 1);
    assert.equal(guard.versionstamp, (await kv.get(indexKey)).versionstamp);
    const second = await wallets.reserve(app.id, reserveInput(100_000, guard));
    assert.ok(second.ok);
    assert.equal(wallets.stats.conflicts, 1, "no retry once healed");
    await wallets.release(app.id, first.reservation.id);
    await wallets.release(app.id, second.reservation.id);
    await assertAuditClean(kv);
  } finally {
    kv.close();
  }
});
