import { z } from "zod";
import { formatPricePerMTok, parsePricePerMTok, type PicosPerToken } from "@/lib/core/mod.ts";
import { type ClaudeRules, claudeRules, ClaudeRulesSchema } from "./claude_rules.ts";
import {
  type ImagePatches,
  openAiImageRuleByName,
  UNKNOWN_OPENAI_IMAGE_RULE,
} from "./openai_images.ts";

const unknownPatches = UNKNOWN_OPENAI_IMAGE_RULE.patches!;

/**
 * Below 100,000 USD per million tokens (over a hundred times the dearest model's): with token
 * counts believed up to MAX_REPORTED_TOKENS, a request's cost is then a safe integer of micro-USD.
 */
const Price = z.string().regex(
  /^\d{1,5}(\.\d{1,6})?$/,
  "a decimal USD string below 100000 with at most 6 decimals",
);

const ProviderSchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("simulator"),
    token_delay_ms: z.number().int().min(0).max(10_000).optional(),
  }).strict(),
  z.object({
    /**
     * The wire format: `openai` (chat completions, and every server that speaks it),
     * `openai_responses` (OpenAI's Responses API), `anthropic` (Messages).
     */
    kind: z.enum(["openai", "openai_responses", "anthropic"]),
    base_url: z.url(),
    api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, "an environment variable name"),
    timeout_ms: z.number().int().positive().optional(),
    /**
     * Kind openai: whether a stream asks for its usage with `stream_options.include_usage` (true
     * by default). False for a server that refuses the field and sends its usage anyway, as
     * Mistral's does.
     */
    stream_options: z.boolean().optional(),
    /**
     * Kind openai: whether an assistant message's `reasoning_content` is sent back as the client
     * sent it (false by default: most servers refuse or ignore it). True for DeepSeek's thinking
     * mode, which refuses a tool loop's turn without the reasoning that made its calls.
     */
    forward_reasoning_content: z.boolean().optional(),
    /**
     * Kind openai: whether an assistant message's `reasoning_details` are sent back as the client
     * sent them (false by default: most servers refuse a field they do not know). True for
     * OpenRouter, which asks for them back to continue a model's signed or encrypted reasoning.
     */
    forward_reasoning_details: z.boolean().optional(),
    /**
     * Kind openai: whether the server takes OpenAI's `allowed_tools` tool choice (by default only
     * OpenAI's own API, api.openai.com: the choice is its own). A server that does not is offered
     * only the tools the choice allows, with the plain choice it comes to, as Claude is.
     */
    allowed_tools: z.boolean().optional(),
    /**
     * Kind openai_responses: whether reasoning models are asked for summaries of their reasoning
     * (`reasoning.summary`: what a Responses request asked for, else "auto"), streamed as
     * `reasoning_content` (false by default: OpenAI gives them only to organizations it has
     * verified, and refuses the request of any other).
     */
    reasoning_summaries: z.boolean().optional(),
    /**
     * Kinds openai and openai_responses: whether the upstream call is streamed (true by default).
     * False for an OpenAI organization it has not verified, which it refuses to stream o3 and
     * GPT-5 to ("Your organization must be verified to stream this model"): each answer then
     * comes whole, and `timeout_ms` must cover a whole answer, not a silence.
     */
    streaming: z.boolean().optional(),
  }).strict(),
]);

