import assert from "node:assert/strict";
import { componentsCost } from "@/lib/core/mod.ts";
import { MAX_REPORTED_TOKENS } from "@/lib/gateway/providers/usage.ts";
import { buildCatalog, CatalogError, providersOf } from "./catalog.ts";

/** A small valid catalog file; each test changes one thing. */
function catalogFile() {
  return {
    providers: {
      tollbooth: { kind: "simulator" },
      openai: {
        kind: "openai",
        base_url: "https://api.openai.com/v1/",
        api_key_env: "OPENAI_API_KEY",
      },
      backup: {
        kind: "anthropic",
        base_url: "https://proxy.example",
        api_key_env: "BACKUP_KEY",
        timeout_ms: 5_000,
      },
    },
    models: [
      {
        id: "tollbooth/echo",
        provider: "tollbooth",
        upstream_model: "echo",
        input_usd_per_mtok: "0",
        output_usd_per_mtok: "0",
        context_tokens: 1_000,
        max_output_tokens: 500,
      },
      {
        id: "openai/gpt-4o-mini",
        provider: "openai",
        upstream_model: "gpt-4o-mini",
        input_usd_per_mtok: "0.15",
        output_usd_per_mtok: "0.60",
        context_tokens: 128_000,
        max_output_tokens: 16_384,
        fallbacks: [{ provider: "backup", upstream_model: "gpt-4o-mini-2024" }],
      },
    ] as Record<string, unknown>[],
  };
}

type CatalogFile = ReturnType<typeof catalogFile>;

function refusal(mutate: (c: CatalogFile) => void): string {
  const file = catalogFile();
  mutate(file);
  try {
    buildCatalog(file, {});
  } catch (error) {
    assert.ok(error instanceof CatalogError, String(error));
    return error.message;
  }
  assert.fail("the catalog was accepted");
}

Deno.test("a valid catalog lists its models with exact prices, as written and in pico-USD per token", () => {
  const catalog = buildCatalog(catalogFile(), {});
  assert.deepEqual(catalog.models.map((m) => m.id), ["tollbooth/echo", "openai/gpt-4o-mini"]);
  const mini = catalog.get("openai/gpt-4o-mini")!;
  assert.equal(mini.inputPrice, 150_000n);
  assert.equal(mini.outputPrice, 600_000n);
  assert.equal(mini.inputUsdPerMTok, "0.15");
  assert.equal(mini.outputUsdPerMTok, "0.60");
  assert.equal(mini.upstreamModel, "gpt-4o-mini");
  assert.equal(mini.contextTokens, 128_000);
  assert.equal(mini.maxOutputTokens, 16_384);
  assert.equal(catalog.get("openai/unknown"), undefined);
});

Deno.test("a provider's key is read from the environment variable it names; empty means unset", () => {
  const withKey = buildCatalog(catalogFile(), { OPENAI_API_KEY: "sk-test" });
  const provider = withKey.get("openai/gpt-4o-mini")!.provider;
  assert.ok(provider.kind === "openai");
  assert.equal(provider.apiKey, "sk-test");
  assert.equal(provider.apiKeyEnv, "OPENAI_API_KEY");
  const empty = buildCatalog(catalogFile(), { OPENAI_API_KEY: "" });
  const unset = empty.get("openai/gpt-4o-mini")!.provider;
  assert.ok(unset.kind === "openai" && unset.apiKey === undefined);
});

Deno.test("a provider's base URL loses its trailing slashes; its timeout is kept when given", () => {
  const catalog = buildCatalog(catalogFile(), {});
  const provider = catalog.get("openai/gpt-4o-mini")!.provider;
  assert.ok(provider.kind === "openai");
  assert.equal(provider.baseUrl, "https://api.openai.com/v1");
  assert.equal(provider.timeoutMs, undefined);
  assert.equal(catalog.get("openai/gpt-4o-mini")!.fallbacks[0].provider.timeoutMs, 5_000);
});

Deno.test("the simulator streams without delay unless the catalog sets one", () => {
  const echo = buildCatalog(catalogFile(), {}).get("tollbooth/echo")!.provider;
  assert.deepEqual(echo, { name: "tollbooth", kind: "simulator", tokenDelayMs: 0 });
  const file = catalogFile();
  Object.assign(file.providers.tollbooth, { token_delay_ms: 20 });
  const slow = buildCatalog(file, {}).get("tollbooth/echo")!.provider;
  assert.ok(slow.kind === "simulator" && slow.tokenDelayMs === 20);
});

Deno.test("a model's fallbacks resolve to their providers, in order", () => {
  const mini = buildCatalog(catalogFile(), {}).get("openai/gpt-4o-mini")!;
  assert.deepEqual(
    mini.fallbacks.map((f) => [f.provider.name, f.upstreamModel]),
    [["backup", "gpt-4o-mini-2024"]],
  );
  assert.deepEqual(buildCatalog(catalogFile(), {}).get("tollbooth/echo")!.fallbacks, []);
});

