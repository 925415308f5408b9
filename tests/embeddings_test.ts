import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { embedMany } from "ai";
import { OpenAIEmbeddings } from "@langchain/openai";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { countTextTokens } from "@/lib/gateway/tokens.ts";
import { fromBase64 } from "@/lib/gateway/embedding_vectors.ts";
import { startOpenAiUpstream, tokenCount } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  serveLoopback,
  spendDownTo,
  startService,
  testCatalogFile,
  type TestService,
  usageRecords,
} from "./helpers.ts";

const UPSTREAM_KEY = "sk-fake-upstream";
const START = 5_000_000;

/** Micro-USD of `tokens` at a price in USD per million tokens given in millionths (0.13 = 130_000). */
function expectedCost(tokens: number, microsPerMillionTokens: number): number {
  return Math.ceil(tokens * microsPerMillionTokens / 1_000_000);
}
const SIM_PRICE = 20_000; // tollbooth/embed: 0.02 USD per million tokens
const FAKE_PRICE = 130_000; // fake/embed: 0.13

interface Ctx {
  s: TestService;
  appId: string;
  apiKey: string;
  upstream: ReturnType<typeof startOpenAiUpstream>;
}

async function withFake(fn: (ctx: Ctx) => Promise<void>, env: Record<string, string> = {}) {
  const upstream = startOpenAiUpstream({ apiKey: UPSTREAM_KEY });
  const s = await startService({ openaiBaseUrl: upstream.baseUrl, env });
  try {
    const { appId, apiKey } = await s.newApp();
    await fn({ s, appId, apiKey, upstream });
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
}

/** A loopback upstream answering every request with `answer`. */
async function withUpstream(
  answer: () => Response,
  fn: (ctx: Omit<Ctx, "upstream">) => Promise<void>,
) {
  const upstream = serveLoopback(answer);
  const s = await startService({ openaiBaseUrl: upstream.url });
  try {
    const { appId, apiKey } = await s.newApp();
    await fn({ s, appId, apiKey });
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
}

/** The body of the upstream's last request. */
const lastBody = (upstream: Ctx["upstream"]) =>
  upstream.received.at(-1)!.body as Record<string, unknown>;

const embed = (s: TestService, apiKey: string | null, body: unknown) =>
  s.post(apiKey, "/embeddings", body);

Deno.test("embeddings from an openai-kind provider: forwarded to {base_url}/embeddings, charged the upstream's prompt_tokens at the input price", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const input = ["The food was delicious and the waiter was kind.", "Stock markets fell."];
    const res = await embed(s, apiKey, { model: "fake/embed", input, dimensions: 64 });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.object, "list");
    assert.equal(body.model, "fake/embed");
    assert.deepEqual(body.data.map((d: { index: number }) => d.index), [0, 1]);
    assert.equal(body.data[0].embedding.length, 64);

    const sent = upstream.received.at(-1)!;
    assert.equal(sent.path, "/v1/embeddings");
    assert.equal(sent.headers.authorization, `Bearer ${UPSTREAM_KEY}`);
    assert.deepEqual(sent.body, {
      model: "text-embedding-3-small",
      input,
      encoding_format: "float",
      dimensions: 64,
    });

    const billed = body.usage.prompt_tokens;
    assert.equal(billed, countTextTokens(input[0]) + countTextTokens(input[1]));
    assert.equal(body.usage.total_tokens, billed);
    const cost = expectedCost(billed, FAKE_PRICE);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(cost));
    assert.equal(res.headers.get("tollbooth-balance"), formatUsd(START - cost));
    assert.equal(res.headers.get("tollbooth-provider"), "fake");
    assert.match(res.headers.get("tollbooth-request-id")!, /^req_/);
    assert.equal(res.headers.get("tollbooth-version"), "2026-07-29");
    assert.equal(res.headers.get("x-ratelimit-limit-requests"), "600");
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, START - cost);
    assert.equal(wallet.reserved, 0);

    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.model, "fake/embed");
    assert.equal(record.provider, "fake");
    assert.equal(record.promptTokens, billed);
    assert.equal(record.completionTokens, 0);
    assert.equal(record.cost, cost);
    assert.equal(record.countedLocally, false);
    assert.equal(record.streamed, false);
  }));

