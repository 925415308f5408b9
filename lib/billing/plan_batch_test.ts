import assert from "node:assert/strict";
import {
  keys,
  type RateLimitOverrides,
  type ReservationRecord,
  utcDay,
  type WalletRecord,
  type WalletSliceRecord,
} from "@/lib/db.ts";
import { RateWindows } from "./ratelimit.ts";
import { creditedOf } from "./ledger.ts";
import {
  guardId,
  keyGuards,
  type Op,
  planBatch,
  type PlanInput,
  refuseRevokedKeys,
  type Settler,
  type SliceGiveBackResult,
  type SliceGrantResult,
  takeBatch,
} from "./plan_batch.ts";
import {
  type CreditInput,
  type CreditResult,
  DebitBeyondCreditsError,
  type DebitInput,
  type DebitResult,
  type DebitReversalResult,
  KeyRevokedError,
  type ReleaseResult,
  type RenewResult,
  type ReserveInput,
  type ReserveResult,
  type SettleInput,
  type SettleResult,
} from "./wallet_types.ts";

const APP = "app_plan";
const NOW = Date.UTC(2026, 6, 29, 12, 0, 0);
const LEASE_MS = 60_000;

/** A settler that keeps what it was given, so a test can read an operation's answer. */
class Answer<T> implements Settler<T> {
  settled = false;
  value?: T;
  error?: unknown;
  resolve(value: T) {
    this.settled = true;
    this.value = value;
  }
  reject(error: unknown) {
    this.settled = true;
    this.error = error;
  }
  get(): T {
    assert.ok(this.settled && this.error === undefined, "the operation was answered");
    return this.value as T;
  }
}

function reserve(amount: number, extra: Partial<ReserveInput> = {}) {
  const done = new Answer<ReserveResult>();
  const op: Op = {
    kind: "reserve",
    input: { amount, keyId: "key_a", requestId: "req_a", model: "m/one", ...extra },
    done,
  };
  return { op, done };
}

function settle(reservationId: string, cost: number, extra: Partial<SettleInput> = {}) {
  const done = new Answer<SettleResult>();
  const input: SettleInput = {
    requestId: "req_a",
    keyId: "key_a",
    model: "m/one",
    provider: "p",
    promptTokens: 10,
    completionTokens: 20,
    cost,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
    ...extra,
  };
  const op: Op = { kind: "settle", reservationId, input, done };
  return { op, done };
}

function release(reservationId: string, onlyIfExpiredAt?: number) {
  const done = new Answer<ReleaseResult>();
  const op: Op = { kind: "release", reservationId, onlyIfExpiredAt, done };
  return { op, done };
}

function renew(reservationId: string) {
  const done = new Answer<RenewResult>();
  const op: Op = { kind: "renew", reservationId, done };
  return { op, done };
}

function credit(amount: number, extra: Partial<CreditInput> = {}) {
  const done = new Answer<CreditResult>();
  const op: Op = {
    kind: "credit",
    input: { amount, kind: "top_up", reason: "Top-up", ...extra },
    done,
  };
  return { op, done };
}

function debit(amount: number, marker: string, extra: Partial<DebitInput> = {}) {
  const done = new Answer<DebitResult>();
  const op: Op = {
    kind: "debit",
    input: { amount, kind: "refund", reason: "Refund", reference: "pi_1", marker, ...extra },
    done,
  };
  return { op, done };
}

function reversal(amount: number, marker: string) {
  const done = new Answer<DebitReversalResult>();
  const op: Op = {
    kind: "debit_reversal",
    input: {
      amount,
      kind: "chargeback_reversed",
      reason: "Dispute won",
      reference: "dp_1",
      marker,
    },
    done,
  };
  return { op, done };
}

function wallet(available: number, fields: Partial<WalletRecord> = {}): WalletRecord {
  return {
    available,
    reserved: 0,
    spent: 0,
    starter: 0,
    topUps: available,
    operatorCredits: 0,
    ...fields,
  };
}

function reservation(id: string, amount: number, fields: Partial<ReservationRecord> = {}) {
  return {
    id,
    appId: APP,
    keyId: "key_a",
    requestId: "req_a",
    model: "m/one",
    amount,
    createdAt: NOW - 1_000,
    leaseUntil: NOW + 5_000,
    ...fields,
  } satisfies ReservationRecord;
}

/** A wallet whose `reserved` is the given reservations, with `available` left over. */
function walletReserving(available: number, ...existing: ReservationRecord[]): WalletRecord {
  const reserved = existing.reduce((sum, r) => sum + r.amount, 0);
  return wallet(available, { reserved, topUps: available + reserved });
}

function plan(ops: { op: Op }[], input: Partial<PlanInput> = {}) {
  return planBatch({
    appId: APP,
    ops: ops.map((o) => o.op),
    wallet: wallet(0),
    reservations: new Map(),
    markers: new Set(),
    now: NOW,
    leaseMs: LEASE_MS,
    ...input,
  });
}

function reservationsOf(...existing: ReservationRecord[]): Map<string, ReservationRecord | null> {
  return new Map(existing.map((r) => [r.id, r]));
}

type Write =
  | { op: "set"; key: Deno.KvKey; value: unknown }
  | { op: "delete"; key: Deno.KvKey }
  | { op: "sum"; key: Deno.KvKey; value: bigint };

/** The mutations a plan would add to the batch's atomic operation, in order. */
function writesOf(p: ReturnType<typeof planBatch>): Write[] {
  const writes: Write[] = [];
  const atomic = {
    set(key: Deno.KvKey, value: unknown) {
      writes.push({ op: "set", key, value });
      return atomic;
    },
    delete(key: Deno.KvKey) {
      writes.push({ op: "delete", key });
      return atomic;
    },
    sum(key: Deno.KvKey, value: bigint) {
      writes.push({ op: "sum", key, value });
      return atomic;
    },
  };
  p.write(atomic as unknown as Deno.AtomicOperation);
  return writes;
}

function keyNames(writes: Write[]): string[] {
  return writes.map((w) => `${w.op} ${w.key.join("/")}`);
}

function assertBalanced(w: WalletRecord) {
  assert.equal(
    w.available + w.reserved + w.spent,
    creditedOf(w) - (w.refunded ?? 0),
    "available + reserved + spent",
  );
}

function rateWindows(
  limits = { rpm: 60, tpm: 1_000 },
  overrides: RateLimitOverrides | null = null,
) {
  return new RateWindows(limits, overrides, null);
}

