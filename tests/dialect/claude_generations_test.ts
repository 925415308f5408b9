/**
 * The newer Claude generations through the openai client: Opus 4.7 thinks adaptively on request
 * and takes no sampling parameters, Sonnet 5 thinks unasked, Opus 5.5 always thinks and cannot be
 * forced to call a tool. Each request reaches the strict fake in the shape that model takes, or is
 * refused before anything is reserved; what is served is billed exactly.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  type Dialect,
  openAiClient,
  THINKING_CLAUDE,
  UNFORCEABLE_CLAUDE,
  WEATHER_TOOLS,
  withDialect,
} from "./harness.ts";

/** The 400 a request gets, having reached no upstream and charged nothing. */
async function refusedBeforeReservation(d: Dialect, body: Record<string, unknown>) {
  const sent = d.claude.received.length;
  const error = await openAiClient(d).chat.completions.create(
    body as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming,
  ).catch((e) => e);
  assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  assert.equal(d.claude.received.length, sent, "nothing reached the upstream");
  assert.equal((await d.newUsage()).length, 0, "nothing charged");
  return { code: error.code, param: error.param, message: error.message };
}

Deno.test("openai SDK, Opus 4.7: reasoning_effort thinks adaptively at that effort, its summary shown as reasoning_content; billed exactly", () =>
  withDialect(async (d) => {
    const answer = {
      content: [
        { type: "thinking" as const, thinking: "Six sevens." },
        { type: "text" as const, text: "42" },
      ],
      inputTokens: 40,
      outputTokens: 300,
    };
    d.claude.script(answer, answer);
    const body = {
      model: ADAPTIVE_CLAUDE,
      messages: [{ role: "user" as const, content: "6 × 7?" }],
      max_tokens: 800,
      reasoning_effort: "medium" as const,
      // The default: taken, and left out upstream.
      temperature: 1,
    };
    const res = await openAiClient(d).chat.completions.create(body);
    assert.equal(res.choices[0].message.content, "42");
    assert.equal(
      (res.choices[0].message as { reasoning_content?: string }).reasoning_content,
      "Six sevens.",
    );
    const sent = d.claude.messages()[0].body;
    assert.deepEqual(sent.thinking, { type: "adaptive", display: "summarized" });
    assert.deepEqual(sent.output_config, { effort: "medium" });
    assert.equal(sent.temperature, undefined);
    assert.equal(sent.max_tokens, 800);
    await assertCharged(d, ADAPTIVE_CLAUDE, { prompt: 40, completion: 300 });

    let reasoning = "";
    for await (
      const chunk of await openAiClient(d).chat.completions.create({ ...body, stream: true })
    ) {
      const delta = chunk.choices[0]?.delta as { reasoning_content?: string } | undefined;
      reasoning += delta?.reasoning_content ?? "";
    }
    assert.equal(reasoning, "Six sevens.");
    await assertCharged(d, ADAPTIVE_CLAUDE, { prompt: 40, completion: 300 });
  }));

Deno.test("openai SDK, Opus 4.7: a temperature other than the default, and a prefill, are refused before anything is reserved", () =>
  withDialect(async (d) => {
    const messages = [{ role: "user", content: "Hi" }];
    assert.deepEqual(
      await refusedBeforeReservation(d, { model: ADAPTIVE_CLAUDE, messages, temperature: 0.2 }),
      {
        code: "unsupported_parameter",
        param: "temperature",
        message:
          "400 Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported.",
      },
    );
    // A conversation ending with the assistant would be a prefill, which it takes none of.
    const prefill = await refusedBeforeReservation(d, {
      model: ADAPTIVE_CLAUDE,
      messages: [...messages, { role: "assistant", content: "Hello" }],
    });
    assert.equal(prefill.param, "messages[1]");
  }));

