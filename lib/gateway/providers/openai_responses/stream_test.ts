import assert from "node:assert/strict";
import { parseSse } from "../../sse.ts";
import { OPENAI_REASONING_FORMAT } from "../../reasoning_details.ts";
import { assembleCompletion } from "../assemble.ts";
import { collect, fixtureEvents } from "../test_support.ts";
import { type ChatCompletionChunk, ProviderError, type StreamPart } from "../types.ts";
import { responseAsEvents, responsesStreamParts } from "./stream.ts";
import { oneBatch } from "../part_batches.ts";

const META = { requestId: "req_1", upstreamModel: "o4-mini" };

/** A Responses event stream as the wire carries it: an `event:` line with each `data:` line. */
function sse(...events: Record<string, unknown>[]) {
  const text = events.map((e, i) =>
    `event: ${e.type}\ndata: ${JSON.stringify({ ...e, sequence_number: i })}\n\n`
  ).join("");
  return parseSse(new Blob([text]).stream());
}

const response = (extra: Record<string, unknown> = {}) => ({
  id: "resp_1",
  object: "response",
  model: "o4-mini-2025-04-16",
  status: "in_progress",
  output: [],
  usage: null,
  ...extra,
});

const USAGE = {
  input_tokens: 120,
  input_tokens_details: { cached_tokens: 64 },
  output_tokens: 90,
  output_tokens_details: { reasoning_tokens: 70 },
  total_tokens: 210,
};

/** The converter's parts for these events, in order. */
const convert = (...events: Record<string, unknown>[]) =>
  collect(responsesStreamParts(sse(...events), META));

const deltas = (parts: StreamPart[]) =>
  parts.filter((p) => p.type === "chunk").map((p) => {
    const choice = (p.chunk as ChatCompletionChunk).choices[0];
    return [choice.delta, choice.finish_reason];
  });

Deno.test("text deltas stream as content, and the usage comes with response.completed", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    { type: "response.in_progress", response: response() },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: {
        type: "message",
        id: "msg_1",
        role: "assistant",
        status: "in_progress",
        content: [],
      },
    },
    { type: "response.output_text.delta", item_id: "msg_1", output_index: 0, delta: "Hel" },
    { type: "response.output_text.delta", item_id: "msg_1", output_index: 0, delta: "lo." },
    { type: "response.output_text.done", item_id: "msg_1", output_index: 0, text: "Hello." },
    {
      type: "response.completed",
      response: response({ status: "completed", usage: { ...USAGE, output_tokens_details: {} } }),
    },
  );
  assert.deepEqual(deltas(parts), [
    [{ role: "assistant", content: "", refusal: null }, null],
    [{ content: "Hel" }, null],
    [{ content: "lo." }, null],
    [{}, "stop"],
  ]);
  const chunk = parts.find((p) => p.type === "chunk")!;
  assert.ok(chunk.type === "chunk");
  assert.equal(chunk.chunk.id, "chatcmpl-resp_1");
  assert.equal(chunk.chunk.model, "o4-mini-2025-04-16");
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.deepEqual(usage.usage, { promptTokens: 120, completionTokens: 90, cachedTokens: 64 });
  assert.deepEqual(usage.raw, {
    prompt_tokens: 120,
    completion_tokens: 90,
    total_tokens: 210,
    prompt_tokens_details: { cached_tokens: 64 },
  });
});

