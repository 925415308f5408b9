/**
 * A slow answer is never free: non-streamed requests are served from a streamed upstream call, so
 * the upstream timeout measures silence, not length, and a call cut after tokens flowed is charged
 * for what was produced (the provider bills it), answered with a 502 that says so.
 */
import assert from "node:assert/strict";
import { parseUsd } from "@/lib/core/mod.ts";
import { startAnthropicUpstream } from "./fakes/anthropic_upstream.ts";
import { startOpenAiUpstream } from "./fakes/openai_upstream.ts";
import { assertAuditClean, startService, usageRecords, userMessage } from "./helpers.ts";

const TIMEOUT_MS = 1_000;
const PROMPT = "Tell me a long story about a lighthouse keeper and the sea.";
const STORY = "Once upon a time, a keeper lived alone on a rock far out at sea, and every night " +
  "he lit the lamp, wound the clockwork and wrote one line in the log.";

async function withFakes(
  fn: (s: Awaited<ReturnType<typeof startService>>, fakes: Fakes) => Promise<void>,
) {
  const openai = startOpenAiUpstream();
  const claude = startAnthropicUpstream();
  // The fake's tokenizer loads on first use: not inside a timed answer.
  claude.inputTokens({ model: "m", messages: [{ role: "user", content: "warm up" }] });
  const model = (id: string, provider: string, upstream: string) => ({
    id,
    provider,
    upstream_model: upstream,
    input_usd_per_mtok: "2.00",
    output_usd_per_mtok: "8.00",
    context_tokens: 200_000,
    max_output_tokens: 8192,
  });
  const s = await startService({
    catalogFile: {
      providers: {
        oai: {
          kind: "openai",
          base_url: openai.baseUrl,
          api_key_env: "OAI_KEY",
          timeout_ms: TIMEOUT_MS,
        },
        ant: {
          kind: "anthropic",
          base_url: claude.url,
          api_key_env: "ANT_KEY",
          timeout_ms: TIMEOUT_MS,
        },
      },
      models: [model("oai/m", "oai", "gpt-4.1-mini"), model("ant/m", "ant", "claude-sonnet-4-5")],
    },
    env: { OAI_KEY: openai.apiKey, ANT_KEY: claude.apiKey },
  });
  try {
    await fn(s, { openai, claude });
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await openai.close();
    await claude.close();
  }
}

type Fakes = {
  openai: ReturnType<typeof startOpenAiUpstream>;
  claude: ReturnType<typeof startAnthropicUpstream>;
};

/** 2.00 / 8.00 USD per million tokens: 2 and 8 micro-USD a token. */
function price(prompt: number, completion: number) {
  return prompt * 2 + completion * 8;
}

for (const kind of ["openai", "anthropic"] as const) {
  const modelId = kind === "openai" ? "oai/m" : "ant/m";

  Deno.test(`${kind}: a non-streamed answer longer in total than the upstream timeout, never silent that long, completes and is charged exactly`, () =>
    withFakes(async (s, { openai, claude }) => {
      // Each event 100 ms after the last: the whole answer takes several timeouts.
      const pace = { chunkDelayMs: 100 };
      if (kind === "openai") openai.script({ content: STORY, ...pace });
      else claude.script({ text: STORY, ...pace });
      const { apiKey, appId } = await s.newApp();
      const started = Date.now();
      const res = await s.chat(apiKey, { model: modelId, messages: userMessage(PROMPT) });
      const tookMs = Date.now() - started;
      assert.equal(res.status, 200);
      const body = await res.json();
      assert.ok(tookMs > TIMEOUT_MS, `the answer took ${tookMs} ms in all`);
      assert.equal(body.object, "chat.completion");
      assert.equal(body.model, modelId);
      assert.equal(body.choices[0].message.content, STORY);
      assert.equal(body.choices[0].finish_reason, "stop");
      if (kind === "openai") {
        // The fields the non-streamed call had: refusal, logprobs, fingerprint, usage details.
        assert.equal(body.choices[0].message.refusal, null);
        assert.equal(body.choices[0].logprobs, null);
        assert.equal(body.system_fingerprint, "fp_fake0penai");
        assert.equal(body.usage.completion_tokens_details.reasoning_tokens, 0);
        assert.equal("obfuscation" in body, false, "stream padding is not part of the answer");
      }
      const [record] = await usageRecords(s.kv, appId);
      const billed = kind === "openai"
        ? openai.chats[0].promptTokens
        : claude.inputTokens(claude.messages()[0].body);
      assert.equal(body.usage.prompt_tokens, billed);
      assert.equal(record.promptTokens, billed);
      assert.equal(record.completionTokens, body.usage.completion_tokens);
      assert.equal(record.countedLocally, false);
      assert.equal(record.outcome, "completed");
      assert.equal(record.streamed, false);
      assert.equal(record.cost, price(billed, body.usage.completion_tokens));
      assert.equal(parseUsd(res.headers.get("tollbooth-request-cost")!), record.cost);
    }));

  Deno.test(`${kind}: a non-streamed answer silent longer than the timeout after tokens flowed is a 502 upstream_interrupted charging what was produced`, () =>
    withFakes(async (s, { openai, claude }) => {
      // A few events, then silence past the timeout: the provider has billed what it produced.
      if (kind === "openai") openai.script({ content: STORY, stallAfterEvents: 6 });
      else claude.script({ text: STORY, stallAfterEvents: 8 });
      const { apiKey, appId } = await s.newApp();
      const res = await s.chat(apiKey, { model: modelId, messages: userMessage(PROMPT) });
      assert.equal(res.status, 502);
      const error = (await res.json()).error;
      assert.equal(error.code, "upstream_interrupted");
      assert.match(error.message, /were charged \(\d+\.\d{6} USD\)/);
      const cost = parseUsd(res.headers.get("tollbooth-request-cost")!);
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.outcome, "upstream_cut");
      assert.equal(record.cost, cost);
      assert.ok(record.completionTokens > 0, "the produced tokens are counted");
      // Never less than the provider bills for the prompt and the tokens that were produced.
      const billedPrompt = kind === "openai"
        ? openai.chats[0].promptTokens
        : claude.inputTokens(claude.messages()[0].body);
      assert.ok(record.promptTokens >= billedPrompt);
      assert.ok(cost >= price(billedPrompt, record.completionTokens) && cost > 0);
      const wallet = await s.wallet(appId);
      assert.equal(wallet.reserved, 0);
      assert.equal(wallet.spent, cost);
      const line = s.logs.find((l) => l.event === "request" && l.errorCode);
      assert.equal(line?.errorCode, "upstream_interrupted");
    }));
}
