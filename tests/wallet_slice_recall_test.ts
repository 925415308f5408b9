/**
 * A slice never makes a request fail that the app's balance covers: a reserve refused for credits
 * while slices hold free money of the app gets that money back (this process's slice at once,
 * other processes' through a recall) and is tried again. Two `Wallets` on two handles of one KV
 * file are two processes: they share nothing but KV.
 */
import assert from "node:assert/strict";
import { Wallets } from "@/lib/billing/mod.ts";
import { keys, type WalletRecord, type WalletSliceRecord } from "@/lib/db.ts";
import { openKv } from "@/lib/core/mod.ts";
import { assertAuditClean, holdInput, startService, usageInput, usageRecords } from "./helpers.ts";

const STARTER = 5_000_000;
const SMALL = 1_000;

const hold = (requestId: string, amount = SMALL) => holdInput(requestId, amount);
const usage = usageInput;

function processWallets(kv: Deno.Kv, postEveryMs = 20) {
  return new Wallets(kv, {
    leaseMs: 60_000,
    rateLimits: { rpm: 1_000_000_000, tpm: 1_000_000_000_000 },
    // Slices stay while idle: only a recall gives their money back during the test.
    slices: { postEveryMs, idleMs: 60_000 },
  });
}

/** Two processes on one KV file, one app with the 5.00 USD starter; the ledger summed after. */
async function withTwoProcesses(
  fn: (a: Wallets, b: Wallets, appId: string, kv: Deno.Kv) => Promise<void>,
  { postEveryMs }: { postEveryMs?: number } = {},
) {
  const kvPath = await Deno.makeTempFile({ suffix: ".sqlite3" });
  const s = await startService({ kvPath });
  const otherKv = await openKv(kvPath);
  const a = processWallets(s.kv, postEveryMs);
  const b = processWallets(otherKv, postEveryMs);
  try {
    const { appId } = await s.newApp();
    await fn(a, b, appId, s.kv);
    await Promise.all([a.drain(), b.drain()]);
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const charged = (await usageRecords(s.kv, appId)).reduce((n, u) => n + u.cost, 0);
    assert.equal(wallet.spent, charged, "what left the wallet is the sum of its usage records");
    assert.equal(
      wallet.available + wallet.reserved + wallet.spent,
      STARTER - (wallet.refunded ?? 0),
    );
    assert.ok(wallet.available >= 0);
    await assertAuditClean(s.kv);
  } finally {
    await Promise.all([a.drain(), b.drain()]);
    otherKv.close();
    await s.close();
    await Deno.remove(kvPath).catch(() => {});
  }
}

/**
 * Waits for what another process's continuation counts a turn after KV shows it; a guard against
 * hanging (30 s), not a timing assertion.
 */
async function eventually(what: string, check: () => boolean) {
  const deadline = Date.now() + 30_000;
  while (!check()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

function reservationOf(result: Awaited<ReturnType<Wallets["reserve"]>>) {
  assert.ok(result.ok, `admitted (available ${result.available})`);
  return result.reservation;
}

async function slicesOf(kv: Deno.Kv, appId: string): Promise<WalletSliceRecord[]> {
  const entries = await Array.fromAsync(
    kv.list<WalletSliceRecord>({ prefix: keys.appWalletSlices(appId) }),
  );
  return entries.map((e) => e.value);
}

Deno.test("a reserve the balance covers only with this process's slice is admitted: the slice gives its free money back first", () =>
  withTwoProcesses(async (a, _b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    assert.ok(small.sliceId, "the small request was admitted in a slice");
    const [slice] = await slicesOf(kv, appId);
    // The slice took more than the balance outside it can spare for the large request.
    const large = STARTER - SMALL - 500;
    assert.ok(STARTER - slice.granted < large);

    const big = reservationOf(await a.reserve(appId, hold("large", large)));
    assert.equal(big.sliceId, undefined, "the large request holds money of its own");
    assert.equal(a.stats.sliceGiveBacks, 1);
    assert.equal(a.stats.sliceRecalls, 0, "no other process was asked");

    const settled = [
      await a.settle(appId, small.id, usage("small", 900)),
      await a.settle(appId, big.id, usage("large", 3_000_000)),
    ];
    assert.deepEqual(settled.map((r) => r.settled && r.charged), [900, 3_000_000]);
  }));

Deno.test("a reserve the balance covers only with another process's slice is admitted: that process gives the slice's free money back when recalled", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    assert.ok(small.sliceId);
    const large = STARTER - SMALL - 500;

    const big = reservationOf(await b.reserve(appId, hold("large", large)));
    assert.equal(b.stats.sliceRecalls, 1, "the refused process recalled the other's slice");
    await eventually("the holder to count its give-back", () => a.stats.sliceGiveBacks > 0);
    assert.equal(a.stats.sliceGiveBacks, 1, "the holder gave its free money back once");
    assert.ok((await kv.get(keys.walletSliceRecall(appId))).value);

    // The holder's hold is still good, and its slice admits nothing more: its next reserve takes
    // the per-request path while the hold lasts.
    const fallbacks = a.stats.sliceFallbacks;
    const afterRecall = await a.reserve(appId, hold("after", 100));
    assert.ok(afterRecall.ok);
    assert.equal(afterRecall.reservation.sliceId, undefined);
    assert.equal(a.stats.sliceFallbacks, fallbacks + 1);

    const settled = [
      await a.settle(appId, small.id, usage("small", 900)),
      await a.settle(appId, afterRecall.reservation.id, usage("after", 80)),
      await b.settle(appId, big.id, usage("large", 4_000_000)),
    ];
    assert.deepEqual(settled.map((r) => r.settled && r.charged), [900, 80, 4_000_000]);
  }));

