/**
 * Slices under one hot app in one process: a grant is sized to the app's in-flight demand (the
 * reserves waiting for it plus its pace), and the grant, post and return commits of one slice never
 * conflict with each other.
 */
import assert from "node:assert/strict";
import {
  getSpendCounter,
  issueKeyWithCaps,
  sweepExpiredReservations,
  Wallets,
} from "@/lib/billing/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import {
  assertAuditClean,
  holdInput,
  startService,
  until,
  usageInput,
  usageRecords,
} from "./helpers.ts";
import { faultyKv } from "./faulty_kv.ts";

const HOLD = 1_000;

const hold = (requestId: string) => holdInput(requestId, HOLD);
const usage = usageInput;

/** Posts as often as the timer allows unless told, so they interleave with the grants. */
async function withSlices(
  fn: (wallets: Wallets, appId: string, kv: Deno.Kv) => Promise<void>,
  { postEveryMs = 1 } = {},
) {
  const s = await startService();
  const wallets = new Wallets(s.kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { postEveryMs, idleMs: 60_000 },
  });
  try {
    const { appId } = await s.newApp();
    await wallets.credit(appId, { amount: 100_000_000, kind: "operator_credit", reason: "hot" });
    await fn(wallets, appId, s.kv);
    await wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await wallets.drain();
    await s.close();
  }
}

Deno.test("200 concurrent reserves on one app with slices on are all admitted in the slice: the grant covers every reserve waiting for it", () =>
  withSlices(async (wallets, appId) => {
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => wallets.reserve(appId, hold(`r${i}`))),
    );
    assert.ok(results.every((r) => r.ok), "every reserve admitted");
    assert.equal(wallets.stats.sliceFallbacks, 0, "none took the per-request path");
    assert.equal(wallets.stats.sliceAdmitted, 200);
    assert.ok(wallets.stats.sliceGrants <= 2, `grants: ${wallets.stats.sliceGrants}`);
    for (const [i, r] of results.entries()) {
      if (r.ok) await wallets.settle(appId, r.reservation.id, usage(`r${i}`, 700));
    }
    assert.equal(wallets.stats.conflicts, 0);
  }));

Deno.test("200 clients in a closed loop on one slice: every reserve admitted in the slice, and its grants, posts and return commit without a single conflict", () =>
  withSlices(async (wallets, appId, kv) => {
    let charged = 0;
    const client = async (c: number) => {
      for (let round = 0; round < 5; round++) {
        const id = `c${c}-${round}`;
        const r = await wallets.reserve(appId, hold(id));
        assert.ok(r.ok, id);
        // Real concurrency: the holds finish in a different order than they began.
        await new Promise((done) => setTimeout(done, Math.random() * 3));
        const cost = 300 + ((c * 7 + round) % 700);
        const settled = await wallets.settle(appId, r.reservation.id, usage(id, cost));
        assert.ok(settled.settled);
        charged += settled.charged;
      }
    };
    await Promise.all(Array.from({ length: 200 }, (_, c) => client(c)));
    await wallets.drain();
    assert.equal(wallets.stats.sliceFallbacks, 0, "no reserve fell back to the per-request path");
    assert.equal(wallets.stats.sliceAdmitted, 1_000);
    assert.ok(wallets.stats.slicePosts > 1, "charges were posted while grants ran");
    assert.equal(wallets.stats.conflicts, 0, "no commit failed its check");
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, charged, "what left the wallet is what was charged");
    assert.equal(wallet.reserved, 0, "the slice went back at drain");
  }));

Deno.test("a reservation settled after a sweeper gave its slice back is charged from the wallet: what left it is exactly what the settles answered", () =>
  withSlices(async (wallets, appId, kv) => {
    const before = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const first = await wallets.reserve(appId, hold("orphan-1"));
    const second = await wallets.reserve(appId, hold("orphan-2"));
    assert.ok(first.ok && second.ok && first.reservation.sliceId);
    // As a sweeper does when this process stalled past the slice's lease.
    const returned = await wallets.returnExpiredSlice(
      appId,
      first.reservation.sliceId,
      Number.MAX_SAFE_INTEGER,
    );
    assert.ok(returned.returned);
    const a = await wallets.settle(appId, first.reservation.id, usage("orphan-1", 700));
    // The next post finds the slice gone and charges its pending settle from the wallet.
    while (wallets.stats.orphanCharges < 1) await new Promise((r) => setTimeout(r, 5));
    const b = await wallets.settle(appId, second.reservation.id, usage("orphan-2", 500));
    assert.ok(a.settled && b.settled);
    assert.equal(b.charged, 500);
    await wallets.drain();
    const after = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(after.spent - before.spent, a.charged + b.charged);
    assert.equal(after.reserved, 0);
  }));

