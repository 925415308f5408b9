import assert from "node:assert/strict";
import { sha256Hex, timingSafeEqualStrings } from "./secrets.ts";

Deno.test("a secret is stored as the hex SHA-256 of its UTF-8 text", () => {
  assert.equal(
    sha256Hex("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.equal(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert.notEqual(sha256Hex("é"), sha256Hex("e\u0301"), "no normalisation: bytes are hashed");
});

Deno.test("secrets compare equal only when every byte and the length match", () => {
  assert.equal(timingSafeEqualStrings("token-123", "token-123"), true);
  assert.equal(timingSafeEqualStrings("", ""), true);
  for (
    const [a, b] of [
      ["token-123", "token-124"],
      ["token-123", "token-12"],
      ["token-12", "token-123"],
      ["", "x"],
      ["token\u0000", "token"],
      ["é", "e\u0301"],
    ]
  ) {
    assert.equal(timingSafeEqualStrings(a, b), false, `${JSON.stringify(a)} ${JSON.stringify(b)}`);
  }
});
