/**
 * A hold is an upper bound of what the provider bills: a request on an app that holds exactly its
 * hold is charged in full, nothing left `uncharged` for the operator.
 */
import assert from "node:assert/strict";
import { formatUsd } from "@/lib/core/mod.ts";
import { countPromptTokens, countSimulatedTokens, HOLD_MERGES } from "@/lib/gateway/tokens.ts";
import { pngBase64 } from "./fakes/common.ts";
import { harmonyPromptTokens } from "./harmony_reference.ts";
import { startOpenAiUpstream, tokenCount } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  chatHoldingExactly,
  spendDownTo,
  startService,
  testCatalogFile,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";

// A run of letters on which counting in 128-character pieces came out two tokens short per cut.
const BLOCK =
  "rxgpurqwthzdkjdntpzomdhhdfqvhnkbuqykpifasepuktobcteefvtgfuecolddxaheyghcrcrlvdmlrzoukuttgedcrwbxctricbvzvgkzrvzyptnuwxoyjfrmvvvv";

/**
 * The hold of `request`, learned on an app with room to spare; then the same request from an app
 * holding exactly that hold, charged in full (nothing `uncharged`), as its header says; the
 * audit clean after.
 */
async function assertHoldCoversBill(s: TestService, request: unknown) {
  const rich = await s.newApp("rich");
  const first = await s.chat(rich.apiKey, request);
  assert.equal(first.status, 200);
  await first.body?.cancel();
  const [learned] = await usageRecords(s.kv, rich.appId);
  const { res, record } = await chatHoldingExactly(s, request, learned.reserved);
  assert.equal(res.status, 200);
  assert.equal(
    record.uncharged,
    0,
    `held ${record.reserved}, billed ${record.cost + record.uncharged}`,
  );
  assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
  await assertAuditClean(s.kv);
  return { learned, record };
}

