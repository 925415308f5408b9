/**
 * The OpenAI Responses provider kind through the chat endpoint and Tollbooth's own Responses API:
 * what the real clients send reaches OpenAI's Responses API as it takes it, every answer comes back
 * in the chat shape, each request is charged what the provider billed within its hold, and a
 * reasoning model's encrypted reasoning goes back to it across an agent loop.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import { generateText, stepCountIs, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { HumanMessage, ToolMessage } from "@langchain/core/messages";
import { z } from "zod";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
  langChainModel,
  OPENAI_MODEL,
  openAiClient,
  RESPONSES_MODEL,
  RESPONSES_REASONING_MODEL,
  SUMMARIZED_MODEL,
  UNFORCEABLE_CLAUDE,
  WEATHER_TOOLS,
  withDialect,
} from "./harness.ts";

/** The weather tool in the Responses API's flat shape. */
const FLAT_WEATHER_TOOLS = [{
  type: "function" as const,
  name: "get_weather",
  parameters: WEATHER_TOOLS[0].function.parameters,
  strict: false,
}];

type Detail = { type: string; data?: string; id?: string; format?: string };

/** The validated bodies the fake's Responses API received, oldest first. */
const sent = (d: Dialect) => d.openai.responses.map((r) => r.body);

/**
 * The usage records since the last check, each charged exactly what the fake billed for its
 * request (its own counts, not a script's), within its hold.
 */
async function assertBilledAsUpstream(
  d: Dialect,
  model: typeof RESPONSES_MODEL | typeof RESPONSES_REASONING_MODEL,
  completions: number[],
) {
  const records = await d.newUsage();
  const requests = d.openai.responses.slice(-completions.length);
  assert.equal(records.length, completions.length, "one usage record per request");
  records.forEach((record, i) => {
    const usage = { prompt: requests[i].inputTokens, completion: completions[i] };
    assert.equal(record.promptTokens, usage.prompt, "the provider's input count");
    assert.equal(record.completionTokens, usage.completion, "the provider's output count");
    assert.equal(record.cost, expectedCharge(model, usage));
    assert.equal(record.uncharged, 0);
    assert.ok(record.reserved >= record.cost, `held ${record.reserved} for ${record.cost}`);
  });
  return records;
}

Deno.test("openai SDK, Responses kind: a question is sent to /v1/responses as input items, never stored, and answered and charged in the chat shape", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Paris is the capital of France." });
    const completion = await openAiClient(d).chat.completions.create({
      model: RESPONSES_MODEL,
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Capital of France?" },
      ],
      max_tokens: 200,
      temperature: 0.2,
    });
    assert.equal(completion.choices[0].message.content, "Paris is the capital of France.");
    assert.equal(completion.choices[0].finish_reason, "stop");
    const [body] = sent(d);
    assert.deepEqual(body.input, [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Capital of France?" },
    ]);
    assert.equal(body.model, "gpt-4.1-mini");
    assert.equal(body.max_output_tokens, 200);
    assert.equal(body.store, false);
    assert.equal(body.temperature, 0.2);
    assert.equal(d.openai.chats.length, 0, "nothing went to chat completions");
    assert.equal(d.openai.tokenCounts.length, 0, "the bound decided nothing: no count asked");
    const [record] = await assertBilledAsUpstream(d, RESPONSES_MODEL, [
      completion.usage!.completion_tokens,
    ]);
    assert.equal(completion.usage!.prompt_tokens, record.promptTokens);
    assert.equal((completion.usage as { cost?: string }).cost, (record.cost / 1e6).toFixed(6));
  }));

