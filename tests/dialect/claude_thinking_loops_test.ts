/**
 * Agent loops of three steps and more on a Claude that thinks by budget, driven by each client
 * library's own loop: the libraries that carry Claude's signed thinking from step to step (the
 * Responses API's reasoning items, stored or sent back), the chat clients that drop it (they keep
 * only the fields they know) and get it back from what Tollbooth kept (thinking_memory.ts), and
 * that every step is charged exactly what Claude billed either way. A budget turn that answers
 * tool calls without its thinking block runs without thinking (Claude refuses it otherwise), so a
 * block neither sent nor kept never fails a loop.
 */
import assert from "node:assert/strict";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import OpenAI from "openai";
import { z } from "zod";
import { formatUsd } from "@/lib/core/mod.ts";
import { keys } from "@/lib/db.ts";
import { newUsageOf } from "../helpers.ts";
import {
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
  langChainLoop,
  langChainModel,
  openAiClient,
  withDialect,
} from "./harness.ts";

/** Three steps: two tool calls (the first two at once), each after thinking, then the answer. */
function scriptThreeSteps(d: Dialect) {
  d.claude.script(
    {
      content: [
        { type: "thinking", thinking: "Paris and Rome first, at once." },
        { type: "tool_use", name: "weather", input: { city: "Paris" } },
        { type: "tool_use", name: "weather", input: { city: "Rome" } },
      ],
      outputTokens: 300,
    },
    {
      content: [
        { type: "redacted_thinking", data: "A thought the safety systems sealed." },
        { type: "tool_use", name: "weather", input: { city: "Oslo" } },
      ],
      outputTokens: 200,
    },
    {
      content: [{ type: "thinking", thinking: "All three answered." }, {
        type: "text",
        text: "Sunny everywhere.",
      }],
      outputTokens: 100,
    },
  );
}

const OUTPUT_TOKENS = [300, 200, 100];

/**
 * What each step sent Claude: whether it thought, and the blocks of each assistant turn. Each step
 * is charged what the fake billed for it, within its hold.
 */
async function loopSent(d: Dialect) {
  const sent = d.claude.messages();
  assert.equal(sent.length, 3);
  const records = await d.newUsage();
  assert.equal(records.length, 3);
  records.forEach((record, i) => {
    const billed = { prompt: sent[i].inputTokens, completion: OUTPUT_TOKENS[i] };
    assert.equal(record.cost, expectedCharge(CLAUDE_MODEL, billed), `step ${i + 1} charged`);
    assert.ok(record.reserved >= record.cost, `step ${i + 1} held ${record.reserved}`);
  });
  return sent.map((m) => ({
    thinks: m.body.thinking?.type === "enabled",
    assistant: (m.body.messages as { role: string; content: unknown }[])
      .filter((t) => t.role === "assistant")
      .map((t) => (t.content as { type: string }[]).map((b) => b.type)),
  }));
}

/**
 * Every step thought, and went on from the thinking Claude signed in the steps before: as the
 * clients that carry it send it, and as Tollbooth gives it back to the chat clients that drop it
 * (every step's, so the prompt each step sends begins as the one before it did, for its cache).
 */
const CARRIED = [
  { thinks: true, assistant: [] },
  { thinks: true, assistant: [["thinking", "tool_use", "tool_use"]] },
  {
    thinks: true,
    assistant: [["thinking", "tool_use", "tool_use"], ["redacted_thinking", "tool_use"]],
  },
];

/** The same tool in OpenAI's shape, as LangChain binds it. */
const WEATHER = {
  type: "function" as const,
  function: {
    name: "weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: ({ city }) => Promise.resolve(`${city}: sunny`),
});

for (const store of [true, false]) {
  for (const stream of [false, true]) {
    Deno.test(`AI SDK openai Responses, budget Claude${stream ? ", streamed" : ""}, ${store ? "stored" : "store: false"}: a three-step loop with parallel calls and redacted thinking keeps Claude's signed thinking at every step`, () =>
      withDialect(async (d) => {
        scriptThreeSteps(d);
        const options = {
          model: createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey })(CLAUDE_MODEL),
          prompt: "Weather in Paris, Rome and Oslo?",
          tools: { weather },
          stopWhen: stepCountIs(5),
          maxOutputTokens: 8000,
          maxRetries: 0,
          providerOptions: { openai: { reasoningEffort: "high", forceReasoning: true, store } },
        };
        const result = stream ? streamText(options) : await generateText(options);
        assert.equal(await result.text, "Sunny everywhere.");
        const steps = await result.steps;
        assert.deepEqual(steps.map((step) => step.toolCalls.length), [2, 1, 0]);
        assert.deepEqual(await loopSent(d), CARRIED);
      }));
  }
}

