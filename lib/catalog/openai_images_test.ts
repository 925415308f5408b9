import assert from "node:assert/strict";
import { openAiImageRuleByName, UNKNOWN_OPENAI_IMAGE_RULE } from "./openai_images.ts";

const rule = (name: string) => {
  const found = openAiImageRuleByName(name);
  return found && [found.baseTokens, found.tileTokens];
};

Deno.test("OpenAI's tile models bill 85 + 170 a tile, GPT-4o mini 2833 + 5667, dated and prefixed names alike", () => {
  for (
    const name of [
      "gpt-4o",
      "gpt-4o-2024-08-06",
      "chatgpt-4o-latest",
      "azure-prod-gpt-4o",
      "gpt-4.1",
      "gpt-4.1-2025-04-14",
      "gpt-4.5-preview",
      "gpt-4-turbo",
      "o1",
      "o1-2024-12-17",
      "o3",
      "o3-pro",
      "gpt-5",
      "gpt-5-chat-latest",
      "gpt-5-2025-08-07",
    ]
  ) {
    assert.deepEqual(rule(name), [85, 170], name);
  }
  assert.deepEqual(rule("gpt-4o-mini"), [2833, 5667]);
  assert.deepEqual(rule("openai/gpt-4o-mini-2024-07-18"), [2833, 5667]);
});

Deno.test("OpenAI's patch models are held at 1,536 patches times their multiplier, flat", () => {
  assert.deepEqual(rule("gpt-4.1-mini"), [2489, 0]);
  assert.deepEqual(rule("gpt-5-mini-2025-08-07"), [2489, 0]);
  assert.deepEqual(rule("o4-mini"), [2642, 0]);
  assert.deepEqual(rule("codex-mini-latest"), [2642, 0]);
  assert.deepEqual(rule("gpt-4.1-nano"), [3779, 0]);
  assert.deepEqual(rule("openai/gpt-5-nano"), [3779, 0]);
  // GPT-5.4's small models keep the 1,536-patch budget.
  assert.deepEqual(rule("gpt-5.4-mini"), [2489, 0]);
  assert.deepEqual(rule("gpt-5.4-nano-2026-03-17"), [3779, 0]);
});

Deno.test("a name OpenAI's guide gives no rule for has none, and the unknown rule is the most of any but GPT-4o mini, an image read at its own size included", () => {
  for (
    const name of ["gpt-5.4", "gpt-5.6", "gpt-5-codex", "o3-mini", "llama-3.2-90b-vision"]
  ) {
    assert.equal(rule(name), null, name);
  }
  assert.deepEqual(UNKNOWN_OPENAI_IMAGE_RULE, {
    baseTokens: 85,
    tileTokens: 170,
    patches: { multiplier: 2.46, most: 30_000 },
  });
  // The patch models' most: a nano model's 1,536 patches.
  const { most, multiplier } = UNKNOWN_OPENAI_IMAGE_RULE.patches!;
  assert.ok(most * multiplier > 1536 * 2.46);
});
