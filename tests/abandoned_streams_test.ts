/**
 * Abandoned streams are charged what the provider bills (issue #14, points 1 and 2): a client
 * that drops a stream pays, within 1%, the provider's bill. Where the provider bills work the
 * stream does not show (a reasoning model's hidden reasoning, Claude's full thinking behind its
 * summary) the upstream is read to its usage after the client left; elsewhere it is stopped and
 * what was produced is counted (tool-call arguments and reasoning text included).
 */
import assert from "node:assert/strict";
import { loadCorpus } from "./claude_token_reference.ts";
import { anthropicOutputTokens, claudePieces } from "./fakes/anthropic_upstream.ts";
import { startOpenAiUpstream, tokenCount } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  startService,
  until,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import {
  CLAUDE_MODEL,
  type Dialect,
  type DialectModel,
  expectedCharge,
  OPENAI_MODEL,
  REASONING_MODEL,
  withDialect,
} from "./dialect/harness.ts";
import type { UsageRecord } from "@/lib/db.ts";

const ANSWER = "The lighthouse keeper counted the ships that passed, one by one, and wrote " +
  "each name in the log before the lamp was lit again at dusk.";
const GUJARATI = loadCorpus().find((s) => s.id === "gu-prose")!.text;

/** A chunk of the stream as the client parsed it. */
// deno-lint-ignore no-explicit-any
type Chunk = any;

/**
 * Streams a request on a fresh app and drops the connection once `dropAfter` says so; returns the
 * app and the usage record the gateway settled.
 */