for (const stream of [false, true]) {
  Deno.test(`LangChain with useResponsesApi, budget Claude${stream ? ", streamed" : ""}: a three-step loop keeps Claude's signed thinking at every step`, () =>
    withDialect(async (d) => {
      scriptThreeSteps(d);
      const llm = langChainModel(d, CLAUDE_MODEL, {
        useResponsesApi: true,
        modelKwargs: { reasoning: { effort: "high" } },
        maxTokens: 8000,
      }).bindTools([WEATHER]);
      assert.equal(await langChainLoop(llm, stream), "Sunny everywhere.");
      assert.deepEqual(await loopSent(d), CARRIED);
    }));
}

for (const stream of [false, true]) {
  Deno.test(`openai SDK runTools, budget Claude${stream ? ", streamed" : ""}: the runner replays only the fields it knows, and the signed thinking Tollbooth kept is given back, so every step of a three-step loop thinks on from every step before it, each charged exactly`, () =>
    withDialect(async (d) => {
      scriptThreeSteps(d);
      const params = {
        model: CLAUDE_MODEL,
        messages: [{ role: "user" as const, content: "Weather in Paris, Rome and Oslo?" }],
        tools: [{
          type: "function" as const,
          function: {
            name: "weather",
            description: "The weather in a city",
            parameters: { type: "object", properties: { city: { type: "string" } } },
            function: ({ city }: { city: string }) => `${city}: sunny`,
            parse: JSON.parse,
          },
        }],
        reasoning_effort: "high" as const,
        max_tokens: 8000,
      };
      const completions = openAiClient(d).chat.completions;
      const runner = stream
        ? completions.runTools({ ...params, stream: true })
        : completions.runTools(params);
      assert.equal(await runner.finalContent(), "Sunny everywhere.");
      assert.deepEqual(await loopSent(d), CARRIED);
    }));
}

for (const stream of [false, true]) {
  Deno.test(`AI SDK .chat(), budget Claude${stream ? ", streamed" : ""}: the chat model drops reasoning_details, and the signed thinking Tollbooth kept is given back, so every step of a three-step loop thinks on from every step before it`, () =>
    withDialect(async (d) => {
      scriptThreeSteps(d);
      const options = {
        model: createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey }).chat(CLAUDE_MODEL),
        prompt: "Weather in Paris, Rome and Oslo?",
        tools: { weather },
        stopWhen: stepCountIs(5),
        maxOutputTokens: 8000,
        maxRetries: 0,
        providerOptions: { openai: { reasoningEffort: "high", forceReasoning: true } },
      };
      const result = stream ? streamText(options) : await generateText(options);
      assert.equal(await result.text, "Sunny everywhere.");
      const steps = await result.steps;
      assert.deepEqual(steps.map((step) => step.toolCalls.length), [2, 1, 0]);
      assert.deepEqual(await loopSent(d), CARRIED);
    }));
}

for (const stream of [false, true]) {
  Deno.test(`LangChain ChatOpenAI on chat completions, budget Claude${stream ? ", streamed" : ""}: the signed thinking LangChain drops is given back by Tollbooth, so every step of a three-step loop thinks on from every step before it`, () =>
    withDialect(async (d) => {
      scriptThreeSteps(d);
      const llm = langChainModel(d, CLAUDE_MODEL, {
        modelKwargs: { reasoning_effort: "high" },
        maxTokens: 8000,
      }).bindTools([WEATHER]);
      assert.equal(await langChainLoop(llm, stream), "Sunny everywhere.");
      assert.deepEqual(await loopSent(d), CARRIED);
    }));
}

Deno.test("openai SDK, budget Claude: a prompt that fits the window but not beside the output cap, which holds the thinking, is refused before anything is held, as Anthropic would refuse it", () =>
  withDialect(async (d) => {
    const ask = (words: number) =>
      openAiClient(d).chat.completions.create({
        model: CLAUDE_MODEL,
        messages: [{ role: "user", content: "word ".repeat(words) }],
        reasoning_effort: "high",
        max_tokens: 32_000,
      });
    const error = await ask(180_000).catch((e) => e);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.code, "context_length_exceeded");
    // Claude's own count says the prompt alone fits; the cap beside it does not.
    const counted = d.claude.counts().at(-1)!.inputTokens;
    assert.ok(counted < 200_000 && counted + 32_000 > 200_000, `counted ${counted}`);
    assert.equal(d.claude.messages().length, 0, "Claude was not asked");
    assert.equal((await d.newUsage()).length, 0, "nothing charged");

    d.claude.script({ text: "Many words.", outputTokens: 10 });
    assert.equal((await ask(150_000)).choices[0].message.content, "Many words.");
    const sent = d.claude.messages()[0];
    assert.ok(sent.inputTokens + sent.body.max_tokens <= 200_000);
  }, { claude: { models: { "claude-sonnet-4-5": { contextWindow: 200_000 } } } }));