Deno.test("a fallback bills images by the model's rule unless it gives its own", () => {
  const file = catalogFile();
  const mini = file.models[1];
  mini.image_base_tokens = 2833;
  mini.image_tile_tokens = 5667;
  mini.fallbacks = [
    { provider: "openai", upstream_model: "gpt-4o-mini-2024-07-18" },
    { provider: "openai", upstream_model: "gpt-4o", image_base_tokens: 85, image_tile_tokens: 170 },
  ];
  const model = buildCatalog(file, {}).get("openai/gpt-4o-mini")!;
  assert.deepEqual(
    model.fallbacks.map((f) => [f.imageBaseTokens, f.imageTileTokens]),
    [[2833, 5667], [85, 170]],
  );
  assert.match(
    refusal((c) =>
      c.models[1].fallbacks = [{ provider: "openai", upstream_model: "x", image_tile_tokens: -1 }]
    ),
    /models\.1\.fallbacks\.0\.image_tile_tokens/,
  );
});

Deno.test("a bad field is refused with a message naming it", () => {
  const cases: [(c: CatalogFile) => void, RegExp][] = [
    [(c) => (c.models[0].input_usd_per_mtok = 0.5), /^catalog field models\.0\.input_usd_per_mtok/],
    [(c) => (c.models[1].output_usd_per_mtok = "0.1234567"), /models\.1\.output_usd_per_mtok/],
    [(c) => (c.models[1].output_usd_per_mtok = "-1"), /models\.1\.output_usd_per_mtok/],
    [(c) => (c.models[1].id = "no-slash"), /models\.1\.id: .*<provider>\/<model_name>/],
    [(c) => (c.models[0].max_output_tokens = 0), /models\.0\.max_output_tokens/],
    [(c) => (c.models[0].context_tokens = 1.5), /models\.0\.context_tokens/],
    [(c) => (c.models[0].upstream_model = ""), /models\.0\.upstream_model/],
    [(c) => (c.models[0].surprise = true), /models\.0/],
    [
      (c) => Object.assign(c.providers.openai, { kind: "carrier-pigeon" }),
      /providers\.openai\.kind/,
    ],
    [(c) => (c.providers.openai.base_url = "not a url"), /providers\.openai\.base_url/],
    [(c) => (c.providers.openai.api_key_env = "openai key"), /providers\.openai\.api_key_env/],
    [(c) => (c.providers.backup.timeout_ms = -1), /providers\.backup\.timeout_ms/],
    [(c) => (c.models = []), /models/],
    [(c) => delete (c as Partial<CatalogFile>).models, /models/],
  ];
  for (const [mutate, message] of cases) assert.match(refusal(mutate), message);
});

Deno.test("a model naming an unknown provider, directly or as a fallback, is refused", () => {
  assert.match(
    refusal((c) => (c.models[1].provider = "ghost")),
    /models\.1\.provider: unknown provider "ghost"/,
  );
  assert.match(
    refusal((c) => (c.models[1].fallbacks = [{ provider: "ghost", upstream_model: "x" }])),
    /models\.1\.fallbacks\.0\.provider: unknown provider "ghost"/,
  );
});

Deno.test("a model listed twice is refused", () => {
  assert.match(
    refusal((c) => c.models.push({ ...c.models[0] })),
    /models\.2\.id: duplicate model "tollbooth\/echo"/,
  );
});

Deno.test("a model whose output cap exceeds its context is refused", () => {
  assert.match(
    refusal((c) => (c.models[0].max_output_tokens = 1_001)),
    /models\.0\.max_output_tokens: larger than context_tokens/,
  );
});

Deno.test("more than five fallbacks are refused", () => {
  const six = Array.from({ length: 6 }, () => ({ provider: "backup", upstream_model: "x" }));
  assert.match(refusal((c) => (c.models[1].fallbacks = six)), /models\.1\.fallbacks/);
});

/** A one-provider catalog holding `model`, with the simulator and an anthropic provider beside it. */
function catalogWith(model: Record<string, unknown>) {
  return {
    providers: {
      sim: { kind: "simulator" },
      oa: { kind: "openai", base_url: "https://api.openai.com/v1", api_key_env: "OA_KEY" },
      an: { kind: "anthropic", base_url: "https://api.anthropic.com", api_key_env: "AN_KEY" },
    },
    models: [{ id: "oa/m", provider: "oa", upstream_model: "m", context_tokens: 8192, ...model }],
  };
}

Deno.test("a model is a chat model unless its entry says type embedding", () => {
  const chat = buildCatalog(
    catalogWith({ input_usd_per_mtok: "1", output_usd_per_mtok: "2", max_output_tokens: 10 }),
    {},
  );
  assert.equal(chat.get("oa/m")!.type, "chat");
  const embedding = buildCatalog(
    catalogWith({ type: "embedding", input_usd_per_mtok: "0.02" }),
    {},
  ).get("oa/m")!;
  assert.equal(embedding.type, "embedding");
  assert.equal(embedding.inputPrice, 20_000n);
  assert.equal(embedding.outputPrice, 0n);
  assert.equal(embedding.outputUsdPerMTok, null);
  assert.equal(embedding.contextTokens, 8192);
  assert.equal(embedding.tokenizer, "cl100k", "the count OpenAI's embedding models limit input in");
});

