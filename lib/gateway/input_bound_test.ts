import assert from "node:assert/strict";
import { parseChatRequest } from "./chat_request.ts";
import {
  anthropicImageTokens,
  anthropicInputBound,
  extraOutputBound,
  inputBound,
  openAiImageTokens,
  openAiInputBound,
  unreadImageTokens,
} from "./input_bound.ts";
import { countPromptTokens, countTextTokens, countTokensWith } from "./tokens.ts";
import { countTokens as countCl100k } from "gpt-tokenizer/encoding/cl100k_base";
import { claudeTokenBound, claudeTokenBoundOfJson } from "./claude_tokens.ts";
import {
  messagesRequest,
  messagesTools,
  OPENING_USER_TEXT,
} from "./providers/anthropic/request.ts";
import { TOOL_IMAGES_NOTE, toolImagesLabel } from "./providers/openai/request.ts";
import { legacyClaudeTokens } from "../../tests/claude_token_reference.ts";
import { harmonyPromptTokens } from "../../tests/harmony_reference.ts";
import { responseFormatTokens, toolsTokens } from "../../tests/fakes/openai_upstream.ts";
import { testModel } from "./providers/test_support.ts";

/** A Claude route that reads images at up to 1568 px (Claude 4.6 and earlier). */
const claudeBound = (request: Parameters<typeof anthropicInputBound>[0]) =>
  anthropicInputBound(request, 1568, false);

const gpt = testModel("openai", "gpt-4o");
const request = (body: Record<string, unknown>) => parseChatRequest({ model: "p/m", ...body });
/** A conversation whose one tool call carries `args` and is answered by `result`. */
const toolCallHistory = (args: string, result: unknown = "done") =>
  request({
    messages: [
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "t", arguments: args } }],
      },
      { role: "tool", tool_call_id: "c1", content: result },
    ],
    tools: [{ type: "function", function: { name: "t" } }],
  });

Deno.test("OpenAI images follow its vision guide: 85 per image plus 170 per 512-px tile after scaling", () => {
  // The guide's worked examples.
  assert.equal(openAiImageTokens({ width: 1024, height: 1024 }, "high", gpt), 765);
  assert.equal(openAiImageTokens({ width: 2048, height: 4096 }, "high", gpt), 1105);
  assert.equal(openAiImageTokens({ width: 4096, height: 8192 }, "low", gpt), 85);
  // Unknown size: the most any image can cost (8 tiles).
  assert.equal(openAiImageTokens(null, "auto", gpt), 85 + 8 * 170);
  const mini = testModel("openai", "gpt-4o-mini", {
    image_base_tokens: 2833,
    image_tile_tokens: 5667,
  });
  assert.equal(openAiImageTokens({ width: 1024, height: 1024 }, "high", mini), 2833 + 4 * 5667);
});

Deno.test("an image on a model that may read it at its own size is held at its patches or the tiles, whichever is more, at any detail", () => {
  const unknown = testModel("openai", "gpt-5.6");
  // 169 × 169 patches at 2.46.
  assert.equal(openAiImageTokens({ width: 5400, height: 5400 }, "low", unknown), 70_261);
  assert.equal(openAiImageTokens({ width: 5400, height: 5400 }, "auto", unknown), 70_261);
  assert.equal(openAiImageTokens({ width: 512, height: 512 }, "high", unknown), 630);
  // An icon: GPT-4o's one tile (255) is more than its one patch.
  assert.equal(openAiImageTokens({ width: 32, height: 32 }, "high", unknown), 255);
  // Past the most read, or its size unknown: the most.
  assert.equal(openAiImageTokens({ width: 10_000, height: 10_000 }, "auto", unknown), 73_800);
  assert.equal(openAiImageTokens(null, "auto", unknown), 73_800);
});

