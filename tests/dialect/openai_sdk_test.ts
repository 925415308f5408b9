/** The openai npm client against both provider kinds: the dialect it speaks, billed exactly. */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { zodFunction, zodResponsesFunction } from "openai/helpers/zod";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { z } from "zod";
import { usageCost } from "@/lib/catalog/mod.ts";
import { claudeTokenBound } from "@/lib/gateway/claude_tokens.ts";
import type {
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from "openai/resources/chat/completions";
import { pngBase64 } from "../fakes/common.ts";
import { spendDownTo, usageRecords } from "../helpers.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import {
  assertCharged,
  CACHE_WRITING_GPT,
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
  OPENAI_MODEL,
  openAiClient,
  REASONING_MODEL,
  RESPONSES_MODEL,
  scriptAgentLoop,
  withDialect,
} from "./harness.ts";

const TOOLS: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
  {
    type: "function",
    function: {
      name: "get_time",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

const KINDS = [
  { kind: "openai", model: OPENAI_MODEL },
  { kind: "anthropic", model: CLAUDE_MODEL },
] as const;

/** Two parallel calls, then the answer once their results come back; `usage` of each turn. */
function scriptToolRoundTrip(d: Dialect, kind: "openai" | "anthropic") {
  if (kind === "openai") {
    d.openai.script(
      {
        toolCalls: [
          { name: "get_weather", arguments: { city: "Paris" } },
          { name: "get_time", arguments: { city: "Paris" } },
        ],
        promptTokens: 120,
        completionTokens: 40,
      },
      { content: "Sunny at noon in Paris.", promptTokens: 210, completionTokens: 8 },
    );
  } else {
    d.claude.script(
      {
        content: [
          { type: "text", text: "Let me check." },
          { type: "tool_use", name: "get_weather", input: { city: "Paris" } },
          { type: "tool_use", name: "get_time", input: { city: "Paris" } },
        ],
        inputTokens: 520,
        outputTokens: 61,
      },
      { text: "Sunny at noon in Paris.", inputTokens: 700, outputTokens: 9 },
    );
  }
  return kind === "openai"
    ? [{ prompt: 120, completion: 40 }, { prompt: 210, completion: 8 }]
    : [{ prompt: 520, completion: 61 }, { prompt: 700, completion: 9 }];
}

function toolResults(calls: { id: string; function: { name: string } }[]) {
  return calls.map((call): ChatCompletionMessageParam => ({
    role: "tool",
    tool_call_id: call.id,
    content: call.function.name === "get_weather" ? "sunny" : "12:00",
  }));
}

/** The second turn as the upstream received it: the calls and their results, in its format. */
function assertSecondTurnReceived(
  d: Dialect,
  kind: "openai" | "anthropic",
  calls: { id: string; function: { name: string; arguments: string } }[],
) {
  if (kind === "openai") {
    const sent = d.openai.chats[1].body.messages;
    assert.deepEqual(
      sent.at(-3).tool_calls.map((c: { id: string }) => c.id),
      calls.map((c) => c.id),
    );
    assert.deepEqual(
      sent.slice(-2).map((m: { role: string; tool_call_id: string }) => [m.role, m.tool_call_id]),
      calls.map((c) => ["tool", c.id]),
    );
    assert.equal(d.openai.chats[1].body.tools.length, 2);
  } else {
    const sent = d.claude.messages()[1].body;
    const assistant = sent.messages.at(-2);
    assert.deepEqual(
      assistant.content.filter((b: { type: string }) => b.type === "tool_use").map((
        b: { id: string; input: unknown },
      ) => [b.id, b.input]),
      calls.map((c) => [c.id, JSON.parse(c.function.arguments)]),
    );
    const results = sent.messages.at(-1);
    assert.equal(results.role, "user");
    assert.deepEqual(
      results.content.map((b: { type: string; tool_use_id: string }) => [b.type, b.tool_use_id]),
      calls.map((c) => ["tool_result", c.id]),
    );
    assert.equal(sent.tools[0].input_schema.required[0], "city");
  }
}

for (const { kind, model } of KINDS) {
  Deno.test(`openai SDK, ${kind} kind: a tool round trip with two parallel calls, each turn billed exactly`, () =>
    withDialect(async (d) => {
      const usage = scriptToolRoundTrip(d, kind);
      const messages: ChatCompletionMessageParam[] = [
        { role: "user", content: "Weather and time in Paris?" },
      ];
      const first = await openAiClient(d).chat.completions.create({
        model,
        messages,
        tools: TOOLS,
      });
      assert.equal(first.choices[0].finish_reason, "tool_calls");
      const calls = first.choices[0].message.tool_calls!.filter((c) => c.type === "function");
      assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [
        ["get_weather", { city: "Paris" }],
        ["get_time", { city: "Paris" }],
      ]);
      await assertCharged(d, model, usage[0]);

      messages.push(first.choices[0].message, ...toolResults(calls));
      const second = await openAiClient(d).chat.completions.create({
        model,
        messages,
        tools: TOOLS,
      });
      assert.equal(second.choices[0].message.content, "Sunny at noon in Paris.");
      assert.equal(second.choices[0].finish_reason, "stop");
      await assertCharged(d, model, usage[1]);
      assertSecondTurnReceived(d, kind, calls);
    }));

  Deno.test(`openai SDK, ${kind} kind: what the parse helpers return, parsed arguments included, goes back as the next turn's input, in chat and Responses`, () =>
    withDialect(async (d) => {
      const Weather = z.object({ city: z.string() });
      for (const api of ["chat", "responses"] as const) {
        const usage = scriptAgentLoop(d, kind);
        if (api === "chat") {
          const tools = [zodFunction({ name: "weather", parameters: Weather })];
          const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Paris?" }];
          const first = await openAiClient(d).chat.completions.parse({ model, messages, tools });
          const call = first.choices[0].message.tool_calls![0];
          assert.ok(call.type === "function");
          assert.deepEqual(call.function.parsed_arguments, { city: "Paris" });
          messages.push(first.choices[0].message, {
            role: "tool",
            tool_call_id: call.id,
            content: "sunny",
          });
          const second = await openAiClient(d).chat.completions.parse({ model, messages, tools });
          assert.equal(second.choices[0].message.content, "It is sunny in Paris.");
        } else {
          const tools = [zodResponsesFunction({ name: "weather", parameters: Weather })];
          const input: ResponseInputItem[] = [{ role: "user", content: "Paris?" }];
          const first = await openAiClient(d).responses.parse({
            model,
            input,
            tools,
            store: false,
          });
          const call = first.output.find((item) => item.type === "function_call")!;
          assert.deepEqual(call.parsed_arguments, { city: "Paris" });
          input.push(...(first.output as ResponseInputItem[]), {
            type: "function_call_output",
            call_id: call.call_id,
            output: "sunny",
          });
          const second = await openAiClient(d).responses.parse({
            model,
            input,
            tools,
            store: false,
          });
          assert.equal(second.output_text, "It is sunny in Paris.");
        }
        await assertCharged(d, model, ...usage);
      }
      if (kind === "openai") {
        const sent = JSON.stringify(d.openai.chats.map((chat) => chat.body));
        assert.ok(!sent.includes("parsed_arguments"), "never forwarded");
      }
    }));

  Deno.test(`openai SDK, ${kind} kind: a streamed tool round trip, the SDK assembling the fragments`, () =>
    withDialect(async (d) => {
      const usage = scriptToolRoundTrip(d, kind);
      const messages: ChatCompletionMessageParam[] = [
        { role: "user", content: "Weather and time in Paris?" },
      ];
      const runner = openAiClient(d).chat.completions.stream({
        model,
        messages,
        tools: TOOLS,
        stream_options: { include_usage: true },
      });
      const first = await runner.finalChatCompletion();
      assert.equal(first.choices[0].finish_reason, "tool_calls");
      const calls = first.choices[0].message.tool_calls!.filter((c) => c.type === "function");
      assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [
        ["get_weather", { city: "Paris" }],
        ["get_time", { city: "Paris" }],
      ]);
      assert.ok(calls.every((c) => c.id));
      await assertCharged(d, model, usage[0]);

      messages.push(first.choices[0].message as ChatCompletionMessageParam, ...toolResults(calls));
      const second = await openAiClient(d).chat.completions.stream({
        model,
        messages,
        tools: TOOLS,
      })
        .finalChatCompletion();
      assert.equal(second.choices[0].message.content, "Sunny at noon in Paris.");
      await assertCharged(d, model, usage[1]);
      assertSecondTurnReceived(d, kind, calls);
    }));
}