Deno.test("an embedding model takes tokenizer utf8_bytes or cl100k, and one not OpenAI's without a tokenizer is warned of at load", () => {
  const load = (upstream: string, tokenizer?: string) =>
    buildCatalog(
      catalogWith({
        type: "embedding",
        input_usd_per_mtok: "0.1",
        upstream_model: upstream,
        ...(tokenizer ? { tokenizer } : {}),
      }),
      {},
    );
  const bytes = load("mistral-embed", "utf8_bytes");
  assert.equal(bytes.get("oa/m")!.tokenizer, "utf8_bytes");
  assert.deepEqual(bytes.warnings, []);
  assert.deepEqual(load("mistral-embed", "cl100k").warnings, []);
  const [warning, ...rest] = load("mistral-embed").warnings!;
  assert.deepEqual(rest, []);
  assert.match(
    warning,
    /models\.0\.tokenizer: "mistral-embed" is not one of OpenAI's .*utf8_bytes/,
  );
  for (
    const openai of [
      "text-embedding-3-small",
      "openai/text-embedding-3-large",
      "text-embedding-ada-002",
    ]
  ) {
    assert.deepEqual(load(openai).warnings, [], openai);
  }
  // The simulator's embedding model counts as we do.
  const simulated = catalogWith({ type: "embedding", input_usd_per_mtok: "1", provider: "sim" });
  assert.deepEqual(buildCatalog(simulated, {}).warnings, []);
});

Deno.test("an embedding model has no output price nor output cap, and a chat model needs both", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [
      { type: "embedding", input_usd_per_mtok: "1", output_usd_per_mtok: "1" },
      /models\.0\.output_usd_per_mtok: an embedding model has no output/,
    ],
    [
      { type: "embedding", input_usd_per_mtok: "1", max_output_tokens: 5 },
      /models\.0\.max_output_tokens: an embedding model has no output/,
    ],
    [
      { input_usd_per_mtok: "1", max_output_tokens: 5 },
      /models\.0\.output_usd_per_mtok: required of a chat model/,
    ],
    [
      { type: "chat", input_usd_per_mtok: "1", output_usd_per_mtok: "1" },
      /models\.0\.max_output_tokens: required of a chat model/,
    ],
    [{ type: "image", input_usd_per_mtok: "1" }, /models\.0\.type/],
    [
      { type: "embedding", input_usd_per_mtok: "1", provider: "an" },
      /models\.0\.provider: "an" is of kind anthropic, which serves no embeddings/,
    ],
    [
      {
        type: "embedding",
        input_usd_per_mtok: "1",
        fallbacks: [{ provider: "an", upstream_model: "m" }],
      },
      /models\.0\.fallbacks\.0\.provider: "an" is of kind anthropic/,
    ],
  ];
  for (const [model, message] of cases) {
    assert.throws(
      () => buildCatalog(catalogWith(model), {}),
      (e: Error) => e instanceof CatalogError && message.test(e.message),
      String(message),
    );
  }
  // The simulator serves embeddings too.
  const simulated = catalogWith({ type: "embedding", input_usd_per_mtok: "1", provider: "sim" });
  assert.equal(buildCatalog(simulated, {}).get("oa/m")!.provider.kind, "simulator");
});

Deno.test("a route's tokenizer is the catalog's, else cl100k for OpenAI's GPT-4 and GPT-3.5 and o200k for the rest", () => {
  /** The tokenizers of a model's primary route and of a fallback, by their model names. */
  const tokenizers = (primary: string, fallback: string, set?: string) => {
    const file = catalogFile();
    file.models[1].upstream_model = primary;
    file.models[1].fallbacks = [{ provider: "openai", upstream_model: fallback }];
    if (set) file.models[1].tokenizer = set;
    const model = buildCatalog(file, {}).get("openai/gpt-4o-mini")!;
    return [model.tokenizer, model.fallbacks[0].tokenizer];
  };
  const cl100k = [
    "gpt-4",
    "gpt-4-0613",
    "gpt-4-turbo",
    "gpt-4-32k",
    "gpt-3.5-turbo",
    "gpt-35-turbo",
    "ft:gpt-4-0613:acme::abc",
    "ft:gpt-3.5-turbo-0125:acme::abc",
    "openai/gpt-4",
    "GPT-4",
    "prod-gpt-4",
    "eu_gpt-35-turbo",
    "team.gpt-4-32k",
  ];
  const o200k = [
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.5-preview",
    "chatgpt-4o-latest",
    "prod-gpt-4o",
    "mygpt-4",
    "ft:gpt-4o-mini:acme::abc",
    "gpt-5",
    "o3",
    "llama-3.3-70b",
  ];
  for (const [a, b] of cl100k.map((name, i) => [name, o200k[i % o200k.length]])) {
    assert.deepEqual(tokenizers(a, b), ["cl100k", "o200k"], `${a}, ${b}`);
    assert.deepEqual(tokenizers(b, a), ["o200k", "cl100k"], `${b}, ${a}`);
  }
  assert.deepEqual(tokenizers("gpt-4", "llama-3", "utf8_bytes"), ["utf8_bytes", "utf8_bytes"]);
});

