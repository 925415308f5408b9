import assert from "node:assert/strict";
import { ApiError } from "@/lib/core/mod.ts";
import { parseChatRequest } from "../chat_request.ts";
import {
  assertReferencedSize,
  inputItemsOf,
  parseResponsesBody,
  referencedItems,
  type ResponseInputItem,
  type StoredContext,
  toChatRequest,
} from "./request.ts";
import { encryptedContentOf } from "../reasoning_details.ts";
import { inResponsesTerms } from "./responses.ts";

const NONE: StoredContext = { previous: [], items: new Map() };
const MODEL = "openai/gpt-4o-mini";

function chatOf(body: Record<string, unknown>, stored = NONE) {
  const { chat } = toChatRequest(parseResponsesBody({ model: MODEL, ...body }), stored);
  parseChatRequest(chat); // the converted body is a valid chat request
  return chat;
}

function refusal(body: Record<string, unknown>, stored = NONE) {
  try {
    toChatRequest(parseResponsesBody(body), stored);
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return { code: error.code, param: error.param };
  }
  assert.fail("accepted");
}

Deno.test("a string input is one user message; instructions lead as a system message", () => {
  assert.deepEqual(chatOf({ input: "Hi", instructions: "Be brief." }).messages, [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Hi" },
  ]);
});

Deno.test("message items keep their roles; input_text and input_image become chat parts", () => {
  const chat = chatOf({
    input: [
      { role: "developer", content: "Rules." },
      {
        type: "message",
        role: "user",
        content: [
          { type: "input_text", text: "What is this?" },
          { type: "input_image", image_url: "https://example.com/cat.png", detail: "low" },
        ],
      },
      { role: "assistant", content: [{ type: "output_text", text: "A cat.", annotations: [] }] },
    ],
  });
  assert.deepEqual(chat.messages, [
    { role: "developer", content: "Rules." },
    {
      role: "user",
      content: [
        { type: "text", text: "What is this?" },
        { type: "image_url", image_url: { url: "https://example.com/cat.png", detail: "low" } },
      ],
    },
    { role: "assistant", content: "A cat." },
  ]);
});

Deno.test("an input_image with detail null is taken at the default detail", () => {
  const chat = chatOf({
    input: [{
      role: "user",
      content: [{ type: "input_image", image_url: "https://example.com/cat.png", detail: null }],
    }],
  });
  assert.deepEqual(chat.messages, [{
    role: "user",
    content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }],
  }]);
});

Deno.test("function calls join the assistant turn before them; outputs become tool messages", () => {
  const chat = chatOf({
    input: [
      { role: "user", content: "Weather in Paris and Rome?" },
      { type: "function_call", call_id: "call_1", name: "weather", arguments: '{"city":"Paris"}' },
      { type: "function_call", call_id: "call_2", name: "weather", arguments: '{"city":"Rome"}' },
      { type: "function_call_output", call_id: "call_1", output: "sunny" },
      {
        type: "function_call_output",
        call_id: "call_2",
        output: [{ type: "input_text", text: "rain" }],
      },
    ],
    tools: [{ type: "function", name: "weather", parameters: { type: "object" }, strict: true }],
  });
  assert.deepEqual(chat.messages, [
    { role: "user", content: "Weather in Paris and Rome?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        {
          id: "call_1",
          type: "function",
          function: { name: "weather", arguments: '{"city":"Paris"}' },
        },
        {
          id: "call_2",
          type: "function",
          function: { name: "weather", arguments: '{"city":"Rome"}' },
        },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
    { role: "tool", tool_call_id: "call_2", content: [{ type: "text", text: "rain" }] },
  ]);
  assert.deepEqual(chat.tools, [
    {
      type: "function",
      function: { name: "weather", parameters: { type: "object" }, strict: true },
    },
  ]);
});

Deno.test("a function_call_output's input_text and input_image parts become the tool message's text and images", () => {
  const chat = chatOf({
    input: [
      { role: "user", content: "Screenshot the page." },
      { type: "function_call", call_id: "call_1", name: "shot", arguments: "{}" },
      {
        type: "function_call_output",
        call_id: "call_1",
        output: [
          { type: "input_text", text: "The page:" },
          { type: "input_image", image_url: "https://example.com/s.png", detail: "high" },
        ],
      },
    ],
    tools: [{ type: "function", name: "shot" }],
  });
  assert.deepEqual((chat.messages as unknown[]).at(-1), {
    role: "tool",
    tool_call_id: "call_1",
    content: [
      { type: "text", text: "The page:" },
      { type: "image_url", image_url: { url: "https://example.com/s.png", detail: "high" } },
    ],
  });
});

Deno.test("a function_call_output's file, or image by file_id, is refused naming the part, before any reservation", () => {
  const withOutput = (part: Record<string, unknown>) => ({
    model: MODEL,
    input: [
      { role: "user", content: "Read it." },
      { type: "function_call", call_id: "call_1", name: "read", arguments: "{}" },
      { type: "function_call_output", call_id: "call_1", output: [part] },
    ],
  });
  assert.deepEqual(refusal(withOutput({ type: "input_file", file_id: "file_1" })), {
    code: "unsupported_parameter",
    param: "input[2].output[0].file_id",
  });
  assert.deepEqual(refusal(withOutput({ type: "input_image", file_id: "file_1" })), {
    code: "unsupported_parameter",
    param: "input[2].output[0].file_id",
  });
  assert.deepEqual(refusal(withOutput({ type: "output_text", text: "x" })), {
    code: "invalid_parameter",
    param: "input[2].output[0].type",
  });
});