const ModelSchema = z.object({
  id: z.string().regex(
    /^[a-z0-9][a-z0-9-]*\/[A-Za-z0-9][A-Za-z0-9._:-]*$/,
    "of the form <provider>/<model_name>",
  ),
  provider: z.string(),
  upstream_model: z.string().min(1),
  /** What the model serves: chat (chat completions, responses) or embeddings. */
  type: z.enum(["chat", "embedding"]).optional(),
  input_usd_per_mtok: Price,
  /** Required of a chat model; an embedding model produces no output tokens and has none. */
  output_usd_per_mtok: Price.optional(),
  /** Input read from the provider's prompt cache (OpenAI cached_tokens, Anthropic cache reads). */
  cache_read_usd_per_mtok: Price.optional(),
  /** Input written to the provider's prompt cache (Anthropic cache writes). */
  cache_write_usd_per_mtok: Price.optional(),
  /** Input written to Anthropic's prompt cache for an hour (a breakpoint with `ttl: "1h"`). */
  cache_write_1h_usd_per_mtok: Price.optional(),
  /**
   * Dearer prices a provider bills a whole request at once its input passes a size (OpenAI's
   * long-context models past 272K tokens, Gemini's past 200K): chat models only.
   */
  long_context: z.object({
    above_input_tokens: z.number().int().positive(),
    input_usd_per_mtok: Price,
    output_usd_per_mtok: Price,
    cache_read_usd_per_mtok: Price.optional(),
    cache_write_usd_per_mtok: Price.optional(),
    cache_write_1h_usd_per_mtok: Price.optional(),
  }).strict().optional(),
  /** For an embedding model: the most tokens one input may have. */
  context_tokens: z.number().int().positive(),
  /** Required of a chat model; an embedding model has none. */
  max_output_tokens: z.number().int().positive().optional(),
  /**
   * The request field that carries the output cap upstream. OpenAI's reasoning models refuse
   * `max_tokens`; unset, the documented rule applies (see outputCapParam).
   */
  output_cap_param: z.enum(["max_tokens", "max_completion_tokens"]).optional(),
  /**
   * OpenAI's image rule for this model: tokens per image and per 512-px tile; unset, OpenAI's rule
   * for the model's name (openai_images.ts).
   */
  image_base_tokens: z.number().int().min(0).max(100_000).optional(),
  image_tile_tokens: z.number().int().min(0).max(100_000).optional(),
  /**
   * How the reservation counts this model's text (OpenAI kind), on every route: `o200k`,
   * `cl100k` (counted as the larger of cl100k and o200k), or `utf8_bytes` (its UTF-8 bytes, which no byte-level tokenizer exceeds, plus
   * allowances for open models' chat templates: for families whose tokenizer is not OpenAI's).
   * Unset: by each route's model name (routeTokenizer); cl100k for an embedding model, which
   * takes cl100k or utf8_bytes only.
   */
  tokenizer: z.enum(["o200k", "cl100k", "utf8_bytes"]).optional(),
  /**
   * Anthropic kind: what this Claude model takes (thinking, sampling, forced tool calls, a
   * prefill) where its name does not tell it (claude_rules.ts).
   */
  claude: ClaudeRulesSchema.optional(),
  /**
   * Tried in order when the provider before fails before answering; priced like the model. A
   * fallback to another model gives its own image rule when it differs (the hold covers each).
   */
  fallbacks: z.array(
    z.object({
      provider: z.string(),
      upstream_model: z.string().min(1),
      image_base_tokens: z.number().int().min(0).max(100_000).optional(),
      image_tile_tokens: z.number().int().min(0).max(100_000).optional(),
      claude: ClaudeRulesSchema.optional(),
    }).strict(),
  ).max(5).optional(),
  /**
   * A model served through OpenAI's chat API (kind openai): the provider, of kind
   * openai_responses, that serves its requests holding a PDF instead, alone. That API has no count
   * of a PDF, and nothing but the provider's count bounds what one bills.
   */
  documents_provider: z.string().optional(),
}).strict();

export const CatalogFileSchema = z.object({
  providers: z.record(z.string(), ProviderSchema),
  models: z.array(ModelSchema).min(1),
}).strict();

export type CatalogFile = z.infer<typeof CatalogFileSchema>;
type ProviderFile = z.infer<typeof ProviderSchema>;
type ModelFile = z.infer<typeof ModelSchema>;

export type ProviderConfig =
  & { name: string; timeoutMs?: number }
  & (
    | { kind: "simulator"; tokenDelayMs: number }
    | {
      kind: "openai" | "openai_responses" | "anthropic";
      baseUrl: string;
      apiKeyEnv: string;
      apiKey: string | undefined;
      /** Kind openai: whether a stream asks for its usage with `stream_options`. */
      streamOptions: boolean;
      /** Kind openai: whether an assistant's `reasoning_content` is sent back upstream. */
      forwardReasoningContent: boolean;
      /** Kind openai: whether an assistant's `reasoning_details` are sent back upstream. */
      forwardReasoningDetails: boolean;
      /** Kind openai: whether the server takes the `allowed_tools` tool choice. */
      allowedTools: boolean;
      /** Kind openai_responses: whether reasoning models are asked for summaries. */
      reasoningSummaries: boolean;
      /** Kinds openai and openai_responses: whether the upstream call is streamed. */
      streaming: boolean;
    }
  );

/** A provider and the name it gives the model. */
export interface Route {
  provider: ProviderConfig;
  upstreamModel: string;
  /** What the input bound counts this route's text with (OpenAI kind): see routeTokenizer. */
  tokenizer: Tokenizer;
  /** The framing the route's server wraps the text in (OpenAI kind): see routeChatTemplate. */
  chatTemplate: ChatTemplate;
  /** OpenAI's image rule for this route's model: tokens per image and per 512-px tile. */
  imageBaseTokens: number;
  imageTileTokens: number;
  /** And by the image's own patches (a model read at its own size); null when not. */
  imagePatches: ImagePatches | null;
  /** What the route's Claude model takes; null for a route of another kind. */
  claude: ClaudeRules | null;
}