Deno.test("a tokenizer is refused as o200k on an embedding model, on a model whose every route is Anthropic's, as o200k on a route that bills cl100k, and when unknown", () => {
  assert.match(
    refusal((c) => {
      c.models[1].tokenizer = "o200k";
      c.models[1].type = "embedding";
      delete c.models[1].output_usd_per_mtok;
      delete c.models[1].max_output_tokens;
      delete c.models[1].fallbacks;
    }),
    /models\.1\.tokenizer: an embedding model takes cl100k .* or utf8_bytes/,
  );
  assert.match(
    refusal((c) => {
      c.models[1].provider = "backup";
      c.models[1].tokenizer = "cl100k";
    }),
    /models\.1\.tokenizer: for routes of the OpenAI kind/,
  );
  assert.match(refusal((c) => c.models[1].tokenizer = "llama"), /models\.1\.tokenizer/);
  // It applies to every route: o200k would under-count a fallback that bills cl100k.
  assert.match(
    refusal((c) => {
      c.models[1].tokenizer = "o200k";
      c.models[1].fallbacks = [{ provider: "openai", upstream_model: "gpt-4-0613" }];
    }),
    /models\.1\.tokenizer: "gpt-4-0613" bills cl100k tokens/,
  );
});

/** The catalog file with one more chat model behind the OpenAI kind. */
function withOpenAiModel(upstreamModel: string, extra: Record<string, unknown> = {}) {
  const file = catalogFile();
  file.models.push({
    id: `groq/${upstreamModel.replaceAll("/", "-")}`,
    provider: "openai",
    upstream_model: upstreamModel,
    input_usd_per_mtok: "0.59",
    output_usd_per_mtok: "0.79",
    context_tokens: 128_000,
    max_output_tokens: 8_192,
    ...extra,
  });
  return file;
}

Deno.test("an open model family behind the OpenAI kind without a tokenizer is warned of at load: its o200k hold can fall below its bill", () => {
  for (
    const name of [
      "llama-3.1-70b-versatile",
      "meta-llama/Llama-3.3-70B",
      "qwen2.5-72b",
      "mixtral-8x7b-32768",
    ]
  ) {
    const warnings = buildCatalog(withOpenAiModel(name), {}).warnings!
      .filter((w) => w.includes(".tokenizer:"));
    assert.equal(warnings.length, 1, name);
    assert.match(
      warnings[0],
      new RegExp(`models\\.2\\.tokenizer: "${name.replace(".", "\\.")}".*utf8_bytes`),
    );
  }
});

Deno.test("OpenAI's own models, and open ones whose tokenizer and image figures the catalog sets, load without a warning", () => {
  for (const name of ["gpt-4o", "o4-mini", "gpt-4.1-mini", "openai/gpt-5-nano-2025-08-07"]) {
    assert.deepEqual(buildCatalog(withOpenAiModel(name), {}).warnings, [], name);
  }
  const set = buildCatalog(
    withOpenAiModel("llama-3.1-8b", { tokenizer: "utf8_bytes", image_base_tokens: 1601 }),
    {},
  );
  assert.deepEqual(set.warnings, []);
});

Deno.test("an OpenAI route without image figures bills images by OpenAI's rule for its name, and an unknown name at the most any but GPT-4o mini bills, its own patches included, with a warning", () => {
  const figures = (name: string, extra: Record<string, unknown> = {}) => {
    const catalog = buildCatalog(withOpenAiModel(name, extra), {});
    const model = catalog.models.at(-1)!;
    const warned = catalog.warnings!.some((w) => w.includes(".image_base_tokens:"));
    return [model.imageBaseTokens, model.imageTileTokens, model.imagePatches, warned];
  };
  assert.deepEqual(figures("gpt-4o"), [85, 170, null, false]);
  assert.deepEqual(figures("gpt-4o-mini"), [2833, 5667, null, false]);
  assert.deepEqual(figures("gpt-4.1-nano"), [3779, 0, null, false]);
  assert.deepEqual(figures("gpt-5.4-mini-2026-03-17"), [2489, 0, null, false]);
  assert.deepEqual(figures("gpt-5.4-nano"), [3779, 0, null, false]);
  // A name OpenAI's guide gives no rule for (GPT-5.6 reads images at their own size): GPT-4o's
  // tiles or the image's patches at the highest multiplier, whichever is more, and a warning.
  const most = { multiplier: 2.46, most: 30_000 };
  assert.deepEqual(figures("gpt-5.6"), [85, 170, most, true]);
  assert.deepEqual(figures("my-vision-deployment"), [85, 170, most, true]);
  // The catalog's figures stand, either of them set.
  assert.deepEqual(figures("my-vision-deployment", { image_base_tokens: 100 }), [
    100,
    170,
    null,
    false,
  ]);
  assert.deepEqual(figures("gpt-4.1-nano", { image_tile_tokens: 10 }), [85, 10, null, false]);
});

Deno.test("a fallback without image figures bills by its own name's rule, and the simulator and Claude routes by 85 and 170", () => {
  const file = withOpenAiModel("gpt-4o", {
    fallbacks: [
      { provider: "openai", upstream_model: "gpt-4.1-nano" },
      { provider: "backup", upstream_model: "claude-sonnet-4-5" },
      { provider: "openai", upstream_model: "gpt-5.6-nano", image_base_tokens: 4000 },
    ],
  });
  const catalog = buildCatalog(file, {});
  const model = catalog.models.at(-1)!;
  assert.deepEqual(
    [model, ...model.fallbacks].map((r) => [r.imageBaseTokens, r.imageTileTokens]),
    [[85, 170], [3779, 0], [85, 170], [4000, 170]],
  );
  assert.deepEqual(catalog.warnings, []);
  const echo = catalog.get("tollbooth/echo")!;
  assert.deepEqual([echo.imageBaseTokens, echo.imageTileTokens], [85, 170]);
});