Deno.test("openai SDK, Responses kind: a streamed answer comes in chunks, ends with its usage chunk, and is charged that usage", () =>
  withDialect(async (d) => {
    const answer = "Bergen is the rainiest city in Norway.";
    d.openai.script({ content: answer, cachedTokens: 0 });
    const stream = await openAiClient(d).chat.completions.create({
      model: RESPONSES_MODEL,
      messages: [{ role: "user", content: "Which city in Norway is rainiest?" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, answer);
    assert.ok(chunks > 3, "streamed, not answered at once");
    assert.equal(finish, "stop");
    const [record] = await assertBilledAsUpstream(d, RESPONSES_MODEL, [usage!.completion_tokens]);
    assert.equal(usage!.prompt_tokens, record.promptTokens);
  }));

Deno.test("openai SDK, Responses kind: an agent loop that sends the assistant message back as it came gives the reasoning model its encrypted reasoning again, billed within the hold", () =>
  withDialect(async (d) => {
    d.openai.script(
      { reasoningTokens: 900, toolCalls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
      // The whole cap, so that the hold covers the input only if its bound does.
      { reasoningTokens: 200, content: "It is sunny in Paris.", completionTokens: 4000 },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const ask = () =>
      openAiClient(d).chat.completions.create({
        model: RESPONSES_REASONING_MODEL,
        messages,
        tools: WEATHER_TOOLS,
        reasoning_effort: "high",
        max_completion_tokens: 4000,
      });
    const first = await ask();
    const message = first.choices[0].message;
    assert.equal(first.choices[0].finish_reason, "tool_calls");
    const details = (message as { reasoning_details?: Detail[] }).reasoning_details!;
    assert.equal(details.length, 1);
    assert.equal(details[0].type, "reasoning.encrypted");
    assert.equal(details[0].format, "openai-responses-v1");
    assert.match(details[0].id!, /^o4-mini#rs_/);
    assert.equal(first.usage!.completion_tokens_details?.reasoning_tokens, 900);
    messages.push(message);
    messages.push({ role: "tool", tool_call_id: message.tool_calls![0].id, content: "sunny" });
    const second = await ask();
    assert.equal(second.choices[0].message.content, "It is sunny in Paris.");

    const [request1, request2] = sent(d);
    assert.deepEqual(request1.reasoning, { effort: "high" });
    assert.deepEqual(request1.include, ["reasoning.encrypted_content"]);
    assert.deepEqual(request2.input.slice(1), [
      {
        type: "reasoning",
        id: details[0].id!.slice("o4-mini#".length),
        summary: [],
        encrypted_content: details[0].data,
      },
      {
        type: "function_call",
        call_id: message.tool_calls![0].id,
        name: "get_weather",
        arguments: JSON.stringify({ city: "Paris" }),
      },
      { type: "function_call_output", call_id: message.tool_calls![0].id, output: "sunny" },
    ]);
    // The turn read its reasoning again, and was billed for it, within the hold.
    assert.equal(d.openai.responses[1].carriedReasoningTokens, 900);
    await assertBilledAsUpstream(d, RESPONSES_REASONING_MODEL, [
      first.usage!.completion_tokens,
      second.usage!.completion_tokens,
    ]);
  }));

Deno.test("openai SDK, Responses kind: a long agent loop whose encrypted reasoning would pass the context by its bytes is counted by OpenAI, served, and held to that count", () =>
  withDialect(async (d) => {
    // Each turn reasons 30,000 tokens: their encrypted content is 4 bytes a token in the fake,
    // so two of them are held at 240,000 tokens by their bytes, past the 200,000 context.
    const call = (city: string) => ({
      reasoningTokens: 30_000,
      toolCalls: [{ name: "get_weather", arguments: { city } }],
    });
    d.openai.script(call("Paris"), call("Rome"), { reasoningTokens: 100, content: "Both sunny." });
    const messages: ChatCompletionMessageParam[] = [
      { role: "user", content: "Weather in Paris and Rome?" },
    ];
    const ask = () =>
      openAiClient(d).chat.completions.create({
        model: RESPONSES_REASONING_MODEL,
        messages,
        tools: WEATHER_TOOLS,
        max_completion_tokens: 32_000,
      });
    for (let turn = 0; turn < 2; turn++) {
      const message = (await ask()).choices[0].message;
      messages.push(message);
      messages.push({ role: "tool", tool_call_id: message.tool_calls![0].id, content: "sunny" });
    }
    assert.equal(d.openai.tokenCounts.length, 0, "the first two turns fit by the bound");
    const last = await ask();
    assert.equal(last.choices[0].message.content, "Both sunny.");
    assert.equal(d.openai.tokenCounts.length, 1, "the third turn was counted");
    const [count] = d.openai.tokenCounts;
    assert.equal(count.body.model, "o4-mini");
    // Only what the count takes: no stream, store, cap or include.
    assert.deepEqual(Object.keys(count.body).sort(), ["input", "model", "tools"]);
    const third = d.openai.responses[2];
    assert.equal(third.carriedReasoningTokens, 60_000);
    assert.equal(count.inputTokens, third.inputTokens, "the count is what the call billed");
    const records = await d.newUsage();
    assert.equal(records.length, 3);
    const held = records[2];
    assert.equal(held.promptTokens, third.inputTokens);
    assert.ok(held.reserved >= held.cost, `held ${held.reserved} for ${held.cost}`);
    // Held to the count (2% and 32 tokens over it), not to the bytes.
    const price = { input: 1.1, output: 4.4 };
    const byCount = Math.ceil(
      (Math.ceil(count.inputTokens * 1.02) + 32) * price.input + 32_000 * price.output,
    );
    assert.ok(held.reserved <= byCount + 1, `held ${held.reserved}, the count's hold ${byCount}`);
  }));

Deno.test("openai SDK, Responses kind: a streamed agent loop gets the encrypted reasoning in one delta, which the stream helper keeps and the next turn sends back", () =>
  withDialect(async (d) => {
    d.openai.script(
      { reasoningTokens: 400, toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
      { reasoningTokens: 50, content: "Cold in Oslo." },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Oslo?" }];
    const stream = openAiClient(d).chat.completions.stream({
      model: RESPONSES_REASONING_MODEL,
      messages,
      tools: WEATHER_TOOLS,
      stream_options: { include_usage: true },
    });
    let withDetails = 0;
    for await (const chunk of stream) {
      if ((chunk.choices[0]?.delta as { reasoning_details?: unknown })?.reasoning_details) {
        withDetails++;
      }
    }
    assert.equal(withDetails, 1);
    const first = (await stream.finalChatCompletion()).choices[0].message;
    const details = (first as { reasoning_details?: Detail[] }).reasoning_details!;
    assert.equal(details.length, 1);
    messages.push(first as ChatCompletionMessageParam);
    messages.push({ role: "tool", tool_call_id: first.tool_calls![0].id, content: "-5 C" });
    const second = await openAiClient(d).chat.completions.create({
      model: RESPONSES_REASONING_MODEL,
      messages,
      tools: WEATHER_TOOLS,
    });
    assert.equal(second.choices[0].message.content, "Cold in Oslo.");
    assert.equal(sent(d)[1].input[1].encrypted_content, details[0].data);
    assert.equal(d.openai.responses[1].carriedReasoningTokens, 400);
    const records = await d.newUsage();
    assert.equal(records.length, 2);
    for (const record of records) assert.ok(record.reserved >= record.cost);
  }));

Deno.test("openai SDK, Responses kind: a conversation moved from another model goes on without that model's reasoning", () =>
  withDialect(async (d) => {
    d.openai.script({ reasoningTokens: 100, content: "Done." });
    const foreign = {
      type: "reasoning.encrypted",
      data: "gAAAAABforeign",
      id: "o3#rs_other",
      format: "openai-responses-v1",
      index: 0,
    };
    const completion = await openAiClient(d).chat.completions.create({
      model: RESPONSES_REASONING_MODEL,
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Rome"}' },
          }],
          reasoning_details: [foreign],
        } as ChatCompletionMessageParam,
        { role: "tool", tool_call_id: "call_1", content: "warm" },
      ],
      tools: WEATHER_TOOLS,
    });
    assert.ok(!sent(d)[0].input.some((item: { type?: string }) => item.type === "reasoning"));
    await assertBilledAsUpstream(d, RESPONSES_REASONING_MODEL, [
      completion.usage!.completion_tokens,
    ]);
  }));

Deno.test("openai SDK, Responses kind: an answer cut at the cap finishes with length and is charged the cap", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "word ".repeat(200) });
    const completion = await openAiClient(d).chat.completions.create({
      model: RESPONSES_MODEL,
      messages: [{ role: "user", content: "Go on." }],
      max_tokens: 20,
    });
    assert.equal(completion.choices[0].finish_reason, "length");
    assert.equal(completion.usage!.completion_tokens, 20);
    await assertBilledAsUpstream(d, RESPONSES_MODEL, [20]);
  }));

