import assert from "node:assert/strict";
import { ApiError } from "@/lib/core/mod.ts";
import { assertSupported, parseChatRequest } from "./chat_request.ts";
import { claudeRulesByName } from "@/lib/catalog/mod.ts";

/** A route of a kind as the catalog makes it: a Claude route has its model's rules. */
function route(
  kind: "openai" | "openai_responses" | "anthropic",
  upstreamModel = "claude-sonnet-4-5",
) {
  return {
    provider: { kind },
    upstreamModel,
    claude: kind === "anthropic" ? claudeRulesByName(upstreamModel) : null,
  };
}

const PNG_1x1 =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

function refused(body: Record<string, unknown>, code: string, param: string) {
  assert.throws(
    () => parseChatRequest({ model: "m/x", ...body }),
    (e) => {
      assert.ok(e instanceof ApiError, String(e));
      assert.equal(e.code, code, e.message);
      assert.equal(e.param, param, e.message);
      return true;
    },
  );
}

Deno.test("the dialect real clients send is accepted: tools, tool messages, developer role, images, structured output", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "developer", content: "Be exact." },
      {
        role: "user",
        name: "ada",
        content: [
          { type: "text", text: "What is in it?" },
          { type: "image_url", image_url: { url: PNG_1x1, detail: "low" } },
          { type: "image_url", image_url: { url: "https://example.com/cat.png" } },
        ],
      },
      {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "look", arguments: "{}" },
        }],
      },
      { role: "tool", tool_call_id: "call_1", content: "a cat" },
      { role: "assistant", content: [{ type: "refusal", refusal: "No." }], refusal: "No." },
      { role: "user", content: "Again" },
    ],
    tools: [{
      type: "function",
      function: { name: "look", parameters: { type: "object" }, strict: true },
    }],
    tool_choice: { type: "function", function: { name: "look" } },
    parallel_tool_calls: false,
    response_format: {
      type: "json_schema",
      json_schema: { name: "answer", schema: { type: "object" }, strict: true },
    },
    reasoning_effort: "low",
    max_completion_tokens: 100,
    stream: true,
    stream_options: { include_usage: true },
    logprobs: true,
    top_logprobs: 3,
    seed: 1,
    stop: ["END"],
    user: "u",
    metadata: { k: "v" },
    temperature: 0.5,
    top_p: 1,
    frequency_penalty: 0,
    presence_penalty: 0,
    prediction: { type: "content", content: "draft" },
    service_tier: "auto",
    store: false,
  });
  assert.equal(request.maxTokens, 100);
  assert.equal(request.capParam, "max_completion_tokens");
  assert.equal(request.includeUsage, true);
  assert.equal(request.params.reasoning_effort, "low");
  assert.equal(request.messages.length, 6);
});

Deno.test("response-only fields pushed back with an assistant message are accepted and dropped, a tool call's parsed_arguments included", () => {
  const call = {
    id: "c1",
    type: "function",
    function: { name: "w", arguments: '{"city":"Oslo"}' },
  };
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        refusal: null,
        parsed: null,
        annotations: [],
        reasoning_content: "Look it up.",
        tool_calls: [{
          ...call,
          function: { ...call.function, parsed_arguments: { city: "Oslo" } },
        }],
      },
      { role: "tool", tool_call_id: "c1", content: "cold" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  });
  // reasoning_content stays for the converters: only a provider that wants it back is sent it.
  assert.deepEqual(request.messages[1], {
    role: "assistant",
    content: null,
    refusal: null,
    reasoning_content: "Look it up.",
    tool_calls: [call],
  });
});

Deno.test("a message serialised with every field, its name and tool_calls null, is taken as if they were absent", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "system", content: "Be exact.", name: null },
      { role: "user", content: "Hi", name: null },
      {
        role: "assistant",
        content: "Hello",
        name: null,
        refusal: null,
        annotations: null,
        audio: null,
        function_call: null,
        tool_calls: null,
      },
      { role: "user", content: "Again", name: "ada" },
    ],
  });
  assert.deepEqual(request.messages, [
    { role: "system", content: "Be exact." },
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello", refusal: null },
    { role: "user", content: "Again", name: "ada" },
  ]);
});

Deno.test("a tool message's name, which LangChain's tools set, is accepted and kept for the providers that read it", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: "cold", name: "w" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  });
  assert.deepEqual(request.messages[2], {
    role: "tool",
    tool_call_id: "c1",
    content: "cold",
    name: "w",
  });
  refused(
    {
      messages: [
        { role: "user", content: "Weather?" },
        { role: "tool", tool_call_id: "c1", content: "cold", name: 7 },
      ],
    },
    "invalid_parameter",
    "messages[1].name",
  );
});

