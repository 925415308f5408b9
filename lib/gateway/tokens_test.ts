import assert from "node:assert/strict";
import { countPromptTokens, countTextTokens, splitIntoTokenTexts, textTokenIds } from "./tokens.ts";

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
