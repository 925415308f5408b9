import assert from "node:assert/strict";
import { collect, fixtureEvents } from "../test_support.ts";
import { assembleCompletion } from "../assemble.ts";
import type { ChatCompletionChunk, StreamPart } from "../types.ts";
import { oneBatch } from "../part_batches.ts";
import { anthropicStreamParts, messageAsEvents } from "./stream.ts";

const META = {
  requestId: "req_1",
  upstreamModel: "claude-sonnet-4-5",
  answerTool: null,
  hourWrites: false,
};
const fixture = (name: string) => fixtureEvents(new URL(`./fixtures/${name}`, import.meta.url));

Deno.test("input_json_delta streams as OpenAI's tool-call fragments: index, id and name, then arguments", async () => {
  const parts = await collect(anthropicStreamParts(fixture("stream_tool_use.sse"), META));
  const deltas = parts.filter((p) => p.type === "chunk").map((p) =>
    (p.chunk as ChatCompletionChunk).choices[0]
  );
  assert.deepEqual(deltas.map((d) => [d.delta, d.finish_reason]), [
    [{ role: "assistant", content: "", refusal: null }, null],
    [{ content: "Okay, let" }, null],
    [{ content: "'s check the weather." }, null],
    [{
      tool_calls: [{
        index: 0,
        id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        type: "function",
        function: { name: "get_weather", arguments: "" },
      }],
    }, null],
    [{ tool_calls: [{ index: 0, function: { arguments: '{"location":' } }] }, null],
    [{ tool_calls: [{ index: 0, function: { arguments: ' "San Francisco, CA"}' } }] }, null],
    [{
      tool_calls: [{
        index: 1,
        id: "toolu_02Ab",
        type: "function",
        function: { name: "get_time", arguments: "" },
      }],
    }, null],
    [{ tool_calls: [{ index: 1, function: { arguments: '{"timezone": "PST"}' } }] }, null],
    [{}, "tool_calls"],
  ]);
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.deepEqual(usage.usage, {
    promptTokens: 1472,
    completionTokens: 89,
    cachedTokens: 1000,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
  });
  assert.deepEqual(usage.raw?.prompt_tokens_details, {
    cached_tokens: 1000,
    cache_write_tokens: 0,
  });
  const { completion } = assembleCompletion(
    await collect(anthropicStreamParts(fixture("stream_tool_use.sse"), META)),
  );
  assert.equal(
    (completion.choices[0].message.tool_calls as { function: { arguments: string } }[])[0]
      .function.arguments,
    '{"location": "San Francisco, CA"}',
  );
});

Deno.test("thinking streams as reasoning_content, and each block, signed, as one reasoning detail when it ends", async () => {
  const parts = await collect(anthropicStreamParts(fixture("stream_thinking.sse"), META));
  const details = parts.flatMap((p) =>
    p.type === "chunk" && p.chunk.choices[0].delta.reasoning_details
      ? [p.chunk.choices[0].delta.reasoning_details]
      : []
  );
  const thought = "I need to find the GCD of 1071 and 462.\n\n1071 = 2 × 462 + 147";
  const detail = {
    type: "reasoning.text",
    text: thought,
    signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    id: "claude-sonnet-4-5#0",
    format: "anthropic-claude-v1",
    index: 0,
  };
  assert.deepEqual(details, [[detail]]);
  const { completion, usage } = assembleCompletion(parts);
  assert.equal(completion.choices[0].message.reasoning_content, thought);
  assert.deepEqual(completion.choices[0].message.reasoning_details, [detail]);
  assert.equal(completion.choices[0].message.content, "The GCD is 21.");
  assert.equal(completion.choices[0].finish_reason, "stop");
  assert.deepEqual(usage, {
    promptTokens: 56,
    completionTokens: 240,
    cachedTokens: 0,
    cacheWriteTokens: 20,
    cacheWrite1hTokens: 0,
  });
});

