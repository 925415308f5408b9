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
