import assert from "node:assert/strict";
import { testModel, upstreamRequest } from "../test_support.ts";
import { messagesRequest, thinkingBudget, toolUseIds } from "./request.ts";

const claude = testModel("anthropic", "claude-sonnet-4-5");
const PNG_1x1 =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

Deno.test("a tool round trip becomes tool_use blocks and tool_result blocks in one user turn", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        { role: "developer", content: "Use the tools." },
        { role: "user", content: "Weather and time in Paris?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            {
              id: "call_a",
              type: "function",
              function: { name: "weather", arguments: '{"city":"Paris"}' },
            },
            { id: "call_b", type: "function", function: { name: "time", arguments: "{}" } },
          ],
        },
        { role: "tool", tool_call_id: "call_a", content: "sunny" },
        { role: "tool", tool_call_id: "call_b", content: [{ type: "text", text: "noon" }] },
        { role: "user", content: "Thanks. Summarise." },
      ],
      tools: [
        {
          type: "function",
          function: {
            name: "weather",
            description: "Weather of a city",
            parameters: { type: "object", properties: { city: { type: "string" } } },
          },
        },
        { type: "function", function: { name: "time" } },
      ],
      tool_choice: "required",
      parallel_tool_calls: false,
    }, 1000),
    false,
  );
  assert.deepEqual(body, {
    model: "claude-sonnet-4-5",
    max_tokens: 1000,
    system: "Use the tools.",
    messages: [
      { role: "user", content: "Weather and time in Paris?" },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "call_a", name: "weather", input: { city: "Paris" } },
          { type: "tool_use", id: "call_b", name: "time", input: {} },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "call_a", content: "sunny" },
          { type: "tool_result", tool_use_id: "call_b", content: "noon" },
          { type: "text", text: "Thanks. Summarise." },
        ],
      },
    ],
    tools: [
      {
        name: "weather",
        description: "Weather of a city",
        input_schema: { type: "object", properties: { city: { type: "string" } } },
      },
      { name: "time", input_schema: { type: "object", properties: {} } },
    ],
    tool_choice: { type: "any", disable_parallel_tool_use: true },
  });
});

Deno.test("tool history without tools declares the tools it names, uncallable: Anthropic refuses tool blocks without tools", () => {
  const call = (id: string, name: string) => ({
    id,
    type: "function",
    function: { name, arguments: "{}" },
  });
  const history = [
    { role: "user", content: "Weather and time in Paris?" },
    { role: "assistant", content: null, tool_calls: [call("a", "weather"), call("b", "time")] },
    { role: "tool", tool_call_id: "a", content: "sunny" },
    { role: "tool", tool_call_id: "b", content: "noon" },
    { role: "assistant", content: null, tool_calls: [call("c", "weather")] },
    { role: "tool", tool_call_id: "c", content: "still sunny" },
    { role: "user", content: "Summarise." },
  ];
  const declared = [
    { name: "weather", input_schema: { type: "object" } },
    { name: "time", input_schema: { type: "object" } },
  ];
  const plain = messagesRequest(upstreamRequest(claude, { messages: history }), false);
  assert.deepEqual(plain.tools, declared);
  assert.deepEqual(plain.tool_choice, { type: "none" });
  const emptyTools = messagesRequest(
    upstreamRequest(claude, { messages: history, tools: [] }),
    false,
  );
  assert.deepEqual(emptyTools.tools, declared);
  // The answer tool is forced alone, under a name none of the declared ones has.
  const structured = messagesRequest(
    upstreamRequest(claude, {
      messages: history,
      response_format: {
        type: "json_schema",
        json_schema: { name: "weather", schema: { type: "object" } },
      },
    }),
    false,
  );
  assert.deepEqual((structured.tools as { name: string }[]).map((t) => t.name), [
    "weather",
    "time",
    "weather_response",
  ]);
  assert.deepEqual(structured.tool_choice, { type: "tool", name: "weather_response" });
  // The client's own tools are sent as they are, with nothing declared beside them.
  const offered = messagesRequest(
    upstreamRequest(claude, {
      messages: history,
      tools: [{ type: "function", function: { name: "weather" } }],
    }),
    false,
  );
  assert.deepEqual((offered.tools as { name: string }[]).map((t) => t.name), ["weather"]);
  assert.deepEqual(offered.tool_choice, { type: "auto" });
});

Deno.test("tool call ids Anthropic refuses are sent renamed, each tool result with its call's new id: other characters become _, a repeated id takes a suffix", () => {
  const turn = (id: string, city: string) => [
    { role: "user", content: `Weather in ${city}?` },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id, type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: id, content: "sunny" },
  ];
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        ...turn("functions.w:0", "Paris"),
        ...turn("call_0", "Rome"),
        ...turn("call_0", "Oslo"),
        ...turn("functions_w_0", "Bergen"),
      ],
      tools: [{ type: "function", function: { name: "w" } }],
    }),
    false,
  );
  const blocks = (body.messages as { content: string | Record<string, unknown>[] }[])
    .flatMap((m) => typeof m.content === "string" ? [] : m.content);
  assert.deepEqual(
    blocks.filter((b) => b.type !== "text").map((b) =>
      b.type === "tool_use" ? b.id : b.tool_use_id
    ),
    [
      "functions_w_0",
      "functions_w_0",
      "call_0",
      "call_0",
      "call_0_2",
      "call_0_2",
      "functions_w_0_2",
      "functions_w_0_2",
    ],
  );
});

