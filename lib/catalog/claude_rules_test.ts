import assert from "node:assert/strict";
import { claudeRules, claudeRulesByName } from "./claude_rules.ts";

const EARLIER = { thinking: "budget", sampling: true, forcedToolChoice: true };

Deno.test("Claude 4.6 and earlier think by budget and take sampling parameters and forced tools", () => {
  for (
    const name of [
      "claude-sonnet-4-5",
      "claude-haiku-4-5-20251001",
      "claude-opus-4-6",
      "claude-sonnet-4-6",
      "claude-opus-4-1-20250805",
      // The snapshot date is not a minor version.
      "claude-sonnet-4-20250514",
      "claude-3-7-sonnet-latest",
      "claude-3-5-haiku-20241022",
      "a-model-nobody-named",
    ]
  ) {
    assert.deepEqual(claudeRulesByName(name), EARLIER, name);
  }
});

Deno.test("Opus 4.7 and 4.8 think adaptively on request and take no sampling parameters", () => {
  for (const name of ["claude-opus-4-7", "claude-opus-4-8", "claude-opus-4-7-20260416"]) {
    assert.deepEqual(
      claudeRulesByName(name),
      { thinking: "adaptive", sampling: false, forcedToolChoice: true },
      name,
    );
  }
});

Deno.test("Sonnet 5 and Opus 5 think unless told not to", () => {
  for (const name of ["claude-sonnet-5", "claude-opus-5", "claude-sonnet-5-20260801"]) {
    assert.deepEqual(
      claudeRulesByName(name),
      { thinking: "adaptive_by_default", sampling: false, forcedToolChoice: true },
      name,
    );
  }
});

Deno.test("Fable 5 and the Mythos models always think; Opus 5.5 and Fable 5.1 cannot be forced to call a tool", () => {
  for (const name of ["claude-fable-5", "claude-mythos-5", "claude-mythos-preview"]) {
    assert.deepEqual(
      claudeRulesByName(name),
      { thinking: "always", sampling: false, forcedToolChoice: true },
      name,
    );
  }
  for (const name of ["claude-opus-5-5", "claude-fable-5-1", "claude-opus-6"]) {
    assert.deepEqual(
      claudeRulesByName(name),
      { thinking: "always", sampling: false, forcedToolChoice: false },
      name,
    );
  }
});

Deno.test("the catalog's statement wins over the name, field by field", () => {
  assert.deepEqual(
    claudeRules("my-claude-deployment", { thinking: "always", forced_tool_choice: false }),
    { thinking: "always", sampling: true, forcedToolChoice: false },
  );
  assert.deepEqual(
    claudeRules("claude-opus-4-7", { sampling: true }),
    { thinking: "adaptive", sampling: true, forcedToolChoice: true },
  );
});
