import assert from "node:assert/strict";
import { parseSse } from "../sse.ts";
import {
  chunksToResponse,
  type OutputItem,
  outputText,
  type ResponseEvent,
  ResponseEvents,
  responseObject,
  responseUsage,
} from "./response.ts";
import { testBody, testMeta } from "./test_support.ts";
import { detailsOfEncryptedContent } from "../reasoning_details.ts";

const SIGNED = {
  type: "reasoning.text",
  text: "A greeting.",
  signature: "EqSig",
  format: "anthropic-claude-v1",
  id: "claude-sonnet-4-5#0",
  index: 0,
};
const REDACTED = {
  type: "reasoning.encrypted",
  data: "EmData",
  format: "anthropic-claude-v1",
  id: "claude-sonnet-4-5#1",
  index: 1,
};

async function fixtureEvents(name: string): Promise<ResponseEvent[]> {
  const text = await Deno.readTextFile(new URL(`./fixtures/${name}`, import.meta.url));
  const stream = new Response(text).body!;
  const out: ResponseEvent[] = [];
  for await (const event of (await Array.fromAsync(parseSse(stream))).flat()) {
    const data = JSON.parse(event.data);
    assert.equal(event.event, data.type, "each event is named after its type");
    out.push(data);
  }
  return out;
}

function kind(v: unknown) {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

/** Every field the documented event has, ours has too, with the same JSON type. */
function assertShapeIncludes(actual: unknown, expected: unknown, path = "$") {
  assert.equal(
    kind(actual),
    kind(expected),
    `${path}: ${kind(actual)} where the docs have ${kind(expected)}`,
  );
  if (kind(expected) === "object") {
    for (const [k, v] of Object.entries(expected as Record<string, unknown>)) {
      // null in the docs is "not set"; ours may set it (an object or a string).
      if (v === null) continue;
      assert.ok(k in (actual as Record<string, unknown>), `${path}.${k} is missing`);
      assertShapeIncludes((actual as Record<string, unknown>)[k], v, `${path}.${k}`);
    }
  } else if (kind(expected) === "array") {
    const a = actual as unknown[];
    (expected as unknown[]).forEach((v, i) => {
      if (i < a.length) assertShapeIncludes(a[i], v, `${path}[${i}]`);
    });
  }
}

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  choices: [{ index: 0, delta, finish_reason: finish }],
});

type Chunks = Parameters<typeof chunksToResponse>[0];

/** A completion as a non-streamed answer is made a response: from the one chunk it adds up to. */
function completionToResponse(
  completion: {
    choices: { message: Record<string, unknown>; logprobs?: unknown; finish_reason: string }[];
    usage?: Parameters<typeof chunksToResponse>[1];
  },
  body: Parameters<typeof chunksToResponse>[2],
  meta: Parameters<typeof chunksToResponse>[3],
) {
  const chunks = completion.choices.map(({ message, ...choice }) => ({
    choices: [{ ...choice, delta: message }],
  }));
  return chunksToResponse(chunks as Chunks, completion.usage ?? null, body, meta);
}

Deno.test("a text completion is one message item with its output_text, and the usage renamed", () => {
  const response = completionToResponse(
    {
      choices: [{ message: { role: "assistant", content: "Hi there!" }, finish_reason: "stop" }],
      usage: {
        prompt_tokens: 37,
        completion_tokens: 11,
        prompt_tokens_details: { cached_tokens: 5 },
        completion_tokens_details: { reasoning_tokens: 3 },
      },
    },
    testBody({ instructions: "Be kind.", store: false }),
    testMeta(),
  );
  assert.equal(response.object, "response");
  assert.equal(response.status, "completed");
  assert.equal(response.instructions, "Be kind.");
  assert.deepEqual(response.output, [{
    type: "message",
    id: "msg_1",
    status: "completed",
    role: "assistant",
    content: [{ type: "output_text", text: "Hi there!", annotations: [], logprobs: [] }],
  }]);
  assert.deepEqual(response.usage, {
    input_tokens: 37,
    input_tokens_details: { cached_tokens: 5 },
    output_tokens: 11,
    output_tokens_details: { reasoning_tokens: 3 },
    total_tokens: 48,
  });
  assert.equal(outputText(response.output), "Hi there!");
});