Deno.test("a model an Anthropic route serves bills cache writes at Anthropic's 1.25× the input price unless the catalog names one, and lists it", () => {
  const file = catalogFile();
  file.models.push({
    id: "anthropic/claude",
    provider: "backup",
    upstream_model: "claude-sonnet-4-5",
    input_usd_per_mtok: "3.00",
    output_usd_per_mtok: "15.00",
    context_tokens: 200_000,
    max_output_tokens: 8_192,
  }, {
    id: "anthropic/priced",
    provider: "backup",
    upstream_model: "claude-haiku-4-5",
    input_usd_per_mtok: "1.00",
    output_usd_per_mtok: "5.00",
    cache_write_usd_per_mtok: "2.00",
    context_tokens: 200_000,
    max_output_tokens: 8_192,
  });
  file.models[1] = { ...file.models[1], fallbacks: [] };
  const catalog = buildCatalog(file, {});
  const claude = catalog.get("anthropic/claude")!;
  assert.equal(claude.cacheWritePrice, 3_750_000n);
  assert.equal(claude.cacheWriteUsdPerMTok, "3.75");
  // An hour's write: twice the input price.
  assert.equal(claude.cacheWrite1hPrice, 6_000_000n);
  assert.equal(claude.cacheWrite1hUsdPerMTok, "6.00");
  assert.equal(catalog.get("anthropic/priced")!.cacheWritePrice, 2_000_000n);
  const openai = catalog.get("openai/gpt-4o-mini")!;
  assert.equal(openai.cacheWritePrice, openai.inputPrice, "OpenAI reports no cache writes");
  assert.equal(openai.cacheWriteUsdPerMTok, null);
  assert.equal(openai.cacheWrite1hUsdPerMTok, null, "no route keeps writes for an hour");
});

Deno.test("OpenAI's GPT-5.6 and later bill cache writes at 1.25× the input price unless the catalog names one; earlier GPTs at the input price", () => {
  const writePrice = (upstream: string, extra: Record<string, unknown> = {}) =>
    loaded((c) => {
      c.models[1] = { ...c.models[1], upstream_model: upstream, fallbacks: [], ...extra };
    }).cacheWriteUsdPerMTok;
  for (
    const name of ["gpt-5.6", "gpt-5.6-mini-2026-08-01", "openai/gpt-5.10", "gpt-6", "gpt-6.1-pro"]
  ) {
    assert.equal(writePrice(name), "0.1875", name);
  }
  for (
    const name of [
      "gpt-5",
      "gpt-5.5",
      "gpt-4o-mini",
      "o3",
      "my-deployment",
      "gpt-35-turbo",
      "eu_gpt-35-turbo-16k",
      "gpt-oss-120b",
    ]
  ) {
    assert.equal(writePrice(name), null, name);
  }
  assert.equal(writePrice("gpt-5.6", { cache_write_usd_per_mtok: "0.20" }), "0.20");
  // A fallback that bills them prices the model's writes so: the hold covers any route.
  assert.equal(
    loaded((c) => {
      c.models[1] = {
        ...c.models[1],
        fallbacks: [{ provider: "openai", upstream_model: "gpt-5.6" }],
      };
    }).cacheWriteUsdPerMTok,
    "0.1875",
  );
});

/** gpt-4o-mini's entry with a long-context tier (OpenAI's rule: past 272K, 2× input, 1.5× output). */
function withLongContext(tier: Record<string, unknown>, more: Record<string, unknown> = {}) {
  return (file: CatalogFile) => {
    file.models[1] = {
      ...file.models[1],
      context_tokens: 1_050_000,
      cache_read_usd_per_mtok: "0.075",
      long_context: tier,
      ...more,
    };
  };
}

function loaded(mutate: (c: CatalogFile) => void) {
  const file = catalogFile();
  mutate(file);
  return buildCatalog(file, {}).get("openai/gpt-4o-mini")!;
}

Deno.test("a long-context tier is read with its size and prices; cache prices it leaves out are its input price", () => {
  const model = loaded(withLongContext({
    above_input_tokens: 272_000,
    input_usd_per_mtok: "0.30",
    output_usd_per_mtok: "0.90",
  }));
  assert.equal(model.longContext?.aboveInputTokens, 272_000);
  assert.equal(model.longContext?.inputPrice, 300_000n);
  assert.equal(model.longContext?.outputPrice, 900_000n);
  assert.equal(model.longContext?.cacheReadPrice, 300_000n);
  assert.equal(model.longContext?.cacheReadUsdPerMTok, null);
  assert.equal(model.inputPrice, 150_000n, "the model's own prices are unchanged");
  assert.equal(buildCatalog(catalogFile(), {}).get("openai/gpt-4o-mini")!.longContext, null);
});