Deno.test("a request settling into a slice during or after the drain before an exit is posted before its settle answers", () =>
  withSlices(async (wallets, appId, kv) => {
    const early = await wallets.reserve(appId, hold("before-exit"));
    const late = await wallets.reserve(appId, hold("past-grace"));
    assert.ok(early.ok && late.ok && late.reservation.sliceId);
    // An ordinary settle waits for the slice's next post (a minute away here).
    await wallets.settle(appId, early.reservation.id, usage("before-exit", 400));
    assert.equal((await usageRecords(kv, appId)).length, 0);
    // The slice is kept: a request past the shutdown's grace still holds on it.
    await wallets.drainForExit();
    const settled = await wallets.settle(appId, late.reservation.id, usage("past-grace", 700));
    assert.ok(settled.settled);
    // No post is coming: the cost this answer states has already left the wallet.
    // (Posted to the slice's record, with their usage records: the wallet's own record takes the
    // slice's spending when the slice goes back.)
    const records = await usageRecords(kv, appId);
    assert.deepEqual(
      records.map((r) => [r.requestId, r.cost]).sort(),
      [["before-exit", 400], ["past-grace", 700]],
    );
  }, { postEveryMs: 60_000 }));

Deno.test("however long the post interval (WALLET_SLICE_POST_MS), a slice whose hold is in use keeps its lease: no sweeper gives it back, and its hold stays its own", async () => {
  const s = await startService();
  const wallets = new Wallets(s.kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { leaseMs: 300, postEveryMs: 60_000, idleMs: 60_000 },
  });
  const sweeper = new Wallets(s.kv, { leaseMs: 60_000 });
  try {
    const { appId } = await s.newApp();
    const held = await wallets.reserve(appId, hold("long"));
    assert.ok(held.ok && held.reservation.sliceId, "admitted in a slice");
    // Three leases long, as a long stream's.
    await new Promise((resolve) => setTimeout(resolve, 900));
    const swept = await sweeper.returnExpiredSlice(appId, held.reservation.sliceId, Date.now());
    assert.equal(swept.returned, false, "the lease was renewed");
    const settled = await wallets.settle(appId, held.reservation.id, usage("long", 700));
    assert.ok(settled.settled);
    assert.equal(settled.charged, 700);
    assert.equal(settled.uncharged, 0);
    await wallets.drain();
    assert.equal(wallets.stats.orphanCharges, 0);
    await assertAuditClean(s.kv);
  } finally {
    await wallets.drain();
    await s.close();
  }
});

Deno.test("a process that stalled past its slice's lease, swept meanwhile, does not grow the returned slice: its free money stays the wallet's, and what left it is what the settles answered", async () => {
  const s = await startService();
  // The stalled process's clock stands still while it stalls, so its ticks find nothing due: no
  // post and no renewal runs by itself, and it wakes with a reserve.
  let stalledAt: number | null = null;
  const stalled = new Wallets(s.kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { leaseMs: 200, postEveryMs: 60_000, idleMs: 60_000 },
    now: () => stalledAt ?? Date.now(),
  });
  const sweeper = new Wallets(s.kv, { leaseMs: 60_000 });
  try {
    const { appId } = await s.newApp();
    const before = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const first = await stalled.reserve(appId, hold("before-stall"));
    assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
    const a = await stalled.settle(appId, first.reservation.id, usage("before-stall", 700));
    stalledAt = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const swept = await sweeper.returnExpiredSlice(appId, first.reservation.sliceId, Date.now());
    assert.ok(swept.returned, "the sweeper gave the slice back");
    stalledAt = null;
    const second = await stalled.reserve(appId, hold("after-stall"));
    assert.ok(second.ok);
    assert.notEqual(second.reservation.sliceId, first.reservation.sliceId, "not the swept slice");
    const b = await stalled.settle(appId, second.reservation.id, usage("after-stall", 500));
    assert.ok(a.settled && b.settled);
    await stalled.drain();
    const after = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(after.spent - before.spent, a.charged + b.charged);
    assert.equal(after.reserved, 0);
    assert.ok(after.available >= 0);
    await assertAuditClean(s.kv);
  } finally {
    await stalled.drain();
    await s.close();
  }
});