Deno.test("a long run of letters is held at no less than OpenAI bills: an app holding exactly the hold is charged in full", async () => {
  const upstream = startOpenAiUpstream();
  upstream.setDefault({ content: "Hi." });
  const s = await startService({
    openaiBaseUrl: upstream.baseUrl,
    env: { FAKE_OPENAI_KEY: upstream.apiKey },
  });
  try {
    const request = {
      model: "fake/gpt",
      messages: userMessage(BLOCK.repeat(128)),
      max_tokens: 16,
    };
    const { learned, record } = await assertHoldCoversBill(s, request);
    // The strict fake bills the exact o200k count of the text, with OpenAI's chat framing.
    const billed = upstream.chats.at(-2)!.promptTokens;
    assert.ok(learned.promptTokens === billed && learned.uncharged === 0);
    assert.equal(record.reserved, learned.reserved);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("a prompt of more long pre-tokens than the merge ration is held at more than OpenAI bills and charged exactly the bill", async () => {
  const upstream = startOpenAiUpstream({ models: { "gpt-test": { contextWindow: 1_000_000 } } });
  upstream.setDefault({ content: "Hi." });
  const catalogFile = testCatalogFile(upstream.baseUrl);
  catalogFile.models = catalogFile.models.map((m) =>
    m.id === "fake/gpt" ? { ...m, context_tokens: 1_000_000 } : m
  );
  const s = await startService({ catalogFile, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  try {
    // 112 runs of 8,192 letters: far more than the ration's 500,000 characters, and than what it
    // refills while they are counted.
    const text = Array.from({ length: 112 }, () => "x".repeat(8_192)).join(" ");
    const app = await s.newApp("long");
    const before = (await s.wallet(app.appId)).available;
    const started = performance.now();
    const res = await s.chat(app.apiKey, {
      model: "fake/gpt",
      messages: userMessage(text),
      max_tokens: 16,
    });
    const seconds = (performance.now() - started) / 1000;
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const [record] = await usageRecords(s.kv, app.appId);
    const billed = upstream.chats.at(-1)!.promptTokens;
    assert.equal(record.promptTokens, billed);
    assert.equal(record.uncharged, 0);
    // The ration merges at most its burst and what it refilled while the request ran (a machine
    // slow enough refills it as fast as it merges): every other run is held at its 8,192 bytes,
    // not its 1,024 tokens, at 2 µUSD a token.
    const merged = Math.floor((HOLD_MERGES.burst + HOLD_MERGES.perSecond * seconds) / 8_192);
    const beyond = Math.max(0, 112 - merged);
    console.log(`${seconds.toFixed(2)} s: at least ${beyond} runs beyond the ration`);
    assert.ok(
      record.reserved - record.cost >= beyond * (8_192 - 1_024) * 2,
      `held ${record.reserved}, charged ${record.cost}, ${beyond} runs beyond the ration`,
    );
    assert.ok(record.reserved >= record.cost);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
    assert.equal(before - (await s.wallet(app.appId)).available, record.cost);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("the built-in simulator bills a long pre-token by pieces of 256 bytes, below o200k's count and its hold, and counts a request as it bills it", async () => {
  const catalogFile = testCatalogFile();
  catalogFile.models = catalogFile.models.map((m) =>
    m.id === "tollbooth/echo" ? { ...m, context_tokens: 1_000_000 } : m
  );
  const s = await startService({ catalogFile });
  try {
    const text = Array.from({ length: 112 }, () => "x".repeat(8_192)).join(" ");
    const request = { model: "tollbooth/echo", messages: userMessage(text), max_tokens: 4 };
    const app = await s.newApp("long");
    const res = await s.chat(app.apiKey, request);
    assert.equal(res.status, 200);
    const body = await res.json();
    // OpenAI's framing, and each run of 8,192 letters in 32 pieces (33 with the space before it).
    const billed = 3 + 4 + countSimulatedTokens(text);
    assert.equal(billed, 3 + 4 + 32 + 111 * 33);
    assert.equal(body.usage.prompt_tokens, billed);
    assert.ok(billed < countPromptTokens([{ content: text }]), "fewer than o200k's count");
    assert.equal(body.choices[0].message.content, "x".repeat(4 * 256), "four pieces, cut");
    const [record] = await usageRecords(s.kv, app.appId);
    assert.equal(record.uncharged, 0, `held ${record.reserved}, billed ${record.cost}`);
    assert.ok(record.reserved > record.cost);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));

    // An app whose balance the bound would exceed is served on the simulator's own count of the
    // request, and charged that count.
    const poor = await s.newApp("poor");
    await spendDownTo(s.kv, poor.appId, Math.ceil(record.cost * 1.2));
    const counted = await s.chat(poor.apiKey, request);
    assert.equal(counted.status, 200);
    assert.equal((await counted.json()).usage.prompt_tokens, billed);
    const charged = (await usageRecords(s.kv, poor.appId)).find((u) =>
      u.requestId === counted.headers.get("tollbooth-request-id")
    )!;
    assert.equal(charged.cost, record.cost);
    assert.equal(charged.uncharged, 0);
    assert.ok(charged.reserved < record.reserved, "held at the count, not the bound");
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("an image on an OpenAI nano model without image figures in the catalog is held at its patches' most: an app holding exactly the hold is charged in full", async () => {
  // GPT-4.1 nano bills 32-px patches at 2.46 tokens each, up to 3,779 an image at any detail.
  const upstream = startOpenAiUpstream({
    models: { "gpt-4.1-nano": { imageBaseTokens: 3779, imageTileTokens: 0 } },
  });
  upstream.setDefault({ content: "A chart." });
  const file = testCatalogFile(upstream.baseUrl);
  file.models.push({
    id: "fake/nano",
    provider: "fake",
    upstream_model: "gpt-4.1-nano",
    input_usd_per_mtok: "0.10",
    output_usd_per_mtok: "0.40",
    context_tokens: 32768,
    max_output_tokens: 8192,
  });
  const s = await startService({ catalogFile: file, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  try {
    const request = {
      model: "fake/nano",
      max_tokens: 16,
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "What does it show?" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${pngBase64(512, 512)}` } },
        ],
      }],
    };
    const { learned } = await assertHoldCoversBill(s, request);
    assert.ok(learned.promptTokens > 3779, `billed ${learned.promptTokens}`);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("an image on an OpenAI model that reads it at its own size, with no rule known for its name, is held at its patches: an app holding exactly the hold is charged in full", async () => {
  // GPT-5.6 reads an image at its own size at `auto`, up to 30,000 32-px patches.
  const upstream = startOpenAiUpstream({
    models: { "gpt-5.6-terra": { imagePatches: { multiplier: 1.2, most: 30_000 } } },
  });
  upstream.setDefault({ content: "Grey." });
  const file = testCatalogFile(upstream.baseUrl);
  file.models.push({
    id: "fake/terra",
    provider: "fake",
    upstream_model: "gpt-5.6-terra",
    input_usd_per_mtok: "2.50",
    output_usd_per_mtok: "15.00",
    context_tokens: 1_050_000,
    max_output_tokens: 128_000,
  });
  const s = await startService({ catalogFile: file, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  try {
    const request = {
      model: "fake/terra",
      max_tokens: 16,
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "What colour is it?" },
          {
            type: "image_url",
            image_url: { url: `data:image/png;base64,${pngBase64(5400, 5400)}` },
          },
        ],
      }],
    };
    const { learned } = await assertHoldCoversBill(s, request);
    assert.ok(learned.promptTokens > 28_561, `billed ${learned.promptTokens}`);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("gpt-oss on a compatible server is held over what harmony renders: a description of blank lines, each a comment, is charged in full from an app holding exactly the hold", async () => {
  const request = {
    model: "fake/gpt-oss-120b",
    max_tokens: 16,
    messages: userMessage("hi"),
    tools: [{ type: "function", function: { name: "f", description: "\n".repeat(30_000) } }],
  };
  const billed = harmonyPromptTokens(request);
  // The fake tokenizes 30,000 blank lines before it answers: seconds on a busy machine.
  const { s, upstream } = await gptOssBilling(billed, 20_000);
  try {
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, billed);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("gpt-oss on a compatible server is held over what harmony renders: a property of 3,000 empty variants, a line each, is charged in full from an app holding exactly the hold", async () => {
  const request = variantsToolRequest("fake/gpt-oss-120b");
  const billed = harmonyPromptTokens(request);
  const { s, upstream } = await gptOssBilling(billed);
  try {
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, billed);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("an OpenAI model is held over a tool of 3,000 empty variants as harmony, the format OpenAI published as its models', writes them, a line each: charged in full from an app holding exactly the hold", async () => {
  const request = variantsToolRequest("fake/gpt");
  const billed = harmonyPromptTokens(request);
  const upstream = startOpenAiUpstream();
  upstream.setDefault({ content: "ok", promptTokens: billed, completionTokens: 16 });
  const s = await startService({
    catalogFile: testCatalogFile(upstream.baseUrl),
    env: { FAKE_OPENAI_KEY: upstream.apiKey },
  });
  try {
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, billed);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("gpt-oss on a server that joins a message's text parts with nothing between is held over the joined text: a thousand parts of one long word are charged in full from an app holding exactly the hold", async () => {
  const PARTS = 1000;
  const request = {
    model: "fake/gpt-oss-120b",
    max_tokens: 16,
    messages: [{
      role: "user",
      content: Array.from({ length: PARTS }, () => ({ type: "text", text: BLOCK })),
    }],
  };
  // vLLM's harmony path flattens a message's text parts with "".join.
  const billed = harmonyPromptTokens({
    messages: [{ role: "user", content: BLOCK.repeat(PARTS) }],
  });
  const upstream = startOpenAiUpstream({ models: { "gpt-oss-120b": { contextWindow: 131_072 } } });
  upstream.setDefault({ content: "ok", promptTokens: billed, completionTokens: 16 });
  const file = testCatalogFile(upstream.baseUrl);
  const fake = file.providers.fake;
  if (fake.kind !== "simulator") fake.timeout_ms = 20_000;
  file.models.push({
    id: "fake/gpt-oss-120b",
    provider: "fake",
    upstream_model: "openai/gpt-oss-120b",
    input_usd_per_mtok: "0.15",
    output_usd_per_mtok: "0.60",
    context_tokens: 131_072,
    max_output_tokens: 32_768,
  });
  const s = await startService({ catalogFile: file, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  try {
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, billed);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("an open embedding model is held over the special tokens its server adds to each input: 2,048 one-byte inputs are charged in full from an app holding exactly the hold", async () => {
  // vLLM adds the tokenizer's special tokens to each text by default ([CLS] and [SEP]). Short
  // vectors: 2,048 of 1,536 took the fake past the test provider's 2 s timeout on a busy machine.
  const upstream = startOpenAiUpstream({
    models: {
      "BAAI/bge-m3": { countTokens: (text) => tokenCount(text) + 2, embeddingLength: 8 },
    },
  });
  const file = testCatalogFile(upstream.baseUrl);
  file.models.push({
    id: "fake/bge-m3",
    type: "embedding",
    provider: "fake",
    upstream_model: "BAAI/bge-m3",
    input_usd_per_mtok: "0.10",
    context_tokens: 8192,
    tokenizer: "utf8_bytes",
  });
  const s = await startService({ catalogFile: file, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  try {
    const body = { model: "fake/bge-m3", input: Array.from({ length: 2048 }, () => "a") };
    const rich = await s.newApp("rich");
    const first = await s.post(rich.apiKey, "/embeddings", body);
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const [learned] = await usageRecords(s.kv, rich.appId);
    assert.equal(learned.promptTokens, 3 * 2048);
    const exact = await s.newApp("exact");
    await spendDownTo(s.kv, exact.appId, learned.reserved);
    const res = await s.post(exact.apiKey, "/embeddings", body);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const record = (await usageRecords(s.kv, exact.appId)).find((u) =>
      u.requestId === res.headers.get("tollbooth-request-id")
    )!;
    assert.equal(record.uncharged, 0, `held ${record.reserved}, billed ${record.cost}`);
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});

/**
 * Llama 3.1's chat template (vLLM renders it) writes each tool as `tojson(indent=4)`: one member a
 * line, four spaces a level. These tools, arrays 25 deep around 300 `[[]]`, render to 112 kB of
 * prompt, in which Llama 3's tokenizer (llama3-tokenizer-js 1.2.0) counts 2,955 tokens, the
 * template's own text included: what the fake reports, as vLLM would.
 */
const DEEP_TOOL_PROMPT_TOKENS = 2_955;

function deeplyIndentedTool() {
  let x: unknown = Array.from({ length: 300 }, () => [[]]);
  for (let i = 0; i < 25; i++) x = [x];
  return {
    type: "function",
    function: { name: "f", parameters: { type: "object", properties: {}, x } },
  };
}

/** A tool whose one property has 3,000 empty `oneOf` variants, each a line of harmony's. */
function variantsToolRequest(model: string) {
  const variants = Array.from({ length: 3_000 }, () => ({}));
  return {
    model,
    max_tokens: 16,
    messages: userMessage("hi"),
    tools: [{
      type: "function",
      function: {
        name: "f",
        parameters: { type: "object", properties: { x: { oneOf: variants } } },
      },
    }],
  };
}

/** A service with a gpt-oss route on a compatible server that bills every prompt `billed`. */
async function gptOssBilling(billed: number, timeoutMs?: number) {
  const upstream = startOpenAiUpstream({ models: { "gpt-oss-120b": { contextWindow: 131_072 } } });
  upstream.setDefault({ content: "ok", promptTokens: billed, completionTokens: 16 });
  const file = testCatalogFile(upstream.baseUrl);
  const fake = file.providers.fake;
  if (timeoutMs !== undefined && fake.kind !== "simulator") fake.timeout_ms = timeoutMs;
  file.models.push({
    id: "fake/gpt-oss-120b",
    provider: "fake",
    upstream_model: "openai/gpt-oss-120b",
    input_usd_per_mtok: "0.15",
    output_usd_per_mtok: "0.60",
    context_tokens: 131_072,
    max_output_tokens: 32_768,
  });
  const s = await startService({ catalogFile: file, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  return { s, upstream };
}

/**
 * A service with a Llama 3.1 route held at its UTF-8 bytes (`"tokenizer": "utf8_bytes"`), whose
 * upstream bills every prompt `promptTokens`: what Llama 3's tokenizer counts for the test's own.
 */
async function llamaBilling(promptTokens: number) {
  const upstream = startOpenAiUpstream({ models: { "llama-3.1-8b-instruct": {} } });
  upstream.setDefault({ content: "Hi.", promptTokens });
  const catalogFile = testCatalogFile(upstream.baseUrl);
  catalogFile.models.push({
    id: "fake/llama",
    provider: "fake",
    upstream_model: "llama-3.1-8b-instruct",
    input_usd_per_mtok: "2.00",
    output_usd_per_mtok: "8.00",
    context_tokens: 131_072,
    max_output_tokens: 8192,
    tokenizer: "utf8_bytes",
  });
  const s = await startService({ catalogFile, env: { FAKE_OPENAI_KEY: upstream.apiKey } });
  return { s, upstream };
}

/**
 * Llama 3.1's chat template writes a tool's result through `tojson` (in Jinja a string is iterable,
 * so it takes the mapping's branch): 20,000 control characters, as `\u0001` escapes, are 60,060 of
 * Llama 3's tokens (llama3-tokenizer-js 1.2.0) in the prompt it renders for this conversation.
 */
const ESCAPED_RESULT_PROMPT_TOKENS = 60_060;

Deno.test("an open model's tool result is held at no less than Llama 3.1's template bills for it, written as JSON: an app holding exactly the hold is charged in full", async () => {
  const { s, upstream } = await llamaBilling(ESCAPED_RESULT_PROMPT_TOKENS);
  try {
    const request = {
      model: "fake/llama",
      max_tokens: 16,
      messages: [
        { role: "user", content: "hi" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c1", content: "\u0001".repeat(20_000) },
      ],
    };
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, ESCAPED_RESULT_PROMPT_TOKENS);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("an open model's tools are held at no less than Llama 3.1's template bills for them, indented four spaces a level: an app holding exactly the hold is charged in full", async () => {
  const { s, upstream } = await llamaBilling(DEEP_TOOL_PROMPT_TOKENS);
  try {
    const request = {
      model: "fake/llama",
      messages: userMessage("hi"),
      tools: [deeplyIndentedTool()],
      max_tokens: 16,
    };
    const { learned } = await assertHoldCoversBill(s, request);
    assert.equal(learned.promptTokens, DEEP_TOOL_PROMPT_TOKENS);
  } finally {
    await s.close();
    await upstream.close();
  }
});
