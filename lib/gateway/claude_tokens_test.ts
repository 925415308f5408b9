import assert from "node:assert/strict";
import fc from "fast-check";
import { claudeTokenBound, claudeTokenBoundOfJson } from "./claude_tokens.ts";
import {
  byteCeiling,
  headroomOf,
  legacyClaudeTokens,
  loadCorpus,
  requiredBound,
} from "../../tests/claude_token_reference.ts";

/** The most bounding two parts separately may fall short of bounding them together. */
const SPLIT_SLACK = 7;

Deno.test("every corpus sample is held at its headroom over the legacy tokenizer, or at its byte ceiling", () => {
  const short: string[] = [];
  for (const sample of loadCorpus()) {
    const legacy = legacyClaudeTokens(sample.text);
    const bound = claudeTokenBound(sample.text);
    const required = requiredBound(sample, legacy);
    if (bound < required) {
      short.push(
        `${sample.id}: bound ${bound} < ${required} (legacy ${legacy} × ${
          headroomOf(sample, legacy).toFixed(2)
        }, ceiling ${byteCeiling(sample.text)})`,
      );
    }
  }
  assert.deepEqual(short, []);
});

Deno.test("the bound never exceeds the byte ceiling, and the legacy count never exceeds the bound", () => {
  for (const sample of loadCorpus()) {
    const bound = claudeTokenBound(sample.text);
    assert.ok(bound <= byteCeiling(sample.text), sample.id);
    assert.ok(bound >= legacyClaudeTokens(sample.text), sample.id);
  }
});

/** Any UTF-16 string, lone surrogates included, leaning on the characters the bound treats apart. */
const anyText = fc.string({
  unit: fc.oneof(
    fc.constantFrom(..."aAzZ09 \t\n\r.,=-_{}\"'é€😀\u0301\uFDFA\uD800\uDC00"),
    fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)),
    fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
    fc.integer({ min: 0x10000, max: 0x10ffff }).map((c) => String.fromCodePoint(c)),
  ),
  maxLength: 60,
});

Deno.test("non-empty text is at least one token, and no text costs more than its byte ceiling", () => {
  assert.equal(claudeTokenBound(""), 0);
  fc.assert(
    fc.property(anyText, (text) => {
      const bound = claudeTokenBound(text);
      assert.ok(text.length === 0 || bound >= 1);
      assert.ok(bound <= byteCeiling(text));
    }),
    { numRuns: 3000 },
  );
});

Deno.test("bounding two parts separately falls short of bounding them together by a few tokens at most", () => {
  fc.assert(
    fc.property(anyText, anyText, (a, b) => {
      assert.ok(claudeTokenBound(a + b) <= claudeTokenBound(a) + claudeTokenBound(b) + SPLIT_SLACK);
    }),
    { numRuns: 5000 },
  );
  // The worst cuts known: through a long glued run of digits or letters, through a rare pair.
  for (
    const [a, b] of [
      ["1".repeat(16), "a"],
      ["a".repeat(15), "Q1"],
      ["xq", "zx"],
      ["aB", "Cd"],
      ["==", "="],
      ["\uD83D", "\uDE00"],
    ]
  ) {
    assert.ok(
      claudeTokenBound(a + b) <= claudeTokenBound(a) + claudeTokenBound(b) + SPLIT_SLACK,
      `${a}|${b}`,
    );
  }
});