Deno.test("function_call items stream as OpenAI's tool-call fragments and finish with tool_calls", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: {
        type: "function_call",
        id: "fc_1",
        call_id: "call_a",
        name: "get_weather",
        arguments: "",
        status: "in_progress",
      },
    },
    {
      type: "response.function_call_arguments.delta",
      item_id: "fc_1",
      output_index: 0,
      delta: '{"city":',
    },
    {
      type: "response.function_call_arguments.delta",
      item_id: "fc_1",
      output_index: 0,
      delta: '"Paris"}',
    },
    {
      type: "response.output_item.added",
      output_index: 1,
      item: { type: "function_call", id: "fc_2", call_id: "call_b", name: "now", arguments: "" },
    },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  assert.deepEqual(deltas(parts), [
    [{ role: "assistant", content: "", refusal: null }, null],
    [{
      tool_calls: [{
        index: 0,
        id: "call_a",
        type: "function",
        function: { name: "get_weather", arguments: "" },
      }],
    }, null],
    [{ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }, null],
    [{ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }, null],
    [{
      tool_calls: [{
        index: 1,
        id: "call_b",
        type: "function",
        function: { name: "now", arguments: "" },
      }],
    }, null],
    // A call without arguments ends with "{}", as OpenAI's chat streams it.
    [{ tool_calls: [{ index: 1, function: { arguments: "{}" } }] }, null],
    [{}, "tool_calls"],
  ]);
  const { completion } = assembleCompletion(parts);
  const calls = completion.choices[0].message.tool_calls as {
    id: string;
    function: { name: string; arguments: string };
  }[];
  assert.deepEqual(calls.map((c) => [c.id, c.function.name, c.function.arguments]), [
    ["call_a", "get_weather", '{"city":"Paris"}'],
    ["call_b", "now", "{}"],
  ]);
});

Deno.test("a reasoning item is hidden work, its summary reasoning_content and its encrypted content one reasoning detail", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: { type: "reasoning", id: "rs_1", summary: [] },
    },
    {
      type: "response.reasoning_summary_text.delta",
      item_id: "rs_1",
      output_index: 0,
      summary_index: 0,
      delta: "**Plan**",
    },
    {
      type: "response.reasoning_summary_text.delta",
      item_id: "rs_1",
      output_index: 0,
      summary_index: 1,
      delta: "Then answer.",
    },
    {
      type: "response.output_item.done",
      output_index: 0,
      item: {
        type: "reasoning",
        id: "rs_1",
        summary: [],
        encrypted_content: "gAAAAABsealed",
      },
    },
    {
      type: "response.output_item.added",
      output_index: 1,
      item: { type: "message", id: "msg_1", role: "assistant", content: [] },
    },
    { type: "response.output_text.delta", item_id: "msg_1", output_index: 1, delta: "42" },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  assert.ok(parts.some((p) => p.type === "hidden_work"));
  assert.deepEqual(deltas(parts), [
    [{ role: "assistant", content: "", refusal: null }, null],
    [{ reasoning_content: "**Plan**" }, null],
    [{ reasoning_content: "\n\nThen answer." }, null],
    [{
      reasoning_details: [{
        type: "reasoning.encrypted",
        data: "gAAAAABsealed",
        id: "o4-mini#rs_1",
        format: OPENAI_REASONING_FORMAT,
        index: 0,
      }],
    }, null],
    [{ content: "42" }, null],
    [{}, "stop"],
  ]);
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.equal(usage.usage.reasoningTokens, 70);
});

Deno.test("reasoning details still pending at the end are sent before the finish", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.output_item.done",
      output_index: 0,
      item: { type: "reasoning", id: "rs_9", summary: [], encrypted_content: "gAAAAB9" },
    },
    {
      type: "response.incomplete",
      response: response({
        status: "incomplete",
        incomplete_details: { reason: "max_output_tokens" },
        usage: USAGE,
      }),
    },
  );
  const shown = deltas(parts);
  assert.deepEqual(shown.at(-1), [{}, "length"]);
  assert.ok("reasoning_details" in (shown.at(-2)![0] as object));
});

Deno.test("an incomplete response finishes with length, or content_filter when filtered", async () => {
  for (
    const [reason, finish] of [["max_output_tokens", "length"], [
      "content_filter",
      "content_filter",
    ]]
  ) {
    const parts = await convert(
      { type: "response.created", response: response() },
      { type: "response.output_text.delta", item_id: "m", output_index: 0, delta: "Once" },
      {
        type: "response.incomplete",
        response: response({
          status: "incomplete",
          incomplete_details: { reason },
          usage: USAGE,
        }),
      },
    );
    assert.deepEqual(deltas(parts).at(-1), [{}, finish]);
    assert.ok(parts.some((p) => p.type === "usage"));
  }
});

Deno.test("refusal deltas stream as refusal", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.refusal.delta",
      item_id: "m",
      output_index: 0,
      content_index: 0,
      delta: "No.",
    },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  assert.deepEqual(deltas(parts)[1], [{ refusal: "No." }, null]);
  assert.equal(assembleCompletion(parts).completion.choices[0].message.refusal, "No.");
});

