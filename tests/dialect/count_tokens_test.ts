/** The Anthropic adapter's exact input count (count_tokens), ready for holds near the balance. */
import assert from "node:assert/strict";
import { formatUsd } from "@/lib/core/mod.ts";
import { startAnthropicUpstream } from "../fakes/anthropic_upstream.ts";
import { createAnthropicProvider } from "@/lib/gateway/providers/anthropic/anthropic.ts";
import { testModel, upstreamRequest } from "@/lib/gateway/providers/test_support.ts";
import { anthropicInputBound, inputBound } from "@/lib/gateway/input_bound.ts";
import { parseChatRequest } from "@/lib/gateway/chat_request.ts";
import { exactInputReservation } from "@/lib/gateway/gateway.ts";
import { reservationCost } from "@/lib/catalog/mod.ts";
import { serveLoopback, spendDownTo, startService, usageRecords } from "../helpers.ts";
import { getSpendCounter, setSpendCaps } from "@/lib/billing/mod.ts";
import { createOpenAiResponsesProvider } from "@/lib/gateway/providers/openai_responses/openai_responses.ts";
import { ProviderError } from "@/lib/gateway/providers/types.ts";
import { CLAUDE_MODEL, type Dialect, expectedCharge, withDialect } from "./harness.ts";

Deno.test("countInputTokens asks count_tokens about the same Messages request, and the bound is above it", async () => {
  const claude = startAnthropicUpstream();
  try {
    const provider = createAnthropicProvider({
      baseUrl: claude.url,
      apiKey: claude.apiKey,
      apiKeyEnv: "K",
      timeoutMs: 5_000,
    });
    const request = upstreamRequest(testModel("anthropic", "claude-sonnet-4-5"), {
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "user", content: "Wie spät ist es in Zürich? ગુજરાતી" },
      ],
      tools: [{
        type: "function",
        function: {
          name: "clock",
          parameters: { type: "object", properties: { tz: { type: "string" } } },
        },
      }],
      max_tokens: 100,
      stop: "END",
      // Sampling and the end user are the messages call's alone: count_tokens refuses them.
      temperature: 0.2,
      top_k: 40,
      user: "u-1",
    }, 100);
    const exact = await provider.countInputTokens!(request);
    const [sent] = claude.counts();
    assert.equal(exact, claude.inputTokens(sent.body));
    assert.equal(sent.body.system, "Be brief.");
    assert.deepEqual(Object.keys(sent.body).sort(), [
      "messages",
      "model",
      "system",
      "tool_choice",
      "tools",
    ]);
    assert.ok(
      anthropicInputBound(request.request, 1568, false) >= exact,
      "the bound is an upper bound",
    );
  } finally {
    await claude.close();
  }
});

Deno.test("a count past what any model can bill is a malformed answer, not a hold: Anthropic's count_tokens and OpenAI's input_tokens", async () => {
  for (const count of [1e15, 2 ** 53 - 1, 100_000_001]) {
    const upstream = serveLoopback(() => Response.json({ input_tokens: count }));
    try {
      const options = { baseUrl: upstream.url, apiKey: "k", apiKeyEnv: "K", timeoutMs: 5_000 };
      const providers = [
        [createAnthropicProvider(options), "claude-sonnet-4-5", "anthropic"],
        [createOpenAiResponsesProvider(options), "gpt-5", "openai_responses"],
      ] as const;
      for (const [provider, name, kind] of providers) {
        const request = upstreamRequest(testModel(kind, name), {
          messages: [{ role: "user", content: "hi" }],
        });
        await assert.rejects(
          () => provider.countInputTokens!(request),
          (e) => e instanceof ProviderError && e.kind === "malformed_response",
          `${kind} answering ${count}`,
        );
      }
    } finally {
      await upstream.close();
    }
  }
});

/** English prose: held at several times its real count by the per-script bound. */
const PROSE = Array.from(
  { length: 400 },
  (_, i) =>
    `Paragraph ${i}: the harbour master walked along the quay at dawn and counted the boats that had come in overnight.`,
).join("\n");

