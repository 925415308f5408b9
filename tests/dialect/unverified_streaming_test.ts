/**
 * An OpenAI organization that OpenAI has not verified may not stream o3 or GPT-5. A provider marked
 * `"streaming": false` asks for whole answers instead, through chat completions or the Responses
 * API, and serves them to clients that stream and clients that do not, each charged its usage; any
 * other provider learns it from OpenAI's refusal.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startOpenAiUpstream } from "../fakes/openai_upstream.ts";
import { assertAuditClean, newUsageOf, serveLoopback, startService } from "../helpers.ts";
import { WEATHER_TOOLS } from "./harness.ts";

const MODELS = ["whole/o3", "wholer/o3", "streamed/o3", "streamedr/o3"] as const;

async function withUnverifiedOrganization(
  fn: (world: {
    client: OpenAI;
    openai: ReturnType<typeof startOpenAiUpstream>;
    charged: () => Promise<{ model: string; promptTokens: number; completionTokens: number }[]>;
  }) => Promise<void>,
) {
  const openai = startOpenAiUpstream({ models: { o3: { unverifiedStreaming: true } } });
  const provider = (kind: "openai" | "openai_responses", streaming?: boolean) => ({
    kind,
    base_url: openai.baseUrl,
    api_key_env: "OAI_KEY",
    ...(streaming === undefined ? {} : { streaming }),
  });
  const s = await startService({
    catalogFile: {
      providers: {
        whole: provider("openai", false),
        wholer: provider("openai_responses", false),
        streamed: provider("openai"),
        streamedr: provider("openai_responses"),
      },
      models: MODELS.map((id) => ({
        id,
        provider: id.split("/")[0],
        upstream_model: "o3",
        input_usd_per_mtok: "2.00",
        output_usd_per_mtok: "8.00",
        context_tokens: 200_000,
        max_output_tokens: 100_000,
      })),
    },
    env: { OAI_KEY: openai.apiKey },
  });
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
    await fn({ client, openai, charged: newUsageOf(s, appId) });
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
    await openai.close();
  }
}

for (const model of ["whole/o3", "wholer/o3"] as const) {
  const kind = model === "whole/o3" ? "chat completions" : "the Responses API";
  Deno.test(`an organization OpenAI has not verified: a provider marked streaming: false serves o3 whole through ${kind}, to streamed and non-streamed clients, each charged what OpenAI billed`, () =>
    withUnverifiedOrganization(async ({ client, openai, charged }) => {
      openai.script(
        { content: "Paris.", reasoningTokens: 300 },
        { content: "Rome.", reasoningTokens: 200 },
        { reasoningTokens: 100, toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
      );
      const whole = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Capital of France?" }],
      });
      assert.equal(whole.choices[0].message.content, "Paris.");
      assert.equal(whole.usage!.completion_tokens_details?.reasoning_tokens, 300);

      const stream = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Capital of Italy?" }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = "";
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? "";
        usage = chunk.usage ?? usage;
      }
      assert.equal(text, "Rome.");

      const call = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Weather in Oslo?" }],
        tools: WEATHER_TOOLS,
      });
      assert.equal(call.choices[0].finish_reason, "tool_calls");
      const [toolCall] = call.choices[0].message.tool_calls!;
      assert.ok(toolCall.type === "function");
      assert.deepEqual(JSON.parse(toolCall.function.arguments), { city: "Oslo" });

      const sent = model === "whole/o3" ? openai.chats : openai.responses;
      assert.equal(sent.length, 3);
      for (const request of sent) assert.equal(request.body.stream, false);
      const records = await charged();
      assert.deepEqual(
        records.map((r) => [r.promptTokens, r.completionTokens]),
        [whole.usage!, usage!, call.usage!].map((u) => [u.prompt_tokens, u.completion_tokens]),
      );
      records.forEach((record, i) => assert.equal(record.promptTokens, sent[i].promptTokens));
    }));
}

for (const model of ["streamed/o3", "streamedr/o3"] as const) {
  Deno.test(`an organization OpenAI has not verified: a provider not marked streaming: false learns from OpenAI's refusal, and the model's requests go whole from then on, each charged once (${model})`, () =>
    withUnverifiedOrganization(async ({ client, openai, charged }) => {
      openai.script({ content: "First." }, { content: "Second." });
      for (const [question, answer] of [["One?", "First."], ["Two?", "Second."]]) {
        const completion = await client.chat.completions.create({
          model,
          messages: [{ role: "user", content: question }],
          stream: true,
        });
        let text = "";
        for await (const chunk of completion) text += chunk.choices[0]?.delta.content ?? "";
        assert.equal(text, answer);
      }
      // The first request was refused streamed and sent again whole; the second went whole at once.
      assert.deepEqual(
        openai.received.map((r) => [r.status, JSON.parse(r.raw).stream]),
        [[400, true], [200, false], [200, false]],
      );
      assert.equal(openai.counts.refused, 1);
      const sent = model === "streamed/o3" ? openai.chats : openai.responses;
      const records = await charged();
      assert.equal(records.length, 2);
      records.forEach((record, i) => assert.equal(record.promptTokens, sent[i].promptTokens));
    }));
}

Deno.test("a whole Responses answer that repeats a long request (many tools, a small cap) is read and charged, not refused as too long", () =>
  withUnverifiedOrganization(async ({ client, openai, charged }) => {
    const words = Array.from({ length: 400 }, (_, i) => `word${i}`).join(" ");
    const tools = Array.from({ length: 120 }, (_, i) => ({
      type: "function" as const,
      function: {
        name: `tool_${i}`,
        description: `Tool ${i}: ${words}`,
        parameters: { type: "object", properties: { q: { type: "string" } } },
      },
    }));
    openai.script({ content: "Yes.", reasoningTokens: 0 });
    const answer = await client.chat.completions.create({
      model: "wholer/o3",
      messages: [{ role: "user", content: "Answer yes." }],
      tools,
      max_completion_tokens: 16,
    });
    assert.equal(answer.choices[0].message.content, "Yes.");
    const [record] = await charged();
    assert.equal(record.promptTokens, openai.responses[0].inputTokens);
  }));