Deno.test("a reserve within the available balance moves it to reserved and writes the reservation with its lease", () => {
  const r = reserve(300, { tokens: 12 });
  const p = plan([r], { wallet: wallet(1_000) });
  p.resolveAll();
  const answer = r.done.get();
  assert.ok(answer.ok);
  assert.equal(answer.available, 700);
  assert.deepEqual({ ...p.wallet }, { ...wallet(1_000), available: 700, reserved: 300 });
  const existing = answer.reservation;
  assert.deepEqual(
    { ...existing, id: "" },
    {
      id: "",
      appId: APP,
      keyId: "key_a",
      requestId: "req_a",
      model: "m/one",
      amount: 300,
      createdAt: NOW,
      leaseUntil: NOW + LEASE_MS,
      tokens: 12,
    },
  );
  assert.match(existing.id, /^res_/);
  assert.deepEqual(writesOf(p), [
    { op: "set", key: keys.reservation(APP, existing.id), value: existing },
    { op: "set", key: keys.reservationExpiry(NOW + LEASE_MS, APP, existing.id), value: true },
  ]);
  assert.deepEqual([...p.reservations], [[existing.id, existing]]);
  assert.equal(p.unchanged, false);
});

Deno.test("a reserve of exactly the available balance fits", () => {
  const r = reserve(1_000);
  const p = plan([r], { wallet: wallet(1_000) });
  p.resolveAll();
  assert.equal(r.done.get().ok, true);
  assert.equal(p.wallet.available, 0);
  assert.equal(p.wallet.reserved, 1_000);
});

Deno.test("a reserve over the available balance is refused with the balance and writes nothing", () => {
  const r = reserve(1_001);
  const before = wallet(1_000, { reserved: 50, topUps: 1_050 });
  const p = plan([r], { wallet: before });
  p.resolveAll();
  assert.deepEqual(r.done.get(), {
    ok: false,
    reason: "insufficient_credits",
    available: 1_000,
    reserved: 50,
    rate: undefined,
  });
  assert.deepEqual(p.wallet, before);
  assert.equal(p.unchanged, true);
  assert.deepEqual(writesOf(p), []);
});

Deno.test("the wallet passed in is not modified: the plan works on its own copy", () => {
  const before = wallet(1_000);
  const snapshot = { ...before };
  const p = plan([reserve(400), credit(5)], { wallet: before });
  assert.deepEqual(before, snapshot);
  assert.notEqual(p.wallet, before);
});

Deno.test("answers are delivered only by resolveAll, after the caller has committed", () => {
  const r = reserve(10);
  const c = credit(10);
  const p = plan([r, c], { wallet: wallet(100) });
  assert.equal(r.done.settled, false);
  assert.equal(c.done.settled, false);
  p.resolveAll();
  assert.equal(r.done.settled, true);
  assert.equal(c.done.settled, true);
});

Deno.test("an admitted reserve counts one request and its tokens in the rate windows written with the batch", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  const r = reserve(10, { tokens: 250 });
  const p = plan([r], { wallet: wallet(100), rate });
  p.resolveAll();
  const answer = r.done.get();
  assert.ok(answer.ok && answer.rate);
  assert.equal(answer.rate.requests.remaining, 59);
  assert.equal(answer.rate.tokens.remaining, 750);
  assert.equal(p.rateLimited, true);
  assert.ok(p.rateRecord?.app);
  const writes = writesOf(p);
  assert.deepEqual(writes.at(-1), { op: "set", key: keys.rateWindows(APP), value: p.rateRecord });
});

Deno.test("rate is decided before money: a reserve over its rate limit is refused as rate_limited even when the wallet is empty", () => {
  const rate = rateWindows({ rpm: 1, tpm: 1_000 });
  const first = reserve(10);
  const second = reserve(10_000);
  const p = plan([first, second], { wallet: wallet(10), rate });
  p.resolveAll();
  assert.equal(first.done.get().ok, true);
  const refused = second.done.get();
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  assert.equal(refused.breach.dimension, "requests");
  assert.equal(refused.breach.scope, "app");
  // One request per minute: the next fits once the bucket has drained a whole request.
  assert.equal(refused.retryAfterMs, 60_000);
  assert.equal(refused.available, 0);
  assert.equal(refused.reserved, 10);
  assert.equal(p.wallet.reserved, 10, "the refused reserve took nothing");
});

Deno.test("a reserve needing more tokens than a whole minute allows is refused as rate_too_large, with no wait", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  const r = reserve(10, { tokens: 1_001 });
  const p = plan([r], { wallet: wallet(100), rate });
  p.resolveAll();
  const refused = r.done.get();
  assert.ok(!refused.ok && refused.reason === "rate_too_large");
  assert.equal(refused.retryAfterMs, 0);
  assert.deepEqual(refused.breach, {
    scope: "app",
    dimension: "tokens",
    limit: 1_000,
    requested: 1_001,
  });
  assert.equal(p.unchanged, true, "nothing counted, nothing reserved");
  assert.equal(p.rateRecord, null);
});

Deno.test("a key's own lower limit refuses that key while the app's room is left", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 }, { app: {}, keys: { key_a: { rpm: 1 } } });
  const [a1, a2, b] = [reserve(1), reserve(1), reserve(1, { keyId: "key_b" })];
  const p = plan([a1, a2, b], { wallet: wallet(100), rate });
  p.resolveAll();
  assert.equal(a1.done.get().ok, true);
  const refused = a2.done.get();
  assert.ok(!refused.ok && refused.reason === "rate_limited");
  assert.equal(refused.breach.scope, "key");
  assert.equal(b.done.get().ok, true);
});

Deno.test("a reserve refused for credits counts nothing against the rate limit", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  const r = reserve(500, { tokens: 100 });
  const p = plan([r], { wallet: wallet(100), rate });
  p.resolveAll();
  const refused = r.done.get();
  assert.ok(!refused.ok && refused.reason === "insufficient_credits");
  assert.equal(refused.rate?.requests.remaining, 60);
  assert.equal(refused.rate?.tokens.remaining, 1_000);
  assert.equal(p.unchanged, true);
});

