/**
 * Claude's thinking across an agent loop, through the openai client: each thinking block comes
 * back signed as a `reasoning_details` entry, a client that sends the assistant message back as it
 * came gives Claude its own thinking again (and a thinking budget goes on in the turn that answers
 * the tool call), and that turn is billed for the thinking it reads, within the hold.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type {
  ChatCompletionAssistantMessageParam,
  ChatCompletionMessageParam,
} from "openai/resources/chat/completions";
import type {
  ResponseCreateParamsNonStreaming,
  ResponseInputItem,
} from "openai/resources/responses/responses";
import {
  ADAPTIVE_CLAUDE,
  assertCharged,
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
  openAiClient,
  WEATHER_TOOLS,
  withDialect,
} from "./harness.ts";

const THOUGHT = "The user asks for the weather in Paris, which I cannot know without the tool. "
  .repeat(
    400,
  );

/** The first step thinks and calls the tool; the second answers from its result. */
function scriptLoop(d: Dialect) {
  d.claude.script(
    {
      content: [
        { type: "thinking", thinking: THOUGHT },
        { type: "tool_use", name: "get_weather", input: { city: "Paris" } },
      ],
      outputTokens: 7000,
    },
    // The whole cap, so that the hold covers the input only if its bound does.
    { text: "It is sunny in Paris.", outputTokens: 16_000 },
  );
}

/** A step of the loop: the tools offered, thinking asked for with room for a large budget. */
function askLoop(d: Dialect, model: string, messages: ChatCompletionMessageParam[]) {
  return openAiClient(d).chat.completions.create({
    model,
    messages,
    tools: WEATHER_TOOLS,
    reasoning_effort: "high",
    max_tokens: 16_000,
  });
}

type Detail = { type: string; text?: string; signature?: string; id?: string };

/** Both steps billed exactly what the fake billed, each within its hold. */
async function assertLoopBilled(d: Dialect, model: typeof CLAUDE_MODEL) {
  const [first, second] = d.claude.messages().slice(-2);
  const records = await d.newUsage();
  assert.equal(records.length, 2);
  const billed = [
    { prompt: first.inputTokens, completion: 7000 },
    { prompt: second.inputTokens, completion: 16_000 },
  ];
  records.forEach((record, i) => {
    assert.equal(record.promptTokens, billed[i].prompt);
    assert.equal(record.cost, expectedCharge(model, billed[i]));
    assert.ok(record.reserved >= record.cost, `held ${record.reserved} for ${record.cost}`);
  });
  return { first, second };
}

Deno.test("openai SDK, anthropic kind: an agent loop that sends the assistant message back as it came keeps Claude's thinking: the signed block goes back first, the budget stays on, and its reading is billed within the hold", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const ask = () => askLoop(d, CLAUDE_MODEL, messages);
    const first = (await ask()).choices[0].message;
    const details = (first as { reasoning_details?: Detail[] }).reasoning_details!;
    assert.equal(details.length, 1);
    assert.equal(details[0].type, "reasoning.text");
    assert.equal(details[0].text, THOUGHT);
    messages.push(first);
    messages.push({ role: "tool", tool_call_id: first.tool_calls![0].id, content: "sunny" });
    assert.equal((await ask()).choices[0].message.content, "It is sunny in Paris.");

    const { second } = await assertLoopBilled(d, CLAUDE_MODEL);
    assert.deepEqual(second.body.thinking, { type: "enabled", budget_tokens: 12_800 });
    const assistant = second.body.messages[1].content;
    assert.deepEqual(assistant[0], {
      type: "thinking",
      thinking: THOUGHT,
      signature: details[0].signature,
    });
    assert.equal(assistant[1].type, "tool_use");
    // The turn read the thinking again: it bills more than the same turn without it would.
    assert.ok(second.inputTokens > d.claude.inputTokens({ ...second.body, thinking: undefined }));
  }));