Deno.test("response.failed is a cut stream, its usage handed on first", async () => {
  const seen: StreamPart[] = [];
  await assert.rejects(
    async () => {
      for await (
        const batch of responsesStreamParts(
          sse(
            { type: "response.created", response: response() },
            { type: "response.output_text.delta", item_id: "m", output_index: 0, delta: "Hi" },
            {
              type: "response.failed",
              response: response({
                status: "failed",
                error: { code: "server_error", message: "The model failed." },
                usage: USAGE,
              }),
            },
          ),
          META,
        )
      ) seen.push(...batch);
    },
    (error) =>
      error instanceof ProviderError && error.kind === "stream_cut" &&
      error.message.includes("The model failed.") && error.upstreamError?.code === "server_error",
  );
  assert.ok(seen.some((p) => p.type === "usage"));
});

Deno.test("an error event is a cut stream with the upstream's words", async () => {
  await assert.rejects(
    () =>
      convert(
        { type: "response.created", response: response() },
        { type: "error", code: "server_error", message: "Try again.", param: null },
      ),
    (error) =>
      error instanceof ProviderError && error.kind === "stream_cut" &&
      error.message.includes("Try again.") && error.upstreamError?.code === "server_error",
  );
});

Deno.test("a stream that ends before response.completed is cut", async () => {
  await assert.rejects(
    () =>
      convert(
        { type: "response.created", response: response() },
        { type: "response.output_text.delta", item_id: "m", output_index: 0, delta: "Hi" },
      ),
    (error) => error instanceof ProviderError && error.kind === "stream_cut",
  );
});

const fixture = (name: string) => fixtureEvents(new URL(`./fixtures/${name}`, import.meta.url));
const FIXTURE_META = { requestId: "req_1", upstreamModel: "gpt-5" };

/** The item a fixture's `response.output_item.done` carries, by type. */
function doneItem(name: string, type: string): Record<string, unknown> {
  const text = Deno.readTextFileSync(new URL(`./fixtures/${name}`, import.meta.url));
  for (const line of text.split("\n")) {
    if (!line.startsWith("data: ")) continue;
    const event = JSON.parse(line.slice(6));
    if (event.type === "response.output_item.done" && event.item.type === type) return event.item;
  }
  throw new Error(`no ${type} item in ${name}`);
}

Deno.test("a recorded text stream assembles into its completion and usage", async () => {
  const parts = await collect(responsesStreamParts(fixture("stream_text.sse"), FIXTURE_META));
  const { completion } = assembleCompletion(parts);
  const message = doneItem("stream_text.sse", "message") as unknown as {
    content: { text: string }[];
  };
  assert.equal(completion.choices[0].message.content, message.content[0].text);
  assert.equal(completion.choices[0].finish_reason, "stop");
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.deepEqual(usage.usage, { promptTokens: 37, completionTokens: 11 });
});

Deno.test("a recorded function call streams as one tool call whose arguments join to the item's", async () => {
  const parts = await collect(
    responsesStreamParts(fixture("stream_function_call.sse"), FIXTURE_META),
  );
  const item = doneItem("stream_function_call.sse", "function_call");
  const { completion } = assembleCompletion(parts);
  const [call] = completion.choices[0].message.tool_calls as {
    id: string;
    function: { name: string; arguments: string };
  }[];
  assert.deepEqual([call.id, call.function.name, call.function.arguments], [
    item.call_id,
    item.name,
    item.arguments,
  ]);
  assert.equal(completion.choices[0].finish_reason, "tool_calls");
});

Deno.test("a recorded reasoning stream gives its summary as reasoning_content, its encrypted item as one detail, and bills the reasoning", async () => {
  const parts = await collect(responsesStreamParts(fixture("stream_reasoning.sse"), FIXTURE_META));
  const reasoning = doneItem("stream_reasoning.sse", "reasoning") as unknown as {
    id: string;
    encrypted_content: string;
    summary: { text: string }[];
  };
  const { completion } = assembleCompletion(parts);
  const message = completion.choices[0].message;
  assert.equal(message.reasoning_content, reasoning.summary.map((s) => s.text).join("\n\n"));
  assert.deepEqual(message.reasoning_details, [{
    type: "reasoning.encrypted",
    data: reasoning.encrypted_content,
    id: `gpt-5#${reasoning.id}`,
    format: OPENAI_REASONING_FORMAT,
    index: 0,
  }]);
  assert.equal(completion.choices[0].finish_reason, "tool_calls");
  assert.ok(parts.some((p) => p.type === "hidden_work"));
  const usage = parts.findLast((p) => p.type === "usage");
  assert.ok(usage?.type === "usage");
  assert.deepEqual(usage.usage, { promptTokens: 63, completionTokens: 164, reasoningTokens: 128 });
});

