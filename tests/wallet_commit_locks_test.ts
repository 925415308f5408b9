/**
 * Commit locks (lib/billing/commit_locks.ts): two wallet engines on one KV file, each with its own
 * handle like two workers of one process, sharing one lock memory, hammer one wallet with real
 * concurrency. Their commits take turns, so neither ever fails its versionstamp check, and the
 * money adds up to the last micro-dollar.
 */
import assert from "node:assert/strict";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { CommitLocks } from "@/lib/billing/commit_locks.ts";
import { Wallets } from "@/lib/billing/wallet.ts";
import type { SliceOptions } from "@/lib/billing/wallet_types.ts";
import { assertAuditClean, settleInput, usageRecords } from "./helpers.ts";
import { openKv } from "@/lib/core/mod.ts";

const FUNDED = 100_000_000;

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Runs `perEngine` paid requests from each of two engines at once, 20 in flight per engine. */
async function twoWorkers(slices: SliceOptions | undefined, locked: boolean) {
  const path = await Deno.makeTempFile({ suffix: ".kv" });
  // Opened as the service opens its KV: a handle's housekeeping that holds the file's lock for a
  // moment ("database is locked") makes the other's write try again, as in production.
  const handles = [await openKv(path), await openKv(path)];
  const memory = CommitLocks.memory();
  const locks = handles.map((_, i) => locked ? new CommitLocks(memory, i) : undefined);
  const engines = handles.map((kv, i) =>
    new Wallets(kv, { leaseMs: 60_000, slices, locks: locks[i] })
  );
  const { app } = await createAppRecord(handles[0], { name: "hot" });
  // Enough that neither engine's slice can take what the other needs.
  await engines[0].credit(app.id, {
    amount: FUNDED - 5_000_000,
    kind: "operator_credit",
    reason: "test",
  });
  const answered: number[] = [];
  const perEngine = 150;
  await Promise.all(engines.map(async (wallets, e) => {
    let next = 0;
    await Promise.all(Array.from({ length: 20 }, async () => {
      while (next < perEngine) {
        const n = next++;
        const reserved = await wallets.reserve(app.id, {
          amount: 2_000,
          keyId: "key_test",
          requestId: `req_${e}_${n}`,
          model: "tollbooth/echo",
        });
        assert.ok(reserved.ok, JSON.stringify(reserved));
        const cost = 1 + ((n * 37 + e) % 1_999);
        const settled = await wallets.settle(app.id, reserved.reservation.id, settleInput(cost));
        assert.ok(settled.settled);
        answered.push(cost);
      }
    }));
  }));
  for (const wallets of engines) await wallets.drain();
  const kv = handles[0];
  const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
  const charged = (await usageRecords(kv, app.id)).map((u) => u.cost);
  const conflicts = engines.map((w) => w.stats.conflicts);
  // A lock whose holder made no progress for its wait (a commit stalled past 2 s on a loaded
  // machine) is taken over by design, and only then may the two commits meet.
  const takenOver = sum(locks.map((l) => l?.takenOver ?? 0));
  return { handles, path, wallet, charged, answered, conflicts, takenOver };
}

async function close(run: { handles: Deno.Kv[]; path: string }) {
  for (const kv of run.handles) kv.close();
  await Deno.remove(run.path);
}

for (
  const [label, slices] of [
    ["a commit per request", undefined],
    ["slices", { postEveryMs: 5 }],
  ] as const
) {
  Deno.test(`two workers of one process committing one wallet (${label}) take turns: no failed commit, and what left the wallet is the sum of the answered costs`, async () => {
    const run = await twoWorkers(slices, true);
    try {
      assert.ok(
        sum(run.conflicts) <= run.takenOver,
        `${sum(run.conflicts)} failed commits with ${run.takenOver} locks taken over`,
      );
      assert.equal(run.charged.length, 300);
      assert.equal(sum(run.charged), sum(run.answered));
      assert.equal(run.wallet.spent, sum(run.answered));
      assert.equal(run.wallet.reserved, 0);
      assert.equal(run.wallet.available + run.wallet.spent, FUNDED);
      await assertAuditClean(run.handles[0]);
    } finally {
      await close(run);
    }
  });
}

Deno.test("without shared locks the same two workers fail each other's commits (what the locks save)", async () => {
  // Whether two unlocked engines meet is up to the scheduler: a run in which they happen not to is
  // tried again (up to five), and every run's money must add up either way.
  const seen: number[][] = [];
  for (let attempt = 0; attempt < 5 && !seen.some((c) => sum(c) > 0); attempt++) {
    const run = await twoWorkers(undefined, false);
    try {
      seen.push(run.conflicts);
      assert.equal(run.wallet.spent, sum(run.answered));
      await assertAuditClean(run.handles[0]);
    } finally {
      await close(run);
    }
  }
  assert.ok(seen.some((c) => sum(c) > 0), `conflicts in each run: ${JSON.stringify(seen)}`);
});