Deno.test("an allowed_tools tool choice is taken as OpenAI shapes it, its names those of declared tools, and refused with the exact path otherwise", () => {
  const tools = [
    { type: "function", function: { name: "weather" } },
    { type: "function", function: { name: "time" } },
  ];
  const messages = [{ role: "user", content: "Weather?" }];
  const allowed = (allowed_tools: unknown) => ({
    messages,
    tools,
    tool_choice: { type: "allowed_tools", allowed_tools },
  });
  const weather = { type: "function", function: { name: "weather" } };
  const choice = { type: "allowed_tools", allowed_tools: { mode: "required", tools: [weather] } };
  assert.deepEqual(
    parseChatRequest({ model: "m/x", messages, tools, tool_choice: choice }).params.tool_choice,
    choice,
  );
  refused(allowed({ tools: [weather] }), "invalid_parameter", "tool_choice.allowed_tools.mode");
  refused(
    allowed({ mode: "any", tools: [weather] }),
    "invalid_parameter",
    "tool_choice.allowed_tools.mode",
  );
  refused(allowed({ mode: "auto" }), "invalid_parameter", "tool_choice.allowed_tools.tools");
  refused(
    allowed({ mode: "auto", tools: [] }),
    "invalid_parameter",
    "tool_choice.allowed_tools.tools",
  );
  refused(
    allowed({ mode: "auto", tools: [weather, { type: "function", function: { name: "news" } }] }),
    "invalid_parameter",
    "tool_choice.allowed_tools.tools[1].function.name",
  );
  refused(
    allowed({ mode: "auto", tools: [{ type: "custom", custom: { name: "weather" } }] }),
    "invalid_parameter",
    "tool_choice.allowed_tools.tools[0].type",
  );
  refused(
    // The Responses API's flat shape, sent to chat: its name is not where chat has it.
    allowed({ mode: "auto", tools: [{ type: "function", name: "weather" }] }),
    "invalid_parameter",
    "tool_choice.allowed_tools.tools[0].function",
  );
  refused({ messages, tool_choice: choice }, "invalid_parameter", "tool_choice");
});

Deno.test("an allowed_tools tool choice without its allowed_tools object is refused naming that field, not its type", () => {
  const messages = [{ role: "user", content: "Weather?" }];
  const tools = [{ type: "function", function: { name: "weather" } }];
  for (
    const choice of [{ type: "allowed_tools" }, { type: "allowed_tools", allowed_tools: null }]
  ) {
    refused(
      { messages, tools, tool_choice: choice },
      "invalid_parameter",
      "tool_choice.allowed_tools",
    );
  }
  assert.throws(
    () => parseChatRequest({ model: "m/x", messages, tools, tool_choice: { type: "mcp" } }),
    (e) =>
      e instanceof ApiError && e.param === "tool_choice.type" && /allowed_tools/.test(e.message),
  );
});

Deno.test("an assistant's reasoning_details are taken as OpenRouter shapes them, and refused with the exact path otherwise", () => {
  const detail = {
    type: "reasoning.text",
    text: "Think.",
    signature: "EqSig",
    format: "anthropic-claude-v1",
    id: "claude-sonnet-4-5#0",
    index: 0,
  };
  const withDetails = (reasoning_details: unknown) =>
    parseChatRequest({
      model: "m/x",
      messages: [
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello.", reasoning_details },
        { role: "user", content: "Again?" },
      ],
    });
  const encrypted = { type: "reasoning.encrypted", data: "Em", format: "anthropic-claude-v1" };
  const summary = { type: "reasoning.summary", summary: "Thought.", format: "unknown" };
  assert.deepEqual(
    (withDetails([detail, encrypted, summary]).messages[1] as Record<string, unknown>)
      .reasoning_details,
    [detail, encrypted, summary],
  );
  // None, or an empty list, is no field at all.
  assert.equal("reasoning_details" in withDetails(null).messages[1], false);
  assert.equal("reasoning_details" in withDetails([]).messages[1], false);
  for (
    const [details, path] of [
      [[{ ...detail, type: "thinking" }], "messages[1].reasoning_details[0].type"],
      [[{ ...detail, signature: 7 }], "messages[1].reasoning_details[0].signature"],
      [[{ ...detail, extra: true }], "messages[1].reasoning_details[0].extra"],
      [[{ type: "reasoning.encrypted" }], "messages[1].reasoning_details[0].data"],
      ["EqSig", "messages[1].reasoning_details"],
      [Array(257).fill(detail), "messages[1].reasoning_details"],
    ] as const
  ) {
    assert.throws(
      () => withDetails(details),
      (e: unknown) => e instanceof ApiError && e.param === path,
      JSON.stringify(details),
    );
  }
});

Deno.test("malformed parts of the dialect get a 400 with the exact path", () => {
  const user = { role: "user", content: "x" };
  refused(
    {
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "ftp://x" } }] }],
    },
    "invalid_parameter",
    "messages[0].content[0].image_url.url",
  );
  refused(
    {
      messages: [{
        role: "user",
        content: [{ type: "image_url", image_url: { url: "data:image/png;base64,aGVsbG8=" } }],
      }],
    },
    "invalid_parameter",
    "messages[0].content[0].image_url.url",
  );
  refused(
    { messages: [{ role: "user", content: [{ type: "video", url: "x" }] }] },
    "invalid_parameter",
    "messages[0].content[0].type",
  );
  refused(
    { messages: [{ role: "assistant", content: null }] },
    "invalid_parameter",
    "messages[0].content",
  );
  refused(
    { messages: [{ role: "user", content: "x", color: "red" }] },
    "invalid_parameter",
    "messages[0].color",
  );
  refused(
    { messages: [user], tools: [{ type: "function", function: { name: "has space" } }] },
    "invalid_parameter",
    "tools[0].function.name",
  );
  refused(
    {
      messages: [user],
      tools: [{ type: "function", function: { name: "a" } }],
      tool_choice: { type: "function", function: { name: "b" } },
    },
    "invalid_parameter",
    "tool_choice.function.name",
  );
  refused({ messages: [user], tool_choice: "required" }, "invalid_parameter", "tool_choice");
  refused(
    { messages: [user], response_format: { type: "json_schema" } },
    "invalid_parameter",
    "response_format.json_schema",
  );
  refused(
    { messages: [user], reasoning_effort: "extreme" },
    "invalid_parameter",
    "reasoning_effort",
  );
  refused({ messages: [user], top_logprobs: 2 }, "invalid_parameter", "top_logprobs");
  refused({ messages: [user], temperature: 3 }, "invalid_parameter", "temperature");
  refused({ messages: [user], colour: 1 }, "invalid_parameter", "colour");
});