Deno.test("openai SDK, Responses kind: logprobs are asked for with include and come back token by token, as chat gives them", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Sunny and warm.", logprob: -0.25 });
    const completion = await openAiClient(d).chat.completions.create({
      model: RESPONSES_MODEL,
      messages: [{ role: "user", content: "Weather?" }],
      logprobs: true,
      top_logprobs: 2,
    });
    const [body] = sent(d);
    assert.deepEqual(body.include, ["message.output_text.logprobs"]);
    assert.equal(body.top_logprobs, 2);
    const tokens = completion.choices[0].logprobs!.content!;
    assert.equal(tokens.map((t) => t.token).join(""), "Sunny and warm.");
    for (const t of tokens) {
      assert.equal(t.logprob, -0.25);
      assert.deepEqual(t.bytes, [...new TextEncoder().encode(t.token)]);
      assert.equal(t.top_logprobs.length, 2);
    }
    await assertBilledAsUpstream(d, RESPONSES_MODEL, [completion.usage!.completion_tokens]);
  }));

Deno.test("openai SDK, Responses kind: fields the Responses API lacks and a cap below 16 are refused before anything is reserved or sent", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const refused = async (body: Record<string, unknown>, param: string, code: string) => {
      const error = await client.chat.completions.create({
        model: RESPONSES_MODEL,
        messages: [{ role: "user", content: "hi" }],
        ...body,
      } as OpenAI.ChatCompletionCreateParamsNonStreaming).then(
        () => assert.fail("accepted"),
        (e) => e,
      );
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.param, param);
      assert.equal(error.code, code);
    };
    await refused({ stop: ["END"] }, "stop", "unsupported_parameter");
    await refused({ logit_bias: { "42": 1 } }, "logit_bias", "unsupported_parameter");
    await refused({ presence_penalty: 1 }, "presence_penalty", "unsupported_parameter");
    await refused({ max_tokens: 10 }, "max_tokens", "invalid_parameter");
    assert.equal(d.openai.received.length, 0, "nothing reached the provider");
    assert.equal((await d.newUsage()).length, 0, "nothing charged");
  }));

Deno.test("openai SDK, Responses kind: the provider's refusal is the client's 400 with its words, and nothing is charged", () =>
  withDialect(async (d) => {
    // OpenAI's reasoning models take only the default temperature: its Responses API says so.
    const error = await openAiClient(d).chat.completions.create({
      model: RESPONSES_REASONING_MODEL,
      messages: [{ role: "user", content: "hi" }],
      temperature: 0.3,
    }).then(() => assert.fail("accepted"), (e) => e);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.match(error.message, /temperature/);
    assert.equal(d.openai.counts.refused, 1);
    assert.equal((await d.newUsage()).length, 0);
  }));

