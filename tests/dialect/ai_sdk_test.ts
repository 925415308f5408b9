/**
 * The Vercel AI SDK against both provider kinds: an agent loop with tools and a multi-step stop
 * condition, through @ai-sdk/openai-compatible and @ai-sdk/openai's chat model.
 */
import assert from "node:assert/strict";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  CLAUDE_MODEL,
  type Dialect,
  OPENAI_MODEL,
  scriptAgentLoop,
  THINKING_CLAUDE,
  UNFORCEABLE_CLAUDE,
  withDialect,
} from "./harness.ts";
import { assertAuditClean, serveLoopback, startService, usageRecords } from "../helpers.ts";

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: ({ city }) => Promise.resolve(`${city}: sunny, 21 C`),
});

function models(d: Dialect) {
  const compatible = createOpenAICompatible({
    name: "tollbooth",
    baseURL: d.baseURL,
    apiKey: d.apiKey,
    includeUsage: true,
  });
  const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
  return {
    "openai-compatible": (id: string) => compatible.chatModel(id),
    "openai .chat()": (id: string) => openai.chat(id),
    "openai Responses": (id: string) => openai(id),
  };
}

function assertToolResultReachedUpstream(d: Dialect, kind: "openai" | "anthropic") {
  if (kind === "openai") {
    const last = d.openai.chats[1].body.messages.at(-1);
    assert.equal(last.role, "tool");
    assert.match(JSON.stringify(last.content), /sunny, 21 C/);
  } else {
    const last = d.claude.messages()[1].body.messages.at(-1);
    assert.equal(last.content[0].type, "tool_result");
    assert.match(JSON.stringify(last.content[0].content), /sunny, 21 C/);
  }
}

const KINDS = [
  { kind: "openai", model: OPENAI_MODEL },
  { kind: "anthropic", model: CLAUDE_MODEL },
] as const;

for (const { kind, model } of KINDS) {
  for (const provider of ["openai-compatible", "openai .chat()"] as const) {
    Deno.test(`AI SDK ${provider}, ${kind} kind: generateText runs a tool and stops at stepCountIs(3)`, () =>
      withDialect(async (d) => {
        const usage = scriptAgentLoop(d, kind);
        const result = await generateText({
          model: models(d)[provider](model),
          prompt: "What is the weather in Paris?",
          tools: { weather },
          stopWhen: stepCountIs(3),
          maxRetries: 0,
        });
        assert.equal(result.text, "It is sunny in Paris.");
        assert.equal(result.steps.length, 2);
        assert.equal(result.steps[0].toolCalls[0].toolName, "weather");
        assertToolResultReachedUpstream(d, kind);
        await assertCharged(d, model, ...usage);
      }));

    Deno.test(`AI SDK ${provider}, ${kind} kind: streamText runs the same loop from streamed tool calls`, () =>
      withDialect(async (d) => {
        const usage = scriptAgentLoop(d, kind);
        const result = streamText({
          model: models(d)[provider](model),
          prompt: "What is the weather in Paris?",
          tools: { weather },
          stopWhen: stepCountIs(3),
          maxRetries: 0,
        });
        let text = "";
        for await (const piece of result.textStream) text += piece;
        assert.equal(text, "It is sunny in Paris.");
        const steps = await result.steps;
        assert.equal(steps.length, 2);
        assert.deepEqual(steps[0].toolCalls[0].input, { city: "Paris" });
        assertToolResultReachedUpstream(d, kind);
        await assertCharged(d, model, ...usage);
      }));
  }
}

const Person = z.object({ name: z.string(), born: z.number().int() });
const ADA = { name: "Ada Lovelace", born: 1815 };

for (const { kind, model } of KINDS) {
  for (const provider of ["openai-compatible", "openai .chat()", "openai Responses"] as const) {
    Deno.test(`AI SDK ${provider}, ${kind} kind: Output.object is the schema's object, generated and streamed, each charged its usage`, () =>
      withDialect(async (d) => {
        for (let i = 0; i < 2; i++) {
          if (kind === "openai") {
            d.openai.script({
              content: JSON.stringify(ADA),
              promptTokens: 60,
              completionTokens: 11,
            });
          } else {
            // Without a schema to send (openai-compatible asks for json_object), the answer tool
            // Tollbooth gives Claude is json_response; with one, it carries the schema's name.
            const name = provider === "openai-compatible" ? "json_response" : "response";
            d.claude.script({
              content: [{ type: "tool_use", name, input: ADA }],
              inputTokens: 410,
              outputTokens: 20,
            });
          }
        }
        const options = {
          model: models(d)[provider](model),
          output: Output.object({ schema: Person }),
          // OpenAI refuses json_object unless the messages mention JSON.
          prompt: "Who wrote the first program? Answer in JSON.",
          maxRetries: 0,
        };
        assert.deepEqual((await generateText(options)).output, ADA);
        const streamed = streamText(options);
        const partials = [];
        for await (const partial of streamed.partialOutputStream) partials.push(partial);
        assert.ok(partials.length >= 1);
        assert.deepEqual(await streamed.output, ADA);
        const usage = kind === "openai"
          ? { prompt: 60, completion: 11 }
          : { prompt: 410, completion: 20 };
        await assertCharged(d, model, usage, usage);
      }));
  }
}

