/**
 * The catalog as `GET /v1/models` shows it: OpenAI's model object (`id`, `object`, `created`,
 * `owned_by`) plus what an app needs to choose and budget: type, context and prices.
 */
import type { Catalog, Model, ModelType, Prices } from "./catalog.ts";

export interface ModelObject {
  id: string;
  object: "model";
  /** Unix seconds; the catalog records no release dates, so every model carries the same one. */
  created: number;
  /** The `<provider>` part of the id. */
  owned_by: string;
  type: ModelType;
  /** A chat model's context window; an embedding model's most tokens per input. */
  context_tokens: number;
  /** Chat models only. */
  max_output_tokens?: number;
  /** USD per million tokens, as decimal strings, exactly as the catalog writes them. */
  pricing: {
    input_usd_per_mtok: string;
    /** Chat models only. */
    output_usd_per_mtok?: string;
    /** Input read from the provider's prompt cache, when the catalog prices it apart. */
    cache_read_usd_per_mtok?: string;
    /** Input written to the provider's prompt cache, when the catalog prices it apart. */
    cache_write_usd_per_mtok?: string;
    /** Input written to Anthropic's cache for an hour (`ttl: "1h"`), for Claude models. */
    cache_write_1h_usd_per_mtok?: string;
    /** The prices of a whole request whose input passes `above_input_tokens`, when it has any. */
    long_context?: {
      above_input_tokens: number;
      input_usd_per_mtok: string;
      output_usd_per_mtok: string;
      cache_read_usd_per_mtok?: string;
      cache_write_usd_per_mtok?: string;
      cache_write_1h_usd_per_mtok?: string;
    };
  };
}

export interface ModelList {
  object: "list";
  data: ModelObject[];
}

export function modelObject(model: Model, created: number): ModelObject {
  const chat = model.type === "chat";
  const tier = model.longContext;
  return {
    id: model.id,
    object: "model",
    created,
    owned_by: model.id.slice(0, model.id.indexOf("/")),
    type: model.type,
    context_tokens: model.contextTokens,
    ...(chat ? { max_output_tokens: model.maxOutputTokens } : {}),
    pricing: {
      ...pricingFields(model),
      ...(tier === null ? {} : {
        long_context: {
          above_input_tokens: tier.aboveInputTokens,
          ...pricingFields(tier),
          output_usd_per_mtok: tier.outputUsdPerMTok!,
        },
      }),
    },
  };
}

function pricingFields(prices: Prices) {
  return {
    input_usd_per_mtok: prices.inputUsdPerMTok,
    ...(prices.outputUsdPerMTok !== null ? { output_usd_per_mtok: prices.outputUsdPerMTok } : {}),
    ...(prices.cacheReadUsdPerMTok !== null
      ? { cache_read_usd_per_mtok: prices.cacheReadUsdPerMTok }
      : {}),
    ...(prices.cacheWriteUsdPerMTok !== null
      ? { cache_write_usd_per_mtok: prices.cacheWriteUsdPerMTok }
      : {}),
    ...(prices.cacheWrite1hUsdPerMTok !== null
      ? { cache_write_1h_usd_per_mtok: prices.cacheWrite1hUsdPerMTok }
      : {}),
  };
}

/** Every catalog model, in catalog order. */
export function modelList(catalog: Catalog, created: number): ModelList {
  return { object: "list", data: catalog.models.map((m) => modelObject(m, created)) };
}