Deno.test("tool_choice none, auto and a named tool map to Anthropic's", () => {
  const tools = [{ type: "function", function: { name: "w" } }];
  const messages = [{ role: "user", content: "x" }];
  const choice = (tool_choice: unknown) =>
    messagesRequest(upstreamRequest(claude, { messages, tools, tool_choice }), false).tool_choice;
  assert.deepEqual(choice("none"), { type: "none" });
  assert.deepEqual(choice("auto"), { type: "auto" });
  assert.deepEqual(choice({ type: "function", function: { name: "w" } }), {
    type: "tool",
    name: "w",
  });
});

const threeTools = [
  { type: "function", function: { name: "weather" }, cache_control: { type: "ephemeral" } },
  { type: "function", function: { name: "time" } },
  { type: "function", function: { name: "news" }, cache_control: { type: "ephemeral" } },
];
const allowedTools = (mode: string, names: string[]) => ({
  type: "allowed_tools",
  allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) },
});
const allowedBody = (tool_choice: unknown, extra: Record<string, unknown> = {}) =>
  messagesRequest(
    upstreamRequest(claude, {
      messages: [{ role: "user", content: "x" }],
      tools: threeTools,
      tool_choice,
      ...extra,
    }),
    false,
  );
const sentToolNames = (body: Record<string, unknown>) =>
  (body.tools as { name: string }[]).map((t) => t.name);

Deno.test("allowed_tools requiring one tool is Claude's tool choice, every tool still sent so the cached prefix stands", () => {
  const body = allowedBody(allowedTools("required", ["time"]));
  assert.deepEqual(sentToolNames(body), ["weather", "time", "news"]);
  assert.deepEqual(body.tool_choice, { type: "tool", name: "time" });
});

Deno.test("allowed_tools that allow every tool send them all, auto or any", () => {
  const all = ["news", "weather", "time"];
  assert.deepEqual(sentToolNames(allowedBody(allowedTools("auto", all))), [
    "weather",
    "time",
    "news",
  ]);
  assert.deepEqual(allowedBody(allowedTools("auto", all)).tool_choice, { type: "auto" });
  assert.deepEqual(allowedBody(allowedTools("required", all)).tool_choice, { type: "any" });
});

Deno.test("allowed_tools otherwise send Claude only the allowed tools, a dropped tool's cache breakpoint on the last tool sent before it", () => {
  const some = allowedBody(allowedTools("required", ["weather", "time"]));
  assert.deepEqual(some.tools, [
    {
      name: "weather",
      input_schema: { type: "object", properties: {} },
      cache_control: { type: "ephemeral" },
    },
    // news's breakpoint: the prefix it ended, less news.
    {
      name: "time",
      input_schema: { type: "object", properties: {} },
      cache_control: { type: "ephemeral" },
    },
  ]);
  assert.deepEqual(some.tool_choice, { type: "any" });
  const one = allowedBody(allowedTools("auto", ["time"]), { parallel_tool_calls: false });
  // weather's breakpoint has no tool sent before it; news's moves to time.
  assert.deepEqual(one.tools, [
    {
      name: "time",
      input_schema: { type: "object", properties: {} },
      cache_control: { type: "ephemeral" },
    },
  ]);
  assert.deepEqual(one.tool_choice, { type: "auto", disable_parallel_tool_use: true });
});

Deno.test("with a thinking budget, allowed_tools that must be called run the turn without thinking, those it may do without keep it", () => {
  const forced = allowedBody(allowedTools("required", ["time"]), { reasoning_effort: "low" });
  assert.equal(forced.thinking, undefined);
  assert.deepEqual(forced.tool_choice, { type: "tool", name: "time" });
  const free = allowedBody(allowedTools("auto", ["time"]), { reasoning_effort: "low" });
  assert.equal((free.thinking as { type: string }).type, "enabled");
  assert.deepEqual(free.tool_choice, { type: "auto" });
});

Deno.test("allowed_tools beside a response format: the answer tool is offered with the allowed tools", () => {
  const body = allowedBody(allowedTools("auto", ["news"]), {
    response_format: { type: "json_object" },
  });
  assert.deepEqual(sentToolNames(body).slice(0, 1), ["news"]);
  assert.equal(sentToolNames(body).length, 2);
  assert.deepEqual(body.tool_choice, { type: "any" });
  const forced = allowedBody(allowedTools("required", ["news"]), {
    response_format: { type: "json_object" },
  });
  assert.deepEqual(forced.tool_choice, { type: "tool", name: "news" });
});

Deno.test("a tool message's name is not sent to Claude: a tool_result has no such field", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c1", content: "sunny", name: "w" },
      ],
      tools: [{ type: "function", function: { name: "w" } }],
    }),
    false,
  );
  assert.deepEqual((body.messages as unknown[])[2], {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: "c1", content: "sunny" }],
  });
});