Deno.test("tool_choice, text.format, reasoning.effort and max_output_tokens map to their chat fields", () => {
  const chat = chatOf({
    input: "x",
    tools: [{ type: "function", name: "f" }],
    tool_choice: { type: "function", name: "f" },
    text: {
      format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true },
    },
    reasoning: { effort: "low" },
    max_output_tokens: 500,
    temperature: 0.5,
    user: "u-1",
    store: false,
  });
  assert.deepEqual(chat.tool_choice, { type: "function", function: { name: "f" } });
  assert.deepEqual(chat.response_format, {
    type: "json_schema",
    json_schema: { name: "answer", schema: { type: "object" }, strict: true },
  });
  assert.equal(chat.reasoning_effort, "low");
  assert.equal(chat.max_completion_tokens, 500);
  assert.equal(chat.temperature, 0.5);
  assert.equal(chat.user, "u-1");
  assert.equal("store" in chat, false, "storing is ours, not the upstream's");
  assert.deepEqual(
    chatOf({ input: "x", text: { format: { type: "json_object" } } }).response_format,
    {
      type: "json_object",
    },
  );
});

Deno.test("an allowed_tools tool_choice in the Responses API's flat shape becomes chat's", () => {
  const chat = chatOf({
    input: "x",
    tools: [{ type: "function", name: "f" }, { type: "function", name: "g" }],
    tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "g" }] },
  });
  assert.deepEqual(chat.tool_choice, {
    type: "allowed_tools",
    allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "g" } }] },
  });
});

Deno.test("a tool_choice naming a custom, MCP or built-in tool is refused saying only function tools are served", () => {
  const tools = [{ type: "function", name: "f" }];
  for (
    const choice of [
      { type: "custom", name: "f" },
      { type: "mcp", server_label: "deepwiki" },
      { type: "web_search_preview" },
      { type: "apply_patch" },
    ]
  ) {
    assert.throws(
      () => parseResponsesBody({ model: MODEL, input: "x", tools, tool_choice: choice }),
      (e) =>
        e instanceof ApiError && e.code === "invalid_parameter" && e.param === "tool_choice.type" &&
        /only function tools are served/.test(e.message),
      choice.type,
    );
  }
});

Deno.test("a message part of a type not taken (input_audio) is refused naming every type taken, input_file included", () => {
  assert.throws(
    () =>
      chatOf({
        input: [{
          role: "user",
          content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }],
        }],
      }),
    (e) =>
      e instanceof ApiError && e.param === "input[0].content[0].type" &&
      /input_text, input_image, input_file, output_text or refusal/.test(e.message),
  );
});

Deno.test("an input_file's detail is refused as a field a file part does not take, not as a file to send by its bytes", () => {
  const file = (fields: Record<string, unknown>) => ({
    input: [{ role: "user", content: [{ type: "input_file", ...fields }] }],
  });
  const pdf = "data:application/pdf;base64,JVBERi0xLjQKJSVFT0YK";
  assert.throws(
    () => chatOf(file({ file_data: pdf, detail: "low" })),
    (e) =>
      e instanceof ApiError && e.code === "unsupported_parameter" &&
      e.param === "input[0].content[0].detail" && !/file_data \(a data URL\)/.test(e.message) &&
      /takes file_data, filename, cache_control, prompt_cache_breakpoint/.test(e.message),
  );
  assert.throws(
    () => chatOf(file({ file_url: "https://example.com/a.pdf" })),
    (e) =>
      e instanceof ApiError && e.param === "input[0].content[0].file_url" &&
      /send the PDF's bytes as file_data/.test(e.message),
  );
});

Deno.test("an allowed_tools tool_choice with a mode or tools not taken is refused naming that field, not its type", () => {
  const tools = [{ type: "function", name: "f" }];
  const cases = [
    [
      { type: "allowed_tools", mode: "any", tools: [{ type: "function", name: "f" }] },
      "tool_choice.mode",
    ],
    [{ type: "allowed_tools", tools: [{ type: "function", name: "f" }] }, "tool_choice.mode"],
    [{ type: "allowed_tools", mode: "auto", tools: null }, "tool_choice.tools"],
    [{ type: "function" }, "tool_choice.name"],
  ] as const;
  for (const [choice, param] of cases) {
    assert.throws(
      () => parseResponsesBody({ model: MODEL, input: "x", tools, tool_choice: choice }),
      (e) =>
        e instanceof ApiError && e.code === "invalid_parameter" && e.param === param &&
        !/only function tools are served/.test(e.message),
      JSON.stringify(choice),
    );
  }
});

