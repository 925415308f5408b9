/**
 * Long-context prices: a provider that bills a whole request dearer once its input passes a size
 * (OpenAI's long-context models past 272K input tokens, Gemini's past 200K) is priced so in the
 * catalog's `long_context`, and both the reservation and the charge follow it. Here the size is
 * 1,000 tokens so that a test prompt passes it; the strict fakes bill the prompts they are sent.
 */
import assert from "node:assert/strict";
import { parseUsd } from "@/lib/core/mod.ts";
import type { CatalogFile } from "@/lib/catalog/catalog.ts";
import { startAnthropicUpstream } from "./fakes/anthropic_upstream.ts";
import { startOpenAiUpstream } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  chatHoldingExactly,
  PUBLIC_URL,
  readSse,
  spendDownTo,
  startService,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";

const SIZE = 1_000;
/** About 1,500 tokens in both the OpenAI and the Claude count: past the size. */
const LONG_TEXT = "word ".repeat(1_500);
/** Micro-USD per token: the model's prices, and past the size the tier's. */
const GPT = { input: 2, output: 8, longInput: 4, longOutput: 12 };

function catalogFile(openaiUrl: string, claudeUrl: string): CatalogFile {
  return {
    providers: {
      openai: { kind: "openai", base_url: openaiUrl, api_key_env: "OPENAI_KEY" },
      claude: { kind: "anthropic", base_url: claudeUrl, api_key_env: "CLAUDE_KEY" },
    },
    models: [{
      id: "openai/long",
      provider: "openai",
      upstream_model: "gpt-4o-mini",
      input_usd_per_mtok: "2.00",
      output_usd_per_mtok: "8.00",
      context_tokens: 32_768,
      max_output_tokens: 4_096,
      long_context: {
        above_input_tokens: SIZE,
        input_usd_per_mtok: "4.00",
        output_usd_per_mtok: "12.00",
      },
    }, {
      id: "claude/long",
      provider: "claude",
      upstream_model: "claude-sonnet-4-5",
      input_usd_per_mtok: "3.00",
      output_usd_per_mtok: "15.00",
      cache_read_usd_per_mtok: "0.30",
      cache_write_usd_per_mtok: "3.75",
      context_tokens: 200_000,
      max_output_tokens: 8_192,
      long_context: {
        above_input_tokens: SIZE,
        input_usd_per_mtok: "6.00",
        output_usd_per_mtok: "22.50",
        cache_read_usd_per_mtok: "0.60",
        cache_write_usd_per_mtok: "7.50",
      },
    }],
  };
}

interface Setup {
  s: TestService;
  openai: ReturnType<typeof startOpenAiUpstream>;
  claude: ReturnType<typeof startAnthropicUpstream>;
}

async function withUpstreams(fn: (setup: Setup) => Promise<void>) {
  const openai = startOpenAiUpstream();
  const claude = startAnthropicUpstream();
  const s = await startService({
    catalogFile: catalogFile(openai.baseUrl, claude.url),
    env: { OPENAI_KEY: openai.apiKey, CLAUDE_KEY: claude.apiKey },
  });
  try {
    await fn({ s, openai, claude });
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await openai.close();
    await claude.close();
  }
}

Deno.test("a request whose input passes the long-context size is charged every token at the tier's prices, one under it at the model's", async () => {
  await withUpstreams(async ({ s }) => {
    const { appId, apiKey } = await s.newApp();
    let spent = 0;
    for (const [text, long] of [["Say hi.", false], [LONG_TEXT, true]] as const) {
      const res = await s.chat(apiKey, {
        model: "openai/long",
        messages: userMessage(text),
        max_tokens: 50,
      });
      assert.equal(res.status, 200);
      const { usage } = await res.json();
      assert.equal(usage.prompt_tokens > SIZE, long);
      const expected = long
        ? usage.prompt_tokens * GPT.longInput + usage.completion_tokens * GPT.longOutput
        : usage.prompt_tokens * GPT.input + usage.completion_tokens * GPT.output;
      assert.equal(parseUsd(res.headers.get("tollbooth-request-cost")!), expected);
      spent += expected;
      assert.equal((await s.wallet(appId)).spent, spent);
    }
  });
});

Deno.test("a streamed request past the long-context size is charged at the tier's prices", async () => {
  await withUpstreams(async ({ s }) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "openai/long",
      messages: userMessage(LONG_TEXT),
      max_tokens: 50,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(res.status, 200);
    const events = await readSse(res);
    const usage = events.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e))
      .findLast((chunk) => chunk.usage)!.usage;
    assert.ok(usage.prompt_tokens > SIZE);
    assert.equal(
      (await s.wallet(appId)).spent,
      usage.prompt_tokens * GPT.longInput + usage.completion_tokens * GPT.longOutput,
    );
  });
});

