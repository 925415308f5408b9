import assert from "node:assert/strict";
import fc from "fast-check";
import { countTokens as countO200kExactly } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100kExactly } from "gpt-tokenizer/encoding/cl100k_base";
import {
  countPromptTokens,
  countTextTokens,
  countTokensWith,
  splitIntoTokenTexts,
  textTokenIds,
} from "./tokens.ts";

const PLAIN = { disallowedSpecial: new Set<string>() };

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
  assert.equal(splitIntoTokenTexts(text).join(""), text);
});

Deno.test("the pieces of a text join back to it exactly, and none is a broken character", () => {
  for (const text of SAMPLES) {
    const pieces = splitIntoTokenTexts(text);
    assert.equal(pieces.join(""), text);
    for (const piece of pieces) assert.ok(!piece.includes("\uFFFD"), `${text}: ${piece}`);
  }
});

Deno.test("a text splits into one piece per token, so counting pieces counts tokens", () => {
  for (const text of SAMPLES) {
    assert.equal(splitIntoTokenTexts(text).length, countTextTokens(text), text);
  }
});

Deno.test("splitting one text leaves nothing behind that changes the next", () => {
  const after = splitIntoTokenTexts("Hello, Claude");
  splitIntoTokenTexts("😀🎉");
  assert.deepEqual(splitIntoTokenTexts("Hello, Claude"), after);
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

Deno.test("a long run of one kind of character is counted in pieces, never tokenized whole", () => {
  // Whole, gpt-tokenizer takes minutes over these (its merges grow with the square of a run).
  // Far below a byte each where characters merge; a character each (and a token per cut) where
  // each is a token of its own.
  for (const [run, most] of [["x", 250_000], ["=", 250_000], ["\n", 250_000], ["漢", 1_010_000]]) {
    const text = (run as string).repeat(1_000_000);
    const count = countTextTokens(text);
    assert.ok(count > 0 && count <= (most as number), `${JSON.stringify(run)}: ${count}`);
    assert.ok(countTokensWith("cl100k", text) > 0);
  }
  assert.ok(textTokenIds("y".repeat(1_000_000)).length > 0);
  const pieces = splitIntoTokenTexts(`say ${"z".repeat(100_000)} now`);
  assert.equal(pieces.join(""), `say ${"z".repeat(100_000)} now`);
});

Deno.test("a script written without spaces is counted within a few percent of its exact count, never below", () => {
  const thai = "ภาษาไทยเป็นภาษาที่เขียนโดยไม่เว้นวรรคระหว่างคำ".repeat(40);
  const exact = countO200kExactly(thai, PLAIN);
  const counted = countTextTokens(thai);
  assert.ok(counted >= exact && counted <= exact * 1.05, `${counted} for ${exact}`);
});

Deno.test("with long runs in it, a text's bounded count is at least its exact count, in both encodings", () => {
  const runs = ["x", "=", " ", "\n", "漢", "é", "ab", "-_"];
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          fc.string({ maxLength: 40 }),
          fc.tuple(fc.constantFrom(...runs), fc.integer({ min: 1, max: 700 })).map(([c, n]) =>
            c.repeat(n)
          ),
        ),
        { maxLength: 6 },
      ),
      (parts) => {
        const text = parts.join("");
        const exact = countO200kExactly(text, PLAIN);
        assert.ok(countTextTokens(text) >= exact, `o200k ${exact}`);
        const either = Math.max(exact, countCl100kExactly(text, PLAIN));
        assert.ok(countTokensWith("cl100k", text) >= either, `either ${either}`);
      },
    ),
    { numRuns: 300 },
  );
});