Deno.test("a text delta's logprobs become the chunk's, with each token's bytes", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.output_text.delta",
      item_id: "m",
      output_index: 0,
      content_index: 0,
      delta: "Hé",
      logprobs: [{
        token: "Hé",
        logprob: -0.5,
        top_logprobs: [{ token: "Hé", logprob: -0.5 }, { token: "Ho", logprob: -2 }],
      }],
    },
    {
      type: "response.output_text.delta",
      item_id: "m",
      output_index: 0,
      delta: "!",
      logprobs: [],
    },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  const chunks = parts.filter((p) => p.type === "chunk").map((p) =>
    (p.chunk as ChatCompletionChunk).choices[0].logprobs
  );
  const bytes = [...new TextEncoder().encode("Hé")];
  assert.deepEqual(chunks[1], {
    content: [{
      token: "Hé",
      logprob: -0.5,
      bytes,
      top_logprobs: [
        { token: "Hé", logprob: -0.5, bytes },
        { token: "Ho", logprob: -2, bytes: [72, 111] },
      ],
    }],
    refusal: null,
  });
  assert.equal(chunks[2], null);
  const { completion } = assembleCompletion(parts);
  assert.equal(
    (completion.choices[0].logprobs as { content: unknown[] }).content.length,
    1,
  );
});

Deno.test("a response that fails before its first output gives nothing before its failure, which says whether the request was refused", async () => {
  const cases = [
    ["invalid_prompt", "bad_request"],
    ["failed_to_download_image", "bad_request"],
    ["image_content_policy_violation", "bad_request"],
    ["rate_limit_exceeded", "rate_limited"],
    ["server_error", "stream_cut"],
    ["a_code_added_later", "stream_cut"],
  ] as const;
  for (const [code, kind] of cases) {
    for (const ending of ["response.failed", "error"] as const) {
      const seen: StreamPart[] = [];
      const failing = ending === "error"
        ? { type: "error", code, message: "Not this.", param: null }
        : {
          type: "response.failed",
          response: response({ status: "failed", error: { code, message: "Not this." } }),
        };
      await assert.rejects(
        async () => {
          for await (
            const batch of responsesStreamParts(
              sse(
                { type: "response.created", response: response() },
                { type: "response.in_progress", response: response() },
                // A reasoning model fails while it reasons: nothing has been shown yet either.
                {
                  type: "response.output_item.added",
                  output_index: 0,
                  item: { type: "reasoning", id: "rs_1", summary: [] },
                },
                {
                  type: "response.output_item.done",
                  output_index: 0,
                  item: { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "gAAAA" },
                },
                failing,
              ),
              META,
            )
          ) seen.push(...batch);
        },
        (error) =>
          error instanceof ProviderError && error.kind === kind &&
          error.message.includes("Not this.") && error.upstreamError?.code === code,
        `${code} in ${ending}`,
      );
      assert.deepEqual(seen, [], `${code} in ${ending}: nothing before the failure`);
    }
  }
});

Deno.test("the text of a later message item is a paragraph of its own", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    { type: "response.output_item.added", output_index: 0, item: { type: "message", id: "m1" } },
    { type: "response.output_text.delta", item_id: "m1", output_index: 0, delta: "Checking." },
    { type: "response.output_item.added", output_index: 1, item: { type: "message", id: "m2" } },
    { type: "response.output_text.delta", item_id: "m2", output_index: 1, delta: "Done" },
    { type: "response.output_text.delta", item_id: "m2", output_index: 1, delta: "." },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  assert.equal(
    assembleCompletion(parts).completion.choices[0].message.content,
    "Checking.\n\nDone.",
  );
});