Deno.test("stored items and the previous conversation come before the new input", () => {
  const items = new Map<string, ResponseInputItem>([
    ["msg_1", {
      type: "message",
      role: "assistant",
      content: [{ type: "output_text", text: "Hello!" }],
    }],
  ]);
  const previous = [{ role: "user", content: "Earlier" }, { role: "assistant", content: "Noted." }];
  const chat = chatOf(
    { input: [{ type: "item_reference", id: "msg_1" }, { role: "user", content: "Again" }] },
    { previous, items },
  );
  assert.deepEqual(chat.messages, [
    ...previous,
    { role: "assistant", content: "Hello!" },
    { role: "user", content: "Again" },
  ]);
  assert.deepEqual(
    referencedItems(
      parseResponsesBody({ model: MODEL, input: [{ type: "item_reference", id: "a" }] }),
    ),
    ["a"],
  );
});

Deno.test("reasoning items of other providers are dropped: no chat provider takes them back", () => {
  const chat = chatOf({
    input: [
      { type: "reasoning", id: "rs_1", summary: [] },
      { type: "reasoning", id: "rs_2", summary: [], encrypted_content: "gAAAAABpF-openai" },
      { role: "user", content: "x" },
    ],
  });
  assert.deepEqual(chat.messages, [{ role: "user", content: "x" }]);
});

Deno.test("a function_call item's extra_content (Gemini 3's thought signature) goes back with the call; anything but an object is refused", () => {
  const signature = { google: { thought_signature: "CiQB0e2Kb==" } };
  const call = { type: "function_call", call_id: "c1", name: "w", arguments: "{}" };
  const input = (extra: unknown) => [
    { role: "user", content: "Weather?" },
    { ...call, extra_content: extra },
    { type: "function_call_output", call_id: "c1", output: "sunny" },
  ];
  const tools = [{ type: "function", name: "w", parameters: { type: "object" } }];
  const chat = chatOf({ input: input(signature), tools });
  const sent = (chat.messages as { tool_calls?: { extra_content?: unknown }[] }[])[1];
  assert.deepEqual(sent.tool_calls![0].extra_content, signature);
  assert.deepEqual(refusal({ model: MODEL, input: input("CiQB0e2Kb=="), tools }), {
    code: "invalid_parameter",
    param: "input[1].extra_content",
  });
});

const SIGNED = {
  type: "reasoning.text" as const,
  text: "Look it up.",
  signature: "EqSig",
  format: "anthropic-claude-v1",
  id: "claude-sonnet-4-5#0",
  index: 0,
};

Deno.test("Claude's thinking sealed in a reasoning item goes back as the reasoning_details of the assistant turn after it", () => {
  const sealed = encryptedContentOf([SIGNED])!;
  const call = { type: "function_call", call_id: "c1", name: "w", arguments: "{}" };
  const chat = chatOf({
    input: [
      { role: "user", content: "Weather?" },
      { type: "reasoning", id: "rs_1", summary: [], encrypted_content: sealed },
      call,
      { type: "function_call_output", call_id: "c1", output: "sunny" },
    ],
    tools: [{ type: "function", name: "w", parameters: { type: "object" } }],
  });
  const assistant = (chat.messages as Record<string, unknown>[])[1];
  assert.deepEqual(assistant.reasoning_details, [SIGNED]);
  // Before a message item, the same; before a user message, it belongs to no turn and is dropped.
  const withText = chatOf({
    input: [
      { role: "user", content: "Hi" },
      { type: "reasoning", id: "rs_1", summary: [], encrypted_content: sealed },
      { role: "assistant", content: "Hello." },
      { type: "reasoning", id: "rs_2", summary: [], encrypted_content: sealed },
      { role: "user", content: "Again?" },
    ],
  });
  const messages = withText.messages as Record<string, unknown>[];
  assert.deepEqual(messages[1].reasoning_details, [SIGNED]);
  assert.equal("reasoning_details" in messages[2], false);
});

Deno.test("reasoning items each within the cap but over it together give their turn no details, rather than a refusal", () => {
  const many = (n: number, from: number) =>
    encryptedContentOf(
      Array.from({ length: n }, (_, i) => ({ ...SIGNED, index: from + i, id: `m#${from + i}` })),
    )!;
  const call = (id: string) => ({ type: "function_call", call_id: id, name: "w", arguments: "{}" });
  const chat = chatOf({
    input: [
      { role: "user", content: "Weather?" },
      { type: "reasoning", id: "rs_1", summary: [], encrypted_content: many(200, 0) },
      call("c1"),
      { type: "reasoning", id: "rs_2", summary: [], encrypted_content: many(100, 200) },
      call("c2"),
      { type: "function_call_output", call_id: "c1", output: "sunny" },
      { type: "function_call_output", call_id: "c2", output: "warm" },
    ],
    tools: [{ type: "function", name: "w", parameters: { type: "object" } }],
  });
  const assistant = (chat.messages as Record<string, unknown>[])[1];
  assert.equal((assistant.tool_calls as unknown[]).length, 2);
  assert.equal("reasoning_details" in assistant, false);
});