Deno.test("a long-context tier on an Anthropic route bills its cache writes at 1.25× its input price unless it names one", () => {
  const model = loaded(withLongContext({
    above_input_tokens: 200_000,
    input_usd_per_mtok: "6.00",
    output_usd_per_mtok: "22.50",
  }, {
    provider: "backup",
    input_usd_per_mtok: "3.00",
    output_usd_per_mtok: "15.00",
    cache_read_usd_per_mtok: "0.30",
    fallbacks: [],
  }));
  assert.equal(model.longContext?.cacheWritePrice, 7_500_000n);
  assert.equal(model.longContext?.cacheWriteUsdPerMTok, "7.50");
  assert.equal(model.longContext?.cacheWrite1hPrice, 12_000_000n);
});

Deno.test("a long-context tier cheaper than the model, at or past the context, on an embedding model, or with an unknown field is refused", () => {
  const tier = {
    above_input_tokens: 272_000,
    input_usd_per_mtok: "0.30",
    output_usd_per_mtok: "0.90",
  };
  assert.match(
    refusal(withLongContext({ ...tier, input_usd_per_mtok: "0.10" })),
    /models\.1\.long_context\.input_usd_per_mtok: 0\.10 is below the model's 0\.15/,
  );
  assert.match(
    refusal(withLongContext({ ...tier, output_usd_per_mtok: "0.50" })),
    /long_context\.output_usd_per_mtok: 0\.50 is below the model's 0\.60/,
  );
  assert.match(
    refusal(withLongContext({ ...tier, cache_read_usd_per_mtok: "0.05" })),
    /long_context\.cache_read_usd_per_mtok: 0\.05 is below the model's 0\.075/,
  );
  assert.match(
    refusal(withLongContext({ ...tier, above_input_tokens: 1_050_000 })),
    /long_context\.above_input_tokens: 1050000 is not below context_tokens \(1050000\)/,
  );
  assert.match(
    refusal(withLongContext({ ...tier, output_usd_per_mtok: undefined })),
    /long_context\.output_usd_per_mtok/,
  );
  assert.match(refusal(withLongContext({ ...tier, above: 1 })), /long_context/);
  const embedding = refusal((c) =>
    c.models.push({
      id: "openai/embed",
      type: "embedding",
      provider: "openai",
      upstream_model: "text-embedding-3-small",
      input_usd_per_mtok: "0.02",
      context_tokens: 8192,
      long_context: {
        above_input_tokens: 4096,
        input_usd_per_mtok: "0.04",
        output_usd_per_mtok: "0",
      },
    })
  );
  assert.match(embedding, /models\.2\.long_context: for chat models/);
});

Deno.test("a provider of kind openai asks for stream usage unless its entry says stream_options false; the field is refused on kind anthropic", () => {
  const file = catalogFile();
  (file.providers.openai as Record<string, unknown>).stream_options = false;
  const providers = buildCatalog(file, {}).models.map((m) => m.provider);
  assert.deepEqual(
    providers.flatMap((p) => p.kind === "simulator" ? [] : [[p.name, p.streamOptions]]),
    [["openai", false]],
  );
  assert.equal(
    (buildCatalog(catalogFile(), {}).get("openai/gpt-4o-mini")!.provider as {
      streamOptions: boolean;
    })
      .streamOptions,
    true,
  );
  assert.match(
    refusal((c) => ((c.providers.backup as Record<string, unknown>).stream_options = false)),
    /providers\.backup\.stream_options: for providers of kind openai/,
  );
});

Deno.test("a provider of kind openai is sent assistants' reasoning_content back only when its entry says forward_reasoning_content; refused on kind anthropic", () => {
  const withForward = catalogFile();
  (withForward.providers.openai as Record<string, unknown>).forward_reasoning_content = true;
  const provider = (file: CatalogFile) =>
    buildCatalog(file, {}).get("openai/gpt-4o-mini")!.provider as {
      forwardReasoningContent: boolean;
    };
  assert.equal(provider(withForward).forwardReasoningContent, true);
  assert.equal(provider(catalogFile()).forwardReasoningContent, false);
  assert.match(
    refusal((
      c,
    ) => ((c.providers.backup as Record<string, unknown>).forward_reasoning_content = true)),
    /providers\.backup\.forward_reasoning_content: for providers of kind openai/,
  );
});

Deno.test("a provider of kind openai is sent assistants' reasoning_details back only when its entry says forward_reasoning_details; refused on kind anthropic", () => {
  const withForward = catalogFile();
  (withForward.providers.openai as Record<string, unknown>).forward_reasoning_details = true;
  const provider = (file: CatalogFile) =>
    buildCatalog(file, {}).get("openai/gpt-4o-mini")!.provider as {
      forwardReasoningDetails: boolean;
    };
  assert.equal(provider(withForward).forwardReasoningDetails, true);
  assert.equal(provider(catalogFile()).forwardReasoningDetails, false);
  assert.match(
    refusal((
      c,
    ) => ((c.providers.backup as Record<string, unknown>).forward_reasoning_details = true)),
    /providers\.backup\.forward_reasoning_details: for providers of kind openai/,
  );
});