Deno.test("tool messages must answer the calls of the assistant turn just before them, each of them", () => {
  const call = (id: string) => ({ id, type: "function", function: { name: "f", arguments: "{}" } });
  refused(
    {
      messages: [{ role: "user", content: "x" }, {
        role: "tool",
        tool_call_id: "c1",
        content: "r",
      }],
    },
    "invalid_parameter",
    "messages[1].tool_call_id",
  );
  refused(
    {
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", tool_calls: [call("c1"), call("c2")] },
        { role: "tool", tool_call_id: "c1", content: "r" },
        { role: "user", content: "y" },
      ],
    },
    "invalid_parameter",
    "messages[1].tool_calls",
  );
  refused(
    {
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", tool_calls: [call("c1"), call("c1")] },
      ],
    },
    "invalid_parameter",
    "messages[1].tool_calls[1].id",
  );
});

Deno.test("a tool call left unanswered at the end of the conversation is refused, as OpenAI and Anthropic refuse it", () => {
  const call = (id: string) => ({ id, type: "function", function: { name: "f", arguments: "{}" } });
  refused(
    {
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", tool_calls: [call("c1"), call("c2")] },
        { role: "tool", tool_call_id: "c1", content: "r" },
      ],
    },
    "invalid_parameter",
    "messages[1].tool_calls",
  );
  refused(
    {
      messages: [
        { role: "user", content: "x" },
        { role: "assistant", tool_calls: [call("c1")] },
      ],
    },
    "invalid_parameter",
    "messages[1].tool_calls",
  );
});

Deno.test("fields that would change the price are refused, not passed on unpriced", () => {
  const messages = [{ role: "user", content: "x" }];
  refused({ messages, service_tier: "priority" }, "unsupported_parameter", "service_tier");
  refused({ messages, service_tier: "flex" }, "unsupported_parameter", "service_tier");
  refused({ messages, service_tier: "fast" }, "unsupported_parameter", "service_tier");
  refused({ messages, modalities: ["text", "audio"] }, "unsupported_parameter", "modalities");
  refused({ messages, audio: { voice: "alloy", format: "mp3" } }, "unsupported_parameter", "audio");
  refused({ messages, web_search_options: {} }, "unsupported_parameter", "web_search_options");
  refused({ messages, functions: [{ name: "f" }] }, "unsupported_parameter", "functions");
});

Deno.test("each provider kind refuses what it cannot honour, by an explicit list", () => {
  const base = { model: "m/x", messages: [{ role: "user", content: "x" }] };
  const check = (body: Record<string, unknown>, kind: "openai" | "anthropic", maxTokens = 2048) =>
    assertSupported(parseChatRequest({ ...base, ...body }), [route(kind)], maxTokens);
  assert.doesNotThrow(() => check({ logprobs: true, top_logprobs: 2 }, "openai"));
  assert.throws(
    () => check({ logprobs: true }, "anthropic"),
    (e) => e instanceof ApiError && e.param === "logprobs",
  );
  assert.throws(
    () => check({ presence_penalty: 0.5 }, "anthropic"),
    (e) => e instanceof ApiError && e.param === "presence_penalty",
  );
  assert.doesNotThrow(() =>
    check({ presence_penalty: 0, seed: 4, metadata: { a: "b" } }, "anthropic")
  );
  assert.throws(
    () => check({ reasoning_effort: "low" }, "anthropic", 1024),
    (e) =>
      e instanceof ApiError && e.code === "unsupported_parameter" && e.param === "reasoning_effort",
  );
  assert.throws(
    () =>
      check({
        messages: [
          { role: "user", content: "x" },
          {
            role: "assistant",
            tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "[1]" } }],
          },
          { role: "tool", tool_call_id: "c", content: "y" },
        ],
      }, "anthropic"),
    (e) => e instanceof ApiError && e.param === "messages[1].tool_calls[0].function.arguments",
  );
  for (const kind of ["openai", "anthropic"] as const) {
    assert.throws(
      () =>
        check({
          messages: [{
            role: "user",
            content: [{ type: "input_audio", input_audio: { data: "AAAA", format: "wav" } }],
          }],
        }, kind),
      (e) => e instanceof ApiError && e.param === "messages[0].content[0].type",
    );
  }
});

Deno.test("a Responses-kind route refuses the fields the Responses API does not have, and a cap below its least", () => {
  const base = { model: "m/x", messages: [{ role: "user", content: "x" }] };
  const check = (body: Record<string, unknown>, maxTokens = 2048) =>
    assertSupported(
      parseChatRequest({ ...base, ...body }),
      [route("openai_responses", "o3-pro")],
      maxTokens,
    );
  for (
    const [body, param] of [
      [{ stop: ["END"] }, "stop"],
      [{ frequency_penalty: 0.3 }, "frequency_penalty"],
      [{ logit_bias: { "42": 1 } }, "logit_bias"],
      [{ prediction: { type: "content", content: "x" } }, "prediction"],
      [{ top_k: 3 }, "top_k"],
    ] as const
  ) {
    assert.throws(
      () => check(body),
      (e) => e instanceof ApiError && e.code === "unsupported_parameter" && e.param === param,
      param,
    );
  }
  assert.doesNotThrow(() =>
    check({
      seed: 1,
      frequency_penalty: 0,
      logprobs: true,
      top_logprobs: 3,
      verbosity: "low",
      reasoning_effort: "high",
      store: true,
    })
  );
  assert.throws(
    () => check({ max_completion_tokens: 15 }, 15),
    (e) =>
      e instanceof ApiError && e.code === "invalid_parameter" &&
      e.param === "max_completion_tokens" && /below 16/.test(e.message),
  );
  assert.doesNotThrow(() => check({ max_tokens: 16 }, 16));
  // A cap of 15 is fine for the chat kinds.
  assert.doesNotThrow(() =>
    assertSupported(parseChatRequest({ ...base, max_tokens: 15 }), [route("openai")], 15)
  );
});

