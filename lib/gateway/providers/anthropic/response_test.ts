import assert from "node:assert/strict";
import { anthropicCompletionResult } from "./response.ts";

const META = { requestId: "req_1", upstreamModel: "claude-sonnet-4-5", answerTool: null };

Deno.test("tool_use blocks become tool_calls with finish_reason tool_calls; thinking becomes reasoning_content", () => {
  const { completion, usage } = anthropicCompletionResult({
    id: "msg_1",
    type: "message",
    role: "assistant",
    content: [
      { type: "thinking", thinking: "The user wants weather.", signature: "sig" },
      { type: "text", text: "Checking." },
      { type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Paris" } },
    ],
    stop_reason: "tool_use",
    usage: {
      input_tokens: 100,
      cache_creation_input_tokens: 50,
      cache_read_input_tokens: 1000,
      output_tokens: 80,
    },
  }, META);
  assert.deepEqual(completion.choices[0], {
    index: 0,
    message: {
      role: "assistant",
      content: "Checking.",
      tool_calls: [{
        id: "toolu_1",
        type: "function",
        function: { name: "weather", arguments: '{"city":"Paris"}' },
      }],
      reasoning_content: "The user wants weather.",
    },
    finish_reason: "tool_calls",
  });
  assert.deepEqual(completion.usage, {
    prompt_tokens: 1150,
    completion_tokens: 80,
    total_tokens: 1230,
    prompt_tokens_details: { cached_tokens: 1000, cache_write_tokens: 50 },
  });
  assert.deepEqual(usage, {
    promptTokens: 1150,
    completionTokens: 80,
    cachedTokens: 1000,
    cacheWriteTokens: 50,
  });
});

Deno.test("the answer tool's input is the content, and the turn stops rather than calls a tool", () => {
  const { completion } = anthropicCompletionResult({
    content: [{ type: "tool_use", id: "toolu_2", name: "person", input: { name: "Ada" } }],
    stop_reason: "tool_use",
    usage: { input_tokens: 10, output_tokens: 5 },
  }, { ...META, answerTool: "person" });
  assert.equal(completion.choices[0].message.content, '{"name":"Ada"}');
  assert.equal(completion.choices[0].message.tool_calls, undefined);
  assert.equal(completion.choices[0].finish_reason, "stop");
});