Deno.test("openai SDK, anthropic kind: a streamed agent loop gets each thinking block whole and signed as one reasoning_details entry, which goes back as it came", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const stream = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages,
      tools: WEATHER_TOOLS,
      reasoning_effort: "high",
      max_tokens: 16_000,
      stream: true,
    });
    let reasoning = "";
    const details: Detail[] = [];
    const call = { id: "", name: "", arguments: "" };
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as {
        reasoning_content?: string;
        reasoning_details?: Detail[];
        tool_calls?: { id?: string; function?: { name?: string; arguments?: string } }[];
      };
      reasoning += delta?.reasoning_content ?? "";
      details.push(...delta?.reasoning_details ?? []);
      for (const fragment of delta?.tool_calls ?? []) {
        call.id ||= fragment.id ?? "";
        call.name ||= fragment.function?.name ?? "";
        call.arguments += fragment.function?.arguments ?? "";
      }
    }
    assert.equal(reasoning, THOUGHT);
    assert.equal(details.length, 1);
    const assistant = {
      role: "assistant",
      content: null,
      tool_calls: [{
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments },
      }],
      reasoning_details: details,
    } as ChatCompletionAssistantMessageParam;
    messages.push(assistant, { role: "tool", tool_call_id: call.id, content: "sunny" });
    const answer = await askLoop(d, CLAUDE_MODEL, messages);
    assert.equal(answer.choices[0].message.content, "It is sunny in Paris.");
    const { second } = await assertLoopBilled(d, CLAUDE_MODEL);
    assert.equal(second.body.messages[1].content[0].type, "thinking");
  }));

Deno.test("openai SDK, anthropic kind: a conversation moved to another Claude model leaves the first model's thinking out, which the new one would refuse", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const first = (await askLoop(d, CLAUDE_MODEL, messages)).choices[0].message;
    messages.push(first, { role: "tool", tool_call_id: first.tool_calls![0].id, content: "sunny" });
    const answer = await askLoop(d, ADAPTIVE_CLAUDE, messages);
    assert.equal(answer.choices[0].message.content, "It is sunny in Paris.");
    const sent = d.claude.messages()[1].body;
    assert.deepEqual(sent.thinking, { type: "adaptive", display: "summarized" });
    assert.deepEqual(sent.messages[1].content.map((b: { type: string }) => b.type), ["tool_use"]);
    const [claude, opus] = await d.newUsage();
    assert.equal(claude.model, CLAUDE_MODEL);
    assert.equal(opus.model, ADAPTIVE_CLAUDE);
  }));

Deno.test("openai SDK, anthropic kind: thinking the client edited is refused by Claude, and nothing is charged for it", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const first = (await askLoop(d, CLAUDE_MODEL, messages)).choices[0].message as
      & typeof messages[number]
      & { reasoning_details: Detail[] };
    await assertCharged(d, CLAUDE_MODEL, {
      prompt: d.claude.messages()[0].inputTokens,
      completion: 7000,
    });
    first.reasoning_details[0].text = "I already know it is sunny.";
    messages.push(first, {
      role: "tool",
      tool_call_id: (first as { tool_calls: { id: string }[] }).tool_calls[0].id,
      content: "sunny",
    });
    const error = await askLoop(d, CLAUDE_MODEL, messages).catch((e) => e);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.match(error.message, /Invalid `signature` in `thinking` block/);
    assert.equal((await d.newUsage()).length, 0, "nothing charged");
  }));

const RESPONSES_TOOLS = [{
  type: "function" as const,
  name: "get_weather",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
}];

/** A step of the loop through the Responses API, as askLoop is through chat. */
function askResponses(
  d: Dialect,
  input: ResponseInputItem[],
  options: Pick<ResponseCreateParamsNonStreaming, "store" | "include" | "previous_response_id">,
) {
  return openAiClient(d).responses.create({
    model: CLAUDE_MODEL,
    input,
    tools: RESPONSES_TOOLS,
    reasoning: { effort: "high" },
    max_output_tokens: 16_000,
    ...options,
  });
}

Deno.test("openai SDK Responses, anthropic kind: without storing, the output items sent back as input give Claude its signed thinking back (encrypted_content)", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const input: ResponseInputItem[] = [{ role: "user", content: "Weather in Paris?" }];
    const ask = () =>
      askResponses(d, input, { store: false, include: ["reasoning.encrypted_content"] });
    const first = await ask();
    const reasoning = first.output.find((item) => item.type === "reasoning")!;
    assert.ok(reasoning.encrypted_content, "the reasoning item carries the signed thinking");
    const call = first.output.find((item) => item.type === "function_call")!;
    input.push(...first.output as ResponseInputItem[]);
    input.push({ type: "function_call_output", call_id: call.call_id, output: "sunny" });
    assert.equal((await ask()).output_text, "It is sunny in Paris.");
    const { second } = await assertLoopBilled(d, CLAUDE_MODEL);
    assert.deepEqual(second.body.thinking, { type: "enabled", budget_tokens: 12_800 });
    assert.deepEqual(
      second.body.messages[1].content.map((b: { type: string }) => b.type),
      ["thinking", "tool_use"],
    );
  }));

