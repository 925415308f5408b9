/**
 * The bursts of issue #14 on a fresh 5.00 USD app, against loopback fakes that bill like the
 * providers: what the provider bills (the fake's usage at the catalog's prices), what was charged,
 * and what went uncharged. Every reservation is an upper bound of the bill, so uncharged stays
 * within 1% of the provider's cost, the wallet never goes below zero, and the audit is clean.
 */
import assert from "node:assert/strict";
import { loadCorpus } from "./claude_token_reference.ts";
import { anthropicOutputTokens, startAnthropicUpstream } from "./fakes/anthropic_upstream.ts";
import { startOpenAiUpstream, tokenCount } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  startService,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import type { CatalogFile } from "@/lib/catalog/catalog.ts";

/** Micro-USD per million tokens, so that a token costs a whole number of pico-USD. */
const PRICES = {
  "oai/gpt-4o": { input: 2_500_000n, output: 10_000_000n },
  "ant/claude-sonnet": { input: 3_000_000n, output: 15_000_000n },
};
type BurstModel = keyof typeof PRICES;

/** The provider's bill for one usage at the catalog's prices, rounded up once (the house rule). */
function providerCost(model: BurstModel, prompt: number, completion: number): number {
  const p = PRICES[model];
  return Number((BigInt(prompt) * p.input + BigInt(completion) * p.output + 999_999n) / 1_000_000n);
}

function catalog(openaiUrl: string, claudeUrl: string): CatalogFile {
  const model = (id: BurstModel, provider: string, upstream: string) => ({
    id,
    provider,
    upstream_model: upstream,
    input_usd_per_mtok: (Number(PRICES[id].input) / 1_000_000).toFixed(6),
    output_usd_per_mtok: (Number(PRICES[id].output) / 1_000_000).toFixed(6),
    context_tokens: 200_000,
    max_output_tokens: 16_000,
  });
  return {
    providers: {
      oai: { kind: "openai", base_url: openaiUrl, api_key_env: "OAI_KEY", timeout_ms: 30_000 },
      ant: { kind: "anthropic", base_url: claudeUrl, api_key_env: "ANT_KEY", timeout_ms: 30_000 },
    },
    models: [
      model("oai/gpt-4o", "oai", "gpt-4o"),
      model("ant/claude-sonnet", "ant", "claude-sonnet-4-5"),
    ],
  };
}

/**
 * Fires `n` requests at once on a fresh app while sampling its wallet, then sums the ledger.
 * `billed` gives what the provider bills for the i-th request the fake served.
 */
async function burst(
  s: TestService,
  n: number,
  body: (i: number) => Record<string, unknown>,
  billed: () => number,
) {
  const { appId, apiKey } = await s.newApp();
  const start = (await s.wallet(appId)).available;
  let lowest = start, sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const w = await s.wallet(appId);
      lowest = Math.min(lowest, w.available);
      assert.ok(w.available >= 0 && w.reserved >= 0, "the wallet never goes below zero");
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  const statuses = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const res = await s.chat(apiKey, body(i));
      await res.body?.cancel();
      return res.status;
    }),
  );
  sampling = false;
  await sampler;
  await s.wallets.drain();
  const records = await usageRecords(s.kv, appId);
  const wallet = await s.wallet(appId);
  const charged = records.reduce((sum, r) => sum + r.cost, 0);
  const recordedUncharged = records.reduce((sum, r) => sum + r.uncharged, 0);
  const provider = billed();
  assert.equal(wallet.spent, charged);
  assert.equal(wallet.reserved, 0);
  assert.ok(wallet.available >= 0 && lowest >= 0);
  assert.equal(start - wallet.available, charged, "every micro-USD that left is a charge");
  await assertAuditClean(s.kv);
  return {
    served: statuses.filter((x) => x === 200).length,
    refused: statuses.filter((x) => x === 402).length,
    other: statuses.filter((x) => x !== 200 && x !== 402),
    provider,
    charged,
    uncharged: Math.max(0, provider - charged),
    recordedUncharged,
  };
}