const PERSON_SCHEMA = {
  type: "object",
  properties: { name: { type: "string" }, born: { type: "integer" } },
  required: ["name", "born"],
  additionalProperties: false,
};

for (const { kind, model } of KINDS) {
  Deno.test(`openai SDK, ${kind} kind: developer role, an image and a json_schema answer; the reservation covers what the provider billed`, () =>
    withDialect(async (d) => {
      const answer = { name: "Ada Lovelace", born: 1815 };
      if (kind === "openai") {
        d.openai.script({ content: JSON.stringify(answer), completionTokens: 12 });
      } else {
        d.claude.script({
          content: [{ type: "tool_use", name: "person", input: answer }],
          outputTokens: 14,
        });
      }
      const png = pngBase64(1024, 768);
      const res = await openAiClient(d).chat.completions.create({
        model,
        max_tokens: 300,
        messages: [
          { role: "developer", content: "Answer as JSON." },
          {
            role: "user",
            content: [
              { type: "text", text: "Who is in this portrait?" },
              {
                type: "image_url",
                image_url: { url: `data:image/png;base64,${png}`, detail: "high" },
              },
            ],
          },
        ],
        response_format: {
          type: "json_schema",
          json_schema: { name: "person", schema: PERSON_SCHEMA, strict: true },
        },
      });
      assert.deepEqual(JSON.parse(res.choices[0].message.content!), answer);
      assert.equal(res.choices[0].finish_reason, "stop");
      let billedPrompt: number;
      if (kind === "openai") {
        const sent = d.openai.chats[0];
        assert.equal(sent.body.messages[0].role, "developer");
        assert.equal(sent.body.messages[1].content[1].image_url.detail, "high");
        assert.equal(sent.body.response_format.json_schema.strict, true);
        billedPrompt = sent.promptTokens;
      } else {
        const sent = d.claude.messages()[0];
        assert.equal(sent.body.system, "Answer as JSON.");
        assert.deepEqual(sent.body.messages[0].content[1], {
          type: "image",
          source: { type: "base64", media_type: "image/png", data: png },
        });
        assert.deepEqual(sent.body.tool_choice, { type: "tool", name: "person" });
        assert.deepEqual(sent.body.tools[0].input_schema, PERSON_SCHEMA);
        billedPrompt = sent.inputTokens;
      }
      const record = await assertCharged(d, model, {
        prompt: billedPrompt,
        completion: kind === "openai" ? 12 : 14,
      });
      // The reservation was an upper bound of the bill: the image, schema and text as the provider counts.
      assert.ok(
        record.reserved >= expectedCharge(model, { prompt: billedPrompt, completion: 300 }),
        `held ${record.reserved} for a prompt billed ${billedPrompt}`,
      );
    }));
}

for (const { kind, model } of KINDS) {
  Deno.test(`openai SDK, ${kind} kind: a tool whose enum has thousands of short values is held at what the provider bills for it`, () =>
    withDialect(async (d) => {
      if (kind === "openai") d.openai.script({ content: "ok", completionTokens: 1 });
      else d.claude.script({ text: "ok", outputTokens: 1 });
      const values = Array.from({ length: 20_000 }, (_, i) => i % 2 ? "" : String(i % 7));
      await openAiClient(d).chat.completions.create({
        model,
        max_tokens: 1,
        messages: [{ role: "user", content: "Say ok." }],
        tools: [{
          type: "function",
          function: {
            name: "pick",
            parameters: {
              type: "object",
              properties: { choice: { type: "string", enum: values } },
            },
          },
        }],
      });
      const billedPrompt = kind === "openai"
        ? d.openai.chats[0].promptTokens
        : d.claude.messages()[0].inputTokens;
      const record = await assertCharged(d, model, { prompt: billedPrompt, completion: 1 });
      assert.ok(
        record.reserved >= expectedCharge(model, { prompt: billedPrompt, completion: 1 }),
        `held ${record.reserved} for a prompt billed ${billedPrompt}`,
      );
    }));
}

