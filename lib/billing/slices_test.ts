import assert from "node:assert/strict";
import type { WalletSliceRecord } from "@/lib/db.ts";
import { LocalSlice } from "./slices.ts";

const NOW = 1_800_000_000_000;

function slice(granted: number, requests = 100, tokens = 10_000) {
  const record: WalletSliceRecord = {
    id: "slc_1",
    appId: "app_1",
    granted,
    spent: 0,
    rateRequests: requests,
    rateTokens: tokens,
    createdAt: NOW,
    leaseUntil: NOW + 10_000,
  };
  return new LocalSlice(record, "v1", {
    requests,
    tokens,
    available: 500,
    keysWithOwnLimits: ["key_own"],
  }, NOW);
}

const reserveInput = (amount: number, keyId = "key_a", tokens = 10) => ({
  amount,
  keyId,
  requestId: "req_1",
  model: "m",
  tokens,
});

const settleInput = (cost: number) => ({
  requestId: "req_1",
  keyId: "key_a",
  model: "m",
  provider: "p",
  promptTokens: 2,
  completionTokens: 3,
  cost,
  streamed: false,
  outcome: "completed" as const,
  countedLocally: false,
});

Deno.test("a slice admits reservations while its free money covers them, then refuses", () => {
  const s = slice(100);
  assert.ok(s.admit(reserveInput(60), NOW));
  assert.equal(s.admit(reserveInput(60), NOW), null, "40 left: a 60 reservation does not fit");
  assert.ok(s.admit(reserveInput(40), NOW));
  assert.equal(s.free, 0);
});

Deno.test("a slice refuses past its rate block, for keys with limits of their own, and after its lease", () => {
  const s = slice(1_000, 1);
  assert.ok(s.admit(reserveInput(1), NOW));
  assert.equal(s.admit(reserveInput(1), NOW), null, "the block's one request is used");
  assert.equal(slice(1_000).admit(reserveInput(1, "key_own"), NOW), null);
  assert.equal(slice(1_000).admit(reserveInput(1), NOW + 10_000), null);
});

Deno.test("a settle charges at most the reservation plus the slice's free money, and returns the rest", () => {
  const s = slice(100);
  const r = s.admit(reserveInput(30), NOW)!;
  const settled = s.settle(r.reservation.id, settleInput(20), NOW)!;
  assert.equal(settled.settled && settled.charged, 20);
  assert.equal(s.free, 80);
  assert.equal(s.pendingSpent, 20);
  const big = s.admit(reserveInput(10), NOW)!;
  const capped = s.settle(big.reservation.id, settleInput(1_000), NOW)!;
  assert.ok(capped.settled);
  assert.equal(capped.charged, 80, "the reservation and every free micro-dollar, never more");
  assert.equal(capped.uncharged, 920);
  assert.equal(s.free, 0);
});

Deno.test("a settled charge is pending until taken for a post, and a failed post puts it back first", () => {
  const s = slice(100);
  const r = s.admit(reserveInput(30), NOW)!;
  s.settle(r.reservation.id, settleInput(25), NOW);
  const post = s.takePending(128);
  assert.equal(post.spent, 25);
  assert.equal(s.pendingSpent, 0);
  s.putBack(post.usage, post.spent);
  assert.equal(s.pendingSpent, 25);
  assert.equal(s.pending.length, 1);
});

Deno.test("a released reservation gives its money and tokens back; settling it afterwards finds nothing", () => {
  const s = slice(100, 100, 50);
  const r = s.admit(reserveInput(30, "key_a", 40), NOW)!;
  assert.equal(s.tokensLeft, 10);
  assert.equal(s.release(r.reservation.id, NOW), true);
  assert.equal(s.free, 100);
  assert.equal(s.tokensLeft, 50);
  assert.equal(s.settle(r.reservation.id, settleInput(5), NOW), null);
});

Deno.test("the rate-limit status a slice reports never shows more remaining than the limit", () => {
  const record: WalletSliceRecord = {
    id: "slc_1",
    appId: "app_1",
    granted: 1_000,
    spent: 0,
    rateRequests: 100,
    rateTokens: 10_000,
    createdAt: NOW,
    leaseUntil: NOW + 10_000,
  };
  const limits = {
    requests: { limit: 1_000, remaining: 950, resetMs: 1 },
    tokens: { limit: 100_000, remaining: 95_000, resetMs: 1 },
  };
  const s = new LocalSlice(record, "v1", {
    requests: 100,
    tokens: 10_000,
    available: 500,
    keysWithOwnLimits: [],
    rate: limits,
  }, NOW);
  const admitted = s.admit(reserveInput(1, "key_a", 10), NOW);
  assert.ok(admitted?.rate);
  assert.equal(admitted.rate.requests.remaining, 1_000);
  assert.equal(admitted.rate.tokens.remaining, 100_000);
});
