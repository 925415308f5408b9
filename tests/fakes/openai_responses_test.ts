/**
 * The strict OpenAI fake's Responses API, driven by the official openai SDK and the Vercel AI
 * SDK's Responses model: both parse every answer, a stateless tool loop carries sealed reasoning
 * back and is billed for it, and each validation rule refuses what OpenAI refuses, in its words.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { responsesInputTokens } from "./openai_responses.ts";
import { type OpenAiUpstream, startOpenAiUpstream, tokenCount } from "./openai_upstream.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

async function withFake(fn: (fake: OpenAiUpstream, client: OpenAI) => Promise<void>) {
  const fake = startOpenAiUpstream();
  const client = new OpenAI({ apiKey: fake.apiKey, baseURL: fake.baseUrl, maxRetries: 0 });
  try {
    await fn(fake, client);
  } finally {
    await fake.close();
  }
}

async function post(fake: OpenAiUpstream, body: Json) {
  const res = await fetch(`${fake.baseUrl}/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${fake.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

async function refused(fake: OpenAiUpstream, body: Json) {
  const { status, text } = await post(fake, body);
  return { status, ...JSON.parse(text).error };
}

function events(text: string): Json[] {
  return text.split("\n\n").filter((b) => b.trim()).map((block) => {
    const name = /^event: (.*)$/m.exec(block)![1];
    const data = JSON.parse(/^data: (.*)$/m.exec(block)![1]);
    assert.equal(name, data.type, "the SSE event name is the data's type");
    return data;
  });
}

function base64Size(token: string): number {
  return atob(token.replaceAll("-", "+").replaceAll("_", "/")).length;
}

const WEATHER = {
  type: "function" as const,
  name: "get_weather",
  description: "Get the current weather in a given location.",
  parameters: {
    type: "object",
    properties: { location: { type: "string" } },
    required: ["location"],
    additionalProperties: false,
  },
  strict: true,
};

Deno.test("responses fake: the openai SDK parses a reasoning model's answer with its summary and sealed reasoning", () =>
  withFake(async (fake, client) => {
    fake.script({ content: "Hi there!", reasoningTokens: 300, reasoningSummary: "Greeting." });
    const response = await client.responses.create({
      model: "o4-mini",
      input: "Hello",
      instructions: "Be brief.",
      reasoning: { effort: "low", summary: "auto" },
      include: ["reasoning.encrypted_content"],
      store: false,
    });
    assert.equal(response.object, "response");
    assert.equal(response.status, "completed");
    assert.equal(response.model, "o4-mini-2025-04-16");
    assert.equal(response.output_text, "Hi there!");
    const [reasoning, message] = response.output as Json[];
    assert.equal(reasoning.type, "reasoning");
    assert.match(reasoning.id, /^rs_/);
    assert.deepEqual(reasoning.summary, [{ type: "summary_text", text: "Greeting." }]);
    assert.match(reasoning.encrypted_content, /^gAAAA/);
    assert.ok(base64Size(reasoning.encrypted_content) >= 4 * 300);
    assert.equal(message.type, "message");
    assert.match(message.id, /^msg_/);
    assert.equal(response.usage!.output_tokens, 300 + tokenCount("Hi there!"));
    assert.equal(response.usage!.output_tokens_details.reasoning_tokens, 300);
    assert.equal(response.usage!.input_tokens, fake.responses[0].inputTokens);
    assert.equal(response.reasoning!.effort, "low");
    assert.equal(fake.responses[0].api, "responses");
  }));

Deno.test("responses fake: no summary unless asked, and no encrypted_content unless included", () =>
  withFake(async (fake, client) => {
    fake.script({ content: "Hi", reasoningTokens: 20, reasoningSummary: "unasked" });
    const response = await client.responses.create({ model: "o3", input: "Hello" });
    const reasoning = response.output[0] as Json;
    assert.equal(reasoning.type, "reasoning");
    assert.deepEqual(reasoning.summary, []);
    assert.equal("encrypted_content" in reasoning, false);
    assert.equal((response as Json).store, true);
  }));

Deno.test("responses fake: a concise summary is taken from the reasoning models after gpt-5 only, as OpenAI documents", () =>
  withFake(async (fake) => {
    const ask = (model: string, summary: string) =>
      refused(fake, { model, input: "Hello", reasoning: { summary } });
    const refusal = await ask("o4-mini", "concise");
    assert.equal(refusal.status, 400);
    assert.equal(refusal.param, "reasoning.summary");
    assert.equal(refusal.code, "unsupported_value");
    assert.equal((await ask("o4-mini", "nonsense")).status, 400);
    fake.script({ content: "Hi", reasoningTokens: 5, reasoningSummary: "Brief." });
    assert.equal(
      (await post(fake, { model: "gpt-5.4", input: "Hello", reasoning: { summary: "concise" } }))
        .status,
      200,
    );
    fake.script({ content: "Hi", reasoningTokens: 5, reasoningSummary: "Long." });
    assert.equal(
      (await post(fake, { model: "o4-mini", input: "Hello", reasoning: { summary: "detailed" } }))
        .status,
      200,
    );
  }));

Deno.test("responses fake: a non-reasoning model answers a message only, with function calls after it", () =>
  withFake(async (fake, client) => {
    fake.script({
      content: "Let me check.",
      toolCalls: [{ id: "call_1", name: "get_weather", arguments: { location: "Paris" } }],
    });
    const response = await client.responses.create({
      model: "gpt-4.1",
      input: "Weather in Paris?",
      tools: [WEATHER],
      tool_choice: "auto",
    });
    assert.deepEqual(response.output.map((i) => i.type), ["message", "function_call"]);
    const call = response.output[1] as Json;
    assert.match(call.id, /^fc_/);
    assert.equal(call.call_id, "call_1");
    assert.equal(call.arguments, '{"location":"Paris"}');
    assert.equal(call.status, "completed");
    assert.equal(response.tools[0].type, "function");
    assert.equal((response.tools[0] as Json).name, "get_weather");
  }));

Deno.test("responses fake: the SDK's stream sees the documented event order, numbered, and its final response", () =>
  withFake(async (fake, client) => {
    fake.script({
      content: "Sunny and warm.",
      reasoningTokens: 40,
      reasoningSummary: "Looking it up.",
      toolCalls: [{ name: "get_weather", arguments: { location: "Paris" } }],
    });
    const stream = client.responses.stream({
      model: "o4-mini",
      input: "Weather in Paris?",
      tools: [WEATHER],
      reasoning: { summary: "detailed" },
    });
    const seen: Json[] = [];
    for await (const event of stream) seen.push(event);
    const final = await stream.finalResponse();
    assert.deepEqual(seen.map((e) => e.sequence_number), seen.map((_, i) => i));
    const kinds = seen.map((e) => e.type).filter((t, i, all) => t !== all[i - 1]);
    assert.deepEqual(kinds, [
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    // One o200k token per text delta by default.
    const deltas = seen.filter((e) => e.type === "response.output_text.delta");
    assert.equal(deltas.length, tokenCount("Sunny and warm."));
    assert.equal(final.output_text, "Sunny and warm.");
    assert.equal(final.usage!.output_tokens_details.reasoning_tokens, 40);
  }));

Deno.test("responses fake: a stream ends on response.completed, without [DONE]", () =>
  withFake(async (fake) => {
    fake.script({ content: "Hi" });
    const { status, text } = await post(fake, { model: "gpt-4o", input: "Hi", stream: true });
    assert.equal(status, 200);
    assert.ok(!text.includes("[DONE]"));
    assert.equal(events(text).at(-1).type, "response.completed");
  }));

Deno.test("responses fake: the AI SDK's stateless tool loop sends sealed reasoning back, which is billed as input", async () => {
  const fake = startOpenAiUpstream();
  try {
    const openai = createOpenAI({ baseURL: fake.baseUrl, apiKey: fake.apiKey });
    fake.script(
      { toolCalls: [{ name: "weather", arguments: { city: "Paris" } }], reasoningTokens: 500 },
      { content: "It is sunny in Paris.", reasoningTokens: 30 },
    );
    const result = await generateText({
      model: openai.responses("o4-mini"),
      prompt: "What is the weather in Paris?",
      tools: {
        weather: tool({
          inputSchema: z.object({ city: z.string() }),
          execute: () => Promise.resolve({ celsius: 21 }),
        }),
      },
      stopWhen: stepCountIs(3),
      providerOptions: { openai: { store: false, include: ["reasoning.encrypted_content"] } },
    });
    assert.equal(result.text, "It is sunny in Paris.");
    assert.deepEqual(fake.received.map((r) => r.status), [200, 200]);
    const second = fake.responses[1];
    const carried = second.body.input.find((i: Json) => i.type === "reasoning");
    assert.match(carried.encrypted_content, /^gAAAA/);
    assert.equal(second.carriedReasoningTokens, 500);
    assert.equal(second.inputTokens, responsesInputTokens(second.body, () => 0, 500));
    assert.equal(second.inputTokens, await fake.responsesInputTokens(second.body));
    assert.equal(result.totalUsage.inputTokens, fake.responses[0].inputTokens + second.inputTokens);
  } finally {
    await fake.close();
  }
});

Deno.test("responses fake: the AI SDK streams a Responses answer with usage", async () => {
  const fake = startOpenAiUpstream();
  try {
    const openai = createOpenAI({ baseURL: fake.baseUrl, apiKey: fake.apiKey });
    fake.script({ content: "Streamed words here.", reasoningTokens: 5 });
    const result = streamText({ model: openai.responses("o4-mini"), prompt: "hey" });
    assert.equal(await result.text, "Streamed words here.");
    const usage = await result.usage;
    assert.equal(usage.outputTokens, 5 + tokenCount("Streamed words here."));
    assert.equal(usage.inputTokens, fake.responses[0].inputTokens);
  } finally {
    await fake.close();
  }
});

Deno.test("responses fake: reasoning items from before the last user message are not billed", () =>
  withFake(async (fake, client) => {
    fake.script({ toolCalls: [{ name: "get_weather", arguments: { location: "Paris" } }] });
    const first = await client.responses.create({
      model: "o4-mini",
      input: "Weather in Paris?",
      tools: [WEATHER],
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    // The first answer's reasoning tokens: the script gave none, so seal again with some.
    fake.script({
      toolCalls: [{ name: "get_weather", arguments: { location: "Rome" } }],
      reasoningTokens: 700,
    });
    const second = await client.responses.create({
      model: "o4-mini",
      input: "Weather in Rome?",
      tools: [WEATHER],
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    const [reasoning, call] = second.output as Json[];
    const loop = [
      { role: "user" as const, content: "Weather in Rome?" },
      {
        type: "reasoning",
        id: reasoning.id,
        summary: [],
        encrypted_content: reasoning.encrypted_content,
      },
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: "21°C" },
    ];
    fake.script({ content: "Warm." }, { content: "Warm." });
    const base = { model: "o4-mini", tools: [WEATHER], store: false };
    await client.responses.create({ ...base, input: loop as Json });
    assert.equal(fake.responses[2].carriedReasoningTokens, 700);
    // The same items, then a new user turn: the old loop's reasoning is dropped.
    await client.responses.create({
      ...base,
      input: [...loop, { role: "user", content: "Thanks!" }] as Json,
    });
    assert.equal(fake.responses[3].carriedReasoningTokens, 0);
    assert.equal(fake.responses[3].droppedReasoningItems, 1);
    assert.equal(first.status, "completed");
  }));

Deno.test("responses fake: max_output_tokens binds reasoning and text; the answer is incomplete and billed at the limit", () =>
  withFake(async (fake, client) => {
    const text = "one two three four five six seven eight nine ten eleven twelve";
    fake.script({ content: text, reasoningTokens: 10 });
    const response = await client.responses.create({
      model: "o4-mini",
      input: "Count",
      max_output_tokens: 16,
    });
    assert.equal(response.status, "incomplete");
    assert.deepEqual(response.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(response.usage!.output_tokens, 16);
    assert.equal(response.usage!.output_tokens_details.reasoning_tokens, 10);
    assert.ok(tokenCount(response.output_text) <= 6);
    assert.ok(text.startsWith(response.output_text));
    assert.equal((response.output[1] as Json).status, "incomplete");

    fake.script({ content: text, reasoningTokens: 10 });
    const { text: sse } = await post(fake, {
      model: "o4-mini",
      input: "Count",
      max_output_tokens: 16,
      stream: true,
    });
    const last = events(sse).at(-1);
    assert.equal(last.type, "response.incomplete");
    assert.equal(last.response.usage.output_tokens, 16);
  }));

Deno.test("responses fake: cached tokens only for prompts of 1,024 tokens or more", () =>
  withFake(async (fake, client) => {
    fake.script({ content: "a", cachedTokens: 512 }, { content: "a", cachedTokens: 1024 });
    const short = await client.responses.create({ model: "gpt-4o", input: "short" });
    assert.equal(short.usage!.input_tokens_details.cached_tokens, 0);
    const long = await client.responses.create({ model: "gpt-4o", input: "word ".repeat(1500) });
    assert.equal(long.usage!.input_tokens_details.cached_tokens, 1024);
  }));

Deno.test("responses fake: a mid-stream failure sends response.failed, or a bare error event", () =>
  withFake(async (fake) => {
    fake.script({ content: "Hello there friend", streamError: { afterEvents: 4 } });
    const failed = events((await post(fake, { model: "gpt-4o", input: "Hi", stream: true })).text);
    assert.equal(failed.length, 5);
    assert.equal(failed[4].type, "response.failed");
    assert.equal(failed[4].response.status, "failed");
    assert.equal(failed[4].response.error.code, "server_error");

    fake.script({
      content: "Hello",
      streamError: { afterEvents: 2, event: "error", code: "rate_limit_exceeded", message: "x" },
    });
    const bare = events((await post(fake, { model: "gpt-4o", input: "Hi", stream: true })).text);
    assert.deepEqual(bare[2], {
      type: "error",
      code: "rate_limit_exceeded",
      message: "x",
      param: null,
      sequence_number: 2,
    });
    assert.equal(fake.counts.failed, 2);
  }));

Deno.test("responses fake: the SDK surfaces a scripted status and a cut stream", () =>
  withFake(async (fake, client) => {
    fake.script({ status: 429, error: { message: "Slow down", code: "rate_limit_exceeded" } });
    await assert.rejects(
      client.responses.create({ model: "gpt-4o", input: "Hi" }),
      (e: Json) => e.status === 429 && e.error.code === "rate_limit_exceeded",
    );
    fake.script({ content: "one two three", cutAfterEvents: 5 });
    await assert.rejects(async () => {
      const stream = await client.responses.create({ model: "gpt-4o", input: "Hi", stream: true });
      for await (const _ of stream) { /* drain */ }
    });
    assert.equal(fake.counts.cut, 1);
  }));

