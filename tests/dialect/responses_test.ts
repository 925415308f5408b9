/**
 * POST /v1/responses on both provider kinds, driven by the openai SDK and by the Vercel AI SDK's
 * default OpenAI provider (which speaks the Responses API): each request paid exactly its
 * upstream usage at the catalog's prices.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { usageCost } from "@/lib/catalog/mod.ts";
import { assertMatchesOpenApi } from "../openapi_check.ts";
import {
  assertCharged,
  CLAUDE_MODEL,
  type Dialect,
  OPENAI_MODEL,
  scriptAgentLoop,
  withDialect,
} from "./harness.ts";

const KINDS = [
  { kind: "openai", model: OPENAI_MODEL },
  { kind: "anthropic", model: CLAUDE_MODEL },
] as const;

type Kind = (typeof KINDS)[number]["kind"];

const client = (d: Dialect) => new OpenAI({ baseURL: d.baseURL, apiKey: d.apiKey, maxRetries: 0 });

/** Scripts a text answer with known usage on the kind's fake; the usage it bills. */
function scriptText(d: Dialect, kind: Kind, text: string) {
  if (kind === "openai") {
    d.openai.script({ content: text, promptTokens: 42, completionTokens: 9 });
    return { prompt: 42, completion: 9 };
  }
  d.claude.script({ text, inputTokens: 50, outputTokens: 11 });
  return { prompt: 50, completion: 11 };
}

/** The messages the upstream got on its last request, in its own wire format. */
function lastUpstreamMessages(d: Dialect, kind: Kind): { role: string; content: unknown }[] {
  return kind === "openai" ? d.openai.chats.at(-1)!.body.messages : d.claude.messages().at(-1)!.body
    .messages;
}

const WEATHER_TOOL = {
  type: "function" as const,
  name: "weather",
  description: "The weather in a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
};

for (const { kind, model } of KINDS) {
  Deno.test(`openai SDK responses.create, ${kind} kind: text answer charged its upstream usage`, () =>
    withDialect(async (d) => {
      const usage = scriptText(d, kind, "Hello from the upstream.");
      const { data, response } = await client(d).responses.create({
        model,
        instructions: "Be brief.",
        input: "Say hello.",
        max_output_tokens: 200,
      }).withResponse();
      assert.equal(data.object, "response");
      assert.equal(data.status, "completed");
      assert.equal(data.output_text, "Hello from the upstream.");
      assert.equal(data.model, model);
      assert.equal(data.usage?.input_tokens, usage.prompt);
      assert.equal(data.usage?.output_tokens, usage.completion);
      const record = await assertCharged(d, model, usage);
      assert.equal(response.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
      assert.match(response.headers.get("tollbooth-request-id")!, /^req_/);
      assert.ok(response.headers.get("x-ratelimit-remaining-requests"));
      const sent = lastUpstreamMessages(d, kind);
      assert.match(JSON.stringify(sent), /Say hello\./);
      if (kind === "openai") {
        assert.deepEqual(d.openai.chats.at(-1)!.body.messages[0], {
          role: "system",
          content: "Be brief.",
        });
      } else {
        assert.equal(d.claude.messages().at(-1)!.body.system, "Be brief.");
      }
    }));

  Deno.test(`openai SDK responses stream, ${kind} kind: the documented events, usage and cost at the end`, () =>
    withDialect(async (d) => {
      const usage = scriptText(d, kind, "Streaming works well.");
      const stream = await client(d).responses.create({
        model,
        input: "Stream something.",
        stream: true,
      });
      const types: string[] = [];
      let text = "";
      let completed: Record<string, unknown> | null = null;
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === "response.output_text.delta") text += event.delta;
        if (event.type === "response.completed") {
          completed = event.response as unknown as Record<string, unknown>;
        }
      }
      assert.equal(text, "Streaming works well.");
      assert.deepEqual(types.slice(0, 4), [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
      ]);
      assert.deepEqual(types.slice(-4), [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
      ]);
      assert.ok(completed);
      const u = completed.usage as Record<string, unknown>;
      assert.equal(u.input_tokens, usage.prompt);
      assert.equal(u.output_tokens, usage.completion);
      const record = await assertCharged(d, model, usage);
      assert.equal(u.cost, formatUsd(record.cost));
    }));

  Deno.test(`openai SDK function round trip, ${kind} kind: call, output, answer; with and without stored responses`, () =>
    withDialect(async (d) => {
      const openai = client(d);
      const usages = [...scriptAgentLoop(d, kind), ...scriptAgentLoop(d, kind)];
      // Stateless: the client sends the whole conversation back (store: false).
      const first = await openai.responses.create({
        model,
        input: "Weather in Paris?",
        tools: [WEATHER_TOOL],
        store: false,
      });
      const call = first.output.find((i) => i.type === "function_call")!;
      assert.ok(call && call.type === "function_call");
      assert.equal(call.name, "weather");
      assert.deepEqual(JSON.parse(call.arguments), { city: "Paris" });
      assert.equal((first as unknown as { store: boolean }).store, false);
      const second = await openai.responses.create({
        model,
        input: [
          { role: "user", content: "Weather in Paris?" },
          call,
          { type: "function_call_output", call_id: call.call_id, output: "Paris: sunny, 21 C" },
        ],
        tools: [WEATHER_TOOL],
        store: false,
      });
      assert.equal(second.output_text, "It is sunny in Paris.");
      assert.match(JSON.stringify(lastUpstreamMessages(d, kind)), /Paris: sunny, 21 C/);
      // Stored: the next turn names the previous response and sends only the tool's output.
      const stored = await openai.responses.create({
        model,
        input: "Weather in Paris?",
        tools: [WEATHER_TOOL],
      });
      assert.equal((stored as unknown as { store: boolean }).store, true);
      const storedCall = stored.output.find((i) => i.type === "function_call")!;
      assert.ok(storedCall.type === "function_call");
      const followUp = await openai.responses.create({
        model,
        previous_response_id: stored.id,
        input: [{
          type: "function_call_output",
          call_id: storedCall.call_id,
          output: "Paris: sunny, 21 C",
        }],
        tools: [WEATHER_TOOL],
      });
      assert.equal(followUp.output_text, "It is sunny in Paris.");
      assert.equal(followUp.previous_response_id, stored.id);
      assert.match(JSON.stringify(lastUpstreamMessages(d, kind)), /Weather in Paris\?/);
      await assertCharged(d, model, ...usages);
    }));

  Deno.test(`AI SDK default OpenAI provider, ${kind} kind: generateText runs a tool and stops at stepCountIs(3)`, () =>
    withDialect(async (d) => {
      const usage = scriptAgentLoop(d, kind);
      const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
      const result = await generateText({
        model: openai(model),
        prompt: "What is the weather in Paris?",
        tools: {
          weather: tool({
            description: "The weather in a city",
            inputSchema: z.object({ city: z.string() }),
            execute: ({ city }) => Promise.resolve(`${city}: sunny, 21 C`),
          }),
        },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      });
      assert.equal(result.text, "It is sunny in Paris.");
      assert.equal(result.steps.length, 2);
      assert.match(JSON.stringify(lastUpstreamMessages(d, kind)), /sunny, 21 C/);
      assert.equal(result.totalUsage.inputTokens, usage[0].prompt + usage[1].prompt);
      const records = await assertCharged(d, model, ...usage);
      assert.equal(
        result.response.headers?.["tollbooth-request-cost"],
        formatUsd(records.cost),
      );
    }));

  Deno.test(`AI SDK default OpenAI provider, ${kind} kind: streamText streams the answer, charged its usage`, () =>
    withDialect(async (d) => {
      const usage = scriptText(d, kind, "A streamed answer.");
      const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
      const result = streamText({ model: openai(model), prompt: "Stream please.", maxRetries: 0 });
      let text = "";
      for await (const delta of result.textStream) text += delta;
      assert.equal(text, "A streamed answer.");
      assert.equal((await result.usage).outputTokens, usage.completion);
      await assertCharged(d, model, usage);
    }));
}