Deno.test("a provider of kind openai takes allowed_tools as sent when it is OpenAI's own API or its entry says allowed_tools; refused on kind anthropic", () => {
  const provider = (edit: (c: CatalogFile) => void = () => {}) => {
    const file = catalogFile();
    edit(file);
    return buildCatalog(file, {}).get("openai/gpt-4o-mini")!.provider as { allowedTools: boolean };
  };
  const openai = (c: CatalogFile) => c.providers.openai as Record<string, unknown>;
  assert.equal(
    provider((c) => (openai(c).base_url = "https://api.openai.com/v1")).allowedTools,
    true,
  );
  assert.equal(provider((c) => (openai(c).base_url = "http://vllm:8000/v1")).allowedTools, false);
  assert.equal(
    provider((c) =>
      Object.assign(openai(c), { base_url: "http://vllm:8000/v1", allowed_tools: true })
    )
      .allowedTools,
    true,
  );
  assert.equal(
    provider((c) =>
      Object.assign(openai(c), { base_url: "https://api.openai.com/v1", allowed_tools: false })
    ).allowedTools,
    false,
  );
  assert.match(
    refusal((c) => ((c.providers.backup as Record<string, unknown>).allowed_tools = true)),
    /providers\.backup\.allowed_tools: for providers of kind openai; Claude has no allowed tools/,
  );
});

Deno.test("each Claude route carries its model's rules, by name or as the catalog states them; other routes have none", () => {
  const model = loaded((c) => {
    c.models[1].fallbacks = [
      { provider: "backup", upstream_model: "claude-opus-4-7" },
      {
        provider: "backup",
        upstream_model: "our-claude-deployment",
        claude: { thinking: "always", forced_tool_choice: false },
      },
    ];
  });
  assert.equal(model.claude, null);
  assert.deepEqual(model.fallbacks.map((f) => f.claude), [
    {
      thinking: "adaptive",
      sampling: false,
      forcedToolChoice: true,
      prefill: false,
      imageLongEdge: 2576,
      strictTools: true,
    },
    {
      thinking: "always",
      sampling: false,
      forcedToolChoice: false,
      prefill: false,
      imageLongEdge: 2576,
      strictTools: false,
    },
  ]);
  assert.equal(
    refusal((c) => (c.models[1].claude = { thinking: "always" })),
    'catalog field models.1.claude: for routes of kind anthropic; "openai" is of kind openai',
  );
  assert.match(
    refusal((c) => (c.models[1].fallbacks = [{
      provider: "backup",
      upstream_model: "x",
      claude: { thinking: "sometimes" },
    }])),
    /^catalog field models\.1\.fallbacks\.0\.claude\.thinking: /,
  );
});

/** The catalog with a provider of kind openai_responses beside the others. */
function withResponsesProvider(extra: Record<string, unknown> = {}) {
  return (c: CatalogFile) => {
    (c.providers as Record<string, unknown>).responses = {
      kind: "openai_responses",
      base_url: "https://api.openai.com/v1",
      api_key_env: "OPENAI_API_KEY",
      ...extra,
    };
    c.models.push({
      id: "openai/o3-pro",
      provider: "responses",
      upstream_model: "o3-pro",
      input_usd_per_mtok: "20",
      output_usd_per_mtok: "80",
      context_tokens: 200_000,
      max_output_tokens: 100_000,
    });
  };
}

Deno.test("a provider of kind openai_responses serves chat models, and asks for reasoning summaries only when its entry says reasoning_summaries", () => {
  const build = (extra: Record<string, unknown> = {}) => {
    const file = catalogFile();
    withResponsesProvider(extra)(file);
    return buildCatalog(file, { OPENAI_API_KEY: "sk-x" }).get("openai/o3-pro")!.provider;
  };
  const plain = build();
  assert.equal(plain.kind, "openai_responses");
  assert.equal((plain as { reasoningSummaries: boolean }).reasoningSummaries, false);
  assert.equal((plain as { apiKey?: string }).apiKey, "sk-x");
  const summaries = build({ reasoning_summaries: true });
  assert.equal((summaries as { reasoningSummaries: boolean }).reasoningSummaries, true);
});

Deno.test("each kind's own provider fields are refused on another kind, saying why", () => {
  assert.match(
    refusal(withResponsesProvider({ stream_options: false })),
    /providers\.responses\.stream_options: for providers of kind openai; a Responses stream always ends with its usage/,
  );
  assert.match(
    refusal(withResponsesProvider({ forward_reasoning_details: true })),
    /providers\.responses\.forward_reasoning_details: for providers of kind openai; OpenAI is always sent/,
  );
  assert.match(
    refusal((c) => ((c.providers.openai as Record<string, unknown>).reasoning_summaries = true)),
    /providers\.openai\.reasoning_summaries: for providers of kind openai_responses; the chat completions API gives no reasoning summaries/,
  );
  assert.match(
    refusal((c) => ((c.providers.backup as Record<string, unknown>).reasoning_summaries = true)),
    /providers\.backup\.reasoning_summaries: for providers of kind openai_responses/,
  );
});

Deno.test("a provider of kind openai_responses serves no embeddings", () => {
  assert.match(
    refusal((c) => {
      withResponsesProvider()(c);
      c.models.push({
        id: "openai/text-embedding-3-small",
        provider: "responses",
        upstream_model: "text-embedding-3-small",
        type: "embedding",
        input_usd_per_mtok: "0.02",
        context_tokens: 8_191,
      });
    }),
    /models\.3\.provider: "responses" is of kind openai_responses, which serves no embeddings/,
  );
});