// ---------------------------------------------------------------------------------------------
// Refusals.

Deno.test("responses fake: chat-only and unknown parameters are refused as unknown", () =>
  withFake(async (fake) => {
    const chatOnly = {
      messages: [],
      max_tokens: 10,
      max_completion_tokens: 10,
      n: 1,
      stop: "x",
      frequency_penalty: 0,
      presence_penalty: 0,
      logit_bias: {},
      seed: 1,
      response_format: { type: "text" },
      reasoning_effort: "low",
      nonsense: true,
    };
    for (const [key, value] of Object.entries(chatOnly)) {
      const error = await refused(fake, { model: "gpt-4o", input: "Hi", [key]: value });
      assert.deepEqual(error, {
        status: 400,
        message: `Unknown parameter: '${key}'.`,
        type: "invalid_request_error",
        param: key,
        code: "unknown_parameter",
      });
    }
  }));

Deno.test("responses fake: max_output_tokens below 16 is refused in OpenAI's words", () =>
  withFake(async (fake) => {
    const error = await refused(fake, { model: "gpt-4o", input: "Hi", max_output_tokens: 10 });
    assert.equal(
      error.message,
      "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 10 instead.",
    );
    assert.equal(error.code, "integer_below_min_value");
    assert.equal(error.param, "max_output_tokens");
  }));

