import assert from "node:assert/strict";
import { loadCatalogFile } from "@/lib/catalog/catalog.ts";
import { DEFAULT_MODELS_FILE } from "@/lib/core/config.ts";

Deno.test("the default catalog is valid and lists the simulator and real models", async () => {
  const catalog = await loadCatalogFile(DEFAULT_MODELS_FILE, {});
  const ids = catalog.models.map((m) => m.id);
  assert.ok(ids.includes("tollbooth/echo"));
  assert.ok(ids.includes("openai/gpt-4o-mini"));
  assert.ok(ids.some((id) => id.startsWith("anthropic/claude-")));
  const mini = catalog.get("openai/gpt-4o-mini")!;
  assert.equal(mini.inputPrice, 150_000n);
  assert.equal(mini.outputPrice, 600_000n);
  assert.equal(mini.provider.kind, "openai");
});

Deno.test("provider keys come from the environment variable the catalog names", async () => {
  const catalog = await loadCatalogFile(DEFAULT_MODELS_FILE, { OPENAI_API_KEY: "sk-test" });
  const provider = catalog.get("openai/gpt-4o-mini")!.provider;
  assert.ok(provider.kind === "openai" && provider.apiKey === "sk-test");
});

Deno.test("a catalog file that is missing or not JSON is refused with its path", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(
      loadCatalogFile(`${dir}/none.json`, {}),
      /cannot read catalog file .*none\.json/,
    );
    await Deno.writeTextFile(`${dir}/bad.json`, "{ models: ");
    await assert.rejects(loadCatalogFile(`${dir}/bad.json`, {}), /bad\.json is not valid JSON/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the server refuses to start on a bad MODELS_FILE and says which field", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const bad = JSON.parse(Deno.readTextFileSync(DEFAULT_MODELS_FILE));
    bad.models[0].output_usd_per_mtok = "cheap";
    await Deno.writeTextFile(`${dir}/models.json`, JSON.stringify(bad));
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL("../main.ts", import.meta.url).pathname],
      env: { MODELS_FILE: `${dir}/models.json`, KV_PATH: ":memory:", PORT: "18001" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 1);
    assert.match(new TextDecoder().decode(out.stderr), /models\.0\.output_usd_per_mtok/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
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