Deno.test("a settle costing more than its slice holds is charged whole from the rest of the wallet, nothing left uncharged", () =>
  withSlices(async (wallets, appId, kv) => {
    const before = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const reserved = await wallets.reserve(appId, hold("overage"));
    assert.ok(reserved.ok && reserved.reservation.sliceId, "admitted in a slice");
    // Far beyond the reservation and any slice of a 5 USD wallet (at most an eighth of it).
    const settled = await wallets.settle(
      appId,
      reserved.reservation.id,
      usage("overage", 1_000_000),
    );
    assert.ok(settled.settled);
    assert.equal(settled.charged, 1_000_000);
    assert.equal(settled.uncharged, 0);
    await wallets.drain();
    const after = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(after.spent - before.spent, 1_000_000);
    assert.equal(after.reserved, 0);
  }));

Deno.test("in auto, an app whose per-request commits meet another writer's is served from slices: the writers stop fighting, and what left the wallet is the sum of the settles", async () => {
  const s = await startService();
  // Two writers on one KV (as two workers or processes are), each far below the hot pace.
  const writers = [0, 1].map(() =>
    new Wallets(s.kv, {
      leaseMs: 60_000,
      rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
      slices: { idleMs: 60_000, hotPerSecond: 1_000_000 },
    })
  );
  try {
    const { appId } = await s.newApp();
    await writers[0].credit(appId, { amount: 100_000_000, kind: "operator_credit", reason: "t" });
    let charged = 0;
    for (let round = 0; round < 20 && writers.every((w) => w.stats.sliceGrants === 0); round++) {
      await Promise.all(writers.flatMap((wallets, w) =>
        Array.from({ length: 20 }, async (_, i) => {
          const requestId = `req_${round}_${w}_${i}`;
          const reserved = await wallets.reserve(appId, hold(requestId));
          assert.equal(reserved.ok, true);
          if (!reserved.ok) return;
          const settled = await wallets.settle(
            appId,
            reserved.reservation.id,
            usage(requestId, 700),
          );
          assert.equal(settled.settled, true);
          if (settled.settled) charged += settled.charged;
        })
      ));
    }
    const conflicts = writers.reduce((n, w) => n + w.stats.conflicts, 0);
    assert.ok(conflicts > 0, "the two writers' per-request commits met");
    assert.ok(
      writers.some((w) => w.stats.sliceGrants > 0),
      "after meeting, the app is served from a slice",
    );
    await Promise.all(writers.map((w) => w.drain()));
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, charged);
    assert.equal(wallet.reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    await Promise.all(writers.map((w) => w.drain()));
    await s.close();
  }
});

Deno.test("a settle beyond its slice when the rest of the wallet is held elsewhere charges what the slice holds, as the per-request path would (the reservation, never less)", async () => {
  const s = await startService();
  const limits = { rpm: 1_000_000_000, tpm: 1_000_000_000_000 };
  const sliced = new Wallets(s.kv, {
    leaseMs: 60_000,
    rateLimits: limits,
    slices: { idleMs: 60_000 },
  });
  const other = new Wallets(s.kv, { leaseMs: 60_000, rateLimits: limits });
  try {
    const { appId } = await s.newApp();
    const first = await sliced.reserve(appId, hold("first"));
    assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
    // Another process holds everything the slice did not take.
    const left = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!.available;
    const elsewhere = await other.reserve(appId, { ...hold("elsewhere"), amount: left });
    assert.ok(elsewhere.ok);
    // Beyond the reservation and the slice's free money.
    const cost = 10_000_000;
    const settled = await sliced.settle(appId, first.reservation.id, usage("first", cost));
    assert.ok(settled.settled);
    assert.ok(settled.charged >= HOLD, `charged ${settled.charged}, the reservation was ${HOLD}`);
    assert.equal(settled.charged + settled.uncharged, cost);
    await sliced.drain();
    await other.release(appId, elsewhere.reservation.id);
    await other.drain();
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, settled.charged, "what the answer said left the wallet");
    await assertAuditClean(s.kv);
  } finally {
    await sliced.drain();
    await other.drain();
    await s.close();
  }
});