Deno.test("a request whose input bound passes the size is held at the tier's prices: 402 where the model's prices would have fitted", async () => {
  await withUpstreams(async ({ s, openai }) => {
    const { appId, apiKey } = await s.newApp();
    const body = { model: "openai/long", messages: userMessage(LONG_TEXT), max_tokens: 100 };
    const billed = openai.promptTokens({ ...body, model: "gpt-4o-mini" });
    assert.ok(billed > SIZE);
    // The hold at the model's prices is about 2 × billed + 800 (the bound is a little above what
    // the fake bills); at the tier's at least 4 × billed + 1,200. The wallet holds in between.
    const between = 3 * billed + 1_000;
    await spendDownTo(s.kv, appId, between);
    const res = await s.chat(apiKey, body);
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "insufficient_credits");
    assert.equal(openai.chats.length, 0, "the model was not called");
    assert.equal((await s.wallet(appId)).available, between);
  });
});

Deno.test("cached input counts toward the size: a Claude request of few fresh tokens and many cache reads is charged at the tier's prices", async () => {
  await withUpstreams(async ({ s, claude }) => {
    const { appId, apiKey } = await s.newApp();
    const cacheRead = 1_200;
    claude.script({ text: "Noted.", cacheReadInputTokens: cacheRead });
    const res = await s.chat(apiKey, {
      model: "claude/long",
      messages: [{
        role: "user",
        content: [{ type: "text", text: LONG_TEXT, cache_control: { type: "ephemeral" } }],
      }],
      max_tokens: 50,
    });
    assert.equal(res.status, 200);
    const { usage } = await res.json();
    assert.equal(usage.prompt_tokens_details.cached_tokens, cacheRead);
    const fresh = usage.prompt_tokens - cacheRead;
    assert.ok(fresh < SIZE && usage.prompt_tokens > SIZE, JSON.stringify(usage));
    // 6.00, 0.60 and 22.50 USD per million tokens, in pico-USD per token, rounded up once.
    const picos = fresh * 6_000_000 + cacheRead * 600_000 + usage.completion_tokens * 22_500_000;
    const expected = Math.ceil(picos / 1_000_000);
    assert.equal(parseUsd(res.headers.get("tollbooth-request-cost")!), expected);
    assert.equal((await s.wallet(appId)).spent, expected);
  });
});

Deno.test("a Claude prompt the legacy tokenizer bills past the size is held past it too: an app holding exactly its hold is charged in full", async () => {
  await withUpstreams(async ({ s, claude }) => {
    // Words after a newline: 6 legacy tokens a copy, 1,020 in all, past the size; the bound once
    // counted 5 a copy, under the size, and held them at the model's prices.
    const body = {
      model: "claude/long",
      messages: userMessage("\npifrrlt".repeat(170)),
      max_tokens: 16,
    };
    const learn = await s.newApp("learn");
    const first = await s.chat(learn.apiKey, body);
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const [sent] = claude.messages();
    assert.ok(sent.inputTokens > SIZE, `billed ${sent.inputTokens}`);
    const [learned] = await usageRecords(s.kv, learn.appId);

    const { res, record } = await chatHoldingExactly(s, body, learned.reserved);
    assert.equal(res.status, 200);
    assert.equal(record.reserved, learned.reserved);
    assert.equal(record.uncharged, 0, `held ${record.reserved}, ${record.uncharged} uncharged`);
    assert.equal(parseUsd(res.headers.get("tollbooth-request-cost")!), record.cost);
  });
});

Deno.test("the models list and the public models page show a model's long-context size and prices", async () => {
  await withUpstreams(async ({ s }) => {
    const { apiKey } = await s.newApp();
    const res = await s.get(apiKey, "/models/claude/long", { template: "/models/{model}" });
    assert.equal(res.status, 200);
    assert.deepEqual((await res.json()).pricing.long_context, {
      above_input_tokens: SIZE,
      input_usd_per_mtok: "6.00",
      output_usd_per_mtok: "22.50",
      cache_read_usd_per_mtok: "0.60",
      cache_write_usd_per_mtok: "7.50",
      cache_write_1h_usd_per_mtok: "12.00",
    });
    const page = await (await s.handle(new Request(`${PUBLIC_URL}/models`))).text();
    assert.match(page, /over 1,000 input tokens: \$4\.00 \/ \$12\.00/);
  });
});