for (const stream of [false, true]) {
  Deno.test(
    `openai SDK, Responses kind: a response OpenAI fails before its first output, while it reasons too, charges nothing and answers its status${
      stream ? ", streamed" : ""
    }: 400 with OpenAI's words for a refused request, 429 for its rate limit, 502 otherwise`,
    () =>
      withDialect(async (d) => {
        const cases = [
          ["invalid_prompt", 400, "upstream_rejected"],
          ["failed_to_download_image", 400, "upstream_rejected"],
          ["rate_limit_exceeded", 429, "upstream_rate_limited"],
          ["server_error", 502, "provider_unreachable"],
        ] as const;
        // Right after response.in_progress; for the reasoning model, once its reasoning item is
        // done too (it may reason for minutes before its first output).
        const models = [[RESPONSES_MODEL, 2], [RESPONSES_REASONING_MODEL, 4]] as const;
        for (const [model, afterEvents] of models) {
          for (const [code, status, ours] of cases) {
            for (const event of ["response.failed", "error"] as const) {
              const what = `${model}: ${code} in ${event}`;
              d.openai.script({
                content: "Hello there.",
                reasoningTokens: 500,
                streamError: { afterEvents, event, code, message: "Not this one." },
              });
              const error = await (async () => {
                const answer = await openAiClient(d).chat.completions.create({
                  model,
                  messages: [{ role: "user", content: "hello" }],
                  stream,
                });
                if (stream) {
                  for await (const _ of answer as AsyncIterable<unknown>) { /* drained */ }
                }
              })().then(() => assert.fail(`${what}: answered`), (e) => e);
              assert.ok(error instanceof OpenAI.APIError, String(error));
              assert.equal(error.status, status, what);
              assert.equal(error.code, ours, what);
              if (status === 400) assert.match(error.message, /Not this one\./);
            }
          }
        }
        assert.equal((await d.newUsage()).length, 0, "nothing charged");
      }),
  );
}

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: ({ city }) => Promise.resolve(`${city}: sunny, 21 C`),
});

for (const provider of ["openai-compatible", "openai .chat()"] as const) {
  Deno.test(`AI SDK ${provider}, Responses kind: generateText runs a tool loop on a reasoning model and is charged each step`, () =>
    withDialect(async (d) => {
      d.openai.script(
        { reasoningTokens: 300, toolCalls: [{ name: "weather", arguments: { city: "Paris" } }] },
        { reasoningTokens: 40, content: "It is sunny in Paris." },
      );
      const model = provider === "openai-compatible"
        ? createOpenAICompatible({ name: "t", baseURL: d.baseURL, apiKey: d.apiKey })
          .chatModel(RESPONSES_REASONING_MODEL)
        : createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey }).chat(RESPONSES_REASONING_MODEL);
      const result = await generateText({
        model,
        prompt: "What is the weather in Paris?",
        tools: { weather },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      });
      assert.equal(result.text, "It is sunny in Paris.");
      assert.equal(result.steps.length, 2);
      const output = sent(d)[1].input.find((item: { type?: string }) =>
        item.type === "function_call_output"
      );
      assert.match(output.output, /sunny, 21 C/);
      const records = await d.newUsage();
      assert.equal(records.length, 2);
      records.forEach((record, i) => {
        assert.equal(record.promptTokens, d.openai.responses[i].inputTokens);
        assert.ok(record.reserved >= record.cost);
      });
    }));
}

Deno.test("LangChain, Responses kind: bindTools calls a tool, and the ToolMessage answer completes the turn", () =>
  withDialect(async (d) => {
    d.openai.script(
      {
        toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }],
        promptTokens: 70,
        completionTokens: 12,
      },
      { content: "Cold in Oslo.", promptTokens: 95, completionTokens: 5 },
    );
    const llm = langChainModel(d, RESPONSES_MODEL).bindTools([WEATHER_TOOLS[0]]);
    const question = new HumanMessage("Weather in Oslo?");
    const call = await llm.invoke([question]);
    assert.deepEqual(call.tool_calls?.[0].args, { city: "Oslo" });
    const answer = await llm.invoke([
      question,
      call,
      new ToolMessage({ tool_call_id: call.tool_calls![0].id!, content: "-5 C" }),
    ]);
    assert.equal(answer.content, "Cold in Oslo.");
    assert.deepEqual(sent(d)[1].input.at(-1), {
      type: "function_call_output",
      call_id: call.tool_calls![0].id,
      output: "-5 C",
    });
    await assertCharged(d, RESPONSES_MODEL, { prompt: 70, completion: 12 }, {
      prompt: 95,
      completion: 5,
    });
  }));

Deno.test("openai SDK responses.create, Responses kind: reasoning items sent back as input reach OpenAI as the items it made", () =>
  withDialect(async (d) => {
    d.openai.script(
      { reasoningTokens: 600, toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }] },
      { reasoningTokens: 30, content: "Mild in Lima." },
    );
    const client = openAiClient(d);
    const input: ResponseInputItem[] = [{ role: "user", content: "Weather in Lima?" }];
    const first = await client.responses.create({
      model: RESPONSES_REASONING_MODEL,
      input,
      tools: FLAT_WEATHER_TOOLS,
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    const call = first.output.find((item) => item.type === "function_call")!;
    assert.ok(call.type === "function_call");
    input.push(...(first.output as ResponseInputItem[]));
    input.push({ type: "function_call_output", call_id: call.call_id, output: "18 C" });
    const second = await client.responses.create({
      model: RESPONSES_REASONING_MODEL,
      input,
      tools: FLAT_WEATHER_TOOLS,
      store: false,
    });
    assert.equal(second.output_text, "Mild in Lima.");
    const [upstreamFirst, upstreamSecond] = d.openai.responses;
    assert.equal(upstreamSecond.carriedReasoningTokens, 600);
    const carried = upstreamSecond.body.input.find((item: { type?: string }) =>
      item.type === "reasoning"
    );
    assert.match(carried.encrypted_content, /^gAAAA/);
    assert.equal(upstreamFirst.body.store, false);
    const records = await d.newUsage();
    assert.equal(records.length, 2);
    for (const record of records) assert.ok(record.reserved >= record.cost);
  }));

