import assert from "node:assert/strict";
import { FormTokens } from "./form_tokens.ts";

const T0 = Date.UTC(2026, 6, 29, 12, 0, 0);
const HOUR = 60 * 60 * 1000;

async function withTokens(fn: (tokens: FormTokens, kv: Deno.Kv) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await fn(new FormTokens(kv), kv);
  } finally {
    kv.close();
  }
}

Deno.test("a token verifies for the purpose it was issued for, and no other", () =>
  withTokens(async (tokens) => {
    const token = await tokens.issue("top-up:abc", T0);
    assert.equal(await tokens.verify("top-up:abc", token, T0), true);
    assert.equal(await tokens.verify("top-up:abd", token, T0), false);
    assert.equal(await tokens.verify("top-up:ab", token, T0), false);
  }));

Deno.test("a token is accepted for six hours after it was issued, and not after", () =>
  withTokens(async (tokens) => {
    const token = await tokens.issue("p", T0);
    assert.equal(await tokens.verify("p", token, T0 + 6 * HOUR), true);
    assert.equal(await tokens.verify("p", token, T0 + 6 * HOUR + 1), false);
  }));

Deno.test("a token issued more than a minute in the verifier's future is refused", () =>
  withTokens(async (tokens) => {
    const token = await tokens.issue("p", T0);
    assert.equal(await tokens.verify("p", token, T0 - 60_000), true, "clocks a minute apart");
    assert.equal(await tokens.verify("p", token, T0 - 60_001), false);
  }));

Deno.test("a token changed anywhere is refused", () =>
  withTokens(async (tokens) => {
    const token = await tokens.issue("p", T0);
    const [issued, nonce, mac] = token.split(".");
    const flip = (text: string, i: number, alphabet: string) =>
      text.slice(0, i) + alphabet[(alphabet.indexOf(text[i]) + 1) % alphabet.length] +
      text.slice(i + 1);
    const b36 = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (
      const forged of [
        `${flip(issued, issued.length - 1, b36)}.${nonce}.${mac}`,
        `${issued}.${flip(nonce, 0, b36)}.${mac}`,
        `${issued}.${nonce}.${flip(mac, 10, "0123456789abcdef")}`,
        `${(T0 + HOUR).toString(36)}.${nonce}.${mac}`,
      ]
    ) {
      assert.equal(await tokens.verify("p", forged, T0 + 2 * HOUR), false, forged);
    }
  }));

Deno.test("anything that is not a token of our shape is refused without error", () =>
  withTokens(async (tokens) => {
    const token = await tokens.issue("p", T0);
    for (
      const bad of [
        undefined,
        null,
        42,
        ["x"],
        "",
        "a.b.c",
        token.toUpperCase(),
        `${token}0`,
        `${"a".repeat(201)}`,
      ]
    ) {
      assert.equal(await tokens.verify("p", bad, T0), false, String(bad));
    }
  }));

Deno.test("every process on one database accepts the others' tokens: the key is created once in KV", () =>
  withTokens(async (first, kv) => {
    const second = new FormTokens(kv);
    const [a, b] = await Promise.all([first.issue("p", T0), second.issue("p", T0)]);
    assert.equal(await second.verify("p", a, T0), true);
    assert.equal(await first.verify("p", b, T0), true);
    const other = await Deno.openKv(":memory:");
    try {
      assert.equal(await new FormTokens(other).verify("p", a, T0), false, "another database");
    } finally {
      other.close();
    }
  }));
