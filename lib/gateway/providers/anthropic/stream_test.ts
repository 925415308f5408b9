import assert from "node:assert/strict";
import { collect, fixtureEvents } from "../test_support.ts";
import { assembleCompletion } from "../assemble.ts";
import type { ChatCompletionChunk } from "../types.ts";
import { anthropicStreamParts } from "./stream.ts";

const META = { requestId: "req_1", upstreamModel: "claude-sonnet-4-5", answerTool: null };
const fixture = (name: string) => fixtureEvents(new URL(`./fixtures/${name}`, import.meta.url));

Deno.test("input_json_delta streams as OpenAI's tool-call fragments: index, id and name, then arguments", async () => {
  const parts = await collect(anthropicStreamParts(fixture("stream_tool_use.sse"), META));
  const deltas = parts.filter((p) => p.type === "chunk").map((p) =>
    (p.chunk as ChatCompletionChunk).choices[0]
  );
  assert.deepEqual(deltas.map((d) => [d.delta, d.finish_reason]), [
    [{ role: "assistant", content: "" }, null],
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

Deno.test("thinking streams as reasoning_content; signatures are not forwarded", async () => {
  const { completion, usage } = assembleCompletion(
    await collect(anthropicStreamParts(fixture("stream_thinking.sse"), META)),
  );
  assert.equal(
    completion.choices[0].message.reasoning_content,
    "I need to find the GCD of 1071 and 462.\n\n1071 = 2 × 462 + 147",
  );
  assert.equal(completion.choices[0].message.content, "The GCD is 21.");
  assert.equal(completion.choices[0].finish_reason, "stop");
  assert.deepEqual(usage, {
    promptTokens: 56,
    completionTokens: 240,
    cachedTokens: 0,
    cacheWriteTokens: 20,
  });
});

Deno.test("the answer tool's input_json_delta streams as content", async () => {
  const parts = await collect(
    anthropicStreamParts(fixture("stream_tool_use.sse"), { ...META, answerTool: "get_weather" }),
  );
  const content = parts.flatMap((p) =>
    p.type === "chunk" ? [(p.chunk as ChatCompletionChunk).choices[0].delta.content ?? ""] : []
  ).join("");
  assert.equal(content, `Okay, let's check the weather.{"location": "San Francisco, CA"}`);
  // Assembled, the answer tool's call is the content, not one of the tool calls.
  const { completion } = assembleCompletion(parts);
  const calls = completion.choices[0].message.tool_calls as { function: { name: string } }[];
  assert.deepEqual(calls.map((c) => c.function.name), ["get_time"]);
});
