import assert from "node:assert/strict";
import { newId, randomToken } from "./ids.ts";

Deno.test("a random token is base-36 text long enough for its bits", () => {
  assert.match(randomToken(), /^[0-9a-z]{25}$/, "128 bits: 25 characters");
  assert.match(randomToken(186), /^[0-9a-z]{36}$/);
  assert.equal(new Set(Array.from({ length: 1_000 }, () => randomToken(64))).size, 1_000);
});

Deno.test("ids carry their prefix and sort by creation time", () => {
  const early = newId("res", 1_000);
  const late = newId("res", 1_001);
  const muchLater = newId("res", Date.UTC(2100, 0, 1));
  assert.match(early, /^res_[0-9a-z]{10}[0-9a-z]{16}$/);
  assert.deepEqual([muchLater, late, early].sort(), [early, late, muchLater]);
});