Deno.test("AI SDK default OpenAI provider, Claude streamed: Output.object with a tool runs its loop, the text Claude wrote beside the call (streamed after it) going back in the call's turn", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [
          { type: "text", text: "Let me check." },
          { type: "tool_use", name: "weather", input: { city: "Paris" } },
        ],
        inputTokens: 400,
        outputTokens: 30,
      },
      (request) => ({
        content: [{
          type: "tool_use",
          name: request.body.tools.at(-1).name,
          input: { city: "Paris", sunny: true },
        }],
        inputTokens: 460,
        outputTokens: 20,
      }),
    );
    const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
    const result = streamText({
      model: openai(CLAUDE_MODEL),
      prompt: "Is it sunny in Paris?",
      output: Output.object({ schema: z.object({ city: z.string(), sunny: z.boolean() }) }),
      tools: {
        weather: tool({
          inputSchema: z.object({ city: z.string() }),
          execute: ({ city }) => Promise.resolve(`${city}: sunny, 21 C`),
        }),
      },
      stopWhen: stepCountIs(4),
      maxRetries: 0,
    });
    const errors = [];
    for await (const part of result.fullStream) if (part.type === "error") errors.push(part.error);
    assert.deepEqual(errors, []);
    assert.deepEqual(await result.output, { city: "Paris", sunny: true });
    assert.equal((await result.steps).length, 2);
    const turn = d.claude.messages()[1].body.messages[1];
    assert.equal(turn.role, "assistant");
    assert.deepEqual(turn.content.map((block: { type: string }) => block.type), [
      "text",
      "tool_use",
    ]);
    assert.equal(turn.content[0].text, "Let me check.");
    await assertCharged(d, CLAUDE_MODEL, { prompt: 400, completion: 30 }, {
      prompt: 460,
      completion: 20,
    });
  }));

Deno.test("a multi-turn AI SDK conversation references its stored answer by item id", () =>
  withDialect(async (d) => {
    d.openai.script(
      { content: "Nice to meet you, Ada.", promptTokens: 20, completionTokens: 6 },
      { content: "Your name is Ada.", promptTokens: 40, completionTokens: 5 },
    );
    const sentToUs: { input: { type?: string }[] }[] = [];
    const openai = createOpenAI({
      baseURL: d.baseURL,
      apiKey: d.apiKey,
      fetch: (url, init) => {
        sentToUs.push(JSON.parse(String(init?.body)));
        return fetch(url, init);
      },
    });
    const first = await generateText({ model: openai(OPENAI_MODEL), prompt: "I am Ada." });
    const second = await generateText({
      model: openai(OPENAI_MODEL),
      messages: [
        { role: "user", content: "I am Ada." },
        ...first.response.messages,
        { role: "user", content: "What is my name?" },
      ],
    });
    assert.equal(second.text, "Your name is Ada.");
    // The SDK sent the earlier answer as an item_reference; the upstream got its text back.
    assert.ok(sentToUs[1].input.some((item) => item.type === "item_reference"));
    const sent = d.openai.chats.at(-1)!.body.messages;
    assert.deepEqual(sent.map((m: { role: string }) => m.role), ["user", "assistant", "user"]);
    assert.equal(sent[1].content, "Nice to meet you, Ada.");
    await assertCharged(d, OPENAI_MODEL, { prompt: 20, completion: 6 }, {
      prompt: 40,
      completion: 5,
    });
  }));