async function streamThenDrop(
  d: Dialect,
  body: Record<string, unknown>,
  dropAfter: (chunks: Chunk[]) => boolean,
): Promise<{ appId: string; record: UsageRecord; chunks: Chunk[] }> {
  const { appId, apiKey } = await d.s.newApp();
  const res = await d.s.handle(
    new Request(`${PUBLIC_URL}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, stream: true }),
    }),
  );
  assert.equal(res.status, 200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const chunks: Chunk[] = [];
  let buffer = "";
  reading: while (true) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the stream ended before the client dropped it");
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      chunks.push(JSON.parse(event.slice(6)));
      if (dropAfter(chunks)) break reading;
    }
  }
  await reader.cancel();
  let records: UsageRecord[] = [];
  await until(async () => (records = await usageRecords(d.s.kv, appId)).length === 1, "settle");
  return { appId, record: records[0], chunks };
}

/** Charged against billed, printed for the note, and held to uncharged ≤ 1% of the bill. */
function assertWithinOnePercent(name: string, providerCost: number, record: UsageRecord) {
  const uncharged = Math.max(0, providerCost - record.cost);
  console.log(
    `[abandoned stream] ${name}: provider cost ${usd(providerCost)} USD, charged ${
      usd(record.cost)
    } USD, uncharged ${usd(uncharged)} USD (${(100 * uncharged / providerCost).toFixed(2)}%)`,
  );
  assert.equal(record.uncharged, 0, "the reservation covered the charge");
  assert.ok(
    uncharged <= providerCost / 100,
    `${name}: uncharged ${uncharged} > 1% of ${providerCost}`,
  );
}

function usd(micros: number) {
  return (micros / 1_000_000).toFixed(6);
}

function contentSoFar(chunks: Chunk[]) {
  return chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
}

function charge(model: DialectModel, prompt: number, completion: number) {
  return expectedCharge(model, { prompt, completion });
}

Deno.test("a streamed forced tool call with a large tool description, read to its last argument and dropped, is charged what the provider bills", () =>
  withDialect(async (d) => {
    const description = Array.from(
      { length: 1200 },
      (_, i) => `Rule ${i}: record every finding with its source, its date and its confidence.`,
    ).join(" ");
    const args = JSON.stringify({
      findings: Array.from({ length: 120 }, (_, i) => `finding number ${i} with its evidence`),
    });
    d.openai.script({ toolCalls: [{ name: "record_findings", arguments: args }] });
    const { record } = await streamThenDrop(d, {
      model: OPENAI_MODEL,
      messages: [{ role: "user", content: "Record what you found." }],
      tools: [{
        type: "function",
        function: {
          name: "record_findings",
          description,
          parameters: {
            type: "object",
            properties: { findings: { type: "array", items: { type: "string" } } },
          },
        },
      }],
      tool_choice: { type: "function", function: { name: "record_findings" } },
      max_tokens: 4000,
    }, (chunks) =>
      chunks.flatMap((c) => c.choices[0]?.delta?.tool_calls ?? [])
        .map((t: Chunk) => t.function?.arguments ?? "").join("") === args);
    // OpenAI bills a call as 3 tokens, its name and its arguments (the fake's rule).
    const billed = {
      prompt: d.openai.chats[0].promptTokens,
      completion: 3 + tokenCount("record_findings") + tokenCount(args),
    };
    assert.ok(billed.prompt > 20_000, "the tool description is billed as prompt");
    assert.equal(record.outcome, "client_closed");
    assertWithinOnePercent(
      "forced tool call dropped after its last argument",
      charge(OPENAI_MODEL, billed.prompt, billed.completion),
      record,
    );
  }));

Deno.test("a reasoning model's stream dropped when the answer begins is read to its usage: the hidden reasoning is charged", () =>
  withDialect(async (d) => {
    d.openai.script({ content: ANSWER, reasoningTokens: 20_000 });
    const { record } = await streamThenDrop(d, {
      model: REASONING_MODEL,
      messages: [{ role: "user", content: "Think hard, then tell me about the lighthouse." }],
      max_completion_tokens: 30_000,
    }, (chunks) => contentSoFar(chunks).length > 0);
    const billed = {
      prompt: d.openai.chats[0].promptTokens,
      completion: 20_000 + tokenCount(ANSWER),
    };
    assert.equal(record.countedLocally, false, "the provider's own usage was read");
    assert.equal(record.reasoningTokens, 20_000);
    assert.equal(record.completionTokens, billed.completion);
    assert.equal(record.outcome, "client_closed");
    const cost = charge(REASONING_MODEL, billed.prompt, billed.completion);
    assert.equal(record.cost, cost, "charged exactly the provider's usage");
    assertWithinOnePercent("reasoning stream dropped when the answer begins", cost, record);
  }));

Deno.test("a Claude thinking stream dropped when the answer begins is read to its usage: the full thinking is charged", () =>
  withDialect(async (d) => {
    const blocks = [
      { type: "thinking" as const, thinking: "The user wants a story; keep it short." },
      { type: "text" as const, text: ANSWER },
    ];
    d.claude.script({ content: blocks, thinkingTokens: 7_000 });
    const { record } = await streamThenDrop(d, {
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Think, then tell me about the lighthouse." }],
      reasoning_effort: "medium",
      max_tokens: 16_000,
    }, (chunks) => contentSoFar(chunks).length > 0);
    const billed = {
      prompt: d.claude.inputTokens(d.claude.messages()[0].body),
      completion: anthropicOutputTokens([blocks[1]]) + 7_000,
    };
    assert.equal(record.countedLocally, false, "the provider's own usage was read");
    assert.equal(record.completionTokens, billed.completion);
    const cost = charge(CLAUDE_MODEL, billed.prompt, billed.completion);
    assert.equal(record.cost, cost, "charged exactly the provider's usage");
    assertWithinOnePercent("Claude thinking stream dropped when the answer begins", cost, record);
  }));

Deno.test("a Gujarati Claude stream dropped before the final usage event is charged at least what the provider bills", () =>
  withDialect(async (d) => {
    const text = Array(4).fill(GUJARATI).join(" ");
    // message_start, content_block_start, ping, the text deltas, content_block_stop: then silence,
    // so the final message_delta (the usage) has not come when the client drops the stream.
    d.claude.script({ text, stallAfterEvents: claudePieces(text).length + 4 });
    const { record } = await streamThenDrop(d, {
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: GUJARATI }],
      max_tokens: 8_000,
    }, (chunks) => contentSoFar(chunks) === text);
    const billed = {
      prompt: d.claude.inputTokens(d.claude.messages()[0].body),
      completion: anthropicOutputTokens([{ type: "text", text }]),
    };
    assert.equal(record.outcome, "client_closed");
    assert.equal(record.countedLocally, true, "no final usage came");
    assert.equal(record.promptTokens, billed.prompt, "the prompt count from message_start");
    assert.ok(record.completionTokens >= billed.completion, "the produced text counted safely");
    assertWithinOnePercent(
      "Gujarati Claude stream dropped before its usage",
      charge(CLAUDE_MODEL, billed.prompt, billed.completion),
      record,
    );
  }));

Deno.test("a stream without hidden work is stopped when the client drops it, and what was produced is charged", () =>
  withDialect(async (d) => {
    const long = Array(20).fill(ANSWER).join(" ");
    d.openai.script({ content: long, chunkDelayMs: 5 });
    const { record, chunks } = await streamThenDrop(d, {
      model: OPENAI_MODEL,
      messages: [{ role: "user", content: "Tell me about the lighthouse." }],
    }, (chunks) => chunks.length >= 6);
    assert.equal(record.outcome, "client_closed");
    assert.equal(record.countedLocally, true);
    assert.ok(
      record.completionTokens < tokenCount(long) / 2,
      `the upstream was stopped (${record.completionTokens} of ${tokenCount(long)} tokens)`,
    );
    assert.ok(record.completionTokens >= tokenCount(contentSoFar(chunks)));
  }));

Deno.test("a reasoning model's stream whose client stops reading is read to its usage once it stalls", async () => {
  const openai = startOpenAiUpstream();
  // The stall limit is the upstream timeout: 300 ms here.
  const s = await startService({
    catalogFile: {
      providers: { oai: { kind: "openai", base_url: openai.baseUrl, api_key_env: "OAI_KEY" } },
      models: [{
        id: "oai/o4-mini",
        provider: "oai",
        upstream_model: "o4-mini",
        input_usd_per_mtok: "1.10",
        output_usd_per_mtok: "4.40",
        context_tokens: 200_000,
        max_output_tokens: 32_000,
      }],
    },
    env: { OAI_KEY: openai.apiKey, UPSTREAM_TIMEOUT_MS: "300" },
  });
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    openai.script({ content: ANSWER, reasoningTokens: 5_000 });
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "oai/o4-mini",
      messages: userMessage("Think, then answer."),
      max_completion_tokens: 10_000,
      stream: true,
    });
    assert.equal(res.status, 200);
    reader = res.body!.getReader();
    await reader.read();
    // The client neither reads on nor closes the connection.
    await until(async () => (await s.wallet(appId)).reserved === 0, "the stalled stream to settle");
    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.outcome, "client_closed");
    assert.equal(record.countedLocally, false, "the provider's usage was read");
    assert.equal(record.reasoningTokens, 5_000);
    assert.equal(record.completionTokens, 5_000 + tokenCount(ANSWER));
    assert.ok(s.logs.some((l) => l.event === "client_stalled"));
    await assertAuditClean(s.kv);
  } finally {
    await reader?.cancel().catch(() => {});
    await s.close();
    await openai.close();
  }
});