Deno.test("however long the post interval (WALLET_SLICE_POST_MS), a recalled slice gives its free money back in time for the reserve that asked", () =>
  withTwoProcesses(async (a, b, appId) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    assert.ok(small.sliceId);
    const big = reservationOf(await b.reserve(appId, hold("large", STARTER - SMALL - 500)));
    assert.equal(b.stats.sliceRecalls, 1);
    const settled = [
      await a.settle(appId, small.id, usage("small", 900)),
      await b.settle(appId, big.id, usage("large", 4_000_000)),
    ];
    assert.deepEqual(settled.map((r) => r.settled && r.charged), [900, 4_000_000]);
  }, { postEveryMs: 60_000 }));

Deno.test("a recalled slice goes back to the wallet as soon as its holds end", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    const big = reservationOf(await b.reserve(appId, hold("large", STARTER - SMALL - 500)));
    await a.settle(appId, small.id, usage("small", 700));
    // The holder ticks every 20 ms.
    await eventually("the recalled slice to go back", () => a.stats.sliceReturns > 0);
    assert.deepEqual(await slicesOf(kv, appId), []);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, 700, "the slice's posted charge is the wallet's spent");
    assert.equal(wallet.reserved, big.amount, "only the large request's hold is left");
    await b.release(appId, big.id);
  }));

Deno.test("a reserve the whole balance cannot cover is refused without a recall: the other process keeps serving from its slice", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    const refused = await b.reserve(appId, hold("too large", STARTER + 1));
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.reason, "insufficient_credits");
    assert.equal(b.stats.sliceRecalls, 0);
    assert.equal((await kv.get(keys.walletSliceRecall(appId))).value, null);
    const next = reservationOf(await a.reserve(appId, hold("next")));
    assert.equal(next.sliceId, small.sliceId, "still admitted in the same slice");
    await a.settle(appId, small.id, usage("small", 500));
    await a.settle(appId, next.id, usage("next", 500));
  }));

Deno.test("while two processes serve small requests from slices, a large request the balance covers only with the slices' money is admitted, and what left the wallet is exactly what the settles answered", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    let answered = 0;
    let smallPaid = 0;
    const smallLoop = async (wallets: Wallets, name: string) => {
      for (let i = 0; i < 40; i++) {
        const r = await wallets.reserve(appId, hold(`${name}-${i}`));
        if (!r.ok) continue;
        await new Promise((r) => setTimeout(r, 1));
        const settled = await wallets.settle(appId, r.reservation.id, usage(`${name}-${i}`, 100));
        assert.ok(settled.settled);
        answered += settled.charged;
        smallPaid++;
      }
    };
    const large = async () => {
      while ((await slicesOf(kv, appId)).length < 2) {
        await new Promise((r) => setTimeout(r, 1));
      }
      // The small requests spend at most 40,000 and hold at most 10,000 at once: this fits what
      // is left, but not beside the two slices' grants (64,000 or more each).
      const r = reservationOf(await b.reserve(appId, hold("large", 4_945_000)));
      const settled = await b.settle(appId, r.id, usage("large", 4_000_000));
      assert.ok(settled.settled);
      answered += settled.charged;
    };
    await Promise.all([
      ...Array.from({ length: 5 }, (_, i) => smallLoop(a, `a${i}`)),
      ...Array.from({ length: 5 }, (_, i) => smallLoop(b, `b${i}`)),
      large(),
    ]);
    assert.equal(smallPaid, 400, "no small request was refused");
    assert.ok(b.stats.sliceRecalls + b.stats.sliceGiveBacks > 0, "the slices' money was needed");
    await Promise.all([a.drain(), b.drain()]);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, answered, "what left the wallet is what the settles answered");
  }));

