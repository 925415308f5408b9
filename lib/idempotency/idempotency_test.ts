import assert from "node:assert/strict";
import {
  canonicalBodyHash,
  canonicalJson,
  IdempotencyStore,
  validIdempotencyKey,
} from "./idempotency.ts";

Deno.test("the same body with its keys in another order is the same request", () => {
  assert.equal(
    canonicalBodyHash({ model: "m", messages: [{ role: "user", content: "hi" }], n: 1 }),
    canonicalBodyHash({ n: 1, messages: [{ content: "hi", role: "user" }], model: "m" }),
  );
});

Deno.test("a body that differs in any value, or in array order, is another request", () => {
  const base = canonicalBodyHash({ a: [1, 2], b: "x" });
  assert.notEqual(base, canonicalBodyHash({ a: [2, 1], b: "x" }));
  assert.notEqual(base, canonicalBodyHash({ a: [1, 2], b: "y" }));
  assert.notEqual(base, canonicalBodyHash({ a: [1, 2], b: "x", c: null }));
});

Deno.test("canonical JSON sorts keys at every depth and drops undefined, as JSON would", () => {
  assert.equal(canonicalJson({ b: { d: 1, c: [true] }, a: undefined }), '{"b":{"c":[true],"d":1}}');
});

Deno.test("a key is 1 to 255 visible ASCII characters", () => {
  assert.ok(validIdempotencyKey("8e03978e-40d5-43e8-bc93-6894a57f9324"));
  assert.ok(!validIdempotencyKey(""));
  assert.ok(!validIdempotencyKey("a".repeat(256)));
  assert.ok(!validIdempotencyKey("has space"));
  assert.ok(!validIdempotencyKey("ключ"));
});

Deno.test("an answer too large to record names the limit it was over, whichever instance's limit reads it", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const small = new IdempotencyStore(kv, { leaseMs: 60_000, maxBodyBytes: 200 });
    const large = new IdempotencyStore(kv, { leaseMs: 60_000 });
    const hash = canonicalBodyHash({ model: "m" });
    const claim = await small.claim("key_a", "k1", hash, "req_1", "POST /v1/chat/completions");
    assert.equal(claim.kind, "claimed");
    if (claim.kind !== "claimed") return;
    const body = new TextEncoder().encode("x".repeat(671));
    await small.complete("key_a", "k1", claim, "req_1", hash, { status: 200, headers: {}, body });
    for (const store of [small, large]) {
      assert.deepEqual(
        await store.claim("key_a", "k1", hash, "req_2", "POST /v1/chat/completions"),
        { kind: "too_large", requestId: "req_1", bytes: 671, limit: 200 },
      );
    }
  } finally {
    kv.close();
  }
});
