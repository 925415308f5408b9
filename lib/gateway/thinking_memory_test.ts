import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import { KV_VALUE_CHUNK_BYTES } from "@/lib/core/mod.ts";
import { parseChatRequest } from "./chat_request.ts";
import { claudeReasoningDetail, type ReasoningDetail } from "./reasoning_details.ts";
import {
  MAX_SIGNED_THINKING_BYTES,
  MAX_SIGNED_THINKING_CHUNKS,
  MAX_THINKING_RECALLS,
  SIGNED_THINKING_TTL_MS,
  signedThinkingOfChunks,
  signedThinkingParts,
  ThinkingMemory,
  thinkingToRecall,
  withThinking,
} from "./thinking_memory.ts";

const detail = (thinking: string, index = 0): ReasoningDetail =>
  claudeReasoningDetail(
    { type: "thinking", thinking, signature: `sig-${index}` },
    index,
    "claude-sonnet-4-5",
  );

const CALL = { id: "toolu_1", type: "function", function: { name: "f", arguments: "{}" } };

/** A second turn answering the call, as a client that drops reasoning_details sends it. */
function answering(extra: Record<string, unknown> = {}, assistant: Record<string, unknown> = {}) {
  return parseChatRequest({
    model: "ant/claude",
    reasoning_effort: "high",
    messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [CALL], ...assistant },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
    ],
    ...extra,
  });
}

Deno.test("thinking is recalled for a turn that answers the last assistant message's calls without its reasoning_details, by its first call's id", () => {
  assert.deepEqual(thinkingToRecall(answering()), [{ message: 1, toolCallId: "toolu_1" }]);
});

/** A third step of a loop: two assistant messages with calls, each answered. */
function thirdStep(second: Record<string, unknown> = {}) {
  return parseChatRequest({
    model: "ant/claude",
    reasoning_effort: "high",
    messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [CALL] },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ ...CALL, id: "toolu_2" }],
        ...second,
      },
      { role: "tool", tool_call_id: "toolu_2", content: "rainy" },
    ],
  });
}

Deno.test("thinking is recalled for every assistant message with calls that came without its reasoning_details, the latest first, not only the last", () => {
  assert.deepEqual(thinkingToRecall(thirdStep()), [
    { message: 3, toolCallId: "toolu_2" },
    { message: 1, toolCallId: "toolu_1" },
  ]);
  assert.deepEqual(thinkingToRecall(thirdStep({ reasoning_details: [detail("mine")] })), [
    { message: 1, toolCallId: "toolu_1" },
  ]);
});

Deno.test("a long loop is given kept thinking for its latest MAX_THINKING_RECALLS assistant messages", () => {
  const steps = MAX_THINKING_RECALLS + 5;
  const messages: unknown[] = [{ role: "user", content: "Go." }];
  for (let i = 0; i < steps; i++) {
    messages.push(
      { role: "assistant", content: null, tool_calls: [{ ...CALL, id: `toolu_${i}` }] },
      { role: "tool", tool_call_id: `toolu_${i}`, content: "done" },
    );
  }
  const recalls = thinkingToRecall(
    parseChatRequest({ model: "ant/claude", reasoning_effort: "high", messages }),
  );
  assert.equal(recalls.length, MAX_THINKING_RECALLS);
  assert.deepEqual(recalls[0], { message: 2 * steps - 1, toolCallId: `toolu_${steps - 1}` });
  assert.deepEqual(recalls.at(-1), {
    message: 2 * (steps - MAX_THINKING_RECALLS) + 1,
    toolCallId: `toolu_${steps - MAX_THINKING_RECALLS}`,
  });
});

Deno.test("thinking is not recalled without reasoning asked for, beside a forced tool, or for a message that brings its own details", () => {
  assert.deepEqual(thinkingToRecall(answering({ reasoning_effort: undefined })), []);
  assert.deepEqual(thinkingToRecall(answering({ reasoning_effort: "none" })), []);
  assert.deepEqual(
    thinkingToRecall(answering({
      tools: [{ type: "function", function: { name: "f" } }],
      tool_choice: "required",
    })),
    [],
  );
  assert.deepEqual(thinkingToRecall(answering({}, { reasoning_details: [detail("mine")] })), []);
});

Deno.test("thinking is not recalled for a conversation whose last assistant message is not answered by tool results", () => {
  const request = parseChatRequest({
    model: "ant/claude",
    reasoning_effort: "high",
    messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: "Sunny." },
      { role: "user", content: "Thanks." },
    ],
  });
  assert.deepEqual(thinkingToRecall(request), []);
});