Deno.test("GPT-5.6's cache writes are priced above input through the Responses API as through chat", () => {
  const file = catalogFile();
  withResponsesProvider()(file);
  file.models.push({
    id: "openai/gpt-5.6",
    provider: "responses",
    upstream_model: "gpt-5.6",
    input_usd_per_mtok: "1.25",
    output_usd_per_mtok: "10",
    context_tokens: 400_000,
    max_output_tokens: 128_000,
  });
  const model = buildCatalog(file, {}).get("openai/gpt-5.6")!;
  assert.equal(model.cacheWriteUsdPerMTok, "1.5625");
});

Deno.test("a provider of OpenAI's kinds is streamed unless its entry says streaming: false; refused on kind anthropic", () => {
  const streaming = (mutate: (c: CatalogFile) => void, id = "openai/gpt-4o-mini") => {
    const file = catalogFile();
    mutate(file);
    return (buildCatalog(file, {}).get(id)!.provider as { streaming: boolean }).streaming;
  };
  assert.equal(streaming(() => {}), true);
  assert.equal(
    streaming((c) => ((c.providers.openai as Record<string, unknown>).streaming = false)),
    false,
  );
  assert.equal(streaming(withResponsesProvider({ streaming: false }), "openai/o3-pro"), false);
  assert.match(
    refusal((c) => ((c.providers.backup as Record<string, unknown>).streaming = false)),
    /providers\.backup\.streaming: for providers of kind openai or openai_responses; Anthropic streams every model/,
  );
});

Deno.test("a chat-API model's documents provider is its route for a request holding a PDF: the same model, that provider, nothing else", () => {
  const file = catalogFile();
  withResponsesProvider()(file);
  file.models[1].documents_provider = "responses";
  const catalog = buildCatalog(file, { OPENAI_API_KEY: "sk-x" });
  const model = catalog.get("openai/gpt-4o-mini")!;
  assert.equal(model.documentRoute?.provider.name, "responses");
  assert.equal(model.documentRoute?.upstreamModel, "gpt-4o-mini");
  assert.equal(model.documentRoute?.tokenizer, model.tokenizer);
  assert.deepEqual(
    [model.documentRoute?.imageBaseTokens, model.documentRoute?.imageTileTokens],
    [model.imageBaseTokens, model.imageTileTokens],
  );
  assert.deepEqual(providersOf(model).map((p) => p.name), ["openai", "backup", "responses"]);
  assert.equal(
    catalog.get("openai/o3-pro")!.documentRoute,
    null,
    "none unless the entry names one",
  );
});

Deno.test("a documents provider is refused unless it is of kind openai_responses and the model is served through OpenAI's chat API", () => {
  assert.match(
    refusal((c) => (c.models[1].documents_provider = "nowhere")),
    /models\.1\.documents_provider: unknown provider "nowhere"/,
  );
  assert.match(
    refusal((c) => (c.models[1].documents_provider = "backup")),
    /models\.1\.documents_provider: "backup" is of kind anthropic; it must be of kind openai_responses/,
  );
  assert.match(
    refusal((c) => {
      withResponsesProvider()(c);
      c.models[2].documents_provider = "responses";
    }),
    /models\.2\.documents_provider: for models served through OpenAI's chat API \(kind openai\); "responses" is of kind openai_responses, which counts a PDF itself/,
  );
  assert.match(
    refusal((c) => {
      withResponsesProvider()(c);
      c.models.push({
        id: "openai/text-embedding-3-small",
        provider: "openai",
        upstream_model: "text-embedding-3-small",
        type: "embedding",
        input_usd_per_mtok: "0.02",
        context_tokens: 8_191,
        documents_provider: "responses",
      });
    }),
    /models\.3\.documents_provider: for chat models; an embedding model takes no PDF/,
  );
});

Deno.test("a price of 100,000 USD per million tokens or more is refused: a believed count at it must cost a safe integer", () => {
  const at = (price: string) =>
    refusal((c) => {
      c.models[0].output_usd_per_mtok = price;
    });
  assert.match(at("100000"), /output_usd_per_mtok: a decimal USD string below 100000/);
  assert.match(at("0.1234567"), /at most 6 decimals/);
  const dearest = catalogFile();
  dearest.models[0].output_usd_per_mtok = "99999.999999";
  const model = buildCatalog(dearest, {}).models[0];
  assert.ok(Number.isSafeInteger(componentsCost([[MAX_REPORTED_TOKENS, model.outputPrice]])));
});

Deno.test("a model that searches the web on every request is refused: its per-request fee has no price here", () => {
  for (
    const name of [
      "gpt-4o-search-preview",
      "gpt-5-search-api",
      "openai/gpt-4o:online",
      "sonar-pro",
      "perplexity/sonar",
    ]
  ) {
    const primary = refusal((c) => (c.models[1].upstream_model = name));
    assert.match(
      primary,
      new RegExp(
        `models\\.1\\.upstream_model: "${name.replace(/[.+?]/g, "\\$&")}" searches the web`,
      ),
    );
    const fallback = refusal((c) => {
      (c.models[1].fallbacks as { upstream_model: string }[])[0].upstream_model = name;
    });
    assert.match(fallback, /searches the web on every request/);
  }
  for (const name of ["gpt-4o", "research-7b", "sonarqube-helper"]) {
    const file = catalogFile();
    file.models[1].upstream_model = name;
    assert.ok(buildCatalog(file, {}).get("openai/gpt-4o-mini"), name);
  }
});