Deno.test("an item_reference sent without its optional type, as the openai SDK's types allow, is served", () =>
  withDialect(async (d) => {
    d.openai.script(
      { content: "Nice to meet you, Ada.", promptTokens: 20, completionTokens: 6 },
      { content: "Your name is Ada.", promptTokens: 40, completionTokens: 5 },
    );
    const openai = client(d);
    const first = await openai.responses.create({ model: OPENAI_MODEL, input: "I am Ada." });
    const second = await openai.responses.create({
      model: OPENAI_MODEL,
      input: [
        { role: "user", content: "I am Ada." },
        { id: first.output[0].id! },
        { role: "user", content: "What is my name?" },
      ],
    });
    assert.equal(second.output_text, "Your name is Ada.");
    const sent = d.openai.chats.at(-1)!.body.messages;
    assert.deepEqual(sent[1], { role: "assistant", content: "Nice to meet you, Ada." });
    await assertCharged(d, OPENAI_MODEL, { prompt: 20, completion: 6 }, {
      prompt: 40,
      completion: 5,
    });
  }));

Deno.test("store: false keeps nothing: its id and items cannot be referenced later", () =>
  withDialect(async (d) => {
    const openai = client(d);
    d.openai.script({ content: "Not kept.", promptTokens: 10, completionTokens: 3 });
    const unstored = await openai.responses.create({
      model: OPENAI_MODEL,
      input: "x",
      store: false,
    });
    for (
      const body of [
        { previous_response_id: unstored.id, input: "y" },
        { input: [{ type: "item_reference", id: unstored.output[0].id }] },
      ]
    ) {
      const error = await openai.responses.create({ model: OPENAI_MODEL, ...body } as never)
        .catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError);
      assert.equal(error.code, "invalid_parameter");
      assert.match(String(error.param), /^(previous_response_id|input\[0\]\.id)$/);
    }
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 3 });
  }));

Deno.test("item references reach into at most 32 stored responses: more is a 400 before anything is reserved", () =>
  withDialect(async (d) => {
    const openai = client(d);
    const ids: string[] = [];
    for (let i = 0; i < 33; i++) {
      d.openai.script({ content: `Answer ${i}.`, promptTokens: 10, completionTokens: 3 });
      const stored = await openai.responses.create({ model: OPENAI_MODEL, input: `q${i}` });
      ids.push(stored.output[0].id!);
    }
    await d.newUsage();
    const reference = (n: number) => ({
      model: OPENAI_MODEL,
      input: [
        ...ids.slice(0, n).map((id) => ({ type: "item_reference", id })),
        { role: "user", content: "Summarise all of that." },
      ],
    });
    const refused = await d.s.post(d.apiKey, "/responses", reference(33));
    assert.equal(refused.status, 400);
    const error = (await refused.json()).error;
    assert.equal(error.code, "invalid_parameter");
    assert.equal(error.param, "input");
    assert.deepEqual(await d.newUsage(), [], "nothing was reserved or charged");
    d.openai.script({ content: "Summary.", promptTokens: 200, completionTokens: 2 });
    const served = await d.s.post(d.apiKey, "/responses", reference(32));
    assert.equal(served.status, 200);
    await served.body?.cancel();
  }));

Deno.test("a stored response belongs to its app: another app cannot continue it", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Mine.", promptTokens: 10, completionTokens: 2 });
    const mine = await client(d).responses.create({ model: OPENAI_MODEL, input: "x" });
    const other = await d.s.newApp("other");
    const res = await d.s.post(other.apiKey, "/responses", {
      model: OPENAI_MODEL,
      input: "y",
      previous_response_id: mine.id,
    });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, "previous_response_id");
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 2 });
  }));