/** The same KV, whose commits throw (connection lost before the commit) while `failing.on`. */
function failingCommits(kv: Deno.Kv) {
  const failing = {
    on: false,
    get failed() {
      return faulty.injected.length;
    },
  };
  const faulty = faultyKv(kv, (step) => failing.on && step === "commit" ? "throw" : "ok");
  return { kv: faulty.kv, failing };
}

Deno.test("a settle beyond its slice whose wallet charge fails (KV lost past its retries) is settled in the slice: charged what the slice holds, posted once KV is back, nothing lost", async () => {
  const s = await startService();
  const { kv, failing } = failingCommits(s.kv);
  const sliced = new Wallets(kv, {
    leaseMs: 60_000,
    maxAttempts: 3,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { idleMs: 60_000 },
  });
  try {
    const { appId } = await s.newApp();
    const first = await sliced.reserve(appId, hold("first"));
    assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
    failing.on = true;
    // Beyond the reservation and the slice's free money: the wallet would pay the rest.
    const cost = 10_000_000;
    const settled = await sliced.settle(appId, first.reservation.id, usage("first", cost));
    failing.on = false;
    assert.ok(failing.failed >= 3, `the wallet charge was tried and failed (${failing.failed})`);
    assert.ok(settled.settled);
    assert.ok(settled.charged >= HOLD, `charged ${settled.charged}, the reservation was ${HOLD}`);
    assert.equal(settled.charged + settled.uncharged, cost);
    await sliced.drain();
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, settled.charged, "what the answer said left the wallet");
    assert.equal(wallet.reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    failing.on = false;
    await sliced.drain();
    await s.close();
  }
});