Deno.test("openai SDK, Sonnet 5: an agent loop runs while the model thinks unasked; reasoning_effort none turns it off", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [
          { type: "thinking", thinking: "I need the weather." },
          { type: "tool_use", name: "get_weather", input: { city: "Paris" } },
        ],
        inputTokens: 400,
        outputTokens: 90,
      },
      {
        content: [
          { type: "thinking", thinking: "It is sunny." },
          { type: "text", text: "Sunny in Paris." },
        ],
        inputTokens: 480,
        outputTokens: 40,
      },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Paris weather?" }];
    const first = await openAiClient(d).chat.completions.create({
      model: THINKING_CLAUDE,
      messages,
      tools: WEATHER_TOOLS,
    });
    const call = first.choices[0].message.tool_calls![0];
    assert.equal(call.type === "function" && call.function.name, "get_weather");
    messages.push(first.choices[0].message);
    messages.push({ role: "tool", tool_call_id: call.id, content: "sunny" });
    const second = await openAiClient(d).chat.completions.create({
      model: THINKING_CLAUDE,
      messages,
      tools: WEATHER_TOOLS,
    });
    assert.equal(second.choices[0].message.content, "Sunny in Paris.");
    // The turn that answers the call is sent thinking, its assistant turn opening with the
    // thinking block the message brought back (reasoning_details).
    const loop = d.claude.messages()[1].body;
    assert.deepEqual(loop.thinking, { type: "adaptive", display: "summarized" });
    assert.deepEqual(loop.messages[1].content.map((b: { type: string }) => b.type), [
      "thinking",
      "tool_use",
    ]);
    await assertCharged(d, THINKING_CLAUDE, { prompt: 400, completion: 90 }, {
      prompt: 480,
      completion: 40,
    });

    // reasoning_effort none tells it not to think.
    d.claude.script({ text: "Hi.", inputTokens: 10, outputTokens: 3 });
    await openAiClient(d).chat.completions.create({
      model: THINKING_CLAUDE,
      messages: [{ role: "user", content: "Hi" }],
      reasoning_effort: "none",
    });
    assert.deepEqual(d.claude.messages()[2].body.thinking, { type: "disabled" });
    await assertCharged(d, THINKING_CLAUDE, { prompt: 10, completion: 3 });
  }));

Deno.test("openai SDK, Opus 5.5: a json_schema answer comes through output_config.format and parses, json_object through the answer tool offered unforced; forcing a tool and no thinking are refused before anything is reserved", () =>
  withDialect(async (d) => {
    d.claude.script({
      content: [
        { type: "thinking", thinking: "A person." },
        { type: "text", text: '{"name":"Ann"}' },
      ],
      inputTokens: 60,
      outputTokens: 25,
    });
    const schema = {
      type: "object",
      properties: { name: { type: "string" } },
      required: ["name"],
      additionalProperties: false,
    };
    const parsed = await openAiClient(d).chat.completions.parse({
      model: UNFORCEABLE_CLAUDE,
      messages: [{ role: "user", content: "Who?" }],
      // The parse helper auto-parses only strict tools.
      tools: WEATHER_TOOLS.map((t) => ({ ...t, function: { ...t.function, strict: true } })),
      response_format: {
        type: "json_schema",
        json_schema: { name: "person", schema, strict: true },
      },
    });
    assert.deepEqual(parsed.choices[0].message.parsed, { name: "Ann" });
    const sent = d.claude.messages()[0].body;
    assert.deepEqual(sent.output_config, { format: { type: "json_schema", schema } });
    assert.deepEqual(sent.tools.map((t: { name: string }) => t.name), ["get_weather"]);
    assert.deepEqual(sent.tool_choice, { type: "auto" });
    assert.deepEqual(sent.thinking, { type: "adaptive", display: "summarized" });
    await assertCharged(d, UNFORCEABLE_CLAUDE, { prompt: 60, completion: 25 });

    const messages = [{ role: "user", content: "Paris weather?" }];
    for (
      const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }]
    ) {
      const refusal = await refusedBeforeReservation(d, {
        model: UNFORCEABLE_CLAUDE,
        messages,
        tools: WEATHER_TOOLS,
        tool_choice,
      });
      assert.equal(refusal.param, "tool_choice");
    }
    // json_object: the answer tool, offered rather than forced; its input is the content.
    d.claude.script((req) => ({
      content: [{ type: "tool_use", name: req.body.tools.at(-1).name, input: { city: "Paris" } }],
      inputTokens: 420,
      outputTokens: 15,
    }));
    const json = await openAiClient(d).chat.completions.create({
      model: UNFORCEABLE_CLAUDE,
      messages: [{ role: "user", content: "Paris as JSON" }],
      response_format: { type: "json_object" },
    });
    assert.equal(json.choices[0].message.content, '{"city":"Paris"}');
    const offered = d.claude.messages().at(-1)!.body;
    assert.deepEqual(offered.tool_choice, { type: "auto" });
    assert.equal(offered.output_config, undefined);
    await assertCharged(d, UNFORCEABLE_CLAUDE, { prompt: 420, completion: 15 });
    assert.equal(
      (await refusedBeforeReservation(d, {
        model: UNFORCEABLE_CLAUDE,
        messages,
        reasoning_effort: "none",
      })).param,
      "reasoning_effort",
    );
  }));