/** The bound-based and the exact-count reservation of a Claude request, and the exact count. */
async function reservations(d: Dialect, body: Record<string, unknown>) {
  const model = d.s.catalog.get(CLAUDE_MODEL)!;
  const request = parseChatRequest({ model: CLAUDE_MODEL, ...body });
  const provider = createAnthropicProvider({
    baseUrl: d.claude.url,
    apiKey: d.claude.apiKey,
    apiKeyEnv: "K",
    timeoutMs: 5_000,
  });
  const exact = await provider.countInputTokens!({
    model,
    request,
    maxTokens: request.maxTokens!,
    signal: new AbortController().signal,
    requestId: "req_reference",
  });
  const cap = request.maxTokens!;
  return {
    exact,
    bound: reservationCost(model, inputBound({ kind: "anthropic" }, request, model, "o200k"), cap),
    counted: reservationCost(model, exactInputReservation(exact), cap),
  };
}

Deno.test("a Claude request whose bound exceeds the balance but whose exact count fits is served and charged exactly", () =>
  withDialect(async (d) => {
    const body = { messages: [{ role: "user", content: PROSE }], max_tokens: 500 };
    const { exact, bound, counted } = await reservations(d, body);
    assert.ok(bound > 2 * counted, `the bound (${bound}) is pessimistic for English prose`);
    const { appId, apiKey } = await d.s.newApp();
    await spendDownTo(d.s.kv, appId, Math.floor((bound + counted) / 2));
    const countsBefore = d.claude.counts().length;
    const res = await d.s.chat(apiKey, { model: CLAUDE_MODEL, ...body });
    assert.equal(res.status, 200);
    await res.json();
    assert.equal(d.claude.counts().length, countsBefore + 1, "count_tokens decided");
    const [, record] = await usageRecords(d.s.kv, appId);
    assert.equal(record.promptTokens, exact);
    assert.equal(
      record.cost,
      expectedCharge(CLAUDE_MODEL, {
        prompt: exact,
        completion: record.completionTokens,
      }),
    );
    assert.equal(record.uncharged, 0);
    const line = d.s.logs.findLast((l) => l.event === "request");
    assert.equal(line?.inputCount, "counted");
  }));

Deno.test("a Claude request whose bound exceeds its key's spend cap but whose exact count fits is served and charged exactly", () =>
  withDialect(async (d) => {
    const body = { messages: [{ role: "user", content: PROSE }], max_tokens: 500 };
    const { exact, bound, counted } = await reservations(d, body);
    assert.ok(bound > 2 * counted, `the bound (${bound}) is pessimistic for English prose`);
    const { appId, apiKey, keyId } = await d.s.newApp();
    const cap = Math.floor((bound + counted) / 2);
    await setSpendCaps(d.s.kv, appId, { keyId }, { total: cap });
    const before = await d.s.wallet(appId);
    const countsBefore = d.claude.counts().length;
    const res = await d.s.chat(apiKey, { model: CLAUDE_MODEL, ...body });
    assert.equal(res.status, 200);
    await res.json();
    assert.equal(d.claude.counts().length, countsBefore + 1, "count_tokens decided");
    const [record] = await usageRecords(d.s.kv, appId);
    assert.equal(record.promptTokens, exact);
    assert.equal(record.uncharged, 0);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
    // What left the wallet is what the key's counter spent, within its cap.
    const after = await d.s.wallet(appId);
    assert.equal(before.available - after.available, record.cost);
    assert.equal(after.spent - before.spent, record.cost);
    const counter = await getSpendCounter(d.s.kv, appId, "key", keyId);
    assert.deepEqual([counter.total, counter.held], [record.cost, 0]);
    assert.ok(record.cost <= cap);
  }));