for (const provider of ["openai-compatible", "openai .chat()", "openai Responses"] as const) {
  Deno.test(`AI SDK ${provider}, a Claude that always thinks and cannot be forced to call a tool: Output.object is the schema's object`, () =>
    withDialect(async (d) => {
      // openai-compatible asks for json_object (the answer tool, offered); the others send the
      // schema (Anthropic's output format), and the answer is text.
      d.claude.script((req) => ({
        content: [
          { type: "thinking", thinking: "Ada." },
          req.body.output_config?.format
            ? { type: "text", text: JSON.stringify(ADA) }
            : { type: "tool_use", name: req.body.tools.at(-1).name, input: ADA },
        ],
        inputTokens: 410,
        outputTokens: 30,
      }));
      const { output } = await generateText({
        model: models(d)[provider](UNFORCEABLE_CLAUDE),
        output: Output.object({ schema: Person }),
        prompt: "Who wrote the first program? Answer in JSON.",
        maxRetries: 0,
      });
      assert.deepEqual(output, ADA);
      const sent = d.claude.messages()[0].body;
      assert.notEqual(sent.tool_choice?.type, "any");
      assert.notEqual(sent.tool_choice?.type, "tool");
      await assertCharged(d, UNFORCEABLE_CLAUDE, { prompt: 410, completion: 30 });
    }));
}

Deno.test("AI SDK openai .chat(), a Claude that cannot be forced to call a tool: a schema with a discriminated union, an integer and a cuid reaches Anthropic's output format in the subset it takes", () =>
  withDialect(async (d) => {
    const Shape = z.object({
      id: z.cuid2(),
      sides: z.number().int(),
      kind: z.discriminatedUnion("type", [
        z.object({ type: z.literal("circle"), r: z.number() }),
        z.object({ type: z.literal("square"), side: z.number() }),
      ]),
    });
    const shape = { id: "tz4a98xxat96iws9zmbrgj3a", sides: 4, kind: { type: "square", side: 2 } };
    d.claude.script({ text: JSON.stringify(shape), inputTokens: 300, outputTokens: 40 });
    const { output } = await generateText({
      model: models(d)["openai .chat()"](UNFORCEABLE_CLAUDE),
      output: Output.object({ schema: Shape }),
      prompt: "A square.",
      maxRetries: 0,
    });
    assert.deepEqual(output, shape);
    const format = d.claude.messages()[0].body.output_config.format.schema;
    assert.equal(format.properties.kind.anyOf.length, 2);
    await assertCharged(d, UNFORCEABLE_CLAUDE, { prompt: 300, completion: 40 });
  }));

Deno.test("AI SDK openai Responses: reasoningEffort for a model whose id the SDK does not read as a reasoning model is sent with forceReasoning, as the README says", () =>
  withDialect(async (d) => {
    d.claude.script({
      content: [{ type: "thinking", thinking: "Six sevens." }, { type: "text", text: "42" }],
      inputTokens: 20,
      outputTokens: 60,
    });
    const { text } = await generateText({
      model: models(d)["openai Responses"](ADAPTIVE_CLAUDE),
      prompt: "6 × 7?",
      providerOptions: { openai: { reasoningEffort: "high", forceReasoning: true } },
      maxRetries: 0,
    });
    assert.equal(text, "42");
    assert.deepEqual(d.claude.messages()[0].body.output_config, { effort: "high" });
    await assertCharged(d, ADAPTIVE_CLAUDE, { prompt: 20, completion: 60 });
  }));

Deno.test("AI SDK openai-compatible, a Claude that thinks unasked: a multi-step tool loop runs", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [
          { type: "thinking", thinking: "Weather first." },
          { type: "tool_use", name: "weather", input: { city: "Paris" } },
        ],
        inputTokens: 400,
        outputTokens: 30,
      },
      {
        content: [{ type: "thinking", thinking: "Done." }, { type: "text", text: "Sunny." }],
        inputTokens: 460,
        outputTokens: 8,
      },
    );
    const result = await generateText({
      model: models(d)["openai-compatible"](THINKING_CLAUDE),
      prompt: "Paris",
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    assert.equal(result.text, "Sunny.");
    assert.equal(result.steps.length, 2);
    assert.deepEqual(d.claude.messages()[1].body.thinking, {
      type: "adaptive",
      display: "summarized",
    });
    // The SDK keeps only the fields it knows: Claude's signed thinking (reasoning_details) does not
    // come back, and the loop goes on without it.
    assert.deepEqual(
      d.claude.messages()[1].body.messages[1].content.map((b: { type: string }) => b.type),
      ["tool_use"],
    );
    await assertCharged(d, THINKING_CLAUDE, { prompt: 400, completion: 30 }, {
      prompt: 460,
      completion: 8,
    });
  }));

Deno.test("AI SDK: an agent loop runs against the simulator's tollbooth/echo with no provider key", async () => {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    const compatible = createOpenAICompatible({
      name: "tollbooth",
      baseURL: `${server.url}/v1`,
      apiKey,
      includeUsage: true,
    });
    const options = {
      model: compatible.chatModel("tollbooth/echo"),
      prompt: "Paris",
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    };
    const generated = await generateText(options);
    const streamed = streamText(options);
    for (const result of [generated, streamed]) {
      const steps = await result.steps;
      assert.equal(steps.length, 2);
      assert.deepEqual(steps[0].toolCalls[0].input, { city: "Paris" });
      assert.equal(await result.text, "Paris: sunny, 21 C");
    }
    await s.wallets.drain();
    assert.equal((await usageRecords(s.kv, appId)).length, 4);
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
  }
});