Deno.test("responses fake: the chat tool shape is refused for its missing name", () =>
  withFake(async (fake) => {
    const error = await refused(fake, {
      model: "gpt-4o",
      input: "Hi",
      tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
    });
    assert.equal(error.message, "Missing required parameter: 'tools[0].name'.");
    assert.equal(error.param, "tools[0].name");
    assert.equal(error.code, "missing_required_parameter");
  }));

Deno.test("responses fake: a function_call_output without its function_call is refused", () =>
  withFake(async (fake) => {
    const error = await refused(fake, {
      model: "gpt-4o",
      input: [
        { role: "user", content: "Hi" },
        { type: "function_call_output", call_id: "call_x", output: "1" },
      ],
    });
    assert.deepEqual(error, {
      status: 400,
      message: "No tool call found for function call output with call_id call_x.",
      type: "invalid_request_error",
      param: "input",
      code: null,
    });
  }));

Deno.test("responses fake: an input part of the wrong role is refused", () =>
  withFake(async (fake) => {
    const error = await refused(fake, {
      model: "gpt-4o",
      input: [
        { role: "user", content: "Hi" },
        { role: "assistant", content: [{ type: "input_text", text: "Hello" }] },
      ],
    });
    assert.equal(
      error.message,
      "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
    );
    assert.equal(error.param, "input[1].content[0]");
  }));

