import assert from "node:assert/strict";
import { fromBase64, inFormat, toBase64 } from "./embedding_vectors.ts";

Deno.test("base64 is the little-endian float32 bytes, as OpenAI sends it", () => {
  // 1.0 is 0x3f800000, little-endian 00 00 80 3f; -2.0 is 0xc0000000.
  assert.equal(toBase64([1, -2]), btoa(String.fromCharCode(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0)));
  assert.deepEqual(fromBase64(toBase64([1, -2, 0.5])), [1, -2, 0.5]);
});

Deno.test("a long vector survives the round trip at float32 precision", () => {
  const vector = Array.from({ length: 70_000 }, (_, i) => Math.sin(i));
  const back = fromBase64(toBase64(vector))!;
  assert.equal(back.length, vector.length);
  assert.equal(back[12345], Math.fround(vector[12345]));
});

Deno.test("text that is not base64 of whole float32s decodes to null", () => {
  assert.equal(fromBase64("not base64!"), null);
  assert.equal(fromBase64(btoa("abc")), null);
});

Deno.test("a vector is given in the format asked for, whichever the upstream sent", () => {
  const encoded = toBase64([0.25, 0.5]);
  assert.deepEqual(inFormat([0.25, 0.5], "float"), [0.25, 0.5]);
  assert.equal(inFormat([0.25, 0.5], "base64"), encoded);
  assert.equal(inFormat(encoded, "base64"), encoded);
  assert.deepEqual(inFormat(encoded, "float"), [0.25, 0.5]);
  assert.equal(inFormat("%%%", "float"), null);
});

Deno.test("a base64 vector that is not whole float32s is null when base64 was asked too, not passed on", () => {
  for (const broken of [btoa("abcde"), "%%% not base64 !!!"]) {
    assert.equal(inFormat(broken, "base64"), null, broken);
    assert.equal(inFormat(broken, "float"), null, broken);
  }
});