for (
  const [then, when] of [
    ["retry", "a second later"],
    ["drain", "at drain, before the retry is due"],
    ["failing drain", "after a drain that KV still failed, which reports the charge pending"],
  ] as const
) {
  Deno.test(`charges settled in a slice a sweeper gave back are charged from the wallet after KV fails, once KV is back (${when}): never dropped, never twice`, async () => {
    const s = await startService();
    const { kv, failing } = failingCommits(s.kv);
    const limits = { rpm: 1_000_000_000, tpm: 1_000_000_000_000 };
    const sliced = new Wallets(kv, {
      leaseMs: 60_000,
      maxAttempts: 2,
      rateLimits: limits,
      slices: { idleMs: 60_000, postEveryMs: 5 },
    });
    const sweeper = new Wallets(s.kv, { leaseMs: 60_000, rateLimits: limits });
    try {
      const { appId } = await s.newApp();
      const first = await sliced.reserve(appId, hold("first"));
      assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
      // KV goes away for this process: its posts fail, the charge stays pending, the lease runs out.
      failing.on = true;
      const settled = await sliced.settle(appId, first.reservation.id, usage("first", 600));
      assert.ok(settled.settled && settled.charged === 600);
      assert.equal(await sweepExpiredReservations(s.kv, sweeper, Date.now() + 3_600_000), 1);
      // Its next post finds the slice gone and charges from the wallet, which fails too.
      await until(() => sliced.stats.orphanCharges > 0, "the orphaned charge");
      // Long past both attempts of that charge (a few ms of backoff): it is left to the retry.
      await new Promise((r) => setTimeout(r, 300));
      if (then === "failing drain") {
        await sliced.drain().catch(() => {});
        assert.equal(sliced.pendingCharges, 600, "what an exit now would leave uncharged");
      }
      failing.on = false;
      if (then === "drain") {
        // A process stopping now would otherwise exit before the retry: drain tries it.
        await sliced.drain();
        assert.equal((await s.kv.get<WalletRecord>(keys.wallet(appId))).value!.spent, 600);
      }
      // Retried once: its usage record says whether an earlier try committed.
      await until(
        async () => (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!.spent === 600,
        "the retried charge",
        { timeoutMs: 10_000 },
      );
      await new Promise((r) => setTimeout(r, 1_500));
      const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
      assert.equal(wallet.spent, 600, "what the answer said left the wallet, once");
      assert.equal(wallet.reserved, 0);
      assert.equal((await usageRecords(s.kv, appId)).length, 1);
      assert.equal(sliced.pendingCharges, 0);
      await assertAuditClean(s.kv);
    } finally {
      failing.on = false;
      await sliced.drain();
      await sweeper.drain();
      await s.close();
    }
  });
}

/**
 * A sliced engine whose next commit, once `arm()` is called, ends with `fault`, after which the
 * next `readsToFail` reads throw too: KV cannot tell whether that commit happened. No post runs
 * meanwhile, so the armed commit is the settle's wallet charge. The slice's looks for a recall
 * (a read every 100 ms) neither fail nor count.
 */
function slicedWithUnknownCommit(
  kv: Deno.Kv,
  fault: "throw" | "throw_after_commit",
  readsToFail: number,
) {
  let armed = false;
  const state = { readsLeft: 0 };
  const faulty = faultyKv(kv, (step, _index, key) => {
    if (armed && step === "commit") {
      armed = false;
      state.readsLeft = readsToFail;
      return fault;
    }
    const recallLook = key?.[0] === keys.walletSliceRecall("")[0];
    if (step === "get" && state.readsLeft > 0 && !recallLook) {
      state.readsLeft--;
      return "throw";
    }
    return "ok";
  });
  const sliced = new Wallets(faulty.kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { idleMs: 60_000, postEveryMs: 60_000 },
  });
  return { sliced, faulty, state, arm: () => (armed = true) };
}

Deno.test("a settle beyond its slice whose wallet charge committed but answered with an error (outcome unknown) is charged once: the committed charge is the answer, the slice charges nothing more", async () => {
  const s = await startService();
  // The batch marker cannot be read back either: the outcome stays unknown.
  const { sliced, faulty, arm } = slicedWithUnknownCommit(s.kv, "throw_after_commit", 5);
  try {
    const { appId } = await s.newApp();
    const first = await sliced.reserve(appId, hold("first"));
    assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
    arm();
    const cost = 10_000_000;
    const settled = await sliced.settle(appId, first.reservation.id, usage("first", cost));
    assert.deepEqual(faulty.injected.map((f) => f.fault).slice(0, 2), [
      "throw_after_commit",
      "throw",
    ]);
    assert.ok(settled.settled);
    assert.equal(settled.charged + settled.uncharged, cost);
    await sliced.drain();
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, settled.charged, "what the answer said left the wallet, once");
    assert.equal((await usageRecords(s.kv, appId)).length, 1);
    await assertAuditClean(s.kv);
  } finally {
    await sliced.drain();
    await s.close();
  }
});

for (const fault of ["throw", "throw_after_commit"] as const) {
  Deno.test(`a settle beyond its slice whose wallet charge's outcome KV cannot tell (${fault}, reads failing) ends its reservation and is charged once KV is back: what left the wallet is the answered cost`, async () => {
    const s = await startService();
    // Neither the batch marker nor the usage record can be read back for a while.
    const { sliced, state, arm } = slicedWithUnknownCommit(s.kv, fault, 10);
    try {
      const { appId } = await s.newApp();
      // Enough outside the slice to pay the whole cost: the answer is then exactly what leaves.
      await sliced.credit(appId, { amount: 20_000_000, kind: "operator_credit", reason: "t" });
      const first = await sliced.reserve(appId, hold("first"));
      assert.ok(first.ok && first.reservation.sliceId, "admitted in a slice");
      arm();
      const cost = 10_000_000;
      const settled = await sliced.settle(appId, first.reservation.id, usage("first", cost));
      assert.equal(state.readsLeft, 0, "KV could not tell whether the charge committed");
      assert.ok(settled.settled);
      assert.equal(settled.charged, cost);
      // The retry runs in the drain; the slice, holding nothing, goes back to the wallet.
      await sliced.drain();
      const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
      assert.equal(wallet.spent, cost, "what the answer said left the wallet, once");
      assert.equal(wallet.reserved, 0, "no hold left behind");
      assert.equal((await usageRecords(s.kv, appId)).length, 1);
      await assertAuditClean(s.kv);
    } finally {
      await sliced.drain();
      await s.close();
    }
  });
}