/** A first step that thinks `thinking` and calls the weather tool, as a chat client asks it. */
async function firstStep(d: Dialect, apiKey: string, thinking: string, stream: boolean) {
  d.claude.script({
    content: [{ type: "thinking", thinking }, {
      type: "tool_use",
      name: "weather",
      input: { city: "Paris" },
    }],
    outputTokens: 300,
  }, { text: "Sunny.", outputTokens: 5 });
  const client = new OpenAI({ baseURL: d.baseURL, apiKey, maxRetries: 0 });
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Paris?" }];
  const request = {
    model: CLAUDE_MODEL,
    messages,
    tools: [WEATHER],
    reasoning_effort: "high" as const,
    max_tokens: 8000,
  };
  let call: OpenAI.ChatCompletionMessageFunctionToolCall;
  if (stream) {
    const final = await client.chat.completions.stream(request).finalChatCompletion();
    call = final.choices[0].message.tool_calls![0] as typeof call;
  } else {
    const answer = await client.chat.completions.create(request);
    call = answer.choices[0].message.tool_calls![0] as typeof call;
  }
  /** The next step as a client that drops reasoning_details sends it, with the app's key. */
  return async (key: string) => {
    const next = {
      ...request,
      messages: [
        ...messages,
        { role: "assistant" as const, content: null, tool_calls: [call] },
        { role: "tool" as const, tool_call_id: call.id, content: "sunny" },
      ],
    };
    const nextClient = new OpenAI({ baseURL: d.baseURL, apiKey: key, maxRetries: 0 });
    let content = "", cost: string | null;
    if (stream) {
      const chunks = await nextClient.chat.completions.create({
        ...next,
        stream: true,
        stream_options: { include_usage: true },
      });
      cost = null;
      for await (const chunk of chunks) {
        content += chunk.choices[0]?.delta.content ?? "";
        // Tollbooth's usage chunk says what the stream cost.
        if (chunk.usage) cost = (chunk.usage as { cost?: string }).cost ?? null;
      }
    } else {
      const { data, response } = await nextClient.chat.completions.create(next).withResponse();
      content = data.choices[0].message.content ?? "";
      cost = response.headers.get("tollbooth-request-cost");
    }
    assert.equal(content, "Sunny.");
    const sent = d.claude.messages().at(-1)!;
    const assistant = (sent.body.messages as { role: string; content: { type: string }[] }[])
      .find((m) => m.role === "assistant")!;
    return {
      thinks: sent.body.thinking?.type === "enabled",
      blocks: assistant.content.map((b) => b.type),
      inputTokens: sent.inputTokens,
      cost,
    };
  };
}

for (const stream of [false, true]) {
  Deno.test(`budget Claude${stream ? ", streamed" : ""}: the thinking kept for an app's tool call is given back to that app only; another app answering a call of the same id runs without it`, () =>
    withDialect(async (d) => {
      const next = await firstStep(d, d.apiKey, "Paris first.", stream);
      const other = await d.s.newApp("other app");
      d.claude.script({ text: "Sunny.", outputTokens: 5 });
      assert.deepEqual(
        { ...await next(other.apiKey), inputTokens: 0, cost: null },
        { thinks: false, blocks: ["tool_use"], inputTokens: 0, cost: null },
      );
      assert.deepEqual(
        { ...await next(d.apiKey), inputTokens: 0, cost: null },
        { thinks: true, blocks: ["thinking", "tool_use"], inputTokens: 0, cost: null },
      );
    }));

  Deno.test(`budget Claude${stream ? ", streamed" : ""}: thinking given back from what was kept (over 64 KiB, in chunks) is held for and charged exactly: the cost header is the wallet's debit and the usage record's, within a hold above another app's by the thinking`, () =>
    withDialect(async (d) => {
      // Above one KV value: kept in chunks.
      const thinking = "Weighing the forecast sources again. ".repeat(4000);
      const next = await firstStep(d, d.apiKey, thinking, stream);
      assert.ok(await keptChunks(d, d.appId) > 1, "kept in more than one KV value");
      await d.newUsage();
      const other = await d.s.newApp("other app");
      d.claude.script({ text: "Sunny.", outputTokens: 5 });
      const without = await next(other.apiKey);
      assert.equal(without.thinks, false);
      const [heldWithout] = await newUsageOf(d.s, other.appId)();
      await d.s.wallets.drain();
      const before = await d.s.wallet(d.appId);
      const given = await next(d.apiKey);
      assert.deepEqual(given.blocks, ["thinking", "tool_use"]);
      assert.equal(given.thinks, true);
      await d.s.wallets.drain();
      const after = await d.s.wallet(d.appId);
      const [record] = await d.newUsage();
      const billed = { prompt: given.inputTokens, completion: 5 };
      assert.equal(record.cost, expectedCharge(CLAUDE_MODEL, billed));
      assert.equal(given.cost, formatUsd(record.cost));
      assert.equal(after.spent - before.spent, record.cost);
      // The thinking Claude read as input is held for on top of what the same turn holds without.
      const thinkingInput = given.inputTokens - without.inputTokens;
      assert.ok(thinkingInput > 10_000, `thinking read as ${thinkingInput} tokens`);
      assert.ok(
        record.reserved - heldWithout.reserved >=
          expectedCharge(CLAUDE_MODEL, { prompt: thinkingInput, completion: 0 }),
        `held ${record.reserved} against ${heldWithout.reserved}`,
      );
    }));
}

