/**
 * Agent loops through Tollbooth's /v1/responses, driven by the AI SDK's default OpenAI provider
 * (the Responses API) and LangChain's ChatOpenAI with useResponsesApi, on every kind of catalog
 * model: three steps (two calls at once, then text beside a call, then the answer), stored or not,
 * streamed or not; every step charged exactly what the upstream billed.
 */
import assert from "node:assert/strict";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  CACHE_WRITING_GPT,
  CLAUDE_MODEL,
  type Dialect,
  type DialectModel,
  langChainLoop,
  langChainModel,
  OPENAI_MODEL,
  REASONING_MODEL,
  RESPONSES_MODEL,
  RESPONSES_REASONING_MODEL,
  SUMMARIZED_MODEL,
  THINKING_CLAUDE,
  UNFORCEABLE_CLAUDE,
  withDialect,
} from "./harness.ts";

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: ({ city }) => Promise.resolve(`${city}: sunny`),
});

type Kind = "openai" | "anthropic";
const MODELS: { model: DialectModel; kind: Kind; thinks?: boolean; reasons?: boolean }[] = [
  { model: OPENAI_MODEL, kind: "openai" },
  { model: REASONING_MODEL, kind: "openai", reasons: true },
  { model: RESPONSES_MODEL, kind: "openai" },
  { model: RESPONSES_REASONING_MODEL, kind: "openai", reasons: true },
  { model: SUMMARIZED_MODEL, kind: "openai", reasons: true },
  { model: CLAUDE_MODEL, kind: "anthropic" },
  { model: ADAPTIVE_CLAUDE, kind: "anthropic" },
  { model: THINKING_CLAUDE, kind: "anthropic", thinks: true },
  { model: UNFORCEABLE_CLAUDE, kind: "anthropic", thinks: true },
];

const USAGE = [
  { prompt: 300, completion: 40 },
  { prompt: 420, completion: 35 },
  { prompt: 520, completion: 9 },
];

function scriptLoop(d: Dialect, kind: Kind, thinks = false, reasons = false) {
  if (kind === "openai") {
    // Within the scripted completion, as OpenAI counts reasoning in it.
    const r = reasons ? { reasoningTokens: 5 } : {};
    d.openai.script(
      {
        ...r,
        toolCalls: [
          { name: "weather", arguments: { city: "Paris" } },
          { name: "weather", arguments: { city: "Rome" } },
        ],
        promptTokens: USAGE[0].prompt,
        completionTokens: USAGE[0].completion,
      },
      {
        ...r,
        content: "Now Oslo.",
        toolCalls: [{ name: "weather", arguments: { city: "Oslo" } }],
        promptTokens: USAGE[1].prompt,
        completionTokens: USAGE[1].completion,
      },
      {
        ...r,
        content: "Sunny everywhere.",
        promptTokens: USAGE[2].prompt,
        completionTokens: USAGE[2].completion,
      },
    );
    return;
  }
  const think = (t: string) => thinks ? [{ type: "thinking" as const, thinking: t }] : [];
  d.claude.script(
    {
      content: [
        ...think("Paris and Rome at once."),
        { type: "tool_use", name: "weather", input: { city: "Paris" } },
        { type: "tool_use", name: "weather", input: { city: "Rome" } },
      ],
      inputTokens: USAGE[0].prompt,
      outputTokens: USAGE[0].completion,
    },
    {
      content: [
        ...think("Oslo next."),
        { type: "text", text: "Now Oslo." },
        { type: "tool_use", name: "weather", input: { city: "Oslo" } },
      ],
      inputTokens: USAGE[1].prompt,
      outputTokens: USAGE[1].completion,
    },
    {
      content: [...think("Done."), { type: "text", text: "Sunny everywhere." }],
      inputTokens: USAGE[2].prompt,
      outputTokens: USAGE[2].completion,
    },
  );
}

/**
 * The conversation the last step sent upstream, in the provider's own shape: Claude's assistant
 * turns as their blocks (signed thinking first where the model thought), chat's messages as their
 * roles and calls, the Responses API's items as their types.
 */
function lastStepSent(d: Dialect, model: DialectModel): unknown[] {
  if (model.startsWith("ant/")) {
    const sent = d.claude.messages();
    assert.equal(sent.length, 3);
    return (sent[2].body.messages as { role: string; content: string | { type: string }[] }[])
      .map((m) => typeof m.content === "string" ? m.role : m.content.map((b) => b.type));
  }
  if (model.startsWith("oai/")) {
    assert.equal(d.openai.chats.length, 3);
    return (d.openai.chats[2].body.messages as { role: string; tool_calls?: unknown[] }[])
      .map((m) => m.tool_calls ? `${m.role} ${m.tool_calls.length}` : m.role);
  }
  assert.equal(d.openai.responses.length, 3);
  return (d.openai.responses[2].body.input as { type?: string; role?: string }[])
    .map((item) => item.type ?? item.role);
}