/**
 * After a drain: what the answers said (`charged`) left the wallet once, in `records` usage records;
 * no hold and no charge waiting are left, and the audit is clean.
 */
async function assertChargedOnce(
  kv: Deno.Kv,
  wallets: Wallets,
  appId: string,
  { before, charged, records }: { before: WalletRecord; charged: number; records: number },
) {
  const after = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
  assert.equal(after.spent - before.spent, charged, "what the answers said left the wallet, once");
  assert.equal(after.reserved, 0, "no hold left behind: the slice went back");
  assert.equal((await usageRecords(kv, appId)).length, records);
  assert.equal(wallets.pendingCharges, 0, "no charge waits to be resolved");
  await assertAuditClean(kv);
}

for (const fault of ["throw", "throw_after_commit"] as const) {
  Deno.test(`a post whose outcome KV cannot tell (${fault}, its marker unreadable) is resolved from its usage records a second later: each answered charge leaves the wallet exactly once`, async () => {
    const s = await startService();
    const { sliced, state, arm } = slicedWithUnknownCommit(s.kv, fault, 5);
    try {
      const { appId } = await s.newApp();
      await sliced.credit(appId, { amount: 100_000_000, kind: "operator_credit", reason: "t" });
      const before = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
      const holds = await sliceHolds(sliced, appId, "d");
      let charged = 0;
      arm();
      // The 64th settle starts the post whose commit fails; the tick is a minute away.
      for (let i = 0; i < 64; i++) {
        const settled = await sliced.settle(appId, holds[i].id, usage(`d${i}`, 700 + i));
        assert.ok(settled.settled);
        charged += settled.charged;
      }
      await until(() => sliced.stats.unknownOutcomes === 1, "the post's unknown outcome");
      await until(() => sliced.pendingCharges === charged, "the post's charges set aside");
      assert.equal(state.readsLeft, 0, "KV could not tell whether the post committed");
      await until(
        async () => (await usageRecords(s.kv, appId)).length === 64,
        "the charges posted once KV tells",
        { timeoutMs: 5_000 },
      );
      for (let i = 64; i < 200; i++) await sliced.release(appId, holds[i].id);
      await sliced.drain();
      await assertChargedOnce(s.kv, sliced, appId, { before, charged, records: 64 });
    } finally {
      await sliced.drain().catch(() => {});
      await s.close();
    }
  });
}

for (const fault of ["throw", "throw_after_commit"] as const) {
  Deno.test(`a drain whose post's outcome KV cannot tell (${fault}) resolves it before it ends: the charges leave the wallet exactly once and the slice goes back`, async () => {
    const s = await startService();
    const { sliced, arm } = slicedWithUnknownCommit(s.kv, fault, 5);
    try {
      const { appId } = await s.newApp();
      const before = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
      const holds = await Promise.all(
        Array.from({ length: 10 }, (_, i) => sliced.reserve(appId, hold(`e${i}`))),
      );
      let charged = 0;
      for (const [i, r] of holds.entries()) {
        assert.ok(r.ok && r.reservation.sliceId, "admitted in the slice");
        const settled = await sliced.settle(appId, r.reservation.id, usage(`e${i}`, 900));
        assert.ok(settled.settled);
        charged += settled.charged;
      }
      arm();
      await sliced.drain();
      assert.equal(sliced.stats.unknownOutcomes, 1, "the drain's post had an unknown outcome");
      await assertChargedOnce(s.kv, sliced, appId, { before, charged, records: 10 });
    } finally {
      await sliced.drain().catch(() => {});
      await s.close();
    }
  });
}