Deno.test("Anthropic images cost the larger of width × height / 750 and their 28-px patches after fitting 1568 px; unknown sizes the most", () => {
  assert.equal(anthropicImageTokens({ width: 1000, height: 1000 }, 1568), 1334);
  assert.equal(
    anthropicImageTokens({ width: 3136, height: 1568 }, 1568),
    Math.ceil(1568 * 784 / 750),
  );
  assert.equal(anthropicImageTokens(null, 1568), Math.ceil(1568 * 1568 / 750));
  // Thin and small images by 28-px patches, which bill them more than their area does.
  assert.equal(anthropicImageTokens({ width: 1, height: 1568 }, 1568), 56);
  assert.equal(anthropicImageTokens({ width: 29, height: 1541 }, 1568), 2 * 56);
  assert.equal(anthropicImageTokens({ width: 1000, height: 32 }, 1568), 36 * 2);
  assert.equal(anthropicImageTokens({ width: 200, height: 200 }, 1568), 8 * 8);
});

Deno.test("a model that reads images at 2576 px (Opus 4.7 on) holds a large image at its 2576-px size, not 1568", () => {
  const wide = { width: 2576, height: 1456 };
  // 92 × 52 patches, what Opus 4.7 bills it; fitted to 1568 px it would be 1,852.
  assert.ok(anthropicImageTokens(wide, 2576) >= 92 * 52);
  assert.equal(anthropicImageTokens(wide, 1568), Math.ceil(1568 * 887 / 750));
  assert.equal(anthropicImageTokens(null, 2576), Math.ceil(2576 * 2576 / 750));
  const withImage = request({
    messages: [{
      role: "user",
      content: [{ type: "image_url", image_url: { url: "https://example.com/screen.png" } }],
    }],
  });
  const opus47 = {
    imageBaseTokens: 85,
    imageTileTokens: 170,
    imagePatches: null,
    chatTemplate: "openai" as const,
    claude: { imageLongEdge: 2576, strictTools: true },
  };
  assert.equal(
    unreadImageTokens("anthropic", withImage, opus47),
    anthropicImageTokens(null, 2576),
  );
  assert.ok(
    inputBound({ kind: "anthropic" }, withImage, opus47, "o200k") >=
      anthropicImageTokens(null, 2576),
  );
});

Deno.test("the OpenAI bound is the text count for plain chats and grows with tools, schemas and calls", () => {
  const messages = [{ role: "user", content: "Hello there" }];
  assert.equal(
    openAiInputBound(request({ messages }), gpt, "o200k"),
    countPromptTokens([{ content: "Hello there" }]),
  );
  const tools = [{
    type: "function",
    function: { name: "lookup", description: "x ".repeat(2000), parameters: { type: "object" } },
  }];
  const withTools = openAiInputBound(request({ messages, tools }), gpt, "o200k");
  assert.ok(withTools > countTextTokens("x ".repeat(2000)), `${withTools}`);
  const schema = {
    type: "object",
    properties: { answer: { type: "string", description: "y ".repeat(500) } },
  };
  const withSchema = openAiInputBound(
    request({
      messages,
      response_format: { type: "json_schema", json_schema: { name: "a", schema } },
    }),
    gpt,
    "o200k",
  );
  assert.ok(withSchema > countTextTokens("y ".repeat(500)));
  const call = openAiInputBound(
    request({
      messages: [
        ...messages,
        {
          role: "assistant",
          tool_calls: [{
            id: "c1",
            type: "function",
            function: { name: "lookup", arguments: '{"q":"' + "z ".repeat(300) + '"}' },
          }],
        },
        { role: "tool", tool_call_id: "c1", content: "w ".repeat(300) },
      ],
      tools,
    }),
    gpt,
    "o200k",
  );
  assert.ok(call > withTools + 600);
});