Deno.test("responses fake: a reasoning model refuses non-default temperature and top_p", () =>
  withFake(async (fake) => {
    const hot = await refused(fake, { model: "o4-mini", input: "Hi", temperature: 0.2 });
    assert.equal(
      hot.message,
      "Unsupported parameter: 'temperature' is not supported with this model.",
    );
    assert.equal(hot.code, "unsupported_parameter");
    const topP = await refused(fake, { model: "gpt-5", input: "Hi", top_p: 0.5 });
    assert.equal(topP.param, "top_p");
    fake.script({ content: "ok" });
    assert.equal((await post(fake, { model: "o4-mini", input: "Hi", temperature: 1 })).status, 200);
  }));

Deno.test("responses fake: a non-reasoning model refuses a reasoning config", () =>
  withFake(async (fake) => {
    const error = await refused(fake, {
      model: "gpt-4o",
      input: "Hi",
      reasoning: { effort: "low" },
    });
    assert.deepEqual(error, {
      status: 400,
      message: "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
      type: "invalid_request_error",
      param: "reasoning.effort",
      code: "unsupported_parameter",
    });
  }));

async function sealedLoop(fake: OpenAiUpstream, client: OpenAI, model: string) {
  fake.script({
    toolCalls: [{ name: "get_weather", arguments: { location: "Paris" } }],
    reasoningTokens: 64,
  });
  const first = await client.responses.create({
    model,
    input: "Weather in Paris?",
    tools: [WEATHER],
    store: false,
    include: ["reasoning.encrypted_content"],
  });
  const [reasoning, call] = first.output as Json[];
  return (edit: (item: Json) => Json = (x) => x, loopModel = model) => ({
    model: loopModel,
    tools: [WEATHER],
    store: false,
    input: [
      { role: "user", content: "Weather in Paris?" },
      edit({
        type: "reasoning",
        id: reasoning.id,
        summary: [],
        encrypted_content: reasoning.encrypted_content,
      }),
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: "21°C" },
    ],
  });
}