Deno.test("the charge follows the upstream's usage, not our count, when they differ", () => {
  const vector = { object: "embedding", index: 0, embedding: [0.1, 0.2] };
  return withUpstream(
    () => Response.json({ object: "list", data: [vector], usage: { prompt_tokens: 1000 } }),
    async ({ s, appId, apiKey }) => {
      const res = await embed(s, apiKey, { model: "fake/embed", input: "hi" });
      assert.equal(res.status, 200);
      assert.equal((await res.json()).usage.prompt_tokens, 1000);
      const cost = expectedCost(1000, FAKE_PRICE);
      assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(cost));
      assert.equal((await s.wallet(appId)).available, START - cost);
    },
  );
});

Deno.test("an upstream that reports no usage is charged our count, recorded as counted locally", () => {
  const vector = { object: "embedding", index: 0, embedding: [0.1, 0.2] };
  return withUpstream(
    () => Response.json({ object: "list", data: [vector] }),
    async ({ s, appId, apiKey }) => {
      const input = "Counted by Tollbooth with o200k";
      const res = await embed(s, apiKey, { model: "fake/embed", input });
      assert.equal(res.status, 200);
      const tokens = countTextTokens(input);
      assert.equal((await res.json()).usage.prompt_tokens, tokens);
      assert.equal(
        res.headers.get("tollbooth-request-cost"),
        formatUsd(expectedCost(tokens, FAKE_PRICE)),
      );
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.countedLocally, true);
      assert.equal(record.promptTokens, tokens);
    },
  );
});

Deno.test("token-array inputs are reserved by their length and forwarded as sent", () =>
  withFake(async ({ s, apiKey, upstream }) => {
    const input = [[1, 2, 3], [4, 5]];
    const res = await embed(s, apiKey, { model: "fake/embed", input });
    assert.equal(res.status, 200);
    assert.deepEqual(lastBody(upstream).input, input);
    assert.equal((await res.json()).usage.prompt_tokens, 5);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(expectedCost(5, FAKE_PRICE)));
  }));

Deno.test("the simulator's embedding model answers without any provider key (deno task dev)", async () => {
  const s = await startService();
  try {
    const { appId, apiKey } = await s.newApp();
    const input = ["tollbooth embeds", "tollbooth embeds", "something else entirely"];
    const res = await embed(s, apiKey, { model: "tollbooth/embed", input });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.deepEqual(body.data[0].embedding, body.data[1].embedding);
    assert.notDeepEqual(body.data[0].embedding, body.data[2].embedding);
    const tokens = input.reduce((sum, t) => sum + countTextTokens(t), 0);
    assert.equal(body.usage.prompt_tokens, tokens);
    assert.equal(
      res.headers.get("tollbooth-request-cost"),
      formatUsd(expectedCost(tokens, SIM_PRICE)),
    );
    assert.equal(res.headers.get("tollbooth-provider"), "tollbooth");
    assert.equal((await usageRecords(s.kv, appId)).length, 1);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a chat model on /v1/embeddings, or an embedding model on /v1/chat/completions, is 400 model_not_supported", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const wrong = await embed(s, apiKey, { model: "fake/gpt", input: "x" });
    assert.equal(wrong.status, 400);
    const a = (await wrong.json()).error;
    assert.equal(a.code, "model_not_supported");
    assert.equal(a.param, "model");
    assert.match(a.message, /chat model/);
    const reverse = await s.chat(apiKey, {
      model: "fake/embed",
      messages: [{ role: "user", content: "x" }],
    });
    assert.equal(reverse.status, 400);
    const b = (await reverse.json()).error;
    assert.equal(b.code, "model_not_supported");
    assert.equal(b.param, "model");
    assert.match(b.message, /embedding model/);
    assert.equal(upstream.received.length, 0);
    assert.equal((await s.wallet(appId)).available, START);
    const unknown = await embed(s, apiKey, { model: "fake/none", input: "x" });
    assert.equal((await unknown.json()).error.code, "model_not_found");
  }));

Deno.test("a malformed body is a 400 naming the field, before anything is reserved", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const cases: [unknown, string, string][] = [
      [{ input: "x" }, "missing_parameter", "model"],
      [{ model: "fake/embed" }, "missing_parameter", "input"],
      [{ model: "fake/embed", input: ["a", ""] }, "invalid_parameter", "input[1]"],
      [
        { model: "fake/embed", input: "x", encoding_format: "hex" },
        "invalid_parameter",
        "encoding_format",
      ],
      [{ model: "fake/embed", input: "x", stream: true }, "invalid_parameter", "stream"],
      [{ model: "fake/embed", input: Array(2049).fill("a") }, "invalid_parameter", "input"],
      [{ model: "fake/embed", input: ["text", [1, 2]] }, "invalid_parameter", "input[1]"],
      [
        { model: "fake/embed", input: [[1], Array(8193).fill(1)] },
        "context_length_exceeded",
        "input[1]",
      ],
    ];
    for (const [body, code, param] of cases) {
      const res = await embed(s, apiKey, body);
      assert.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
      const { error } = await res.json();
      assert.equal(error.code, code);
      assert.equal(error.param, param);
      assert.ok(res.headers.get("x-ratelimit-remaining-requests"));
    }
    assert.equal(upstream.received.length, 0);
    assert.equal((await s.wallet(appId)).available, START);
  }));