Deno.test("a tool's or a schema's enum is held at the cookbook's 3 tokens per value over its own, however short the values", () => {
  const messages = [{ role: "user", content: "Say ok." }];
  const plain = openAiInputBound(request({ messages }), gpt, "o200k");
  const enumOf = (values: unknown[]) => ({
    type: "object",
    properties: {
      choice: { type: "string", enum: values },
      nested: { type: "object", properties: { tag: { type: "array", items: { enum: values } } } },
    },
  });
  for (
    const values of [
      Array.from({ length: 42_000 }, () => ""),
      Array.from({ length: 5_000 }, (_, i) => String(i % 10)),
      Array.from({ length: 3_000 }, (_, i) => `option ${i}`),
    ]
  ) {
    const tools = [{ type: "function", function: { name: "pick", parameters: enumOf(values) } }];
    const held = openAiInputBound(request({ messages, tools }), gpt, "o200k") - plain;
    const billed = toolsTokens(tools);
    assert.ok(billed >= 3 * 2 * values.length, `the fake bills ${billed}`);
    assert.ok(held >= billed, `held ${held} for tools billed ${billed}`);
    const response_format = {
      type: "json_schema",
      json_schema: { name: "pick", schema: enumOf(values) },
    };
    const heldSchema = openAiInputBound(request({ messages, response_format }), gpt, "o200k") -
      plain;
    const billedSchema = responseFormatTokens(response_format);
    assert.ok(heldSchema >= billedSchema, `held ${heldSchema} for a schema billed ${billedSchema}`);
  }
});

Deno.test("the Anthropic bound counts text by the Claude bound, the tool prompt and images", () => {
  const gujarati = "ગુજરાતી ભાષા";
  const plain = claudeBound(request({ messages: [{ role: "user", content: gujarati }] }));
  assert.ok(plain >= claudeTokenBound(gujarati) + 10);
  const tools = claudeBound(request({
    messages: [{ role: "user", content: gujarati }],
    tools: [{ type: "function", function: { name: "t" } }],
  }));
  assert.ok(tools - plain >= 530, "the largest documented tool-use system prompt");
  const image = claudeBound(request({
    messages: [{
      role: "user",
      content: [{ type: "image_url", image_url: { url: "https://example.com/a.png" } }],
    }],
  }));
  assert.ok(image >= anthropicImageTokens(null, 1568));
});

Deno.test("the Anthropic bound counts the tools as sent: the answer tool's description and default schemas", () => {
  const structured = request({
    messages: [{ role: "user", content: "hi" }],
    tools: [{ type: "function", function: { name: "t" } }],
    response_format: { type: "json_object" },
  });
  const sent = messagesTools(structured);
  assert.equal(sent.length, 2, "the tool and the answer tool");
  const plain = claudeBound(request({ messages: [{ role: "user", content: "hi" }] }));
  assert.ok(claudeBound(structured) - plain >= 530 + claudeTokenBoundOfJson(sent));
});

Deno.test("the Anthropic bound counts the tools declared for a tool history sent without tools", () => {
  const history = toolCallHistory("{}");
  const bare = request({ messages: history.messages });
  const sent = messagesTools(bare);
  assert.deepEqual(sent, [{ name: "t", input_schema: { type: "object" } }]);
  const withoutHistory = claudeBound(request({ messages: [{ role: "user", content: "go" }] }));
  assert.ok(claudeBound(bare) - withoutHistory >= 530 + claudeTokenBoundOfJson(sent));
});

/** Two tools, one long; allowed_tools of the given mode over `names`. */
const allowedToolsRequest = (mode: string, names: string[]) =>
  request({
    messages: [{ role: "user", content: "hi" }],
    tools: [
      { type: "function", function: { name: "short" } },
      { type: "function", function: { name: "long", description: "z ".repeat(3000) } },
    ],
    tool_choice: {
      type: "allowed_tools",
      allowed_tools: {
        mode,
        tools: names.map((name) => ({ type: "function", function: { name } })),
      },
    },
  });

Deno.test("the Anthropic bound under allowed_tools counts the tools Claude is sent, and no more", () => {
  for (
    const [mode, names, sent] of [
      ["auto", ["short"], ["short"]],
      ["required", ["short", "long"], ["short", "long"]],
      // One tool that must be called is Claude's tool choice: every tool is sent.
      ["required", ["short"], ["short", "long"]],
    ] as const
  ) {
    const held = allowedToolsRequest(mode, [...names]);
    const tools = messagesTools(held);
    assert.deepEqual(tools.map((t) => t.name), sent);
    const plain = claudeBound(request({ messages: [{ role: "user", content: "hi" }] }));
    const bound = claudeBound(held);
    assert.ok(bound - plain >= 530 + claudeTokenBoundOfJson(tools), `${mode} ${names}`);
    // A tool left out is not held for: 3000 tokens of description.
    if (sent.length === 1) assert.ok(bound - plain < 600 + 20 + 200, `${bound - plain}`);
  }
});