export type ModelType = "chat" | "embedding";
export type Tokenizer = "o200k" | "cl100k" | "utf8_bytes";
/**
 * How an OpenAI-kind server frames a chat around its text: OpenAI's chat framing, OpenAI's harmony
 * format (gpt-oss: a system message of its own, channels, tools as commented declarations), or an
 * open model's template (Llama's, Qwen's).
 */
export type ChatTemplate = "openai" | "harmony" | "open";

/** What each kind of token costs, and the same prices as the catalog writes them, for display. */
export interface Prices {
  inputPrice: PicosPerToken;
  /** 0 for an embedding model. */
  outputPrice: PicosPerToken;
  /** Cached input; the input price when the catalog gives none. */
  cacheReadPrice: PicosPerToken;
  /** Input written to a prompt cache; the input price when the catalog gives none. */
  cacheWritePrice: PicosPerToken;
  /** Input written to Anthropic's cache for an hour; the 5-minute price where no route is Claude. */
  cacheWrite1hPrice: PicosPerToken;
  inputUsdPerMTok: string;
  /** Null for an embedding model. */
  outputUsdPerMTok: string | null;
  cacheReadUsdPerMTok: string | null;
  cacheWriteUsdPerMTok: string | null;
  cacheWrite1hUsdPerMTok: string | null;
}

/** The prices of a request whose input (cached and cache-written included) passes a size. */
export interface LongContextPrices extends Prices {
  aboveInputTokens: number;
}

export interface Model extends Prices {
  id: string;
  type: ModelType;
  provider: ProviderConfig;
  upstreamModel: string;
  /** Tried in order after `provider`, for failures before any byte reached the client. */
  fallbacks: Route[];
  /**
   * What serves a request holding a PDF in place of `provider` and `fallbacks` (the catalog's
   * `documents_provider`); null where they serve it.
   */
  documentRoute: Route | null;
  /** Null when the provider bills every request at the same prices, whatever its size. */
  longContext: LongContextPrices | null;
  /** For an embedding model: the most tokens one input may have. */
  contextTokens: number;
  /** 0 for an embedding model. */
  maxOutputTokens: number;
  /** Set by the catalog; otherwise the documented rule decides (outputCapParam). */
  outputCapParam: "max_tokens" | "max_completion_tokens" | null;
  imageBaseTokens: number;
  imageTileTokens: number;
  imagePatches: ImagePatches | null;
  /**
   * The primary route's tokenizer (each fallback has its own): see routeTokenizer; cl100k for an
   * embedding model, the count its input limit is in.
   */
  tokenizer: Tokenizer;
  /** The primary route's chat template (each fallback has its own). */
  chatTemplate: ChatTemplate;
  /** The primary route's Claude rules (each fallback has its own); null for another kind. */
  claude: ClaudeRules | null;
}

/**
 * OpenAI's GPT-4 (not 4o, 4.1 or later) and GPT-3.5 models bill cl100k tokens; so do their
 * fine-tunes (`ft:gpt-4-0613:…`); a router may prefix the name (`openai/gpt-4`), Azure writes
 * `gpt-35-turbo`, and a deployment name may carry the model's after a prefix (`prod-gpt-4`): o200k
 * would under-count what those bill.
 */
const CL100K_MODEL = /(?:^|[^a-z0-9])gpt-(?:3\.?5-|4(?:-|$))/i;

/**
 * The tokenizer the input bound counts a route's text with (OpenAI kind): the catalog's, else
 * cl100k for OpenAI's models that bill it and o200k (GPT-4o onwards, and the default estimate for
 * other families, which their reported usage corrects) for the rest. Decided once, at load.
 */
function routeTokenizer(set: Tokenizer | undefined, upstreamModel: string): Tokenizer {
  return set ?? (CL100K_MODEL.test(upstreamModel) ? "cl100k" : "o200k");
}

/** gpt-oss, on whatever server (Groq, Together, vLLM; a router may prefix the name). */
const HARMONY_MODEL = /gpt-oss/i;

/**
 * The framing the input bound allows a route's text (OpenAI kind): harmony for gpt-oss by name,
 * whatever its tokenizer (the format is the model's); an open model's template with utf8_bytes;
 * else OpenAI's. Decided once, at load.
 */
function routeChatTemplate(tokenizer: Tokenizer, upstreamModel: string): ChatTemplate {
  if (HARMONY_MODEL.test(upstreamModel)) return "harmony";
  return tokenizer === "utf8_bytes" ? "open" : "openai";
}