Deno.test("responses refuse like chat: 401, 402 with top_up_url, and 400s naming fields by their Responses names", () =>
  withDialect(async (d) => {
    const post = (key: string | null, body: Record<string, unknown>) =>
      d.s.post(key, "/responses", body);
    const noKey = await post(null, { model: OPENAI_MODEL, input: "x" });
    assert.equal(noKey.status, 401);
    assert.equal((await noKey.json()).error.code, "invalid_api_key");
    const tooBig = await post(d.apiKey, {
      model: OPENAI_MODEL,
      input: "x",
      max_output_tokens: 40_000,
    });
    assert.equal(tooBig.status, 400);
    assert.equal((await tooBig.json()).error.param, "max_output_tokens");
    const badRole = await post(d.apiKey, {
      model: OPENAI_MODEL,
      input: [{ role: "robot", content: "x" }],
    });
    assert.equal((await badRole.json()).error.param, "input[0].role");
    const { apiKey: poorKey, appId: poorApp } = await d.s.newApp("poor");
    const { spendDownTo } = await import("../helpers.ts");
    await spendDownTo(d.s.kv, poorApp, 3);
    const poor = await post(poorKey, { model: OPENAI_MODEL, input: "x" });
    assert.equal(poor.status, 402);
    const error = (await poor.json()).error;
    assert.equal(error.code, "insufficient_credits");
    assert.equal(error.balance, "0.000003");
    assert.match(error.top_up_url, /\/top-up\//);
    assert.equal(d.openai.chats.length, 0);
    assert.equal(
      parseUsd(formatUsd((await d.s.wallet(d.appId)).available)),
      5_000_000,
      "nothing was charged",
    );
  }));

Deno.test("parallel_tool_calls without tools is accepted, as OpenAI's Responses API does, and not sent upstream", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Hi.", promptTokens: 10, completionTokens: 2 });
    const response = await client(d).responses.create({
      model: OPENAI_MODEL,
      input: "hi",
      parallel_tool_calls: false,
    });
    assert.equal(response.status, "completed");
    assert.equal(response.parallel_tool_calls, false);
    assert.equal("parallel_tool_calls" in d.openai.chats.at(-1)!.body, false);
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 2 });
  }));

Deno.test("metadata past OpenAI's limits is a 400 naming metadata and the limit, before anything is reserved", () =>
  withDialect(async (d) => {
    const pairs = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
    const cases: [Record<string, string>, string, RegExp][] = [
      [pairs(17), "metadata", /at most 16 key-value pairs/],
      [{ ["k".repeat(65)]: "v" }, "metadata", /at most 64 characters/],
      [{ k: "v".repeat(513) }, "metadata.k", /at most 512 characters/],
    ];
    for (const [metadata, param, message] of cases) {
      const error = await client(d).responses.create({ model: OPENAI_MODEL, input: "x", metadata })
        .catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.code, "invalid_parameter");
      assert.equal(error.param, param);
      assert.match(error.message, message);
    }
    assert.equal(d.openai.chats.length, 0);
    assert.deepEqual(await d.newUsage(), []);
  }));

for (const stream of [false, true]) {
  Deno.test(`a Responses request's metadata on a model served through OpenAI's chat API is kept with the response, not sent to the unstored completion OpenAI would refuse it on${stream ? " (streamed)" : ""}`, () =>
    withDialect(async (d) => {
      d.openai.script(
        { content: "Tagged.", promptTokens: 20, completionTokens: 3 },
        { content: "Stored.", promptTokens: 22, completionTokens: 2 },
      );
      const metadata = { topic: "billing" };
      let response: OpenAI.Responses.Response | null = null;
      if (stream) {
        const events = await client(d).responses.create({
          model: OPENAI_MODEL,
          input: "Tag this.",
          metadata,
          stream: true,
        });
        for await (const event of events) {
          if (event.type === "response.completed") response = event.response;
        }
      } else {
        response = await client(d).responses.create({
          model: OPENAI_MODEL,
          input: "Tag this.",
          metadata,
        });
      }
      assert.equal(response?.status, "completed");
      assert.deepEqual(response?.metadata, metadata);
      assert.equal("metadata" in d.openai.chats[0].body, false);
      assert.deepEqual((await client(d).responses.retrieve(response!.id)).metadata, metadata);
      // A chat client that stores its completion at OpenAI tags it there.
      await client(d).chat.completions.create({
        model: OPENAI_MODEL,
        messages: [{ role: "user", content: "Store this." }],
        store: true,
        metadata,
      });
      assert.deepEqual(d.openai.chats[1].body.metadata, metadata);
      await assertCharged(d, OPENAI_MODEL, { prompt: 20, completion: 3 }, {
        prompt: 22,
        completion: 2,
      });
    }));
}

Deno.test("on Claude a text.format schema or a tool's parameters whose type is not object is a 400 naming it, before anything is reserved", () =>
  withDialect(async (d) => {
    const refused = async (body: Record<string, unknown>) => {
      const error = await client(d).responses.create({ model: CLAUDE_MODEL, input: "x", ...body })
        .catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.code, "invalid_parameter");
      return { param: error.param, message: error.message as string };
    };
    const list = { type: "array", items: { type: "string" } };
    // The answer tool standing in for the format takes an object only, as every Claude tool does.
    const format = await refused({
      text: { format: { type: "json_schema", name: "names", schema: list } },
    });
    assert.equal(format.param, "text.format.schema.type");
    assert.match(format.message, /'text\.format\.schema\.type': must be "object"/);
    const tool = await refused({
      tools: [{ type: "function", name: "f", parameters: list, strict: false }],
    });
    assert.equal(tool.param, "tools[0].parameters.type");
    assert.match(tool.message, /'tools\[0\]\.parameters\.type': must be "object"/);
    assert.equal(d.claude.received.length, 0, "Anthropic was not asked");
    assert.deepEqual(await d.newUsage(), [], "nothing was reserved or charged");
    // OpenAI takes a schema of any type for the answer.
    const served = await client(d).responses.create({
      model: OPENAI_MODEL,
      input: "x",
      text: { format: { type: "json_schema", name: "names", schema: list } },
    });
    assert.equal(served.status, "completed");
    await d.newUsage();
  }));