Deno.test("a reasoning item's encrypted_content marked as Tollbooth's that it did not make, or holding more details than a message may, is refused with its path", () => {
  // More details than a message may carry, sealed the way Tollbooth seals (which it never does
  // for so many): refused, not walked.
  const mark = encryptedContentOf([SIGNED])!.replace(btoa(JSON.stringify([SIGNED])), "");
  const tooMany = mark + btoa(JSON.stringify(Array(300).fill({ ...SIGNED, text: "" })));
  for (
    const forged of [encryptedContentOf([SIGNED])!.slice(0, -8) + "!!!!!!!!", tooMany]
  ) {
    assert.deepEqual(
      refusal({
        model: MODEL,
        input: [
          { role: "user", content: "x" },
          { type: "reasoning", id: "rs_1", summary: [], encrypted_content: forged },
          { role: "assistant", content: "y" },
          { role: "user", content: "z" },
        ],
      }),
      { code: "invalid_parameter", param: "input[1].encrypted_content" },
    );
  }
});

Deno.test("each malformed or unsupported field is refused with its Responses path", () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ input: "x" }, "missing_parameter", "model"],
    [{ model: MODEL }, "missing_parameter", "input"],
    [{ model: MODEL, input: "x", temperature: 3 }, "invalid_parameter", "temperature"],
    [{ model: MODEL, input: "x", bogus: 1 }, "invalid_parameter", "bogus"],
    [{ model: MODEL, input: "x", conversation: "conv_1" }, "unsupported_parameter", "conversation"],
    [{ model: MODEL, input: "x", prompt: { id: "pmpt_1" } }, "unsupported_parameter", "prompt"],
    [{ model: MODEL, input: "x", max_tool_calls: 0 }, "invalid_parameter", "max_tool_calls"],
    [
      { model: MODEL, input: [{ role: "user", content: "x", bogus: 1 }] },
      "invalid_parameter",
      "input[0].bogus",
    ],
    [
      { model: MODEL, input: [{ role: "robot", content: "x" }] },
      "invalid_parameter",
      "input[0].role",
    ],
    [
      { model: MODEL, input: [{ type: "function_call", call_id: "c", name: "f" }] },
      "invalid_parameter",
      "input[0].arguments",
    ],
    [
      { model: MODEL, input: [{ type: "web_search_call" }] },
      "unsupported_parameter",
      "input[0].type",
    ],
    [
      { model: MODEL, input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] },
      "unsupported_parameter",
      "input[0].content[0].file_id",
    ],
    [
      { model: MODEL, input: [{ role: "user", content: [{ type: "input_file", filename: "a" }] }] },
      "missing_parameter",
      "input[0].content[0].file_data",
    ],
    [
      {
        model: MODEL,
        input: [{
          role: "assistant",
          content: [{ type: "input_file", file_data: "data:application/pdf;base64,JVBERi0=" }],
        }],
      },
      "invalid_parameter",
      "input[0].content[0].type",
    ],
    [
      { model: MODEL, input: [{ type: "item_reference", id: "msg_gone" }] },
      "invalid_parameter",
      "input[0].id",
    ],
    [
      { model: MODEL, input: "x", tools: [{ type: "web_search" }] },
      "invalid_parameter",
      "tools[0].type",
    ],
    [{ model: MODEL, input: "x", background: true }, "invalid_parameter", "background"],
    [{ model: MODEL, input: "x", max_output_tokens: 5 }, "invalid_parameter", "max_output_tokens"],
    [{ model: MODEL, input: "x", include: ["no.such.output"] }, "invalid_parameter", "include[0]"],
    [{ model: MODEL, input: "x", top_logprobs: 21 }, "invalid_parameter", "top_logprobs"],
  ];
  for (const [body, code, param] of cases) {
    assert.deepEqual(refusal(body), { code, param }, JSON.stringify(body));
  }
});

Deno.test("an unknown field is refused in the field's words, not the validator's", () => {
  const message = (body: Record<string, unknown>) => {
    try {
      toChatRequest(parseResponsesBody(body), NONE);
    } catch (error) {
      return (error as ApiError).message;
    }
    throw new Error("accepted");
  };
  assert.equal(
    message({ model: MODEL, input: "x", bogus: 1 }),
    "Unknown parameter: 'bogus'. The fields Tollbooth accepts are listed at /docs/endpoints#responses.",
  );
  assert.equal(
    message({ model: MODEL, input: [{ role: "user", content: "x", bogus: 1 }] }),
    "Invalid value for 'input[0].bogus': is not a field Tollbooth accepts here.",
  );
  assert.match(message({ model: MODEL, input: "x", conversation: "c" }), /previous_response_id/);
});

Deno.test("max_tool_calls is taken and goes nowhere: it bounds built-in tools, and only function tools are served", () => {
  const chat = chatOf({ input: "x", max_tool_calls: 3 });
  assert.equal("max_tool_calls" in chat, false);
});

Deno.test("include message.output_text.logprobs asks the chat call for logprobs, with top_logprobs; other includes change nothing", () => {
  const asked = chatOf({
    input: "x",
    include: ["message.output_text.logprobs", "reasoning.encrypted_content"],
    top_logprobs: 3,
  });
  assert.equal(asked.logprobs, true);
  assert.equal(asked.top_logprobs, 3);
  // top_logprobs alone says how many, not whether: the Responses API wants the include for it.
  const plain = chatOf({ input: "x", include: ["reasoning.encrypted_content"], top_logprobs: 3 });
  assert.equal("logprobs" in plain || "top_logprobs" in plain, false);
});

