/** Catalog models with more than one provider: the next is tried only before any byte was sent. */
import assert from "node:assert/strict";
import { buildCatalog, CatalogError } from "@/lib/catalog/catalog.ts";
import {
  assertAuditClean,
  readSse,
  serveLoopback,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import {
  cost,
  type FakeProvider,
  fixture,
  sseEvents,
  sseResponse,
  startUpstreamService,
  upstreamCatalog,
} from "./upstreams.ts";

const START = 5_000_000;

function closedPortUrl() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return `http://127.0.0.1:${port}`;
}

/** A fake Messages API answering with the documented fixtures, counting its calls. */
function claudeFake() {
  let calls = 0;
  const server = serveLoopback(async (req) => {
    calls++;
    await req.body?.cancel();
    // Every call is streamed, non-streamed requests included (assembled by the gateway).
    return sseResponse(sseEvents(fixture("anthropic_stream_basic.sse")));
  });
  return { ...server, calls: () => calls };
}

/** A model `multi/m` served by `first`, falling back to the Anthropic fake `claude`. */
async function withFallback(
  first: FakeProvider,
  fn: (s: TestService, claude: ReturnType<typeof claudeFake>) => Promise<void>,
) {
  const claude = claudeFake();
  const s = await startUpstreamService(
    { first, claude: { kind: "anthropic", base_url: claude.url } },
    [{
      id: "multi/m",
      provider: "first",
      upstream_model: "gpt-first",
      fallbacks: [{ provider: "claude", upstream_model: "claude-second" }],
      input_usd_per_mtok: "2.00",
      output_usd_per_mtok: "8.00",
      context_tokens: 200_000,
      max_output_tokens: 8192,
    }],
  );
  try {
    await fn(s, claude);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await claude.close();
  }
}

/** Non-streamed then streamed; both must be served and billed by the fallback alone. */
async function assertServedByFallback(s: TestService) {
  const { apiKey, appId } = await s.newApp();
  const plain = await s.chat(apiKey, { model: "multi/m", messages: userMessage("Hello, Claude") });
  assert.equal(plain.status, 200);
  assert.equal(plain.headers.get("tollbooth-provider"), "claude");
  assert.equal((await plain.json()).choices[0].message.content, "Hello!");

  const streamed = await s.chat(apiKey, {
    model: "multi/m",
    messages: userMessage("Hello"),
    stream: true,
  });
  assert.equal(streamed.status, 200);
  assert.equal(streamed.headers.get("tollbooth-provider"), "claude");
  assert.equal((await readSse(streamed)).at(-1), "[DONE]");

  const wallet = await s.wallet(appId);
  assert.equal(wallet.available, START - 2 * cost(25, 15));
  assert.equal(wallet.reserved, 0);
  const records = await usageRecords(s.kv, appId);
  assert.equal(records.length, 2);
  assert.ok(records.every((r) => r.provider === "claude" && r.model === "multi/m"));
  const fellBack = s.logs.filter((l) => l.event === "upstream_fallback");
  assert.equal(fellBack.length, 2);
  assert.ok(fellBack.every((l) => l.provider === "first" && l.next === "claude"));
}

Deno.test("an unreachable first provider falls back; only the one that answered is billed and named", () =>
  withFallback({ kind: "openai", base_url: closedPortUrl() }, async (s, claude) => {
    await assertServedByFallback(s);
    assert.equal(claude.calls(), 2);
  }));

Deno.test("a first provider answering 5xx falls back", async () => {
  const broken = serveLoopback(() =>
    Response.json({ error: { message: "boom" } }, { status: 503 })
  );
  try {
    await withFallback({ kind: "openai", base_url: broken.url }, assertServedByFallback);
  } finally {
    await broken.close();
  }
});

Deno.test("a first provider with no key configured falls back", () =>
  withFallback(
    { kind: "openai", base_url: closedPortUrl(), api_key_env: "UNSET_FIRST_KEY" },
    assertServedByFallback,
  ));

Deno.test("a first provider silent past its timeout falls back", async () => {
  const silent = serveLoopback(() => sseResponse([], { stall: true }));
  try {
    await withFallback(
      { kind: "openai", base_url: silent.url, timeout_ms: 200 },
      assertServedByFallback,
    );
  } finally {
    await silent.close();
  }
});

Deno.test("a 400 from the first provider does not fall back: the request itself is wrong", async () => {
  const rejecting = serveLoopback(() =>
    Response.json({ error: { message: "Unrecognized request argument supplied: frobnicate" } }, {
      status: 400,
    })
  );
  try {
    await withFallback({ kind: "openai", base_url: rejecting.url }, async (s, claude) => {
      const { apiKey, appId } = await s.newApp();
      const res = await s.chat(apiKey, { model: "multi/m", messages: userMessage("x") });
      assert.equal(res.status, 400);
      assert.equal((await res.json()).error.code, "upstream_rejected");
      assert.equal(claude.calls(), 0);
      assert.equal((await s.wallet(appId)).available, START);
    });
  } finally {
    await rejecting.close();
  }
});

Deno.test("when every provider fails the last failure is returned and nothing is charged", async () => {
  const s = await startUpstreamService(
    {
      a: { kind: "openai", base_url: closedPortUrl() },
      b: { kind: "anthropic", base_url: closedPortUrl() },
    },
    [{
      id: "multi/m",
      provider: "a",
      upstream_model: "x",
      fallbacks: [{ provider: "b", upstream_model: "y" }],
      input_usd_per_mtok: "2.00",
      output_usd_per_mtok: "8.00",
      context_tokens: 1000,
      max_output_tokens: 100,
    }],
  );
  try {
    const { apiKey, appId } = await s.newApp();
    for (const stream of [false, true]) {
      const res = await s.chat(apiKey, { model: "multi/m", messages: userMessage("x"), stream });
      assert.equal(res.status, 502);
      assert.equal((await res.json()).error.code, "provider_unreachable");
    }
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, START);
    assert.equal(wallet.reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a stream cut after bytes reached the client does not fall back", async () => {
  const cut = serveLoopback(() =>
    sseResponse([
      `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`,
    ])
  );
  try {
    await withFallback({ kind: "openai", base_url: cut.url }, async (s, claude) => {
      const { apiKey } = await s.newApp();
      const res = await s.chat(apiKey, {
        model: "multi/m",
        messages: userMessage("x"),
        stream: true,
      });
      assert.equal(res.headers.get("tollbooth-provider"), "first");
      const last = JSON.parse((await readSse(res)).at(-1)!);
      assert.equal(last.error.code, "stream_interrupted");
      assert.equal(claude.calls(), 0);
    });
  } finally {
    await cut.close();
  }
});

Deno.test("a fallback naming an unknown provider is a catalog error; the single-provider form stays valid", () => {
  const file = upstreamCatalog({ up: { kind: "openai", base_url: "http://127.0.0.1:9" } });
  assert.ok(buildCatalog(file, {}).get("up/m"));
  assert.deepEqual(buildCatalog(file, {}).get("up/m")!.fallbacks, []);
  file.models[0].fallbacks = [{ provider: "nowhere", upstream_model: "x" }];
  assert.throws(
    () => buildCatalog(file, {}),
    (e) => e instanceof CatalogError && /models\.0\.fallbacks\.0\.provider/.test(e.message),
  );
});
