/**
 * What a Claude model takes in a Messages request, where its generations differ: how it thinks,
 * whether it takes sampling parameters, whether a tool call can be forced, whether a conversation
 * may end with the assistant (a prefill). Anthropic's migration
 * guides state each rule per model (the README's "Providers" has the table); a request
 * that breaks one is a 400 after the reservation, so the gateway shapes the request, or refuses it
 * before the reservation, by these rules.
 */
import { z } from "zod";

/**
 * How a model thinks:
 * - `budget`: only when asked, with `{type: "enabled", budget_tokens}` (Claude 4.6 and earlier);
 * - `adaptive`: only when asked, with `{type: "adaptive"}` and `output_config.effort`; a budget is
 *   refused (Opus 4.7, 4.8);
 * - `adaptive_by_default`: unless told not to (`{type: "disabled"}`), adaptively (Sonnet 5, Opus 5);
 * - `always`: adaptively on every request; `disabled` and a budget are refused (Fable 5, Mythos 5,
 *   Opus 5.5, Fable 5.1).
 */
export const CLAUDE_THINKING = ["budget", "adaptive", "adaptive_by_default", "always"] as const;
export type ClaudeThinking = (typeof CLAUDE_THINKING)[number];

export interface ClaudeRules {
  thinking: ClaudeThinking;
  /** Whether `temperature`, `top_p` and `top_k` are taken (Opus 4.7 on refuse them). */
  sampling: boolean;
  /** Whether `tool_choice` may force a tool (`any`, `tool`): Opus 5.5 and Fable 5.1 refuse it. */
  forcedToolChoice: boolean;
  /**
   * Whether a final assistant turn is taken as the start of the answer (a prefill): Opus and
   * Sonnet 4.6 on refuse it ("This model does not support assistant message prefill").
   */
  prefill: boolean;
  /**
   * The longest image edge the model reads before scaling an image down: 1568 px up to Claude
   * 4.6, 2576 px from Opus 4.7's high-resolution vision (about three times the tokens an image).
   * Models after it are taken to read as much.
   */
  imageLongEdge: number;
  /**
   * Whether a tool is taken with `strict: true`, its input then held to its schema by a grammar
   * (structured outputs, generally available from Claude 4.5 on, no beta header).
   */
  strictTools: boolean;
}

const EARLIER_IMAGE_EDGE = 1568;
export const HIGH_RES_IMAGE_EDGE = 2576;

/** The catalog's way to state a route's rules where its model's name does not tell them. */
export const ClaudeRulesSchema = z.object({
  thinking: z.enum(CLAUDE_THINKING).optional(),
  sampling: z.boolean().optional(),
  forced_tool_choice: z.boolean().optional(),
  prefill: z.boolean().optional(),
  image_long_edge: z.number().int().min(28).max(8000).optional(),
  strict_tools: z.boolean().optional(),
}).strict();
export type ClaudeRulesFile = z.infer<typeof ClaudeRulesSchema>;

/**
 * `claude-<line>-<major>[-<minor>]`, anywhere in the name (a dated snapshot, a platform prefix): a
 * minor is one or two digits, so the date of `claude-sonnet-4-20250514` is not read as one.
 */
const CLAUDE_NAME = /claude-(opus|sonnet|haiku|fable|mythos)-(\d{1,2})(?:-(\d{1,2})(?!\d))?/i;

const EARLIER: ClaudeRules = {
  thinking: "budget",
  sampling: true,
  forcedToolChoice: true,
  prefill: true,
  imageLongEdge: EARLIER_IMAGE_EDGE,
  strictTools: false,
};

/**
 * The rules of a model by its name, as Anthropic's guides give them; a later version of a line
 * than any they describe is taken to keep the newest rules of its line. Names it cannot read
 * (Claude 3 names, `claude-3-7-sonnet`) take the earlier rules, which every model before Opus 4.7
 * follows, but for images, read at the most any model reads unless the name is Claude 3's; the
 * catalog's `claude` states any other.
 */
export function claudeRulesByName(upstreamModel: string): ClaudeRules {
  if (/claude-mythos-preview/i.test(upstreamModel)) {
    return {
      thinking: "always",
      sampling: false,
      forcedToolChoice: true,
      prefill: false,
      imageLongEdge: HIGH_RES_IMAGE_EDGE,
      strictTools: true,
    };
  }
  const name = CLAUDE_NAME.exec(upstreamModel);
  // A name that says nothing (a deployment's alias) may be any model: its images are held at the
  // most any Claude reads.
  if (!name) {
    return /claude-3/i.test(upstreamModel)
      ? EARLIER
      : { ...EARLIER, imageLongEdge: HIGH_RES_IMAGE_EDGE };
  }
  const line = name[1].toLowerCase();
  const version = Number(name[2]) * 100 + Number(name[3] ?? 0);
  // Every line takes strict tools from 4.5 on (Fable and Mythos begin at 5).
  return { ...rulesOfLine(line, version), strictTools: version >= 405 };
}

/** A named model's rules but for strict tools (claudeRulesByName). */
function rulesOfLine(line: string, version: number): ClaudeRules {
  const rules = (thinking: ClaudeThinking, forcedToolChoice = true): ClaudeRules => ({
    thinking,
    sampling: false,
    forcedToolChoice,
    prefill: false,
    imageLongEdge: HIGH_RES_IMAGE_EDGE,
    strictTools: true,
  });
  // The 4.6 models think by budget and take sampling parameters, but no prefill.
  const noPrefill = { ...EARLIER, prefill: false };
  // Images are read at Opus 4.7's resolution from 4.7 on, whatever else a line keeps.
  const highRes = (earlier: ClaudeRules): ClaudeRules =>
    version < 407 ? earlier : { ...earlier, imageLongEdge: HIGH_RES_IMAGE_EDGE };
  switch (line) {
    case "fable":
    case "mythos":
      return rules("always", version < 501);
    case "opus":
      if (version < 406) return EARLIER;
      if (version < 407) return noPrefill;
      if (version < 500) return rules("adaptive");
      if (version < 505) return rules("adaptive_by_default");
      return rules("always", false);
    case "sonnet":
      if (version < 406) return EARLIER;
      return version < 500 ? highRes(noPrefill) : rules("adaptive_by_default");
    default: // haiku
      return version < 500 ? highRes(EARLIER) : rules("adaptive_by_default");
  }
}

/**
 * A route's rules: its name's, with what the catalog states over them. A model stated to think
 * adaptively takes no sampling parameters or prefill unless the catalog says so too, as every
 * such model Anthropic describes.
 */
export function claudeRules(upstreamModel: string, stated?: ClaudeRulesFile): ClaudeRules {
  const byName = claudeRulesByName(upstreamModel);
  const adaptive = stated?.thinking !== undefined && stated.thinking !== "budget";
  return {
    thinking: stated?.thinking ?? byName.thinking,
    sampling: stated?.sampling ?? (adaptive ? false : byName.sampling),
    forcedToolChoice: stated?.forced_tool_choice ?? byName.forcedToolChoice,
    prefill: stated?.prefill ?? (adaptive ? false : byName.prefill),
    imageLongEdge: stated?.image_long_edge ?? byName.imageLongEdge,
    strictTools: stated?.strict_tools ?? byName.strictTools,
  };
}