Deno.test("the OpenAI bound under allowed_tools holds every tool, which are all sent, and the choice", () => {
  const all = openAiInputBound(allowedToolsRequest("auto", ["short", "long"]), gpt, "o200k");
  const one = openAiInputBound(allowedToolsRequest("auto", ["short"]), gpt, "o200k");
  assert.ok(one > countTextTokens("z ".repeat(3000)), `${one}`);
  assert.ok(all > one, "the longer choice is held too");
});

Deno.test("the Anthropic bound counts a call's arguments as sent: numbers JSON writes out in full", () => {
  // Messages takes the arguments as an object: 4 characters of `1e20` go out as 21 digits.
  const args = `{"a":[${Array(2_000).fill("1e20").join(",")}]}`;
  const sent = toolCallHistory(args);
  const history = claudeBound(sent) - claudeBound(toolCallHistory("{}"));
  const sentJson = JSON.stringify(JSON.parse(args));
  assert.equal(sentJson.length > 4 * args.length, true);
  assert.ok(history >= claudeTokenBound(sentJson) - claudeTokenBound("{}"));
});

Deno.test("a prediction adds its tokens to the output the reservation covers", () => {
  const messages = [{ role: "user", content: "Edit this" }];
  const code = "const x = 1;\n".repeat(20);
  assert.equal(
    extraOutputBound(
      request({ messages, prediction: { type: "content", content: code } }),
      "o200k",
    ),
    countTextTokens(code),
  );
  assert.equal(extraOutputBound(request({ messages }), "o200k"), 0);
});

Deno.test("text parts are bounded one by one: many tiny parts are held above what Claude bills for them sent a blank line apart", () => {
  for (const char of ["|", "a"]) {
    const parts = Array.from({ length: 3_000 }, () => ({ type: "text", text: char }));
    const req = request({ messages: [{ role: "user", content: parts }] });
    const sent = parts.map((p) => p.text).join("\n\n");
    assert.ok(
      claudeBound(req) >= legacyClaudeTokens(sent),
      `${char}: bound ${claudeBound(req)} < legacy ${legacyClaudeTokens(sent)}`,
    );
    assert.ok(openAiInputBound(req, gpt, "o200k") >= 3_000 * countTextTokens(char));
  }
});

Deno.test("the OpenAI bound counts text with the route's tokenizer: cl100k for a model that bills it, at least the UTF-8 bytes with utf8_bytes", () => {
  const text = "Пример текста на русском языке, and some English. 日本語のテキストも少し。";
  const body = request({ messages: [{ role: "user", content: text }] });
  const cl100k = openAiInputBound(body, testModel("openai", "gpt-4"), "cl100k");
  const o200k = openAiInputBound(body, gpt, "o200k");
  assert.ok(cl100k > o200k, `cl100k ${cl100k} over o200k ${o200k} on this text`);
  assert.ok(cl100k >= countCl100k(text) + 4 + 3, "the cl100k count plus OpenAI's framing");
  // Neither encoding bounds the other: a catalog's cl100k counts the larger, whichever route bills.
  for (const sample of ["HTTPServerError", "I".repeat(22)]) {
    const one = request({ messages: [{ role: "user", content: sample }] });
    assert.ok(
      openAiInputBound(one, gpt, "cl100k") >=
        Math.max(openAiInputBound(one, gpt, "o200k"), countCl100k(sample) + 4 + 3),
      sample,
    );
  }
  const llama = testModel("openai", "llama-3.1-8b-instant", { tokenizer: "utf8_bytes" });
  assert.equal(llama.chatTemplate, "open");
  const bytes = openAiInputBound(body, llama, "utf8_bytes");
  // The text's bytes, and the allowance for an open model's chat template (Llama 3.1: ~35 for one "hi").
  assert.ok(bytes >= new TextEncoder().encode(text).length + 64 + 8);
  const hi = openAiInputBound(
    request({ messages: [{ role: "user", content: "hi" }] }),
    llama,
    "utf8_bytes",
  );
  assert.ok(hi >= 35, `one "hi" to an open model: ${hi}`);
  assert.ok(bytes > cl100k);
});