Deno.test("a settle below its reservation charges the cost and gives the rest back to the balance", () => {
  const existing = reservation("res_1", 1_000, { tokens: 100 });
  const s = settle("res_1", 300);
  const p = plan([s], {
    wallet: walletReserving(500, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.equal(answer.charged, 300);
  assert.equal(answer.uncharged, 0);
  assert.equal(answer.available, 1_200);
  assert.deepEqual(
    { available: p.wallet.available, reserved: p.wallet.reserved, spent: p.wallet.spent },
    { available: 1_200, reserved: 0, spent: 300 },
  );
  assertBalanced(p.wallet);
  assert.equal(answer.usage.cost, 300);
  assert.equal(answer.usage.reserved, 1_000);
  assert.equal(answer.usage.appId, APP);
  assert.equal(answer.usage.createdAt, NOW);
  assert.match(answer.usage.id, /^use_/);
  assert.deepEqual([...p.reservations], [["res_1", null]]);
});

Deno.test("a settle above its reservation takes the difference from the balance", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 1_400);
  const p = plan([s], {
    wallet: walletReserving(500, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.equal(answer.charged, 1_400);
  assert.equal(answer.uncharged, 0);
  assert.equal(p.wallet.available, 100);
  assert.equal(p.wallet.spent, 1_400);
  assertBalanced(p.wallet);
});

Deno.test("a settle above its reservation and the whole balance charges down to zero and records the rest as uncharged", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 2_000);
  const p = plan([s], {
    wallet: walletReserving(600, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.equal(answer.charged, 1_600);
  assert.equal(answer.uncharged, 400);
  assert.equal(answer.usage.cost, 1_600, "the usage record says what left the wallet");
  assert.equal(answer.usage.uncharged, 400);
  assert.equal(p.wallet.available, 0);
  assert.equal(p.wallet.spent, 1_600);
  assertBalanced(p.wallet);
});

Deno.test("an unbilled settle (its first settle failed for good) ends the hold charging nothing and records the whole cost as uncharged", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 700);
  const p = plan([{ ...s, op: { ...s.op, unbilled: true } as Op }], {
    wallet: walletReserving(600, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.deepEqual([answer.charged, answer.uncharged], [0, 700]);
  assert.deepEqual([answer.usage.cost, answer.usage.uncharged], [0, 700]);
  assert.deepEqual([p.wallet.available, p.wallet.reserved, p.wallet.spent], [1_600, 0, 0]);
  assertBalanced(p.wallet);
  const uncharged: Deno.KvKeyPart[] = [
    keys.appUncharged(APP)[0],
    keys.serviceTotal("uncharged")[0],
  ];
  assert.deepEqual(writesOf(p).filter((w) => w.op === "sum" && uncharged.includes(w.key[0])), [
    { op: "sum", key: keys.appUncharged(APP), value: 700n },
    { op: "sum", key: keys.serviceTotal("uncharged"), value: 700n },
  ]);
});

Deno.test("a batch adds its uncharged usage to the app's and the service's uncharged sums once, in its commit", () => {
  const existing = [reservation("res_1", 1_000), reservation("res_2", 1_000)];
  const first = settle("res_1", 2_500);
  const second = settle("res_2", 1_200, { model: "m/two" });
  const p = plan([first, second], {
    wallet: walletReserving(600, ...existing),
    reservations: reservationsOf(...existing),
  });
  p.resolveAll();
  const [a, b] = [first.done.get(), second.done.get()];
  assert.ok(a.settled && b.settled);
  // The first takes the whole balance (1,000 + 600 of 2,500); the second only its reservation.
  assert.deepEqual([a.uncharged, b.uncharged], [900, 200]);
  const sums = writesOf(p).filter((w) => w.op === "sum" && w.key[0] !== "model_spend");
  assert.deepEqual(sums, [
    { op: "sum", key: keys.dailySpend(APP, utcDay(NOW)), value: 2_600n },
    { op: "sum", key: keys.usageDayVersion(APP, utcDay(NOW)), value: 2n },
    { op: "sum", key: keys.usageDayRecords(APP, utcDay(NOW)), value: 2n },
    { op: "sum", key: keys.appUncharged(APP), value: 1_100n },
    { op: "sum", key: keys.serviceTotal("uncharged"), value: 1_100n },
  ]);
});

Deno.test("a batch with nothing uncharged writes no uncharged sum", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 1_400);
  const p = plan([s], {
    wallet: walletReserving(600, existing),
    reservations: reservationsOf(existing),
  });
  assert.deepEqual(
    writesOf(p).filter((w) => w.key[0] === "app_uncharged" || w.key[0] === "service_totals"),
    [],
  );
});

Deno.test("a settle deletes the reservation and its expiry entry and writes the usage record", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 300);
  const p = plan([s], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const usage = s.done.get();
  assert.ok(usage.settled);
  assert.deepEqual(keyNames(writesOf(p)), [
    `delete ${keys.reservation(APP, "res_1").join("/")}`,
    `delete ${keys.reservationExpiry(existing.leaseUntil, APP, "res_1").join("/")}`,
    `set ${keys.usage(APP, usage.usage.id).join("/")}`,
    `sum ${keys.modelSpend(APP, "m/one").join("/")}`,
    `sum ${keys.dailySpend(APP, utcDay(NOW)).join("/")}`,
    `sum ${keys.usageDayVersion(APP, utcDay(NOW)).join("/")}`,
    `sum ${keys.usageDayRecords(APP, utcDay(NOW)).join("/")}`,
    `set ${keys.apiKeyLastUsed("key_a").join("/")}`,
  ]);
});

Deno.test("the settle of a request sent with an Idempotency-Key indexes its usage record by request id, in the same commit", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 300, { idempotent: true });
  const p = plan([s], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const usage = s.done.get();
  assert.ok(usage.settled);
  const names = keyNames(writesOf(p));
  assert.ok(names.includes(`set ${keys.chargedRequest(usage.usage.requestId).join("/")}`));
});

Deno.test("a settle of a reservation already released charges nothing and writes nothing", () => {
  const s = settle("res_gone", 300);
  const p = plan([s], { wallet: wallet(700), reservations: new Map([["res_gone", null]]) });
  p.resolveAll();
  assert.deepEqual(s.done.get(), { settled: false, available: 700 });
  assert.equal(p.unchanged, true);
});

Deno.test("a settle corrects the rate limiter's tokens from those reserved to those used", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  const r = reserve(100, { tokens: 800 });
  plan([r], { wallet: wallet(1_000), rate }).resolveAll();
  const reserved = r.done.get();
  assert.ok(reserved.ok);
  assert.equal(reserved.rate?.tokens.remaining, 200);
  const s = settle(reserved.reservation.id, 10, { promptTokens: 30, completionTokens: 20 });
  const p = plan([s], {
    wallet: walletReserving(900, reserved.reservation),
    reservations: reservationsOf(reserved.reservation),
    rate,
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.equal(answer.rate?.tokens.remaining, 950, "50 tokens used, not 800");
});

Deno.test("a batch of settles adds its charges to each model's and the day's spend once, skips free ones, and raises the day's usage version and record count by its records", () => {
  const existing = [
    reservation("res_1", 100),
    reservation("res_2", 100),
    reservation("res_3", 100),
    reservation("res_4", 100, { keyId: "key_b" }),
  ];
  const settles = [
    settle("res_1", 10),
    settle("res_2", 20),
    settle("res_3", 5, { model: "m/two" }),
    settle("res_4", 0, { model: "m/three", keyId: "key_b" }),
  ];
  const p = plan(settles, {
    wallet: walletReserving(0, ...existing),
    reservations: reservationsOf(...existing),
  });
  const sums = writesOf(p).filter((w) => w.op === "sum");
  assert.deepEqual(sums, [
    { op: "sum", key: keys.modelSpend(APP, "m/one"), value: 30n },
    { op: "sum", key: keys.modelSpend(APP, "m/two"), value: 5n },
    { op: "sum", key: keys.dailySpend(APP, utcDay(NOW)), value: 35n },
    // Free usage is usage too: the day's cached report rollups are outdated by it.
    { op: "sum", key: keys.usageDayVersion(APP, utcDay(NOW)), value: 4n },
    { op: "sum", key: keys.usageDayRecords(APP, utcDay(NOW)), value: 4n },
  ]);
  const lastUsed = writesOf(p).filter((w) => w.key[0] === "api_key_last_used");
  assert.deepEqual(lastUsed.map((w) => w.key[1]), ["key_a", "key_b"]);
});

Deno.test("a release gives the whole reservation back to the balance and its tokens back to the limit", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  const r = reserve(400, { tokens: 600 });
  plan([r], { wallet: wallet(1_000), rate }).resolveAll();
  const reserved = r.done.get();
  assert.ok(reserved.ok);
  const rel = release(reserved.reservation.id);
  const p = plan([rel], {
    wallet: walletReserving(600, reserved.reservation),
    reservations: reservationsOf(reserved.reservation),
    rate,
  });
  p.resolveAll();
  const answer = rel.done.get();
  assert.equal(answer.released, true);
  assert.equal(answer.available, 1_000);
  assert.equal(answer.rate?.tokens.remaining, 1_000);
  assert.equal(answer.rate?.requests.remaining, 59, "the request itself still counts");
  assert.equal(p.wallet.reserved, 0);
  assert.equal(p.wallet.spent, 0);
  assertBalanced(p.wallet);
  assert.deepEqual(keyNames(writesOf(p)).slice(0, 2), [
    `delete ${keys.reservation(APP, reserved.reservation.id).join("/")}`,
    `delete ${
      keys.reservationExpiry(reserved.reservation.leaseUntil, APP, reserved.reservation.id).join(
        "/",
      )
    }`,
  ]);
});

Deno.test("a release only if expired leaves a reservation whose lease has not run out", () => {
  const existing = reservation("res_1", 1_000, { leaseUntil: NOW + 5_000 });
  const early = release("res_1", NOW + 4_999);
  const p = plan([early], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  assert.deepEqual(early.done.get(), { released: false, available: 0, rate: undefined });
  assert.equal(p.unchanged, true);

  const due = release("res_1", NOW + 5_000);
  const q = plan([due], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  q.resolveAll();
  assert.equal(due.done.get().released, true);
  assert.equal(q.wallet.available, 1_000);
});

Deno.test("a release of a reservation already gone changes nothing", () => {
  const rel = release("res_gone");
  const p = plan([rel], { wallet: wallet(50), reservations: new Map([["res_gone", null]]) });
  p.resolveAll();
  assert.deepEqual(rel.done.get(), { released: false, available: 50, rate: undefined });
  assert.equal(p.unchanged, true);
});

Deno.test("a renew moves the lease and its expiry entry forward", () => {
  const existing = reservation("res_1", 1_000, { leaseUntil: NOW + 5 });
  const rn = renew("res_1");
  const p = plan([rn], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  assert.deepEqual(rn.done.get(), { renewed: true, leaseUntil: NOW + LEASE_MS });
  const renewed = { ...existing, leaseUntil: NOW + LEASE_MS };
  assert.deepEqual(writesOf(p).slice(0, 3), [
    { op: "delete", key: keys.reservationExpiry(NOW + 5, APP, "res_1") },
    { op: "set", key: keys.reservation(APP, "res_1"), value: renewed },
    { op: "set", key: keys.reservationExpiry(NOW + LEASE_MS, APP, "res_1"), value: true },
  ]);
  assert.deepEqual(p.reservations.get("res_1"), renewed);
  assert.equal(p.wallet.reserved, 1_000, "a renew moves no money");
});

Deno.test("a renew of a reservation already gone answers not renewed", () => {
  const rn = renew("res_gone");
  const p = plan([rn], { reservations: new Map([["res_gone", null]]) });
  p.resolveAll();
  assert.deepEqual(rn.done.get(), { renewed: false, leaseUntil: 0 });
  assert.equal(p.unchanged, true);
});

Deno.test("a credit adds to the balance and to the total of its kind, and writes its ledger entry", () => {
  const kinds = [
    ["starter", "starter"],
    ["top_up", "topUps"],
    ["operator_credit", "operatorCredits"],
  ] as const;
  for (const [kind, total] of kinds) {
    const c = credit(250, { kind, reason: "why", reference: "ref_1" });
    const p = plan([c], { wallet: wallet(100) });
    p.resolveAll();
    const answer = c.done.get();
    assert.ok(answer.credited);
    assert.equal(answer.available, 350);
    assert.equal(p.wallet[total], (total === "topUps" ? 100 : 0) + 250, kind);
    assertBalanced(p.wallet);
    assert.deepEqual(
      { ...answer.entry, id: "" },
      {
        id: "",
        kind,
        amount: 250,
        reason: "why",
        reference: "ref_1",
        createdAt: NOW,
        balanceAfter: 350,
        owedAfter: 0,
      },
    );
    assert.deepEqual(writesOf(p), [
      { op: "set", key: keys.ledgerEntry(APP, answer.entry.id), value: answer.entry },
    ]);
  }
});

Deno.test("a credit whose marker is already stored is a duplicate and changes nothing", () => {
  const c = credit(250, { marker: "stripe:cs_1" });
  const p = plan([c], { wallet: wallet(100), markers: new Set(["stripe:cs_1"]) });
  p.resolveAll();
  assert.deepEqual(c.done.get(), { credited: false, duplicate: true, available: 100 });
  assert.equal(p.unchanged, true);
  assert.deepEqual(p.markerChecks, []);
});

Deno.test("two credits with one marker in a batch credit once; the marker is checked absent and written with it", () => {
  const [first, second] = [credit(250, { marker: "m1" }), credit(250, { marker: "m1" })];
  const p = plan([first, second], { wallet: wallet(0) });
  p.resolveAll();
  const answer = first.done.get();
  assert.ok(answer.credited);
  assert.deepEqual(second.done.get(), { credited: false, duplicate: true, available: 250 });
  assert.equal(p.wallet.available, 250);
  assert.deepEqual(p.markerChecks, ["m1"]);
  assert.deepEqual(writesOf(p), [
    { op: "set", key: keys.creditMarker("m1"), value: { appId: APP, entryId: answer.entry.id } },
    { op: "set", key: keys.ledgerEntry(APP, answer.entry.id), value: answer.entry },
  ]);
});

Deno.test("operations are decided in order: a settle frees room for a later reserve of the batch, not an earlier one", () => {
  const existing = reservation("res_1", 4_000);
  const early = reserve(3_000);
  const s = settle("res_1", 1_000);
  const late = reserve(3_000);
  const p = plan([early, s, late], {
    wallet: walletReserving(1_000, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const refused = early.done.get();
  assert.ok(!refused.ok);
  assert.equal(refused.available, 1_000);
  assert.equal(late.done.get().ok, true);
  assert.deepEqual(
    { available: p.wallet.available, reserved: p.wallet.reserved, spent: p.wallet.spent },
    { available: 1_000, reserved: 3_000, spent: 1_000 },
  );
});

Deno.test("a refused reserve is decided against the running balance of its batch, after the reserves before it", () => {
  const [a, b, c] = [reserve(2_000), reserve(4_000), reserve(3_000)];
  const p = plan([a, b, c], { wallet: wallet(5_000) });
  p.resolveAll();
  assert.equal(a.done.get().ok, true);
  assert.deepEqual(b.done.get(), {
    ok: false,
    reason: "insufficient_credits",
    available: 3_000,
    reserved: 2_000,
    rate: undefined,
  });
  assert.equal(c.done.get().ok, true);
  assert.equal(p.wallet.available, 0);
});

Deno.test("a settle and a release of one reservation in the same batch charge it once", () => {
  const existing = reservation("res_1", 1_000);
  const s = settle("res_1", 400);
  const rel = release("res_1");
  const p = plan([s, rel], {
    wallet: walletReserving(0, existing),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  assert.ok(s.done.get().settled);
  assert.equal(rel.done.get().released, false);
  assert.equal(p.wallet.available, 600);
  assert.equal(p.wallet.spent, 400);
  assertBalanced(p.wallet);
});

Deno.test("a batch mixing every operation decides each in turn and keeps available + reserved + spent equal to what was credited", () => {
  const existing = [
    reservation("res_1", 1_000),
    reservation("res_2", 2_000),
    reservation("res_3", 300),
  ];
  const first = reserve(700);
  const settled = settle("res_1", 900);
  const released = release("res_2");
  const credited = credit(5_000, { kind: "operator_credit" });
  const second = reserve(6_000);
  const overspent = settle("res_3", 50_000);
  const renewed = renew("res_1");
  const third = reserve(1);
  const p = plan([first, settled, released, credited, second, overspent, renewed, third], {
    wallet: walletReserving(800, ...existing),
    reservations: reservationsOf(...existing),
  });
  p.resolveAll();
  assert.equal(first.done.get().ok, true);
  assert.equal(released.done.get().available, 2_200);
  assert.equal(credited.done.get().available, 7_200);
  assert.equal(second.done.get().ok, true);
  const over = overspent.done.get();
  assert.ok(over.settled);
  assert.deepEqual({ charged: over.charged, uncharged: over.uncharged }, {
    charged: 1_500,
    uncharged: 48_500,
  });
  assert.deepEqual(renewed.done.get(), { renewed: false, leaseUntil: 0 }, "res_1 was settled");
  assert.equal(third.done.get().ok, false, "nothing is left for the last reserve");
  assert.deepEqual(
    { available: p.wallet.available, reserved: p.wallet.reserved, spent: p.wallet.spent },
    { available: 0, reserved: 6_700, spent: 2_400 },
  );
  assertBalanced(p.wallet);
});

Deno.test("a batch of refusals and no-ops has nothing to write", () => {
  const ops = [reserve(10_000), settle("res_gone", 5), release("res_gone"), renew("res_gone")];
  const p = plan(ops, { wallet: wallet(10), reservations: new Map([["res_gone", null]]) });
  assert.equal(p.unchanged, true);
  assert.deepEqual(writesOf(p), []);
  assert.deepEqual(p.reservations, new Map());
});

Deno.test("a reserve under a revoked key is refused with KeyRevokedError while the others proceed", () => {
  const guardA = { key: ["api_keys_by_hash", "a"], versionstamp: "01" };
  const guardB = { key: ["api_keys_by_hash", "b"], versionstamp: "01" };
  const revoked = reserve(10, { keyId: "key_a", keyGuard: guardA });
  const kept = reserve(10, { keyId: "key_b", keyGuard: guardB });
  const unguarded = reserve(10);
  const c = credit(5);
  const current = new Map([[guardId(guardA), null], [
    guardId(guardB),
    "02",
  ]]);
  const left = refuseRevokedKeys([revoked.op, kept.op, unguarded.op, c.op], current);
  assert.deepEqual(left, [kept.op, unguarded.op, c.op]);
  assert.ok(revoked.done.error instanceof KeyRevokedError);
  assert.match(String(revoked.done.error), /key_a was revoked/);
  assert.equal(kept.done.settled, false, "kept reserves are decided by the batch, not here");
});

Deno.test("a key entry rewritten but still there has its guard brought up to date in place", () => {
  const guard = { key: ["api_keys_by_hash", "a"], versionstamp: "01" };
  const r = reserve(10, { keyGuard: guard });
  refuseRevokedKeys([r.op], new Map([[guardId(guard), "07"]]));
  assert.equal(guard.versionstamp, "07", "the caller's cached guard stops failing the check");
});

Deno.test("a batch checks each key's guard once, with the first versionstamp seen", () => {
  const first = { key: ["api_keys_by_hash", "a"], versionstamp: "01" };
  const later = { key: ["api_keys_by_hash", "a"], versionstamp: "02" };
  const other = { key: ["api_keys_by_hash", "b"], versionstamp: "05" };
  const guards = keyGuards([
    reserve(1, { keyGuard: first }).op,
    credit(1).op,
    reserve(1, { keyGuard: later }).op,
    reserve(1, { keyGuard: other }).op,
    reserve(1).op,
  ]);
  assert.deepEqual([...guards.values()], [first, other]);
});

Deno.test("a batch takes at most maxBatch operations and leaves the rest queued in order", () => {
  const queue = Array.from({ length: 5 }, (_, i) => reserve(i + 1).op);
  const all = [...queue];
  assert.deepEqual(takeBatch(queue, 3), all.slice(0, 3));
  assert.deepEqual(queue, all.slice(3));
});

Deno.test("a batch stays within KV's 10 checks: marked credits and distinct key guards share 7", () => {
  const guard = (n: number) => ({ key: ["api_keys_by_hash", `k${n}`], versionstamp: "01" });
  const queue: Op[] = [
    ...Array.from({ length: 5 }, (_, i) => credit(1, { marker: `m${i}` }).op),
    credit(1).op, // no marker: no check
    reserve(1, { keyGuard: guard(0) }).op,
    reserve(1, { keyGuard: guard(0) }).op, // the same key: checked once
    reserve(1, { keyGuard: guard(1) }).op,
    reserve(1, { keyGuard: guard(2) }).op, // an eighth check (besides the wallet, overrides, caps)
    reserve(1, { keyGuard: guard(3) }).op,
    credit(1, { marker: "m5" }).op,
  ];
  const batch = takeBatch(queue, 128);
  assert.equal(batch.length, 9);
  assert.equal(queue.length, 3);
  assert.equal(takeBatch(queue, 128).length, 3);
});

const CAPS = {
  keys: { key_a: { total: 1_000, daily: null, monthly: null } },
  endUser: { total: null, daily: 500, monthly: null },
};

Deno.test("spend caps: two reserves that each fit a key's cap but not together: the second is refused naming the cap", () => {
  const a = reserve(600);
  const b = reserve(600);
  const p = plan([a, b], { wallet: wallet(10_000), spendCaps: CAPS, counters: new Map() });
  p.resolveAll();
  const first = a.done.get();
  assert.ok(first.ok);
  assert.deepEqual(first.reservation.capped, ["key"]);
  assert.deepEqual(b.done.get(), {
    ok: false,
    reason: "spend_cap",
    breach: { scope: "key", cap: "total", limit: 1_000, remaining: 400 },
    available: 9_400,
    reserved: 600,
    rate: undefined,
  });
  assert.equal(p.wallet.available, 9_400);
});

Deno.test("spend caps: settle moves the hold to spent in every window, release gives it back", () => {
  const held = reservation("res_1", 300, { capped: ["key", "user"], user: "u1" });
  const gone = reservation("res_2", 200, { capped: ["key"] });
  const counters = new Map([
    ["key:key_a", {
      held: 500,
      total: 100,
      day: utcDay(NOW),
      daySpent: 100,
      month: "2026-07",
      monthSpent: 100,
    }],
    ["user:u1", {
      held: 300,
      total: 0,
      day: "2026-07-28",
      daySpent: 50,
      month: "2026-07",
      monthSpent: 50,
    }],
  ]);
  const s = settle("res_1", 120, { user: "u1" });
  const r = release("res_2");
  const p = plan([s, r], {
    wallet: walletReserving(1_000, held, gone),
    reservations: new Map([["res_1", held], ["res_2", gone]]),
    spendCaps: CAPS,
    counters,
  });
  p.resolveAll();
  assert.ok(s.done.get().settled);
  assert.ok(r.done.get().released);
  const written = new Map(
    writesOf(p).flatMap((w) => w.op === "set" ? [[JSON.stringify(w.key), w.value]] : []),
  );
  assert.deepEqual(written.get(JSON.stringify(keys.spendCounter(APP, "key", "key_a"))), {
    held: 0,
    total: 220,
    day: utcDay(NOW),
    daySpent: 220,
    month: "2026-07",
    monthSpent: 220,
  });
  // The end user's day rolled over: yesterday's 50 no longer counts today.
  assert.deepEqual(written.get(JSON.stringify(keys.spendCounter(APP, "user", "u1"))), {
    held: 0,
    total: 120,
    day: utcDay(NOW),
    daySpent: 120,
    month: "2026-07",
    monthSpent: 170,
  });
});

Deno.test("spend caps: a request in flight on a key rotated meanwhile is charged above its hold only within the key's cap", () => {
  // key_a was rotated to key_b: its cap entry moved, naming key_a's counter, which still holds.
  const held = reservation("res_1", 300, { capped: ["key"] });
  const caps = {
    keys: { key_b: { total: 1_000, daily: null, monthly: null, counter: "key_a" } },
    endUser: null,
  };
  const counters = new Map([["key:key_a", {
    held: 300,
    total: 200,
    day: utcDay(NOW),
    daySpent: 200,
    month: "2026-07",
    monthSpent: 200,
  }]]);
  const s = settle("res_1", 3_000);
  const p = plan([s], {
    wallet: walletReserving(10_000, held),
    reservations: reservationsOf(held),
    spendCaps: caps,
    counters,
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.deepEqual({ charged: answer.charged, uncharged: answer.uncharged }, {
    charged: 800,
    uncharged: 2_200,
  });
  assertBalanced(p.wallet);
});

Deno.test("a refund takes its amount from the available balance into refunded, with its ledger entry and marker", () => {
  const d = debit(300, "stripe_refund:pi_1:300");
  const p = plan([d], { wallet: wallet(1_000) });
  p.resolveAll();
  const answer = d.done.get();
  assert.ok(answer.debited);
  assert.deepEqual(
    { taken: answer.taken, owed: answer.owed, available: answer.available },
    { taken: 300, owed: 0, available: 700 },
  );
  assert.equal(p.wallet.refunded, 300);
  assert.equal(p.wallet.topUps, 1_000, "what was credited stays what was credited");
  assertBalanced(p.wallet);
  assert.deepEqual(
    { ...answer.entry, id: "" },
    {
      id: "",
      kind: "refund",
      amount: 300,
      reason: "Refund",
      reference: "pi_1",
      createdAt: NOW,
      balanceAfter: 700,
      owedAfter: 0,
    },
  );
  assert.deepEqual(p.markerChecks, ["stripe_refund:pi_1:300"]);
  assert.deepEqual(writesOf(p), [
    {
      op: "set",
      key: keys.creditMarker("stripe_refund:pi_1:300"),
      value: { appId: APP, entryId: answer.entry.id },
    },
    { op: "set", key: keys.ledgerEntry(APP, answer.entry.id), value: answer.entry },
  ]);
});

Deno.test("a refund beyond the available balance takes what is there and owes the rest: the wallet never goes below zero", () => {
  const existing = reservation("res_1", 400);
  const d = debit(1_000, "m1", { kind: "chargeback" });
  const p = plan([d], {
    wallet: wallet(250, { reserved: 400, spent: 350, topUps: 1_000 }),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  const answer = d.done.get();
  assert.ok(answer.debited);
  assert.deepEqual(
    { taken: answer.taken, owed: answer.owed, available: answer.available },
    { taken: 250, owed: 750, available: 0 },
  );
  assert.equal(answer.entry.amount, 1_000);
  assert.equal(p.wallet.refunded, 250);
  assert.equal(p.wallet.owed, 750);
  assert.equal(p.wallet.reserved, 400, "a hold in flight is not taken from");
  assertBalanced(p.wallet);
});

Deno.test("money owed is taken before a reserve: the reserve is decided against what is left", () => {
  const r = reserve(300);
  const p = plan([r], { wallet: wallet(500, { owed: 400, refunded: 100, topUps: 600 }) });
  p.resolveAll();
  const answer = r.done.get();
  assert.equal(answer.ok, false, "only 100 is left once 400 is paid back");
  assert.equal(p.wallet.available, 100);
  assert.equal(p.wallet.owed, 0);
  assert.equal(p.wallet.refunded, 500);
  assert.equal(p.unchanged, false, "the wallet is written for the debt taken");
  assertBalanced(p.wallet);
});

/** A grant of `want` to slice slc_1, which this process holds already when `grows`. */
function sliceGrant(want: number, grows: boolean) {
  const done = new Answer<SliceGrantResult>();
  const op: Op = {
    kind: "slice_grant",
    grant: {
      sliceId: "slc_1",
      want,
      minimum: 10,
      rateWant: { requests: 1, tokens: 1 },
      minimumTokens: 0,
      leaseMs: LEASE_MS,
      grows,
    },
    done,
  };
  return { op, done };
}

Deno.test("money owed is taken before a slice is granted from the balance", () => {
  const { op, done } = sliceGrant(800, false);
  const p = plan([{ op }], {
    wallet: wallet(800, { owed: 800, topUps: 800 }),
    slices: new Map([["slc_1", null]]),
  });
  p.resolveAll();
  assert.equal(done.get().granted, 0, "nothing is left to grant once the debt is paid");
  assert.equal(p.wallet.refunded, 800);
  assert.equal(p.wallet.owed, 0);
  assertBalanced(p.wallet);
});

Deno.test("a top-up pays what is owed first, and its answer shows the balance after", () => {
  const c = credit(1_000, { marker: "stripe:cs_2" });
  const p = plan([c], { wallet: wallet(0, { owed: 300, refunded: 200, topUps: 200 }) });
  p.resolveAll();
  const answer = c.done.get();
  assert.ok(answer.credited);
  assert.equal(answer.available, 700);
  assert.equal(p.wallet.owed, 0);
  assert.equal(p.wallet.refunded, 500);
  assert.equal(p.wallet.topUps, 1_200);
  assertBalanced(p.wallet);
});

Deno.test("a hold released in a batch pays what is owed at the batch's end", () => {
  const existing = reservation("res_1", 400);
  const rel = release("res_1");
  const p = plan([rel], {
    wallet: wallet(0, { reserved: 400, owed: 250, refunded: 600, topUps: 1_000 }),
    reservations: reservationsOf(existing),
  });
  p.resolveAll();
  assert.equal(p.wallet.available, 150);
  assert.equal(p.wallet.owed, 0);
  assert.equal(p.wallet.refunded, 850);
  assertBalanced(p.wallet);
});

Deno.test("a debit whose marker is already stored is a duplicate and changes nothing", () => {
  const d = debit(300, "m1");
  const p = plan([d], { wallet: wallet(1_000), markers: new Set(["m1"]) });
  p.resolveAll();
  assert.deepEqual(d.done.get(), { debited: false, duplicate: true, available: 1_000 });
  assert.equal(p.unchanged, true);
  assert.deepEqual(p.markerChecks, []);
});

Deno.test("debits within credits are held to what was credited and not yet taken back by the running wallet of their batch", () => {
  // 1,000 credited, 500 taken back and 100 still owed: 400 may be taken back.
  const start = wallet(200, { spent: 300, refunded: 500, owed: 100, topUps: 1_000 });
  const first = debit(300, "m1", { withinCredits: true });
  const second = debit(200, "m2", { withinCredits: true });
  const webhook = debit(200, "m3");
  const p = plan([first, second, webhook], { wallet: start });
  p.resolveAll();
  assert.ok(first.done.get().debited);
  assert.ok(second.done.error instanceof DebitBeyondCreditsError);
  assert.match(String(second.done.error), /not yet taken back \(0\.000100 USD\)/);
  assert.ok(webhook.done.get().debited, "a debit not held to it is not refused");
  assert.equal(p.wallet.refunded! + p.wallet.owed!, 1_100);
  assertBalanced(p.wallet);
});

Deno.test("a won dispute's reversal forgives what is owed first, then gives back what was taken", () => {
  // A chargeback of 1,000 took 250 and owes 750; 100 of the debt was paid since.
  const start = wallet(0, { spent: 750, refunded: 350, owed: 650, topUps: 1_100 });
  const back = reversal(1_000, "stripe_dispute_won:dp_1");
  const p = plan([back], { wallet: start });
  p.resolveAll();
  const answer = back.done.get();
  assert.ok(answer.reversed);
  assert.equal(answer.entry.kind, "chargeback_reversed");
  assert.equal(answer.entry.amount, 1_000);
  assert.equal(p.wallet.owed, 0);
  assert.equal(p.wallet.refunded, 0);
  assert.equal(p.wallet.available, 350);
  assertBalanced(p.wallet);
});

Deno.test("a reversal never gives back more than was taken back", () => {
  const back = reversal(1_000, "m_back");
  const p = plan([back], { wallet: wallet(500, { refunded: 200, topUps: 700 }) });
  p.resolveAll();
  const answer = back.done.get();
  assert.ok(answer.reversed);
  assert.equal(answer.entry.amount, 200, "the entry says what was given back");
  assert.equal(p.wallet.available, 700);
  assert.equal(p.wallet.refunded, 0);
  assertBalanced(p.wallet);
});

Deno.test("a batch stays within KV's 10 checks: debit markers count with the credits'", () => {
  const queue = Array.from({ length: 9 }, (_, i) => debit(1, `m${i}`).op);
  assert.equal(takeBatch(queue, 100).length, 7);
  assert.equal(queue.length, 2);
});

function giveBack(sliceId: string, amount: number, unusedRate = { requests: 0, tokens: 0 }) {
  const done = new Answer<SliceGiveBackResult>();
  const op: Op = { kind: "slice_give_back", sliceId, amount, unusedRate, done };
  return { op, done };
}

function sliceRecord(granted: number, spent: number): WalletSliceRecord {
  return {
    id: "slc_1",
    appId: APP,
    granted,
    spent,
    rateRequests: 10,
    rateTokens: 100,
    createdAt: NOW - 1_000,
    leaseUntil: NOW + 9_000,
  };
}

Deno.test("a slice's give-back returns the money to the available balance and keeps the slice with its holds", () => {
  const s = giveBack("slc_1", 600);
  const p = plan([s], {
    // 1,000 granted to the slice, 100 of it posted as spent.
    wallet: wallet(4_000, { reserved: 1_000, topUps: 5_000 }),
    slices: new Map([["slc_1", sliceRecord(1_000, 100)]]),
  });
  p.resolveAll("v1");
  const answer = s.done.get();
  assert.equal(answer.given, 600);
  assert.ok("record" in answer);
  assert.equal(answer.record.granted, 400);
  assert.equal(answer.available, 4_600);
  assert.equal(p.wallet.available, 4_600);
  assert.equal(p.wallet.reserved, 400);
  assertBalanced(p.wallet);
  assert.deepEqual(writesOf(p), [
    { op: "set", key: keys.walletSlice(APP, "slc_1"), value: answer.record },
  ]);
});

Deno.test("a slice's give-back never returns what the slice has posted as spent", () => {
  const s = giveBack("slc_1", 900);
  const p = plan([s], {
    wallet: wallet(4_000, { reserved: 1_000, topUps: 5_000 }),
    slices: new Map([["slc_1", sliceRecord(1_000, 300)]]),
  });
  p.resolveAll("v1");
  assert.equal(s.done.get().given, 700);
  assert.equal(p.wallet.reserved, 300);
  assertBalanced(p.wallet);
});

Deno.test("a give-back of a slice that is gone returns nothing and writes nothing", () => {
  const s = giveBack("slc_1", 500);
  const p = plan([s], {
    wallet: wallet(5_000),
    slices: new Map([["slc_1", null]]),
  });
  p.resolveAll();
  assert.deepEqual(s.done.get(), { given: 0, available: 5_000 });
  assert.equal(p.unchanged, true);
});

Deno.test("money a slice gives back pays what is owed at the batch's end", () => {
  const s = giveBack("slc_1", 500);
  const p = plan([s], {
    wallet: wallet(0, { reserved: 1_000, owed: 300, refunded: 200, topUps: 1_200 }),
    slices: new Map([["slc_1", sliceRecord(1_000, 0)]]),
  });
  p.resolveAll("v1");
  assert.equal(s.done.get().given, 500);
  assert.equal(p.wallet.owed, 0);
  assert.equal(p.wallet.available, 200);
  assertBalanced(p.wallet);
});

Deno.test("a slice's give-back returns its rate block's unused part to the app's window, written with the batch", () => {
  const rate = rateWindows({ rpm: 60, tpm: 1_000 });
  // The slice took 10 requests and 500 tokens of the window; 6 and 300 of them are unused.
  assert.deepEqual(rate.takeBlock({ requests: 10, tokens: 500 }, 1, NOW), {
    requests: 10,
    tokens: 500,
  });
  const s = giveBack("slc_1", 0, { requests: 6, tokens: 300 });
  const p = plan([s], {
    wallet: wallet(4_000, { reserved: 1_000, topUps: 5_000 }),
    slices: new Map([["slc_1", sliceRecord(1_000, 1_000)]]),
    rate,
  });
  p.resolveAll("v1");
  assert.equal(s.done.get().given, 0, "no money was free");
  const status = rate.status("", NOW);
  assert.equal(status.requests.remaining, 56);
  assert.equal(status.tokens.remaining, 800);
  assert.ok(p.rateRecord?.app, "the window is written");
});

Deno.test("spend caps: a cost above the hold is charged only up to the cap's room; the rest is uncharged", () => {
  const held = reservation("res_1", 300, { capped: ["key"] });
  // The key's total cap is 1,000 (CAPS): 500 spent and this hold of 300 leave 200 above the hold.
  const counters = new Map([["key:key_a", {
    held: 300,
    total: 500,
    day: utcDay(NOW),
    daySpent: 500,
    month: "2026-07",
    monthSpent: 500,
  }]]);
  const s = settle("res_1", 900);
  const p = plan([s], {
    wallet: walletReserving(10_000, held),
    reservations: new Map([["res_1", held]]),
    spendCaps: CAPS,
    counters,
  });
  p.resolveAll();
  const answer = s.done.get();
  assert.ok(answer.settled);
  assert.deepEqual({ charged: answer.charged, uncharged: answer.uncharged }, {
    charged: 500,
    uncharged: 400,
  });
  const written = new Map(
    writesOf(p).flatMap((w) => w.op === "set" ? [[JSON.stringify(w.key), w.value]] : []),
  );
  const counter = written.get(JSON.stringify(keys.spendCounter(APP, "key", "key_a"))) as {
    total: number;
  };
  assert.equal(counter.total, 1_000, "spent up to the cap, not past it");
});

Deno.test("a grant to a slice this process holds, whose entry a sweeper returned, grants nothing and says it is gone", () => {
  const { op, done } = sliceGrant(800, true);
  const p = plan([{ op }], { wallet: wallet(10_000), slices: new Map([["slc_1", null]]) });
  p.resolveAll();
  assert.deepEqual(done.get(), { granted: 0, available: 10_000, gone: true });
  assert.equal(p.wallet.reserved, 0, "no fresh entry under the returned slice's id");
  assert.equal(writesOf(p).length, 0);
});
