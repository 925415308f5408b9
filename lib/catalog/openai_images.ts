/**
 * What an image costs on an OpenAI model whose catalog entry gives no image figures, by the
 * model's name. OpenAI bills images by two rules (its vision guide, "Calculating costs"): tiles
 * (a base and so much per 512-px tile after its scaling) and 32-px patches (at most 1,536, times a
 * multiplier per model, whatever the detail). A patch model is held at its most, flat: base
 * tokens with no tiles. Since GPT-5.4 a model may read an image at its own size (`detail:
 * "original"`, and `auto` on later models), up to far more patches than 1,536: a name none of
 * these match is held at the most of every rule, the patches of the image as sent included.
 */
export interface OpenAiImageRule {
  baseTokens: number;
  tileTokens: number;
  /** Also billed by the image's own 32-px patches, whatever the detail; null when not. */
  patches: ImagePatches | null;
}

/** An image read at its own size: one patch per 32 × 32 pixels, up to `most`, times `multiplier`. */
export interface ImagePatches {
  multiplier: number;
  most: number;
}

/** A patch model's most: 1,536 patches times its multiplier. */
function patches(multiplier: number): OpenAiImageRule {
  return { baseTokens: Math.ceil(1536 * multiplier), tileTokens: 0, patches: null };
}

/** GPT-4o's tiles; o1 and o3 (75 + 150), GPT-5 (70 + 140) and computer use (65 + 129) bill less. */
const TILES: OpenAiImageRule = { baseTokens: 85, tileTokens: 170, patches: null };

/**
 * The most any rule but GPT-4o mini's bills for one image: GPT-4o's tiles, a nano model's patches
 * at their most (3,779 tokens), or an image read at its own size, up to the 30,000 patches
 * GPT-5.6 reads (more is refused), at the highest multiplier (2.46): a 5,400-px square read so
 * is 28,561 patches, where a flat 3,779 held it at a seventh of the bill.
 */
export const UNKNOWN_OPENAI_IMAGE_RULE: OpenAiImageRule = {
  ...TILES,
  patches: { multiplier: 2.46, most: 30_000 },
};

/** Router prefixes (`openai/`) and dated snapshots (`-2024-08-06`) are part of a name. */
const RULES: [RegExp, OpenAiImageRule][] = [
  // Its images cost what GPT-4o's do in dollars, at a sixteenth of the price per token.
  [/(?:^|[^a-z0-9])gpt-4o-mini(?:$|-)/i, { baseTokens: 2833, tileTokens: 5667, patches: null }],
  // GPT-5.4's small models keep the 1,536-patch budget at every detail.
  [/(?:^|[^a-z0-9])gpt-(?:4\.1|5|5\.4)-nano(?:$|-)/i, patches(2.46)],
  [/(?:^|[^a-z0-9])gpt-(?:4\.1|5|5\.4)-mini(?:$|-)/i, patches(1.62)],
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
