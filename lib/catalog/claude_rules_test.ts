import assert from "node:assert/strict";
import { claudeRules, claudeRulesByName, type ClaudeThinking } from "./claude_rules.ts";

function rules(
  thinking: ClaudeThinking,
  sampling: boolean,
  forcedToolChoice: boolean,
  prefill: boolean,
) {
  return { thinking, sampling, forcedToolChoice, prefill };
}

/** The rules but the image edge and strict tools (their own tests below). */
function withoutImageEdge(
  { imageLongEdge: _, strictTools: __, ...rest }: ReturnType<typeof claudeRules>,
) {
  return rest;
}

function assertRules(names: string[], expected: ReturnType<typeof rules>) {
  for (const name of names) {
    assert.deepEqual(withoutImageEdge(claudeRulesByName(name)), expected, name);
  }
}

Deno.test("Claude 4.5 and earlier think by budget and take sampling parameters, forced tools and a prefill", () => {
  assertRules([
    "claude-sonnet-4-5",
    "claude-haiku-4-5-20251001",
    "claude-opus-4-1-20250805",
    // The snapshot date is not a minor version.
    "claude-sonnet-4-20250514",
    "claude-3-7-sonnet-latest",
    "claude-3-5-haiku-20241022",
    "a-model-nobody-named",
  ], rules("budget", true, true, true));
});

Deno.test("Opus and Sonnet 4.6 think by budget but take no prefill", () => {
  assertRules(
    ["claude-opus-4-6", "claude-sonnet-4-6", "anthropic.claude-opus-4-6-v1"],
    rules("budget", true, true, false),
  );
});

Deno.test("Opus 4.7 and 4.8 think adaptively on request and take no sampling parameters", () => {
  assertRules(
    ["claude-opus-4-7", "claude-opus-4-8", "claude-opus-4-7-20260416", "claude-opus-4-7@20260416"],
    rules("adaptive", false, true, false),
  );
});

Deno.test("Sonnet 5 and Opus 5 think unless told not to", () => {
  assertRules(
    ["claude-sonnet-5", "claude-opus-5", "claude-sonnet-5-20260801", "anthropic.claude-sonnet-5"],
    rules("adaptive_by_default", false, true, false),
  );
});

Deno.test("Fable 5 and the Mythos models always think; Opus 5.5 and Fable 5.1 cannot be forced to call a tool", () => {
  assertRules(
    ["claude-fable-5", "claude-mythos-5", "claude-mythos-preview"],
    rules("always", false, true, false),
  );
  assertRules(
    ["claude-opus-5-5", "claude-fable-5-1", "claude-opus-6"],
    rules("always", false, false, false),
  );
});

Deno.test("the catalog's statement wins over the name, field by field; adaptive thinking stated brings no sampling or prefill", () => {
  assert.deepEqual(
    withoutImageEdge(
      claudeRules("my-claude-deployment", { thinking: "always", forced_tool_choice: false }),
    ),
    rules("always", false, false, false),
  );
  assert.deepEqual(
    withoutImageEdge(claudeRules("my-claude-deployment", { thinking: "adaptive", sampling: true })),
    rules("adaptive", true, true, false),
  );
  assert.deepEqual(
    withoutImageEdge(claudeRules("claude-opus-4-7", { sampling: true })),
    rules("adaptive", true, true, false),
  );
  assert.deepEqual(
    withoutImageEdge(claudeRules("claude-opus-4-6", { prefill: true })),
    rules("budget", true, true, true),
  );
});

Deno.test("images are read at up to 1568 px before Opus 4.7 and at 2576 px from it, or from a name that does not say, unless the catalog states an edge", () => {
  const edge = (name: string) => claudeRulesByName(name).imageLongEdge;
  for (
    const name of ["claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-3-7-sonnet"]
  ) {
    assert.equal(edge(name), 1568, name);
  }
  for (
    const name of [
      "claude-opus-4-7",
      "claude-opus-4-8",
      "claude-sonnet-4-7",
      "claude-sonnet-5",
      "claude-opus-5-5",
      "claude-fable-5",
      "claude-mythos-preview",
      "my-claude-deployment",
    ]
  ) {
    assert.equal(edge(name), 2576, name);
  }
  assert.equal(claudeRules("my-claude-deployment", { image_long_edge: 1568 }).imageLongEdge, 1568);
  assert.equal(claudeRules("claude-opus-4-6", { image_long_edge: 2576 }).imageLongEdge, 2576);
});

Deno.test("strict tools are taken from Claude 4.5 on, where structured outputs are, and by a name that does not say only when the catalog states it", () => {
  const strict = (name: string) => claudeRulesByName(name).strictTools;
  for (
    const name of [
      "claude-sonnet-4-5",
      "claude-haiku-4-5-20251001",
      "claude-opus-4-5",
      "claude-opus-4-6",
      "claude-sonnet-4-6",
      "claude-opus-4-7",
      "claude-sonnet-5",
      "claude-opus-5-5",
      "claude-fable-5",
      "claude-mythos-preview",
      "anthropic.claude-sonnet-4-5-20250929-v1:0",
    ]
  ) {
    assert.equal(strict(name), true, name);
  }
  for (
    const name of [
      "claude-opus-4-1-20250805",
      "claude-sonnet-4-20250514",
      "claude-3-7-sonnet-latest",
      "my-claude-deployment",
    ]
  ) {
    assert.equal(strict(name), false, name);
  }
  assert.equal(claudeRules("my-claude-deployment", { strict_tools: true }).strictTools, true);
  assert.equal(claudeRules("claude-sonnet-4-5", { strict_tools: false }).strictTools, false);
});
