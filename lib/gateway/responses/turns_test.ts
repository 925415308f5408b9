import assert from "node:assert/strict";
import { MAX_REASONING_DETAILS, type ReasoningDetail } from "../reasoning_details.ts";
import { type ChatTurn, chatTurns, type ConversationItem } from "./turns.ts";

type Item = ConversationItem<string>;

const user = (text: string): Item => ({
  type: "message",
  message: { role: "user", content: text },
  source: text,
});
const said = (text: string, phase?: "commentary" | "final_answer"): Item => ({
  type: "message",
  message: { role: "assistant", content: text, ...(phase ? { phase } : {}) },
  source: text,
});
const call = (id: string): Item => ({
  type: "function_call",
  call: { id, type: "function", function: { name: "f", arguments: "{}" } },
  source: id,
});
const output = (id: string): Item => ({
  type: "function_call_output",
  message: { role: "tool", tool_call_id: id, content: `out ${id}` },
  source: `out ${id}`,
});
const detail = (n: number): ReasoningDetail => ({
  type: "reasoning.text",
  text: `thought ${n}`,
  signature: "sig",
  index: n,
});
const thought = (...ns: number[]): Item => ({ type: "reasoning", details: ns.map(detail) });

/** Each turn as its text (or `calls`), its calls' ids and its reasoning's indexes. */
function shape(turns: ChatTurn<string>[]) {
  return turns.map(({ message }) => ({
    role: message.role,
    content: message.content ?? "calls",
    ...(message.phase ? { phase: message.phase } : {}),
    ...(message.tool_calls
      ? { calls: (message.tool_calls as { id: string }[]).map((c) => c.id) }
      : {}),
    ...(message.reasoning_details
      ? { thought: (message.reasoning_details as { index: number }[]).map((d) => d.index) }
      : {}),
  }));
}

Deno.test("turns: the order of the items is kept, each call on the assistant turn right before it", () => {
  const turns = chatTurns([
    user("Hi"),
    said("Looking."),
    call("c1"),
    call("c2"),
    output("c1"),
    output("c2"),
    said("Done."),
    user("Thanks"),
  ]);
  assert.deepEqual(shape(turns), [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Looking.", calls: ["c1", "c2"] },
    { role: "tool", content: "out c1" },
    { role: "tool", content: "out c2" },
    { role: "assistant", content: "Done." },
    { role: "user", content: "Thanks" },
  ]);
  assert.deepEqual(turns.map((t) => [t.source, t.calls]), [
    ["Hi", []],
    ["Looking.", ["c1", "c2"]],
    ["out c1", []],
    ["out c2", []],
    ["Done.", []],
    ["Thanks", []],
  ]);
});

Deno.test("turns: a call's output stays right after the turn that made the call, before the answer written after the calls", () => {
  const turns = chatTurns([
    user("Weather?"),
    said("Checking.", "commentary"),
    call("c1"),
    call("c2"),
    said("Mild.", "final_answer"),
    output("c1"),
    output("c2"),
    user("Tomorrow?"),
  ]);
  assert.deepEqual(shape(turns), [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: "Checking.", phase: "commentary", calls: ["c1", "c2"] },
    { role: "tool", content: "out c1" },
    { role: "tool", content: "out c2" },
    { role: "assistant", content: "Mild.", phase: "final_answer" },
    { role: "user", content: "Tomorrow?" },
  ]);
  // Without outputs (yet), the answer stays after the calls' turn.
  assert.deepEqual(
    shape(chatTurns([said("Checking.", "commentary"), call("c1"), said("Mild.", "final_answer")])),
    [
      { role: "assistant", content: "Checking.", phase: "commentary", calls: ["c1"] },
      { role: "assistant", content: "Mild.", phase: "final_answer" },
    ],
  );
  // Another item than those calls' outputs ends the wait, in its place.
  assert.deepEqual(
    shape(chatTurns([said("A", "commentary"), call("c1"), said("B"), output("c9"), output("c1")])),
    [
      { role: "assistant", content: "A", phase: "commentary", calls: ["c1"] },
      { role: "assistant", content: "B" },
      { role: "tool", content: "out c9" },
      { role: "tool", content: "out c1" },
    ],
  );
});