Deno.test("images become image blocks: base64 from data URLs, url sources from https, a cache_control kept", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "Compare", cache_control: { type: "ephemeral" } },
          { type: "image_url", image_url: { url: PNG_1x1, detail: "high" } },
          {
            type: "image_url",
            image_url: { url: "https://example.com/cat.jpg" },
            cache_control: { type: "ephemeral", ttl: "1h" },
          },
        ],
      }],
    }),
    false,
  );
  assert.deepEqual((body.messages as { content: unknown }[])[0].content, [
    { type: "text", text: "Compare", cache_control: { type: "ephemeral" } },
    {
      type: "image",
      source: { type: "base64", media_type: "image/png", data: PNG_1x1.split(",")[1] },
    },
    {
      type: "image",
      source: { type: "url", url: "https://example.com/cat.jpg" },
      cache_control: { type: "ephemeral", ttl: "1h" },
    },
  ]);
});

Deno.test("an image labelled another image type (a PNG as image/jpeg) is sent to Claude as the type its bytes are", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{
        role: "user",
        content: [{
          type: "image_url",
          image_url: { url: PNG_1x1.replace("image/png", "image/jpeg") },
        }],
      }],
    }),
    false,
  );
  const [image] = (body.messages as { content: { source: Record<string, unknown> }[] }[])[0]
    .content;
  assert.deepEqual(image.source, {
    type: "base64",
    media_type: "image/png",
    data: PNG_1x1.split(",")[1],
  });
});

Deno.test("a PDF becomes a document block from its bytes, its file name as the block's title, its cache_control kept", () => {
  const pdf = btoa("%PDF-1.4\n%%EOF\n");
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{
        role: "user",
        content: [
          { type: "file", file: { file_data: `data:application/pdf;base64,${pdf}` } },
          {
            type: "file",
            file: { file_data: `data:application/pdf;base64,${pdf}`, filename: "q3.pdf" },
            cache_control: { type: "ephemeral" },
            prompt_cache_breakpoint: { mode: "explicit" },
          },
          { type: "text", text: "Compare the two reports." },
        ],
      }],
    }),
    false,
  );
  const source = { type: "base64", media_type: "application/pdf", data: pdf };
  assert.deepEqual((body.messages as { content: unknown }[])[0].content, [
    { type: "document", source },
    { type: "document", source, title: "q3.pdf", cache_control: { type: "ephemeral" } },
    { type: "text", text: "Compare the two reports." },
  ]);
});

Deno.test("a tool's PDF becomes a document block inside its tool_result", () => {
  const pdf = btoa("%PDF-1.4\n%%EOF\n");
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        { role: "user", content: "Read the attachment." },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "c1",
            type: "function",
            function: { name: "fetch", arguments: "{}" },
          }],
        },
        {
          role: "tool",
          tool_call_id: "c1",
          content: [{ type: "file", file: { file_data: `data:application/pdf;base64,${pdf}` } }],
        },
      ],
    }),
    false,
  );
  assert.deepEqual((body.messages as { content: unknown }[])[2].content, [{
    type: "tool_result",
    tool_use_id: "c1",
    content: [{
      type: "document",
      source: { type: "base64", media_type: "application/pdf", data: pdf },
    }],
  }]);
});

Deno.test("json_schema becomes a forced tool whose input is the answer", () => {
  const schema = { type: "object", properties: { name: { type: "string" } }, required: ["name"] };
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{ role: "user", content: "Who?" }],
      response_format: {
        type: "json_schema",
        json_schema: { name: "person", schema, strict: true },
      },
    }),
    false,
  );
  assert.deepEqual(body.tools, [{
    name: "person",
    description: "Answer with this tool: its input is the response, in the requested format.",
    input_schema: schema,
  }]);
  assert.deepEqual(body.tool_choice, { type: "tool", name: "person" });
});

Deno.test("reasoning_effort becomes extended thinking with a budget that leaves the answer a share of the cap", () => {
  const messages = [{ role: "user", content: "Think." }];
  const think = (effort: string, cap: number) =>
    messagesRequest(upstreamRequest(claude, { messages, reasoning_effort: effort }, cap), false)
      .thinking;
  assert.deepEqual(think("low", 16000), { type: "enabled", budget_tokens: 2048 });
  // 80% of the cap, under high's 24,576.
  assert.deepEqual(think("high", 16000), { type: "enabled", budget_tokens: 12800 });
  // The default cap: half of it would be under Anthropic's least, which it gets.
  assert.deepEqual(think("medium", 2048), { type: "enabled", budget_tokens: 1024 });
  assert.equal(think("none", 16000), undefined);
});