Deno.test("embeddings need a key: 401 invalid_api_key without rate-limit headers", () =>
  withFake(async ({ s }) => {
    const res = await embed(s, null, { model: "fake/embed", input: "x" });
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.code, "invalid_api_key");
    assert.equal(res.headers.get("x-ratelimit-limit-requests"), null);
    assert.ok(res.headers.get("tollbooth-request-id"));
  }));

Deno.test("a wallet that cannot cover the counted input gets 402 with balance and top_up_url", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    await spendDownTo(s.kv, appId, 1);
    const input = "a few words that cost more than one micro-dollar at this price ".repeat(20);
    const res = await embed(s, apiKey, { model: "fake/embed", input });
    assert.equal(res.status, 402);
    const { error } = await res.json();
    assert.equal(error.code, "insufficient_credits");
    assert.equal(error.balance, "0.000001");
    assert.match(error.top_up_url, /^http:\/\/tollbooth\.test\/top-up\//);
    assert.match(error.message, /input tokens at fake\/embed prices/);
    assert.equal(upstream.received.length, 0);
  }));

Deno.test("embeddings count against the same rate limits: 429 with Retry-After, nothing charged", () =>
  withFake(async ({ s, appId, apiKey }) => {
    const first = await embed(s, apiKey, { model: "fake/embed", input: "one" });
    assert.equal(first.status, 200);
    const spent = START - (await s.wallet(appId)).available;
    const second = await embed(s, apiKey, { model: "fake/embed", input: "two" });
    assert.equal(second.status, 429);
    assert.equal((await second.json()).error.code, "rate_limit_exceeded");
    assert.ok(Number(second.headers.get("retry-after")) >= 1);
    assert.equal(START - (await s.wallet(appId)).available, spent);
  }, { RATE_LIMIT_RPM: "1" }));

Deno.test("an input's limit is checked in cl100k, as OpenAI's embedding models count it; the hold stays the larger o200k count", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    // Runs of newlines: 7,998 tokens in cl100k, 13,330 in o200k, against a limit of 8,192.
    const unit = "\n".repeat(64) + " a";
    const input = unit.repeat(2_666);
    const res = await embed(s, apiKey, { model: "fake/embed", input });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    assert.equal(upstream.received.length, 1);
    const over = await embed(s, apiKey, { model: "fake/embed", input: unit.repeat(2_731) });
    assert.equal(over.status, 400);
    const { error } = await over.json();
    assert.equal(error.code, "context_length_exceeded");
    assert.match(error.message, /has more than 8192 tokens/);
    assert.equal(upstream.received.length, 1, "refused before the upstream");
    // The hold is the o200k count: a wallet that covers 7,998 tokens but not 13,330 is a 402.
    await spendDownTo(s.kv, appId, expectedCost(10_000, FAKE_PRICE));
    const poor = await embed(s, apiKey, { model: "fake/embed", input });
    assert.equal(poor.status, 402);
    await poor.body?.cancel();
  }));

