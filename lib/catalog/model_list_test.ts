import assert from "node:assert/strict";
import { buildCatalog } from "./catalog.ts";
import { modelList, modelObject } from "./model_list.ts";

const catalog = buildCatalog({
  providers: {
    openai: { kind: "openai", base_url: "https://api.openai.com/v1", api_key_env: "OPENAI_KEY" },
  },
  models: [
    {
      id: "openai/gpt-4o-mini",
      provider: "openai",
      upstream_model: "gpt-4o-mini",
      input_usd_per_mtok: "0.15",
      output_usd_per_mtok: "0.600",
      context_tokens: 128_000,
      max_output_tokens: 16_384,
    },
    {
      id: "openai/claude-like",
      provider: "openai",
      upstream_model: "cached",
      input_usd_per_mtok: "3.00",
      output_usd_per_mtok: "15.00",
      cache_read_usd_per_mtok: "0.30",
      cache_write_usd_per_mtok: "3.75",
      context_tokens: 200_000,
      max_output_tokens: 64_000,
    },
    {
      id: "openai/gpt-long",
      provider: "openai",
      upstream_model: "gpt-long",
      input_usd_per_mtok: "2.50",
      output_usd_per_mtok: "15.00",
      cache_read_usd_per_mtok: "0.25",
      context_tokens: 1_050_000,
      max_output_tokens: 128_000,
      long_context: {
        above_input_tokens: 272_000,
        input_usd_per_mtok: "5.00",
        output_usd_per_mtok: "22.50",
        cache_read_usd_per_mtok: "0.50",
      },
    },
    {
      id: "openai/text-embedding-3-small",
      type: "embedding",
      provider: "openai",
      upstream_model: "text-embedding-3-small",
      input_usd_per_mtok: "0.02",
      context_tokens: 8_192,
    },
  ],
}, {});

Deno.test("a chat model shows its context, output cap and both prices as the catalog writes them", () => {
  assert.deepEqual(modelObject(catalog.get("openai/gpt-4o-mini")!, 1_700_000_000), {
    id: "openai/gpt-4o-mini",
    object: "model",
    created: 1_700_000_000,
    owned_by: "openai",
    type: "chat",
    context_tokens: 128_000,
    max_output_tokens: 16_384,
    pricing: { input_usd_per_mtok: "0.15", output_usd_per_mtok: "0.600" },
  });
});

Deno.test("cache prices are shown when the catalog prices cached input apart", () => {
  assert.deepEqual(modelObject(catalog.get("openai/claude-like")!, 1).pricing, {
    input_usd_per_mtok: "3.00",
    output_usd_per_mtok: "15.00",
    cache_read_usd_per_mtok: "0.30",
    cache_write_usd_per_mtok: "3.75",
  });
});

Deno.test("a long-context tier is shown with its size and prices as the catalog writes them", () => {
  assert.deepEqual(modelObject(catalog.get("openai/gpt-long")!, 1).pricing, {
    input_usd_per_mtok: "2.50",
    output_usd_per_mtok: "15.00",
    cache_read_usd_per_mtok: "0.25",
    long_context: {
      above_input_tokens: 272_000,
      input_usd_per_mtok: "5.00",
      output_usd_per_mtok: "22.50",
      cache_read_usd_per_mtok: "0.50",
    },
  });
});

Deno.test("an embedding model shows its input price and per-input token limit only", () => {
  assert.deepEqual(modelObject(catalog.get("openai/text-embedding-3-small")!, 1), {
    id: "openai/text-embedding-3-small",
    object: "model",
    created: 1,
    owned_by: "openai",
    type: "embedding",
    context_tokens: 8_192,
    pricing: { input_usd_per_mtok: "0.02" },
  });
});

Deno.test("the list holds every model in catalog order", () => {
  const list = modelList(catalog, 5);
  assert.equal(list.object, "list");
  assert.deepEqual(list.data.map((m) => m.id), [
    "openai/gpt-4o-mini",
    "openai/claude-like",
    "openai/gpt-long",
    "openai/text-embedding-3-small",
  ]);
});
