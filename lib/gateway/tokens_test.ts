import assert from "node:assert/strict";
import fc from "fast-check";
import {
  countTokens as countO200kExactly,
  encode as encodeO200kExactly,
} from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100kExactly } from "gpt-tokenizer/encoding/cl100k_base";
import {
  countExactTokensWith,
  countLimitTokens,
  countPromptTokens,
  countSimulatedTokens,
  countTextTokens,
  countTokensWith,
  MergeRation,
  simulatedPieces,
  simulatedTokenIds,
  textTokenIds,
} from "./tokens.ts";

/** The texts of the simulator's pieces. */
const pieceTexts = (text: string) => [...simulatedPieces(text)].map((piece) => piece.text);

const PLAIN = { disallowedSpecial: new Set<string>() };

/** Long pre-tokens merged without limit, for tests of exactness. */
const UNRATIONED = new MergeRation(Infinity, 0);

const SAMPLES = [
  "Hello, Claude",
  "The quick brown fox jumps over the lazy dog.",
  "const total = items.reduce((sum, x) => sum + x.price, 0);",
  "Grüße aus München: Straße, Übermaß, Öl.",
  "日本語のテキストを数える",
  "emoji 😀🎉👩‍👩‍👧 and flags 🇫🇷",
];

Deno.test("empty text is zero tokens", () => {
  assert.equal(countTextTokens(""), 0);
});

Deno.test("text is counted with o200k_base: 'Hello' is one token, 'Hello, Claude' three", () => {
  assert.equal(countTextTokens("Hello"), 1);
  assert.equal(countTextTokens("Hello, Claude"), 3);
});

Deno.test("a chat's prompt adds 4 tokens per message and 3 for the reply to the text's own", () => {
  assert.equal(countPromptTokens([]), 3);
  assert.equal(countPromptTokens([{ content: "Hello" }]), 3 + 4 + 1);
  assert.equal(
    countPromptTokens([{ content: "Hello, Claude" }, { content: "" }, { content: "Hello" }]),
    3 + (4 + 3) + (4 + 0) + (4 + 1),
  );
});

Deno.test("text that looks like a special token is counted as ordinary text, never refused", () => {
  const text = "<|endoftext|><|im_start|>";
  assert.ok(countTextTokens(text) > 2);
  assert.equal(pieceTexts(text).join(""), text);
});

Deno.test("the simulator's pieces of a text join back to it exactly, and none is a broken character", () => {
  const long = ["ก".repeat(300), "😀".repeat(100), "x".repeat(1000)];
  for (const text of [...SAMPLES, ...long]) {
    const pieces = pieceTexts(text);
    assert.equal(pieces.join(""), text);
    for (const piece of pieces) assert.ok(!piece.includes("\uFFFD"), `${text}: ${piece}`);
  }
  // A lone surrogate is no character: it comes back as U+FFFD, as the encoder reads it.
  const lone = "a\uD800b".repeat(40);
  assert.equal(pieceTexts(lone).join(""), lone.toWellFormed());
});

Deno.test("the simulator bills a text of short pre-tokens its o200k tokens, a piece per token where no character is split", () => {
  for (const text of SAMPLES) {
    const ids = [...simulatedPieces(text)].flatMap((piece) => piece.ids);
    assert.deepEqual(ids, textTokenIds(text), text);
    assert.equal(countSimulatedTokens(text), countTextTokens(text), text);
  }
  assert.equal(pieceTexts("Hello, Claude").length, countTextTokens("Hello, Claude"));
});

Deno.test("the simulator cuts a long pre-token into pieces of at most 256 bytes, fewer than its tokens and never above a hold, the same every time", () => {
  for (const run of ["x", "=", "漢", "😀", "ab"]) {
    const text = `say ${run.repeat(100_000)} now`;
    const pieces = [...simulatedPieces(text)];
    assert.equal(pieces.map((p) => p.text).join(""), text);
    for (const piece of pieces) {
      assert.ok(new TextEncoder().encode(piece.text).length <= 256, JSON.stringify(run));
    }
    const simulated = countSimulatedTokens(text);
    assert.ok(simulated <= countTextTokens(text), `${run}: ${simulated}`);
    assert.ok(simulated <= countTokensWith("o200k", text), "within a hold's count");
    assert.ok(simulated >= Math.ceil(new TextEncoder().encode(text).length / 256));
    assert.deepEqual([...simulatedPieces(text)], pieces);
    assert.deepEqual(simulatedTokenIds(text), pieces.flatMap((piece) => piece.ids));
  }
});

Deno.test("splitting one text leaves nothing behind that changes the next", () => {
  const after = pieceTexts("Hello, Claude");
  pieceTexts("😀🎉");
  assert.deepEqual(pieceTexts("Hello, Claude"), after);
});

Deno.test("a text counted again (from the count cache) has the same count as its token ids", () => {
  const texts = ["You are a helpful assistant. Answer briefly.", "Привет, как дела? ".repeat(50)];
  for (const text of texts) {
    const ids = textTokenIds(text).length;
    assert.equal(countTextTokens(text), ids);
    assert.equal(countTextTokens(text), ids);
    assert.equal(countTextTokens(`${text}!`), textTokenIds(`${text}!`).length);
  }
});