/** A chat logprobs entry as OpenAI sends it, with one alternative. */
const logprob = (token: string, alternative: string) => ({
  token,
  logprob: -0.5,
  bytes: [...new TextEncoder().encode(token)],
  top_logprobs: [{
    token: alternative,
    logprob: -2,
    bytes: [...new TextEncoder().encode(alternative)],
  }],
});

Deno.test("the text's logprobs come back on its output_text part, each token with its bytes and alternatives", () => {
  const response = completionToResponse(
    {
      choices: [{
        message: { role: "assistant", content: "Hi there" },
        // A server that leaves out a token's bytes gets them computed.
        logprobs: { content: [logprob("Hi", "Hey"), { token: " there", logprob: -0.25 }] },
        finish_reason: "stop",
      }],
      usage: { prompt_tokens: 3, completion_tokens: 2 },
    },
    testBody({ include: ["message.output_text.logprobs"], top_logprobs: 1 }),
    testMeta(),
  );
  const part = (response.output[0] as { content: { logprobs: unknown }[] }).content[0];
  assert.deepEqual(part.logprobs, [
    logprob("Hi", "Hey"),
    { token: " there", logprob: -0.25, bytes: [32, 116, 104, 101, 114, 101], top_logprobs: [] },
  ]);
  assert.equal(response.top_logprobs, 1);
});

Deno.test("streamed, each text delta carries its tokens' logprobs, and the part's done event all of them", () => {
  const events = new ResponseEvents(
    testBody({ include: ["message.output_text.logprobs"] }),
    testMeta(),
  );
  const withLogprobs = (content: string, alternative: string) => ({
    choices: [{
      index: 0,
      delta: { content },
      logprobs: { content: [logprob(content, alternative)] },
      finish_reason: null,
    }],
  });
  const out = [
    ...events.start(),
    ...events.chunk(withLogprobs("Hi", "Hey")),
    ...events.chunk(withLogprobs(" there", " you")),
    ...events.chunk(chunk({}, "stop")),
    ...events.finish({ prompt_tokens: 3, completion_tokens: 2 }),
  ];
  const deltas = out.filter((e) => e.type === "response.output_text.delta");
  assert.deepEqual(deltas.map((e) => e.logprobs), [
    [logprob("Hi", "Hey")],
    [logprob(" there", " you")],
  ]);
  const done = out.find((e) => e.type === "response.output_text.done")!;
  assert.deepEqual(done.logprobs, [logprob("Hi", "Hey"), logprob(" there", " you")]);
  const part = (events.output[0] as { content: { logprobs: unknown }[] }).content[0];
  assert.deepEqual(part.logprobs, done.logprobs);
});

Deno.test("tool calls become function_call items with the chat call id as call_id", () => {
  const response = completionToResponse(
    {
      choices: [{
        message: {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_9",
            function: { name: "get_weather", arguments: '{"city":"Rome"}' },
          }],
        },
        finish_reason: "tool_calls",
      }],
    },
    testBody(),
    testMeta(),
  );
  assert.deepEqual(response.output, [{
    type: "function_call",
    id: "fc_1",
    call_id: "call_9",
    name: "get_weather",
    arguments: '{"city":"Rome"}',
    status: "completed",
  }]);
  assert.equal(response.usage, null);
});