Deno.test("openai SDK Responses, anthropic kind: a stored response continued by previous_response_id gives Claude its signed thinking back", () =>
  withDialect(async (d) => {
    scriptLoop(d);
    const ask = (input: ResponseInputItem[], previous?: string) =>
      askResponses(d, input, { previous_response_id: previous });
    const first = await ask([{ role: "user", content: "Weather in Paris?" }]);
    const call = first.output.find((item) => item.type === "function_call")!;
    const second = await ask(
      [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }],
      first.id,
    );
    assert.equal(second.output_text, "It is sunny in Paris.");
    const { second: sent } = await assertLoopBilled(d, CLAUDE_MODEL);
    assert.deepEqual(
      sent.body.messages[1].content.map((b: { type: string }) => b.type),
      ["thinking", "tool_use"],
    );
  }));

Deno.test("openai SDK stream helper, anthropic kind: the final message of a stream keeps every thinking block, redacted ones too, and they all go back", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [
          { type: "redacted_thinking", data: "A thought the safety systems sealed." },
          { type: "thinking", thinking: THOUGHT },
          { type: "tool_use", name: "get_weather", input: { city: "Paris" } },
        ],
        outputTokens: 7000,
      },
      { text: "It is sunny in Paris.", outputTokens: 16_000 },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const stream = openAiClient(d).chat.completions.stream({
      model: CLAUDE_MODEL,
      messages,
      tools: WEATHER_TOOLS,
      reasoning_effort: "high",
      max_tokens: 16_000,
    });
    const first = (await stream.finalChatCompletion()).choices[0].message;
    const details = (first as { reasoning_details?: Detail[] }).reasoning_details!;
    assert.deepEqual(details.map((x) => x.type), ["reasoning.encrypted", "reasoning.text"]);
    messages.push(first, { role: "tool", tool_call_id: first.tool_calls![0].id, content: "sunny" });
    const answer = await askLoop(d, CLAUDE_MODEL, messages);
    assert.equal(answer.choices[0].message.content, "It is sunny in Paris.");
    const { second } = await assertLoopBilled(d, CLAUDE_MODEL);
    assert.deepEqual(
      second.body.messages[1].content.map((b: { type: string }) => b.type),
      ["redacted_thinking", "thinking", "tool_use"],
    );
  }));

Deno.test("openai SDK, anthropic kind: with reasoning_effort, a conversation that ends with the assistant (a prefill) is answered without thinking, which Claude refuses before a final assistant message without its thinking block", () =>
  withDialect(async (d) => {
    d.claude.script({ text: " sunny.", inputTokens: 30, outputTokens: 3 });
    const answer = await openAiClient(d).chat.completions.create({
      model: CLAUDE_MODEL,
      messages: [
        { role: "user", content: "Weather in Paris, in one word?" },
        { role: "assistant", content: "It is" },
      ],
      reasoning_effort: "high",
      max_tokens: 4000,
    });
    assert.equal(answer.choices[0].message.content, " sunny.");
    assert.equal(d.claude.messages()[0].body.thinking, undefined);
    await assertCharged(d, CLAUDE_MODEL, { prompt: 30, completion: 3 });
  }));

Deno.test("openai SDK, anthropic kind: an answer cut at the cap and sent back to be continued keeps thinking, its signed block first", () =>
  withDialect(async (d) => {
    d.claude.script(
      {
        content: [{ type: "thinking", thinking: THOUGHT }, { type: "text", text: "It is" }],
        stopReason: "max_tokens",
        outputTokens: 7000,
      },
      { text: " sunny.", outputTokens: 3 },
    );
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Paris?" }];
    const ask = () =>
      openAiClient(d).chat.completions.create({
        model: CLAUDE_MODEL,
        messages,
        reasoning_effort: "high",
        max_tokens: 16_000,
      });
    const cut = await ask();
    assert.equal(cut.choices[0].finish_reason, "length");
    messages.push(cut.choices[0].message);
    assert.equal((await ask()).choices[0].message.content, " sunny.");
    const sent = d.claude.messages()[1].body;
    assert.deepEqual(sent.thinking, { type: "enabled", budget_tokens: 12_800 });
    assert.deepEqual(
      sent.messages[1].content.map((b: { type: string }) => b.type),
      ["thinking", "text"],
    );
  }));