Deno.test("recalled details go on the message as if the client had sent them, the request otherwise as it was", () => {
  const request = answering();
  const details = [detail("Weather first.")];
  const given = withThinking(request, [{ message: 1, details }]);
  assert.deepEqual(given.messages[1], { ...request.messages[1], reasoning_details: details });
  assert.equal(given.messages[2], request.messages[2]);
  assert.equal(given.params, request.params);
  assert.equal("reasoning_details" in request.messages[1], false);
});

Deno.test("kept thinking is split below KV's value limit and put back whole; more than is kept is not split at all", () => {
  const details = [detail("a".repeat(150_000)), detail("b".repeat(20_000), 1)];
  const parts = signedThinkingParts(details)!;
  assert.ok(parts.length > 2);
  assert.ok(parts.every((p) => p.byteLength <= KV_VALUE_CHUNK_BYTES));
  // Each part its own buffer: a view would be stored with the buffer it is cut from.
  assert.ok(parts.every((p) => p.buffer.byteLength === p.byteLength));
  const now = 1_000;
  const records = parts.map((part) => ({ chunks: parts.length, expiresAt: now + 1, part }));
  assert.deepEqual(signedThinkingOfChunks(records, now), details);
  assert.equal(
    signedThinkingParts([detail("c".repeat(MAX_SIGNED_THINKING_BYTES))]),
    null,
  );
});

Deno.test("kept thinking is not put back from a chunk missing, expired or written by another keep", () => {
  const details = [detail("a".repeat(130_000))];
  const parts = signedThinkingParts(details)!;
  const now = 1_000;
  const records = parts.map((part) => ({ chunks: parts.length, expiresAt: now + 1, part }));
  assert.equal(signedThinkingOfChunks([records[0], null, ...records.slice(2)], now), null);
  assert.equal(signedThinkingOfChunks(records, now + 1), null);
  const other = [...records];
  other[1] = { ...records[1], expiresAt: now + 2 };
  assert.equal(signedThinkingOfChunks(other, now), null);
  assert.equal(signedThinkingOfChunks([], now), null);
});

Deno.test("thinking kept for an app is recalled by that app alone, until it expires", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    let now = 1_000_000;
    const memory = new ThinkingMemory(kv, { now: () => now });
    const details = [detail("x".repeat(200_000))];
    assert.equal(await memory.keep("app_a", "toolu_1", details), true);
    assert.deepEqual(await memory.recall("app_a", "toolu_1"), details);
    assert.equal(await memory.recall("app_b", "toolu_1"), null);
    assert.equal(await memory.recall("app_a", "toolu_2"), null);
    now += SIGNED_THINKING_TTL_MS;
    assert.equal(await memory.recall("app_a", "toolu_1"), null);
  } finally {
    kv.close();
  }
});

Deno.test("a keep under an id kept before replaces it whole: the earlier entry's extra chunks go in the same commit", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const memory = new ThinkingMemory(kv);
    await memory.keep("app_a", "toolu_1", [detail("x".repeat(300_000))]);
    const small = [detail("short")];
    await memory.keep("app_a", "toolu_1", small);
    assert.deepEqual(await memory.recall("app_a", "toolu_1"), small);
    let left = 0;
    for await (const _ of kv.list({ prefix: keys.appSignedThinking("app_a") })) left++;
    assert.equal(left, 1);
    assert.ok(MAX_SIGNED_THINKING_CHUNKS <= 10, "read in one getMany");
  } finally {
    kv.close();
  }
});

Deno.test("more thinking than is kept, or an id too long to be a key, is not kept", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const memory = new ThinkingMemory(kv);
    assert.equal(
      await memory.keep("app_a", "toolu_1", [detail("x".repeat(MAX_SIGNED_THINKING_BYTES))]),
      false,
    );
    assert.equal(await memory.keep("app_a", "t".repeat(3000), [detail("x")]), false);
    let left = 0;
    for await (const _ of kv.list({ prefix: keys.appSignedThinking("app_a") })) left++;
    assert.equal(left, 0);
  } finally {
    kv.close();
  }
});

Deno.test("a keep whose commit KV does not answer gives up within its timeout, so the answer's end and its settle do not wait on it", async () => {
  const kv = await Deno.openKv(":memory:");
  // A KV whose commits never answer: what the answer's last chunk would otherwise wait on forever.
  const silent = new Proxy(kv, {
    get(target, name) {
      if (name !== "atomic") return Reflect.get(target, name).bind(target);
      return () => {
        const op = target.atomic();
        return new Proxy(op, {
          get(o, m) {
            if (m === "commit") return () => new Promise(() => {});
            return Reflect.get(o, m).bind(o);
          },
        });
      };
    },
  });
  try {
    const memory = new ThinkingMemory(silent, { keepTimeoutMs: 50 });
    await assert.rejects(
      memory.keep("app_a", "toolu_1", [detail("x")]),
      /no answer from KV in 50 ms/,
    );
  } finally {
    kv.close();
  }
});