Deno.test("edge cases: normalization, surrogates, emoji, adversarial ASCII", () => {
  // NFKC turns U+FDFA into 18 characters (33 bytes); the legacy tokenizer sees those.
  assert.equal(claudeTokenBound("\uFDFA"), 33);
  assert.ok(legacyClaudeTokens("\uFDFA") <= 33);
  // A lone surrogate reaches the provider as U+FFFD: 3 bytes.
  assert.equal(claudeTokenBound("\uD800"), 3);
  assert.equal(claudeTokenBound("\uDC00\uD800"), 6);
  // A surrogate pair is one 4-byte code point.
  assert.equal(claudeTokenBound("😀"), 4);
  assert.equal(claudeTokenBound("é"), 2);
  assert.equal(claudeTokenBound("中文"), 6);
  // One character alone is one token.
  assert.equal(claudeTokenBound("a"), 1);
  assert.equal(claudeTokenBound(" "), 1);
  // Every character separated by spaces: a newer tokenizer makes each space its own token.
  assert.equal(claudeTokenBound("a b c d e"), 9);
  assert.equal(claudeTokenBound("1 2 3 4 5"), 9);
  // " hi" repeated: two tokens each on Opus 4.7 (space, word).
  assert.ok(claudeTokenBound("hi" + " hi".repeat(50)) >= 2 * 51);
  // Letters against digits (hex, base64) are charged their bytes.
  assert.equal(claudeTokenBound("a1b2c3d4e5f6"), 12);
  // Long runs of one character stay far below bytes but above 3 × the legacy count.
  const as = "a".repeat(512);
  assert.ok(claudeTokenBound(as) >= 3 * legacyClaudeTokens(as));
  assert.ok(claudeTokenBound(" ".repeat(4096)) < 4096 / 2);
});

Deno.test("JSON values are bounded as indented JSON text", () => {
  assert.equal(claudeTokenBoundOfJson(undefined), 0);
  const schema = {
    type: "object",
    properties: { city: { type: "string", description: "City name" } },
    required: ["city"],
  };
  assert.equal(claudeTokenBoundOfJson(schema), claudeTokenBound(JSON.stringify(schema, null, 2)));
  assert.ok(claudeTokenBoundOfJson(schema) >= claudeTokenBound(JSON.stringify(schema)));
  assert.ok(
    claudeTokenBoundOfJson(schema) >= 2 * legacyClaudeTokens(JSON.stringify(schema, null, 2)),
  );
  // A lone surrogate is escaped by JSON.stringify, six ASCII characters.
  assert.equal(claudeTokenBoundOfJson("\uD800"), claudeTokenBound('"\\ud800"'));
});

Deno.test("indented JSON too large to write is bounded by its bytes, counted without writing it", () => {
  // Every shape indentation meets: objects, arrays, empty ones, nesting, a key with a space.
  const member = { a: [1, {}, [], [true, null]], "b c": { d: "x", e: { f: [0] } } };
  const wide = Array.from({ length: 60_000 }, () => member);
  const indented = JSON.stringify(wide, null, 2);
  assert.ok(indented.length > 4 * 1024 * 1024);
  assert.equal(claudeTokenBoundOfJson(wide), indented.length, "ASCII: a token a character");
  // Arrays 58 deep around 100,000 zeros: 12 MB indented from 200 KB.
  let deep: unknown = Array(100_000).fill(0);
  for (let i = 0; i < 57; i++) deep = [deep];
  assert.equal(claudeTokenBoundOfJson(deep), JSON.stringify(deep, null, 2).length);
  // Beyond ASCII, each character at its dearest normal form's bytes.
  const accented = Array.from({ length: 60_000 }, () => ({ ...member, g: "ﷺé" }));
  const bytes = new TextEncoder().encode(JSON.stringify(accented, null, 2)).length;
  assert.ok(claudeTokenBoundOfJson(accented) >= bytes);
});

Deno.test("a run of one repeated punctuation, space or control character is held at or above the legacy tokenizer's count", () => {
  const chars = [..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n\r\x0b\x0c\x7f"];
  for (let c = 1; c < 32; c++) chars.push(String.fromCharCode(c));
  for (const char of chars) {
    const run = char.repeat(300);
    const legacy = legacyClaudeTokens(run);
    assert.ok(
      claudeTokenBound(run) >= legacy,
      `${JSON.stringify(char)}: bound ${claudeTokenBound(run)} < legacy ${legacy}`,
    );
  }
});

Deno.test("a made-up word of common letter pairs that follows no space is held at or above the legacy count", () => {
  for (const word of ["pifrrlt", "lsnveb", "sskspu", "voiexx", "eysylt"]) {
    for (const before of ["", "\n", ".", "_", "("]) {
      const text = `${before}${word}`.repeat(50);
      const legacy = legacyClaudeTokens(text);
      assert.ok(
        claudeTokenBound(text) >= legacy,
        `${JSON.stringify(text.slice(0, 12))}: ${legacy}`,
      );
    }
  }
});
