import assert from "node:assert/strict";
import { testModel, upstreamRequest } from "../test_support.ts";
import {
  isReasoningModel,
  openAiRequestBody,
  outputCapParam,
  runsProjectTier,
  TOOL_IMAGES_NOTE,
  toolImagesLabel,
} from "./request.ts";

const TOOL_ROUND_TRIP = {
  messages: [
    { role: "developer", content: "Use tools." },
    {
      role: "user",
      content: [{ type: "text", text: "Weather?", cache_control: { type: "ephemeral" } }],
    },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
  ],
  tools: [{ type: "function", function: { name: "w", parameters: { type: "object" } } }],
  tool_choice: "auto",
  parallel_tool_calls: false,
  response_format: { type: "json_object" },
  temperature: 0.2,
  seed: 3,
  logprobs: true,
  top_logprobs: 2,
};

Deno.test("the OpenAI body is the client's, with only model, the cap and include_usage ours", () => {
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-4.1-mini"), TOOL_ROUND_TRIP, 500),
    true,
  );
  assert.deepEqual(body, {
    model: "gpt-4.1-mini",
    messages: [
      TOOL_ROUND_TRIP.messages[0],
      // Tollbooth's cache_control extension is Anthropic's: not sent to OpenAI.
      { role: "user", content: [{ type: "text", text: "Weather?" }] },
      TOOL_ROUND_TRIP.messages[2],
      TOOL_ROUND_TRIP.messages[3],
    ],
    tools: TOOL_ROUND_TRIP.tools,
    tool_choice: "auto",
    parallel_tool_calls: false,
    response_format: { type: "json_object" },
    temperature: 0.2,
    seed: 3,
    logprobs: true,
    top_logprobs: 2,
    max_tokens: 500,
    stream: true,
    stream_options: { include_usage: true },
  });
});

Deno.test("allowed_tools go as sent to a server that takes them; to one that does not, as the tools they allow and the plain choice", () => {
  const tool = (name: string) => ({ type: "function", function: { name } });
  const allowed = (mode: string, names: string[]) => ({
    type: "allowed_tools",
    allowed_tools: { mode, tools: names.map(tool) },
  });
  const body = (tool_choice: unknown, allowedTools: boolean) =>
    openAiRequestBody(
      upstreamRequest(testModel("openai", "gpt-4.1-mini"), {
        messages: [{ role: "user", content: "Time?" }],
        tools: [tool("a"), tool("b"), tool("c")],
        tool_choice,
      }),
      true,
      { allowedTools },
    );
  const names = (b: Record<string, unknown>) =>
    (b.tools as { function: { name: string } }[]).map((t) => t.function.name);
  const sent = body(allowed("auto", ["b"]), true);
  assert.deepEqual(names(sent), ["a", "b", "c"]);
  assert.deepEqual(sent.tool_choice, allowed("auto", ["b"]));
  for (
    const [choice, tools, plain] of [
      [allowed("auto", ["b", "c"]), ["b", "c"], "auto"],
      [allowed("required", ["a", "c"]), ["a", "c"], "required"],
      [allowed("required", ["b"]), ["a", "b", "c"], { type: "function", function: { name: "b" } }],
      [allowed("auto", ["a", "b", "c"]), ["a", "b", "c"], "auto"],
      ["required", ["a", "b", "c"], "required"],
    ] as const
  ) {
    const offered = body(choice, false);
    assert.deepEqual(names(offered), tools);
    assert.deepEqual(offered.tool_choice, plain);
  }
});

Deno.test("include_usage is forced on streams whatever the client asked; other stream options kept", () => {
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-4o"), {
      messages: [{ role: "user", content: "x" }],
      stream: true,
      stream_options: { include_usage: false, include_obfuscation: false },
    }),
    true,
  );
  assert.deepEqual(body.stream_options, { include_usage: true, include_obfuscation: false });
});

Deno.test("reasoning models get max_completion_tokens, by the catalog flag or OpenAI's names", () => {
  const messages = [{ role: "user", content: "x" }];
  for (const name of ["o4-mini", "o3", "gpt-5-mini", "gpt-5.6", "gpt-6", "codex-mini-latest"]) {
    const body = openAiRequestBody(
      upstreamRequest(testModel("openai", name), { messages, max_tokens: 9 }, 9),
      false,
    );
    assert.equal(body.max_completion_tokens, 9, name);
    assert.equal("max_tokens" in body, false, name);
  }
  const flagged = testModel("openai", "my-reasoner", { output_cap_param: "max_completion_tokens" });
  assert.equal(outputCapParam(flagged), "max_completion_tokens");
  const flaggedBody = openAiRequestBody(
    upstreamRequest(flagged, { messages, max_tokens: 9 }, 9),
    false,
  );
  assert.equal(flaggedBody.max_completion_tokens, 9);
  assert.equal("max_tokens" in flaggedBody, false);
});