Deno.test("AI SDK openai Responses, Responses kind: a stateless tool loop on a reasoning model sends its reasoning items back through Tollbooth's Responses API to OpenAI", () =>
  withDialect(async (d) => {
    d.openai.script(
      { reasoningTokens: 700, toolCalls: [{ name: "weather", arguments: { city: "Paris" } }] },
      { reasoningTokens: 60, content: "It is sunny in Paris." },
    );
    const result = await generateText({
      model: createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey }).responses(
        RESPONSES_REASONING_MODEL,
      ),
      prompt: "What is the weather in Paris?",
      tools: { weather },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
      providerOptions: { openai: { store: false, include: ["reasoning.encrypted_content"] } },
    });
    assert.equal(result.text, "It is sunny in Paris.");
    assert.equal(result.steps.length, 2);
    const [first, second] = d.openai.responses;
    assert.deepEqual(first.body.include, ["reasoning.encrypted_content"]);
    assert.equal(second.carriedReasoningTokens, 700);
    const records = await d.newUsage();
    assert.equal(records.length, 2);
    records.forEach((record, i) => {
      assert.equal(record.promptTokens, d.openai.responses[i].inputTokens);
      assert.ok(record.reserved >= record.cost);
    });
  }));

Deno.test("openai SDK responses.create, Responses kind: the reasoning summary the client asks for is the one OpenAI is asked for, auto when it asks none", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    for (const summary of ["concise", "detailed"] as const) {
      d.openai.script({
        reasoningTokens: 40,
        reasoningSummary: `A ${summary} summary.`,
        content: "4",
      });
      const response = await client.responses.create({
        model: SUMMARIZED_MODEL,
        input: "2 + 2?",
        reasoning: { summary },
      });
      assert.equal(response.output_text, "4");
      assert.equal(response.reasoning?.summary, summary);
      const reasoning = response.output.find((item) => item.type === "reasoning");
      assert.ok(reasoning?.type === "reasoning");
      assert.deepEqual(reasoning.summary, [{
        type: "summary_text",
        text: `A ${summary} summary.`,
      }]);
    }
    d.openai.script({ reasoningTokens: 40, reasoningSummary: "Adding.", content: "4" }, {
      reasoningTokens: 40,
      reasoningSummary: "Adding.",
      content: "4",
    });
    await client.responses.create({ model: SUMMARIZED_MODEL, input: "2 + 2?" });
    await client.chat.completions.create({
      model: SUMMARIZED_MODEL,
      messages: [{ role: "user", content: "2 + 2?" }],
    });
    assert.deepEqual(sent(d).map((body) => body.reasoning?.summary), [
      "concise",
      "detailed",
      "auto",
      "auto",
    ]);
    await d.newUsage();
  }));

/** The preamble and the answer of the phased weather answer, as they go back to OpenAI. */
const PHASED_MESSAGES_SENT = [
  {
    role: "assistant",
    content: [{ type: "output_text", text: "Checking the forecast." }],
    phase: "commentary",
  },
  {
    role: "assistant",
    content: [{ type: "output_text", text: "Mild in Lima." }],
    phase: "final_answer",
  },
];

Deno.test("openai SDK responses.create, Responses kind: an assistant message's phase goes back to OpenAI with the message, and is listed with its input items; chat providers are not sent it", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const input = [
      { role: "user", content: "Weather in Lima?" },
      {
        type: "message",
        id: "msg_preamble",
        status: "completed",
        role: "assistant",
        phase: "commentary",
        content: [{ type: "output_text", text: "Checking the forecast.", annotations: [] }],
      },
      {
        type: "function_call",
        call_id: "call_1",
        name: "get_weather",
        arguments: '{"city":"Lima"}',
      },
      { type: "function_call_output", call_id: "call_1", output: "18 C" },
      { role: "assistant", content: "Mild in Lima.", phase: "final_answer" },
      { role: "user", content: "And tomorrow?" },
    ] as ResponseInputItem[];
    for (const model of [RESPONSES_MODEL, OPENAI_MODEL, CLAUDE_MODEL]) {
      if (model === CLAUDE_MODEL) d.claude.script({ text: "Mild again." });
      else d.openai.script({ content: "Mild again." });
      const response = await client.responses.create({ model, input, tools: FLAT_WEATHER_TOOLS });
      assert.equal(response.output_text, "Mild again.", model);
      if (model !== RESPONSES_MODEL) continue;
      const listed = await client.responses.inputItems.list(response.id, { order: "asc" });
      assert.deepEqual(
        listed.data.filter((item) => item.type === "message" && item.role === "assistant")
          .map((item) => (item as { phase?: string }).phase),
        ["commentary", "final_answer"],
      );
    }
    const [body] = sent(d);
    assert.deepEqual(
      body.input.filter((item: { role?: string }) => item.role === "assistant"),
      PHASED_MESSAGES_SENT,
    );
    assert.equal(d.openai.chats.length, 1, "the chat provider took the conversation without it");
    assert.equal(d.claude.messages().length, 1);
    await d.newUsage();
  }));