Deno.test("every item reference counts, a repeated one too, and more than 256 are refused naming input", () => {
  const refs = (n: number, id = (i: number) => `msg_${i}`) =>
    parseResponsesBody({
      model: MODEL,
      input: Array.from({ length: n }, (_, i) => ({ type: "item_reference", id: id(i) })),
    });
  const refused = (e: unknown) =>
    e instanceof ApiError && e.code === "invalid_parameter" && e.param === "input";
  assert.deepEqual(referencedItems(refs(2, () => "msg_1")), ["msg_1"]);
  assert.equal(referencedItems(refs(256)).length, 256);
  assert.throws(() => referencedItems(refs(257)), refused);
  // Each repeat is sent and counted again: 100 of one 2 MB item held the thread for 5 s.
  assert.throws(() => referencedItems(refs(257, () => "msg_1")), refused);
});

Deno.test("the items referenced may hold at most so much in all, each counted as often as it is referenced", () => {
  const item = {
    type: "message",
    role: "assistant",
    content: [{ type: "output_text", text: "x".repeat(900) }],
  };
  const items = new Map([["msg_1", item]]);
  const size = JSON.stringify(item).length;
  const body = (n: number) =>
    parseResponsesBody({
      model: MODEL,
      input: Array.from({ length: n }, () => ({ type: "item_reference", id: "msg_1" })),
    });
  assertReferencedSize(body(10), items, size * 10);
  assert.throws(
    () => assertReferencedSize(body(11), items, size * 10),
    (e) => e instanceof ApiError && e.code === "invalid_parameter" && e.param === "input",
  );
});

Deno.test("an id longer than 256 characters is refused, never looked up: previous_response_id and item_reference", () => {
  assert.throws(
    () => parseResponsesBody({ model: MODEL, input: "x", previous_response_id: "r".repeat(257) }),
    (e) => e instanceof ApiError && e.param === "previous_response_id",
  );
  parseResponsesBody({ model: MODEL, input: "x", previous_response_id: "r".repeat(256) });
  const long = { model: MODEL, input: [{ type: "item_reference", id: "y".repeat(2100) }] };
  assert.deepEqual(referencedItems(parseResponsesBody(long)), []);
  assert.deepEqual(refusal(long), { code: "invalid_parameter", param: "input[0].id" });
});

Deno.test("consecutive function_call items are one assistant turn's tool calls, in order, however many", () => {
  const n = 40_000; // each call copied the list before: 28 s
  const chat = chatOf({
    input: [
      { role: "user", content: "hi" },
      ...Array.from({ length: n }, (_, i) => ({
        type: "function_call",
        call_id: `c${i}`,
        name: "f",
        arguments: "{}",
      })),
      ...Array.from({ length: n }, (_, i) => ({
        type: "function_call_output",
        call_id: `c${i}`,
        output: "ok",
      })),
    ],
  });
  const turn = (chat.messages as { tool_calls?: { id: string }[] }[])[1];
  assert.equal(turn.tool_calls!.length, n);
  assert.equal(turn.tool_calls![n - 1].id, `c${n - 1}`);
});

Deno.test("parallel_tool_calls goes to the chat body only with tools: Chat Completions refuses it without", () => {
  assert.equal("parallel_tool_calls" in chatOf({ input: "x", parallel_tool_calls: false }), false);
  assert.equal(
    "parallel_tool_calls" in chatOf({ input: "x", tools: [], parallel_tool_calls: true }),
    false,
  );
  const chat = chatOf({
    input: "x",
    tools: [{ type: "function", name: "f" }],
    parallel_tool_calls: false,
  });
  assert.equal(chat.parallel_tool_calls, false);
});

Deno.test("metadata is held to OpenAI's limits (16 pairs, keys of 64 characters, values of 512), naming metadata", () => {
  const pairs = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
  const cases: [Record<string, string>, string, RegExp][] = [
    [pairs(17), "metadata", /at most 16 key-value pairs/],
    [{ ["k".repeat(65)]: "v" }, "metadata", /keys must be at most 64 characters/],
    [{ a: "v".repeat(513) }, "metadata.a", /at most 512 characters/],
  ];
  for (const [metadata, param, message] of cases) {
    assert.throws(
      () => parseResponsesBody({ model: MODEL, input: "x", metadata }),
      (e) => {
        assert.ok(e instanceof ApiError, String(e));
        assert.equal(e.code, "invalid_parameter");
        assert.equal(e.param, param);
        assert.match(e.message, message);
        return true;
      },
    );
  }
  const metadata = { ...pairs(15), ["k".repeat(64)]: "v".repeat(512) };
  assert.deepEqual(chatOf({ input: "x", metadata }).metadata, metadata);
});

Deno.test("an item holding only an id is an item_reference, as the openai SDK's types let it be sent", () => {
  const items = new Map<string, ResponseInputItem>([
    ["msg_1", {
      type: "message",
      role: "assistant",
      content: [{ type: "output_text", text: "Hello!" }],
    }],
  ]);
  for (const reference of [{ id: "msg_1" }, { id: "msg_1", type: null }]) {
    const body = parseResponsesBody({
      model: MODEL,
      input: [{ role: "user", content: "Hi" }, reference, { role: "user", content: "Again" }],
    });
    assert.deepEqual(referencedItems(body), ["msg_1"]);
    const { chat } = toChatRequest(body, { previous: [], items });
    assert.deepEqual(chat.messages, [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!" },
      { role: "user", content: "Again" },
    ]);
  }
  // With anything besides, it is a message and its missing role is what is named.
  assert.deepEqual(refusal({ model: MODEL, input: [{ id: "msg_1", content: "x" }] }), {
    code: "invalid_parameter",
    param: "input[0].role",
  });
});