Deno.test("other servers get max_tokens whatever field the client capped with", () => {
  // A server that ignores max_completion_tokens (Ollama) would generate past the hold.
  const messages = [{ role: "user", content: "x" }];
  const plain = testModel("openai", "llama-3.1-8b");
  assert.equal(outputCapParam(plain), "max_tokens");
  // Azure's GPT-3.5 is not a GPT-35.
  assert.equal(outputCapParam(testModel("openai", "gpt-35-turbo")), "max_tokens");
  for (const cap of [{ max_completion_tokens: 16 }, { max_tokens: 16 }]) {
    const body = openAiRequestBody(upstreamRequest(plain, { messages, ...cap }, 16), false);
    assert.equal(body.max_tokens, 16, JSON.stringify(cap));
    assert.equal("max_completion_tokens" in body, false, JSON.stringify(cap));
  }
  assert.equal(
    openAiRequestBody(upstreamRequest(plain, { messages }), false).max_tokens,
    2048,
  );
});

Deno.test("a tool_choice without tools is not sent: OpenAI refuses it, and without tools it means nothing", () => {
  const plain = testModel("openai", "gpt-4o");
  for (const tool_choice of ["auto", "none"]) {
    const body = openAiRequestBody(
      upstreamRequest(plain, { messages: [{ role: "user", content: "x" }], tool_choice }),
      false,
    );
    assert.equal("tool_choice" in body, false, tool_choice);
    assert.equal("tools" in body, false, tool_choice);
  }
});

Deno.test("an assistant's reasoning_content goes back only to a provider that wants it (DeepSeek's thinking mode)", () => {
  const thought = {
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        reasoning_content: "I should call w.",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  };
  const up = upstreamRequest(testModel("openai", "deepseek-reasoner"), thought, 500);
  const assistantOf = (body: Record<string, unknown>) =>
    (body.messages as Record<string, unknown>[])[1];
  assert.equal("reasoning_content" in assistantOf(openAiRequestBody(up, true)), false);
  assert.equal(
    assistantOf(openAiRequestBody(up, true, { forwardReasoningContent: true })).reasoning_content,
    "I should call w.",
  );
});

Deno.test("an assistant's reasoning_details go to a provider of the OpenAI kind only when it wants them back (OpenRouter)", () => {
  const up = upstreamRequest(testModel("openai", "gpt-5.6"), {
    messages: [
      { role: "user", content: "Hi" },
      {
        role: "assistant",
        content: "Hello.",
        reasoning_details: [{
          type: "reasoning.text",
          text: "Greet back.",
          signature: "EqSig",
          format: "anthropic-claude-v1",
          id: "claude-sonnet-4-5#0",
          index: 0,
        }],
      },
      { role: "user", content: "Again?" },
    ],
  });
  const assistant = (openAiRequestBody(up, true).messages as Record<string, unknown>[])[1];
  assert.deepEqual(assistant, { role: "assistant", content: "Hello." });
  const forwarded = (openAiRequestBody(up, true, { forwardReasoningDetails: true })
    .messages as Record<string, unknown>[])[1];
  assert.deepEqual(
    forwarded.reasoning_details,
    (up.request.messages[1] as { reasoning_details: unknown }).reasoning_details,
  );
});

Deno.test("models that bill reasoning their stream does not show are known by family, under a router's prefix too", () => {
  const thinks = (name: string) => isReasoningModel(testModel("openai", name));
  for (
    const name of [
      "o3",
      "o4-mini",
      "gpt-5-mini",
      "openai/o3",
      "openai/gpt-5",
      "gemini-2.5-flash",
      "google/gemini-3-pro-preview",
      "grok-4",
      "grok-3-mini",
      "x-ai/grok-4-fast",
      "deepseek-reasoner",
    ]
  ) assert.ok(thinks(name), name);
  for (const name of ["gpt-4o", "gpt-4.1-mini", "gemini-2.0-flash", "grok-3", "deepseek-chat"]) {
    assert.ok(!thinks(name), name);
  }
  // The cap goes as max_completion_tokens by OpenAI's own names only: a router takes max_tokens.
  assert.equal(outputCapParam(testModel("openai", "openai/o3")), "max_tokens");
  assert.equal(outputCapParam(testModel("openai", "o3")), "max_completion_tokens");
});

Deno.test("a tool call's extra_content (Gemini's thought signature) goes back to Gemini models only", () => {
  const signature = { google: { thought_signature: "sig==" } };
  const turn = {
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "w", arguments: "{}" },
          extra_content: signature,
        }],
      },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  };
  const callSent = (name: string) => {
    const body = openAiRequestBody(upstreamRequest(testModel("openai", name), turn, 500), true);
    return ((body.messages as { tool_calls?: Record<string, unknown>[] }[])[1].tool_calls!)[0];
  };
  for (const name of ["gemini-3-pro-preview", "google/gemini-3-flash"]) {
    assert.deepEqual(callSent(name).extra_content, signature, name);
  }
  for (const name of ["gpt-4.1-mini", "mistral-large-latest"]) {
    assert.equal("extra_content" in callSent(name), false, name);
  }
});