/**
 * A route's image figures: the catalog's (a fallback's own, else its model's), else OpenAI's rule
 * for the route's model by its name; 85 and 170 on the simulator, which bills so, and on a Claude
 * route, which has its own rule (claude_rules.ts).
 */
function routeImageRule(
  set: { base: number | undefined; tile: number | undefined },
  route: { provider: ProviderConfig; upstreamModel: string },
): Pick<Model, "imageBaseTokens" | "imageTileTokens" | "imagePatches"> {
  if (set.base !== undefined || set.tile !== undefined) {
    return {
      imageBaseTokens: set.base ?? 85,
      imageTileTokens: set.tile ?? 170,
      imagePatches: null,
    };
  }
  if (route.provider.kind !== "openai" && route.provider.kind !== "openai_responses") {
    return { imageBaseTokens: 85, imageTileTokens: 170, imagePatches: null };
  }
  const rule = openAiImageRuleByName(route.upstreamModel) ?? UNKNOWN_OPENAI_IMAGE_RULE;
  return {
    imageBaseTokens: rule.baseTokens,
    imageTileTokens: rule.tileTokens,
    imagePatches: rule.patches,
  };
}

/**
 * OpenAI's embedding models (text-embedding-3, ada-002) count their input, and its limit, in
 * cl100k; their hold is the larger of both encodings all the same (see countEmbeddingTokens).
 * Another family's embedding model can bill far more for the same text (Mistral's counts digits
 * one by one): the catalog's `utf8_bytes` holds its bytes instead.
 */
const EMBEDDING_TOKENIZER: Tokenizer = "cl100k";

/** OpenAI's own embedding models, whose count cl100k is; a router may prefix the name. */
const OPENAI_EMBEDDING_MODEL =
  /(?:^|[^a-z0-9])text-embedding-(?:3-small|3-large|ada-002)(?:$|[^a-z0-9])/i;

/**
 * What a route that bills prompt-cache writes above input bills them at when the catalog names no
 * price: 1.25× the input price (Anthropic's 5-minute write, a breakpoint's default; OpenAI's
 * writes from GPT-5.6 on). Charged at the input price, a quarter of every written token
 * was the operator's to pay.
 */
function premiumCacheWritePrice(inputPrice: PicosPerToken): PicosPerToken {
  return (inputPrice * 5n + 3n) / 4n;
}

/** Anthropic's 1-hour cache write when the catalog names no price: twice the input price. */
function hourCacheWritePrice(inputPrice: PicosPerToken): PicosPerToken {
  return inputPrice * 2n;
}

/**
 * A GPT's version (`gpt-5.6-mini`, `gpt-6`, a router's `openai/gpt-5.6`); Azure's `gpt-35-turbo` is
 * GPT-3.5, not GPT-35.
 */
const GPT_VERSION = /(?:^|[^a-z0-9])gpt-(?!35)(\d+)(?:\.(\d+))?/i;

/**
 * Whether a route's provider bills a prompt-cache write above the input price: Anthropic always;
 * OpenAI from the GPT-5.6 family on ("Prompt caching": 1.25× the uncached input rate, reported as
 * `cache_write_tokens`), which writes by itself, without being asked.
 */
function billsCacheWritesAboveInput(route: { provider: ProviderConfig; upstreamModel: string }) {
  if (route.provider.kind === "anthropic") return true;
  if (route.provider.kind !== "openai" && route.provider.kind !== "openai_responses") return false;
  const gpt = GPT_VERSION.exec(route.upstreamModel);
  return !!gpt && Number(gpt[1]) * 100 + Number(gpt[2] ?? 0) >= 506;
}

export interface Catalog {
  models: Model[];
  get(id: string): Model | undefined;
  /** What the operator should know about the file at start (logged once), none fatal. */
  warnings?: string[];
}

/**
 * Models that search the web on every request (OpenAI's search models, OpenRouter's `:online`
 * variants, Perplexity's Sonar): each request is billed a fee on top of its tokens, $5 to $35 per
 * thousand, which no token price holds.
 */
const SEARCH_BILLED_MODEL = /search-preview|search-api|:online$|(?:^|\/)sonar(?:\b|-)/i;

/**
 * Open model families that reach us through the OpenAI kind (Groq, Together, vLLM, Ollama):
 * their tokenizers are not OpenAI's, and most count more tokens than o200k for the same text.
 */
const OPEN_FAMILY_MODEL =
  /llama|mistral|mixtral|codestral|ministral|qwen|qwq|deepseek|gemma|phi-\d|(?:^|[^a-z])yi-|command-r|falcon|granite|olmo|nemotron|glm-|kimi|internlm|baichuan|dbrx|jamba|starcoder|vicuna|zephyr/i;

export class CatalogError extends Error {}

