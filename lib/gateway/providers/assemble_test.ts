import assert from "node:assert/strict";
import { assembleCompletion } from "./assemble.ts";
import type { ChatCompletionChunk, StreamPart } from "./types.ts";

function chunk(choice: Record<string, unknown>, fields: Record<string, unknown> = {}): StreamPart {
  return {
    type: "chunk",
    chunk: {
      id: "chatcmpl-1",
      object: "chat.completion.chunk",
      created: 1_790_000_000,
      model: "m",
      choices: [{ index: 0, finish_reason: null, delta: {}, ...choice }],
      ...fields,
    } as ChatCompletionChunk,
  };
}

const logprob = (token: string) => ({ token, logprob: -0.1, bytes: null, top_logprobs: [] });

Deno.test("logprobs of every chunk are appended in order", () => {
  const { completion } = assembleCompletion([
    chunk({ delta: { content: "Hel" }, logprobs: { content: [logprob("Hel")], refusal: null } }),
    chunk({ delta: { content: "lo" }, logprobs: { content: [logprob("lo")], refusal: null } }),
    chunk({ delta: {}, logprobs: { content: [logprob("!"), logprob("?")] } }),
    chunk({ delta: {}, finish_reason: "stop" }),
  ]);
  const choice = completion.choices[0];
  assert.equal(choice.message.content, "Hello");
  assert.deepEqual(
    (choice.logprobs as { content: { token: string }[] }).content.map((l) => l.token),
    ["Hel", "lo", "!", "?"],
  );
  assert.equal((choice.logprobs as { refusal: unknown }).refusal, null);
});

Deno.test("an answer whose chunks carry no logprobs has logprobs null", () => {
  const { completion } = assembleCompletion([
    chunk({ delta: { content: "Hi" }, logprobs: null }),
    chunk({ delta: {}, finish_reason: "stop" }),
  ]);
  assert.equal(completion.choices[0].logprobs, null);
});

Deno.test("chunk fields beyond the known ones are kept, the last value winning; padding is dropped", () => {
  const { completion } = assembleCompletion([
    chunk({ delta: { content: "a" } }, { system_fingerprint: "fp_1", obfuscation: "xyz" }),
    chunk({ delta: {}, finish_reason: "stop" }, {
      system_fingerprint: "fp_2",
      service_tier: "default",
    }),
  ]);
  assert.equal(completion.system_fingerprint, "fp_2");
  assert.equal(completion.service_tier, "default");
  assert.equal("obfuscation" in completion, false);
});

Deno.test("an upstream field named __proto__ stays data and does not become the answer's prototype", () => {
  const parsed = JSON.parse(
    '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","__proto__":{"polluted":true},' +
      '"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}',
  );
  const { completion } = assembleCompletion([{ type: "chunk", chunk: parsed }]);
  assert.equal(Object.getPrototypeOf(completion), Object.prototype);
  assert.equal((completion as Record<string, unknown>).polluted, undefined);
  assert.match(JSON.stringify(completion), /"__proto__":\{"polluted":true\}/);
});

const call = (fields: Record<string, unknown>) => chunk({ delta: { tool_calls: [fields] } });
type ToolCall = { id: string; function: { name: string; arguments: string } };
const toolCalls = (completion: { choices: { message: Record<string, unknown> }[] }) =>
  completion.choices[0].message.tool_calls as ToolCall[];

Deno.test("a tool-call name repeated on every fragment is the call's name, not a repetition", () => {
  const fragment = (args: string) => ({
    index: 0,
    id: "call_1",
    type: "function",
    function: { name: "get_weather", arguments: args },
  });
  const { completion } = assembleCompletion([
    call(fragment('{"city":')),
    call(fragment('"Paris"}')),
  ]);
  assert.deepEqual(completion.choices[0].message.tool_calls, [{
    id: "call_1",
    type: "function",
    function: { name: "get_weather", arguments: '{"city":"Paris"}' },
  }]);
});

Deno.test("fragments without index continue their call; whole calls without index are calls of their own", () => {
  const { completion } = assembleCompletion([
    call({ id: "call_1", function: { name: "get_weather", arguments: "" } }),
    call({ function: { arguments: '{"city":' } }),
    call({ function: { arguments: '"Paris"}' } }),
    call({ id: "call_2", function: { name: "get_time", arguments: '{"tz":"CET"}' } }),
    call({ function: { name: "get_date", arguments: "{}" } }),
  ]);
  assert.deepEqual(
    toolCalls(completion).map((c) => [c.id, c.function.name, c.function.arguments]),
    [
      ["call_1", "get_weather", '{"city":"Paris"}'],
      ["call_2", "get_time", '{"tz":"CET"}'],
      ["", "get_date", "{}"],
    ],
  );
});

Deno.test("arguments sent as an object are its JSON text", () => {
  const { completion } = assembleCompletion([
    call({ index: 0, id: "call_1", function: { name: "f", arguments: { city: "Paris" } } }),
  ]);
  assert.equal(
    toolCalls(completion)[0].function.arguments,
    '{"city":"Paris"}',
  );
});

Deno.test("reasoning details streamed in pieces are joined by index, the signature kept", () => {
  const piece = (detail: Record<string, unknown>) =>
    chunk({ delta: { reasoning_details: [{ format: "anthropic-claude-v1", ...detail }] } });
  const { completion } = assembleCompletion([
    piece({ type: "reasoning.text", text: "Let me ", index: 0 }),
    piece({ type: "reasoning.text", text: "think.", index: 0 }),
    piece({ type: "reasoning.text", signature: "EqSig", index: 0 }),
    piece({ type: "reasoning.encrypted", data: "Em", index: 1 }),
    piece({ type: "reasoning.text", text: "More.", signature: "EqTwo", index: 2 }),
    chunk({ delta: { content: "Done." }, finish_reason: "stop" }),
  ]);
  assert.deepEqual(completion.choices[0].message.reasoning_details, [
    {
      type: "reasoning.text",
      text: "Let me think.",
      signature: "EqSig",
      index: 0,
      format: "anthropic-claude-v1",
    },
    { type: "reasoning.encrypted", data: "Em", index: 1, format: "anthropic-claude-v1" },
    {
      type: "reasoning.text",
      text: "More.",
      signature: "EqTwo",
      index: 2,
      format: "anthropic-claude-v1",
    },
  ]);
});

Deno.test("an answer without reasoning details has no reasoning_details field", () => {
  const { completion } = assembleCompletion([
    chunk({ delta: { content: "Hi" } }),
    chunk({ delta: {}, finish_reason: "stop" }),
  ]);
  assert.equal("reasoning_details" in completion.choices[0].message, false);
});

Deno.test("an answer of only a refusal has content null, as OpenAI's non-streamed answer has", () => {
  const { completion } = assembleCompletion([
    chunk({ delta: { role: "assistant", content: "", refusal: null } }),
    chunk({ delta: { refusal: "I can't help with that." } }),
    chunk({ delta: {}, finish_reason: "stop" }),
  ]);
  assert.equal(completion.choices[0].message.content, null);
  assert.equal(completion.choices[0].message.refusal, "I can't help with that.");
});