Deno.test("a refusal names Responses fields in its param and its words: reasoning.effort, an image's item path, detail", () =>
  withDialect(async (d) => {
    const refused = async (body: Record<string, unknown>) => {
      const error = await client(d).responses.create(body as never).catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      return { param: error.param, message: error.message as string };
    };
    const thinking = await refused({
      model: CLAUDE_MODEL,
      input: "x",
      reasoning: { effort: "high" },
      temperature: 0.5,
    });
    assert.equal(thinking.param, "temperature");
    assert.match(thinking.message, /when reasoning\.effort is set/);
    assert.doesNotMatch(thinking.message, /reasoning_effort/);
    const image = (part: Record<string, unknown>) => ({
      model: OPENAI_MODEL,
      input: [
        { role: "user", content: "First." },
        {
          role: "user",
          content: [{ type: "input_text", text: "What is it?" }, { type: "input_image", ...part }],
        },
      ],
    });
    const http = await refused(image({ image_url: "http://example.com/cat.png" }));
    assert.equal(http.param, "input[1].content[1].image_url");
    assert.match(http.message, /'input\[1\]\.content\[1\]\.image_url': must be an https URL/);
    const original = await refused(
      image({ image_url: "https://example.com/cat.png", detail: "original" }),
    );
    assert.equal(original.param, "input[1].content[1].detail");
    assert.match(original.message, /must be one of auto, low, high/);
    assert.equal(d.openai.chats.length + d.claude.messages().length, 0);
    assert.deepEqual(await d.newUsage(), [], "nothing was reserved or charged");
  }));

Deno.test("openai SDK include message.output_text.logprobs: each token's logprob and top alternatives, whole and streamed; refused on Claude naming include", () =>
  withDialect(async (d) => {
    const asked = {
      model: OPENAI_MODEL,
      input: "Say hi.",
      include: ["message.output_text.logprobs" as const],
      top_logprobs: 2,
    };
    d.openai.script({ content: "Hi there", logprob: -0.1 });
    const whole = await client(d).responses.create(asked);
    assert.deepEqual(d.openai.chats.at(-1)!.body.logprobs, true);
    assert.deepEqual(d.openai.chats.at(-1)!.body.top_logprobs, 2);
    const part = (whole.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0];
    assert.equal(part.type, "output_text");
    const logprobs = (part as OpenAI.Responses.ResponseOutputText).logprobs!;
    assert.equal(logprobs.map((l) => l.token).join(""), "Hi there");
    for (const l of logprobs) {
      assert.equal(l.logprob, -0.1);
      assert.equal(l.top_logprobs.length, 2);
      assert.deepEqual(l.bytes, [...new TextEncoder().encode(l.token)]);
    }

    d.openai.script({ content: "Hi there", logprob: -0.1 });
    const streamed: string[] = [];
    let done: unknown[] = [];
    for await (const event of await client(d).responses.create({ ...asked, stream: true })) {
      if (event.type === "response.output_text.delta") {
        streamed.push(...event.logprobs.map((l) => l.token));
      }
      if (event.type === "response.output_text.done") done = event.logprobs;
    }
    assert.equal(streamed.join(""), "Hi there");
    assert.equal(done.length, logprobs.length);

    const refused = await client(d).responses.create({ ...asked, model: CLAUDE_MODEL })
      .catch((e) => e);
    assert.ok(refused instanceof OpenAI.BadRequestError, String(refused));
    assert.equal(refused.param, "include");
    assert.equal(d.claude.messages().length, 0);
  }));

Deno.test("AI SDK default OpenAI provider with providerOptions.openai.logprobs gets the tokens' logprobs", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Hi there", logprob: -0.1 });
    const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
    const result = await generateText({
      model: openai(OPENAI_MODEL),
      prompt: "Say hi.",
      providerOptions: { openai: { logprobs: 2 } },
      maxRetries: 0,
    });
    assert.equal(result.text, "Hi there");
    const logprobs = result.providerMetadata?.openai?.logprobs as { token: string }[][];
    assert.equal(logprobs.flat().map((l) => l.token).join(""), "Hi there");
    assert.equal(d.openai.chats.at(-1)!.body.top_logprobs, 2);
  }));