Deno.test("a chat path maps to the input item it came from where the mapping is exact", () => {
  const { inputPath } = toChatRequest(
    parseResponsesBody({
      model: MODEL,
      instructions: "Be brief.",
      input: [
        {
          role: "user",
          content: [{ type: "input_text", text: "Look" }, {
            type: "input_image",
            image_url: "https://x/a.png",
            detail: "low",
          }],
        },
        { type: "function_call", call_id: "c1", name: "f", arguments: "{}" },
        { type: "function_call", call_id: "c2", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "c1", output: "one" },
        { type: "item_reference", id: "msg_1" },
      ],
    }),
    {
      previous: [{ role: "user", content: "Earlier" }],
      items: new Map([["msg_1", { type: "message", role: "user", content: "stored" }]]),
    },
  );
  const cases: [string, string][] = [
    ["messages[0].content", "instructions"],
    ["messages[1].content", "previous_response_id"],
    ["messages[2].content[1].image_url.url", "input[0].content[1].image_url"],
    ["messages[2].content[1].image_url.detail", "input[0].content[1].detail"],
    ["messages[2].content[0].text", "input[0].content[0].text"],
    ["messages[3].tool_calls[1].function.arguments", "input[2].arguments"],
    ["messages[3].tool_calls[0].id", "input[1].call_id"],
    // Two calls: which one is meant is not in the path.
    ["messages[3].tool_calls", "input"],
    ["messages[4].tool_call_id", "input[3].call_id"],
    ["messages[4].content", "input[3].output"],
    ["messages[4].content[1].image_url.url", "input[3].output[1].image_url"],
    ["messages[4].content[0].text", "input[3].output[0].text"],
    // The stored item's fields are not in the request: its reference is named.
    ["messages[5].content", "input[4]"],
    ["messages[9].content", "input"],
    ["messages", "input"],
    ["temperature", "temperature"],
  ];
  for (const [chat, responses] of cases) assert.equal(inputPath(chat), responses, chat);
});

Deno.test("an input_image's detail other than auto, low or high is refused naming detail and what it may be", () => {
  const error = (() => {
    try {
      toChatRequest(
        parseResponsesBody({
          model: MODEL,
          input: [{
            role: "user",
            content: [{ type: "input_image", image_url: "https://x/a.png", detail: "original" }],
          }],
        }),
        NONE,
      );
    } catch (e) {
      return e as ApiError;
    }
  })()!;
  assert.ok(error instanceof ApiError);
  assert.equal(error.code, "invalid_parameter");
  assert.equal(error.param, "input[0].content[0].detail");
  assert.match(error.message, /must be one of auto, low, high/);
});

Deno.test("input items are listed as OpenAI lists them: each with an id, text as parts, a reference as its item", () => {
  let n = 0;
  const newId = (prefix: string) => `${prefix}_${++n}`;
  const stored: ResponseInputItem = {
    type: "message",
    id: "msg_stored",
    role: "assistant",
    content: [{ type: "output_text", text: "Hello!" }],
  };
  const body = parseResponsesBody({
    model: MODEL,
    input: [
      { role: "user", content: "Hi" },
      { id: "msg_stored" },
      // As the openai SDK's parse helpers return it: parsed_arguments is dropped, not listed.
      {
        type: "function_call",
        call_id: "c1",
        name: "f",
        arguments: "{}",
        id: "fc_client",
        parsed_arguments: {},
      },
      { type: "function_call_output", call_id: "c1", output: "sunny" },
    ],
  });
  assert.deepEqual(
    inputItemsOf(body, new Map([["msg_stored", stored]]), newId),
    [
      {
        id: "msg_1",
        type: "message",
        role: "user",
        content: [{ type: "input_text", text: "Hi" }],
        status: "completed",
      },
      { ...stored, status: "completed" },
      {
        id: "fc_client",
        type: "function_call",
        call_id: "c1",
        name: "f",
        arguments: "{}",
        status: "completed",
      },
      {
        id: "fco_2",
        type: "function_call_output",
        call_id: "c1",
        output: "sunny",
        status: "completed",
      },
    ],
  );
  assert.deepEqual(
    inputItemsOf(parseResponsesBody({ model: MODEL, input: "Yo" }), new Map(), newId),
    [
      {
        id: "msg_3",
        type: "message",
        role: "user",
        content: [{ type: "input_text", text: "Yo" }],
        status: "completed",
      },
    ],
  );
});

Deno.test("GPT-5.6's reasoning fields: standard mode and this turn's context are taken, pro mode and all turns' reasoning refused", () => {
  const chat = chatOf({
    input: "Hi",
    reasoning: { effort: "max", mode: "standard", context: "auto" },
    prompt_cache_options: { mode: "explicit" },
    prompt_cache_retention: "24h",
  });
  assert.equal(chat.reasoning_effort, "max");
  assert.deepEqual(chat.prompt_cache_options, { mode: "explicit" });
  assert.equal(chat.prompt_cache_retention, "24h");
  assert.equal(
    refusal({ model: MODEL, input: "Hi", reasoning: { mode: "pro" } }).param,
    "reasoning.mode",
  );
  assert.equal(
    refusal({ model: MODEL, input: "Hi", reasoning: { context: "all_turns" } }).param,
    "reasoning.context",
  );
});