Deno.test("responses fake: the seal refuses an edited encrypted_content", () =>
  withFake(async (fake, client) => {
    const loop = await sealedLoop(fake, client, "o4-mini");
    const error = await refused(
      fake,
      loop((item) => {
        const chars = [...item.encrypted_content];
        const at = 40;
        chars[at] = chars[at] === "A" ? "B" : "A";
        return { ...item, encrypted_content: chars.join("") };
      }),
    );
    assert.equal(error.status, 400);
    assert.equal(error.code, "invalid_encrypted_content");
    assert.equal(error.param, null);
    assert.match(error.message, /^The encrypted content for item rs_\w+ could not be verified\./);
    fake.script({ content: "Sunny." });
    assert.equal((await post(fake, loop())).status, 200);
  }));

Deno.test("responses fake: the seal refuses reasoning sealed for another model", () =>
  withFake(async (fake, client) => {
    const loop = await sealedLoop(fake, client, "o4-mini");
    const error = await refused(fake, loop(undefined, "o3"));
    assert.equal(error.code, "invalid_encrypted_content");
  }));

Deno.test("responses fake: a bare reasoning item with store off is not found", () =>
  withFake(async (fake, client) => {
    const loop = await sealedLoop(fake, client, "o4-mini");
    const error = await refused(fake, loop(({ encrypted_content: _, ...item }) => item));
    assert.equal(error.status, 404);
    assert.match(
      error.message,
      /^Item with id 'rs_\w+' not found\. Items are not persisted when `store` is set to false\. Try again with `store` set to true, or remove this item from your input\.$/,
    );
    assert.equal(error.param, "input");
    assert.equal(error.code, null);
  }));