Deno.test("openai SDK, reasoning model: the cap goes as max_completion_tokens, reasoning tokens come back and are billed", () =>
  withDialect(async (d) => {
    d.openai.script({
      content: "42",
      reasoningTokens: 256,
      completionTokens: 300,
      promptTokens: 50,
    });
    const res = await openAiClient(d).chat.completions.create({
      model: REASONING_MODEL,
      messages: [{ role: "developer", content: "Be exact." }, { role: "user", content: "6 × 7?" }],
      max_completion_tokens: 2000,
      reasoning_effort: "low",
    });
    assert.equal(res.choices[0].message.content, "42");
    assert.equal(res.usage?.completion_tokens_details?.reasoning_tokens, 256);
    const sent = d.openai.chats[0].body;
    assert.equal(sent.max_completion_tokens, 2000);
    assert.equal("max_tokens" in sent, false);
    assert.equal(sent.reasoning_effort, "low");
    const record = await assertCharged(d, REASONING_MODEL, { prompt: 50, completion: 300 });
    assert.equal(record.reasoningTokens, 256);
  }));

Deno.test("openai SDK, reasoning model with no cap given: Tollbooth's default goes as max_completion_tokens", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "ok", completionTokens: 5, promptTokens: 9 });
    await openAiClient(d).chat.completions.create({
      model: REASONING_MODEL,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(d.openai.chats[0].body.max_completion_tokens, 2048);
    assert.equal("max_tokens" in d.openai.chats[0].body, false);
    await assertCharged(d, REASONING_MODEL, { prompt: 9, completion: 5 });
  }));

Deno.test("openai SDK, anthropic kind: reasoning_effort thinks within a budget; thinking streams as reasoning_content", () =>
  withDialect(async (d) => {
    const answer = {
      content: [
        { type: "thinking" as const, thinking: "Six sevens are forty-two." },
        { type: "text" as const, text: "42" },
      ],
      inputTokens: 40,
      outputTokens: 180,
    };
    d.claude.script(answer, answer);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "6 × 7?" }];
    const res = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      max_tokens: 4000,
      reasoning_effort: "low",
    });
    assert.equal(res.choices[0].message.content, "42");
    assert.equal(
      (res.choices[0].message as { reasoning_content?: string }).reasoning_content,
      "Six sevens are forty-two.",
    );
    assert.deepEqual(d.claude.messages()[0].body.thinking, {
      type: "enabled",
      budget_tokens: 1024,
    });
    await assertCharged(d, CLAUDE_MODEL, { prompt: 40, completion: 180 });

    const stream = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      max_tokens: 4000,
      reasoning_effort: "low",
      stream: true,
      stream_options: { include_usage: true },
    });
    let reasoning = "";
    let content = "";
    let usage: Record<string, unknown> | undefined;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string };
      reasoning += delta?.reasoning_content ?? "";
      content += delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage as unknown as Record<string, unknown>;
    }
    assert.equal(reasoning, "Six sevens are forty-two.");
    assert.equal(content, "42");
    const record = await assertCharged(d, CLAUDE_MODEL, { prompt: 40, completion: 180 });
    assert.equal(usage?.cost, (record.cost / 1e6).toFixed(6));
  }));

Deno.test("openai SDK, anthropic kind: with reasoning_effort, a turn that answers tool calls and asks more runs without thinking, in chat and Responses", () =>
  withDialect(async (d) => {
    const answer = { text: "Cold, and it is Tuesday.", inputTokens: 120, outputTokens: 12 };
    d.claude.script(answer, answer);
    const id = "toolu_01";
    const call = { name: "get_weather", arguments: '{"city":"Oslo"}' };
    const chat = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [
        { role: "user", content: "Weather in Oslo?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id, type: "function", function: call }],
        },
        { role: "tool", tool_call_id: id, content: "cold" },
        { role: "user", content: "Also, what day is it?" },
      ],
      tools: TOOLS,
      reasoning_effort: "low",
      max_tokens: 4000,
    });
    assert.equal(chat.choices[0].message.content, answer.text);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 120, completion: 12 });
    const responses = await openAiClient(d).responses.create({
      model: CLAUDE_MODEL,
      input: [
        { role: "user", content: "Weather in Oslo?" },
        { type: "function_call", call_id: id, ...call },
        { type: "function_call_output", call_id: id, output: "cold" },
        { role: "user", content: "Also, what day is it?" },
      ],
      tools: [{
        type: "function",
        name: "get_weather",
        parameters: {
          type: "object",
          properties: { city: { type: "string" } },
          required: ["city"],
        },
        strict: false,
      }],
      reasoning: { effort: "low" },
      max_output_tokens: 4000,
      store: false,
    });
    assert.equal(responses.output_text, answer.text);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 120, completion: 12 });
    assert.deepEqual(d.claude.messages().map((m) => m.body.thinking), [undefined, undefined]);
  }));

Deno.test("openai SDK: a Claude stream cut before its final usage is billed at the cache prices its start reported", () =>
  withDialect(async (d) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(300);
    // Cut after message_start, the text block's start and its first delta: no message_delta.
    d.claude.script({
      text: "A summary that the cut leaves unfinished.",
      inputTokens: 1612,
      cacheCreationInputTokens: 1600,
      outputTokens: 12,
      cutAfterEvents: 3,
    });
    const stream = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [
        {
          role: "system",
          content: [{ type: "text", text: long, cache_control: { type: "ephemeral" } }],
        },
        { role: "user", content: "Summarise." },
      ] as ChatCompletionMessageParam[],
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const _ of stream) { /* read to the cut */ }
    });
    const [record] = await d.newUsage();
    assert.equal(record.outcome, "upstream_cut");
    assert.equal(record.countedLocally, true);
    assert.equal(record.promptTokens, 1612);
    assert.equal(record.cacheWriteTokens, 1600, "cache writes at their price, above input's");
    assert.equal(record.cachedTokens ?? 0, 0);
    const model = d.s.catalog.get(CLAUDE_MODEL)!;
    assert.equal(record.cost, usageCost(model, record));
  }));

