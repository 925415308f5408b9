/**
 * Agent loops of three steps and more on a Claude that thinks by budget, driven by each client
 * library's own loop: which libraries carry Claude's signed thinking from step to step (the
 * Responses API's reasoning items, stored or sent back), which drop it (chat clients that keep
 * only the fields they know), and that every step is charged exactly what Claude billed either
 * way. A budget turn that answers tool calls without its thinking block runs without thinking
 * (Claude refuses it otherwise), so a dropped block never fails a loop.
 */
import assert from "node:assert/strict";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import {
  type AIMessageChunk,
  type BaseMessage,
  HumanMessage,
  ToolMessage,
} from "@langchain/core/messages";
import OpenAI from "openai";
import { z } from "zod";
import {
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
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

/** Every step thought, and went on from the thinking Claude signed in the steps before. */
const CARRIED = [
  { thinks: true, assistant: [] },
  { thinks: true, assistant: [["thinking", "tool_use", "tool_use"]] },
  {
    thinks: true,
    assistant: [["thinking", "tool_use", "tool_use"], ["redacted_thinking", "tool_use"]],
  },
];

/** The first step thought; the rest answered tool results without the block, so without thinking. */
const DROPPED = [
  { thinks: true, assistant: [] },
  { thinks: false, assistant: [["tool_use", "tool_use"]] },
  { thinks: false, assistant: [["tool_use", "tool_use"], ["tool_use"]] },
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
      const messages: BaseMessage[] = [new HumanMessage("Weather in Paris, Rome and Oslo?")];
      for (let step = 0; step < 3; step++) {
        let answer: AIMessageChunk | undefined;
        if (stream) {
          for await (const chunk of await llm.stream(messages)) {
            answer = answer ? answer.concat(chunk) : chunk;
          }
        } else answer = await llm.invoke(messages);
        messages.push(answer!);
        for (const call of answer!.tool_calls ?? []) {
          messages.push(new ToolMessage({ tool_call_id: call.id!, content: "sunny" }));
        }
      }
      assert.equal(messages.at(-1)!.text, "Sunny everywhere.");
      assert.deepEqual(await loopSent(d), CARRIED);
    }));
}

Deno.test("openai SDK runTools, budget Claude: the runner replays only the fields it knows, so the signed thinking does not come back and later steps run without thinking, each charged exactly", () =>
  withDialect(async (d) => {
    scriptThreeSteps(d);
    const runner = openAiClient(d).chat.completions.runTools({
      model: CLAUDE_MODEL,
      messages: [{ role: "user", content: "Weather in Paris, Rome and Oslo?" }],
      tools: [{
        type: "function",
        function: {
          name: "weather",
          description: "The weather in a city",
          parameters: { type: "object", properties: { city: { type: "string" } } },
          function: ({ city }: { city: string }) => `${city}: sunny`,
          parse: JSON.parse,
        },
      }],
      reasoning_effort: "high",
      max_tokens: 8000,
    });
    assert.equal(await runner.finalContent(), "Sunny everywhere.");
    // Claude's answer carried the signed block; the runner's own history keeps it too.
    const first = runner.messages.find((m) => m.role === "assistant") as {
      reasoning_details?: unknown[];
    };
    assert.equal(first.reasoning_details?.length, 1);
    assert.deepEqual(await loopSent(d), DROPPED);
  }));

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