Deno.test("a user's input_file becomes the chat dialect's file part, its faults named by their Responses path", () => {
  const pdf = "data:application/pdf;base64,JVBERi0xLjQKJSVFT0YK";
  const input = (file: Record<string, unknown>) => [
    { role: "user", content: "Hi" },
    {
      role: "user",
      content: [{ type: "input_text", text: "Read it." }, { type: "input_file", ...file }],
    },
  ];
  const breakpoint = { mode: "explicit" };
  assert.deepEqual(
    (chatOf({
      input: input({ file_data: pdf, filename: "a.pdf", prompt_cache_breakpoint: breakpoint }),
    }).messages as unknown[])[1],
    {
      role: "user",
      content: [
        { type: "text", text: "Read it." },
        {
          type: "file",
          file: { file_data: pdf, filename: "a.pdf" },
          prompt_cache_breakpoint: breakpoint,
        },
      ],
    },
  );
  const converted = toChatRequest(
    parseResponsesBody({
      model: MODEL,
      input: input({ file_data: "data:application/pdf;base64,PGh0bWw+" }),
    }),
    NONE,
  );
  assert.throws(
    () => {
      try {
        parseChatRequest(converted.chat);
      } catch (error) {
        inResponsesTerms(error, converted.inputPath);
      }
    },
    (e) => e instanceof ApiError && e.param === "input[1].content[1].file_data",
  );
});

Deno.test("a function_call_output's input_file becomes a file part of its tool message", () => {
  const pdf = "data:application/pdf;base64,JVBERi0xLjQKJSVFT0YK";
  const chat = chatOf({
    input: [
      { role: "user", content: "Read the attachment." },
      { type: "function_call", call_id: "call_1", name: "fetch", arguments: "{}" },
      {
        type: "function_call_output",
        call_id: "call_1",
        output: [{ type: "input_file", file_data: pdf, filename: "a.pdf" }],
      },
    ],
  });
  assert.deepEqual((chat.messages as unknown[]).at(-1), {
    role: "tool",
    tool_call_id: "call_1",
    content: [{ type: "file", file: { file_data: pdf, filename: "a.pdf" } }],
  });
});

Deno.test("an input item given twice (by reference or by id) is refused: input_items pages by id", () => {
  const stored: ResponseInputItem = {
    type: "message",
    id: "msg_stored",
    role: "assistant",
    content: [{ type: "output_text", text: "Hello!" }],
  };
  for (
    const input of [
      [{ type: "item_reference", id: "msg_stored" }, "beta", {
        type: "item_reference",
        id: "msg_stored",
      }],
      [{ role: "user", content: "a", id: "msg_a" }, { role: "user", content: "b", id: "msg_a" }],
    ]
  ) {
    const body = parseResponsesBody({
      model: MODEL,
      input: input.map((i) => typeof i === "string" ? { role: "user", content: i } : i),
    });
    assert.throws(
      () => inputItemsOf(body, new Map([["msg_stored", stored]]), (p) => `${p}_new`),
      (e: ApiError) =>
        e.code === "invalid_parameter" && /^input\[[12]\]$/.test(e.param ?? "") &&
        /Duplicate item found with id/.test(e.message),
    );
  }
});

Deno.test("a chained turn sends the earlier turns without their cache breakpoints, its own kept", () => {
  const body = parseResponsesBody({
    model: "m",
    input: [{
      role: "user",
      content: [{ type: "input_text", text: "Turn 2", cache_control: { type: "ephemeral" } }],
    }],
  });
  const earlier = {
    role: "user",
    content: [{
      type: "text",
      text: "Turn 1",
      cache_control: { type: "ephemeral" },
      prompt_cache_breakpoint: { mode: "explicit" },
    }],
  };
  const { chat } = toChatRequest(body, { previous: [earlier], items: new Map() });
  assert.deepEqual(chat.messages, [
    { role: "user", content: [{ type: "text", text: "Turn 1" }] },
    {
      role: "user",
      content: [{ type: "text", text: "Turn 2", cache_control: { type: "ephemeral" } }],
    },
  ]);
});

Deno.test("an assistant message's phase stays on its chat message; a user's is dropped and an unknown one refused", () => {
  assert.deepEqual(
    chatOf({
      input: [
        { role: "user", content: "Hi", phase: "final_answer" },
        {
          type: "message",
          role: "assistant",
          phase: "commentary",
          content: [{ type: "output_text", text: "Looking." }],
        },
        { role: "assistant", content: "Hello.", phase: "final_answer" },
        { role: "assistant", content: "Again.", phase: null },
      ],
    }).messages,
    [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Looking.", phase: "commentary" },
      { role: "assistant", content: "Hello.", phase: "final_answer" },
      { role: "assistant", content: "Again." },
    ],
  );
  assert.deepEqual(
    refusal({ model: MODEL, input: [{ role: "assistant", content: "x", phase: "draft" }] }),
    { code: "invalid_parameter", param: "input[0].phase" },
  );
});

