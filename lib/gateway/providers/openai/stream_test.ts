import assert from "node:assert/strict";
import { collect, fixtureEvents } from "../test_support.ts";
import { assembleCompletion } from "../assemble.ts";
import { type ChatCompletionChunk, ProviderError, type StreamPart } from "../types.ts";
import { openAiAnswerParts, openAiStreamParts } from "./stream.ts";

const TOOL_CALLS = new URL("./fixtures/stream_tool_calls.sse", import.meta.url);
const MISTRAL_THINKING = new URL("./fixtures/stream_mistral_thinking.sse", import.meta.url);

Deno.test("streamed tool-call fragments pass unchanged; the usage comes last with its details", async () => {
  const parts = await collect(openAiStreamParts(fixtureEvents(TOOL_CALLS)));
  const chunks = parts.filter((p) => p.type === "chunk").map((p) => p.chunk as ChatCompletionChunk);
  assert.equal(chunks.length, 6);
  assert.deepEqual(chunks[0].choices[0].delta.tool_calls, [{
    index: 0,
    id: "call_DdmO9pD3xa9XTPNJ32zg2hcA",
    type: "function",
    function: { name: "get_weather", arguments: "" },
  }]);
  assert.equal(chunks[0].service_tier, "default");
  // The upstream's `usage: null` is not relayed: the usage comes once, at the end.
  assert.equal(chunks[0].usage, undefined);
  assert.doesNotMatch(JSON.stringify(chunks[0]), /"usage"/);
  const usage = parts.at(-1)!;
  assert.ok(usage.type === "usage");
  assert.deepEqual(usage.usage, {
    promptTokens: 2006,
    completionTokens: 300,
    cachedTokens: 1920,
    reasoningTokens: 256,
  });
  assert.deepEqual(usage.raw?.completion_tokens_details?.reasoning_tokens, 256);
});

Deno.test("a streamed answer assembles into the completion a client would build", async () => {
  const { completion, usage } = assembleCompletion(
    await collect(openAiStreamParts(fixtureEvents(TOOL_CALLS))),
  );
  assert.deepEqual(completion.choices[0].message.tool_calls, [
    {
      id: "call_DdmO9pD3xa9XTPNJ32zg2hcA",
      type: "function",
      function: { name: "get_weather", arguments: '{"location":"Paris"}' },
    },
    { id: "call_2", type: "function", function: { name: "get_time", arguments: '{"tz":"CET"}' } },
  ]);
  assert.equal(completion.choices[0].finish_reason, "tool_calls");
  assert.equal(completion.usage?.prompt_tokens_details?.cached_tokens, 1920);
  assert.equal(usage?.cachedTokens, 1920);
});

Deno.test("a stream cut after its usage chunk, before [DONE], hands on that usage and then fails", async () => {
  async function* cutBeforeDone() {
    const events = (await Array.fromAsync(fixtureEvents(TOOL_CALLS))).flat();
    yield events.slice(0, events.findIndex((event) => event.data === "[DONE]"));
    throw new ProviderError("stream_cut", "connection reset");
  }
  const parts: StreamPart[] = [];
  await assert.rejects(async () => {
    for await (const batch of openAiStreamParts(cutBeforeDone())) parts.push(...batch);
  }, /connection reset/);
  const usage = parts.at(-1)!;
  assert.ok(usage.type === "usage", "the provider's bill, not a local count, settles the stream");
  assert.deepEqual(usage.usage, {
    promptTokens: 2006,
    completionTokens: 300,
    cachedTokens: 1920,
    reasoningTokens: 256,
  });
});

Deno.test("usage on a content chunk (Gemini's on every one, Mistral's on the last) is handed on with its batch, so a cut after it bills it", async () => {
  async function* geminiThenCut() {
    for (let i = 1; i <= 2; i++) {
      yield [{
        data: JSON.stringify({
          choices: [{ index: 0, delta: { content: `w${i}` }, finish_reason: null }],
          usage: { prompt_tokens: 9, completion_tokens: i, total_tokens: 9 + 2500 + i },
        }),
      }];
    }
    throw new ProviderError("stream_cut", "connection reset");
  }
  const batches: StreamPart[][] = [];
  await assert.rejects(async () => {
    for await (const batch of openAiStreamParts(geminiThenCut())) batches.push(batch);
  }, /connection reset/);
  // Each usage after its chunk's content, which it counts.
  assert.deepEqual(batches.map((batch) => batch.map((p) => p.type)), [
    ["chunk", "usage"],
    ["chunk", "usage"],
  ]);
  const last = batches[1][1];
  assert.ok(last.type === "usage");
  // Gemini's thinking shows only in total_tokens: it is output.
  assert.deepEqual(last.usage, { promptTokens: 9, completionTokens: 2502 });
  const chunk = batches[1][0];
  assert.ok(chunk.type === "chunk" && !("usage" in chunk.chunk && chunk.chunk.usage));
});