for (const then of ["grant", "give-back"] as const) {
  Deno.test(`a ${then} of a slice after a post whose outcome KV could not tell keeps that post's charges: each answered charge leaves the wallet exactly once`, async () => {
    const s = await startService();
    const { sliced, arm } = slicedWithUnknownCommit(s.kv, "throw_after_commit", 5);
    try {
      const { appId } = await s.newApp();
      await sliced.credit(appId, { amount: 100_000_000, kind: "operator_credit", reason: "t" });
      const before = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
      const holds = await sliceHolds(sliced, appId, "u");
      let charged = 0;
      const settle = async (i: number) => {
        const settled = await sliced.settle(appId, holds[i].id, usage(`u${i}`, 700 + i));
        assert.ok(settled.settled);
        charged += settled.charged;
      };
      arm();
      // The 64th settle starts the post whose commit applies but answers with an error.
      for (let i = 0; i < 64; i++) await settle(i);
      await until(() => sliced.stats.unknownOutcomes === 1, "the post's unknown outcome");
      // Before that outcome is resolved, a commit of the same slice reads its record afresh.
      if (then === "grant") {
        const grants = sliced.stats.sliceGrants;
        const big = await sliced.reserve(appId, holdInput("big", 50_000));
        assert.ok(big.ok && big.reservation.sliceId);
        assert.equal(sliced.stats.sliceGrants, grants + 1, "the slice grew");
        await sliced.release(appId, big.reservation.id);
      } else {
        const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
        const refused = await sliced.reserve(appId, holdInput("big", wallet.available + 10_000));
        assert.equal(sliced.stats.sliceGiveBacks, 1, "the slice gave its free money back");
        if (refused.ok) await sliced.release(appId, refused.reservation.id);
      }
      // Posted after it: a post that took the slice's spent from before the unknown one would
      // write over that post's charges.
      for (let i = 64; i < 128; i++) await settle(i);
      for (let i = 128; i < 200; i++) await sliced.release(appId, holds[i].id);
      await until(() => sliced.pendingCharges === 0, "the unknown post resolved", {
        timeoutMs: 5_000,
      });
      await sliced.drain();
      await assertChargedOnce(s.kv, sliced, appId, { before, charged, records: 128 });
    } finally {
      await sliced.drain().catch(() => {});
      await s.close();
    }
  });
}

/** 200 holds admitted in the app's slice. */
async function sliceHolds(wallets: Wallets, appId: string, prefix: string) {
  const holds = await Promise.all(
    Array.from({ length: 200 }, (_, i) => wallets.reserve(appId, hold(`${prefix}${i}`))),
  );
  return holds.map((r) => {
    assert.ok(r.ok && r.reservation.sliceId, "admitted in the slice");
    return r.reservation;
  });
}

// The tick is a minute away in these two: only the count can start a post within a test.

Deno.test("a slice posts at once when 64 settled charges wait, not at its next tick: a hot slice's posts stay small and its unposted charges few", () =>
  withSlices(async (wallets, appId, kv) => {
    const before = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const holds = await sliceHolds(wallets, appId, "p");
    let charged = 0;
    const settle = async (i: number) => {
      const settled = await wallets.settle(appId, holds[i].id, usage(`p${i}`, 500 + i));
      assert.ok(settled.settled);
      charged += settled.charged;
    };
    for (let i = 0; i < 63; i++) await settle(i);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(wallets.stats.slicePosts, 0, "63 waiting charges wait for the tick");
    assert.equal((await usageRecords(kv, appId)).length, 0);
    await settle(63);
    await until(() => wallets.stats.slicePosts === 1, "the post the 64th charge starts");
    assert.equal((await usageRecords(kv, appId)).length, 64, "the 64 were posted in one commit");
    for (let i = 64; i < 200; i++) await settle(i);
    await wallets.drain();
    const after = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(after.spent - before.spent, charged, "what left the wallet is what was charged");
    assert.equal((await usageRecords(kv, appId)).length, 200);
    assert.equal(after.reserved, 0);
  }, { postEveryMs: 60_000 }));