Deno.test("an assistant message after its turn's function calls joins that turn, so the calls' outputs follow them", () => {
  const chat = chatOf({
    input: [
      { role: "user", content: "Weather?" },
      { type: "function_call", call_id: "c1", name: "weather", arguments: "{}" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
      { type: "function_call_output", call_id: "c1", output: "sunny" },
    ],
    tools: [{ type: "function", name: "weather" }],
  });
  assert.deepEqual(chat.messages, [
    { role: "user", content: "Weather?" },
    {
      role: "assistant",
      content: "Checking.",
      tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "c1", content: "sunny" },
  ]);
  // A turn that began with its text keeps a later message apart, as before.
  const apart = chatOf({
    input: [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "One." },
      { type: "function_call", call_id: "c1", name: "weather", arguments: "{}" },
      { type: "function_call_output", call_id: "c1", output: "sunny" },
      { role: "assistant", content: "Two." },
    ],
    tools: [{ type: "function", name: "weather" }],
  });
  assert.equal((apart.messages as unknown[]).length, 4);
});

Deno.test("an answer sent back as OpenAI gave it, a preamble, its call and then the answer, is a valid chat conversation: with more after the call's output, the call stays on the preamble's turn, its output right after it, then the answer; ending on the output, the answer goes before it with the call; each message keeps its phase", () => {
  const preamble = {
    type: "message",
    role: "assistant",
    phase: "commentary",
    content: [{ type: "output_text", text: "Checking." }],
  };
  const call = { type: "function_call", call_id: "call_1", name: "f", arguments: "{}" };
  const answer = { role: "assistant", content: "Mild.", phase: "final_answer" };
  const output = { type: "function_call_output", call_id: "call_1", output: "18 C" };
  const tool = { role: "tool", tool_call_id: "call_1", content: "18 C" };
  const calls = [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }];
  const question = { role: "user", content: "And tomorrow?" };
  const { messages } = chatOf({
    input: [{ role: "user", content: "Weather?" }, preamble, call, answer, output, question],
  });
  assert.deepEqual((messages as unknown[]).slice(1), [
    { role: "assistant", content: "Checking.", phase: "commentary", tool_calls: calls },
    tool,
    { role: "assistant", content: "Mild.", phase: "final_answer" },
    question,
  ]);
  // Ending on the output, the conversation would end on the answer: Claude would continue it as a
  // prefill (its newest models refuse one). The call goes with the answer, the output after both.
  const ending = chatOf({
    input: [{ role: "user", content: "Weather?" }, preamble, call, answer, output],
  });
  assert.deepEqual((ending.messages as unknown[]).slice(1), [
    { role: "assistant", content: "Checking.", phase: "commentary" },
    { role: "assistant", content: "Mild.", phase: "final_answer", tool_calls: calls },
    tool,
  ]);
  // Calls alone before the answer: their turn has nothing left once the calls go with it.
  const converted = toChatRequest(
    parseResponsesBody({ model: MODEL, input: [call, answer, output] }),
    NONE,
  );
  assert.deepEqual(converted.chat.messages, [
    { role: "assistant", content: "Mild.", phase: "final_answer", tool_calls: calls },
    tool,
  ]);
  parseChatRequest(converted.chat);
  assert.equal(converted.inputPath("messages[0].tool_calls[0].function.name"), "input[0].name");
  assert.equal(converted.inputPath("messages[0].content"), "input[1].content");
  assert.equal(converted.inputPath("messages[1].content"), "input[2].output");
});

Deno.test("an answer continued by previous_response_id after its preamble and call gets the call's output right after the call's turn, before the answer, when more follows; ending on the output, after the answer and its call; the stored conversation unchanged", () => {
  const calls = [{ id: "call_1", type: "function", function: { name: "f", arguments: "{}" } }];
  const previous = [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: "Checking.", phase: "commentary", tool_calls: calls },
    { role: "assistant", content: "Mild.", phase: "final_answer" },
  ];
  const stored = structuredClone(previous);
  const output = { type: "function_call_output", call_id: "call_1", output: "18 C" };
  const tool = { role: "tool", tool_call_id: "call_1", content: "18 C" };
  const question = { role: "user", content: "And tomorrow?" };
  const more = toChatRequest(
    parseResponsesBody({ model: MODEL, input: [output, question] }),
    { previous, items: new Map() },
  );
  assert.deepEqual(more.chat.messages, [previous[0], previous[1], tool, previous[2], question]);
  parseChatRequest(more.chat);
  assert.equal(more.inputPath("messages[2].content"), "input[0].output");
  assert.equal(more.inputPath("messages[3].content"), "previous_response_id");

  const ending = toChatRequest(
    parseResponsesBody({ model: MODEL, input: [output] }),
    { previous, items: new Map() },
  );
  assert.deepEqual(ending.chat.messages, [
    previous[0],
    { role: "assistant", content: "Checking.", phase: "commentary" },
    { role: "assistant", content: "Mild.", phase: "final_answer", tool_calls: calls },
    tool,
  ]);
  parseChatRequest(ending.chat);
  assert.equal(ending.inputPath("messages[3].content"), "input[0].output");
  assert.deepEqual(previous, stored);
});
