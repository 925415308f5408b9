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

Deno.test("the shipped catalog serves its chat models' PDFs through the Responses API, given as long to answer as their other requests", async () => {
  const catalog = await loadCatalogFile(DEFAULT_MODELS_FILE, { OPENAI_API_KEY: "sk-test" });
  const chatModels = catalog.models.filter((m) =>
    m.provider.kind === "openai" && m.type === "chat"
  );
  assert.ok(chatModels.length >= 4);
  for (const model of chatModels) {
    const documents = model.documentRoute;
    assert.ok(documents, `${model.id} has a documents route`);
    assert.equal(documents.provider.kind, "openai_responses");
    assert.equal(documents.upstreamModel, model.upstreamModel);
    assert.equal(documents.provider.timeoutMs, model.provider.timeoutMs, model.id);
  }
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
