/**
 * What an image costs on an OpenAI model whose catalog entry gives no image figures, by the
 * model's name. OpenAI bills images by two rules (its vision guide, "Calculating costs"): tiles
 * (a base and so much per 512-px tile after its scaling) and 32-px patches (at most 1,536, times a
 * multiplier per model, whatever the detail). A patch model is held at its most, flat: base
 * tokens with no tiles. A name none of these match is held at the most of any but GPT-4o mini:
 * holding such a model's images at GPT-4o's 85 + 170 per tile let a nano model's image (3,779
 * tokens) through at 1,445.
 */
export interface OpenAiImageRule {
  baseTokens: number;
  tileTokens: number;
}

/** A patch model's most: 1,536 patches times its multiplier. */
function patches(multiplier: number): OpenAiImageRule {
  return { baseTokens: Math.ceil(1536 * multiplier), tileTokens: 0 };
}

/** GPT-4o's tiles; o1 and o3 (75 + 150), GPT-5 (70 + 140) and computer use (65 + 129) bill less. */
const TILES: OpenAiImageRule = { baseTokens: 85, tileTokens: 170 };

/** The most any rule below but GPT-4o mini's bills for one image: a nano model's. */
export const UNKNOWN_OPENAI_IMAGE_RULE = patches(2.46);

/** Router prefixes (`openai/`) and dated snapshots (`-2024-08-06`) are part of a name. */
const RULES: [RegExp, OpenAiImageRule][] = [
  // Its images cost what GPT-4o's do in dollars, at a sixteenth of the price per token.
  [/(?:^|[^a-z0-9])gpt-4o-mini(?:$|-)/i, { baseTokens: 2833, tileTokens: 5667 }],
  [/(?:^|[^a-z0-9])gpt-(?:4\.1|5)-nano(?:$|-)/i, patches(2.46)],
  [/(?:^|[^a-z0-9])gpt-(?:4\.1|5)-mini(?:$|-)/i, patches(1.62)],
  [/(?:^|[^a-z0-9])(?:o4|codex)-mini(?:$|-)/i, patches(1.72)],
  [/(?:^|[^a-z0-9])(?:chat)?gpt-4o(?:$|-)/i, TILES],
  [/(?:^|[^a-z0-9])gpt-4(?:\.1|\.5|-turbo|-vision|-1106-vision)(?:$|-)/i, TILES],
  [/(?:^|[^a-z0-9])o[13](?:-pro)?(?:$|-\d{4}-\d\d-\d\d$)/i, TILES],
  [/(?:^|[^a-z0-9])gpt-5(?:-chat-latest|-chat)?(?:$|-\d{4}-\d\d-\d\d$)/i, TILES],
  [/(?:^|[^a-z0-9])computer-use-preview(?:$|-)/i, TILES],
];

/** The rule OpenAI documents for a model by its name; null when none is known. */
export function openAiImageRuleByName(upstreamModel: string): OpenAiImageRule | null {
  return RULES.find(([name]) => name.test(upstreamModel))?.[1] ?? null;
}