Deno.test("a completion cut at its output cap is an incomplete response, reason max_output_tokens", () => {
  const response = completionToResponse(
    {
      choices: [{ message: { role: "assistant", content: "Hal" }, finish_reason: "length" }],
    },
    testBody({ max_output_tokens: 16 }),
    testMeta(),
  );
  assert.equal(response.status, "incomplete");
  assert.deepEqual(response.incomplete_details, { reason: "max_output_tokens" });
  assert.equal(response.output[0].status, "incomplete");
  assert.equal(response.max_output_tokens, 16);
});

Deno.test("a streamed text answer gives the documented event sequence and shapes", async () => {
  const events = new ResponseEvents(
    testBody({ instructions: "You are a helpful assistant." }),
    testMeta(),
  );
  const out = [
    ...events.start(),
    ...events.chunk(chunk({ role: "assistant", content: "" })),
    ...events.chunk(chunk({ content: "Hi" })),
    ...events.chunk(chunk({ content: " there!" })),
    ...events.chunk(chunk({}, "stop")),
    ...events.finish({ prompt_tokens: 37, completion_tokens: 11 }),
  ];
  const documented = await fixtureEvents("stream_text.sse");
  assert.deepEqual(out.map((e) => e.type), documented.map((e) => e.type));
  out.forEach((e, i) => assertShapeIncludes(e, documented[i], e.type));
  assert.deepEqual(out.map((e) => e.sequence_number), out.map((_, i) => i));
  const completed = out.at(-1)!.response as { output: unknown; usage: { total_tokens: number } };
  assert.equal(completed.usage.total_tokens, 48);
  assert.equal(outputText(events.output), "Hi there!");
});

Deno.test("streamed tool-call fragments give the documented function_call events", async () => {
  const tools = [{
    type: "function",
    name: "get_weather",
    description: "Get current temperature for a given location.",
    parameters: {
      type: "object",
      properties: { location: { type: "string" } },
      required: ["location"],
      additionalProperties: false,
    },
    strict: true,
  }];
  const events = new ResponseEvents(testBody({ tools }), testMeta());
  const fragments = ['{"', "location", '":"', "Paris", ",", " France", '"}'];
  const out = [
    ...events.start(),
    ...events.chunk(chunk({
      role: "assistant",
      tool_calls: [{
        index: 0,
        id: "call_1",
        type: "function",
        function: { name: "get_weather", arguments: "" },
      }],
    })),
    ...fragments.flatMap((f) =>
      events.chunk(chunk({ tool_calls: [{ index: 0, function: { arguments: f } }] }))
    ),
    ...events.chunk(chunk({}, "tool_calls")),
    ...events.finish({ prompt_tokens: 291, completion_tokens: 23 }),
  ];
  const documented = await fixtureEvents("stream_function_call.sse");
  assert.deepEqual(out.map((e) => e.type), documented.map((e) => e.type));
  out.forEach((e, i) => assertShapeIncludes(e, documented[i], e.type));
  const done = out.find((e) => e.type === "response.function_call_arguments.done")!;
  assert.equal(done.arguments, '{"location":"Paris, France"}');
});

Deno.test("text then two calls: each item is closed before the next is added", () => {
  const events = new ResponseEvents(testBody(), testMeta());
  const out = [
    ...events.chunk(chunk({ content: "Checking." })),
    ...events.chunk(
      chunk({ tool_calls: [{ index: 0, id: "a", function: { name: "f", arguments: "{}" } }] }),
    ),
    ...events.chunk(
      chunk({ tool_calls: [{ index: 1, id: "b", function: { name: "g", arguments: "{}" } }] }),
    ),
    ...events.finish(null),
  ].map((e) => `${e.type}${"output_index" in e ? `@${e.output_index}` : ""}`);
  assert.deepEqual(out, [
    "response.output_item.added@0",
    "response.content_part.added@0",
    "response.output_text.delta@0",
    "response.output_text.done@0",
    "response.content_part.done@0",
    "response.output_item.done@0",
    "response.output_item.added@1",
    "response.function_call_arguments.delta@1",
    "response.function_call_arguments.done@1",
    "response.output_item.done@1",
    "response.output_item.added@2",
    "response.function_call_arguments.delta@2",
    "response.function_call_arguments.done@2",
    "response.output_item.done@2",
    "response.completed",
  ]);
  assert.deepEqual(events.output.map((i) => i.type), ["message", "function_call", "function_call"]);
});