Deno.test("turns: an answer of earlier turns written after its calls goes before their outputs, with the calls, when the conversation goes on from them; nothing joins an earlier turn", () => {
  const earlier = chatTurns([user("Weather?"), said("Checking."), call("c1"), said("Mild.")]);
  const messages = earlier.map((turn) => turn.message);
  const stored = structuredClone(messages);
  const turns = chatTurns([output("c1"), call("c2"), output("c2")], earlier);
  assert.deepEqual(shape(turns), [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: "Checking." },
    { role: "assistant", content: "Mild.", calls: ["c1"] },
    { role: "tool", content: "out c1" },
    { role: "assistant", content: "calls", calls: ["c2"] },
    { role: "tool", content: "out c2" },
  ]);
  assert.deepEqual(messages, stored, "the stored conversation's messages are copied, not changed");
});

Deno.test("turns: an answer written after its calls stays before their outputs when the model goes on from them, as the step before sent it", () => {
  // Items are taken and grown in place: each conversion gets its own.
  const step = () => [
    user("Weather?"),
    thought(0),
    said("Checking.", "commentary"),
    call("c1"),
    said("Mild.", "final_answer"),
    output("c1"),
  ];
  const sent = shape(chatTurns(step()));
  assert.deepEqual(sent, [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: "Checking.", phase: "commentary", thought: [0] },
    { role: "assistant", content: "Mild.", phase: "final_answer", calls: ["c1"] },
    { role: "tool", content: "out c1" },
  ]);
  assert.deepEqual(shape(chatTurns([...step(), thought(1), call("c2"), output("c2")])), [
    ...sent,
    { role: "assistant", content: "calls", calls: ["c2"], thought: [1] },
    { role: "tool", content: "out c2" },
  ]);
  assert.deepEqual(shape(chatTurns([...step(), said("Sunny."), user("Thanks")])), [
    ...sent,
    { role: "assistant", content: "Sunny." },
    { role: "user", content: "Thanks" },
  ]);
});

Deno.test("turns: reasoning goes with the assistant turn after it, and is dropped before any other item or at the end", () => {
  const turns = chatTurns([
    user("Hi"),
    thought(0),
    call("c1"),
    thought(1),
    call("c2"),
    thought(2),
    output("c1"),
    output("c2"),
    thought(3),
    said("Done."),
    thought(4),
    user("More"),
    said("Sure."),
    thought(5),
  ]);
  assert.deepEqual(shape(turns), [
    { role: "user", content: "Hi" },
    { role: "assistant", content: "calls", calls: ["c1", "c2"], thought: [0, 1] },
    { role: "tool", content: "out c1" },
    { role: "tool", content: "out c2" },
    { role: "assistant", content: "Done.", thought: [3] },
    { role: "user", content: "More" },
    { role: "assistant", content: "Sure." },
  ]);
  // Reasoning before an answer written after the calls goes back with that answer.
  assert.deepEqual(
    shape(chatTurns([thought(0), said("A", "commentary"), call("c1"), thought(1), said("B")])),
    [
      { role: "assistant", content: "A", phase: "commentary", calls: ["c1"], thought: [0] },
      { role: "assistant", content: "B", thought: [1] },
    ],
  );
});

Deno.test("turns: reasoning past the cap together gives its turn none, rather than a refusal", () => {
  const many = (from: number, n: number) =>
    thought(...Array.from({ length: n }, (_, i) => from + i));
  const turns = chatTurns([many(0, MAX_REASONING_DETAILS), call("c1"), many(1000, 1), call("c2")]);
  assert.equal("reasoning_details" in turns[0].message, false);
  assert.equal(
    (chatTurns([many(0, MAX_REASONING_DETAILS), call("c1")])[0].message
      .reasoning_details as unknown[]).length,
    MAX_REASONING_DETAILS,
  );
});

Deno.test("turns: messages with a phase are turns of their own, each keeping its phase", () => {
  assert.deepEqual(
    shape(chatTurns([said("Looking.", "commentary"), said("Found it.", "final_answer")])),
    [
      { role: "assistant", content: "Looking.", phase: "commentary" },
      { role: "assistant", content: "Found it.", phase: "final_answer" },
    ],
  );
  // A phased message after calls alone was written after them: it waits for their outputs.
  assert.deepEqual(
    shape(chatTurns([call("c1"), said("Mild.", "final_answer"), output("c1"), user("More?")])),
    [
      { role: "assistant", content: "calls", calls: ["c1"] },
      { role: "tool", content: "out c1" },
      { role: "assistant", content: "Mild.", phase: "final_answer" },
      { role: "user", content: "More?" },
    ],
  );
});