/** Validates a parsed catalog file; the error names the offending field. */
export function buildCatalog(raw: unknown, env: Record<string, string | undefined>): Catalog {
  const parsed = CatalogFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue.path.length ? issue.path.join(".") : "(root)";
    throw new CatalogError(`catalog field ${where}: ${issue.message}`);
  }
  const providers = new Map<string, ProviderConfig>();
  for (const [name, p] of Object.entries(parsed.data.providers)) {
    providers.set(name, toProvider(name, p, env));
  }

  const byId = new Map<string, Model>();
  const warnings: string[] = [];
  parsed.data.models.forEach((m, i) => {
    const provider = providers.get(m.provider);
    if (!provider) {
      throw new CatalogError(
        `catalog field models.${i}.provider: unknown provider "${m.provider}"`,
      );
    }
    if (byId.has(m.id)) {
      throw new CatalogError(`catalog field models.${i}.id: duplicate model "${m.id}"`);
    }
    const type = m.type ?? "chat";
    /** A route's tokenizer: an embedding model's applies to every route, a chat route's by name. */
    const tokenizerOf = (upstreamModel: string) =>
      type === "embedding"
        ? m.tokenizer ?? EMBEDDING_TOKENIZER
        : routeTokenizer(m.tokenizer, upstreamModel);
    for (const field of ["output_usd_per_mtok", "max_output_tokens"] as const) {
      if (type === "chat" && m[field] === undefined) {
        throw new CatalogError(`catalog field models.${i}.${field}: required of a chat model`);
      }
      if (type === "embedding" && m[field] !== undefined) {
        throw new CatalogError(
          `catalog field models.${i}.${field}: an embedding model has no output; remove it`,
        );
      }
    }
    if ((m.max_output_tokens ?? 0) > m.context_tokens) {
      throw new CatalogError(
        `catalog field models.${i}.max_output_tokens: larger than context_tokens`,
      );
    }
    const imagesSet = { base: m.image_base_tokens, tile: m.image_tile_tokens };
    const fallbacks = (m.fallbacks ?? []).map((f, j) => {
      const fallback = providers.get(f.provider);
      if (!fallback) {
        throw new CatalogError(
          `catalog field models.${i}.fallbacks.${j}.provider: unknown provider "${f.provider}"`,
        );
      }
      const tokenizer = tokenizerOf(f.upstream_model);
      return {
        provider: fallback,
        upstreamModel: f.upstream_model,
        tokenizer,
        chatTemplate: routeChatTemplate(tokenizer, f.upstream_model),
        ...routeImageRule(
          {
            base: f.image_base_tokens ?? m.image_base_tokens,
            tile: f.image_tile_tokens ?? m.image_tile_tokens,
          },
          { provider: fallback, upstreamModel: f.upstream_model },
        ),
        claude: routeClaudeRules(fallback, f.upstream_model, f.claude, `${i}.fallbacks.${j}`),
      };
    });
    const routes = [{ provider, upstreamModel: m.upstream_model }, ...fallbacks];
    const searching = routes.find((r) => SEARCH_BILLED_MODEL.test(r.upstreamModel));
    if (searching) {
      throw new CatalogError(
        `catalog field models.${i}.upstream_model: "${searching.upstreamModel}" searches the web on every request and is billed a fee per request beyond its tokens, which the catalog cannot price: its requests would be held and charged below their bill`,
      );
    }
    if (m.tokenizer !== undefined) {
      if (type === "embedding" && m.tokenizer === "o200k") {
        throw new CatalogError(
          `catalog field models.${i}.tokenizer: an embedding model takes cl100k (OpenAI's embedding models count their input so; it is held at the larger of both OpenAI encodings) or utf8_bytes (another family's)`,
        );
      }
      if (routes.every((r) => r.provider.kind === "anthropic")) {
        throw new CatalogError(
          `catalog field models.${i}.tokenizer: for routes of the OpenAI kind; Anthropic-kind text has its own bound`,
        );
      }
      // It applies to every route: o200k would under-count a route that bills cl100k.
      const cl100k = routes.find((r) =>
        r.provider.kind !== "anthropic" && CL100K_MODEL.test(r.upstreamModel)
      );
      if (m.tokenizer === "o200k" && cl100k) {
        throw new CatalogError(
          `catalog field models.${i}.tokenizer: "${cl100k.upstreamModel}" bills cl100k tokens, which o200k would under-count`,
        );
      }
    }
    if (type === "chat" && m.tokenizer === undefined) {
      const open = routes.find((r) =>
        r.provider.kind === "openai" && OPEN_FAMILY_MODEL.test(r.upstreamModel)
      );
      if (open) {
        warnings.push(
          `catalog field models.${i}.tokenizer: "${open.upstreamModel}" looks like an open model family, whose tokenizer is not OpenAI's; its input is held at an o200k count, which can fall below what it bills. Set "tokenizer": "utf8_bytes" to hold an upper bound.`,
        );
      }
    }
    if (type === "chat") {
      const figuresSet = (j: number) => {
        const f = j > 0 ? m.fallbacks![j - 1] : undefined;
        return [
          m.image_base_tokens,
          m.image_tile_tokens,
          f?.image_base_tokens,
          f?.image_tile_tokens,
        ]
          .some((figure) => figure !== undefined);
      };
      const unknown = routes.find((r, j) =>
        (r.provider.kind === "openai" || r.provider.kind === "openai_responses") &&
        !figuresSet(j) && openAiImageRuleByName(r.upstreamModel) === null
      );
      if (unknown) {
        warnings.push(
          `catalog field models.${i}.image_base_tokens: no OpenAI image rule is known for "${unknown.upstreamModel}"; an image is held at the most OpenAI's models but GPT-4o mini bill: its own 32-px patches at ${unknownPatches.multiplier} tokens each (up to ${
            unknownPatches.most.toLocaleString("en-US")
          } patches; an image whose size is not in the request, at that most). If it reads images at another rate, set image_base_tokens and image_tile_tokens.`,
        );
      }
    }
    if (type === "embedding" && m.tokenizer === undefined) {
      const foreign = routes.find((r) =>
        r.provider.kind === "openai" && !OPENAI_EMBEDDING_MODEL.test(r.upstreamModel)
      );
      if (foreign) {
        warnings.push(
          `catalog field models.${i}.tokenizer: "${foreign.upstreamModel}" is not one of OpenAI's embedding models; its input is held at OpenAI's counts, which another family's tokenizer can exceed. Set "tokenizer": "utf8_bytes" to hold an upper bound, or "cl100k" if it counts as OpenAI's do.`,
        );
      }
    }
    if (type === "embedding") {
      const where = [
        ["provider", provider],
        ...fallbacks.map((f, j) => [`fallbacks.${j}.provider`, f.provider] as const),
      ] as const;
      for (const [field, p] of where) {
        if (p.kind === "anthropic" || p.kind === "openai_responses") {
          throw new CatalogError(
            `catalog field models.${i}.${field}: "${p.name}" is of kind ${p.kind}, which serves no embeddings`,
          );
        }
      }
    }
    const documents = m.documents_provider === undefined
      ? null
      : documentsProvider(m.documents_provider, provider, providers, { index: i, type });
    const documentRoute = documents === null ? null : {
      provider: documents,
      upstreamModel: m.upstream_model,
      tokenizer: tokenizerOf(m.upstream_model),
      chatTemplate: routeChatTemplate(tokenizerOf(m.upstream_model), m.upstream_model),
      ...routeImageRule(imagesSet, { provider: documents, upstreamModel: m.upstream_model }),
      claude: null,
    };
    const premiumWrites = [...routes, ...(documentRoute ? [documentRoute] : [])]
      .some(billsCacheWritesAboveInput);
    const hourWrites = routes.some((r) => r.provider.kind === "anthropic");
    const prices = toPrices(m, { premiumWrites, hourWrites });
    const tokenizer = tokenizerOf(m.upstream_model);
    byId.set(m.id, {
      id: m.id,
      type,
      provider,
      upstreamModel: m.upstream_model,
      fallbacks,
      documentRoute,
      ...prices,
      longContext: m.long_context === undefined
        ? null
        : toLongContextPrices(m.long_context, prices, { premiumWrites, hourWrites }, {
          index: i,
          type,
          contextTokens: m.context_tokens,
        }),
      contextTokens: m.context_tokens,
      maxOutputTokens: m.max_output_tokens ?? 0,
      outputCapParam: m.output_cap_param ?? null,
      ...routeImageRule(imagesSet, { provider, upstreamModel: m.upstream_model }),
      tokenizer,
      chatTemplate: routeChatTemplate(tokenizer, m.upstream_model),
      claude: routeClaudeRules(provider, m.upstream_model, m.claude, `${i}`),
    });
  });
  const models = [...byId.values()];
  return { models, get: (id) => byId.get(id), warnings };
}