/** The refusal a Claude route makes of a request, or null when it takes it. */
function claudeRefusal(
  body: Record<string, unknown>,
  maxTokens = 4096,
  upstreamModel = "claude-sonnet-4-5",
) {
  try {
    assertSupported(
      parseChatRequest({ model: "m/x", ...body }),
      [route("anthropic", upstreamModel)],
      maxTokens,
    );
    return null;
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return { code: e.code, param: e.param, message: e.message };
  }
}

Deno.test("a Claude route refuses a tool's or an answer tool's schema whose type is not object, as Anthropic does; its output format takes any", () => {
  const messages = [{ role: "user", content: "x" }];
  const list = { type: "array", items: { type: "string" } };
  const tools = (
    parameters: unknown,
  ) => [{ type: "function", function: { name: "f", parameters } }];
  const format = (schema: unknown, strict?: boolean) => ({
    type: "json_schema",
    json_schema: { name: "names", schema, ...(strict === undefined ? {} : { strict }) },
  });
  assert.deepEqual(claudeRefusal({ messages, tools: tools(list) }), {
    code: "invalid_parameter",
    param: "tools[0].function.parameters.type",
    message:
      `Invalid value for 'tools[0].function.parameters.type': must be "object": a tool's input is an object on a model served by the anthropic provider kind.`,
  });
  assert.deepEqual(claudeRefusal({ messages, response_format: format(list) }), {
    code: "invalid_parameter",
    param: "response_format.json_schema.schema.type",
    message:
      `Invalid value for 'response_format.json_schema.schema.type': must be "object": this model answers in a JSON schema's shape through a tool, whose input is an object.`,
  });
  // A strict schema goes as the output format where no tool can be forced (Opus 5.5), else as
  // the tool.
  assert.equal(
    claudeRefusal({ messages, response_format: format(list, true) }, 4096, "claude-opus-5-5"),
    null,
  );
  assert.equal(
    claudeRefusal({ messages, response_format: format(list, true) })?.param,
    "response_format.json_schema.schema.type",
  );
  // No type is an object's (sent as one), and so is an object.
  for (const schema of [{ properties: { a: { type: "string" } } }, { type: "object" }]) {
    assert.equal(claudeRefusal({ messages, tools: tools(schema) }), null);
    assert.equal(claudeRefusal({ messages, response_format: format(schema) }), null);
  }
  // OpenAI's routes are not Claude's: what they take is theirs to say.
  assert.doesNotThrow(() =>
    assertSupported(
      parseChatRequest({ model: "m/x", messages, response_format: format(list) }),
      [route("openai")],
      2048,
    )
  );
});

Deno.test("a Claude conversation with nothing left to ask once blank messages are dropped is refused, naming them", () => {
  const system = { role: "system", content: "You are a poet. Write a haiku." };
  assert.deepEqual(claudeRefusal({ messages: [system] }), {
    code: "invalid_parameter",
    param: "messages",
    message:
      "Invalid value for 'messages': a model served by the anthropic provider kind needs a user message besides the system prompt.",
  });
  assert.deepEqual(claudeRefusal({ messages: [system, { role: "user", content: " \n" }] }), {
    code: "invalid_parameter",
    param: "messages[1].content",
    message:
      "Invalid value for 'messages[1].content': is empty; a model served by the anthropic provider kind needs a user message with text or an image.",
  });
  // Something to ask beside the blank message: it is dropped, not refused.
  assert.equal(
    claudeRefusal({ messages: [{ role: "user", content: "" }, { role: "user", content: "q" }] }),
    null,
  );
  assert.equal(
    claudeRefusal({
      messages: [{
        role: "user",
        content: [{ type: "text", text: "" }, { type: "image_url", image_url: { url: PNG_1x1 } }],
      }],
    }),
    null,
  );
  // OpenAI takes them.
  assertSupported(parseChatRequest({ model: "m/x", messages: [system] }), [route("openai")], 4096);
});