/**
 * An answer of two commentary messages, a call and the final answer, as the Responses kind's
 * converter streams it: each message opens with its phase, the blank line between beside it.
 */
const PHASED_ANSWER = [
  chunk({ role: "assistant", content: "", refusal: null }),
  chunk({ reasoning_content: "Weather." }),
  chunk({ phase: "commentary" }),
  chunk({ content: "Checking." }),
  chunk({ phase: "commentary", content: "\n\n" }),
  chunk({ content: "Still checking." }),
  chunk({ tool_calls: [{ index: 0, id: "call_1", function: { name: "f", arguments: "{}" } }] }),
  chunk({ phase: "final_answer", content: "\n\n" }),
  chunk({ content: "Mild" }),
  chunk({ content: "." }),
  chunk({}, "tool_calls"),
];

Deno.test("streamed, each message an answer opens with a phase is an item of its own, with its phase and its text alone", () => {
  const events = new ResponseEvents(testBody(), testMeta());
  const out = PHASED_ANSWER.flatMap((c) => events.chunk(c));
  out.push(...events.finish({ prompt_tokens: 10, completion_tokens: 20 }));
  const added = out.filter((e) => e.type === "response.output_item.added").map((e) => {
    const item = e.item as { id: string; type: string; phase?: string };
    return [e.output_index, item.id, item.type, item.phase];
  });
  assert.deepEqual(added, [
    [0, "rs_1", "reasoning", undefined],
    [1, "msg_2", "message", "commentary"],
    [2, "msg_3", "message", "commentary"],
    [3, "fc_4", "function_call", undefined],
    [4, "msg_5", "message", "final_answer"],
  ]);
  const texts = out.filter((e) => e.type === "response.output_text.delta").map((
    e,
  ) => [e.item_id, e.output_index, e.content_index, e.delta]);
  assert.deepEqual(texts, [
    ["msg_2", 1, 0, "Checking."],
    ["msg_3", 2, 0, "Still checking."],
    ["msg_5", 4, 0, "Mild"],
    ["msg_5", 4, 0, "."],
  ]);
  const done = out.filter((e) => e.type === "response.output_item.done").map((e) => e.output_index);
  assert.deepEqual(done, [0, 1, 2, 3, 4], "each closed before the next is added");
  const completed = out.at(-1)!.response as { output: OutputItem[] };
  assert.deepEqual(completed.output, events.output);
  assert.equal(outputText(events.output), "Checking.Still checking.Mild.");
});

Deno.test("a phase given again on each chunk of its message (as a compatible server may) opens no new item, and text beside a phase is the message's", () => {
  const response = chunksToResponse(
    [
      chunk({ role: "assistant", phase: "commentary", content: "Checking" }),
      chunk({ phase: "commentary", content: " now." }),
      chunk({ phase: "final_answer", content: "Mild." }),
      chunk({ phase: "final_answer", content: "\n\nAgain." }),
      chunk({}, "stop"),
    ],
    null,
    testBody(),
    testMeta(),
  );
  assert.deepEqual(
    response.output.map((item) =>
      item.type === "message" &&
      [item.phase, item.content.map((p) => p.type === "output_text" && p.text).join("")]
    ),
    [["commentary", "Checking now."], ["final_answer", "Mild."], ["final_answer", "Again."]],
  );
});

