import assert from "node:assert/strict";
import { setRateLimits, Wallets } from "@/lib/billing/mod.ts";
import { assertAuditClean, startService } from "./helpers.ts";

const hold = (requestId: string, amount: number) => ({
  amount,
  keyId: "key_t",
  requestId,
  model: "tollbooth/echo",
});
const usage = (requestId: string, cost: number) => ({
  requestId,
  keyId: "key_t",
  model: "tollbooth/echo",
  provider: "tollbooth",
  promptTokens: 1,
  completionTokens: 1,
  cost,
  streamed: false,
  outcome: "completed" as const,
  countedLocally: false,
});

async function twoInstances(
  fn: (a: Wallets, b: Wallets, appId: string, kvs: Deno.Kv[]) => Promise<void>,
) {
  const dir = await Deno.makeTempDir();
  const s = await startService({ kvPath: `${dir}/kv.sqlite3` });
  // Opening a handle briefly locks the file (SQLite housekeeping): open the second one after the
  // first write, as a second instance would start beside a running one.
  const { appId } = await s.newApp();
  const other = await Deno.openKv(`${dir}/kv.sqlite3`);
  try {
    const a = new Wallets(s.kv, { leaseMs: 60_000 });
    const b = new Wallets(other, { leaseMs: 60_000 });
    await fn(a, b, appId, [s.kv, other]);
    await assertAuditClean(s.kv);
  } finally {
    other.close();
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a wallet changed by another instance is re-read before the next decision", () =>
  twoInstances(async (a, b, appId) => {
    const r = await a.reserve(appId, hold("r1", 1_000_000));
    assert.ok(r.ok);
    // Another instance spends almost all that is left.
    const other = await b.reserve(appId, hold("r2", 3_999_000));
    assert.ok(other.ok);
    // Instance A's memory says 4,000,000 is available; the truth is 1,000.
    const refused = await a.reserve(appId, hold("r3", 2_000));
    assert.equal(refused.ok, false);
    assert.equal(refused.available, 0 + 1_000);
    const settled = await a.settle(appId, r.reservation.id, usage("r1", 400_000));
    assert.ok(settled.settled);
    assert.equal(settled.available, 1_000 + 600_000);
    await b.release(appId, other.reservation.id);
  }));

Deno.test("a reservation released by another instance's sweeper is not settled from memory", () =>
  twoInstances(async (a, b, appId) => {
    const r = await a.reserve(appId, hold("r1", 50_000));
    assert.ok(r.ok);
    const released = await b.release(appId, r.reservation.id);
    assert.equal(released.released, true);
    const settled = await a.settle(appId, r.reservation.id, usage("r1", 10_000));
    assert.equal(settled.settled, false);
    assert.equal(settled.available, 5_000_000);
  }));

Deno.test("two instances hammering one wallet keep exact books", () =>
  twoInstances(async (a, b, appId) => {
    const run = async (w: Wallets, tag: string) => {
      let spent = 0;
      await Promise.all(Array.from({ length: 60 }, async (_, i) => {
        const r = await w.reserve(appId, hold(`${tag}${i}`, 70_000));
        if (!r.ok) return;
        const s = await w.settle(appId, r.reservation.id, usage(`${tag}${i}`, 1_000 + i));
        if (s.settled) spent += s.charged;
      }));
      return spent;
    };
    const [spentA, spentB] = await Promise.all([run(a, "a"), run(b, "b")]);
    const stats = [a.stats, b.stats];
    assert.ok(stats.every((st) => st.commits > 0));
    const w =
      (await a.credit(appId, { amount: 1, kind: "operator_credit", reason: "probe" })).available;
    assert.equal(w, 5_000_000 - spentA - spentB + 1);
  }));

Deno.test("limits changed by an operator are seen by a process that remembers the wallet", async () => {
  const dir = await Deno.makeTempDir();
  const s = await startService({ kvPath: `${dir}/kv.sqlite3` });
  const operator = await Deno.openKv(`${dir}/kv.sqlite3`);
  try {
    const { appId } = await s.newApp();
    const wallets = new Wallets(s.kv, {
      leaseMs: 60_000,
      rateLimits: { rpm: 100, tpm: 1_000_000 },
    });
    const first = await wallets.reserve(appId, { ...hold("r1", 1_000), tokens: 10 });
    assert.ok(first.ok);
    await setRateLimits(operator, appId, { rpm: 1 }, { by: "operator" });
    const second = await wallets.reserve(appId, { ...hold("r2", 1_000), tokens: 10 });
    assert.equal(second.ok, false);
    assert.ok(!second.ok && second.reason === "rate_limited");
    await wallets.release(appId, first.reservation.id);
    await assertAuditClean(s.kv);
  } finally {
    operator.close();
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a batch of refusals is answered without a commit", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    const wallets = new Wallets(s.kv, { leaseMs: 60_000 });
    const first = await wallets.reserve(appId, hold("fits", 4_000_000));
    assert.ok(first.ok);
    const commits = wallets.stats.commits;
    const refused = await Promise.all(
      Array.from({ length: 20 }, (_, i) => wallets.reserve(appId, hold(`big${i}`, 2_000_000))),
    );
    assert.ok(refused.every((r) => !r.ok && r.available === 1_000_000));
    assert.equal(wallets.stats.commits, commits, "refusals write nothing");
    assert.equal(wallets.stats.conflicts, 0);
    await wallets.release(appId, first.reservation.id);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("after its memory proves stale, a process reads the wallet first instead of failing commits", () =>
  twoInstances(async (a, b, appId) => {
    const r = await a.reserve(appId, hold("a1", 1_000));
    assert.ok(r.ok);
    await b.credit(appId, { amount: 1_000, kind: "operator_credit", reason: "other writer" });
    const second = await a.reserve(appId, hold("a2", 1_000));
    assert.ok(second.ok);
    assert.equal(a.stats.conflicts, 1, "the stale memory cost one failed commit");
    await b.credit(appId, { amount: 1_000, kind: "operator_credit", reason: "other writer again" });
    const third = await a.reserve(appId, hold("a3", 1_000));
    assert.ok(third.ok);
    assert.equal(a.stats.conflicts, 1, "within the contended window the wallet is read first");
    for (const h of [r, second, third]) if (h.ok) await a.release(appId, h.reservation.id);
  }));
