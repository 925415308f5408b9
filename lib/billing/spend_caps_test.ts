import assert from "node:assert/strict";
import {
  cappedKeyIds,
  cappedScopes,
  capsAfterRotation,
  currentCounter,
  heldCounterId,
} from "./spend_caps.ts";

const cap = { total: 200_000, daily: null, monthly: null };

Deno.test("a rotation moves a key's caps to its replacement, counted on the old key's counter", () => {
  const once = capsAfterRotation({ keys: { key_a: cap }, endUser: null }, "key_a", "key_b", true);
  assert.deepEqual(once, { keys: { key_b: { ...cap, counter: "key_a" } }, endUser: null });
  // Rotated again: still the first key's counter, where the spend so far is.
  const twice = capsAfterRotation(once, "key_b", "key_c", false);
  assert.deepEqual(twice?.keys, { key_c: { ...cap, counter: "key_a" } });
  assert.deepEqual(cappedScopes(twice, "key_c", undefined), [
    { scope: "key", id: "key_a", caps: { ...cap, counter: "key_a" } },
  ]);
});

Deno.test("a rotation of a key whose cap was removed passes its counter on, and of a key never capped changes nothing", () => {
  const uncapped = capsAfterRotation({ keys: {}, endUser: null }, "key_a", "key_b", true);
  assert.deepEqual(uncapped?.keys, {
    key_b: { total: null, daily: null, monthly: null, counter: "key_a" },
  });
  assert.deepEqual(cappedScopes(uncapped, "key_b", undefined), []);
  assert.equal(capsAfterRotation(null, "key_a", "key_b", false), null);
});

Deno.test("a reservation's key hold sits on the counter it was taken on", () => {
  assert.equal(heldCounterId({ keyId: "key_b", keyCounter: "key_a" }, "key"), "key_a");
  assert.equal(heldCounterId({ keyId: "key_b" }, "key"), "key_b");
  assert.equal(heldCounterId({ keyId: "key_b", user: "u1" }, "user"), "u1");
});

Deno.test("the capped keys are those with a cap set, not those keeping only a counter", () => {
  const none = { total: null, daily: null, monthly: null };
  const record = {
    keys: { key_a: cap, key_b: { ...none, counter: "key_0" }, key_c: { ...cap, counter: "key_1" } },
    endUser: cap,
  };
  assert.deepEqual(cappedKeyIds(record), ["key_a", "key_c"]);
});

Deno.test("a clock behind the counter's day or month counts into that later window and never resets it", () => {
  const midnight = Date.UTC(2026, 1, 1);
  const ahead = currentCounter(null, midnight + 5_000);
  ahead.daySpent = ahead.monthSpent = ahead.total = 900_000;
  const behind = currentCounter(ahead, midnight - 10_000);
  assert.equal(behind.day, "2026-02-01");
  assert.equal(behind.month, "2026-02");
  assert.equal(behind.daySpent, 900_000, "the later day's spending stays");
  assert.equal(behind.monthSpent, 900_000, "the later month's spending stays");
  const next = currentCounter(ahead, Date.UTC(2026, 1, 2));
  assert.deepEqual([next.day, next.daySpent, next.monthSpent], ["2026-02-02", 0, 900_000]);
});