Deno.test("openai SDK responses.create, Responses kind: the phase OpenAI gives its message is on the output item, streamed or not, and goes back with previous_response_id", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    d.openai.script(
      {
        reasoningTokens: 20,
        content: "Checking the forecast.",
        toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }],
      },
      { reasoningTokens: 20, content: "Mild in Lima." },
    );
    const first = await client.responses.create({
      model: SUMMARIZED_MODEL,
      input: "Weather in Lima?",
      tools: FLAT_WEATHER_TOOLS,
    });
    const preamble = first.output.find((item) => item.type === "message");
    assert.equal(preamble?.type === "message" && preamble.phase, "commentary");
    const call = first.output.find((item) => item.type === "function_call")!;
    assert.ok(call.type === "function_call");
    const stream = await client.responses.create({
      model: SUMMARIZED_MODEL,
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "18 C" }],
      tools: FLAT_WEATHER_TOOLS,
      stream: true,
    });
    const added: (string | null | undefined)[] = [];
    let completed;
    for await (const event of stream) {
      if (event.type === "response.output_item.added" && event.item.type === "message") {
        added.push(event.item.phase);
      }
      if (event.type === "response.completed") completed = event.response;
    }
    assert.deepEqual(added, ["final_answer"]);
    const answer = completed!.output.find((item) => item.type === "message");
    assert.equal(answer?.type === "message" && answer.phase, "final_answer");
    const second = sent(d)[1];
    const sentBack = second.input.find((item: { role?: string }) => item.role === "assistant");
    assert.equal(sentBack.phase, "commentary", "the stored turn keeps its phase");
    const stored = await client.responses.retrieve(completed!.id);
    const kept = stored.output.find((item) => item.type === "message");
    assert.equal(kept?.type === "message" && kept.phase, "final_answer");
    await d.newUsage();
  }));

Deno.test("openai SDK responses.create, Responses kind: a preamble, a call and an answer in one response are three output items in order, each message with its own id and phase, streamed or not, and charged the upstream's usage", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const answer = {
      reasoningTokens: 20,
      content: "Checking the forecast.",
      toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }],
      finalAnswer: "Mild in Lima.",
      promptTokens: 120,
      completionTokens: 60,
    };
    d.openai.script(answer, answer);
    const request = {
      model: SUMMARIZED_MODEL,
      input: "Weather in Lima?",
      tools: FLAT_WEATHER_TOOLS,
    };
    const shape = (output: OpenAI.Responses.ResponseOutputItem[]) =>
      output.filter((item) => item.type !== "reasoning").map((item) =>
        item.type === "message"
          ? {
            type: item.type,
            phase: item.phase,
            text: item.content.map((p) => p.type === "output_text" ? p.text : p.refusal),
          }
          : { type: item.type }
      );
    const expected = [
      { type: "message", phase: "commentary", text: ["Checking the forecast."] },
      { type: "function_call" },
      { type: "message", phase: "final_answer", text: ["Mild in Lima."] },
    ];

    const whole = await client.responses.create(request);
    assert.deepEqual(shape(whole.output), expected);
    assert.equal(whole.output_text, "Checking the forecast.Mild in Lima.");
    const ids = whole.output.map((item) => item.id);
    assert.equal(new Set(ids).size, ids.length, "each item its own id");

    const stream = await client.responses.create({ ...request, stream: true });
    const added: { index: number; id: string; type: string; phase?: string | null }[] = [];
    const done: { index: number; id: string }[] = [];
    const texts = new Map<string, string>();
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      if (event.type === "response.output_item.added") {
        const item = event.item;
        added.push({
          index: event.output_index,
          id: item.id!,
          type: item.type,
          ...(item.type === "message" ? { phase: item.phase } : {}),
        });
      }
      if (event.type === "response.output_item.done") {
        done.push({ index: event.output_index, id: event.item.id! });
      }
      if (event.type === "response.output_text.delta") {
        const opened = added.find((item) => item.id === event.item_id);
        assert.equal(opened?.index, event.output_index, "a delta names its item's index");
        assert.equal(event.content_index, 0);
        texts.set(event.item_id, (texts.get(event.item_id) ?? "") + event.delta);
      }
      if (event.type === "response.completed") completed = event.response;
    }
    assert.deepEqual(shape(completed!.output), expected);
    const messages = added.filter((item) => item.type === "message");
    assert.deepEqual(messages.map((item) => item.phase), ["commentary", "final_answer"]);
    assert.deepEqual(
      messages.map((item) => texts.get(item.id)),
      ["Checking the forecast.", "Mild in Lima."],
    );
    assert.deepEqual(added.map((item) => item.index), completed!.output.map((_, i) => i));
    assert.deepEqual(done, added.map(({ index, id }) => ({ index, id })));
    assert.deepEqual(completed!.output.map((item) => item.id), added.map((item) => item.id));

    const usage = { prompt: 120, completion: 60 };
    await assertCharged(d, SUMMARIZED_MODEL, usage, usage);
  }));