Deno.test("a turn that answers tool calls runs without a thinking budget when its signed thinking block does not come back", () => {
  const request = upstreamRequest(claude, {
    messages: [
      { role: "user", content: "x" },
      {
        role: "assistant",
        tool_calls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c", content: "y" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
    reasoning_effort: "high",
  }, 8000);
  assert.equal(thinkingBudget(request.request, 8000, claude.claude!, claude.upstreamModel), null);
});

Deno.test("a turn that answers tool calls and then says more runs without thinking too: it is one user turn upstream", () => {
  const toolTurn = [
    { role: "user", content: "x" },
    {
      role: "assistant",
      tool_calls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "c", content: "y" },
  ];
  const budget = (messages: unknown[]) =>
    thinkingBudget(
      upstreamRequest(claude, {
        messages,
        tools: [{ type: "function", function: { name: "w" } }],
        reasoning_effort: "high",
      }, 8000).request,
      8000,
      claude.claude!,
      claude.upstreamModel,
    );
  assert.equal(budget([...toolTurn, { role: "user", content: "And what day is it?" }]), null);
  // Once the model has answered the tool results, a new question thinks again.
  assert.notEqual(
    budget([...toolTurn, { role: "assistant", content: "Done." }, { role: "user", content: "z" }]),
    null,
  );
});

/** A tool loop whose assistant turn carries the thinking `signer` signed, as Tollbooth answered it. */
function signedToolLoop(signer: string) {
  return [
    { role: "user", content: "Weather in Paris?" },
    {
      role: "assistant",
      content: null,
      reasoning_content: "I should look it up.",
      reasoning_details: [
        {
          type: "reasoning.text",
          text: "I should look it up.",
          signature: "EqSig1",
          format: "anthropic-claude-v1",
          id: `${signer}#0`,
          index: 0,
        },
        {
          type: "reasoning.encrypted",
          data: "EmRedacted",
          format: "anthropic-claude-v1",
          id: `${signer}#1`,
          index: 1,
        },
      ],
      tool_calls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "c", content: "sunny" },
  ];
}
const lookupTool = [{ type: "function", function: { name: "w" } }];

Deno.test("a turn that answers tool calls keeps its thinking budget when the signed thinking comes back, sent first in the assistant turn", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: signedToolLoop(claude.upstreamModel),
      tools: lookupTool,
      reasoning_effort: "high",
    }, 8000),
    false,
  );
  assert.deepEqual(body.thinking, { type: "enabled", budget_tokens: 6400 });
  const turns = body.messages as { role: string; content: { type: string }[] }[];
  assert.deepEqual(turns[1].content, [
    { type: "thinking", thinking: "I should look it up.", signature: "EqSig1" },
    { type: "redacted_thinking", data: "EmRedacted" },
    { type: "tool_use", id: "c", name: "w", input: {} },
  ]);
});

Deno.test("thinking another model signed is not sent: Claude refuses a signature not its own", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: signedToolLoop("claude-opus-4-1"),
      tools: lookupTool,
      reasoning_effort: "high",
    }, 8000),
    false,
  );
  assert.equal(body.thinking, undefined);
  const turns = body.messages as { role: string; content: { type: string }[] }[];
  assert.deepEqual(turns[1].content.map((b) => b.type), ["tool_use"]);
});

Deno.test("signed thinking is not sent to a request that does not think", () => {
  const messages = [
    ...signedToolLoop(claude.upstreamModel),
    { role: "assistant", content: "Sunny." },
    { role: "user", content: "Thanks." },
  ];
  const body = messagesRequest(upstreamRequest(claude, { messages, tools: lookupTool }), false);
  assert.equal(body.thinking, undefined);
  const turns = body.messages as { role: string; content: { type: string }[] | string }[];
  assert.ok(JSON.stringify(turns).includes("tool_use"));
  assert.ok(!JSON.stringify(turns).includes("thinking"));
});

Deno.test("signed thinking goes back to a model that thinks adaptively, in every turn it came with", () => {
  const opus = testModel("anthropic", "claude-opus-4-7");
  const messages = [
    ...signedToolLoop(opus.upstreamModel),
    { role: "assistant", content: "Sunny." },
    { role: "user", content: "And tomorrow?" },
  ];
  const body = messagesRequest(
    upstreamRequest(opus, { messages, tools: lookupTool, reasoning_effort: "low" }),
    false,
  );
  assert.deepEqual(body.thinking, { type: "adaptive", display: "summarized" });
  const turns = body.messages as { role: string; content: { type: string }[] | string }[];
  // The tool loop's assistant turn still opens with its thinking, though the answer came after.
  assert.deepEqual((turns[1].content as { type: string }[]).map((b) => b.type), [
    "thinking",
    "redacted_thinking",
    "tool_use",
  ]);
});

Deno.test("an assistant's refusal is sent as its text beside the thinking it brought back", () => {
  const messages = [
    { role: "user", content: "Do the thing." },
    {
      role: "assistant",
      content: null,
      refusal: "I can't help with that.",
      reasoning_details: signedToolLoop(claude.upstreamModel)[1].reasoning_details,
    },
    { role: "user", content: "Why not?" },
  ];
  const body = messagesRequest(
    upstreamRequest(claude, { messages, reasoning_effort: "high" }, 8000),
    false,
  );
  const turns = body.messages as { role: string; content: Record<string, unknown>[] }[];
  assert.deepEqual(turns[1].content.map((b) => b.type), ["thinking", "redacted_thinking", "text"]);
  assert.equal(turns[1].content[2].text, "I can't help with that.");
});