Deno.test("openai SDK: cached input is reported and billed at the cache prices, on both kinds", () =>
  withDialect(async (d) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(300);
    d.openai.script({ content: "ok", promptTokens: 2006, cachedTokens: 1920, completionTokens: 3 });
    const viaOpenAi = await openAiClient(d).chat.completions.create({
      model: OPENAI_MODEL,
      messages: [{ role: "system", content: long }, { role: "user", content: "Summarise." }],
    });
    assert.equal(viaOpenAi.usage?.prompt_tokens_details?.cached_tokens, 1920);
    await assertCharged(d, OPENAI_MODEL, { prompt: 2006, cached: 1920, completion: 3 });

    d.claude.script(
      { text: "ok", inputTokens: 1612, cacheCreationInputTokens: 1600, outputTokens: 3 },
      { text: "ok", inputTokens: 1612, cacheReadInputTokens: 1600, outputTokens: 3 },
    );
    // Anthropic's cache breakpoint, as a text part's cache_control (sent to Anthropic only).
    const messages = [
      {
        role: "system",
        content: [{ type: "text", text: long, cache_control: { type: "ephemeral" } }],
      },
      { role: "user", content: "Summarise." },
    ] as ChatCompletionMessageParam[];
    const write = await openAiClient(d).chat.completions.create({ model: CLAUDE_MODEL, messages });
    assert.equal(write.usage?.prompt_tokens, 1612);
    assert.equal(d.claude.messages()[0].body.system[0].cache_control.type, "ephemeral");
    await assertCharged(d, CLAUDE_MODEL, { prompt: 1612, cacheWrite: 1600, completion: 3 });
    const read = await openAiClient(d).chat.completions.create({ model: CLAUDE_MODEL, messages });
    assert.equal(read.usage?.prompt_tokens_details?.cached_tokens, 1600);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 1612, cached: 1600, completion: 3 });
  }));

Deno.test("openai SDK: a Claude breakpoint kept for an hour is sent with its ttl, billed at the 1-hour write price, and held at it", () =>
  withDialect(async (d) => {
    // Words the Claude bound holds at their legacy count, so the hold has no slack to hide in.
    const long = "pifrrlt ".repeat(1_000);
    const messages = [
      {
        role: "system",
        content: [{ type: "text", text: long, cache_control: { type: "ephemeral", ttl: "1h" } }],
      },
      { role: "user", content: "Summarise." },
    ] as ChatCompletionMessageParam[];
    // The whole prompt written to the cache, for an hour: the dearest input Anthropic bills.
    const allWritten = { text: "ok", cacheCreationInputTokens: 1e9, outputTokens: 3 };
    d.claude.script(
      { ...allWritten, cacheCreation1hInputTokens: 1e9 },
      { ...allWritten, cacheCreation1hInputTokens: 1e9 },
    );
    await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      max_tokens: 3,
    });
    const [sent] = d.claude.messages();
    assert.deepEqual(sent.body.system[0].cache_control, { type: "ephemeral", ttl: "1h" });
    const prompt = sent.inputTokens;
    const learned = await assertCharged(d, CLAUDE_MODEL, {
      prompt,
      cacheWrite: prompt,
      cacheWrite1h: prompt,
      completion: 3,
    });

    // An app holding exactly the hold is charged in full: the hold priced the hour's writes.
    const exact = await d.s.newApp("exact");
    await spendDownTo(d.s.kv, exact.appId, learned.reserved);
    const client = new OpenAI({ baseURL: d.baseURL, apiKey: exact.apiKey, maxRetries: 0 });
    const { response } = await client.chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      max_tokens: 3,
    })
      .withResponse();
    const record = (await usageRecords(d.s.kv, exact.appId)).find((u) => u.model === CLAUDE_MODEL)!;
    assert.equal(record.reserved, learned.reserved);
    assert.equal(record.cacheWrite1hTokens, prompt);
    assert.equal(record.uncharged, 0, `held ${record.reserved}, billed ${record.cost}`);
    assert.equal(
      record.cost,
      expectedCharge(CLAUDE_MODEL, {
        prompt,
        cacheWrite: prompt,
        cacheWrite1h: prompt,
        completion: 3,
      }),
    );
    assert.equal(response.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
  }));

Deno.test("openai SDK: GPT-5.6's cache writes are billed at the cache-write price, streamed or not, and the hold covered them", () =>
  withDialect(async (d) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(300);
    const messages = [{ role: "system" as const, content: long }, {
      role: "user" as const,
      content: "Summarise.",
    }];
    const answer = {
      content: "ok",
      promptTokens: 2006,
      cacheWriteTokens: 1920,
      completionTokens: 3,
    };
    d.openai.script(answer, answer);
    const res = await openAiClient(d).chat.completions.create({
      model: CACHE_WRITING_GPT,
      messages,
    });
    const details = res.usage?.prompt_tokens_details as Record<string, number>;
    assert.equal(details.cache_write_tokens, 1920);
    const usage = { prompt: 2006, cacheWrite: 1920, completion: 3 };
    const record = await assertCharged(d, CACHE_WRITING_GPT, usage);
    // Written at 1.25× input: dearer than the same prompt uncached.
    assert.ok(record.cost > expectedCharge(CACHE_WRITING_GPT, { prompt: 2006, completion: 3 }));
    assert.ok(record.reserved >= record.cost, "the hold covered the bill");

    const stream = await openAiClient(d).chat.completions.create({
      model: CACHE_WRITING_GPT,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const _ of stream) { /* read to the end */ }
    await assertCharged(d, CACHE_WRITING_GPT, usage);

    // Explicit breakpoints and options reach OpenAI as sent, through chat and Responses.
    d.openai.script(answer, answer);
    const breakpoint = { mode: "explicit" as const, ttl: "12h" as const };
    await openAiClient(d).chat.completions.create({
      model: CACHE_WRITING_GPT,
      messages: [
        {
          role: "system",
          content: [{ type: "text", text: long, prompt_cache_breakpoint: breakpoint }],
        },
        { role: "user", content: "Summarise." },
      ],
      prompt_cache_options: { mode: "explicit" },
    });
    const chat = d.openai.chats.at(-1)!.body;
    assert.deepEqual(chat.messages[0].content[0].prompt_cache_breakpoint, breakpoint);
    assert.deepEqual(chat.prompt_cache_options, { mode: "explicit" });
    await assertCharged(d, CACHE_WRITING_GPT, usage);
    const response = await openAiClient(d).responses.create({
      model: CACHE_WRITING_GPT,
      input: [{
        role: "user",
        content: [{ type: "input_text", text: long, prompt_cache_breakpoint: breakpoint }],
      }],
      prompt_cache_options: { mode: "explicit" },
    });
    // The writes the cost includes are shown there too.
    const shown = response.usage?.input_tokens_details as unknown as Record<string, number>;
    assert.equal(shown.cache_write_tokens, 1920);
    const viaResponses = d.openai.chats.at(-1)!.body;
    assert.deepEqual(viaResponses.messages[0].content[0].prompt_cache_breakpoint, breakpoint);
    await assertCharged(d, CACHE_WRITING_GPT, usage);
  }));