Deno.test("not streamed, the same answer lists the same items in the same order: the preamble, its call, then the answer", () => {
  const response = chunksToResponse(PHASED_ANSWER, null, testBody(), testMeta());
  assert.deepEqual(
    response.output.map((item) =>
      item.type === "message"
        ? [item.id, item.phase, item.content.map((p) => p.type === "output_text" && p.text)]
        : [item.id]
    ),
    [
      ["rs_1"],
      ["msg_2", "commentary", ["Checking."]],
      ["msg_3", "commentary", ["Still checking."]],
      ["fc_4"],
      ["msg_5", "final_answer", ["Mild."]],
    ],
  );
  assert.ok(response.output.every((item) => item.status === "completed"));
});

Deno.test("a stream cut after it began ends with an error event and response.failed", () => {
  const events = new ResponseEvents(testBody(), testMeta());
  events.start();
  events.chunk(chunk({ content: "partial" }));
  const out = events.fail("stream_interrupted", "The upstream stream failed.");
  assert.deepEqual(out.map((e) => e.type), [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "error",
    "response.failed",
  ]);
  const failed = out.at(-1)!.response as { status: string; error: { code: string } };
  assert.equal(failed.status, "failed");
  assert.equal(failed.error.code, "stream_interrupted");
  assert.equal((out[2].item as { status: string }).status, "incomplete");
});

Deno.test("reasoning comes back as a reasoning item with its text as the summary, before the message", () => {
  const response = completionToResponse(
    {
      choices: [{
        message: { role: "assistant", content: "Hello!", reasoning_content: "A greeting." },
        finish_reason: "stop",
      }],
    },
    testBody({ reasoning: { effort: "low", summary: "auto" } }),
    testMeta(),
  );
  assert.deepEqual(response.output[0], {
    type: "reasoning",
    id: "rs_1",
    summary: [{ type: "summary_text", text: "A greeting." }],
    status: "completed",
  });
  assert.equal(response.output[1].type, "message");
  assert.deepEqual(response.reasoning, { effort: "low", summary: "auto" });
  assert.equal(outputText(response.output), "Hello!");
});

Deno.test("streamed reasoning gives the documented reasoning summary events, closed before the message", async () => {
  const events = new ResponseEvents(
    testBody({ reasoning: { effort: "medium", summary: "auto" } }),
    testMeta(),
  );
  const out = [
    ...events.start(),
    ...events.chunk(chunk({ role: "assistant", content: "" })),
    ...events.chunk(chunk({ reasoning_content: "**Responding to a greeting**\n\n" })),
    ...events.chunk(chunk({ reasoning_content: "The user says hello, so I answer in kind." })),
    ...events.chunk(chunk({ content: "Hello! How can I help?" })),
    ...events.chunk(chunk({}, "stop")),
    ...events.finish({
      prompt_tokens: 9,
      completion_tokens: 120,
      completion_tokens_details: { reasoning_tokens: 64 },
    }),
  ];
  const documented = await fixtureEvents("stream_reasoning.sse");
  assert.deepEqual(out.map((e) => e.type), documented.map((e) => e.type));
  out.forEach((e, i) => assertShapeIncludes(e, documented[i], e.type));
  const completed = out.at(-1)!.response as { output: { type: string }[] };
  assert.deepEqual(completed.output.map((item) => item.type), ["reasoning", "message"]);
  assert.equal(outputText(events.output), "Hello! How can I help?");
});

Deno.test("Claude's signed thinking comes back sealed in the reasoning item's encrypted_content, with or without text", () => {
  const answer = (message: Record<string, unknown>) =>
    completionToResponse(
      { choices: [{ message: { role: "assistant", ...message }, finish_reason: "stop" }] },
      testBody(),
      testMeta(),
    ).output[0] as { type: string; summary: unknown[]; encrypted_content?: string };
  const signed = answer({
    content: "Hello!",
    reasoning_content: "A greeting.",
    reasoning_details: [SIGNED, REDACTED],
  });
  assert.deepEqual(signed.summary, [{ type: "summary_text", text: "A greeting." }]);
  assert.deepEqual(detailsOfEncryptedContent(signed.encrypted_content!), [SIGNED, REDACTED]);
  // Redacted thinking alone has no text to show: the item has no summary, and the seal.
  const redacted = answer({ content: "Hello!", reasoning_details: [REDACTED] });
  assert.equal(redacted.type, "reasoning");
  assert.deepEqual(redacted.summary, []);
  assert.deepEqual(detailsOfEncryptedContent(redacted.encrypted_content!), [REDACTED]);
  // Details of no known shape (an upstream's own) are not sealed.
  const other = answer({ content: "Hello!", reasoning_details: [{ type: "custom" }] });
  assert.equal(other.type, "message");
});