Deno.test("redacted thinking is a reasoning.encrypted detail, in the order of the blocks, all in one delta before the answer", async () => {
  const parts = await collect(
    anthropicStreamParts(fixture("stream_redacted_thinking.sse"), META),
  );
  const deltas = parts.flatMap((p) => p.type === "chunk" ? [p.chunk.choices[0].delta] : []);
  const withDetails = deltas.filter((d) => d.reasoning_details);
  // One delta, so that a client keeping only a field's last value (the openai SDK's stream
  // helpers) has them all; before the tool call, while the thinking is the last thing shown.
  assert.equal(withDetails.length, 1);
  assert.equal((withDetails[0].reasoning_details as unknown[]).length, 2);
  assert.ok(deltas.indexOf(withDetails[0]) < deltas.findIndex((d) => d.tool_calls));
  const { completion } = assembleCompletion(parts);
  const message = completion.choices[0].message;
  assert.deepEqual(message.reasoning_details, [
    {
      type: "reasoning.encrypted",
      data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
      id: "claude-sonnet-4-5#0",
      format: "anthropic-claude-v1",
      index: 0,
    },
    {
      type: "reasoning.text",
      text: "The user wants the weather; I will call the tool.",
      signature: "EqoBCkgIARABGAIiQL2UoU0b1OHYi9yH",
      id: "claude-sonnet-4-5#1",
      format: "anthropic-claude-v1",
      index: 1,
    },
  ]);
  assert.equal(completion.choices[0].finish_reason, "tool_calls");
});

Deno.test("the answer tool's input streams as the content, and text beside it is dropped: the content is JSON only", async () => {
  const parts = await collect(
    anthropicStreamParts(fixture("stream_tool_use.sse"), { ...META, answerTool: "get_weather" }),
  );
  const content = parts.flatMap((p) =>
    p.type === "chunk" ? [(p.chunk as ChatCompletionChunk).choices[0].delta.content ?? ""] : []
  ).join("");
  assert.equal(content, `{"location": "San Francisco, CA"}`);
  // Never shown, but billed: it counts when no usage comes.
  assert.deepEqual(parts.findLast((p) => p.type === "unshown_output"), {
    type: "unshown_output",
    text: "Okay, let's check the weather.",
  });
  // Assembled, the answer tool's call is the content, not one of the tool calls.
  const { completion } = assembleCompletion(parts);
  assert.equal(completion.choices[0].message.content, `{"location": "San Francisco, CA"}`);
  const calls = completion.choices[0].message.tool_calls as { function: { name: string } }[];
  assert.deepEqual(calls.map((c) => c.function.name), ["get_time"]);
});

Deno.test("with an answer tool that is never called, the text held back is the content, delivered at the end", async () => {
  const parts = await collect(
    anthropicStreamParts(fixture("stream_thinking.sse"), { ...META, answerTool: "person" }),
  );
  const chunks = parts.flatMap((p) => p.type === "chunk" ? [p.chunk.choices[0]] : []);
  const withContent = chunks.filter((c) => c.delta.content);
  assert.deepEqual(withContent.map((c) => c.delta.content), ["The GCD is 21."]);
  // Released after the thinking, just before the finish.
  assert.equal(chunks.indexOf(withContent[0]), chunks.length - 2);
  assert.equal(chunks.at(-1)!.finish_reason, "stop");
  assert.deepEqual(parts.findLast((p) => p.type === "unshown_output"), {
    type: "unshown_output",
    text: "",
  });
  const { completion } = assembleCompletion(parts);
  assert.equal(completion.choices[0].message.content, "The GCD is 21.");
});

Deno.test("without an answer tool, text streams as it comes", async () => {
  const parts = await collect(anthropicStreamParts(fixture("stream_tool_use.sse"), META));
  assert.equal(parts.some((p) => p.type === "unshown_output"), false);
});

Deno.test("a failure inside a batch of events hands on the parts before it, the final counts included", async () => {
  const event = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: JSON.stringify({ type, ...fields }),
  });
  async function* oneRead() {
    yield [
      event("message_start", { message: { id: "msg_1", usage: { input_tokens: 9 } } }),
      event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }),
      event("message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 2 } }),
      event("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
    ];
  }
  const batches: StreamPart[][] = [];
  await assert.rejects(async () => {
    for await (const batch of anthropicStreamParts(oneRead(), META)) batches.push(batch);
  }, /Overloaded/);
  assert.equal(batches.length, 1);
  const usage = batches[0].find((p) => p.type === "usage");
  assert.ok(usage?.type === "usage", "the final counts reached the reader before the failure");
  assert.equal(usage.usage.completionTokens, 2);
  assert.deepEqual(batches[0].map((p) => p.type), [
    "prompt_tokens",
    "chunk",
    "chunk",
    "chunk",
    "usage",
  ]);
});