Deno.test("openai SDK, anthropic kind: a tool Claude calls without arguments runs under runTools, its arguments {}", () =>
  withDialect(async (d) => {
    // Claude streams such a call as input {} and one empty partial_json (the fake does too).
    const noArguments = { content: [{ type: "tool_use" as const, name: "now", input: {} }] };
    d.claude.script(noArguments, { text: "It is noon." });
    const runner = openAiClient(d).chat.completions.runTools({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "What time is it?" }],
      tools: [{
        type: "function",
        function: {
          name: "now",
          description: "The time now",
          parameters: { type: "object", properties: {} },
          function: () => "12:00",
          parse: JSON.parse,
        },
      }],
    });
    assert.equal(await runner.finalContent(), "It is noon.");
    const call = runner.messages.find((m) => m.role === "assistant" && m.tool_calls?.length);
    assert.ok(call && call.role === "assistant");
    assert.equal(
      call.tool_calls![0].type === "function" && call.tool_calls![0].function.arguments,
      "{}",
    );

    d.claude.script(noArguments);
    const streamed = await openAiClient(d).chat.completions.stream({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "What time is it?" }],
      tools: [{ type: "function", function: { name: "now" } }],
    }).finalChatCompletion();
    const fragment = streamed.choices[0].message.tool_calls![0];
    assert.equal(fragment.type === "function" && fragment.function.arguments, "{}");

    d.claude.script(noArguments);
    const response = await openAiClient(d).responses.create({
      model: CLAUDE_MODEL,
      input: "What time is it?",
      tools: [{ type: "function", name: "now", parameters: null, strict: false }],
    });
    const functionCall = response.output.find((item) => item.type === "function_call");
    assert.equal(functionCall?.type === "function_call" && functionCall.arguments, "{}");
  }));

Deno.test("openai SDK, anthropic kind: conversations OpenAI accepts reach Claude in a shape it accepts, or are refused before anything is reserved", () =>
  withDialect(async (d) => {
    const call = {
      id: "call_abc123",
      type: "function" as const,
      function: { name: "get_weather", arguments: '{"city":"P"}' },
    };
    const accepted: [string, Record<string, unknown>][] = [
      ["a greeting opens the conversation", {
        messages: [
          { role: "system", content: "s" },
          { role: "assistant", content: "Hi! How can I help?" },
          { role: "user", content: "q" },
        ],
      }],
      ["GPT history: blank text beside tool calls", {
        tools: TOOLS,
        messages: [
          { role: "user", content: "q" },
          { role: "assistant", content: "\n\n", tool_calls: [call] },
          { role: "tool", tool_call_id: call.id, content: "sunny" },
        ],
      }],
      ["an empty assistant message mid-conversation", {
        messages: [
          { role: "user", content: "q" },
          { role: "assistant", content: "" },
          { role: "user", content: "again" },
        ],
      }],
      ["a prefill with a trailing space", {
        messages: [{ role: "user", content: "q" }, {
          role: "assistant",
          content: "The answer is ",
        }],
      }],
      ["tool history without tools (a summary step)", {
        messages: [
          { role: "user", content: "q" },
          { role: "assistant", content: null, tool_calls: [call] },
          { role: "tool", tool_call_id: call.id, content: "sunny" },
          { role: "user", content: "Summarise." },
        ],
      }],
      ["tool call ids OpenAI takes: Kimi's, and one reused in the next turn", {
        tools: TOOLS,
        messages: [
          { role: "user", content: "q" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ ...call, id: "functions.get_weather:0" }],
          },
          { role: "tool", tool_call_id: "functions.get_weather:0", content: "sunny" },
          { role: "user", content: "again" },
          { role: "assistant", content: null, tool_calls: [call] },
          { role: "tool", tool_call_id: call.id, content: "rain" },
          { role: "user", content: "and again" },
          { role: "assistant", content: null, tool_calls: [call] },
          { role: "tool", tool_call_id: call.id, content: "snow" },
        ],
      }],
      ["a tool whose parameters are {}", {
        tools: [{ type: "function", function: { name: "noop", parameters: {} } }],
        messages: [{ role: "user", content: "q" }],
      }],
    ];
    for (const [label, body] of accepted) {
      const answer = await openAiClient(d).chat.completions.create(
        {
          model: CLAUDE_MODEL,
          ...body,
        } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming,
      ).catch((error) => assert.fail(`${label}: ${error}`));
      assert.equal(answer.choices[0].message.content, "Hello!", label);
    }
    const usage = await d.newUsage();
    assert.equal(usage.length, accepted.length);
    assert.deepEqual(usage.map((u) => u.uncharged), accepted.map(() => 0), "each held in full");

    const ask = [{ role: "user", content: "q" }];
    const refused: [string, Record<string, unknown>, string][] = [
      ["system only", { messages: [{ role: "system", content: "Write a haiku." }] }, "messages"],
      [
        "an empty user message",
        { messages: [{ role: "user", content: "" }] },
        "messages[0].content",
      ],
      ["thinking at temperature 0.2", {
        messages: ask,
        reasoning_effort: "low",
        max_completion_tokens: 4000,
        temperature: 0.2,
      }, "temperature"],
      ["a parallel tool call answered in part at the end", {
        tools: TOOLS,
        messages: [
          { role: "user", content: "q" },
          { role: "assistant", content: null, tool_calls: [call, { ...call, id: "call_def456" }] },
          { role: "tool", tool_call_id: call.id, content: "sunny" },
        ],
      }, "messages[1].tool_calls"],
    ];
    const sent = d.claude.messages().length;
    for (const [label, body, param] of refused) {
      const error = await openAiClient(d).chat.completions.create(
        {
          model: CLAUDE_MODEL,
          ...body,
        } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming,
      ).then(() => assert.fail(`${label}: accepted`), (e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, label);
      assert.equal(error.param, param, label);
    }
    assert.equal(d.claude.messages().length, sent, "the refusals never reached Claude");
    assert.equal((await d.newUsage()).length, 0, "and reserved nothing");
  }));