Deno.test("a long run of one kind of character is counted in time linear in its length, exactly", () => {
  // gpt-tokenizer's own merges take time in the square of a pre-token's length: minutes for these.
  for (const [run, tokens] of [["x", 25_000], ["=", 3_125], ["\n", 12_500], ["漢", 200_000]]) {
    const text = (run as string).repeat(200_000);
    assert.equal(countTextTokens(text), tokens, JSON.stringify(run));
    assert.ok(countTokensWith("cl100k", text, UNRATIONED) >= (tokens as number));
  }
  assert.equal(textTokenIds("y".repeat(200_000)).length, countTextTokens("y".repeat(200_000)));
});

Deno.test("a long pre-token is counted exactly: a run cut into pieces could count fewer tokens than the whole", () => {
  // Tokenized in pieces of 128 characters, each of these cuts saved two tokens.
  const block =
    "rxgpurqwthzdkjdntpzomdhhdfqvhnkbuqykpifasepuktobcteefvtgfuecolddxaheyghcrcrlvdmlrzoukuttgedcrwbxctricbvzvgkzrvzyptnuwxoyjfrmvvvv";
  for (const times of [1, 8, 16]) {
    const text = block.repeat(times);
    assert.equal(countTextTokens(text), countO200kExactly(text, PLAIN), `${times} blocks`);
    assert.deepEqual(textTokenIds(text), encodeO200kExactly(text, PLAIN), `${times} blocks`);
    assert.equal(
      countTokensWith("cl100k", text, UNRATIONED),
      Math.max(countO200kExactly(text, PLAIN), countCl100kExactly(text, PLAIN)),
    );
  }
});

Deno.test("a script written without spaces is counted exactly", () => {
  const thai = "ภาษาไทยเป็นภาษาที่เขียนโดยไม่เว้นวรรคระหว่างคำ".repeat(40);
  assert.equal(countTextTokens(thai), countO200kExactly(thai, PLAIN));
  assert.deepEqual(textTokenIds(thai), encodeO200kExactly(thai, PLAIN));
});

Deno.test("any text, long runs and lone surrogates included, is counted exactly in both encodings", () => {
  const runs = ["x", "=", " ", "\n", "漢", "é", "ab", "-_", "😀", "\ud800", "aé漢😀"];
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          fc.string({ maxLength: 40 }),
          fc.string({ unit: "grapheme", maxLength: 40 }),
          fc.tuple(fc.constantFrom(...runs), fc.integer({ min: 1, max: 700 })).map(([c, n]) =>
            c.repeat(n)
          ),
        ),
        { maxLength: 6 },
      ),
      (parts) => {
        const text = parts.join("");
        const exact = countO200kExactly(text, PLAIN);
        assert.equal(countTextTokens(text), exact, "o200k");
        assert.equal(textTokenIds(text).length, exact, "o200k ids");
        const cl100k = countCl100kExactly(text, PLAIN);
        assert.equal(
          countTokensWith("cl100k", text, UNRATIONED),
          Math.max(exact, cl100k),
          "either",
        );
        assert.equal(countLimitTokens("cl100k", text, UNRATIONED), cl100k, "cl100k");
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("the merge ration grants up to its burst, refills at its rate and never beyond the burst", () => {
  let now = 0;
  const ration = new MergeRation(1_000, 100, () => now);
  assert.ok(ration.take(600));
  assert.ok(!ration.take(500), "400 left");
  assert.ok(ration.take(400));
  now += 2_000;
  assert.ok(!ration.take(201), "200 refilled");
  assert.ok(ration.take(200));
  now += 60_000;
  assert.ok(!ration.take(1_001), "never more than the burst");
  assert.ok(ration.take(1_000));
});

Deno.test("a long pre-token beyond the merge ration is held at its UTF-8 bytes, limited at its bytes over the longest token, and not cached", () => {
  const spent = new MergeRation(0, 0);
  const run = "qzvx".repeat(5_000) + "漢".repeat(3_000);
  const exactO200k = countO200kExactly(run, PLAIN);
  assert.equal(countTokensWith("o200k", run, spent), 20_000 + 9_000);
  assert.equal(countTokensWith("cl100k", run, spent), 20_000 + 9_000);
  assert.equal(countLimitTokens("o200k", run, spent), Math.ceil(29_000 / 256));
  assert.ok(countLimitTokens("o200k", run, spent) <= exactO200k);
  // Counted again with the ration to spare: exact, not the bound left behind.
  assert.equal(countTokensWith("o200k", run, UNRATIONED), exactO200k);
  assert.equal(countLimitTokens("o200k", run, spent), exactO200k, "exact once cached");
});

Deno.test("a pre-token of more than the ration's burst is never merged: 4 MiB of letters is held at its bytes at once", () => {
  const letters = "abcdefghijklmnopqrstuvwxyz".repeat(162_000);
  assert.equal(countTokensWith("o200k", letters), letters.length);
  assert.equal(countTokensWith("cl100k", letters), letters.length);
  assert.equal(countLimitTokens("cl100k", letters), Math.ceil(letters.length / 256));
});

Deno.test("output a request produced is counted exactly, whatever is left of the ration", () => {
  const run = "qzvx".repeat(200_000);
  assert.equal(countTokensWith("o200k", run), run.length, "beyond the burst: held at its bytes");
  const exact = textTokenIds(run).length;
  assert.ok(exact < run.length);
  assert.equal(countExactTokensWith("o200k", run), exact);
});