Deno.test("each message item with a phase opens with its phase, the blank line before it beside the phase rather than in its text", async () => {
  const message = (at: number, id: string, phase: string) => ({
    type: "response.output_item.added",
    output_index: at,
    item: { type: "message", id, role: "assistant", status: "in_progress", content: [], phase },
  });
  const text = (at: number, id: string, delta: string) => ({
    type: "response.output_text.delta",
    item_id: id,
    output_index: at,
    delta,
  });
  const parts = await convert(
    { type: "response.created", response: response() },
    message(0, "m1", "commentary"),
    text(0, "m1", "Checking."),
    message(1, "m2", "commentary"),
    text(1, "m2", "Still checking."),
    {
      type: "response.output_item.added",
      output_index: 2,
      item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "f", arguments: "{}" },
    },
    message(3, "m3", "final_answer"),
    text(3, "m3", "Done"),
    text(3, "m3", "."),
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  assert.deepEqual(deltas(parts).map(([delta]) => delta).slice(1, -1), [
    { phase: "commentary" },
    { content: "Checking." },
    { phase: "commentary", content: "\n\n" },
    { content: "Still checking." },
    {
      tool_calls: [{
        index: 0,
        id: "call_1",
        type: "function",
        function: { name: "f", arguments: "{}" },
      }],
    },
    { phase: "final_answer", content: "\n\n" },
    { content: "Done" },
    { content: "." },
  ]);
  const { message: chat } = assembleCompletion(parts).completion.choices[0];
  assert.equal(chat.content, "Checking.\n\nStill checking.\n\nDone.", "chat's one content");
  assert.equal(chat.phase, "final_answer", "chat's one message takes the last phase");
});

Deno.test("a function call whose arguments come whole with the item, without deltas, keeps them", async () => {
  const parts = await convert(
    { type: "response.created", response: response() },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "w", arguments: "" },
    },
    {
      type: "response.output_item.done",
      output_index: 0,
      item: {
        type: "function_call",
        id: "fc_1",
        call_id: "call_1",
        name: "w",
        arguments: '{"city":"Rome"}',
      },
    },
    { type: "response.completed", response: response({ status: "completed", usage: USAGE }) },
  );
  const calls = assembleCompletion(parts).completion.choices[0].message.tool_calls as {
    function: { arguments: string };
  }[];
  assert.equal(calls[0].function.arguments, '{"city":"Rome"}');
});

/** The response a recorded stream's last event carries, whole. */
function finalResponse(name: string): Record<string, unknown> {
  const text = Deno.readTextFileSync(new URL(`./fixtures/${name}`, import.meta.url));
  const last = text.split("\n").filter((line) => line.startsWith("data: ")).at(-1)!;
  return JSON.parse(last.slice(6)).response;
}

Deno.test("a whole response, made into its stream's events, gives what its recorded stream gave", async () => {
  for (const name of ["stream_text.sse", "stream_function_call.sse", "stream_reasoning.sse"]) {
    const streamed = assembleCompletion(
      await collect(responsesStreamParts(fixture(name), FIXTURE_META)),
    ).completion;
    const parts = await collect(
      responsesStreamParts(oneBatch(responseAsEvents(finalResponse(name))), FIXTURE_META),
    );
    const whole = assembleCompletion(parts).completion;
    assert.deepEqual(whole.choices, streamed.choices, name);
    assert.deepEqual(whole.usage, streamed.usage, name);
  }
});

Deno.test("a whole response that is incomplete or failed ends as its stream would", async () => {
  const incomplete = await collect(responsesStreamParts(
    oneBatch(responseAsEvents(response({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      output: [{ type: "message", id: "m", content: [{ type: "output_text", text: "Once" }] }],
      usage: USAGE,
    }))),
    META,
  ));
  assert.deepEqual(deltas(incomplete).at(-1), [{}, "length"]);
  await assert.rejects(
    () =>
      collect(responsesStreamParts(
        oneBatch(responseAsEvents(response({
          status: "failed",
          error: { code: "invalid_prompt", message: "Not this." },
        }))),
        META,
      )),
    (e) => e instanceof ProviderError && e.kind === "bad_request",
  );
  assert.throws(() => responseAsEvents({ error: {} }), ProviderError);
});