Deno.test("with reasoning_effort, a Claude route refuses the sampling thinking cannot take, before any reservation, and answers a forced tool without thinking", () => {
  const tools = [{ type: "function", function: { name: "w" } }];
  const thinking = {
    messages: [{ role: "user", content: "x" }],
    tools,
    reasoning_effort: "low",
  };
  const refusedParam = (extra: Record<string, unknown>) =>
    claudeRefusal({ ...thinking, ...extra })?.param ?? null;
  assert.deepEqual(claudeRefusal({ ...thinking, temperature: 0.2 }), {
    code: "unsupported_parameter",
    param: "temperature",
    message:
      "Unsupported value for 'temperature': Claude models accept only 1 when reasoning_effort is set (Claude's extended thinking).",
  });
  assert.equal(refusedParam({ top_p: 0.9 }), "top_p");
  assert.equal(refusedParam({ top_k: 40 }), "top_k");
  const allowedW = (mode: string) => ({
    type: "allowed_tools",
    allowed_tools: { mode, tools: [{ type: "function", function: { name: "w" } }] },
  });
  // Allowed tools the model may do without leave it thinking; required ones do not.
  assert.equal(refusedParam({ tool_choice: allowedW("auto"), temperature: 0.2 }), "temperature");
  // What thinking takes, or a turn without it.
  for (
    const allowed of [
      { tool_choice: allowedW("required"), temperature: 0.2 },
      { temperature: 1 },
      { temperature: 1.5 }, // sent as 1
      { top_p: 0.95 },
      { tool_choice: "auto" },
      { tool_choice: "none" },
      { tool_choice: "required", temperature: 0.2, top_k: 5 },
      { tool_choice: { type: "function", function: { name: "w" } } },
      { reasoning_effort: "none", temperature: 0.2, top_k: 5, tool_choice: "required" },
      // A json_schema answer's tool is not forced while thinking: the answer stays possible.
      { response_format: { type: "json_object" } },
    ]
  ) assert.equal(claudeRefusal({ ...thinking, ...allowed }), null, JSON.stringify(allowed));
  // A turn that answers tool calls runs without thinking, so its sampling stands.
  assert.equal(
    claudeRefusal({
      tools,
      reasoning_effort: "low",
      temperature: 0.2,
      messages: [
        { role: "user", content: "x" },
        {
          role: "assistant",
          tool_calls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c", content: "y" },
      ],
    }),
    null,
  );
  // OpenAI's reasoning models are not Claude's business here.
  assertSupported(
    parseChatRequest({ model: "m/x", ...thinking, temperature: 0.2 }),
    [route("openai")],
    4096,
  );
});

/** The 400's message, for a body the validator refuses. */
function refusal(body: Record<string, unknown>): ApiError {
  try {
    parseChatRequest({ model: "m/x", messages: [{ role: "user", content: "x" }], ...body });
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return e;
  }
  throw new Error("accepted");
}

Deno.test("an over-long user, metadata value or cache key is refused saying how long it may be, not 'must be a string'", () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ user: "u".repeat(257) }, "user", /at most 256 characters/],
    [{ safety_identifier: "u".repeat(257) }, "safety_identifier", /at most 256 characters/],
    [{ prompt_cache_key: "k".repeat(1025) }, "prompt_cache_key", /at most 1024 characters/],
    [{ metadata: { a: "v".repeat(513) } }, "metadata.a", /at most 512 characters/],
    [{ logit_bias: { "50256": -101 } }, "logit_bias.50256", /at least -100/],
  ];
  for (const [body, param, message] of cases) {
    const e = refusal(body);
    assert.equal(e.code, "invalid_parameter");
    assert.equal(e.param, param);
    assert.match(e.message, message);
  }
  assert.match(refusal({ user: 7 }).message, /must be a string/);
  parseChatRequest({
    model: "m/x",
    messages: [{ role: "user", content: "x" }],
    user: "u".repeat(256),
  });
});

Deno.test("a user with a lone surrogate is refused: storage keys would merge it with other end users, and the usage page could not link it", () => {
  for (const user of ["\ud800", "ann\udfff", "\udc00\ud800"]) {
    const e = refusal({ user });
    assert.equal(e.code, "invalid_parameter");
    assert.equal(e.param, "user");
    assert.match(e.message, /lone surrogate/);
  }
  parseChatRequest({ model: "m/x", messages: [{ role: "user", content: "x" }], user: "ann 😀" });
});

Deno.test("image URLs are https or data URLs, as documented: plain http is refused with that message", () => {
  const image = (url: string) => ({
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }],
  });
  for (const url of ["http://example.com/cat.png", "HTTP://example.com/cat.png", "https:/x"]) {
    const e = refusal(image(url));
    assert.equal(e.param, "messages[0].content[0].image_url.url");
    assert.match(e.message, /must be an https URL or a data URL/);
  }
  parseChatRequest({ model: "m/x", ...image("HTTPS://example.com/cat.png") });
});

Deno.test("parallel_tool_calls without tools is refused before any reservation, in OpenAI's words", () => {
  const user = { role: "user", content: "x" };
  for (const tools of [undefined, []]) {
    assert.throws(
      () => parseChatRequest({ model: "m/x", messages: [user], tools, parallel_tool_calls: false }),
      (e) =>
        e instanceof ApiError && e.code === "invalid_parameter" &&
        e.param === "parallel_tool_calls" &&
        e.message ===
          "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified.",
    );
  }
  const request = parseChatRequest({
    model: "m/x",
    messages: [user],
    parallel_tool_calls: null,
  });
  assert.equal("parallel_tool_calls" in request.params, false);
});