Deno.test("budget Claude: thinking larger than is kept (512 KiB) is not kept, and the next turn of a client that drops it runs without thinking, as before", () =>
  withDialect(async (d) => {
    const thinking = "Weighing the forecast sources again. ".repeat(17_000);
    const next = await firstStep(d, d.apiKey, thinking, false);
    assert.equal(await keptChunks(d, d.appId), 0);
    const given = await next(d.apiKey);
    assert.deepEqual({ thinks: given.thinks, blocks: given.blocks }, {
      thinks: false,
      blocks: ["tool_use"],
    });
  }));

/** The chunks of signed thinking an app has kept. */
async function keptChunks(d: Dialect, appId: string) {
  let n = 0;
  for await (const _ of d.s.kv.list({ prefix: keys.appSignedThinking(appId) })) n++;
  return n;
}

Deno.test("budget Claude, streamed: the signed thinking is kept before the chunk that ends the tool calls reaches the client, which may act on them from then on", async () =>
  await withDialect(async (d) => {
    d.claude.script({
      content: [{ type: "thinking", thinking: "Paris first." }, {
        type: "tool_use",
        name: "weather",
        input: { city: "Paris" },
      }],
      outputTokens: 300,
    });
    const chunks = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Paris?" }],
      tools: [WEATHER],
      reasoning_effort: "high",
      max_tokens: 8000,
      stream: true,
    });
    let finished = false;
    for await (const chunk of chunks) {
      if (chunk.choices[0]?.finish_reason !== "tool_calls") continue;
      finished = true;
      assert.ok(await keptChunks(d, d.appId) > 0, "kept when the finish arrived");
    }
    assert.ok(finished);
    await d.newUsage();
  }));

for (const stream of [false, true]) {
  Deno.test(`Responses API, budget Claude${stream ? ", streamed" : ""}: a client that sends the function call back without its reasoning item gets the kept thinking back too`, () =>
    withDialect(async (d) => {
      d.claude.script({
        content: [{ type: "thinking", thinking: "Paris first." }, {
          type: "tool_use",
          name: "weather",
          input: { city: "Paris" },
        }],
        outputTokens: 300,
      }, { text: "Sunny.", outputTokens: 5 });
      const client = openAiClient(d);
      const tools = [{
        type: "function" as const,
        name: "weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
        strict: false,
      }];
      const ask = async (input: OpenAI.Responses.ResponseInput) => {
        const request = {
          model: CLAUDE_MODEL,
          input,
          tools,
          store: false,
          reasoning: { effort: "high" as const },
          max_output_tokens: 8000,
        };
        return stream
          ? await client.responses.stream(request).finalResponse()
          : await client.responses.create(request);
      };
      const question = { role: "user" as const, content: "Paris?" };
      const first = await ask([question]);
      const call = first.output.find((item) => item.type === "function_call") as
        | OpenAI.Responses.ResponseFunctionToolCall
        | undefined;
      assert.ok(call && first.output.some((item) => item.type === "reasoning"));
      // The call sent back alone, its reasoning item left out.
      const sentCall = {
        type: "function_call" as const,
        call_id: call.call_id,
        name: call.name,
        arguments: call.arguments,
      };
      await ask([question, sentCall, {
        type: "function_call_output",
        call_id: call.call_id,
        output: "sunny",
      }]);
      const sent = d.claude.messages()[1].body;
      assert.equal(sent.thinking?.type, "enabled");
      const assistant = (sent.messages as { role: string; content: { type: string }[] }[])
        .find((m) => m.role === "assistant")!;
      assert.deepEqual(assistant.content.map((b) => b.type), ["thinking", "tool_use"]);
      await d.newUsage();
    }));
}