Deno.test("turns: a conversation never ends on an answer written after its calls: ending on their outputs, the answer goes before them with the calls, a turn of calls alone giving it its reasoning", () => {
  assert.deepEqual(
    shape(chatTurns([thought(0), call("c1"), said("Mild.", "final_answer"), output("c1")])),
    [
      { role: "assistant", content: "Mild.", phase: "final_answer", calls: ["c1"], thought: [0] },
      { role: "tool", content: "out c1" },
    ],
  );
  assert.deepEqual(
    shape(chatTurns([said("A", "commentary"), call("c1"), said("B"), said("C"), output("c1")])),
    [
      { role: "assistant", content: "A", phase: "commentary" },
      { role: "assistant", content: "B" },
      { role: "assistant", content: "C", calls: ["c1"] },
      { role: "tool", content: "out c1" },
    ],
  );
  // Without outputs (yet) nothing moves: the calls wait for them where they were written.
  assert.deepEqual(shape(chatTurns([said("A", "commentary"), call("c1"), said("B")])), [
    { role: "assistant", content: "A", phase: "commentary", calls: ["c1"] },
    { role: "assistant", content: "B" },
  ]);
});

Deno.test("turns: messages without a phase are turns of their own too, never merged; one right after calls alone is their turn's text", () => {
  assert.deepEqual(shape(chatTurns([said("One."), said("Two.")])), [
    { role: "assistant", content: "One." },
    { role: "assistant", content: "Two." },
  ]);
  assert.deepEqual(
    shape(chatTurns([said("One."), call("c1"), said("Two."), output("c1"), user("OK")])),
    [
      { role: "assistant", content: "One.", calls: ["c1"] },
      { role: "tool", content: "out c1" },
      { role: "assistant", content: "Two." },
      { role: "user", content: "OK" },
    ],
  );
  // Claude's text beside a call, which a stream gives after the call.
  const turns = chatTurns([thought(0), call("c1"), thought(1), said("Checking."), output("c1")]);
  assert.deepEqual(shape(turns), [
    { role: "assistant", content: "Checking.", calls: ["c1"], thought: [0, 1] },
    { role: "tool", content: "out c1" },
  ]);
  assert.equal(turns[0].source, "Checking.");
});

Deno.test("turns: a call after an answer written after calls, before their outputs, joins those calls on that answer, so all are answered right after one turn", () => {
  // OpenAI's preamble before each of its calls, in one response.
  assert.deepEqual(
    shape(chatTurns([
      user("Lima and Quito?"),
      said("Checking Lima.", "commentary"),
      call("c1"),
      said("Checking Quito.", "commentary"),
      call("c2"),
      output("c1"),
      output("c2"),
    ])),
    [
      { role: "user", content: "Lima and Quito?" },
      { role: "assistant", content: "Checking Lima.", phase: "commentary" },
      { role: "assistant", content: "Checking Quito.", phase: "commentary", calls: ["c1", "c2"] },
      { role: "tool", content: "out c1" },
      { role: "tool", content: "out c2" },
    ],
  );
  assert.deepEqual(
    shape(chatTurns([thought(0), call("c1"), said("Mild.", "final_answer"), call("c2")])),
    [{
      role: "assistant",
      content: "Mild.",
      phase: "final_answer",
      calls: ["c1", "c2"],
      thought: [0],
    }],
  );
  // Once an output is in, a later call is a turn of its own after it, the answer before it.
  assert.deepEqual(
    shape(chatTurns([said("A", "commentary"), call("c1"), said("B"), output("c1"), call("c2")])),
    [
      { role: "assistant", content: "A", phase: "commentary" },
      { role: "assistant", content: "B", calls: ["c1"] },
      { role: "tool", content: "out c1" },
      { role: "assistant", content: "calls", calls: ["c2"] },
    ],
  );
});