Deno.test("openai SDK, anthropic kind: with reasoning_effort, a tool_choice that forces a tool is answered by a turn without thinking, as Anthropic takes no budget beside it", () =>
  withDialect(async (d) => {
    const ask = [{ role: "user" as const, content: "Weather in Paris?" }];
    for (
      const [tool_choice, sentChoice] of [
        ["required", { type: "any" }],
        [{ type: "function", function: { name: "get_weather" } }, {
          type: "tool",
          name: "get_weather",
        }],
      ] as const
    ) {
      const { response } = await openAiClient(d).chat.completions.create({
        model: CLAUDE_MODEL,
        messages: ask,
        reasoning_effort: "low",
        max_completion_tokens: 4000,
        tools: TOOLS,
        tool_choice,
      } as OpenAI.ChatCompletionCreateParamsNonStreaming).withResponse();
      const sent = d.claude.messages().at(-1)!.body;
      assert.equal(sent.thinking, undefined, JSON.stringify(tool_choice));
      assert.deepEqual(sent.tool_choice, sentChoice);
      const [usage] = await d.newUsage();
      assert.equal(response.headers.get("tollbooth-request-cost"), formatUsd(usage.cost));
    }
  }));

Deno.test("openai SDK: a PNG labelled image/jpeg, as many clients label every image, is answered on both kinds, in chat and Responses: OpenAI gets it as sent, Claude the type of its bytes", () =>
  withDialect(async (d) => {
    const url = `data:image/jpeg;base64,${pngBase64(64, 64)}`;
    const client = openAiClient(d);
    for (const model of [OPENAI_MODEL, RESPONSES_MODEL, CLAUDE_MODEL]) {
      await client.chat.completions.create({
        model,
        messages: [{
          role: "user",
          content: [{ type: "text", text: "What is this?" }, {
            type: "image_url",
            image_url: { url },
          }],
        }],
      });
      await client.responses.create({
        model,
        input: [{
          role: "user",
          content: [{ type: "input_text", text: "What is this?" }, {
            type: "input_image",
            image_url: url,
            detail: "auto",
          }],
        }],
      });
    }
    for (const chat of d.openai.chats) {
      assert.equal(chat.body.messages[0].content[1].image_url.url, url, "OpenAI reads the bytes");
    }
    assert.equal(d.openai.chats.length, 2);
    for (const response of d.openai.responses) {
      assert.equal(response.body.input[0].content[1].image_url, url, "as sent to Responses too");
    }
    assert.equal(d.openai.responses.length, 2);
    const claudeSources = d.claude.messages().map((m) => m.body.messages[0].content[1].source);
    assert.deepEqual(claudeSources.map((source) => source.media_type), ["image/png", "image/png"]);
    const usage = await d.newUsage();
    assert.equal(usage.length, 6);
    assert.deepEqual(usage.map((u) => u.uncharged), [0, 0, 0, 0, 0, 0]);
  }));

Deno.test("openai SDK, anthropic kind: with reasoning_effort, a json_schema answer parses though Claude wrote text before calling the answer tool", () =>
  withDialect(async (d) => {
    // Thinking leaves the answer tool unforced, so Claude may say something first.
    const preamble = (req: { body: { tools: { name: string }[] } }) => ({
      content: [
        { type: "thinking" as const, thinking: "ok" },
        { type: "text" as const, text: "Here is the person." },
        { type: "tool_use" as const, name: req.body.tools.at(-1)!.name, input: { name: "Ann" } },
      ],
    });
    const body = {
      model: CLAUDE_MODEL,
      messages: [{ role: "user" as const, content: "Who?" }],
      reasoning_effort: "low" as const,
      max_completion_tokens: 4000,
      response_format: {
        type: "json_schema" as const,
        json_schema: {
          name: "person",
          schema: { type: "object", properties: { name: { type: "string" } } },
        },
      },
    };
    d.claude.script(preamble);
    const whole = await openAiClient(d).chat.completions.parse(body);
    assert.equal(whole.choices[0].message.content, '{"name":"Ann"}');
    assert.deepEqual(whole.choices[0].message.parsed, { name: "Ann" });
    assert.equal(whole.choices[0].finish_reason, "stop");

    d.claude.script(preamble);
    const streamed = await openAiClient(d).chat.completions.stream(body).finalChatCompletion();
    assert.deepEqual(streamed.choices[0].message.parsed, { name: "Ann" });

    // Never called: the text is the answer.
    d.claude.script({
      content: [{ type: "thinking", thinking: "ok" }, { type: "text", text: "I cannot." }],
    });
    const unanswered = await openAiClient(d).chat.completions.create(body);
    assert.equal(unanswered.choices[0].message.content, "I cannot.");
  }));

Deno.test("openai SDK, anthropic kind: text held back from a json_schema answer is billed when the stream is cut", () =>
  withDialect(async (d) => {
    const held = "Here is the person.";
    // Cut after the text block (message_start, thinking with its ping, signature and stop, the
    // text's start, its one delta and stop): no message_delta, so the output is counted by us.
    d.claude.script((req) => ({
      content: [
        { type: "thinking", thinking: "ok", chunks: ["ok"] },
        { type: "text", text: held, chunks: [held] },
        { type: "tool_use", name: req.body.tools.at(-1).name, input: { name: "Ann" } },
      ],
      cutAfterEvents: 9,
    }));
    const stream = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Who?" }],
      reasoning_effort: "low",
      max_completion_tokens: 4000,
      response_format: { type: "json_object" },
      stream: true,
    });
    let content = "";
    await assert.rejects(async () => {
      for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? "";
    });
    assert.equal(content, "", "held back, never shown");
    const [record] = await d.newUsage();
    assert.equal(record.outcome, "upstream_cut");
    assert.equal(record.countedLocally, true);
    assert.equal(record.completionTokens, claudeTokenBound("ok") + claudeTokenBound(held));
  }));