Deno.test("an open model's tools are held at no less than the bytes Llama 3.1's template writes them in, each indented four spaces a level", () => {
  const llama = testModel("openai", "llama-3.1-8b-instant", { tokenizer: "utf8_bytes" });
  let deep: unknown = Array.from({ length: 300 }, () => [[]]);
  for (let i = 0; i < 25; i++) deep = [deep];
  const tools = [
    { type: "function", function: { name: "deep", parameters: { type: "object", x: deep } } },
    {
      type: "function",
      function: {
        name: "weather",
        description: "Météo du jour",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const body = request({ messages: [{ role: "user", content: "hi" }], tools });
  // The template writes each tool alone, with Python's json.dumps(indent=4), as JSON.stringify does.
  const written = tools.reduce(
    (n, tool) => n + new TextEncoder().encode(JSON.stringify(tool, null, 4)).length,
    0,
  );
  assert.ok(
    openAiInputBound(body, llama, "utf8_bytes") >= written,
    `${openAiInputBound(body, llama, "utf8_bytes")} < ${written}`,
  );
});

Deno.test("an open model's tool result is held at no less than its bytes written as a JSON string, as Llama 3.1's template writes it (tojson)", () => {
  const llama = testModel("openai", "llama-3.1-8b-instant", { tokenizer: "utf8_bytes" });
  const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
  for (const result of ["\u0001".repeat(1_000), '"\\\n'.repeat(1_000)]) {
    for (const content of [result, [{ type: "text", text: result }]]) {
      const body = request({
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: null, tool_calls: [call] },
          { role: "tool", tool_call_id: "c1", content },
        ],
      });
      const written = new TextEncoder().encode(JSON.stringify(result)).length;
      assert.ok(openAiInputBound(body, llama, "utf8_bytes") >= written + 64 + 3 * 8);
    }
  }
});

Deno.test("utf8_bytes counts a text's UTF-8 bytes exactly, surrogate pairs and lone surrogates included", () => {
  for (const text of ["", "ascii", "é", "€", "😀", "a\uD800b", "\uDC00", "日本語😀é"]) {
    assert.equal(countTokensWith("utf8_bytes", text), new TextEncoder().encode(text).length, text);
  }
});

Deno.test("a Claude conversation that opens with the assistant is held for the user turn sent before it", () => {
  const greeting = [
    { role: "system", content: "Be kind." },
    { role: "assistant", content: "Hi! How can I help?" },
    { role: "user", content: "q" },
  ];
  const opened = request({ messages: greeting });
  // The same Messages request, had the client sent the opening turn itself.
  const asSent = request({
    messages: [greeting[0], { role: "user", content: OPENING_USER_TEXT }, ...greeting.slice(1)],
  });
  const claude = testModel("anthropic", "claude-sonnet-4-5");
  const sent = (r: typeof opened) =>
    messagesRequest({
      model: claude,
      request: r,
      maxTokens: 100,
      signal: new AbortController().signal,
      requestId: "r",
    }, false);
  assert.deepEqual(sent(opened), sent(asSent));
  assert.ok(claudeBound(opened) >= claudeBound(asSent));
});

Deno.test("an assistant's reasoning is held where the provider is sent it back, and only there", () => {
  const reasoning = "I should look the weather up before answering. ".repeat(20);
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        reasoning_content: reasoning,
        tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  });
  const model = testModel("openai", "deepseek-reasoner");
  const plain = inputBound({ kind: "openai" }, request, model, "o200k");
  assert.equal(plain, openAiInputBound(request, model, "o200k"));
  const forwarded = inputBound(
    { kind: "openai", forwardReasoningContent: true },
    request,
    model,
    "o200k",
  );
  assert.ok(forwarded - plain >= countTokensWith("o200k", reasoning), `${forwarded} - ${plain}`);
});