Deno.test("metadata is held to OpenAI's limits: 16 pairs, keys of 64 characters, values of 512", () => {
  const pairs = (n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
  const cases: [Record<string, string>, string, RegExp][] = [
    [pairs(17), "metadata", /at most 16 key-value pairs/],
    // Counted before any pair is checked, and the values' own faults not reported first.
    [{ ...pairs(300_000), k0: 5 as unknown as string }, "metadata", /\(it holds 300000\)/],
    [{ ["k".repeat(65)]: "v" }, "metadata", /keys must be at most 64 characters/],
    [{ a: "v".repeat(513) }, "metadata.a", /at most 512 characters/],
  ];
  for (const [metadata, param, message] of cases) {
    const e = refusal({ metadata });
    assert.equal(e.code, "invalid_parameter");
    assert.equal(e.param, param);
    assert.match(e.message, message);
  }
  const request = parseChatRequest({
    model: "m/x",
    messages: [{ role: "user", content: "x" }],
    metadata: { ...pairs(15), ["k".repeat(64)]: "v".repeat(512) },
  });
  assert.equal(Object.keys(request.params.metadata as object).length, 16);
});

Deno.test("Claude models from Opus 4.7 on refuse sampling parameters other than their defaults, in OpenAI's words", () => {
  const messages = [{ role: "user", content: "x" }];
  for (const model of ["claude-opus-4-7", "claude-sonnet-5", "claude-fable-5"]) {
    assert.deepEqual(claudeRefusal({ messages, temperature: 0.2 }, 4096, model), {
      code: "unsupported_parameter",
      param: "temperature",
      message:
        "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported.",
    });
    assert.equal(claudeRefusal({ messages, top_p: 0.9 }, 4096, model)?.param, "top_p");
    assert.equal(claudeRefusal({ messages, top_k: 5 }, 4096, model)?.param, "top_k");
    // The defaults (above 1 is Anthropic's 1) are taken, and left out upstream.
    assert.equal(claudeRefusal({ messages, temperature: 1, top_p: 1 }, 4096, model), null);
    assert.equal(claudeRefusal({ messages, temperature: 1.5 }, 4096, model), null);
  }
  // Earlier models take them.
  assert.equal(claudeRefusal({ messages, temperature: 0.2 }, 4096, "claude-opus-4-6"), null);
});

Deno.test("adaptive thinking has no least budget: a small output cap with reasoning_effort is taken", () => {
  const messages = [{ role: "user", content: "x" }];
  assert.equal(claudeRefusal({ messages, reasoning_effort: "low" }, 512, "claude-opus-4-8"), null);
  assert.equal(
    claudeRefusal({ messages, reasoning_effort: "low" }, 512, "claude-sonnet-4-5")?.param,
    "reasoning_effort",
  );
});

Deno.test("a model that always thinks refuses reasoning_effort none", () => {
  const messages = [{ role: "user", content: "x" }];
  assert.deepEqual(claudeRefusal({ messages, reasoning_effort: "none" }, 4096, "claude-fable-5"), {
    code: "unsupported_parameter",
    param: "reasoning_effort",
    message:
      "Unsupported value: 'reasoning_effort' does not support 'none' with this model: it always thinks. Send 'minimal' or 'low' for the least thinking.",
  });
  // One that thinks by default is told not to.
  assert.equal(
    claudeRefusal({ messages, reasoning_effort: "none" }, 4096, "claude-sonnet-5"),
    null,
  );
});

Deno.test("a model that cannot be forced to call a tool refuses a forcing tool_choice, and takes the JSON modes", () => {
  const messages = [{ role: "user", content: "x" }];
  const tools = [{ type: "function", function: { name: "f" } }];
  const named = { type: "function", function: { name: "f" } };
  const allowedRequired = {
    type: "allowed_tools",
    allowed_tools: { mode: "required", tools: [named] },
  };
  for (const tool_choice of ["required", named, allowedRequired]) {
    assert.deepEqual(claudeRefusal({ messages, tools, tool_choice }, 4096, "claude-opus-5-5"), {
      code: "unsupported_parameter",
      param: "tool_choice",
      message:
        "Unsupported value: 'tool_choice' cannot force a tool call with this model. Send 'auto' or 'none'.",
    });
    // Others can be forced, thinking or not (adaptive thinking takes a forced tool).
    assert.equal(claudeRefusal({ messages, tools, tool_choice }, 4096, "claude-sonnet-5"), null);
  }
  // Allowed tools it may do without take no force.
  assert.equal(
    claudeRefusal(
      {
        messages,
        tools,
        tool_choice: { type: "allowed_tools", allowed_tools: { mode: "auto", tools: [named] } },
      },
      4096,
      "claude-opus-5-5",
    ),
    null,
  );
  assert.equal(
    claudeRefusal({ messages, response_format: { type: "json_object" } }, 4096, "claude-fable-5-1"),
    null,
  );
  const schema = { type: "json_schema", json_schema: { name: "a", schema: { type: "object" } } };
  assert.equal(
    claudeRefusal(
      { messages, tools, tool_choice: "auto", response_format: schema },
      4096,
      "claude-opus-5-5",
    ),
    null,
  );
});

Deno.test("every Claude route of a model is held to its own rules: a fallback to a newer model refuses what it cannot take", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [{ role: "user", content: "x" }],
    temperature: 0.3,
  });
  assert.throws(
    () =>
      assertSupported(
        request,
        [route("anthropic", "claude-sonnet-4-5"), route("anthropic", "claude-opus-4-7")],
        4096,
      ),
    (e) =>
      e instanceof ApiError && e.param === "temperature" &&
      e.message.includes("with this model's fallback claude-opus-4-7."),
  );
  // Refusals worded for Claude at large name the fallback too.
  const budgetRoutes = [
    route("anthropic", "claude-opus-4-7"),
    route("anthropic", "claude-sonnet-4-5"),
  ];
  const thinking = {
    model: "m/x",
    messages: [{ role: "user", content: "x" }],
    reasoning_effort: "high",
  };
  assert.throws(
    () => assertSupported(parseChatRequest(thinking), budgetRoutes, 1000),
    (e) =>
      e instanceof ApiError && e.param === "reasoning_effort" &&
      e.message.includes("(this model's fallback claude-sonnet-4-5)"),
  );
});

Deno.test("Claude 4.6 on refuse a conversation that ends with an assistant message (a prefill to Claude)", () => {
  const prefill = [{ role: "user", content: "Name a colour." }, {
    role: "assistant",
    content: "The colour is",
  }];
  for (const model of ["claude-opus-4-6", "claude-opus-4-7", "claude-sonnet-5"]) {
    assert.deepEqual(claudeRefusal({ messages: prefill }, 4096, model), {
      code: "unsupported_parameter",
      param: "messages[1]",
      message:
        "Unsupported value for 'messages[1]': the conversation ends with an assistant message, which Claude would take as the start of its answer (a prefill), and this model takes none. End with a user or tool message.",
    }, model);
  }
  assert.equal(claudeRefusal({ messages: prefill }, 4096, "claude-sonnet-4-5"), null);
  // Blank messages are not sent: what counts is the last one that is.
  const blankTail = [...prefill, { role: "user", content: " " }];
  assert.equal(
    claudeRefusal({ messages: blankTail }, 4096, "claude-opus-4-7")?.param,
    "messages[1]",
  );
  const answered = [...prefill, { role: "user", content: "Go on." }, {
    role: "assistant",
    content: "",
  }];
  assert.equal(claudeRefusal({ messages: answered }, 4096, "claude-opus-4-7"), null);
});