Deno.test("openai SDK, anthropic kind: a json_schema named after a tool, at a length OpenAI takes, is answered through an answer tool whose name Anthropic takes, streamed or not", () =>
  withDialect(async (d) => {
    // 61 characters: the name, and the name the answer tool would take first, are tools too.
    const name = "extract_structured_details_about_every_person_named_in_a_text";
    const tools = [name, `${name}_response`.slice(0, 64)].map((n) => ({
      type: "function" as const,
      function: { name: n, parameters: { type: "object", properties: {} } },
    }));
    const answer = { name: "Ada Lovelace", born: 1815 };
    const usages = [];
    for (const stream of [false, true]) {
      d.claude.script((req) => ({
        content: [{ type: "tool_use", name: req.body.tools.at(-1).name, input: answer }],
        outputTokens: 14,
      }));
      const request = {
        model: CLAUDE_MODEL,
        messages: [{ role: "user" as const, content: "Who wrote the first program?" }],
        tools,
        tool_choice: "auto" as const,
        response_format: {
          type: "json_schema" as const,
          json_schema: { name, schema: PERSON_SCHEMA, strict: true },
        },
      };
      let content = "";
      if (stream) {
        const chunks = await openAiClient(d).chat.completions.create({ ...request, stream });
        for await (const chunk of chunks) content += chunk.choices[0]?.delta.content ?? "";
      } else {
        const res = await openAiClient(d).chat.completions.create(request);
        assert.equal(res.choices[0].finish_reason, "stop");
        content = res.choices[0].message.content!;
      }
      assert.deepEqual(JSON.parse(content), answer, `stream: ${stream}`);
      const sent = d.claude.messages().at(-1)!;
      const names = sent.body.tools.map((t: { name: string }) => t.name);
      assert.equal(new Set(names).size, 3, "three tools, each its own name");
      assert.ok(names.every((n: string) => /^[a-zA-Z0-9_-]{1,64}$/.test(n)), names.join(", "));
      usages.push({ prompt: sent.inputTokens, completion: 14 });
    }
    await assertCharged(d, CLAUDE_MODEL, ...usages);
  }));