Deno.test("a tool called without arguments ends with arguments {}, streamed and assembled", async () => {
  // The real stream of a no-argument call: input {} at its start, one empty partial_json.
  const parts = await collect(anthropicStreamParts(fixture("stream_tool_use_no_input.sse"), META));
  const toolDeltas = parts.flatMap((p) =>
    p.type === "chunk" ? (p.chunk as ChatCompletionChunk).choices[0].delta.tool_calls ?? [] : []
  ) as { function: { arguments?: string } }[];
  assert.equal(toolDeltas.map((d) => d.function.arguments ?? "").join(""), "{}");
  const finish = parts.findLast((p) => p.type === "chunk");
  assert.equal(
    (finish as { chunk: ChatCompletionChunk }).chunk.choices[0].finish_reason,
    "tool_calls",
  );
  const { completion } = assembleCompletion(parts);
  const calls = completion.choices[0].message.tool_calls as {
    function: { name: string; arguments: string };
  }[];
  assert.deepEqual(calls.map((c) => c.function), [{ name: "get_time", arguments: "{}" }]);
});

Deno.test("an answer tool called with empty input answers {}", async () => {
  const { completion } = assembleCompletion(
    await collect(
      anthropicStreamParts(fixture("stream_tool_use_no_input.sse"), {
        ...META,
        answerTool: "get_time",
      }),
    ),
  );
  assert.equal(completion.choices[0].message.content, "{}");
  assert.equal(completion.choices[0].message.tool_calls, undefined);
  assert.equal(completion.choices[0].finish_reason, "stop");
});

Deno.test("a tool block the stream never closed still ends with arguments {} at the message's end", async () => {
  const event = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: JSON.stringify({ type, ...fields }),
  });
  async function* oneRead() {
    yield [
      event("message_start", { message: { id: "msg_1", usage: { input_tokens: 9 } } }),
      event("content_block_start", {
        index: 0,
        content_block: { type: "tool_use", id: "toolu_1", name: "now", input: {} },
      }),
      event("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 5 } }),
      event("message_stop", {}),
    ];
  }
  const { completion } = assembleCompletion(await collect(anthropicStreamParts(oneRead(), META)));
  const calls = completion.choices[0].message.tool_calls as { function: { arguments: string } }[];
  assert.equal(calls[0].function.arguments, "{}");
});

Deno.test("chunks and the assembled completion have OpenAI's shape: a chatcmpl- id tracing the message, logprobs and refusal null", async () => {
  const parts = await collect(anthropicStreamParts(fixture("stream_tool_use.sse"), META));
  const chunks = parts.flatMap((p) => p.type === "chunk" ? [p.chunk] : []);
  for (const chunk of chunks) {
    assert.equal(chunk.id, "chatcmpl-msg_014p7gG3wDgGV9EUtLvnow3U");
    assert.equal(chunk.choices[0].logprobs, null);
  }
  const { completion } = assembleCompletion(parts);
  assert.equal(completion.id, "chatcmpl-msg_014p7gG3wDgGV9EUtLvnow3U");
  assert.equal(completion.choices[0].message.refusal, null);
  assert.equal(completion.choices[0].logprobs, null);
});

Deno.test("a tool call the output cap cut before its input began is not given arguments {}", async () => {
  const event = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: JSON.stringify({ type, ...fields }),
  });
  async function* cutAtCap() {
    yield [
      event("message_start", { message: { id: "msg_1", usage: { input_tokens: 9 } } }),
      event("content_block_start", {
        index: 0,
        content_block: { type: "tool_use", id: "toolu_1", name: "weather", input: {} },
      }),
      event("content_block_stop", { index: 0 }),
      event("message_delta", { delta: { stop_reason: "max_tokens" }, usage: { output_tokens: 5 } }),
      event("message_stop", {}),
    ];
  }
  const { completion } = assembleCompletion(await collect(anthropicStreamParts(cutAtCap(), META)));
  const calls = completion.choices[0].message.tool_calls as { function: { arguments: string } }[];
  assert.equal(calls[0].function.arguments, "");
  assert.equal(completion.choices[0].finish_reason, "length");
});

Deno.test("a second message_delta with a stop reason brings its counts but no second finish", async () => {
  const event = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: JSON.stringify({ type, ...fields }),
  });
  async function* events() {
    yield [
      event("message_start", { message: { id: "msg_1", usage: { input_tokens: 9 } } }),
      event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }),
      event("message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 2 } }),
      event("message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 3 } }),
      event("message_stop", {}),
    ];
  }
  const parts = await collect(anthropicStreamParts(events(), META));
  const finishes = parts.filter((p) =>
    p.type === "chunk" && (p.chunk as ChatCompletionChunk).choices[0]?.finish_reason
  );
  assert.equal(finishes.length, 1);
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.equal(usage.usage.completionTokens, 3);
});