Deno.test("thinking blocks of assistant messages merged into one turn stay at its start", () => {
  const messages = [
    { role: "user", content: "Go." },
    { role: "assistant", content: "Let me check." },
    ...signedToolLoop(claude.upstreamModel).slice(1),
  ];
  const body = messagesRequest(
    upstreamRequest(claude, { messages, tools: lookupTool, reasoning_effort: "high" }, 8000),
    false,
  );
  const turns = body.messages as { role: string; content: { type: string }[] }[];
  assert.deepEqual(turns[1].content.map((b) => b.type), [
    "thinking",
    "redacted_thinking",
    "text",
    "tool_use",
  ]);
});

Deno.test("Anthropic's temperature is capped at 1; user becomes metadata.user_id; seed is dropped", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{ role: "user", content: "x" }],
      temperature: 1.7,
      user: "u-9",
      seed: 1,
    }),
    false,
  );
  assert.equal(body.temperature, 1);
  assert.deepEqual(body.metadata, { user_id: "u-9" });
  assert.equal("seed" in body, false);
});

const sentMessages = (body: Record<string, unknown>) =>
  messagesRequest(upstreamRequest(claude, body), false).messages;
const weatherCall = {
  id: "call_a",
  type: "function",
  function: { name: "weather", arguments: '{"city":"Paris"}' },
};
const weatherTool = {
  type: "function",
  function: { name: "weather", parameters: { type: "object", properties: {} } },
};

Deno.test("a tool whose parameters are {}, lack a type or are absent is sent with an object input_schema", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{ role: "user", content: "x" }],
      tools: [
        { type: "function", function: { name: "empty", parameters: {} } },
        {
          type: "function",
          function: { name: "untyped", parameters: { properties: { a: { type: "string" } } } },
        },
        { type: "function", function: { name: "absent" } },
      ],
    }),
    false,
  );
  assert.deepEqual((body.tools as { input_schema: unknown }[]).map((t) => t.input_schema), [
    { type: "object", properties: {} },
    { type: "object", properties: { a: { type: "string" } } },
    { type: "object", properties: {} },
  ]);
});

Deno.test("a json_schema whose schema lacks a type is sent as an object schema", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "any", schema: {} } },
    }),
    false,
  );
  assert.deepEqual((body.tools as { input_schema: unknown }[])[0].input_schema, {
    type: "object",
    properties: {},
  });
});

Deno.test("blank assistant text beside tool calls is dropped; the tool_use blocks are kept", () => {
  const messages = sentMessages({
    tools: [weatherTool],
    messages: [
      { role: "user", content: "Weather?" },
      { role: "assistant", content: "\n\n", tool_calls: [weatherCall] },
      { role: "tool", tool_call_id: "call_a", content: "sunny" },
    ],
  });
  assert.deepEqual(messages, [
    { role: "user", content: "Weather?" },
    {
      role: "assistant",
      content: [{ type: "tool_use", id: "call_a", name: "weather", input: { city: "Paris" } }],
    },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "call_a", content: "sunny" }] },
  ]);
});

Deno.test("blank text parts are not sent, in any role", () => {
  const messages = sentMessages({
    messages: [
      {
        role: "system",
        content: [{ type: "text", text: " " }, { type: "text", text: "Be brief." }],
      },
      { role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: "\t\n" }] },
    ],
  });
  assert.deepEqual(messages, [{ role: "user", content: "Hi" }]);
});

Deno.test("an assistant message with nothing to send is dropped, and the user turns around it merge", () => {
  const messages = sentMessages({
    messages: [
      { role: "user", content: "q" },
      { role: "assistant", content: "" },
      { role: "user", content: "again" },
    ],
  });
  assert.deepEqual(messages, [{ role: "user", content: "q\n\nagain" }]);
});

Deno.test("a blank user message is dropped when the conversation asks something else", () => {
  const messages = sentMessages({
    messages: [
      { role: "user", content: "q" },
      { role: "assistant", content: "a" },
      { role: "user", content: "  " },
      { role: "user", content: "b" },
    ],
  });
  assert.deepEqual(messages, [
    { role: "user", content: "q" },
    { role: "assistant", content: "a" },
    { role: "user", content: "b" },
  ]);
});

Deno.test("a conversation that opens with the assistant (a greeting) is sent after a user turn of '.'", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        { role: "system", content: "Be kind." },
        { role: "assistant", content: "Hi! How can I help?" },
        { role: "user", content: "q" },
      ],
    }),
    false,
  );
  assert.equal(body.system, "Be kind.");
  assert.deepEqual(body.messages, [
    { role: "user", content: "." },
    { role: "assistant", content: "Hi! How can I help?" },
    { role: "user", content: "q" },
  ]);
  // A blank user message before the greeting is not a first turn.
  assert.deepEqual(
    sentMessages({
      messages: [
        { role: "user", content: "" },
        { role: "assistant", content: "Hi!" },
        { role: "user", content: "q" },
      ],
    }),
    [{ role: "user", content: "." }, { role: "assistant", content: "Hi!" }, {
      role: "user",
      content: "q",
    }],
  );
});