Deno.test("a Claude stated to think that takes sampling parameters takes those thinking allows", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [{ role: "user", content: "x" }],
    temperature: 0.3,
  });
  const alias = {
    provider: { kind: "anthropic" as const },
    upstreamModel: "our-claude",
    claude: {
      thinking: "always" as const,
      sampling: true,
      forcedToolChoice: true,
      prefill: false,
      imageLongEdge: 1568,
      strictTools: false,
    },
  };
  assert.throws(
    () => assertSupported(request, [alias], 4096),
    (e) =>
      e instanceof ApiError && e.message ===
        "Unsupported value for 'temperature': Claude models accept only 1 while Claude thinks.",
  );
});

Deno.test("GPT-5.6's prompt-cache fields are taken and held to their values", () => {
  const base = { model: "m/x" };
  const parsed = parseChatRequest({
    ...base,
    messages: [{
      role: "user",
      content: [
        { type: "text", text: "x", prompt_cache_breakpoint: { mode: "explicit", ttl: "30m" } },
      ],
    }],
    prompt_cache_options: { mode: "implicit" },
    prompt_cache_retention: "in_memory",
    reasoning_effort: "max",
  });
  assert.equal(parsed.params.prompt_cache_retention, "in_memory");
  const bad = (body: Record<string, unknown>) => refusal({ ...base, ...body }).param;
  const messages = [{ role: "user", content: "x" }];
  assert.equal(
    bad({ messages, prompt_cache_options: { mode: "always" } }),
    "prompt_cache_options.mode",
  );
  assert.equal(bad({ messages, prompt_cache_options: { ttl: "1h" } }), "prompt_cache_options.ttl");
  assert.equal(bad({ messages, prompt_cache_retention: "forever" }), "prompt_cache_retention");
  assert.equal(
    bad({
      messages: [{
        role: "user",
        content: [{ type: "text", text: "x", prompt_cache_breakpoint: { mode: "implicit" } }],
      }],
    }),
    "messages[0].content[0].prompt_cache_breakpoint.mode",
  );
});

Deno.test("a prefill beside an output format is refused, even on a route stated to take prefills", () => {
  const alias = {
    provider: { kind: "anthropic" as const },
    upstreamModel: "our-claude",
    claude: {
      thinking: "budget" as const,
      sampling: true,
      forcedToolChoice: false,
      prefill: true,
      imageLongEdge: 1568,
      strictTools: false,
    },
  };
  const body = {
    model: "m/x",
    messages: [{ role: "user", content: "x" }, { role: "assistant", content: "{" }],
  };
  const strict = {
    type: "json_schema",
    json_schema: { name: "a", strict: true, schema: { type: "object" } },
  };
  assert.throws(
    () => assertSupported(parseChatRequest({ ...body, response_format: strict }), [alias], 4096),
    (e) => e instanceof ApiError && e.param === "messages[1]",
  );
  // Without one, the stated rule stands.
  assertSupported(parseChatRequest(body), [alias], 4096);
});

Deno.test("a tool message takes text and image parts, its images checked as a user's are", () => {
  const answered = (content: unknown) => ({
    messages: [
      { role: "user", content: "look" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "shot", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content },
    ],
  });
  const screenshot = [
    { type: "text", text: "the screen:" },
    { type: "image_url", image_url: { url: "https://example.com/s.png", detail: "low" } },
  ];
  const request = parseChatRequest({ model: "m/x", ...answered(screenshot) });
  assert.deepEqual(request.messages.at(-1)?.content, screenshot);
  const audio = refusal(
    answered([{ type: "input_audio", input_audio: { data: "", format: "wav" } }]),
  );
  assert.equal(audio.param, "messages[2].content[0].type");
  assert.match(audio.message, /must be a part of type text, image_url or file/);
  const http = refusal(answered([{ type: "image_url", image_url: { url: "http://x/s.png" } }]));
  assert.equal(http.param, "messages[2].content[0].image_url.url");
  const unreadable = refusal(
    answered([{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }]),
  );
  assert.equal(unreadable.param, "messages[2].content[0].image_url.url");
});

/** A PDF's first and last bytes: what the checks before the call look at. */
const PDF = `data:application/pdf;base64,${btoa("%PDF-1.4\n%%EOF\n")}`;

const withFile = (file: Record<string, unknown>) => ({
  messages: [{
    role: "user",
    content: [{ type: "text", text: "Summarise it." }, { type: "file", file }],
  }],
});

Deno.test("a file part is a PDF's bytes, taken on Anthropic and Responses routes and refused on OpenAI's chat API", () => {
  const request = parseChatRequest({ model: "m/x", ...withFile({ file_data: PDF }) });
  assert.doesNotThrow(() => assertSupported(request, [route("anthropic")], 1024));
  assert.doesNotThrow(() =>
    assertSupported(request, [route("openai_responses", "gpt-4.1-mini")], 1024)
  );
  assert.throws(
    () => assertSupported(request, [route("openai", "gpt-4.1-mini")], 1024),
    (e) =>
      e instanceof ApiError && e.code === "unsupported_parameter" &&
      e.param === "messages[0].content[1].type" && /OpenAI's chat API/.test(e.message),
  );
  // A fallback that cannot count it refuses it too, naming the kind.
  assert.throws(
    () => assertSupported(request, [route("anthropic"), route("openai", "gpt-4.1")], 1024),
    (e) => e instanceof ApiError && e.param === "messages[0].content[1].type",
  );
});