Deno.test("a stream cut before any usage fails with no usage part", async () => {
  async function* cutEarly() {
    yield [{ data: JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] }) }];
    throw new ProviderError("stream_cut", "connection reset");
  }
  const parts: StreamPart[] = [];
  await assert.rejects(async () => {
    for await (const batch of openAiStreamParts(cutEarly())) parts.push(...batch);
  }, /connection reset/);
  assert.deepEqual(parts.map((p) => p.type), ["chunk"]);
});

Deno.test("a failure inside a batch of events hands on the parts before it, usage included", async () => {
  async function* oneRead() {
    yield [
      { data: JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] }) },
      { data: JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1 } }) },
      { data: "{not json" },
    ];
  }
  const batches: StreamPart[][] = [];
  await assert.rejects(async () => {
    for await (const batch of openAiStreamParts(oneRead())) batches.push(batch);
  }, ProviderError);
  assert.deepEqual(batches.map((batch) => batch.map((p) => p.type)), [["chunk", "usage"]]);
});

Deno.test("the parts of one read come as one batch, and every batch has parts", async () => {
  const content = (text: string) => ({
    data: JSON.stringify({ choices: [{ index: 0, delta: { content: text } }] }),
  });
  const batches: number[] = [];
  async function* finished() {
    yield [content("a"), content("b")];
    // JSON that is not an object is skipped: its read brings no batch.
    yield [{ data: "null" }];
    yield [{
      data: JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    }, { data: "[DONE]" }];
  }
  for await (const batch of openAiStreamParts(finished())) batches.push(batch.length);
  assert.deepEqual(batches, [2, 1]);
});

Deno.test("a tool_calls that is not a list is dropped from its chunk; the rest of the chunk passes", async () => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
    data: JSON.stringify({
      id: "c",
      object: "chat.completion.chunk",
      created: 1,
      model: "m",
      choices: [{ index: 0, delta, finish_reason: finish }],
    }),
  });
  async function* events() {
    yield [chunk({ content: "Hi", tool_calls: {} })];
    yield [chunk({ tool_calls: "call" }, "stop"), { data: "[DONE]" }];
  }
  const chunks = (await collect(openAiStreamParts(events())))
    .flatMap((p) => p.type === "chunk" ? [p.chunk as ChatCompletionChunk] : []);
  assert.deepEqual(chunks.map((c) => c.choices[0].delta), [{ content: "Hi" }, {}]);
  assert.equal(chunks[1].choices[0].finish_reason, "stop");
});

Deno.test("a delta that is a string or a list is emptied, and content that is not text dropped: nothing after the charge trips on it", async () => {
  const chunk = (delta: unknown, finish: string | null = null) => ({
    data: JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] }),
  });
  async function* events() {
    yield [
      chunk("hello"),
      chunk(["a"]),
      chunk(7),
      chunk({ content: 12345 }),
      chunk({ content: "Hi" }, "stop"),
    ];
    yield [{ data: "[DONE]" }];
  }
  const deltas = (await collect(openAiStreamParts(events())))
    .flatMap((p) => p.type === "chunk" ? [(p.chunk as ChatCompletionChunk).choices[0].delta] : []);
  assert.deepEqual(deltas, [{}, {}, {}, {}, { content: "Hi" }]);
});

Deno.test("a tool call's id and name that are not strings are left out, and arguments sent as an object become its JSON", async () => {
  async function* events() {
    yield [{
      data: JSON.stringify({
        choices: [{
          index: 0,
          delta: {
            tool_calls: [
              { index: 0, id: 5, type: "function", function: { name: 7, arguments: { a: 1 } } },
              { index: 1, id: "call_b", type: "function", function: "f" },
            ],
          },
        }],
      }),
    }, { data: "[DONE]" }];
  }
  const [part] = await collect(openAiStreamParts(events()));
  assert.ok(part.type === "chunk");
  assert.deepEqual((part.chunk as ChatCompletionChunk).choices[0].delta.tool_calls, [
    { index: 0, type: "function", function: { arguments: '{"a":1}' } },
    { index: 1, id: "call_b", type: "function" },
  ]);
});

Deno.test("an error object in older vLLM's shape mid-stream is a cut, not an ending", async () => {
  async function* vllm() {
    yield [
      { data: JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] }) },
      { data: JSON.stringify({ object: "error", message: "CUDA out of memory", code: 500 }) },
      { data: "[DONE]" },
    ];
  }
  await assert.rejects(
    async () => {
      for await (const _ of openAiStreamParts(vllm())) { /* drained */ }
    },
    (error: unknown) => error instanceof ProviderError && /CUDA out of memory/.test(error.message),
  );
});