Deno.test("openai SDK responses.create, Responses kind: a preamble, a call and an answer go back to OpenAI as two messages, each with its phase, the call's output last (a conversation never ends on the assistant), by previous_response_id as when the client sends the items back", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    d.openai.script(
      {
        content: "Checking the forecast.",
        toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }],
        finalAnswer: "Mild in Lima.",
      },
      { content: "Noted." },
      { content: "Noted." },
    );
    const request = { model: SUMMARIZED_MODEL, tools: FLAT_WEATHER_TOOLS };
    const first = await client.responses.create({ ...request, input: "Weather in Lima?" });
    const call = first.output.find((item) => item.type === "function_call")!;
    assert.ok(call.type === "function_call");
    const result = { type: "function_call_output" as const, call_id: call.call_id, output: "18 C" };
    await client.responses.create({ ...request, previous_response_id: first.id, input: [result] });
    await client.responses.create({
      ...request,
      input: [
        { role: "user", content: "Weather in Lima?" },
        ...first.output as ResponseInputItem[],
        result,
      ],
    });
    const [, continued, resent] = sent(d);
    type Item = { role?: string; type?: string; call_id?: string };
    const answered = (body: Record<string, unknown>) =>
      (body.input as Item[]).filter((item) =>
        item.role === "assistant" || item.type?.startsWith("function_call")
      )
        .map(({ call_id: _, ...rest }) => rest);
    assert.deepEqual(answered(continued), [
      PHASED_MESSAGES_SENT[0],
      PHASED_MESSAGES_SENT[1],
      { type: "function_call", name: "get_weather", arguments: '{"city":"Lima"}' },
      { type: "function_call_output", output: "18 C" },
    ]);
    assert.deepEqual(answered(continued), answered(resent));
    await d.newUsage();
  }));

Deno.test("openai SDK responses.create: OpenAI's preamble, call and answer sent back with the call's output alone reach Claude ending on that output, not on the answer as a prefill its newest models refuse", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const tools = FLAT_WEATHER_TOOLS;
    for (const model of [CLAUDE_MODEL, ADAPTIVE_CLAUDE, UNFORCEABLE_CLAUDE]) {
      for (const byPrevious of [false, true]) {
        const label = `${model}, previous_response_id ${byPrevious}`;
        d.openai.script({
          content: "Checking the forecast.",
          toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }],
          finalAnswer: "Mild in Lima.",
        });
        const question = { role: "user" as const, content: "Weather in Lima?" };
        const first = await client.responses.create({
          model: SUMMARIZED_MODEL,
          input: [question],
          tools,
        });
        const call = first.output.find((item) => item.type === "function_call")!;
        assert.ok(call.type === "function_call");
        const result = {
          type: "function_call_output" as const,
          call_id: call.call_id,
          output: "18 C",
        };
        d.claude.script({ text: "Mild, 18 C." });
        const second = await client.responses.create({
          model,
          tools,
          ...(byPrevious
            ? { previous_response_id: first.id, input: [result] }
            : { input: [question, ...first.output as ResponseInputItem[], result] }),
        });
        assert.equal(second.output_text, "Mild, 18 C.", label);
        const sentMessages = d.claude.messages().at(-1)!.body.messages as {
          role: string;
          content: string | { type: string; text?: string; name?: string }[];
        }[];
        const blocks = (content: (typeof sentMessages)[number]["content"]) =>
          typeof content === "string" ? [content] : content.map((b) => b.text ?? b.name ?? b.type);
        assert.deepEqual(
          sentMessages.map((m) => [m.role, ...blocks(m.content)]),
          [
            ["user", "Weather in Lima?"],
            ["assistant", "Checking the forecast.", "Mild in Lima.", "get_weather"],
            ["user", "tool_result"],
          ],
          label,
        );
      }
    }
    await d.newUsage();
  }));

/** A Responses request streamed or not, as the openai SDK makes it; the response it ends with. */
async function created(
  client: OpenAI,
  body: OpenAI.Responses.ResponseCreateParamsNonStreaming,
  stream: boolean,
): Promise<OpenAI.Responses.Response> {
  if (!stream) return await client.responses.create(body);
  for await (const event of await client.responses.create({ ...body, stream: true })) {
    if (event.type === "response.completed") return event.response;
  }
  throw new Error("the stream did not complete");
}