Deno.test("streamed, the reasoning item is sealed when it closes: details after its text, or an item of their own", () => {
  const events = new ResponseEvents(testBody(), testMeta());
  const out = [
    ...events.start(),
    ...events.chunk(chunk({ role: "assistant", content: "" })),
    ...events.chunk(chunk({ reasoning_details: [REDACTED] })),
    ...events.chunk(chunk({ content: "Let me think." })),
    ...events.chunk(chunk({ reasoning_content: "A greeting." })),
    ...events.chunk(chunk({ reasoning_details: [SIGNED] })),
    ...events.chunk(chunk({ content: "Hello!" })),
    ...events.chunk(chunk({}, "stop")),
    ...events.finish({ prompt_tokens: 9, completion_tokens: 20 }),
  ];
  const done = out.filter((e) => e.type === "response.output_item.done").map((e) =>
    e.item as { type: string; summary?: unknown[]; encrypted_content?: string }
  );
  assert.deepEqual(done.map((item) => item.type), ["reasoning", "message", "reasoning", "message"]);
  assert.deepEqual(done[0].summary, []);
  assert.deepEqual(detailsOfEncryptedContent(done[0].encrypted_content!), [REDACTED]);
  assert.deepEqual(done[2].summary, [{ type: "summary_text", text: "A greeting." }]);
  assert.deepEqual(detailsOfEncryptedContent(done[2].encrypted_content!), [SIGNED]);
  // A reasoning item without a summary part has no summary events.
  const first = (done[0] as unknown as { id: string }).id;
  assert.equal(out.some((e) => e.item_id === first && String(e.type).includes("summary")), false);
});

Deno.test("a detail streamed in pieces (OpenRouter's way) is sealed whole, and the item goes back accepted", () => {
  const events = new ResponseEvents(testBody(), testMeta());
  events.start();
  events.chunk(chunk({ role: "assistant", content: "" }));
  for (let i = 0; i < 300; i++) {
    events.chunk(chunk({
      reasoning_content: "hm ",
      reasoning_details: [{
        type: "reasoning.text",
        text: "hm ",
        format: "anthropic-claude-v1",
        index: 0,
      }],
    }));
  }
  events.chunk(chunk({
    reasoning_details: [{
      type: "reasoning.text",
      signature: "EqSig",
      format: "anthropic-claude-v1",
      index: 0,
    }],
  }));
  events.chunk(chunk({ content: "Done." }));
  events.chunk(chunk({}, "stop"));
  events.finish({ prompt_tokens: 9, completion_tokens: 300 });
  const item = events.output[0] as { encrypted_content?: string };
  assert.deepEqual(detailsOfEncryptedContent(item.encrypted_content!), [{
    type: "reasoning.text",
    text: "hm ".repeat(300),
    signature: "EqSig",
    format: "anthropic-claude-v1",
    index: 0,
  }]);
});

Deno.test("more details than a message may carry are not sealed: Tollbooth makes no item it would refuse back", () => {
  const response = completionToResponse(
    {
      choices: [{
        message: {
          role: "assistant",
          content: "Hello!",
          reasoning_details: Array.from({ length: 257 }, (_, index) => ({ ...REDACTED, index })),
        },
        finish_reason: "stop",
      }],
    },
    testBody(),
    testMeta(),
  );
  assert.deepEqual(response.output.map((item) => item.type), ["message"]);
});