Deno.test("Claude's signed thinking sent back is held for its text and a token per byte its signature or data decodes to", () => {
  const thought = "I should look the weather up before answering. ".repeat(20);
  const signature = "Eq" + "A".repeat(4000);
  const data = "Em" + "B".repeat(2000);
  const conversation = (reasoning_details?: unknown[]) =>
    parseChatRequest({
      model: "m/x",
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          reasoning_details,
          tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
      ],
      tools: [{ type: "function", function: { name: "w" } }],
    });
  const common = { format: "anthropic-claude-v1", id: "claude-sonnet-4-5#0", index: 0 };
  const without = claudeBound(conversation());
  const signed = claudeBound(
    conversation([{ type: "reasoning.text", text: thought, signature, ...common }]),
  );
  assert.ok(
    signed - without >= claudeTokenBound(thought) + signature.length * 3 / 4,
    `${signed} - ${without}`,
  );
  const redacted = claudeBound(
    conversation([{ type: "reasoning.encrypted", data, ...common }]),
  );
  assert.ok(redacted - without >= data.length * 3 / 4, `${redacted} - ${without}`);
  // Another provider's reasoning is never sent to Claude: nothing to hold.
  const other = claudeBound(
    conversation([{ type: "reasoning.encrypted", data, format: "openai-responses-v1" }]),
  );
  assert.equal(other, without);
});

Deno.test("reasoning details are held where the provider is sent them back: their text, and a token per byte their signature or data decodes to", () => {
  const signature = "Eq" + "A".repeat(4000);
  const data = "gAAAA" + "B".repeat(2000);
  const thought = "Look the weather up first. ".repeat(30);
  const request = parseChatRequest({
    model: "m/x",
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        reasoning_details: [
          {
            type: "reasoning.text",
            text: thought,
            signature,
            format: "anthropic-claude-v1",
            index: 0,
          },
          { type: "reasoning.encrypted", data, format: "openai-responses-v1", index: 1 },
        ],
        tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  });
  const model = testModel("openai", "anthropic/claude-sonnet-4.5");
  const plain = inputBound({ kind: "openai" }, request, model, "o200k");
  const forwarded = inputBound(
    { kind: "openai", forwardReasoningDetails: true },
    request,
    model,
    "o200k",
  );
  assert.ok(
    forwarded - plain >=
      countTokensWith("o200k", thought) + (signature.length + data.length) * 3 / 4,
    `${forwarded} - ${plain}`,
  );
});

Deno.test("OpenAI's reasoning items sent back through the Responses API are held at a token per byte their encrypted content decodes to", () => {
  const data = "gAAAAA" + "B".repeat(6000);
  const conversation = (reasoning_details?: unknown[]) =>
    parseChatRequest({
      model: "m/x",
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          reasoning_details,
          tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
        },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
      ],
      tools: [{ type: "function", function: { name: "w" } }],
    });
  const model = testModel("openai_responses", "o4-mini");
  const bound = (details?: unknown[]) =>
    inputBound({ kind: "openai_responses" }, conversation(details), model, "o200k");
  const without = bound();
  const item = {
    type: "reasoning.encrypted",
    data,
    id: "o4-mini#rs_1",
    format: "openai-responses-v1",
    index: 0,
  };
  const carried = bound([item]);
  assert.ok(carried - without >= data.length * 3 / 4, `${carried} - ${without}`);
  // Without the model's name in its id no item can be made of it: nothing is sent, nothing held.
  assert.equal(bound([{ ...item, id: "rs_1" }]), without);
  // Claude's thinking is never sent to OpenAI.
  assert.equal(
    bound([{ type: "reasoning.encrypted", data, format: "anthropic-claude-v1", id: "c#0" }]),
    without,
  );
  // The chat kind is not sent them unless told to.
  assert.equal(
    inputBound({ kind: "openai" }, conversation([item]), model, "o200k"),
    inputBound({ kind: "openai" }, conversation(), model, "o200k"),
  );
});