Deno.test("a count above the bound raises the hold: a request the bound underestimated is a 402, never served uncharged", () =>
  withDialect(async (d) => {
    // A tool-use system prompt far above the bound's allowance, billed and counted alike.
    const body = {
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: [{ type: "function", function: { name: "weather" } }],
      max_tokens: 50,
    };
    const { bound, counted } = await reservations(d, body);
    assert.ok(counted > bound, `counted ${counted}, bound ${bound}`);
    const { appId, apiKey } = await d.s.newApp();
    await spendDownTo(d.s.kv, appId, bound + 2_000);
    // A first request lets the process see the balance, against which the bound is large.
    const first = await d.s.chat(apiKey, {
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 5,
    });
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const before = (await d.s.wallet(appId)).available;
    assert.ok(before >= bound && before < counted, `${before} between ${bound} and ${counted}`);
    const messagesBefore = d.claude.messages().length;
    const res = await d.s.chat(apiKey, { model: CLAUDE_MODEL, ...body });
    assert.equal(res.status, 402);
    await res.body?.cancel();
    assert.equal(d.claude.messages().length, messagesBefore, "no messages call");
    assert.equal((await d.s.wallet(appId)).available, before, "nothing taken");
    assert.ok(d.s.logs.some((l) => l.event === "input_bound_below_count"));
  }, {
    claude: {
      models: { "claude-sonnet-4-5": { toolSystemPromptTokens: { auto: 5_000, any: 5_000 } } },
    },
  }));

Deno.test("a Claude request that truly does not fit is a 402 after count_tokens, without the messages call", () =>
  withDialect(async (d) => {
    const body = { messages: [{ role: "user", content: PROSE }], max_tokens: 500 };
    const { counted } = await reservations(d, body);
    const { appId, apiKey } = await d.s.newApp();
    await spendDownTo(d.s.kv, appId, counted - 1);
    const messagesBefore = d.claude.messages().length;
    const countsBefore = d.claude.counts().length;
    const res = await d.s.chat(apiKey, { model: CLAUDE_MODEL, ...body });
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "insufficient_credits");
    assert.equal(d.claude.counts().length, countsBefore + 1);
    assert.equal(d.claude.messages().length, messagesBefore, "no messages call");
    assert.equal((await d.s.wallet(appId)).available, counted - 1, "nothing taken");
  }));

Deno.test("a request whose bound fits the balance easily is not counted: count_tokens is rate-limited", () =>
  withDialect(async (d) => {
    const res = await d.s.chat(d.apiKey, {
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 50,
    });
    assert.equal(res.status, 200);
    await res.json();
    assert.equal(d.claude.counts().length, 0);
  }));

Deno.test("after an exact count, images given by URL are still held at their most (up to the context): the call fetches them again", async () => {
  const urls = Array.from({ length: 100 }, (_, i) => `https://images.example/${i}.png`);
  // What count_tokens fetches: 1 × 1 pixel images. The messages call may fetch others.
  const claude = startAnthropicUpstream({
    imageSizes: Object.fromEntries(urls.map((url) => [url, { width: 1, height: 1 }])),
  });
  const s = await startService({
    catalogFile: {
      providers: {
        ant: { kind: "anthropic", base_url: claude.url, api_key_env: "ANT_KEY" },
      },
      models: [{
        id: "ant/m",
        provider: "ant",
        upstream_model: "claude-sonnet-4-5",
        input_usd_per_mtok: "3.00",
        output_usd_per_mtok: "15.00",
        cache_write_usd_per_mtok: "3.75",
        context_tokens: 200_000,
        max_output_tokens: 8192,
      }],
    },
    env: { ANT_KEY: claude.apiKey },
  });
  try {
    const model = s.catalog.get("ant/m")!;
    const body = {
      model: "ant/m",
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "What do these show?" },
          ...urls.map((url) => ({ type: "image_url", image_url: { url } })),
        ],
      }],
      max_tokens: 16,
    };
    const bound = inputBound({ kind: "anthropic" }, parseChatRequest(body), model, "o200k");
    assert.ok(bound + 16 > model.contextTokens, "the bound alone is over the context");
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, body);
    assert.equal(res.status, 200);
    await res.json();
    assert.equal(claude.counts().length, 1, "count_tokens was asked");
    const line = s.logs.findLast((l) => l.event === "request")!;
    assert.equal(line.reserved, reservationCost(model, model.contextTokens - 16, 16));
  } finally {
    await s.close();
    await claude.close();
  }
});
