import assert from "node:assert/strict";
import { concatBytes } from "./bytes.ts";

Deno.test("parts are joined in order, empty parts included", () => {
  const joined = concatBytes([new Uint8Array([1, 2]), new Uint8Array(), new Uint8Array([3])]);
  assert.deepEqual([...joined], [1, 2, 3]);
  assert.equal(concatBytes([]).byteLength, 0);
});