function report(name: string, r: Awaited<ReturnType<typeof burst>>) {
  const usd = (m: number) => (m / 1_000_000).toFixed(6);
  console.log(
    `[burst] ${name}: ${r.served} served, ${r.refused} refused 402; provider cost ${
      usd(r.provider)
    } USD, charged ${usd(r.charged)} USD, uncharged ${usd(r.uncharged)} USD (${
      (100 * r.uncharged / r.provider).toFixed(3)
    }%), recorded uncharged ${usd(r.recordedUncharged)} USD`,
  );
  assert.deepEqual(r.other, [], "every request was served or refused for credits");
  assert.ok(r.served > 0 && r.refused > 0, "the burst ran the wallet dry");
  assert.ok(r.uncharged <= r.provider / 100, `uncharged ${r.uncharged} > 1% of ${r.provider}`);
  assert.equal(r.recordedUncharged, 0, "every reservation covered its charge");
}

async function withFakes(
  fn: (
    s: TestService,
    openai: ReturnType<typeof startOpenAiUpstream>,
    claude: ReturnType<typeof startAnthropicUpstream>,
  ) => Promise<void>,
) {
  const openai = startOpenAiUpstream();
  const claude = startAnthropicUpstream();
  const s = await startService({
    catalogFile: catalog(openai.baseUrl, claude.url),
    // The bursts are about money: rate limits out of the way. The default 2M tokens a minute
    // refused part of the 300-call burst (429) whenever a busy machine spread it over enough time
    // for early answers to return their holds, so that the wallet no longer bound first.
    env: {
      OAI_KEY: openai.apiKey,
      ANT_KEY: claude.apiKey,
      RATE_LIMIT_RPM: "100000",
      RATE_LIMIT_TPM: "1000000000",
    },
  });
  try {
    await fn(s, openai, claude);
  } finally {
    await s.close();
    await openai.close();
    await claude.close();
  }
}

/** Three tools with long descriptions and schemas: several thousand prompt tokens of definitions. */
const TOOLS = ["search_archive", "file_report", "notify_team"].map((name, k) => ({
  type: "function",
  function: {
    name,
    description: Array.from(
      { length: 90 },
      (_, i) =>
        `Step ${i} of ${name}: check the source, the date, the author and the confidence of every item before it is used.`,
    ).join(" "),
    parameters: {
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: 25 }, (_, i) => [`field_${k}_${i}`, {
          type: "string",
          description: `The value of field ${i}, written out in full with its unit and its source.`,
        }]),
      ),
      required: [`field_${k}_0`],
    },
  },
}));

const CALL_ARGS = JSON.stringify({ field_0_0: "the harbour log of 1923, volume two" });

Deno.test("300 concurrent non-streamed tool calls with large tool definitions on a fresh 5 USD app: uncharged ≤ 1% of the provider's cost", () =>
  withFakes(async (s, openai) => {
    openai.setDefault({ toolCalls: [{ name: "search_archive", arguments: CALL_ARGS }] });
    const result = await burst(
      s,
      300,
      (i) => ({
        model: "oai/gpt-4o",
        messages: userMessage(`Search the archive for item ${i}.`),
        tools: TOOLS,
        tool_choice: "required",
      }),
      () =>
        openai.chats.reduce(
          (sum, chat) =>
            sum +
            providerCost(
              "oai/gpt-4o",
              chat.promptTokens,
              3 + tokenCount("search_archive") + tokenCount(CALL_ARGS),
            ),
          0,
        ),
    );
    assert.ok(openai.chats[0].promptTokens > 4_000, "the tool definitions are billed as prompt");
    report("300 non-streamed tool calls, large tools (OpenAI kind)", result);
  }));

for (const id of ["gu-prose", "te-prose"]) {
  const sample = loadCorpus().find((x) => x.id === id)!;
  Deno.test(`100 concurrent ${sample.script} prompts on an Anthropic-kind model on a fresh 5 USD app: uncharged ≤ 1% of the provider's cost`, () =>
    withFakes(async (s, _openai, claude) => {
      const prompt = Array(24).fill(sample.text).join("\n");
      const answer = sample.text;
      claude.setDefault({ text: answer });
      const outputTokens = anthropicOutputTokens([{ type: "text", text: answer }]);
      const result = await burst(
        s,
        100,
        (i) => ({
          model: "ant/claude-sonnet",
          messages: userMessage(`${i}. ${prompt}`),
          max_tokens: 1_000,
        }),
        () =>
          claude.messages().reduce(
            (sum, m) =>
              sum +
              providerCost("ant/claude-sonnet", m.inputTokens, outputTokens),
            0,
          ),
      );
      report(`100 ${sample.script} prompts (Anthropic kind)`, result);
    }));
}
