import assert from "node:assert/strict";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { devBanner } from "./dev_banner.ts";

function catalog(env: Record<string, string> = {}) {
  const model = (id: string, provider: string) => ({
    id,
    provider,
    upstream_model: id.split("/")[1],
    input_usd_per_mtok: "1",
    output_usd_per_mtok: "1",
    context_tokens: 1_000,
    max_output_tokens: 100,
  });
  return buildCatalog({
    providers: {
      tollbooth: { kind: "simulator" },
      openai: {
        kind: "openai",
        base_url: "https://api.openai.com/v1",
        api_key_env: "OPENAI_API_KEY",
      },
      anthropic: {
        kind: "anthropic",
        base_url: "https://api.anthropic.com",
        api_key_env: "ANTHROPIC_API_KEY",
      },
    },
    models: [
      model("tollbooth/echo", "tollbooth"),
      model("tollbooth/lorem", "tollbooth"),
      model("openai/gpt-4o-mini", "openai"),
      model("openai/gpt-4o", "openai"),
      model("anthropic/claude-x", "anthropic"),
    ],
  }, env);
}

Deno.test("the dev banner gives the dashboard, docs and API addresses and the command that creates an app", () => {
  const banner = devBanner({
    baseUrl: "http://localhost:8000",
    catalog: catalog(),
    testCheckout: true,
  });
  assert.match(banner, /running at http:\/\/localhost:8000\n/);
  assert.match(banner, /Dashboard +http:\/\/localhost:8000\/dashboard /);
  assert.match(banner, /Docs +http:\/\/localhost:8000\/docs\n/);
  assert.match(banner, /API +http:\/\/localhost:8000\/v1\/chat\/completions\n/);
  assert.match(banner, /\n +deno task admin create-app --name demo\n/);
  // An app without an owner is in no one's dashboard: the banner says how to be its owner.
  assert.match(banner, /sign up first and add --owner <your email>/);
});

Deno.test("the dev banner names the built-in models, which need no key, and the keys the others wait for", () => {
  const banner = devBanner({ baseUrl: "http://x", catalog: catalog(), testCheckout: false });
  assert.match(banner, /tollbooth\/echo and tollbooth\/lorem are built in: no key needed/);
  assert.match(
    banner,
    /3 other models answer 502 until OPENAI_API_KEY and ANTHROPIC_API_KEY are set/,
  );
  const withOpenAi = devBanner({
    baseUrl: "http://x",
    catalog: catalog({ OPENAI_API_KEY: "sk-test" }),
    testCheckout: false,
  });
  assert.match(withOpenAi, /1 other model answers 502 until ANTHROPIC_API_KEY is set/);
  const allKeys = devBanner({
    baseUrl: "http://x",
    catalog: catalog({ OPENAI_API_KEY: "sk-test", ANTHROPIC_API_KEY: "sk-ant" }),
    testCheckout: false,
  });
  assert.doesNotMatch(allKeys, /502/);
});

Deno.test("the dev banner says when top-ups use the test checkout", () => {
  const base = { baseUrl: "http://x", catalog: catalog() };
  assert.match(devBanner({ ...base, testCheckout: true }), /test checkout/);
  assert.doesNotMatch(devBanner({ ...base, testCheckout: false }), /test checkout/);
});

Deno.test("the dev banner never shows a provider key", () => {
  const banner = devBanner({
    baseUrl: "http://x",
    catalog: catalog({ OPENAI_API_KEY: "sk-secret-value" }),
    testCheckout: false,
  });
  assert.doesNotMatch(banner, /sk-secret-value/);
});

Deno.test("the dev banner's command carries the KV file, port and address the service was given", () => {
  const banner = devBanner({
    baseUrl: "http://127.0.0.1:8960",
    catalog: catalog(),
    testCheckout: false,
    shared: { KV_PATH: "/tmp/my kv/t.sqlite3", PORT: "8960" },
  });
  assert.match(
    banner,
    /\n +KV_PATH='\/tmp\/my kv\/t.sqlite3' PORT=8960 deno task admin create-app --name demo\n/,
  );
  assert.match(banner, /export its api_key as API_KEY/);
});