Deno.test("a tool's images are held as a user's are on every kind, with the note and labels the chat kind sends", () => {
  const screenshot = (content: unknown) => toolCallHistory("{}", content);
  const image = { type: "image_url", image_url: { url: "https://example.com/s.png" } };
  const withImage = screenshot([image]);
  const without = screenshot("");
  const unknownOpenAi = openAiImageTokens(null, "auto", gpt);
  assert.ok(
    openAiInputBound(withImage, gpt, "o200k") - openAiInputBound(without, gpt, "o200k") >=
      unknownOpenAi + countTextTokens(TOOL_IMAGES_NOTE) + countTextTokens(toolImagesLabel("c1")),
  );
  assert.ok(
    inputBound({ kind: "openai_responses" }, withImage, gpt, "o200k") -
        inputBound({ kind: "openai_responses" }, without, gpt, "o200k") >= unknownOpenAi,
  );
  assert.ok(
    claudeBound(withImage) - claudeBound(without) >= anthropicImageTokens(null, 1568),
  );
  assert.equal(unreadImageTokens("openai", withImage, gpt), unknownOpenAi);
  assert.equal(unreadImageTokens("anthropic", withImage, gpt), anthropicImageTokens(null, 2576));
});

Deno.test("a request with a PDF has no bound short of its provider's count, on every kind", () => {
  const withPdf = request({
    messages: [{
      role: "user",
      content: [
        { type: "text", text: "Summarise." },
        {
          type: "file",
          file: { file_data: `data:application/pdf;base64,${btoa("%PDF-1.4\n%%EOF")}` },
        },
      ],
    }],
  });
  for (const kind of ["openai", "openai_responses", "anthropic", "simulator"] as const) {
    assert.equal(inputBound({ kind }, withPdf, gpt, "o200k"), Infinity, kind);
  }
});

Deno.test("a tool's PDF leaves the request without a bound short of its provider's count", () => {
  const withPdf = request({
    messages: [
      { role: "user", content: "Read it." },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "fetch", arguments: "{}" } }],
      },
      {
        role: "tool",
        tool_call_id: "c1",
        content: [{
          type: "file",
          file: { file_data: `data:application/pdf;base64,${btoa("%PDF-1.4\n%%EOF")}` },
        }],
      },
    ],
  });
  assert.equal(inputBound({ kind: "anthropic" }, withPdf, gpt, "o200k"), Infinity);
});

Deno.test("a bound given a limit stops counting once past it, and keeps nothing it stopped short of", () => {
  const words = Array.from({ length: 2_000 }, (_, i) => `word${i}x${i * 7}`).join(" ");
  const enumValues = Array.from({ length: 50_000 }, (_, i) => `v${i}`);
  const body = {
    messages: [{ role: "user", content: words }, { role: "user", content: words }],
    tools: [{
      type: "function",
      function: {
        name: "f",
        parameters: { type: "object", properties: { a: { enum: enumValues } } },
      },
    }],
  };
  const whole = openAiInputBound(request(body), gpt, "o200k");
  const stopped = openAiInputBound(request(body), gpt, "o200k", "held", 500);
  assert.ok(stopped > 500 && stopped < whole, `${stopped} of ${whole}`);
  // Counted again without a limit (the tools' bound and the texts' counts from their caches):
  // the whole bound, none of it cut short.
  assert.equal(openAiInputBound(request(body), gpt, "o200k"), whole);
  // A tool's bound is cached (its JSON short enough): one stopped short is not.
  const toolsOnly = {
    messages: [{ role: "user", content: "hi" }],
    tools: [{
      type: "function",
      function: { name: "g", parameters: { enum: enumValues.slice(0, 5_000) } },
    }],
  };
  const toolsStopped = openAiInputBound(request(toolsOnly), gpt, "cl100k", "held", 1_000);
  const toolsWhole = openAiInputBound(request(toolsOnly), gpt, "cl100k");
  assert.ok(toolsStopped > 1_000 && toolsStopped < toolsWhole, `${toolsStopped} of ${toolsWhole}`);
  assert.equal(openAiInputBound(request(toolsOnly), gpt, "cl100k", "held", 1_000), toolsWhole);
  // Under the limit, the whole bound.
  assert.equal(openAiInputBound(request(body), gpt, "o200k", "held", whole), whole);
  assert.equal(inputBound({ kind: "openai" }, request(body), gpt, "o200k", 500), stopped);
});