Deno.test("a trailing usage smaller than one before it is not the bill: cumulative counts never shrink", async () => {
  async function* trailingZero() {
    yield [
      {
        data: JSON.stringify({
          choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: "stop" }],
        }),
      },
      {
        data: JSON.stringify({
          choices: [],
          usage: { prompt_tokens: 1000, completion_tokens: 500 },
        }),
      },
      { data: JSON.stringify({ choices: [], usage: { prompt_tokens: 0, completion_tokens: 0 } }) },
      { data: "[DONE]" },
    ];
  }
  const usages = (await collect(openAiStreamParts(trailingZero())))
    .flatMap((p) => p.type === "usage" ? [p.usage] : []);
  assert.deepEqual(usages.at(-1), { promptTokens: 1000, completionTokens: 500 });
});

Deno.test("a usage whose completion count is null still hands on the upstream's prompt count", async () => {
  async function* nullCompletion() {
    yield [
      { data: JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] }) },
      {
        data: JSON.stringify({
          choices: [],
          usage: { prompt_tokens: 1000, completion_tokens: null, total_tokens: null },
        }),
      },
      { data: "[DONE]" },
    ];
  }
  const parts = await collect(openAiStreamParts(nullCompletion()));
  assert.deepEqual(parts.filter((p) => p.type !== "chunk"), [
    { type: "prompt_tokens", promptTokens: 1000 },
  ]);
});

Deno.test("a usage without a completion count hands on its cache reads and writes with the prompt count", async () => {
  async function* nullCompletion() {
    yield [
      { data: JSON.stringify({ choices: [{ index: 0, delta: { content: "Hi" } }] }) },
      {
        data: JSON.stringify({
          choices: [],
          usage: {
            prompt_tokens: 2000,
            completion_tokens: null,
            prompt_tokens_details: { cached_tokens: 64, cache_write_tokens: 1900 },
          },
        }),
      },
      { data: "[DONE]" },
    ];
  }
  const parts = await collect(openAiStreamParts(nullCompletion()));
  assert.deepEqual(parts.filter((p) => p.type !== "chunk"), [
    { type: "prompt_tokens", promptTokens: 2000, cachedTokens: 64, cacheWriteTokens: 1900 },
  ]);
});

Deno.test("DeepSeek's cache hits on a usage without a completion count are cache reads too", async () => {
  async function* nullCompletion() {
    yield [
      {
        data: JSON.stringify({
          choices: [],
          usage: { prompt_tokens: 100, completion_tokens: null, prompt_cache_hit_tokens: 80 },
        }),
      },
      { data: "[DONE]" },
    ];
  }
  const parts = await collect(openAiStreamParts(nullCompletion()));
  assert.deepEqual(parts, [{ type: "prompt_tokens", promptTokens: 100, cachedTokens: 80 }]);
});

Deno.test("content streamed as a list of parts (Mistral's reasoning models) goes on as OpenAI's: thinking as reasoning_content, text as the content string", async () => {
  const parts = await collect(openAiStreamParts(fixtureEvents(MISTRAL_THINKING)));
  const deltas = parts.flatMap((p) => p.type === "chunk" ? [p.chunk.choices[0].delta] : []);
  for (const delta of deltas) {
    assert.equal(typeof delta.content, "string", JSON.stringify(delta));
  }
  assert.deepEqual(deltas.map((d) => d.reasoning_content ?? null), [
    null,
    "Six sevens: ",
    "forty-two.",
    null,
    null,
    null,
  ]);
  const { completion, usage } = assembleCompletion(parts);
  assert.equal(completion.choices[0].message.content, "The answer is 42.");
  assert.equal(completion.choices[0].message.reasoning_content, "Six sevens: forty-two.");
  assert.deepEqual(usage, { promptTokens: 12, completionTokens: 28 });
});

Deno.test("a whole completion is made into the parts of the one chunk it would have streamed, and assembles back into itself", async () => {
  for (const name of ["openai_completion.json", "openai_completion_tool_calls.json"]) {
    const completion = JSON.parse(
      Deno.readTextFileSync(new URL(`../../../../tests/fixtures/${name}`, import.meta.url)),
    );
    const parts = await collect(openAiAnswerParts(structuredClone(completion)));
    const assembled = assembleCompletion(parts).completion;
    const [choice] = completion.choices;
    // Annotations (web search's citations, which no request here can ask for) are not assembled.
    const { annotations: _annotations, ...message } = choice.message;
    assert.deepEqual(assembled.choices[0].message, message, name);
    assert.equal(assembled.choices[0].finish_reason, choice.finish_reason, name);
    const usage = parts.findLast((p) => p.type === "usage");
    assert.ok(usage?.type === "usage", name);
    assert.equal(usage.usage.promptTokens, completion.usage.prompt_tokens, name);
    assert.equal(usage.usage.completionTokens, completion.usage.completion_tokens, name);
  }
  assert.throws(
    () => openAiAnswerParts({ id: "chatcmpl-x" }),
    (e) => e instanceof ProviderError && e.kind === "malformed_response",
  );
  // An error answered with 200 is the upstream's failure, its reason kept.
  assert.throws(
    () => openAiAnswerParts({ error: "no" }),
    (e) =>
      e instanceof ProviderError && e.kind === "upstream_error" &&
      e.message === "upstream failed: no",
  );
});