Deno.test("a final assistant message (a prefill) is sent without trailing whitespace", () => {
  assert.deepEqual(
    sentMessages({
      messages: [{ role: "user", content: "q" }, { role: "assistant", content: "The answer is " }],
    }),
    [{ role: "user", content: "q" }, { role: "assistant", content: "The answer is" }],
  );
});

Deno.test("a tool result's parts go as text and image blocks, a cache_control on one kept; a single plain text part as a string", () => {
  const resultOf = (content: unknown) => {
    const body = messagesRequest(
      upstreamRequest(claude, {
        messages: [
          { role: "user", content: "read it" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{
              id: "call_a",
              type: "function",
              function: { name: "read", arguments: "{}" },
            }],
          },
          { role: "tool", tool_call_id: "call_a", content },
        ],
        tools: [{ type: "function", function: { name: "read" } }],
      }),
      true,
    );
    const turns = body.messages as { content: { content: unknown }[] }[];
    return turns.at(-1)!.content[0].content;
  };
  assert.deepEqual(
    resultOf([
      { type: "text", text: "line one" },
      { type: "text", text: "line two", cache_control: { type: "ephemeral" } },
    ]),
    [
      { type: "text", text: "line one" },
      { type: "text", text: "line two", cache_control: { type: "ephemeral" } },
    ],
  );
  assert.equal(resultOf([{ type: "text", text: "only" }]), "only");
  assert.equal(resultOf("plain"), "plain");
  assert.deepEqual(
    resultOf([
      { type: "text", text: "the screen:" },
      { type: "image_url", image_url: { url: PNG_1x1 } },
    ]),
    [
      { type: "text", text: "the screen:" },
      {
        type: "image",
        source: { type: "base64", media_type: "image/png", data: PNG_1x1.split(",")[1] },
      },
    ],
  );
  assert.deepEqual(
    resultOf([{ type: "image_url", image_url: { url: "https://example.com/s.png" } }]),
    [{ type: "image", source: { type: "url", url: "https://example.com/s.png" } }],
  );
});

/** The thinking-related fields of the Messages request a model is sent. */
function thinkingOf(upstreamModel: string, body: Record<string, unknown>) {
  const sent = messagesRequest(upstreamRequest(testModel("anthropic", upstreamModel), body), false);
  return { thinking: sent.thinking, output_config: sent.output_config };
}

const ask = [{ role: "user", content: "x" }];

Deno.test("Opus 4.7 on thinks adaptively at the asked effort, summarized; minimal is Anthropic's low", () => {
  assert.deepEqual(thinkingOf("claude-opus-4-7", { messages: ask, reasoning_effort: "minimal" }), {
    thinking: { type: "adaptive", display: "summarized" },
    output_config: { effort: "low" },
  });
  assert.deepEqual(thinkingOf("claude-opus-4-8", { messages: ask, reasoning_effort: "xhigh" }), {
    thinking: { type: "adaptive", display: "summarized" },
    output_config: { effort: "xhigh" },
  });
  // Not asked, or asked for none: no thinking is sent, as the model thinks only on request.
  for (const body of [{ messages: ask }, { messages: ask, reasoning_effort: "none" }]) {
    assert.deepEqual(thinkingOf("claude-opus-4-7", body), {
      thinking: undefined,
      output_config: undefined,
    });
  }
});

Deno.test("a model that thinks by default is shown thinking unasked, and told not to think by none", () => {
  assert.deepEqual(thinkingOf("claude-sonnet-5", { messages: ask }), {
    thinking: { type: "adaptive", display: "summarized" },
    output_config: undefined,
  });
  assert.deepEqual(thinkingOf("claude-sonnet-5", { messages: ask, reasoning_effort: "none" }), {
    thinking: { type: "disabled" },
    output_config: undefined,
  });
  assert.deepEqual(thinkingOf("claude-fable-5", { messages: ask, reasoning_effort: "high" }), {
    thinking: { type: "adaptive", display: "summarized" },
    output_config: { effort: "high" },
  });
});

