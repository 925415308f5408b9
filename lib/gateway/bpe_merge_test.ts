import assert from "node:assert/strict";
import { mergedParts } from "./bpe_merge.ts";

/** A toy vocabulary: each token's rank, its text the bytes (ASCII) it stands for. */
function ranksOf(tokens: string[], text: string) {
  const rank = new Map(tokens.map((t, i) => [t, i]));
  return (start: number, end: number) => rank.get(text.slice(start, end));
}

function parts(tokens: string[], text: string): string[] {
  const starts = mergedParts(text.length, ranksOf(tokens, text));
  return starts.map((start, i) => text.slice(start, starts[i + 1] ?? text.length));
}

Deno.test("the lowest-ranked pair merges first, then the pairs it makes", () => {
  assert.deepEqual(parts(["ab", "bc"], "abc"), ["ab", "c"]);
  assert.deepEqual(parts(["bc", "ab"], "abc"), ["a", "bc"]);
  assert.deepEqual(parts(["bc", "ab", "abc"], "abc"), ["abc"]);
});

Deno.test("of pairs of equal rank the leftmost merges first", () => {
  assert.deepEqual(parts(["aa"], "aaa"), ["aa", "a"]);
  assert.deepEqual(parts(["aa", "aaaa"], "aaaaa"), ["aaaa", "a"]);
});

Deno.test("a pair that stopped existing is not merged: its parts merged otherwise first", () => {
  // "bc" merges first; the pair "ab" offered at the start is stale, and "abc" is not a token.
  assert.deepEqual(parts(["bc", "ab"], "abc"), ["a", "bc"]);
  assert.deepEqual(parts(["bc", "ab", "abcd", "cd"], "abcd"), ["a", "bc", "d"]);
});

Deno.test("bytes that make no pair stay single, and nothing is empty", () => {
  assert.deepEqual(parts([], "xyz"), ["x", "y", "z"]);
  assert.deepEqual(mergedParts(0, () => 0), []);
  assert.deepEqual(parts(["ab"], "a"), ["a"]);
});