const CHAT_SENT = ["user", "assistant 2", "tool", "tool", "assistant 1", "tool"];
const CLAUDE_SENT = (thinking: string[]) => [
  "user",
  [...thinking, "tool_use", "tool_use"],
  ["tool_result", "tool_result"],
  [...thinking, "text", "tool_use"],
  ["tool_result"],
];
const RESPONSES_SENT = (reasoning: string[]) => [
  "user",
  ...reasoning,
  "function_call",
  "function_call",
  "function_call_output",
  "function_call_output",
  ...reasoning,
  "assistant",
  "function_call",
  "function_call_output",
];
const LAST_STEP: Record<DialectModel, unknown[]> = {
  [OPENAI_MODEL]: CHAT_SENT,
  [REASONING_MODEL]: CHAT_SENT,
  [CACHE_WRITING_GPT]: CHAT_SENT,
  [RESPONSES_MODEL]: RESPONSES_SENT([]),
  [RESPONSES_REASONING_MODEL]: RESPONSES_SENT(["reasoning"]),
  [SUMMARIZED_MODEL]: RESPONSES_SENT(["reasoning"]),
  [CLAUDE_MODEL]: CLAUDE_SENT([]),
  [ADAPTIVE_CLAUDE]: CLAUDE_SENT([]),
  [THINKING_CLAUDE]: CLAUDE_SENT(["thinking"]),
  [UNFORCEABLE_CLAUDE]: CLAUDE_SENT(["thinking"]),
};

for (const { model, kind, thinks, reasons } of MODELS) {
  for (const store of [true, false]) {
    for (const stream of [false, true]) {
      Deno.test(`AI SDK openai Responses, ${model}${stream ? ", streamed" : ""}, ${store ? "stored" : "store: false"}: a three-step loop with parallel calls and text beside a call runs, each step charged its usage`, () =>
        withDialect(async (d) => {
          scriptLoop(d, kind, thinks, reasons);
          const options = {
            model: createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey })(model),
            prompt: "Weather in Paris, Rome and Oslo?",
            tools: { weather },
            stopWhen: stepCountIs(5),
            maxRetries: 0,
            providerOptions: {
              openai: {
                store,
                ...(store ? {} : { include: ["reasoning.encrypted_content"] }),
              },
            },
          };
          const result = stream ? streamText(options) : await generateText(options);
          assert.equal(await result.text, "Sunny everywhere.");
          const steps = await result.steps;
          assert.deepEqual(steps.map((step) => step.toolCalls.length), [2, 1, 0]);
          assert.deepEqual(lastStepSent(d, model), LAST_STEP[model]);
          await assertCharged(d, model, ...USAGE);
        }));
    }
  }
}

/**
 * GPT-5.4's preamble, call and answer in one response, then another call: each step's upstream
 * input begins with the one the step before sent (the answer before the first call's output, where
 * the model saw it when it went on), as a conversation continued by previous_response_id does.
 */
for (const store of [true, false]) {
  for (const stream of [false, true]) {
    Deno.test(`AI SDK openai Responses, ${SUMMARIZED_MODEL}${stream ? ", streamed" : ""}, ${store ? "stored" : "store: false"}: after an answer written beside its call, each step sends the conversation as the step before it did`, () =>
      withDialect(async (d) => {
        d.openai.script(
          {
            reasoningTokens: 5,
            content: "Let me check.",
            toolCalls: [{ name: "weather", arguments: { city: "Paris" } }],
            finalAnswer: "Probably sunny.",
            promptTokens: USAGE[0].prompt,
            completionTokens: USAGE[0].completion,
          },
          {
            reasoningTokens: 5,
            toolCalls: [{ name: "weather", arguments: { city: "Rome" } }],
            promptTokens: USAGE[1].prompt,
            completionTokens: USAGE[1].completion,
          },
          {
            reasoningTokens: 5,
            content: "Sunny everywhere.",
            promptTokens: USAGE[2].prompt,
            completionTokens: USAGE[2].completion,
          },
        );
        const options = {
          model: createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey })(SUMMARIZED_MODEL),
          prompt: "Weather in Paris and Rome?",
          tools: { weather },
          stopWhen: stepCountIs(5),
          maxRetries: 0,
          providerOptions: { openai: { store, include: ["reasoning.encrypted_content"] } },
        };
        const result = stream ? streamText(options) : await generateText(options);
        assert.equal(await result.text, "Sunny everywhere.");
        const inputs = d.openai.responses.map((r) => r.body.input as { type?: string }[]);
        assert.equal(inputs.length, 3);
        for (const step of [1, 2]) {
          assert.deepEqual(
            inputs[step].slice(0, inputs[step - 1].length),
            inputs[step - 1],
            `step ${step + 1} goes on from what step ${step} sent`,
          );
        }
        // Step 2's reasoning right before the call it made.
        const added = inputs[2].slice(inputs[1].length).map((item) => item.type);
        assert.deepEqual(added, ["reasoning", "function_call", "function_call_output"]);
        await assertCharged(d, SUMMARIZED_MODEL, ...USAGE);
      }));
  }
}

/** The same tool in OpenAI's shape, as LangChain binds it. */
const WEATHER = {
  type: "function" as const,
  function: {
    name: "weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

for (const { model, kind, thinks, reasons } of MODELS.filter((m) => m.thinks || m.reasons)) {
  for (const stream of [false, true]) {
    Deno.test(`LangChain with useResponsesApi and zdrEnabled, ${model}${stream ? ", streamed" : ""}: a three-step loop carries the reasoning sent back, each step charged its usage`, () =>
      withDialect(async (d) => {
        scriptLoop(d, kind, thinks, reasons);
        const llm = langChainModel(d, model, {
          useResponsesApi: true,
          zdrEnabled: true,
          ...(reasons ? { reasoning: { effort: "low" as const } } : {}),
        }).bindTools([WEATHER]);
        assert.equal(
          await langChainLoop(llm, stream, (args) => `${args.city}: sunny`),
          "Sunny everywhere.",
        );
        assert.deepEqual(lastStepSent(d, model), LAST_STEP[model]);
        await assertCharged(d, model, ...USAGE);
      }));
  }
}