Deno.test("adaptive thinking goes on in a turn that answers tool calls", () => {
  const messages = [
    { role: "user", content: "x" },
    {
      role: "assistant",
      tool_calls: [{ id: "c", type: "function", function: { name: "w", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "c", content: "y" },
  ];
  const tools = [{ type: "function", function: { name: "w" } }];
  assert.deepEqual(
    thinkingOf("claude-opus-4-7", { messages, tools, reasoning_effort: "high" }).thinking,
    { type: "adaptive", display: "summarized" },
  );
  // A budget is still not sent there.
  assert.equal(
    thinkingOf("claude-sonnet-4-5", { messages, tools, reasoning_effort: "high" }).thinking,
    undefined,
  );
});

Deno.test("sampling parameters at their defaults are left out for models that take none", () => {
  const sent = messagesRequest(
    upstreamRequest(testModel("anthropic", "claude-opus-4-7"), {
      messages: ask,
      temperature: 1.5,
      top_p: 1,
    }),
    false,
  );
  assert.equal("temperature" in sent || "top_p" in sent || "top_k" in sent, false);
});

Deno.test("a strict json_schema goes as output_config.format where the model cannot be forced to call a tool", () => {
  const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"] };
  const up = upstreamRequest(testModel("anthropic", "claude-opus-5-5"), {
    messages: ask,
    tools: [{ type: "function", function: { name: "w" } }],
    response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
    reasoning_effort: "medium",
  });
  const sent = messagesRequest(up, false);
  assert.deepEqual(sent.output_config, {
    effort: "medium",
    // An object the client left open goes closed, as output formats take it.
    format: { type: "json_schema", schema: { ...schema, additionalProperties: false } },
  });
  assert.deepEqual((sent.tools as { name: string }[]).map((t) => t.name), ["w"]);
  assert.deepEqual(sent.tool_choice, { type: "auto" });
  // A model that can be forced keeps the answer tool.
  const forced = messagesRequest(
    { ...up, model: testModel("anthropic", "claude-sonnet-5") },
    false,
  );
  assert.deepEqual(forced.output_config, { effort: "medium" });
  assert.deepEqual((forced.tools as { name: string }[]).map((t) => t.name), ["w", "answer"]);
  assert.deepEqual(forced.tool_choice, { type: "any" });
});

Deno.test("tool_choice none with a response format forces the answer tool: the client's tools stay uncalled, the format holds", () => {
  const tools = [{ type: "function", function: { name: "w" } }];
  for (
    const response_format of [
      { type: "json_object" },
      { type: "json_schema", json_schema: { name: "report", schema: { type: "object" } } },
    ]
  ) {
    const sent = messagesRequest(
      upstreamRequest(claude, { messages: ask, tools, tool_choice: "none", response_format }),
      false,
    );
    const name = response_format.type === "json_object" ? "json_response" : "report";
    assert.deepEqual((sent.tools as { name: string }[]).map((t) => t.name), ["w", name]);
    assert.deepEqual(sent.tool_choice, { type: "tool", name });
  }
  // Where no tool can be forced (a thinking budget), none stays none: no client tool is called.
  const thinking = messagesRequest(
    upstreamRequest(claude, {
      messages: ask,
      tools,
      tool_choice: "none",
      response_format: { type: "json_object" },
      reasoning_effort: "low",
    }),
    false,
  );
  assert.deepEqual(thinking.tool_choice, { type: "none" });
});

Deno.test("json_object and a schema not strict keep the answer tool where no tool can be forced, offered unforced", () => {
  const formats = [
    { type: "json_object" },
    { type: "json_schema", json_schema: { name: "a", schema: { type: "object" } } },
    { type: "json_schema", json_schema: { name: "a", strict: true } },
  ];
  for (const response_format of formats) {
    const sent = messagesRequest(
      upstreamRequest(testModel("anthropic", "claude-fable-5-1"), {
        messages: ask,
        response_format,
      }),
      false,
    );
    assert.equal((sent.tools as { name: string }[]).length, 1, JSON.stringify(response_format));
    assert.deepEqual(sent.tool_choice, { type: "auto" });
    assert.equal(sent.output_config, undefined);
  }
});

Deno.test("OpenAI's prompt-cache fields are not sent to Claude (cache_control marks its breakpoints)", () => {
  const sent = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        {
          role: "system",
          content: [{
            type: "text",
            text: "Rules.",
            prompt_cache_breakpoint: { mode: "explicit" },
          }],
        },
        { role: "user", content: "Hi" },
      ],
      prompt_cache_options: { mode: "explicit" },
      prompt_cache_retention: "in_memory",
    }),
    false,
  );
  assert.equal(sent.system, "Rules.");
  assert.equal("prompt_cache_options" in sent || "prompt_cache_retention" in sent, false);
});

Deno.test("reasoning_effort max is Anthropic's max effort, or a budget of 95% of the cap", () => {
  assert.deepEqual(thinkingOf("claude-opus-4-8", { messages: ask, reasoning_effort: "max" }), {
    thinking: { type: "adaptive", display: "summarized" },
    output_config: { effort: "max" },
  });
  const budget = messagesRequest(
    upstreamRequest(claude, { messages: ask, reasoning_effort: "max" }, 64_000),
    false,
  ).thinking;
  assert.deepEqual(budget, { type: "enabled", budget_tokens: 60_800 });
});

Deno.test("a recursive strict schema keeps the answer tool, unforced, where no tool can be forced: no output format takes it", () => {
  const tree = {
    type: "object",
    properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#" } } },
    required: ["name", "children"],
    additionalProperties: false,
  };
  const sent = messagesRequest(
    upstreamRequest(testModel("anthropic", "claude-opus-5-5"), {
      messages: ask,
      response_format: {
        type: "json_schema",
        json_schema: { name: "tree", schema: tree, strict: true },
      },
    }),
    false,
  );
  assert.equal(sent.output_config, undefined);
  assert.deepEqual((sent.tools as { name: string }[]).map((t) => t.name), ["tree"]);
  assert.deepEqual(sent.tool_choice, { type: "auto" });
});