Deno.test("an embedding model of another family with tokenizer utf8_bytes is held at its bytes and its server's special tokens, so a wallet at its hold pays the whole bill", async () => {
  // Mistral's tokenizer splits digits one by one: 6,000 billed where OpenAI's counts give 2,000.
  const digits = "0123456789".repeat(600);
  // 10,000 bytes, more than the model's 8,192 tokens per input, about 2,000 tokens: a limit
  // checked in bytes would refuse what the model takes.
  const prose = "the quick brown fox ".repeat(500);
  const upstream = startOpenAiUpstream({
    apiKey: UPSTREAM_KEY,
    models: {
      "mistral-embed": {
        countTokens: (text) => text.replace(/\D/g, "").length + tokenCount(text.replace(/\d/g, "")),
      },
    },
  });
  const file = testCatalogFile(upstream.baseUrl);
  file.models.push({
    id: "fake/mistral-embed",
    type: "embedding",
    provider: "fake",
    upstream_model: "mistral-embed",
    input_usd_per_mtok: "0.10",
    context_tokens: 8192,
    tokenizer: "utf8_bytes",
  });
  const s = await startService({ catalogFile: file });
  try {
    const { appId, apiKey } = await s.newApp();
    const price = 100_000; // 0.10 USD per million tokens
    // Its bytes, and 4 special tokens an input.
    const held = expectedCost(digits.length + prose.length + 2 * 4, price);
    await spendDownTo(s.kv, appId, held);
    const res = await embed(s, apiKey, { model: "fake/mistral-embed", input: [digits, prose] });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const billed = 6_000 + tokenCount(prose);
    const cost = parseUsd(res.headers.get("tollbooth-request-cost")!);
    assert.equal(cost, expectedCost(billed, price), "every token the provider billed is charged");
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, held - cost);
    assert.equal(wallet.reserved, 0);
    // What is left covers the bill but not the bytes: refused before the upstream.
    const again = await embed(s, apiKey, { model: "fake/mistral-embed", input: [digits, prose] });
    assert.equal(again.status, 402);
    await again.body?.cancel();
    assert.equal(upstream.received.length, 1);
    assert.equal((await s.wallet(appId)).available, held - cost);
    const records = await usageRecords(s.kv, appId);
    assert.deepEqual(records.filter((r) => r.model === "fake/mistral-embed").map((r) => r.cost), [
      cost,
    ]);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("an input larger than a whole minute's tokens is a 400 on input, not a 429", () =>
  withFake(async ({ s, apiKey }) => {
    const res = await embed(s, apiKey, { model: "fake/embed", input: Array(200).fill(7) });
    assert.equal(res.status, 400);
    const { error } = await res.json();
    assert.equal(error.code, "invalid_parameter");
    assert.equal(error.param, "input");
  }, { RATE_LIMIT_TPM: "100" }));

Deno.test("an upstream failure is a 502 and nothing is charged; an upstream refusal a 400", async () => {
  let status = 503;
  await withUpstream(
    () => Response.json({ error: { message: "upstream says no" } }, { status }),
    async ({ s, appId, apiKey }) => {
      const failed = await embed(s, apiKey, { model: "fake/embed", input: "x" });
      assert.equal(failed.status, 502);
      assert.equal((await failed.json()).error.code, "provider_unreachable");
      status = 400;
      const refused = await embed(s, apiKey, { model: "fake/embed", input: "x" });
      assert.equal(refused.status, 400);
      const { error } = await refused.json();
      assert.equal(error.code, "upstream_rejected");
      assert.match(error.message, /upstream says no/);
      const wallet = await s.wallet(appId);
      assert.equal(wallet.available, START);
      assert.equal(wallet.reserved, 0);
      assert.deepEqual(await usageRecords(s.kv, appId), []);
    },
  );
});

Deno.test("an answer with the wrong number of vectors is a 502, nothing charged", () =>
  withUpstream(
    () => Response.json({ data: [{ index: 0, embedding: [1] }], usage: { prompt_tokens: 3 } }),
    async ({ s, appId, apiKey }) => {
      const res = await embed(s, apiKey, { model: "fake/embed", input: ["a", "b"] });
      assert.equal(res.status, 502);
      assert.equal((await s.wallet(appId)).available, START);
    },
  ));

Deno.test("a base64 vector that is not whole float32s is a 502, nothing charged, whichever encoding the client asked for", async () => {
  for (const encoding_format of ["base64", "float"]) {
    await withUpstream(
      () =>
        Response.json({
          data: [{ object: "embedding", index: 0, embedding: btoa("abcde") }],
          usage: { prompt_tokens: 2, total_tokens: 2 },
        }),
      async ({ s, appId, apiKey }) => {
        const res = await embed(s, apiKey, { model: "fake/embed", input: "a", encoding_format });
        assert.equal(res.status, 502, encoding_format);
        await res.body?.cancel();
        assert.equal((await s.wallet(appId)).available, START);
      },
    );
  }
});

Deno.test("the openai npm client embeds as floats and as base64, each charged its usage", () =>
  withFake(async ({ s, appId, apiKey }) => {
    const server = serveLoopback(s.handle);
    try {
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
      const float = await client.embeddings.create({
        model: "fake/embed",
        input: ["first text", "second text"],
        encoding_format: "float",
      }).withResponse();
      assert.equal(float.data.data.length, 2);
      assert.equal(typeof float.data.data[0].embedding[0], "number");
      // Without encoding_format the SDK asks for base64 and decodes it to floats itself.
      const viaBase64 = await client.embeddings.create({
        model: "fake/embed",
        input: ["first text", "second text"],
      }).withResponse();
      assert.deepEqual(
        viaBase64.data.data[0].embedding,
        float.data.data[0].embedding.map(Math.fround),
      );
      const raw = await client.embeddings.create({
        model: "tollbooth/embed",
        input: "raw base64",
        encoding_format: "base64",
      });
      const encoded = raw.data[0].embedding as unknown as string;
      assert.equal(fromBase64(encoded)!.length, 256);
      const costs = [float, viaBase64].map((r) =>
        parseUsd(r.response.headers.get("tollbooth-request-cost")!)
      );
      const tokens = countTextTokens("first text") + countTextTokens("second text");
      assert.deepEqual(costs, [expectedCost(tokens, FAKE_PRICE), expectedCost(tokens, FAKE_PRICE)]);
      const simulated = expectedCost(countTextTokens("raw base64"), SIM_PRICE);
      assert.equal((await s.wallet(appId)).spent, costs[0] + costs[1] + simulated);
    } finally {
      await server.close();
    }
  }));

Deno.test("the Vercel AI SDK's embedMany with @ai-sdk/openai's embedding model", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const server = serveLoopback(s.handle);
    try {
      const openai = createOpenAI({ baseURL: `${server.url}/v1`, apiKey });
      const values = ["sunny day at the beach", "rainy day in the city", "a quiet library"];
      const { embeddings, usage } = await embedMany({
        model: openai.embedding("fake/embed"),
        values,
        maxRetries: 0,
      });
      assert.equal(embeddings.length, 3);
      assert.equal(embeddings[0].length, 1536);
      const tokens = values.reduce((sum, v) => sum + countTextTokens(v), 0);
      assert.equal(usage.tokens, tokens);
      assert.equal(lastBody(upstream).model, "text-embedding-3-small");
      assert.equal((await s.wallet(appId)).spent, expectedCost(tokens, FAKE_PRICE));
    } finally {
      await server.close();
    }
  }));