/** Every provider a model's requests may reach: its own, its fallbacks' and its documents'. */
export function providersOf(model: Model): ProviderConfig[] {
  return [
    model.provider,
    ...model.fallbacks.map((f) => f.provider),
    ...(model.documentRoute ? [model.documentRoute.provider] : []),
  ];
}

/**
 * The provider a chat model's requests holding a PDF go to: only OpenAI's chat API lacks a count of
 * one, and the Responses API of the same provider serves the same models with one.
 */
function documentsProvider(
  name: string,
  primary: ProviderConfig,
  providers: Map<string, ProviderConfig>,
  model: { index: number; type: ModelType },
): ProviderConfig {
  const field = `catalog field models.${model.index}.documents_provider`;
  if (model.type === "embedding") {
    throw new CatalogError(`${field}: for chat models; an embedding model takes no PDF`);
  }
  if (primary.kind !== "openai") {
    throw new CatalogError(
      `${field}: for models served through OpenAI's chat API (kind openai); "${primary.name}" is of kind ${primary.kind}, which counts a PDF itself`,
    );
  }
  const provider = providers.get(name);
  if (!provider) throw new CatalogError(`${field}: unknown provider "${name}"`);
  if (provider.kind !== "openai_responses") {
    throw new CatalogError(
      `${field}: "${name}" is of kind ${provider.kind}; it must be of kind openai_responses, whose input token count bounds a PDF`,
    );
  }
  return provider;
}