Deno.test("responses count against the same rate limits (429 with Retry-After); an embedding model is 400 model_not_supported", async () => {
  const { startService, assertAuditClean } = await import("../helpers.ts");
  const s = await startService({ env: { RATE_LIMIT_RPM: "1" } });
  try {
    const { apiKey } = await s.newApp();
    const ok = await s.post(apiKey, "/responses", { model: "tollbooth/echo", input: "one" });
    assert.equal(ok.status, 200);
    const limited = await s.post(apiKey, "/responses", { model: "tollbooth/echo", input: "two" });
    assert.equal(limited.status, 429);
    assert.equal((await limited.json()).error.code, "rate_limit_exceeded");
    assert.ok(Number(limited.headers.get("retry-after")) >= 1);
    const embed = await s.post(apiKey, "/responses", { model: "tollbooth/embed", input: "x" });
    assert.equal((await embed.json()).error.code, "model_not_supported");
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a response stream the upstream cuts ends with error and response.failed; what was produced is charged, and its usage tells it", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "one two three four five six", cutAfterEvents: 3 });
    const res = await d.s.post(d.apiKey, "/responses", {
      model: OPENAI_MODEL,
      input: "Count.",
      stream: true,
    });
    assert.equal(res.status, 200);
    const text = await res.text();
    const types = [...text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
    assert.deepEqual(types.slice(-2), ["error", "response.failed"]);
    assert.ok(!types.includes("response.completed"));
    const failed = JSON.parse(text.trim().split("\n").at(-1)!.slice(6));
    assert.equal(failed.response.status, "failed");
    assert.equal(failed.response.error.code, "stream_interrupted");
    const [record] = await d.newUsage();
    assert.equal(record.outcome, "upstream_cut");
    assert.ok(record.cost > 0, "the tokens produced before the cut are charged");
    // What was charged is told, as a chat stream's usage chunk tells it.
    assert.equal(failed.response.usage.cost, formatUsd(record.cost));
    assert.equal(failed.response.usage.input_tokens, record.promptTokens);
    assert.equal(failed.response.usage.output_tokens, record.completionTokens);
  }));

Deno.test("a response stream whose client goes away is settled for what was produced, and is not stored", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "a b c d e f g h i j k l m n o p", chunkDelayMs: 20 });
    // Over a real connection, whose close the server turns into a cancel of the answer.
    const res = await fetch(`${d.baseURL}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${d.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: OPENAI_MODEL, input: "Talk.", stream: true }),
    });
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const created = JSON.parse(
      first.split("\n").find((line) => line.startsWith("data: "))!.slice(6),
    );
    // Cancelled while the next read waits on the upstream: that read then ends early.
    await new Promise((resolve) => setTimeout(resolve, 5));
    await reader.cancel();
    const { until } = await import("../helpers.ts");
    await until(async () => (await d.newUsage()).length === 1, "the settle of the left stream");
    assert.equal((await d.s.wallet(d.appId)).reserved, 0);
    // A cut-short answer is not kept as a completed one, to be read back or continued from.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const stored = await d.s.get(d.apiKey, `/responses/${created.response.id}`, {
      template: "/responses/{response_id}",
    });
    assert.equal(stored.status, 404, await stored.text());
  }));

Deno.test("AI SDK with forceReasoning on Claude: the effort becomes thinking, which comes back as reasoning, and a later turn refers to it", () =>
  withDialect(async (d) => {
    const answer = (text: string) => ({
      content: [
        { type: "thinking" as const, thinking: "Six sevens are forty-two." },
        { type: "text" as const, text },
      ],
      inputTokens: 40,
      outputTokens: 180,
    });
    d.claude.script(answer("42"), answer("Still 42."));
    const sentToUs: { input: { type?: string }[] }[] = [];
    const openai = createOpenAI({
      baseURL: d.baseURL,
      apiKey: d.apiKey,
      fetch: (url, init) => {
        sentToUs.push(JSON.parse(String(init?.body)));
        return fetch(url, init);
      },
    });
    const providerOptions = { openai: { forceReasoning: true, reasoningEffort: "low" } };
    const first = streamText({
      model: openai(CLAUDE_MODEL),
      prompt: "6 × 7?",
      maxOutputTokens: 4000,
      providerOptions,
    });
    const parts: string[] = [];
    for await (const part of first.fullStream) parts.push(part.type);
    assert.equal(await first.text, "42");
    assert.equal(await first.reasoningText, "Six sevens are forty-two.");
    assert.ok(parts.indexOf("reasoning-delta") < parts.indexOf("text-delta"));
    assert.deepEqual(d.claude.messages()[0].body.thinking, {
      type: "enabled",
      budget_tokens: 1024,
    });

    const second = await generateText({
      model: openai(CLAUDE_MODEL),
      messages: [
        { role: "user", content: "6 × 7?" },
        ...(await first.response).messages,
        { role: "user", content: "Sure?" },
      ],
      maxOutputTokens: 4000,
      providerOptions,
    });
    assert.equal(second.text, "Still 42.");
    assert.ok(sentToUs[1].input.some((item) => item.type === "item_reference"));
    await assertCharged(d, CLAUDE_MODEL, { prompt: 40, completion: 180 }, {
      prompt: 40,
      completion: 180,
    });
  }));

for (const stream of [false, true]) {
  Deno.test(`openai SDK responses.retrieve returns a stored response as it was answered${stream ? " (streamed)" : ""}; free, nothing reserved`, () =>
    withDialect(async (d) => {
      const openai = client(d);
      d.openai.script({ content: "Stored answer.", promptTokens: 30, completionTokens: 4 });
      const created = stream
        ? await (async () => {
          let last: OpenAI.Responses.Response | null = null;
          const events = await openai.responses.create({
            model: OPENAI_MODEL,
            instructions: "Be brief.",
            input: "Keep this.",
            metadata: { topic: "kept" },
            stream: true,
          });
          for await (const event of events) {
            if (event.type === "response.completed") last = event.response;
          }
          return last!;
        })()
        : await openai.responses.create({
          model: OPENAI_MODEL,
          instructions: "Be brief.",
          input: "Keep this.",
          metadata: { topic: "kept" },
        });
      await assertCharged(d, OPENAI_MODEL, { prompt: 30, completion: 4 });
      const before = (await d.s.wallet(d.appId)).available;
      const { data: retrieved, response } = await openai.responses.retrieve(created.id)
        .withResponse();
      // The SDK adds output_text to what it parses, not to a stream event's response.
      const { output_text: _text, ...answered } = retrieved;
      const { output_text: _created, ...sent } = created;
      assert.deepEqual(answered, sent);
      assert.equal(retrieved.output_text, "Stored answer.");
      assert.equal((retrieved.output[0] as { status: string }).status, "completed");
      assert.equal(retrieved.instructions, "Be brief.");
      assert.deepEqual(retrieved.metadata, { topic: "kept" });
      assert.ok(response.headers.get("x-ratelimit-remaining-requests"));
      assert.equal(response.headers.get("tollbooth-request-cost"), null);
      assert.equal((await d.s.wallet(d.appId)).available, before, "nothing reserved or charged");
      assert.deepEqual(await d.newUsage(), []);
    }));
}

Deno.test("openai SDK responses.retrieve with stream: true is a 400 naming stream, not an empty stream", () =>
  withDialect(async (d) => {
    const openai = client(d);
    d.openai.script({ content: "Stored answer.", promptTokens: 30, completionTokens: 4 });
    const created = await openai.responses.create({ model: OPENAI_MODEL, input: "Keep this." });
    const refused = await openai.responses.retrieve(created.id, { stream: true }).then(
      () => null,
      (e) => e,
    );
    assert.ok(refused instanceof OpenAI.APIError, String(refused));
    assert.equal(refused.status, 400);
    assert.equal(refused.code, "unsupported_parameter");
    assert.equal(refused.param, "stream");
    assert.match(refused.message, /background/);
    const resumed = await d.s.get(
      d.apiKey,
      `/responses/${created.id}?starting_after=3`,
      { template: "/responses/{response_id}" },
    );
    assert.equal(resumed.status, 400);
    assert.equal((await resumed.json()).error.param, "starting_after");
    const plain = await openai.responses.retrieve(created.id, { stream: false });
    assert.equal(plain.id, created.id);
  }));

Deno.test("openai SDK responses.inputItems.list pages the request's input items, newest first by default", () =>
  withDialect(async (d) => {
    const openai = client(d);
    d.openai.script(
      { content: "First answer.", promptTokens: 10, completionTokens: 3 },
      { content: "Second answer.", promptTokens: 30, completionTokens: 3 },
    );
    const first = await openai.responses.create({ model: OPENAI_MODEL, input: "One." });
    const second = await openai.responses.create({
      model: OPENAI_MODEL,
      previous_response_id: first.id,
      input: [
        { role: "user", content: "Two." },
        { id: first.output[0].id! },
        { role: "user", content: [{ type: "input_text", text: "Three." }] },
      ],
    });
    const all = await openai.responses.inputItems.list(second.id, { order: "asc" });
    assert.equal(all.data.length, 3, "only this request's input, not the previous response's");
    assert.deepEqual(all.data.map((item) => item.type), ["message", "message", "message"]);
    const texts = all.data.map((item) =>
      item.type === "message" ? (item.content[0] as { text: string }).text : assert.fail(item.type)
    );
    assert.deepEqual(texts, ["Two.", "First answer.", "Three."]);
    assert.equal(all.data[1].id, first.output[0].id, "a reference lists the item it names");
    assert.equal(all.has_more, false);
    // Default order is desc; pages of one, by the after cursor, until has_more is false.
    const seen: string[] = [];
    for await (const item of openai.responses.inputItems.list(second.id, { limit: 1 })) {
      seen.push(item.id);
    }
    assert.deepEqual(seen, all.data.map((item) => item.id).reverse());
    const page = await d.s.get(d.apiKey, `/responses/${second.id}/input_items?limit=2`, {
      template: "/responses/{response_id}/input_items",
    });
    const body = await page.json();
    assert.equal(body.object, "list");
    assert.equal(body.has_more, true);
    assert.equal(body.first_id, seen[0]);
    assert.equal(body.last_id, seen[1]);
    assert.deepEqual(body.data.map((i: { id: string }) => i.id), seen.slice(0, 2));
    const bad = await d.s.get(d.apiKey, `/responses/${second.id}/input_items?limit=101`, {
      template: "/responses/{response_id}/input_items",
    });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.param, "limit");
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 3 }, {
      prompt: 30,
      completion: 3,
    });
  }));

Deno.test("openai SDK responses.delete deletes a stored response: again is the same answer, another app's is 404, and it can no longer be continued", () =>
  withDialect(async (d) => {
    const openai = client(d);
    d.openai.script({ content: "Soon gone.", promptTokens: 10, completionTokens: 3 });
    const created = await openai.responses.create({ model: OPENAI_MODEL, input: "x" });
    const other = await d.s.newApp("other");
    const theirs = new OpenAI({ baseURL: d.baseURL, apiKey: other.apiKey, maxRetries: 0 });
    for (
      const call of [
        () => theirs.responses.delete(created.id),
        () => theirs.responses.retrieve(created.id),
        () => theirs.responses.inputItems.list(created.id),
      ]
    ) {
      const error = await call().catch((e) => e);
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal(error.code, "not_found");
    }
    assert.ok(await openai.responses.retrieve(created.id), "still there for its own app");
    for (let i = 0; i < 2; i++) {
      const deleted = await d.s.handle(
        new Request(`${d.baseURL}/responses/${created.id}`, {
          method: "DELETE",
          headers: { authorization: `Bearer ${d.apiKey}` },
        }),
      );
      assert.equal(deleted.status, 200);
      await assertMatchesOpenApi(deleted, "/responses/{response_id}", "delete");
      assert.deepEqual(await deleted.json(), { id: created.id, object: "response", deleted: true });
    }
    await openai.responses.delete(created.id); // the SDK's call, a third time
    const gone = await openai.responses.retrieve(created.id).catch((e) => e);
    assert.ok(gone instanceof OpenAI.NotFoundError);
    const documented = await d.s.get(d.apiKey, `/responses/${created.id}`, {
      template: "/responses/{response_id}",
    });
    assert.equal((await documented.json()).error.code, "not_found");
    for (
      const body of [
        { previous_response_id: created.id, input: "y" },
        { input: [{ type: "item_reference", id: created.output[0].id }] },
      ]
    ) {
      const error = await openai.responses.create({ model: OPENAI_MODEL, ...body } as never)
        .catch((e) => e);
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    }
    const never = await openai.responses.delete("resp_never").catch((e) => e);
    assert.ok(never instanceof OpenAI.NotFoundError);
    const unauthorised = await new OpenAI({ baseURL: d.baseURL, apiKey: "tb_nope", maxRetries: 0 })
      .responses.retrieve(created.id).catch((e) => e);
    assert.ok(unauthorised instanceof OpenAI.AuthenticationError);
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 3 });
  }));

Deno.test("responses.cancel is a 404 saying background responses are not supported", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Done.", promptTokens: 10, completionTokens: 2 });
    const created = await client(d).responses.create({ model: OPENAI_MODEL, input: "x" });
    const error = await client(d).responses.cancel(created.id).catch((e) => e);
    assert.ok(error instanceof OpenAI.NotFoundError, String(error));
    assert.match(error.message, /background responses are not supported/);
    await assertCharged(d, OPENAI_MODEL, { prompt: 10, completion: 2 });
  }));

/**
 * A Claude answer whose weather call the output cap cut mid-JSON (an incomplete response), the
 * next answer scripted: the call as the client saw it.
 */
async function callCutOnClaude(d: Dialect) {
  const weather = {
    type: "function" as const,
    name: "weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    strict: false,
  };
  d.claude.script(
    {
      content: [{
        type: "tool_use",
        name: "weather",
        input: { city: "Paris" },
        chunks: ['{"city": "Pa'],
      }],
      stopReason: "max_tokens",
      inputTokens: 100,
      outputTokens: 20,
    } as Parameters<typeof d.claude.script>[0],
    { text: "Say the city again?", inputTokens: 120, outputTokens: 6 },
  );
  const first = await client(d).responses.create({
    model: CLAUDE_MODEL,
    input: "Weather in Paris?",
    tools: [weather],
    max_output_tokens: 20,
  });
  assert.equal(first.status, "incomplete");
  const call = first.output.find((item) => item.type === "function_call")!;
  assert.equal(call.arguments, '{"city": "Pa', "the client sees what was produced");
  return { weather, first, call };
}

Deno.test("a Responses answer whose tool call the output cap cut mid-JSON can be continued on Claude with that call's answer", () =>
  withDialect(async (d) => {
    const { weather, first, call } = await callCutOnClaude(d);
    const second = await client(d).responses.create({
      model: CLAUDE_MODEL,
      previous_response_id: first.id,
      tools: [weather],
      input: [{
        type: "function_call_output",
        call_id: call.call_id,
        output: "cut off: try again",
      }],
    });
    assert.equal(second.output_text, "Say the city again?");
    const sent = d.claude.messages()[1].body.messages[1].content as {
      type: string;
      input: unknown;
    }[];
    assert.deepEqual(sent.find((b) => b.type === "tool_use")!.input, {});
  }));

Deno.test("a Responses answer whose tool call the output cap cut mid-JSON can be continued on Claude by referencing the call's stored item", () =>
  withDialect(async (d) => {
    const { weather, call } = await callCutOnClaude(d);
    const second = await client(d).responses.create({
      model: CLAUDE_MODEL,
      tools: [weather],
      input: [
        { role: "user", content: "Weather in Paris?" },
        { type: "item_reference", id: call.id! },
        { type: "function_call_output", call_id: call.call_id, output: "cut off: try again" },
      ],
    });
    assert.equal(second.output_text, "Say the city again?");
    const sent = d.claude.messages()[1].body.messages[1].content as {
      type: string;
      input: unknown;
    }[];
    assert.deepEqual(sent.find((b) => b.type === "tool_use")!.input, {});
    await assertCharged(d, CLAUDE_MODEL, { prompt: 100, completion: 20 }, {
      prompt: 120,
      completion: 6,
    });
  }));

Deno.test("a Responses input part's cache_control reaches Claude as its cache breakpoint, and the cache write is billed at its price", () =>
  withDialect(async (d) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(300);
    d.claude.script({
      text: "ok",
      inputTokens: 1612,
      cacheCreationInputTokens: 1600,
      outputTokens: 3,
    });
    const res = await client(d).responses.create({
      model: CLAUDE_MODEL,
      input: [
        {
          role: "system",
          content: [{ type: "input_text", text: long, cache_control: { type: "ephemeral" } }],
        },
        { role: "user", content: "Summarise." },
      ],
    } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    assert.equal(res.output_text, "ok");
    const sent = d.claude.messages()[0].body.system as { cache_control?: unknown }[];
    assert.deepEqual(sent.at(-1)?.cache_control, { type: "ephemeral" });
    const [record] = await d.newUsage();
    assert.equal(record.cacheWriteTokens, 1600);
    assert.equal(record.cost, usageCost(d.s.catalog.get(CLAUDE_MODEL)!, record));
  }));