Deno.test("a refund that leaves money owed recalls the app's slices: their free money pays the debt at once, not after their holds", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    const [slice] = await slicesOf(kv, appId);
    const outside = STARTER - slice.granted;
    // More than the balance outside the slice, less than the whole balance but the hold.
    const refund = outside + 20_000;
    const debited = await b.debit(appId, {
      amount: refund,
      kind: "refund",
      reason: "Refund",
      reference: "pi_1",
      marker: "stripe:re_1",
    });
    assert.ok(debited.debited);
    assert.equal(debited.owed, 20_000, "the refund owes what the slice holds");
    assert.equal(b.stats.sliceRecalls, 1);
    // The holder looks every 100 ms.
    await eventually("the holder to give back", () => a.stats.sliceGiveBacks > 0);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.owed ?? 0, 0, "the slice's free money paid the debt");
    assert.equal(a.stats.sliceGiveBacks, 1);
    assert.equal(wallet.refunded, refund);
    // The hold admitted before the refund is still good.
    const settled = await a.settle(appId, small.id, usage("small", 900));
    assert.ok(settled.settled && settled.charged === 900);
  }));

Deno.test("a debit by a process that keeps no slices (an operator's) recalls the others' slices: their free money pays what is owed at once", () =>
  withTwoProcesses(async (a, _b, appId, kv) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    const [slice] = await slicesOf(kv, appId);
    const operator = new Wallets(kv, { leaseMs: 0 });
    const debited = await operator.debit(appId, {
      amount: STARTER - slice.granted + 20_000,
      kind: "refund",
      reason: "Refund settled by hand",
      reference: null,
      marker: "operator_debit:1",
    });
    assert.ok(debited.debited);
    assert.equal(debited.owed, 20_000, "the debit owes what the slice holds");
    assert.equal(operator.stats.sliceRecalls, 1);
    await eventually("the holder to give back", () => a.stats.sliceGiveBacks > 0);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.owed ?? 0, 0, "the slice's free money paid the debt");
    const settled = await a.settle(appId, small.id, usage("small", 900));
    assert.ok(settled.settled && settled.charged === 900);
  }));

Deno.test("a reserve refused though the slices' holds would have to end first is refused after one recall, and the refusals right after it without another", () =>
  withTwoProcesses(async (a, b, appId, kv) => {
    const holds = [];
    for (let i = 0; i < 6; i++) {
      holds.push(reservationOf(await a.reserve(appId, hold(`h${i}`, 100_000))));
    }
    const [slice] = await slicesOf(kv, appId);
    assert.ok(holds.every((h) => h.sliceId === slice.id), "every hold is in the one slice");
    const outside = STARTER - slice.granted;
    // The slice's unspent money would cover it, but most of it is held by requests in flight.
    const large = outside + 100_000;
    const first = await b.reserve(appId, hold("first", large));
    assert.equal(first.ok, false);
    assert.equal(b.stats.sliceRecalls, 1);
    await eventually("the holder to count its give-back", () => a.stats.sliceGiveBacks > 0);
    assert.equal(a.stats.sliceGiveBacks, 1, "the holder gave back what its holds left free");
    const again = await b.reserve(appId, hold("again", large));
    assert.equal(again.ok, false);
    assert.equal(b.stats.sliceRecalls, 1, "no second recall while the first proved futile");
    for (const h of holds) await a.release(appId, h.id);
  }));

Deno.test("a reserve beyond the balance and every hold is refused at once: this process's own slice keeps serving", () =>
  withTwoProcesses(async (a, _b, appId) => {
    const small = reservationOf(await a.reserve(appId, hold("small")));
    const refused = await a.reserve(appId, hold("too large", STARTER + 1));
    assert.equal(refused.ok, false);
    assert.equal(a.stats.sliceGiveBacks, 0, "the slice gave nothing back for a hopeless request");
    const next = reservationOf(await a.reserve(appId, hold("next")));
    assert.equal(next.sliceId, small.sliceId, "still admitted in the same slice");
    await a.settle(appId, small.id, usage("small", 500));
    await a.settle(appId, next.id, usage("next", 500));
  }));