Deno.test("the usage shown counts DeepSeek's cache hits as cached input, as they were billed", () => {
  const usage = responseUsage({
    prompt_tokens: 1000,
    completion_tokens: 10,
    prompt_cache_hit_tokens: 900,
  });
  assert.equal(usage.input_tokens_details.cached_tokens, 900);
  assert.equal(
    responseUsage({ prompt_tokens: 5, completion_tokens: 1 }).input_tokens_details.cached_tokens,
    0,
  );
});

/** Each function_call item of a stream's output, and its events' order. */
function streamedCalls(chunks: Record<string, unknown>[]) {
  const events = new ResponseEvents(testBody(), testMeta());
  const out = [
    ...chunks.flatMap((delta) => events.chunk(chunk(delta))),
    ...events.chunk(chunk({}, "tool_calls")),
    ...events.finish(null),
  ];
  const calls = events.output.filter((i) => i.type === "function_call");
  return { calls: calls.map(({ call_id, name, arguments: a }) => ({ call_id, name, a })), out };
}

Deno.test("parallel calls streamed interleaved, a piece of each at a time, are one function_call each", () => {
  const piece = (index: number, args: string, head?: { id: string; name: string }) => ({
    tool_calls: [{
      index,
      ...(head ? { id: head.id, type: "function" } : {}),
      function: { ...(head ? { name: head.name } : {}), arguments: args },
    }],
  });
  const { calls, out } = streamedCalls([
    piece(0, "", { id: "call_A", name: "weather" }),
    piece(1, "", { id: "call_B", name: "weather" }),
    piece(0, '{"city":'),
    piece(1, '{"city":'),
    piece(0, '"Paris"}'),
    piece(1, '"Rome"}'),
  ]);
  assert.deepEqual(calls, [
    { call_id: "call_A", name: "weather", a: '{"city":"Paris"}' },
    { call_id: "call_B", name: "weather", a: '{"city":"Rome"}' },
  ]);
  // Each delta names its own item.
  const deltas = out.filter((e) => e.type === "response.function_call_arguments.delta");
  assert.deepEqual(deltas.map((e) => [e.output_index, e.delta]), [
    [0, '{"city":'],
    [1, '{"city":'],
    [0, '"Paris"}'],
    [1, '"Rome"}'],
  ]);
});

Deno.test("calls from a server that sends no index are told apart by their ids", () => {
  const call = (id: string, args: string) => ({
    tool_calls: [{ id, type: "function", function: { name: "weather", arguments: args } }],
  });
  const { calls } = streamedCalls([
    call("call_A", '{"city":"Paris"}'),
    call("call_B", '{"city":'),
    { tool_calls: [{ function: { arguments: '"Rome"}' } }] },
  ]);
  assert.deepEqual(calls, [
    { call_id: "call_A", name: "weather", a: '{"city":"Paris"}' },
    { call_id: "call_B", name: "weather", a: '{"city":"Rome"}' },
  ]);
});

Deno.test("the response object echoes the request's settings as they were served", () => {
  const tool = { type: "function", name: "f", parameters: { type: "object", properties: {} } };
  const response = responseObject(
    testBody({
      text: { verbosity: "low" },
      tools: [tool, { ...tool, name: "g", strict: true }],
      prompt_cache_key: "k1",
      safety_identifier: "user-hash",
      service_tier: "default",
      max_tool_calls: 3,
    }),
    testMeta(),
    { status: "completed", output: [], usage: null },
  );
  assert.deepEqual(response.text, { format: { type: "text" }, verbosity: "low" });
  // A tool is strict only when the client said so, as the chat call serving it was sent.
  assert.deepEqual(response.tools.map((t) => t.strict), [false, true]);
  assert.equal(response.prompt_cache_key, "k1");
  assert.equal(response.safety_identifier, "user-hash");
  assert.equal(response.service_tier, "default");
  assert.equal(response.max_tool_calls, 3);
});