Deno.test("openai SDK, anthropic kind: a client that leaves a stream Claude thinks in unasked pays the thinking: the stream is read to its usage", () =>
  withDialect(async (d) => {
    // As a model that thinks without being asked and does not show it ("omitted" display).
    d.claude.script(
      {
        content: [
          { type: "thinking", thinking: "", chunks: [] },
          { type: "text", text: "word ".repeat(200) },
        ],
        thinkingTokens: 5000,
        chunkDelayMs: 5,
      } as Parameters<typeof d.claude.script>[0],
    );
    const leave = new AbortController();
    const res = await fetch(`${d.baseURL}/chat/completions`, {
      method: "POST",
      signal: leave.signal,
      headers: { authorization: `Bearer ${d.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: CLAUDE_MODEL,
        stream: true,
        max_tokens: 8000,
        messages: [{ role: "user", content: "Explain." }],
      }),
    });
    const reader = res.body!.getReader();
    let text = "";
    while ((text.match(/word/g) ?? []).length < 3) {
      text += new TextDecoder().decode((await reader.read()).value);
    }
    leave.abort();
    assert.equal(d.claude.messages()[0].body.thinking, undefined, "not asked to think");
    let records: Awaited<ReturnType<typeof d.newUsage>> = [];
    for (let i = 0; i < 300 && records.length === 0; i++) {
      records = await d.newUsage();
      if (records.length === 0) await new Promise((r) => setTimeout(r, 20));
    }
    const [record] = records;
    assert.equal(record.outcome, "client_closed");
    assert.equal(record.countedLocally, false, "Claude's own usage, read to the end");
    assert.ok(record.completionTokens >= 5000, `${record.completionTokens} output tokens charged`);
  }));

Deno.test("openai SDK: the request id reaches the client, on an answer (request_id) and on an error (requestID)", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Hi." });
    const client = new OpenAI({ baseURL: d.baseURL, apiKey: d.apiKey, maxRetries: 0 });
    const { request_id, response } = await client.chat.completions.create({
      model: OPENAI_MODEL,
      messages: [{ role: "user", content: "hi" }],
    }).withResponse();
    assert.match(request_id ?? "", /^req_/);
    assert.equal(request_id, response.headers.get("tollbooth-request-id"));
    const error = await client.chat.completions.create({
      model: "no/such-model",
      messages: [{ role: "user", content: "hi" }],
    }).catch((e) => e);
    assert.ok(error instanceof OpenAI.APIError);
    assert.match(error.requestID ?? "", /^req_/);
  }));

/** OpenAI's allowed tools over TOOLS: the model may call only `names`. */
const allowedTools = (
  mode: "auto" | "required",
  names: string[],
): OpenAI.Chat.ChatCompletionAllowedToolChoice => ({
  type: "allowed_tools",
  allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) },
});

Deno.test("openai SDK: allowed_tools reach an OpenAI-kind route as sent with every tool, and Claude as the tools it may call, billed exactly", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Time in Paris?" }];

    d.openai.script({
      toolCalls: [{ name: "get_time", arguments: { city: "Paris" } }],
      promptTokens: 120,
      completionTokens: 20,
    });
    const choice = allowedTools("required", ["get_time"]);
    const openai = await client.chat.completions.create({
      model: OPENAI_MODEL,
      messages,
      tools: TOOLS,
      tool_choice: choice,
    });
    assert.equal(openai.choices[0].finish_reason, "tool_calls");
    assert.deepEqual(d.openai.chats[0].body.tool_choice, choice);
    assert.equal(d.openai.chats[0].body.tools.length, 2, "every tool, for the cached prefix");
    await assertCharged(d, OPENAI_MODEL, { prompt: 120, completion: 20 });

    // A route served through OpenAI's Responses API gets them in its flat shape.
    d.openai.script({
      toolCalls: [{ name: "get_time", arguments: { city: "Paris" } }],
      promptTokens: 120,
      completionTokens: 20,
    });
    await client.chat.completions.create({
      model: RESPONSES_MODEL,
      messages,
      tools: TOOLS,
      tool_choice: choice,
    });
    assert.deepEqual(d.openai.responses[0].body.tool_choice, {
      type: "allowed_tools",
      mode: "required",
      tools: [{ type: "function", name: "get_time" }],
    });
    assert.equal(d.openai.responses[0].body.tools.length, 2);
    await assertCharged(d, RESPONSES_MODEL, { prompt: 120, completion: 20 });

    // One tool that must be called: Claude's own tool choice, every tool sent.
    const call = { type: "tool_use" as const, name: "get_time", input: { city: "Paris" } };
    d.claude.script({ content: [call], inputTokens: 600, outputTokens: 30 });
    const forced = await client.chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      tools: TOOLS,
      tool_choice: choice,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls");
    const forcedBody = d.claude.messages()[0].body;
    assert.deepEqual(forcedBody.tool_choice, { type: "tool", name: "get_time" });
    assert.deepEqual(forcedBody.tools.map((t: { name: string }) => t.name), [
      "get_weather",
      "get_time",
    ]);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 600, completion: 30 });

    // Otherwise Claude, which has no allowed tools, is offered only the tools it may call.
    d.claude.script({ content: [call], inputTokens: 500, outputTokens: 30 });
    await client.chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      tools: TOOLS,
      tool_choice: allowedTools("auto", ["get_time"]),
    });
    const offered = d.claude.messages()[1].body;
    assert.deepEqual(offered.tool_choice, { type: "auto" });
    assert.deepEqual(offered.tools.map((t: { name: string }) => t.name), ["get_time"]);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 500, completion: 30 });

    // Through the Responses API, in its flat shape, to both kinds.
    d.claude.script({ content: [call], inputTokens: 500, outputTokens: 30 });
    const response = await client.responses.create({
      model: CLAUDE_MODEL,
      input: "Time in Paris?",
      tools: ["get_weather", "get_time"].map((name) => ({
        type: "function" as const,
        name,
        parameters: { type: "object", properties: { city: { type: "string" } } },
        strict: false,
      })),
      tool_choice: {
        type: "allowed_tools",
        mode: "auto",
        tools: [{ type: "function", name: "get_time" }],
      },
    });
    assert.ok(response.output.some((item) => item.type === "function_call"));
    assert.deepEqual(
      d.claude.messages()[2].body.tools.map((t: { name: string }) => t.name),
      ["get_time"],
    );
    await assertCharged(d, CLAUDE_MODEL, { prompt: 500, completion: 30 });
  }));

Deno.test("openai SDK: allowed_tools naming no declared tool, or without a mode, are refused before anything is reserved", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Time in Paris?" }];
    for (const model of [OPENAI_MODEL, CLAUDE_MODEL]) {
      const error = await client.chat.completions.create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: allowedTools("auto", ["get_news"]),
      }).catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.code, "invalid_parameter");
      assert.equal(error.param, "tool_choice.allowed_tools.tools[0].function.name");
      const modeless = await client.chat.completions.create({
        model,
        messages,
        tools: TOOLS,
        tool_choice: {
          type: "allowed_tools",
          allowed_tools: { tools: [{ type: "function", function: { name: "get_time" } }] },
        } as unknown as OpenAI.Chat.ChatCompletionAllowedToolChoice,
      }).catch((e) => e);
      assert.equal(modeless.status, 400);
      assert.equal(modeless.param, "tool_choice.allowed_tools.mode");
    }
    const responses = await client.responses.create({
      model: CLAUDE_MODEL,
      input: "Time in Paris?",
      tools: [{ type: "function", name: "get_time", parameters: null, strict: false }],
      tool_choice: {
        type: "allowed_tools",
        mode: "required",
        tools: [{ type: "function", name: "get_news" }],
      },
    }).catch((e) => e);
    assert.equal(responses.status, 400);
    assert.equal(responses.param, "tool_choice.tools[0].name");
    assert.equal(d.openai.chats.length + d.claude.messages().length, 0);
    assert.equal((await d.newUsage()).length, 0);
  }));

Deno.test("openai SDK, Claude 4.5: strict tools Anthropic finds too complex to compile are sent once more unstrict, answered and billed once", () =>
  withDialect(async (d) => {
    const tooComplex = (request: { body: { tools?: { strict?: boolean }[] } }) =>
      request.body.tools?.some((t) => t.strict)
        ? { status: 400, error: { message: "Schema is too complex for compilation." } }
        : {
          content: [{
            type: "tool_use" as const,
            name: "forecast",
            input: { city: "Paris", days: 3 },
          }],
          inputTokens: 400,
          outputTokens: 30,
        };
    d.claude.script(tooComplex, tooComplex);
    const Forecast = z.object({ city: z.string(), days: z.int() });
    const answer = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Paris, three days?" }],
      tools: [zodFunction({ name: "forecast", parameters: Forecast })],
    });
    const call = answer.choices[0].message.tool_calls![0];
    assert.ok(call.type === "function");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris", days: 3 });
    const [refused, retried] = d.claude.messages().map((m) => m.body.tools);
    assert.equal(refused[0].strict, true);
    assert.equal(retried[0].strict, undefined);
    assert.deepEqual(retried[0].input_schema, refused[0].input_schema);
    assert.equal(d.claude.messages().length, 2);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 400, completion: 30 });
  }));

Deno.test("openai SDK, Claude 4.5: more strict tools than Anthropic takes in one request go unstrict, and the loop is answered", () =>
  withDialect(async (d) => {
    d.claude.script({
      content: [{ type: "tool_use", name: "tool_20", input: { note: null } }],
      inputTokens: 900,
      outputTokens: 20,
    });
    const Note = z.object({ note: z.string().nullable() });
    const tools = Array.from(
      { length: 21 },
      (_, i) => zodFunction({ name: `tool_${i}`, parameters: Note }),
    );
    const answer = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Take a note." }],
      tools,
    });
    assert.equal(answer.choices[0].message.tool_calls![0].type, "function");
    const sent = d.claude.messages()[0].body.tools as { strict?: boolean }[];
    assert.equal(sent.length, 21);
    assert.equal(sent.filter((t) => t.strict).length, 0);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 900, completion: 20 });
  }));

Deno.test("openai SDK, Claude 4.5: a zodFunction tool goes strict, its schema in the subset Claude's grammar takes (zod's integer bounds told in the description), and its call parses; an unstrict tool beside it stays unstrict; billed exactly", () =>
  withDialect(async (d) => {
    d.claude.script({
      content: [{ type: "tool_use", name: "forecast", input: { city: "Paris", days: 3 } }],
      inputTokens: 400,
      outputTokens: 30,
    });
    const Forecast = z.object({ city: z.string(), days: z.int() });
    // The parse helper auto-parses only when every tool is strict: create, beside an unstrict one.
    const answer = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Paris, three days?" }],
      tools: [zodFunction({ name: "forecast", parameters: Forecast }), TOOLS[0]],
    });
    const call = answer.choices[0].message.tool_calls![0];
    assert.ok(call.type === "function");
    assert.deepEqual(Forecast.parse(JSON.parse(call.function.arguments)), {
      city: "Paris",
      days: 3,
    });
    const [forecast, weather] = d.claude.messages()[0].body.tools;
    assert.equal(forecast.strict, true);
    assert.equal(forecast.input_schema.additionalProperties, false);
    assert.equal(forecast.input_schema.properties.days.type, "integer");
    assert.equal(forecast.input_schema.properties.days.minimum, undefined);
    assert.match(forecast.input_schema.properties.days.description, /minimum/);
    assert.equal(weather.strict, undefined);
    assert.deepEqual(weather.input_schema, {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    });
    await assertCharged(d, CLAUDE_MODEL, { prompt: 400, completion: 30 });
  }));