Deno.test("a text counted with a limit stops once past it and is not kept; counted whole later, it is whole", () => {
  const text = Array.from({ length: 5_000 }, (_, i) => `w${i}q${i % 97}`).join(" ");
  const stopped = countTokensWith("o200k", text + "!", undefined, 100);
  const whole = countTextTokens(text + "!");
  assert.ok(stopped > 100 && stopped < whole, `${stopped} of ${whole}`);
  assert.equal(countTokensWith("o200k", text + "!"), whole);
  // Once counted whole, a count with a limit is the cached whole.
  assert.equal(countTokensWith("o200k", text + "!", undefined, 100), whole);
  assert.ok(
    countTokensWith("cl100k", text + "?", undefined, 100) < countTokensWith("cl100k", text + "?"),
  );
});

Deno.test("gpt-oss is held over what harmony renders: its system message, channels, tools as comments and a result headed by its function's name", () => {
  const oss = testModel("openai", "openai/gpt-oss-120b");
  assert.equal(oss.chatTemplate, "harmony");
  const weather = {
    type: "function",
    function: {
      name: "get_current_weather_for_a_city_and_country",
      description: "Gets the weather.\nUse it for any city.\n\nSay which units.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "The city.\nIts English name." },
          units: { type: "string", description: "metric or imperial" },
        },
        required: ["city"],
      },
    },
  };
  const longName = "qX9_zV7_kW3_jB5_".repeat(4);
  const ids = Array.from({ length: 40 }, (_, i) => `c${i}`);
  const chats = [
    { messages: [{ role: "user", content: "hi" }] },
    { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }] },
    { messages: [{ role: "user", content: "hi" }], tools: [weather] },
    {
      messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "function", function: { name: "f", description: "\n".repeat(20_000) } }],
    },
    {
      messages: [
        { role: "user", content: "Weather in Paris and Oslo?" },
        {
          role: "assistant",
          content: null,
          tool_calls: ["a", "b"].map((id) => ({
            id,
            type: "function",
            function: { name: weather.function.name, arguments: `{"city":"${id}"}` },
          })),
        },
        { role: "tool", tool_call_id: "a", content: "12C" },
        { role: "tool", tool_call_id: "b", content: "3C" },
        { role: "assistant", content: "Paris 12C, Oslo 3C." },
        { role: "user", content: "Thanks" },
      ],
      tools: [weather],
    },
    // Results headed by a long name their short call ids stand for.
    {
      messages: [
        { role: "user", content: "go" },
        {
          role: "assistant",
          content: null,
          tool_calls: ids.map((id) => ({
            id,
            type: "function",
            function: { name: longName, arguments: "{}" },
          })),
        },
        ...ids.map((id) => ({ role: "tool", tool_call_id: id, content: "ok" })),
      ],
      tools: [{ type: "function", function: { name: longName } }],
    },
  ];
  for (const chat of chats) {
    const bound = inputBound({ kind: "openai" }, request(chat), oss, oss.tokenizer);
    const billed = harmonyPromptTokens(chat);
    assert.ok(
      bound >= billed,
      `held ${bound} < billed ${billed}: ${JSON.stringify(chat).slice(0, 80)}`,
    );
  }
});

Deno.test("a description's line breaks are held for a comment's // on each line, on every template", () => {
  const tools = (description: string) =>
    request({
      messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "function", function: { name: "f", description } }],
    });
  const lines = 10_000;
  const grown = openAiInputBound(tools("\n".repeat(lines)), gpt, "o200k") -
    openAiInputBound(tools(""), gpt, "o200k");
  assert.ok(grown >= 3 * lines, `${lines} line breaks held as ${grown} tokens`);
});

Deno.test("an OpenAI model's tool is held 5 tokens more a oneOf or anyOf variant, a line each as harmony writes them; its other elements as counted", () => {
  const withProperty = (x: unknown) =>
    openAiInputBound(
      request({
        messages: [{ role: "user", content: "hi" }],
        tools: [{
          type: "function",
          function: { name: "f", parameters: { type: "object", properties: { x } } },
        }],
      }),
      gpt,
      "o200k",
    );
  const variants = Array.from({ length: 100 }, () => ({ type: "string" }));
  const asList = withProperty({ items: variants });
  assert.equal(withProperty({ oneOf: variants }) - asList, 500 + 1);
  assert.equal(withProperty({ anyOf: variants }) - asList, 500 + 1);
});