Deno.test("openai SDK responses.create: OpenAI's preamble, call and answer go on, streamed or not, by input or by previous_response_id, on OpenAI's chat API and on Claude with the call's output right after the preamble's turn that made it and the answer after it", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const tools = FLAT_WEATHER_TOOLS;
    for (const model of [OPENAI_MODEL, CLAUDE_MODEL]) {
      for (const stream of [false, true]) {
        for (const byPrevious of [false, true]) {
          const label = `${model}, stream ${stream}, previous_response_id ${byPrevious}`;
          d.openai.script({
            content: "Checking the forecast.",
            toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }],
            finalAnswer: "Mild in Lima.",
          });
          const question = { role: "user" as const, content: "Weather in Lima?" };
          const first = await created(
            client,
            { model: SUMMARIZED_MODEL, input: [question], tools },
            stream,
          );
          const call = first.output.find((item) => item.type === "function_call")!;
          assert.ok(call.type === "function_call");
          // The other model calls the tool again for the follow-up, then answers.
          if (model === CLAUDE_MODEL) {
            d.claude.script(
              { content: [{ type: "tool_use", name: "get_weather", input: { city: "Lima" } }] },
              { text: "Mild again." },
            );
          } else {
            d.openai.script(
              { toolCalls: [{ name: "get_weather", arguments: { city: "Lima" } }] },
              { content: "Mild again." },
            );
          }
          const result = (id: string, output: string) => ({
            type: "function_call_output" as const,
            call_id: id,
            output,
          });
          const followUp = [result(call.call_id, "18 C"), {
            role: "user" as const,
            content: "And tomorrow?",
          }];
          const second = await created(client, {
            model,
            tools,
            ...(byPrevious
              ? { previous_response_id: first.id, input: followUp }
              : { input: [question, ...first.output as ResponseInputItem[], ...followUp] }),
          }, stream);
          const again = second.output.find((item) => item.type === "function_call")!;
          assert.ok(again.type === "function_call", label);
          const third = await created(client, {
            model,
            tools,
            ...(byPrevious
              ? { previous_response_id: second.id, input: [result(again.call_id, "17 C")] }
              : {
                input: [
                  question,
                  ...first.output as ResponseInputItem[],
                  ...followUp,
                  ...second.output as ResponseInputItem[],
                  result(again.call_id, "17 C"),
                ],
              }),
          }, stream);
          const text = third.output.flatMap((item) =>
            item.type === "message"
              ? item.content.map((p) => p.type === "output_text" ? p.text : p.refusal)
              : []
          );
          assert.deepEqual(text, ["Mild again."], label);

          if (model === CLAUDE_MODEL) {
            const [, last] = d.claude.messages().slice(-2).map((m) => m.body.messages);
            type Block = { type: string; text?: string; name?: string; content?: unknown };
            const blocks = (content: string | Block[]) =>
              typeof content === "string"
                ? [`text ${content}`]
                : content.map((b) =>
                  b.type === "text"
                    ? `text ${b.text}`
                    : b.type === "tool_use"
                    ? `call ${b.name}`
                    : b.type === "tool_result"
                    ? `output ${b.content}`
                    : b.type
                );
            assert.deepEqual(
              last.map((m: { role: string; content: string | Block[] }) => [
                m.role,
                ...blocks(m.content),
              ]),
              [
                ["user", "text Weather in Lima?"],
                ["assistant", "text Checking the forecast.", "call get_weather"],
                ["user", "output 18 C"],
                ["assistant", "text Mild in Lima."],
                ["user", "text And tomorrow?"],
                ["assistant", "call get_weather"],
                ["user", "output 17 C"],
              ],
              label,
            );
          } else {
            const last = d.openai.chats.at(-1)!.body.messages as {
              role: string;
              content: string | null;
              tool_calls?: { function: { name: string } }[];
            }[];
            assert.deepEqual(
              last.map((m) => [
                m.role,
                m.content,
                ...(m.tool_calls ?? []).map((c) => `call ${c.function.name}`),
              ]),
              [
                ["user", "Weather in Lima?"],
                ["assistant", "Checking the forecast.", "call get_weather"],
                ["tool", "18 C"],
                ["assistant", "Mild in Lima."],
                ["user", "And tomorrow?"],
                ["assistant", null, "call get_weather"],
                ["tool", "17 C"],
              ],
              label,
            );
          }
        }
      }
    }
    await d.newUsage();
  }));

Deno.test("openai SDK responses.create: OpenAI's preamble before each of two calls, sent back with both outputs, reaches OpenAI's chat API and Claude with both calls answered right after one turn", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    const preamble = (id: string, text: string) => ({
      type: "message" as const,
      id,
      role: "assistant" as const,
      status: "completed" as const,
      content: [{ type: "output_text" as const, text, annotations: [] }],
      phase: "commentary" as const,
    });
    const input = [
      { role: "user" as const, content: "Weather in Lima and Quito?" },
      preamble("msg_lima", "Checking Lima."),
      {
        type: "function_call",
        call_id: "call_lima",
        name: "get_weather",
        arguments: '{"city":"Lima"}',
      },
      preamble("msg_quito", "Checking Quito."),
      {
        type: "function_call",
        call_id: "call_quito",
        name: "get_weather",
        arguments: '{"city":"Quito"}',
      },
      { type: "function_call_output", call_id: "call_lima", output: "18 C" },
      { type: "function_call_output", call_id: "call_quito", output: "12 C" },
    ] as ResponseInputItem[];
    d.openai.script({ content: "Both mild." });
    d.claude.script({ text: "Both mild." });
    for (const model of [OPENAI_MODEL, CLAUDE_MODEL]) {
      const response = await client.responses.create({ model, input, tools: FLAT_WEATHER_TOOLS });
      assert.equal(response.output_text, "Both mild.", model);
    }
    const chat = d.openai.chats.at(-1)!.body.messages as Record<string, unknown>[];
    assert.deepEqual(
      chat.map((
        m,
      ) => [m.role, m.content ?? null, (m.tool_calls as { id: string }[])?.map((c) => c.id)]),
      [
        ["user", "Weather in Lima and Quito?", undefined],
        ["assistant", "Checking Lima.", undefined],
        ["assistant", "Checking Quito.", ["call_lima", "call_quito"]],
        ["tool", "18 C", undefined],
        ["tool", "12 C", undefined],
      ],
    );
    await d.newUsage();
  }));