Deno.test("a file part by id, without its bytes, or not a PDF is refused with its path", () => {
  refused(
    withFile({ file_id: "file-abc" }),
    "unsupported_parameter",
    "messages[0].content[1].file.file_id",
  );
  refused(
    withFile({ filename: "a.pdf" }),
    "missing_parameter",
    "messages[0].content[1].file.file_data",
  );
  refused(
    withFile({ file_data: `data:application/pdf;base64,${btoa("<html></html>")}` }),
    "invalid_parameter",
    "messages[0].content[1].file.file_data",
  );
  // Base64 that does not decode: a length one past a multiple of four, or padding that is off.
  for (const base64 of ["JVBERi0xA", "JVBERi0==", "JVBERi0xL="]) {
    refused(
      withFile({ file_data: `data:application/pdf;base64,${base64}` }),
      "invalid_parameter",
      "messages[0].content[1].file.file_data",
    );
  }
  for (const base64 of ["JVBERi0xLg", "JVBERi0xLjQ", "JVBERi0xLg==", "JVBERi0xLjQ="]) {
    assert.doesNotThrow(() => atob(base64));
    assert.doesNotThrow(() =>
      parseChatRequest({
        model: "m/x",
        ...withFile({ file_data: `data:application/pdf;base64,${base64}` }),
      })
    );
  }
  refused(
    withFile({ file_data: `data:text/plain;base64,${btoa("%PDF-1.4")}` }),
    "invalid_parameter",
    "messages[0].content[1].file.file_data",
  );
  refused(
    withFile({ file_data: PDF, pages: 3 }),
    "invalid_parameter",
    "messages[0].content[1].file.pages",
  );
});

Deno.test("a tool message's PDF is checked and served as a user's is", () => {
  const answered = (file: Record<string, unknown>) => ({
    model: "m/x",
    messages: [
      { role: "user", content: "Read the attachment." },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "fetch", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: [{ type: "file", file }] },
    ],
  });
  const request = parseChatRequest(answered({ file_data: PDF }));
  assert.doesNotThrow(() => assertSupported(request, [route("anthropic")], 1024));
  assert.throws(
    () => assertSupported(request, [route("openai", "gpt-4.1-mini")], 1024),
    (e) => e instanceof ApiError && e.param === "messages[2].content[0].type",
  );
  refused(
    answered({ file_id: "file-abc" }),
    "unsupported_parameter",
    "messages[2].content[0].file.file_id",
  );
});

Deno.test("an image_url with detail null is taken at the default detail and sent on without it", () => {
  const request = parseChatRequest({
    model: "m/x",
    messages: [{
      role: "user",
      content: [{ type: "image_url", image_url: { url: PNG_1x1, detail: null } }],
    }],
  });
  const [part] = request.messages[0].content as { image_url: { detail?: string } }[];
  assert.equal(part.image_url.detail, undefined);
  assert.equal(JSON.stringify(part.image_url), JSON.stringify({ url: PNG_1x1 }));
  refused(
    {
      messages: [{
        role: "user",
        content: [{ type: "image_url", image_url: { url: PNG_1x1, detail: "max" } }],
      }],
    },
    "invalid_parameter",
    "messages[0].content[0].image_url.detail",
  );
});

/** A Claude request with breakpoints on a tool, the system prompt and the user's text. */
function withBreakpoints(ttls: { tool?: string; system?: string; user?: string }) {
  const mark = (ttl?: string) =>
    ttl === undefined ? {} : { cache_control: { type: "ephemeral", ...(ttl ? { ttl } : {}) } };
  return parseChatRequest({
    model: "m/x",
    messages: [
      { role: "user", content: [{ type: "text", text: "Hi", ...mark(ttls.user) }] },
      { role: "system", content: [{ type: "text", text: "Be brief.", ...mark(ttls.system) }] },
    ],
    tools: [{ type: "function", function: { name: "look" }, ...mark(ttls.tool) }],
  });
}

Deno.test("a cache breakpoint may be kept for 5 minutes or an hour; another ttl is refused", () => {
  const request = withBreakpoints({ tool: "1h", system: "5m", user: "" });
  assert.equal(request.params.tools?.[0].cache_control?.ttl, "1h");
  assertSupported(request, [route("anthropic")], 1024);
  refused(
    {
      messages: [{
        role: "user",
        content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral", ttl: "2h" } }],
      }],
    },
    "invalid_parameter",
    "messages[0].content[0].cache_control.ttl",
  );
});

Deno.test("a 1-hour breakpoint after a 5-minute one, in the order Claude reads tools, system and messages, is refused before the call", () => {
  const late = (ttls: Parameters<typeof withBreakpoints>[0], param: string) =>
    assert.throws(
      () => assertSupported(withBreakpoints(ttls), [route("anthropic")], 1024),
      (e) => e instanceof ApiError && e.code === "invalid_parameter" && e.param === param,
    );
  late({ tool: "", user: "1h" }, "messages[0].content[0].cache_control.ttl");
  // The system message comes after the user's in the list, but Claude reads it first.
  late({ system: "5m", user: "1h" }, "messages[0].content[0].cache_control.ttl");
  late({ tool: "5m", system: "1h" }, "messages[1].content[0].cache_control.ttl");
  assertSupported(withBreakpoints({ system: "1h", user: "5m" }), [route("anthropic")], 1024);
  assertSupported(
    withBreakpoints({ tool: "1h", system: "1h", user: "1h" }),
    [route("anthropic")],
    1024,
  );
  // Other kinds send no breakpoints.
  assertSupported(withBreakpoints({ tool: "5m", user: "1h" }), [route("openai")], 1024);
});