/** A route's Claude rules; stating them for a route of another kind is a mistake worth naming. */
function routeClaudeRules(
  provider: ProviderConfig,
  upstreamModel: string,
  stated: ModelFile["claude"],
  where: string,
): ClaudeRules | null {
  if (provider.kind === "anthropic") return claudeRules(upstreamModel, stated);
  if (stated !== undefined) {
    throw new CatalogError(
      `catalog field models.${where}.claude: for routes of kind anthropic; "${provider.name}" is of kind ${provider.kind}`,
    );
  }
  return null;
}

type PriceFields = Pick<
  ModelFile,
  | "input_usd_per_mtok"
  | "output_usd_per_mtok"
  | "cache_read_usd_per_mtok"
  | "cache_write_usd_per_mtok"
  | "cache_write_1h_usd_per_mtok"
>;

/** Which dearer cache writes a model's routes bill, when the catalog prices them not. */
interface WriteKinds {
  premiumWrites: boolean;
  hourWrites: boolean;
}

function toPrices(p: PriceFields, { premiumWrites, hourWrites }: WriteKinds): Prices {
  const inputPrice = parsePricePerMTok(p.input_usd_per_mtok);
  const cacheWritePrice = p.cache_write_usd_per_mtok !== undefined
    ? parsePricePerMTok(p.cache_write_usd_per_mtok)
    : premiumWrites
    ? premiumCacheWritePrice(inputPrice)
    : inputPrice;
  const cacheWrite1hPrice = p.cache_write_1h_usd_per_mtok !== undefined
    ? parsePricePerMTok(p.cache_write_1h_usd_per_mtok)
    : hourWrites
    ? hourCacheWritePrice(inputPrice)
    : cacheWritePrice;
  return {
    inputPrice,
    outputPrice: parsePricePerMTok(p.output_usd_per_mtok ?? "0"),
    cacheReadPrice: parsePricePerMTok(p.cache_read_usd_per_mtok ?? p.input_usd_per_mtok),
    cacheWritePrice,
    cacheWrite1hPrice,
    inputUsdPerMTok: p.input_usd_per_mtok,
    outputUsdPerMTok: p.output_usd_per_mtok ?? null,
    cacheReadUsdPerMTok: p.cache_read_usd_per_mtok ?? null,
    cacheWriteUsdPerMTok: p.cache_write_usd_per_mtok ??
      (premiumWrites ? formatPricePerMTok(cacheWritePrice) : null),
    cacheWrite1hUsdPerMTok: p.cache_write_1h_usd_per_mtok ??
      (hourWrites ? formatPricePerMTok(cacheWrite1hPrice) : null),
  };
}

/**
 * A long-context tier, held to what the reservation relies on: a request whose input bound passes
 * the size is reserved at these prices and one that stays under it at the model's, so each price
 * here must be at least the model's for either hold to bound the bill.
 */