Deno.test("thousands of tool call ids that all rename to one base each take the next free suffix", () => {
  const calls = Array.from({ length: 5_000 }, (_, i) => ({
    id: String.fromCodePoint(0x4e00 + i),
    type: "function" as const,
    function: { name: "f", arguments: "{}" },
  }));
  const [, sent] = toolUseIds([
    { role: "user", content: "go" },
    { role: "assistant", content: null, tool_calls: calls },
  ]);
  assert.equal(new Set(sent).size, 5_000);
  assert.deepEqual(sent.slice(0, 3), ["_", "__2", "__3"]);
  assert.equal(sent.at(-1), "__5000");
});

Deno.test("a called function's name Anthropic refuses (another server's weather.get) is sent as one it takes, in the call and in the tools the history declares", () => {
  const body = messagesRequest(
    upstreamRequest(claude, {
      messages: [
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "c1",
            type: "function",
            function: { name: "weather.get", arguments: "{}" },
          }],
        },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
        { role: "user", content: "Summarise." },
      ],
    }),
    false,
  );
  assert.deepEqual(body.tools, [{ name: "weather_get", input_schema: { type: "object" } }]);
  const blocks = (body.messages as { content: string | Record<string, unknown>[] }[])
    .flatMap((m) => typeof m.content === "string" ? [] : m.content);
  assert.equal(blocks.find((b) => b.type === "tool_use")?.name, "weather_get");
});

Deno.test("a strict tool goes strict to a Claude that takes structured outputs, its schema in their subset; unstrict to an earlier Claude, or where its schema refers to itself", () => {
  // As zod writes a strict function's parameters: closed, with a minimum on every integer.
  const parameters = {
    type: "object",
    properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } },
    required: ["city", "days"],
    additionalProperties: false,
  };
  const recursive = {
    type: "object",
    properties: { children: { type: "array", items: { $ref: "#" } } },
    required: ["children"],
    additionalProperties: false,
  };
  const tools = [
    { type: "function", function: { name: "forecast", parameters, strict: true } },
    { type: "function", function: { name: "loose", parameters } },
    { type: "function", function: { name: "tree", parameters: recursive, strict: true } },
  ];
  const sent = (model: string) =>
    messagesRequest(upstreamRequest(testModel("anthropic", model), { messages: ask, tools }), false)
      .tools;
  for (const model of ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-5-5"]) {
    assert.deepEqual(sent(model), [
      {
        name: "forecast",
        input_schema: {
          type: "object",
          properties: {
            city: { type: "string" },
            days: { type: "integer", description: "(minimum: 1)" },
          },
          additionalProperties: false,
          required: ["city", "days"],
        },
        strict: true,
      },
      { name: "loose", input_schema: parameters },
      { name: "tree", input_schema: recursive },
    ], model);
  }
  for (const model of ["claude-sonnet-4-20250514", "claude-opus-4-1", "my-claude-deployment"]) {
    assert.deepEqual(sent(model), [
      { name: "forecast", input_schema: parameters },
      { name: "loose", input_schema: parameters },
      { name: "tree", input_schema: recursive },
    ], model);
  }
});

Deno.test("past Anthropic's limits on a request's strict schemas (20 tools, 24 optional parameters, 16 unions), no tool goes strict, each with the schema the client gave", () => {
  // As OpenAI's strict mode writes an optional field: required, its type a union with null.
  const nullable = (n: number) => ({
    type: "object",
    properties: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`f${i}`, { type: ["string", "null"] }]),
    ),
    required: Array.from({ length: n }, (_, i) => `f${i}`),
    additionalProperties: false,
  });
  const optional = (n: number) => ({
    type: "object",
    properties: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`f${i}`, { type: "string" }]),
    ),
    additionalProperties: false,
  });
  const sent = (schemas: Record<string, unknown>[]) =>
    messagesRequest(
      upstreamRequest(testModel("anthropic", "claude-sonnet-4-5"), {
        messages: ask,
        tools: schemas.map((parameters, i) => ({
          type: "function",
          function: { name: `t${i}`, parameters, strict: true },
        })),
      }),
      false,
    ).tools as { strict?: boolean; input_schema: unknown }[];
  const strictCount = (schemas: Record<string, unknown>[]) =>
    sent(schemas).filter((t) => t.strict).length;
  assert.equal(strictCount(Array.from({ length: 20 }, () => nullable(0))), 20);
  assert.equal(strictCount(Array.from({ length: 21 }, () => nullable(0))), 0);
  assert.equal(strictCount([nullable(8), nullable(8)]), 2);
  assert.equal(strictCount([nullable(8), nullable(9)]), 0);
  assert.equal(strictCount([optional(12), optional(12)]), 2);
  assert.equal(strictCount([optional(12), optional(13)]), 0);
  const over = [nullable(10), nullable(10)];
  assert.deepEqual(sent(over).map((t) => t.input_schema), over);
});