Deno.test("responses fake: the input token count is what the same response bills, sealed reasoning carried back included, and refuses what a response would", () =>
  withFake(async (fake, client) => {
    fake.script({ reasoningTokens: 900, toolCalls: [{ name: "w", arguments: { city: "Oslo" } }] });
    const tools = [{
      type: "function" as const,
      name: "w",
      parameters: { type: "object", properties: { city: { type: "string" } } },
      strict: false,
    }];
    const input: Json[] = [{ role: "user", content: "Weather in Oslo?" }];
    const first = await client.responses.create({
      model: "o4-mini",
      input,
      tools,
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    const call = first.output.find((item) => item.type === "function_call")!;
    assert.ok(call.type === "function_call");
    input.push(...first.output, {
      type: "function_call_output",
      call_id: call.call_id,
      output: "-5 C",
    });
    const counted = await client.responses.inputTokens.count({ model: "o4-mini", input, tools });
    assert.equal(counted.object, "response.input_tokens");
    fake.script({ content: "Cold." });
    await client.responses.create({ model: "o4-mini", input, tools, store: false });
    assert.equal(counted.input_tokens, fake.responses[1].inputTokens);
    assert.equal(fake.responses[1].carriedReasoningTokens, 900);
    assert.deepEqual(fake.tokenCounts.map((c) => c.inputTokens), [counted.input_tokens]);
    const { status } = await fetch(`${fake.baseUrl}/responses/input_tokens`, {
      method: "POST",
      headers: { authorization: `Bearer ${fake.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "o4-mini", input: "hi", max_output_tokens: 100 }),
    }).then(async (r) => ({ status: r.status, body: await r.text() }));
    assert.equal(status, 400, "max_output_tokens is not a parameter of the count");
  }));