const CACHED = {
  messages: [
    {
      role: "system",
      content: [{
        type: "text",
        text: "Long instructions.",
        prompt_cache_breakpoint: { mode: "explicit", ttl: "12h" },
      }],
    },
    { role: "user", content: "Hi" },
  ],
  prompt_cache_options: { mode: "explicit", ttl: "30m" },
  prompt_cache_retention: "24h",
};

Deno.test("GPT-5.6's prompt caching — breakpoints on parts, prompt_cache_options, prompt_cache_retention — goes to OpenAI as sent", () => {
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-5.6"), CACHED, 500),
    false,
  );
  assert.deepEqual(body.messages, CACHED.messages);
  assert.deepEqual(body.prompt_cache_options, CACHED.prompt_cache_options);
  assert.equal(body.prompt_cache_retention, "24h");
});

Deno.test("a tool message's images go in a user message after the run of tool messages, each call's named, without cache_control", () => {
  const shot = (name: string) => ({
    type: "image_url",
    image_url: { url: `https://example.com/${name}` },
  });
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-4.1"), {
      messages: [
        { role: "user", content: "Look at both screens." },
        {
          role: "assistant",
          content: null,
          tool_calls: ["call_a", "call_b", "call_c"].map((id) => ({
            id,
            type: "function",
            function: { name: "look", arguments: "{}" },
          })),
        },
        {
          role: "tool",
          tool_call_id: "call_a",
          content: [{ type: "text", text: "left:" }, shot("a.png")],
        },
        { role: "tool", tool_call_id: "call_b", content: "no screen" },
        {
          role: "tool",
          tool_call_id: "call_c",
          // Claude's breakpoint on an image is not OpenAI's: not sent.
          content: [{ ...shot("c.png"), cache_control: { type: "ephemeral" } }, shot("d.png")],
        },
        { role: "user", content: "Which is brighter?" },
      ],
    }),
    true,
  );
  assert.deepEqual((body.messages as unknown[]).slice(2), [
    { role: "tool", tool_call_id: "call_a", content: [{ type: "text", text: "left:" }] },
    { role: "tool", tool_call_id: "call_b", content: "no screen" },
    { role: "tool", tool_call_id: "call_c", content: TOOL_IMAGES_NOTE },
    {
      role: "user",
      content: [
        { type: "text", text: toolImagesLabel("call_a") },
        shot("a.png"),
        { type: "text", text: toolImagesLabel("call_c") },
        shot("c.png"),
        shot("d.png"),
      ],
    },
    { role: "user", content: "Which is brighter?" },
  ]);
});

Deno.test("tool messages without images are sent as they came", () => {
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-4.1"), TOOL_ROUND_TRIP),
    true,
  );
  assert.deepEqual((body.messages as unknown[]).at(-1), {
    role: "tool",
    tool_call_id: "call_1",
    content: "sunny",
  });
  assert.equal((body.messages as unknown[]).length, 4);
});

Deno.test("OpenAI's own API is asked for the default tier when the client names none or auto; other servers get the client's", () => {
  const body = (tier: string | undefined, pinDefaultTier: boolean) =>
    openAiRequestBody(
      upstreamRequest(testModel("openai", "gpt-4o"), {
        messages: [{ role: "user", content: "hi" }],
        ...(tier ? { service_tier: tier } : {}),
      }),
      true,
      { pinDefaultTier },
    ).service_tier;
  assert.equal(body(undefined, true), "default");
  assert.equal(body("auto", true), "default");
  assert.equal(body("default", true), "default");
  assert.equal(body(undefined, false), undefined);
  assert.equal(body("auto", false), "auto");
  assert.equal(runsProjectTier("https://api.openai.com/v1"), true);
  assert.equal(runsProjectTier("https://api.groq.com/openai/v1"), false);
  assert.equal(runsProjectTier("http://127.0.0.1:8080/v1"), false);
});

/** A tool round trip whose tool message is named after its tool, as LangChain's tools name it. */
const NAMED_TOOL_RESULT = {
  messages: [
    { role: "user", content: "Weather?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "call_1", content: "sunny", name: "w" },
  ],
  tools: [{ type: "function", function: { name: "w" } }],
};

Deno.test("a tool message's name reaches an OpenAI-kind upstream as the client sent it", () => {
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-4.1-mini"), NAMED_TOOL_RESULT, 500),
    true,
  );
  assert.deepEqual((body.messages as unknown[])[2], NAMED_TOOL_RESULT.messages[2]);
});

Deno.test("an allowed_tools choice goes to an OpenAI-kind upstream as sent, with every tool", () => {
  const tools = [
    { type: "function", function: { name: "w" } },
    { type: "function", function: { name: "t" } },
  ];
  const tool_choice = {
    type: "allowed_tools",
    allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "t" } }] },
  };
  const body = openAiRequestBody(
    upstreamRequest(testModel("openai", "gpt-5"), {
      messages: [{ role: "user", content: "x" }],
      tools,
      tool_choice,
    }),
    true,
  );
  assert.deepEqual(body.tools, tools);
  assert.deepEqual(body.tool_choice, tool_choice);
});