Deno.test("charges that settled while a post committed are posted next, without waiting for another settle or the tick", () =>
  withSlices(async (wallets, appId, kv) => {
    const holds = await sliceHolds(wallets, appId, "b");
    // A burst: more than one post (128 at most) carries, and then no settle comes.
    await Promise.all(holds.map((r, i) => wallets.settle(appId, r.id, usage(`b${i}`, 500))));
    await until(
      async () => (await usageRecords(kv, appId)).length === 200,
      "every settled charge posted without a tick",
    );
    assert.ok(wallets.stats.slicePosts >= 2, JSON.stringify(wallets.stats));
  }, { postEveryMs: 60_000 }));

Deno.test("an engine without rate limits serves from slices too: one grant admits the reserves after it", async () => {
  const s = await startService();
  const wallets = new Wallets(s.kv, { leaseMs: 60_000, slices: { postEveryMs: 5 } });
  try {
    const { appId } = await s.newApp();
    for (let i = 0; i < 10; i++) {
      const r = await wallets.reserve(appId, hold(`r${i}`));
      assert.ok(r.ok && r.reservation.sliceId, "admitted in a slice");
      await wallets.settle(appId, r.reservation.id, usage(`r${i}`, 500));
    }
    assert.equal(wallets.stats.sliceGrants, 1);
    assert.equal(wallets.stats.sliceAdmitted, 10);
    await wallets.drain();
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, 5_000);
    await assertAuditClean(s.kv);
  } finally {
    await wallets.drain();
    await s.close();
  }
});

Deno.test("a charge settled in a slice before midnight and posted after it counts on its own day in the daily spend, as its usage record does", async () => {
  const s = await startService();
  let now = Date.UTC(2028, 1, 29, 23, 59, 59, 900);
  const wallets = new Wallets(s.kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    slices: { postEveryMs: 60_000, idleMs: 60_000 },
    now: () => now,
  });
  try {
    const { appId } = await s.newApp();
    const holds = await sliceHolds(wallets, appId, "m");
    for (const [i, r] of holds.slice(0, 10).entries()) {
      assert.ok((await wallets.settle(appId, r.id, usage(`m${i}`, 700))).settled);
    }
    now = Date.UTC(2028, 2, 1, 0, 0, 0, 50);
    for (const r of holds.slice(10)) await wallets.release(appId, r.id);
    await wallets.drain();
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 10);
    assert.ok(records.every((u) => new Date(u.createdAt).toISOString().startsWith("2028-02-29")));
    const day = async (d: string) =>
      Number((await s.kv.get<Deno.KvU64>(keys.dailySpend(appId, d))).value?.value ?? 0n);
    assert.equal(await day("2028-02-29"), 7_000);
    assert.equal(await day("2028-03-01"), 0);
    await assertAuditClean(s.kv);
  } finally {
    await wallets.drain();
    await s.close();
  }
});

Deno.test("a key issued with a spend cap on an app served from a slice is held to the cap from its first request", () =>
  withSlices(async (wallets, appId, kv) => {
    // The app is hot: an uncapped key's requests are admitted in the slice.
    for (let i = 0; i < 5; i++) {
      const r = await wallets.reserve(appId, hold(`w${i}`));
      assert.ok(r.ok && r.reservation.sliceId, "admitted in the slice");
      await wallets.settle(appId, r.reservation.id, usage(`w${i}`, 500));
    }
    const { issued } = await issueKeyWithCaps(kv, appId, "capped", "operator", { total: 2_500 });
    const keyId = issued.record.id;
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => wallets.reserve(appId, { ...hold(`c${i}`), keyId })),
    );
    const admitted = results.filter((r) => r.ok);
    assert.equal(admitted.length, 2, "two holds of 1,000 fit under a cap of 2,500");
    assert.ok(admitted.every((r) => r.ok && !r.reservation.sliceId), "none from the slice");
    for (const [i, r] of admitted.entries()) {
      if (r.ok) await wallets.settle(appId, r.reservation.id, { ...usage(`c${i}`, 1_000), keyId });
    }
    const counter = await getSpendCounter(kv, appId, "key", keyId);
    assert.equal(counter.total, 2_000);
  }));
