/** LangChain.js's ChatOpenAI with a base URL, against both provider kinds: tools and structured output. */
import assert from "node:assert/strict";
import { type AIMessageChunk, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { z } from "zod";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  CLAUDE_MODEL,
  type Dialect,
  langChainModel,
  OPENAI_MODEL,
  THINKING_CLAUDE,
  withDialect,
} from "./harness.ts";

const WEATHER = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

const Person = z.object({ name: z.string(), born: z.number().int() });

const KINDS = [
  { kind: "openai", model: OPENAI_MODEL },
  { kind: "anthropic", model: CLAUDE_MODEL },
] as const;

/** The upstream's two turns of a weather tool loop: the call, then the answer after its result. */
function scriptWeatherTurns(d: Dialect, kind: (typeof KINDS)[number]["kind"]) {
  if (kind === "openai") {
    d.openai.script(
      {
        toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }],
        promptTokens: 70,
        completionTokens: 12,
      },
      { content: "Cold in Oslo.", promptTokens: 95, completionTokens: 5 },
    );
  } else {
    d.claude.script(
      {
        content: [{ type: "tool_use", name: "get_weather", input: { city: "Oslo" } }],
        inputTokens: 380,
        outputTokens: 25,
      },
      { text: "Cold in Oslo.", inputTokens: 420, outputTokens: 6 },
    );
  }
}

/** What those two turns are charged, as each kind's upstream reported them. */
const WEATHER_TURNS_USAGE = {
  openai: [{ prompt: 70, completion: 12 }, { prompt: 95, completion: 5 }],
  anthropic: [{ prompt: 380, completion: 25 }, { prompt: 420, completion: 6 }],
};

for (const { kind, model } of KINDS) {
  Deno.test(`LangChain, ${kind} kind: bindTools calls a tool, and the ToolMessage answer completes the turn`, () =>
    withDialect(async (d) => {
      scriptWeatherTurns(d, kind);
      const llm = langChainModel(d, model).bindTools([WEATHER]);
      const question = new HumanMessage("Weather in Oslo?");
      const call = await llm.invoke([question]);
      assert.equal(call.tool_calls?.[0].name, "get_weather");
      assert.deepEqual(call.tool_calls?.[0].args, { city: "Oslo" });
      const answer = await llm.invoke([
        question,
        call,
        new ToolMessage({ tool_call_id: call.tool_calls![0].id!, content: "-5 C" }),
      ]);
      assert.equal(answer.content, "Cold in Oslo.");
      if (kind === "openai") {
        assert.equal(d.openai.chats[1].body.messages.at(-1).content, "-5 C");
      } else {
        const last = d.claude.messages()[1].body.messages.at(-1);
        assert.deepEqual(last.content[0], {
          type: "tool_result",
          tool_use_id: call.tool_calls![0].id,
          content: "-5 C",
        });
      }
      await assertCharged(d, model, ...WEATHER_TURNS_USAGE[kind]);
    }));

  Deno.test(`LangChain, ${kind} kind: the ToolMessage a tool() returns for its call, named after the tool, completes the turn`, () =>
    withDialect(async (d) => {
      scriptWeatherTurns(d, kind);
      const getWeather = tool(({ city }) => `-5 C in ${city}`, {
        name: "get_weather",
        description: "The weather in a city",
        schema: z.object({ city: z.string() }),
      });
      const llm = langChainModel(d, model).bindTools([getWeather]);
      const question = new HumanMessage("Weather in Oslo?");
      const call = await llm.invoke([question]);
      const result = await getWeather.invoke({ ...call.tool_calls![0], type: "tool_call" });
      assert.equal(result.name, "get_weather");
      const answer = await llm.invoke([question, call, result]);
      assert.equal(answer.content, "Cold in Oslo.");
      if (kind === "openai") {
        // The tool's name goes on as LangChain sent it (OpenAI's cookbook sends it too).
        assert.deepEqual(d.openai.chats[1].body.messages.at(-1), {
          role: "tool",
          tool_call_id: call.tool_calls![0].id,
          content: "-5 C in Oslo",
          name: "get_weather",
        });
      } else {
        const last = d.claude.messages()[1].body.messages.at(-1);
        assert.deepEqual(last.content[0], {
          type: "tool_result",
          tool_use_id: call.tool_calls![0].id,
          content: "-5 C in Oslo",
        });
      }
      await assertCharged(d, model, ...WEATHER_TURNS_USAGE[kind]);
    }));

  Deno.test(`LangChain, ${kind} kind: withStructuredOutput returns the parsed object`, () =>
    withDialect(async (d) => {
      const person = { name: "Ada Lovelace", born: 1815 };
      if (kind === "openai") {
        d.openai.script({
          content: JSON.stringify(person),
          promptTokens: 60,
          completionTokens: 11,
        });
      } else {
        d.claude.script({
          content: [{ type: "tool_use", name: "person", input: person }],
          inputTokens: 410,
          outputTokens: 20,
        });
      }
      const structured = langChainModel(d, model).withStructuredOutput(Person, {
        name: "person",
        method: "jsonSchema",
      });
      assert.deepEqual(await structured.invoke("Who wrote the first program?"), person);
      if (kind === "openai") {
        assert.equal(d.openai.chats[0].body.response_format.type, "json_schema");
      } else {
        assert.deepEqual(d.claude.messages()[0].body.tool_choice, { type: "tool", name: "person" });
      }
      await assertCharged(
        d,
        model,
        kind === "openai" ? { prompt: 60, completion: 11 } : { prompt: 410, completion: 20 },
      );
    }));

  Deno.test(`LangChain, ${kind} kind: stream() delivers the answer in chunks with its usage, charged that usage`, () =>
    withDialect(async (d) => {
      const answer = "Bergen is the rainiest city in Norway.";
      const usage = kind === "openai"
        ? { prompt: 40, completion: 9 }
        : { prompt: 350, completion: 12 };
      if (kind === "openai") {
        d.openai.script({
          content: answer,
          promptTokens: usage.prompt,
          completionTokens: usage.completion,
        });
      } else {
        d.claude.script({
          text: answer,
          inputTokens: usage.prompt,
          outputTokens: usage.completion,
        });
      }
      let whole: AIMessageChunk | undefined;
      let chunks = 0;
      for await (
        const chunk of await langChainModel(d, model).stream("Which city in Norway is rainiest?")
      ) {
        whole = whole ? whole.concat(chunk) : chunk;
        chunks++;
      }
      assert.ok(chunks > 1, "streamed, not answered at once");
      assert.equal(whole?.content, answer);
      assert.equal(whole?.usage_metadata?.input_tokens, usage.prompt);
      assert.equal(whole?.usage_metadata?.output_tokens, usage.completion);
      await assertCharged(d, model, usage);
    }));

  Deno.test(`LangChain with useResponsesApi, ${kind} kind: a tool round trip, then a streamed answer with its usage, each charged`, () =>
    withDialect(async (d) => {
      const steps = kind === "openai"
        ? [{ prompt: 70, completion: 12 }, { prompt: 95, completion: 5 }, {
          prompt: 40,
          completion: 6,
        }]
        : [{ prompt: 380, completion: 25 }, { prompt: 420, completion: 6 }, {
          prompt: 350,
          completion: 6,
        }];
      if (kind === "openai") {
        d.openai.script(
          {
            toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }],
            promptTokens: steps[0].prompt,
            completionTokens: steps[0].completion,
          },
          { content: "Cold in Oslo.", promptTokens: steps[1].prompt, completionTokens: 5 },
          { content: "Bring a warm coat.", promptTokens: steps[2].prompt, completionTokens: 6 },
        );
      } else {
        d.claude.script(
          {
            content: [{ type: "tool_use", name: "get_weather", input: { city: "Oslo" } }],
            inputTokens: steps[0].prompt,
            outputTokens: steps[0].completion,
          },
          { text: "Cold in Oslo.", inputTokens: steps[1].prompt, outputTokens: 6 },
          { text: "Bring a warm coat.", inputTokens: steps[2].prompt, outputTokens: 6 },
        );
      }
      const llm = langChainModel(d, model, { useResponsesApi: true });
      const withTools = llm.bindTools([WEATHER]);
      const question = new HumanMessage("Weather in Oslo?");
      const call = await withTools.invoke([question]);
      assert.deepEqual(call.tool_calls?.[0].args, { city: "Oslo" });
      const answer = await withTools.invoke([
        question,
        call,
        new ToolMessage({ tool_call_id: call.tool_calls![0].id!, content: "-5 C" }),
      ]);
      assert.equal(answer.text, "Cold in Oslo.");
      let whole: AIMessageChunk | undefined;
      for await (const chunk of await llm.stream("What should I wear?")) {
        whole = whole ? whole.concat(chunk) : chunk;
      }
      assert.equal(whole?.text, "Bring a warm coat.");
      assert.equal(whole?.usage_metadata?.input_tokens, steps[2].prompt);
      assert.equal(whole?.usage_metadata?.output_tokens, steps[2].completion);
      await assertCharged(d, model, ...steps);
    }));
}