function toLongContextPrices(
  tier: NonNullable<ModelFile["long_context"]>,
  base: Prices,
  writes: WriteKinds,
  model: { index: number; type: ModelType; contextTokens: number },
): LongContextPrices {
  const field = `catalog field models.${model.index}.long_context`;
  if (model.type === "embedding") {
    throw new CatalogError(`${field}: for chat models; an embedding model has one input price`);
  }
  if (tier.above_input_tokens >= model.contextTokens) {
    throw new CatalogError(
      `${field}.above_input_tokens: ${tier.above_input_tokens} is not below context_tokens (${model.contextTokens}), so no request would reach these prices`,
    );
  }
  const prices = toPrices(tier, writes);
  const pairs = [
    ["input_usd_per_mtok", prices.inputPrice, base.inputPrice],
    ["output_usd_per_mtok", prices.outputPrice, base.outputPrice],
    ["cache_read_usd_per_mtok", prices.cacheReadPrice, base.cacheReadPrice],
    ["cache_write_usd_per_mtok", prices.cacheWritePrice, base.cacheWritePrice],
    ["cache_write_1h_usd_per_mtok", prices.cacheWrite1hPrice, base.cacheWrite1hPrice],
  ] as const;
  for (const [name, price, basePrice] of pairs) {
    if (price < basePrice) {
      throw new CatalogError(
        `${field}.${name}: ${formatPricePerMTok(price)} is below the model's ${
          formatPricePerMTok(basePrice)
        }; a long-context price must be at least the model's (a request under the size is reserved at the model's prices)`,
      );
    }
  }
  return { ...prices, aboveInputTokens: tier.above_input_tokens };
}

/**
 * Provider fields that mean something to one kind only, and why not to each other kind (a field
 * the list does not name for a kind is that kind's).
 */
const KIND_ONLY_FIELDS = {
  stream_options: {
    kind: "openai",
    anthropic: "Anthropic's streams always carry their usage",
    openai_responses: "a Responses stream always ends with its usage",
  },
  forward_reasoning_content: {
    kind: "openai",
    anthropic:
      "Claude's thinking goes back to it as the signed blocks of reasoning_details, not as text",
    openai_responses:
      "OpenAI's reasoning goes back to it as the encrypted items of reasoning_details, not as text",
  },
  forward_reasoning_details: {
    kind: "openai",
    anthropic: "Claude is always sent the reasoning_details it signed, as its thinking blocks",
    openai_responses:
      "OpenAI is always sent the reasoning_details its model made, as their reasoning items",
  },
  allowed_tools: {
    kind: "openai",
    anthropic: "Claude has no allowed tools: it is always offered only the tools it may call",
    openai_responses: "the Responses API always takes allowed_tools, in its flat shape",
  },
  reasoning_summaries: {
    kind: "openai_responses",
    anthropic: "Claude's thinking shows as it is written, or as Anthropic's summary of it",
    openai: "the chat completions API gives no reasoning summaries",
  },
  streaming: {
    kind: "openai or openai_responses",
    anthropic: "Anthropic streams every model",
  },
} as const;

function toProvider(
  name: string,
  p: ProviderFile,
  env: Record<string, string | undefined>,
): ProviderConfig {
  if (p.kind === "simulator") {
    return { name, kind: "simulator", tokenDelayMs: p.token_delay_ms ?? 0 };
  }
  for (const [field, rule] of Object.entries(KIND_ONLY_FIELDS)) {
    const value = p[field as keyof typeof KIND_ONLY_FIELDS];
    if (value === undefined || rule.kind.split(" or ").includes(p.kind)) continue;
    const why = (rule as Record<string, string>)[p.kind];
    throw new CatalogError(
      `catalog field providers.${name}.${field}: for providers of kind ${rule.kind}; ${why}`,
    );
  }
  return {
    name,
    kind: p.kind,
    baseUrl: p.base_url.replace(/\/+$/, ""),
    apiKeyEnv: p.api_key_env,
    apiKey: env[p.api_key_env] || undefined,
    timeoutMs: p.timeout_ms,
    streamOptions: p.stream_options ?? true,
    forwardReasoningContent: p.forward_reasoning_content ?? false,
    forwardReasoningDetails: p.forward_reasoning_details ?? false,
    allowedTools: p.allowed_tools ?? URL.parse(p.base_url)?.hostname === "api.openai.com",
    reasoningSummaries: p.reasoning_summaries ?? false,
    streaming: p.streaming ?? true,
  };
}

/**
 * The catalog file's content, parsed but not yet validated: what a process reads once and hands to
 * its workers, so that a worker restarted later serves the catalog the process started with, not
 * the file as it has been edited since.
 */
export async function readCatalogFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    throw new CatalogError(`cannot read catalog file ${path}: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CatalogError(`catalog file ${path} is not valid JSON: ${(err as Error).message}`);
  }
}

/** A catalog from the content of the file at `path`; an error names the file and the field. */
export function catalogFromFile(
  path: string,
  raw: unknown,
  env: Record<string, string | undefined>,
): Catalog {
  try {
    return buildCatalog(raw, env);
  } catch (err) {
    if (err instanceof CatalogError) throw new CatalogError(`${path}: ${err.message}`);
    throw err;
  }
}

export async function loadCatalogFile(
  path: string,
  env: Record<string, string | undefined>,
): Promise<Catalog> {
  return catalogFromFile(path, await readCatalogFile(path), env);
}