Deno.test("a tool block started again at the same index ends the first call with arguments {}", async () => {
  const event = (type: string, fields: Record<string, unknown>) => ({
    event: type,
    data: JSON.stringify({ type, ...fields }),
  });
  const start = (id: string) =>
    event("content_block_start", {
      index: 0,
      content_block: { type: "tool_use", id, name: "f", input: {} },
    });
  async function* events() {
    yield [
      event("message_start", { message: { id: "msg_1", usage: { input_tokens: 9 } } }),
      start("toolu_a"),
      start("toolu_b"),
      event("content_block_delta", {
        index: 0,
        delta: { type: "input_json_delta", partial_json: '{"x":1}' },
      }),
      event("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 3 } }),
      event("message_stop", {}),
    ];
  }
  const { completion } = assembleCompletion(await collect(anthropicStreamParts(events(), META)));
  const calls = completion.choices[0].message.tool_calls as {
    id: string;
    function: { arguments: string };
  }[];
  assert.deepEqual(calls.map((c) => [c.id, c.function.arguments]), [
    ["toolu_a", "{}"],
    ["toolu_b", '{"x":1}'],
  ]);
});

Deno.test("an answer of a budget-thinking route that ends calling tools hands on its signed thinking, under the first call's id, just before its finish chunk", async () => {
  const parts = await collect(
    anthropicStreamParts(fixture("stream_redacted_thinking.sse"), { ...META, keepsThinking: true }),
  );
  const kept = parts.findIndex((p) => p.type === "signed_thinking");
  const finish = parts.findIndex((p) => p.type === "chunk" && p.chunk.choices[0].finish_reason);
  assert.equal(kept, finish - 1);
  const part = parts[kept];
  assert.ok(part.type === "signed_thinking");
  assert.equal(part.toolCallId, "toolu_01A09q90qw90lq917835lq9");
  const { completion } = assembleCompletion(parts);
  assert.deepEqual(part.details, completion.choices[0].message.reasoning_details);
});

Deno.test("no signed thinking is handed on by a route that does not think by budget, by an answer without tool calls, or by one without thinking", async () => {
  const cases = [
    ["stream_redacted_thinking.sse", false],
    ["stream_thinking.sse", true],
    ["stream_tool_use.sse", true],
  ] as const;
  for (const [name, keepsThinking] of cases) {
    const parts = await collect(anthropicStreamParts(fixture(name), { ...META, keepsThinking }));
    assert.ok(!parts.some((p) => p.type === "signed_thinking"), name);
  }
});

Deno.test("a whole message converts as its stream would: thinking, text and a tool call with its input, finish and usage", async () => {
  const message = {
    id: "msg_whole",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content: [
      { type: "thinking", thinking: "Weather, then.", signature: "sig" },
      { type: "text", text: "Let me check." },
      { type: "tool_use", id: "toolu_1", name: "get_weather", input: { location: "Paris" } },
    ],
    stop_reason: "tool_use",
    stop_sequence: null,
    usage: { input_tokens: 30, cache_read_input_tokens: 10, output_tokens: 25 },
  };
  const { completion, usage } = assembleCompletion(
    await collect(anthropicStreamParts(oneBatch(messageAsEvents(message)), META)),
  );
  assert.equal(completion.id, "chatcmpl-msg_whole");
  const choice = completion.choices[0];
  assert.equal(choice.message.reasoning_content, "Weather, then.");
  assert.equal(choice.message.content, "Let me check.");
  assert.deepEqual(choice.message.tool_calls, [{
    id: "toolu_1",
    type: "function",
    function: { name: "get_weather", arguments: '{"location":"Paris"}' },
  }]);
  assert.equal(choice.finish_reason, "tool_calls");
  assert.deepEqual(usage, {
    promptTokens: 40,
    completionTokens: 25,
    cachedTokens: 10,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
  });
});

Deno.test("a whole answer that is not a message is a malformed response", () => {
  assert.throws(() => messageAsEvents({ type: "error", error: { type: "overloaded_error" } }), {
    kind: "malformed_response",
  });
});