Deno.test("LangChain: reasoning for a model whose id LangChain does not read as a reasoning model goes through modelKwargs, as the README says", () =>
  withDialect(async (d) => {
    const answer = {
      content: [
        { type: "thinking" as const, thinking: "Six sevens." },
        { type: "text" as const, text: "42" },
      ],
      inputTokens: 20,
      outputTokens: 60,
    };
    for (const useResponsesApi of [false, true]) {
      d.claude.script(answer);
      const modelKwargs = useResponsesApi
        ? { reasoning: { effort: "high" } }
        : { reasoning_effort: "high" };
      await langChainModel(d, ADAPTIVE_CLAUDE, { useResponsesApi, modelKwargs }).invoke("6 × 7?");
      const sent = d.claude.messages().at(-1)!.body;
      assert.deepEqual(
        sent.thinking,
        { type: "adaptive", display: "summarized" },
        String(useResponsesApi),
      );
      assert.deepEqual(sent.output_config, { effort: "high" });
      await assertCharged(d, ADAPTIVE_CLAUDE, { prompt: 20, completion: 60 });
    }
  }));

Deno.test("LangChain, a Claude that thinks unasked: a tool loop runs; LangChain keeps only the fields it knows, so the signed thinking does not come back", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [
          { type: "thinking", thinking: "Weather first." },
          { type: "tool_use", name: "get_weather", input: { city: "Oslo" } },
        ],
        inputTokens: 400,
        outputTokens: 30,
      },
      { text: "Cold in Oslo.", inputTokens: 460, outputTokens: 8 },
    );
    const llm = langChainModel(d, THINKING_CLAUDE).bindTools([WEATHER]);
    const question = new HumanMessage("Weather in Oslo?");
    const call = await llm.invoke([question]);
    const answer = await llm.invoke([
      question,
      call,
      new ToolMessage({ tool_call_id: call.tool_calls![0].id!, content: "-5 C" }),
    ]);
    assert.equal(answer.content, "Cold in Oslo.");
    const sent = d.claude.messages()[1].body.messages[1].content;
    assert.deepEqual(sent.map((b: { type: string }) => b.type), ["tool_use"]);
    await assertCharged(d, THINKING_CLAUDE, { prompt: 400, completion: 30 }, {
      prompt: 460,
      completion: 8,
    });
  }));