Deno.test("LangChain's OpenAIEmbeddings embeds documents and a query, each request charged its usage", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const server = serveLoopback(s.handle);
    try {
      const embeddings = new OpenAIEmbeddings({
        model: "fake/embed",
        apiKey,
        configuration: { baseURL: `${server.url}/v1` },
        maxRetries: 0,
      });
      const documents = ["sunny day at the beach", "rainy day in the city"];
      const vectors = await embeddings.embedDocuments(documents);
      assert.equal(vectors.length, 2);
      assert.equal(vectors[0].length, 1536);
      const query = await embeddings.embedQuery("weather by the sea");
      assert.equal(query.length, 1536);
      assert.equal(lastBody(upstream).model, "text-embedding-3-small");
      const tokens = [...documents, "weather by the sea"].map(countTextTokens);
      const charged = (await usageRecords(s.kv, appId)).map((r) => r.cost);
      assert.deepEqual(charged, [
        expectedCost(tokens[0] + tokens[1], FAKE_PRICE),
        expectedCost(tokens[2], FAKE_PRICE),
      ]);
      assert.equal((await s.wallet(appId)).spent, charged[0] + charged[1]);
    } finally {
      await server.close();
    }
  }));

Deno.test("stream: true on embeddings is the same refusal with an Idempotency-Key as without: embeddings have no stream", () =>
  withFake(async ({ s, appId, apiKey, upstream }) => {
    const body = { model: "fake/embed", input: "Hello", stream: true };
    const plain = await s.post(apiKey, "/embeddings", body);
    const keyed = await s.post(apiKey, "/embeddings", body, {
      headers: { "idempotency-key": crypto.randomUUID() },
    });
    const [plainError, keyedError] = [(await plain.json()).error, (await keyed.json()).error];
    assert.equal(plain.status, 400);
    assert.equal(keyed.status, plain.status);
    assert.deepEqual(
      { code: keyedError.code, param: keyedError.param, message: keyedError.message },
      { code: plainError.code, param: plainError.param, message: plainError.message },
    );
    assert.notEqual(keyedError.code, "idempotency_key_with_stream");
    assert.equal(upstream.received.length, 0);
    assert.equal((await s.wallet(appId)).available, START);
  }));
