/**
 * The strict Anthropic fake, driven by the official SDK (API version 2026-10-21, Bearer auth) and
 * by raw requests as Tollbooth sends them (2023-06-01, x-api-key): tool round trips, streamed
 * tool input and thinking, count_tokens, caching and image billing, and each validation rule
 * refusing what the Messages API refuses, in Anthropic's words.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { pngBase64 } from "./common.ts";
import {
  anthropicImageTokens,
  type AnthropicUpstream,
  type AnthropicUpstreamOptions,
  claudeTokens,
  IMAGE_BLOCK_TOKENS,
  startAnthropicUpstream,
} from "./anthropic_upstream.ts";

const MODEL = "claude-sonnet-4-6";

async function withAnthropic(
  fn: (fake: AnthropicUpstream, client: Anthropic) => Promise<void>,
  options: AnthropicUpstreamOptions = {},
) {
  const fake = startAnthropicUpstream(options);
  const client = new Anthropic({ apiKey: fake.apiKey, baseURL: fake.url, maxRetries: 0 });
  try {
    await fn(fake, client);
  } finally {
    await fake.close();
  }
}

interface Refusal {
  status: number;
  type: string;
  message: string;
}

/** A raw Messages request, as Tollbooth sends it (x-api-key, 2023-06-01 unless told). */
async function post(
  fake: AnthropicUpstream,
  body: unknown,
  headers: Record<string, string> = {},
  path = "/v1/messages",
) {
  const res = await fetch(`${fake.url}${path}`, {
    method: "POST",
    headers: {
      "x-api-key": fake.apiKey,
      "anthropic-version": "2023-06-01",
      "content-type": "application/json",
      ...headers,
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

/** The refusal of a raw request: status and Anthropic's error, checking the envelope. */
async function refused(
  fake: AnthropicUpstream,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Refusal> {
  const { status, json } = await post(fake, body, headers);
  assert.equal(json.type, "error", `expected a refusal, got ${JSON.stringify(json)}`);
  assert.match(json.request_id, /^req_/);
  return { status, type: json.error.type, message: json.error.message };
}

const WEATHER = {
  name: "get_weather",
  description: "Get the current weather in a given location",
  input_schema: {
    type: "object" as const,
    properties: { location: { type: "string", description: "The city and state" } },
    required: ["location"],
  },
};

Deno.test("anthropic fake: a full tool round trip with the SDK (2026-10-21, Bearer)", () =>
  withAnthropic(async (fake, client) => {
    fake.script({
      content: [
        { type: "text", text: "I'll check the weather." },
        { type: "tool_use", id: "toolu_01A", name: "get_weather", input: { location: "Paris" } },
      ],
    });
    const question = { role: "user" as const, content: "What's the weather in Paris?" };
    const first = await client.messages.create({
      model: MODEL,
      max_tokens: 1024,
      tools: [WEATHER],
      messages: [question],
    });
    assert.equal(first.stop_reason, "tool_use");
    const use = first.content.find((b) => b.type === "tool_use")!;
    assert.deepEqual(use, {
      type: "tool_use",
      id: "toolu_01A",
      name: "get_weather",
      input: { location: "Paris" },
    });
    assert.equal(first.usage.input_tokens, fake.messages()[0].inputTokens);
    const sent = fake.received[0];
    assert.equal(sent.headers["anthropic-version"], "2026-10-21");
    assert.equal(sent.headers.authorization, `Bearer ${fake.apiKey}`);

    fake.script({ text: "It is sunny and 21 °C in Paris." });
    const second = await client.messages.create({
      model: MODEL,
      max_tokens: 1024,
      tools: [WEATHER],
      messages: [
        question,
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_01A", content: "21 °C, sunny" },
            { type: "text", text: "Thanks!" },
          ],
        },
      ],
    });
    assert.equal(second.stop_reason, "end_turn");
    assert.deepEqual(second.content, [{ type: "text", text: "It is sunny and 21 °C in Paris." }]);
    assert.equal(second.usage.output_tokens, claudeTokens("It is sunny and 21 °C in Paris."));
    assert.deepEqual(fake.messages()[1].body.messages[2].content[0], {
      type: "tool_result",
      tool_use_id: "toolu_01A",
      content: "21 °C, sunny",
    });
  }));

Deno.test("anthropic fake: streamed tool input arrives as input_json_delta the SDK assembles", () =>
  withAnthropic(async (fake, client) => {
    const input = { location: "San Francisco, CA", unit: "fahrenheit" };
    fake.script({
      content: [
        { type: "text", text: "Okay, let's check the weather for San Francisco, CA:" },
        { type: "tool_use", name: "get_weather", input },
      ],
    });
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 1024,
      tools: [WEATHER],
      messages: [{ role: "user", content: "What is the weather like in San Francisco?" }],
    });
    const jsonPieces: string[] = [];
    stream.on("inputJson", (partial) => jsonPieces.push(partial));
    const message = await stream.finalMessage();
    assert.equal(message.stop_reason, "tool_use");
    const use = message.content[1];
    assert.ok(use.type === "tool_use");
    assert.deepEqual(use.input, input);
    assert.ok(jsonPieces.length > 2);
    assert.equal(jsonPieces.join(""), JSON.stringify(input));
    // The same answer, not streamed, bills the same.
    fake.script({
      content: [
        { type: "text", text: "Okay, let's check the weather for San Francisco, CA:" },
        { type: "tool_use", name: "get_weather", input },
      ],
    });
    const whole = await client.messages.create({
      model: MODEL,
      max_tokens: 1024,
      tools: [WEATHER],
      messages: [{ role: "user", content: "What is the weather like in San Francisco?" }],
    });
    assert.deepEqual(message.usage, whole.usage);
  }));

Deno.test("anthropic fake: a tool called without arguments streams one empty partial_json, as the API does", () =>
  withAnthropic(async (fake, client) => {
    fake.script({ content: [{ type: "tool_use", name: "get_time", input: {} }] });
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 1024,
      tools: [{ name: "get_time", input_schema: { type: "object", properties: {} } }],
      messages: [{ role: "user", content: "What time is it?" }],
    });
    const jsonPieces: string[] = [];
    stream.on("streamEvent", (event) => {
      if (event.type === "content_block_delta" && event.delta.type === "input_json_delta") {
        jsonPieces.push(event.delta.partial_json);
      }
    });
    const message = await stream.finalMessage();
    assert.deepEqual(jsonPieces, [""]);
    const use = message.content[0];
    assert.ok(use.type === "tool_use");
    assert.deepEqual(use.input, {});
  }));

Deno.test("anthropic fake: thinking streams with its signature, and the tool loop must carry it back", () =>
  withAnthropic(async (fake, client) => {
    fake.script({
      content: [
        { type: "thinking", thinking: "The user wants Paris weather; I should call the tool." },
        { type: "tool_use", id: "toolu_01T", name: "get_weather", input: { location: "Paris" } },
      ],
    });
    const base = {
      model: MODEL,
      max_tokens: 4096,
      thinking: { type: "enabled" as const, budget_tokens: 2048 },
      tools: [WEATHER],
    };
    const question = { role: "user" as const, content: "Weather in Paris?" };
    const stream = client.messages.stream({ ...base, messages: [question] });
    let thought = "";
    let signature = "";
    stream.on("thinking", (delta) => thought += delta);
    stream.on("streamEvent", (event) => {
      if (event.type === "content_block_delta" && event.delta.type === "signature_delta") {
        signature = event.delta.signature;
      }
    });
    const first = await stream.finalMessage();
    assert.equal(thought, "The user wants Paris weather; I should call the tool.");
    const thinking = first.content[0];
    assert.ok(thinking.type === "thinking");
    assert.equal(thinking.signature, signature);
    assert.ok(signature.length > 10);
    const thinkingTokens = claudeTokens(thought);
    assert.ok(first.usage.output_tokens >= thinkingTokens);

    const result = {
      role: "user" as const,
      content: [{ type: "tool_result" as const, tool_use_id: "toolu_01T", content: "Sunny" }],
    };
    // Dropping the thinking block from the tool loop is refused, as the API refuses it.
    const withoutThinking = first.content.filter((b) => b.type !== "thinking");
    const bad = await client.messages.create({
      ...base,
      messages: [question, { role: "assistant", content: withoutThinking }, result],
    }).catch((e) => e);
    assert.ok(bad instanceof Anthropic.BadRequestError);
    assert.match(
      bad.message,
      /messages\.1\.content\.0\.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`\. When `thinking` is enabled, a final `assistant` message must start with a thinking block/,
    );
    // So is a prefill without the thinking block: it is a final assistant message too.
    const prefill = await client.messages.create({
      ...base,
      messages: [question, { role: "assistant", content: "The weather in Paris is" }],
    }).catch((e) => e);
    assert.ok(prefill instanceof Anthropic.BadRequestError);
    assert.match(
      prefill.message,
      /messages\.1\.content\.0\.type: Expected `thinking` or `redacted_thinking`, but found `text`\. When `thinking` is enabled, a final `assistant` message must start with a thinking block\./,
    );
    fake.script({ text: "It's sunny in Paris." });
    const ok = await client.messages.create({
      ...base,
      messages: [question, { role: "assistant", content: first.content }, result],
    });
    assert.equal(ok.content[0].type, "text");
    // The loop's thinking is input; earlier turns' thinking is not (Extended thinking docs).
    const loopInput = fake.messages().at(-1)!.inputTokens;
    const later = fake.inputTokens({
      ...base,
      messages: [
        question,
        { role: "assistant", content: first.content },
        result,
        { role: "assistant", content: "It's sunny in Paris." },
        { role: "user", content: "Thanks" },
      ],
    });
    assert.ok(later < loopInput + 20, "earlier turns' thinking is not counted again");
  }));

Deno.test("anthropic fake: count_tokens answers what the message bills, tools and images included", () =>
  withAnthropic(async (fake, client) => {
    const plain = { model: MODEL, messages: [{ role: "user" as const, content: "Hello, Claude" }] };
    const counted = await client.messages.countTokens(plain);
    fake.script({ text: "Hi!" });
    const created = await client.messages.create({ ...plain, max_tokens: 100 });
    assert.equal(counted.input_tokens, created.usage.input_tokens);
    assert.equal(counted.input_tokens, claudeTokens("Hello, Claude") + 3);

    // Tools: name, description and schema, plus the tool-use system prompt (346 auto, 313 any).
    const tools = await client.messages.countTokens({ ...plain, tools: [WEATHER] });
    const toolTokens = claudeTokens(WEATHER.name) + claudeTokens(WEATHER.description) +
      claudeTokens(JSON.stringify(WEATHER.input_schema));
    assert.equal(tools.input_tokens, counted.input_tokens + 346 + toolTokens);
    const forced = await client.messages.countTokens({
      ...plain,
      tools: [WEATHER],
      tool_choice: { type: "any" },
    });
    assert.equal(forced.input_tokens, counted.input_tokens + 313 + toolTokens);

    // Images: width × height / 750 after fitting 1568 px and ~1.15 megapixels (Vision docs).
    const image = await client.messages.countTokens({
      model: MODEL,
      messages: [{
        role: "user",
        content: [
          {
            type: "image",
            source: { type: "base64", media_type: "image/png", data: pngBase64(1000, 1000) },
          },
          { type: "text", text: "Hello, Claude" },
        ],
      }],
    });
    assert.equal(image.input_tokens, counted.input_tokens + IMAGE_BLOCK_TOKENS + 1334);
    assert.equal(anthropicImageTokens(1000, 1000), 1334);
    assert.equal(anthropicImageTokens(1092, 1092), 1590);
    assert.ok(anthropicImageTokens(4000, 3000) <= 1600);
    assert.equal(fake.counts().length, 4);
    // count_tokens needs no max_tokens but refuses what messages refuses.
    const bad = await client.messages.countTokens({
      model: MODEL,
      messages: [{ role: "assistant", content: "Hi" }],
    }).catch((e) => e);
    assert.ok(bad instanceof Anthropic.BadRequestError);
  }));

Deno.test("anthropic fake: writes kept an hour need a 1h breakpoint, which may not follow a 5m one", () =>
  withAnthropic(async (fake, client) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(150);
    const text = (ttl: "5m" | "1h") => ({
      type: "text" as const,
      text: long,
      cache_control: { type: "ephemeral" as const, ttl },
    });
    const messages = [{ role: "user" as const, content: "Summarize." }];
    const answer = { text: "Summary.", cacheCreationInputTokens: 1200 };
    fake.script({ ...answer, cacheCreation1hInputTokens: 800 });
    const hour = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      system: [text("1h")],
      messages,
    });
    assert.equal(hour.usage.cache_creation_input_tokens, 1200);
    assert.deepEqual(hour.usage.cache_creation, {
      ephemeral_5m_input_tokens: 400,
      ephemeral_1h_input_tokens: 800,
    });
    fake.script({ ...answer, cacheCreation1hInputTokens: 800 });
    const short = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      system: [text("5m")],
      messages,
    });
    assert.equal(short.usage.cache_creation?.ephemeral_1h_input_tokens, 0, "no 1h breakpoint");
    const late = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      system: [text("5m"), text("1h")],
      messages,
    }).catch((e) => e);
    assert.ok(late instanceof Anthropic.BadRequestError);
  }));

Deno.test("anthropic fake: cache reads and writes need cache_control and a long enough prompt", () =>
  withAnthropic(async (fake, client) => {
    const long = "The quick brown fox jumps over the lazy dog. ".repeat(150);
    const system = [{
      type: "text" as const,
      text: long,
      cache_control: { type: "ephemeral" as const },
    }];
    const messages = [{ role: "user" as const, content: "Summarize." }];
    fake.script({ text: "Summary.", cacheCreationInputTokens: 1200 });
    const write = await client.messages.create({ model: MODEL, max_tokens: 100, system, messages });
    const total = fake.messages()[0].inputTokens;
    assert.ok(total > 1024);
    assert.equal(write.usage.cache_creation_input_tokens, 1200);
    assert.equal(write.usage.cache_read_input_tokens, 0);
    assert.equal(write.usage.input_tokens, total - 1200);
    fake.script({ text: "Summary.", cacheReadInputTokens: 1200 });
    const stream = client.messages.stream({ model: MODEL, max_tokens: 100, system, messages });
    const read = await stream.finalMessage();
    assert.equal(read.usage.cache_read_input_tokens, 1200);
    assert.equal(read.usage.input_tokens, total - 1200);
    // Without a cache_control marker nothing is cached, whatever the script says.
    fake.script({ text: "Summary.", cacheReadInputTokens: 1200 });
    const none = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      system: long,
      messages,
    });
    assert.equal(none.usage.cache_read_input_tokens, 0);
    assert.equal(none.usage.input_tokens, total);
  }));

Deno.test("anthropic fake: temperature and top_p together, a blank stop sequence, and sampling on count_tokens are refused in Anthropic's words", () =>
  withAnthropic(async (fake) => {
    const base = { model: MODEL, max_tokens: 50, messages: [{ role: "user", content: "Hi" }] };
    const both = await post(fake, { ...base, temperature: 0.3, top_p: 0.9 });
    assert.equal(both.status, 400);
    assert.match(both.json.error.message, /cannot both be specified/);
    const blank = await post(fake, { ...base, stop_sequences: ["END", "\n"] });
    assert.equal(blank.status, 400);
    assert.match(blank.json.error.message, /must contain non-whitespace/);
    const counted = await post(
      fake,
      { model: MODEL, messages: base.messages, temperature: 0.3 },
      {},
      "/v1/messages/count_tokens",
    );
    assert.equal(counted.status, 400);
    assert.match(counted.json.error.message, /temperature: Extra inputs are not permitted/);
  }));

Deno.test("anthropic fake: requests as Tollbooth sends them (2023-06-01, x-api-key) keep sampling", () =>
  withAnthropic(async (fake) => {
    fake.script({ text: "Bonjour !" });
    const ok = await post(fake, {
      model: MODEL,
      max_tokens: 50,
      system: "Answer in French.",
      temperature: 0.3,
      stop_sequences: ["END"],
      metadata: { user_id: "u-1" },
      messages: [
        { role: "user", content: "Hi" },
        { role: "user", content: "Again" },
        { role: "assistant", content: "Hello" },
        { role: "user", content: "Bye" },
      ],
    });
    assert.equal(ok.status, 200);
    assert.deepEqual(Object.keys(ok.json).sort(), [
      "content",
      "id",
      "model",
      "role",
      "stop_details",
      "stop_reason",
      "stop_sequence",
      "type",
      "usage",
    ]);
    const hot = await refused(fake, {
      model: MODEL,
      max_tokens: 50,
      temperature: 1.5,
      messages: [{ role: "user", content: "Hi" }],
    });
    assert.deepEqual(hot, {
      status: 400,
      type: "invalid_request_error",
      message: "temperature: Input should be less than or equal to 1",
    });
    // The same sampling under 2026-10-21 is refused even at the default.
    const removed = await refused(fake, {
      model: MODEL,
      max_tokens: 50,
      temperature: 1,
      messages: [{ role: "user", content: "Hi" }],
    }, { "anthropic-version": "2026-10-21" });
    assert.equal(removed.message, "temperature: Extra inputs are not permitted");
  }));

Deno.test("anthropic fake: each validation rule refuses in Anthropic's words", () =>
  withAnthropic(async (fake) => {
    const hi = [{ role: "user", content: "Hi" }];
    const cases: [unknown, string, Record<string, string>?][] = [
      [{ model: MODEL, messages: hi }, "max_tokens: Field required"],
      [
        { model: MODEL, max_tokens: 10, messages: hi, frobnicate: 1 },
        "frobnicate: Extra inputs are not permitted",
      ],
      [
        { model: MODEL, max_tokens: "ten", messages: hi },
        "max_tokens: Input should be a valid integer",
      ],
      [
        { model: MODEL, max_tokens: 10, messages: [] },
        "messages: at least one message is required",
      ],
      [
        { model: MODEL, max_tokens: 10, messages: [{ role: "assistant", content: "Hi" }] },
        'messages: first message must use the "user" role',
      ],
      [
        { model: MODEL, max_tokens: 10, messages: [{ role: "robot", content: "Hi" }] },
        "messages.0.role: Input should be 'user', 'assistant' or 'system'",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{ role: "user", content: [] }, { role: "assistant", content: "x" }, ...hi],
        },
        "messages.0: all messages must have non-empty content except for the optional final assistant message",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{ role: "user", content: [{ type: "text", text: "" }] }],
        },
        "messages: text content blocks must be non-empty",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{ role: "user", content: [{ type: "text", text: " \n" }] }],
        },
        "messages: text content blocks must contain non-whitespace text",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [...hi, { role: "assistant", content: "Sure, " }],
        },
        "messages: final assistant content cannot end with trailing whitespace",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{ role: "user", content: [{ type: "video", url: "x" }] }],
        },
        "messages.0.content.0: Input tag 'video' found using 'type' does not match any of the expected tags: 'text', 'image', 'document', 'tool_result'",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{
            role: "user",
            content: [{
              type: "image",
              source: { type: "base64", media_type: "image/bmp", data: "AAAA" },
            }],
          }],
        },
        "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{
            role: "user",
            content: [{
              type: "image",
              source: { type: "base64", media_type: "image/jpeg", data: pngBase64(10, 10) },
            }],
          }],
        },
        "messages.0.content.0.image.source.base64: The image was specified using the image/jpeg media type, but the image appears to be a image/png image",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [
            ...hi,
            {
              role: "assistant",
              content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }],
            },
            { role: "user", content: "What now?" },
          ],
          tools: [WEATHER],
        },
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [
            ...hi,
            {
              role: "assistant",
              content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }],
            },
            {
              role: "user",
              content: [{ type: "text", text: "Here:" }, {
                type: "tool_result",
                tool_use_id: "toolu_1",
                content: "x",
              }],
            },
          ],
          tools: [WEATHER],
        },
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [{
            role: "user",
            content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "x" }],
          }],
        },
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
      ],
      [
        { model: MODEL, max_tokens: 10, messages: hi, tools: [WEATHER, WEATHER] },
        "tools: Tool names must be unique.",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [
            ...hi,
            {
              role: "assistant",
              content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: {} }],
            },
            {
              role: "user",
              content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "x" }],
            },
          ],
        },
        "Requests which include `tool_use` or `tool_result` blocks must define tools.",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [
            ...hi,
            {
              role: "assistant",
              content: [{
                type: "tool_use",
                id: "functions.get_weather:0",
                name: "get_weather",
                input: {},
              }],
            },
            {
              role: "user",
              content: [{
                type: "tool_result",
                tool_use_id: "functions.get_weather:0",
                content: "x",
              }],
            },
          ],
          tools: [WEATHER],
        },
        "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [
            ...hi,
            {
              role: "assistant",
              content: [{ type: "tool_use", id: "call_0", name: "get_weather", input: {} }],
            },
            {
              role: "user",
              content: [{ type: "tool_result", tool_use_id: "call_0", content: "x" }],
            },
            {
              role: "assistant",
              content: [{ type: "tool_use", id: "call_0", name: "get_weather", input: {} }],
            },
            {
              role: "user",
              content: [{ type: "tool_result", tool_use_id: "call_0", content: "x" }],
            },
          ],
          tools: [WEATHER],
        },
        "messages.3.content.0: `tool_use` ids must be unique",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: hi,
          tools: [{ ...WEATHER, name: "get weather" }],
        },
        "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
      ],
      [
        { model: MODEL, max_tokens: 10, messages: hi, tool_choice: { type: "maybe" } },
        "tool_choice: Input tag 'maybe' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'",
      ],
      [
        {
          model: MODEL,
          max_tokens: 2000,
          messages: hi,
          thinking: { type: "enabled", budget_tokens: 512 },
        },
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
      ],
      [
        {
          model: MODEL,
          max_tokens: 1024,
          messages: hi,
          thinking: { type: "enabled", budget_tokens: 1024 },
        },
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
      ],
      [
        {
          model: MODEL,
          max_tokens: 4096,
          temperature: 0.5,
          messages: hi,
          thinking: { type: "enabled", budget_tokens: 1024 },
        },
        "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking",
      ],
      [
        {
          model: MODEL,
          max_tokens: 4096,
          messages: hi,
          tools: [WEATHER],
          tool_choice: { type: "any" },
          thinking: { type: "enabled", budget_tokens: 1024 },
        },
        "Thinking may not be enabled when tool_choice forces tool use.",
      ],
      [
        {
          model: MODEL,
          max_tokens: 10,
          messages: [...hi, {
            role: "assistant",
            content: [{
              type: "document",
              source: { type: "text", media_type: "text/plain", data: "x" },
            }],
          }],
        },
        "messages.1.content.0.document: document blocks are not accepted in assistant messages in API version 2026-10-21; send documents in user messages.",
        { "anthropic-version": "2026-10-21" },
      ],
    ];
    for (const [body, message, headers] of cases) {
      const refusal = await refused(fake, body, headers);
      assert.deepEqual(refusal, { status: 400, type: "invalid_request_error", message });
    }
    assert.equal(fake.messages().length, 0);
    assert.equal(fake.tally.refused, cases.length);
  }));

Deno.test("anthropic fake: headers — key, version, and per-model limits", () =>
  withAnthropic(async (fake) => {
    const body = { model: MODEL, max_tokens: 10, messages: [{ role: "user", content: "Hi" }] };
    assert.deepEqual(await refused(fake, body, { "x-api-key": "sk-ant-wrong" }), {
      status: 401,
      type: "authentication_error",
      message: "invalid x-api-key",
    });
    const res = await fetch(`${fake.url}/v1/messages`, {
      method: "POST",
      headers: { "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error.message, "x-api-key header is required");
    const noVersion = await fetch(`${fake.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": fake.apiKey, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    assert.equal(noVersion.status, 400);
    assert.equal((await noVersion.json()).error.message, "anthropic-version: header is required");
    // x-api-key wins over a Bearer token.
    fake.script({ text: "ok" });
    const both = await post(fake, body, { authorization: "Bearer sk-ant-wrong" });
    assert.equal(both.status, 200);
    const tooMany = await refused(fake, { ...body, model: "claude-small", max_tokens: 9000 });
    assert.equal(
      tooMany.message,
      "max_tokens: 9000 > 8192, which is the maximum allowed number of output tokens for claude-small",
    );
    const tooLong = await refused(fake, {
      ...body,
      model: "claude-small",
      messages: [{ role: "user", content: "word ".repeat(300) }],
    });
    assert.match(tooLong.message, /^prompt is too long: \d+ tokens > 200 maximum$/);
    const noRoom = await refused(fake, { ...body, model: "claude-small", max_tokens: 199 });
    assert.match(
      noRoom.message,
      /^input length and `max_tokens` exceed context limit: \d+ \+ 199 > 200, decrease input length or `max_tokens` and try again$/,
    );
  }, { models: { "claude-small": { maxOutputTokens: 8192, contextWindow: 200 } } }));

Deno.test("anthropic fake: faults — statuses, error events mid-stream, cuts", () =>
  withAnthropic(async (fake, client) => {
    fake.script({ status: 529 });
    const overloaded = await client.messages.create({
      model: MODEL,
      max_tokens: 10,
      messages: [{ role: "user", content: "Hi" }],
    }).catch((e) => e);
    assert.ok(overloaded instanceof Anthropic.APIError);
    assert.equal(overloaded.status, 529);
    assert.deepEqual(
      (overloaded.error as { error: unknown }).error,
      { type: "overloaded_error", message: "Overloaded" },
    );

    fake.script({ text: "Once upon a time there was a fox.", errorEventAfter: 4 });
    const res = await fetch(`${fake.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": fake.apiKey, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 100,
        stream: true,
        messages: [{ role: "user", content: "A story" }],
      }),
    });
    const text = await res.text();
    const events = text.trim().split("\n\n");
    assert.equal(events.length, 5);
    assert.equal(
      events.at(-1),
      'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    );

    fake.script({ text: "a b c d e f g", cutAfterEvents: 4 });
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 100,
      messages: [{ role: "user", content: "Hi" }],
    });
    await assert.rejects(stream.finalMessage());
    assert.equal(fake.tally.cut, 1);
  }));

Deno.test("anthropic fake: the newer models' rules — adaptive only, no sampling, thinking always, no forced tools — in Anthropic's words", () =>
  withAnthropic(async (fake) => {
    const ask = { max_tokens: 4096, messages: [{ role: "user", content: "Hi" }] };
    const budget = { type: "enabled", budget_tokens: 2048 };
    assert.deepEqual(await refused(fake, { ...ask, model: "claude-opus-4-7", thinking: budget }), {
      status: 400,
      type: "invalid_request_error",
      message:
        '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.',
    });
    assert.match(
      (await refused(fake, { ...ask, model: "claude-fable-5", thinking: { type: "disabled" } }))
        .message,
      /^"thinking\.type\.disabled" is not supported for this model/,
    );
    assert.match(
      (await refused(fake, { ...ask, model: "claude-sonnet-4-5", thinking: { type: "adaptive" } }))
        .message,
      /"thinking\.type\.adaptive" is not supported for this model/,
    );
    assert.equal(
      (await refused(fake, { ...ask, model: "claude-opus-4-8-20260601", temperature: 1 })).message,
      "`temperature` is deprecated for this model.",
    );
    assert.equal(
      (await refused(fake, { ...ask, model: "claude-sonnet-5", top_p: 0.5 })).message,
      "`top_p` is deprecated for this model.",
    );
    const tools = [WEATHER];
    assert.match(
      (await refused(fake, {
        ...ask,
        model: "claude-opus-5-5",
        tools,
        tool_choice: { type: "any" },
      })).message,
      /^tool_choice: forced tool use is not supported for this model/,
    );
    // What the rules allow: Sonnet 5 at its default temperature, told not to think; adaptive
    // thinking with a forced tool, and with a tool loop whose assistant turn opens with tool_use.
    const loop = [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: [{
          type: "tool_use",
          id: "toolu_1",
          name: "get_weather",
          input: { location: "P" },
        }],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sun" }] },
    ];
    for (
      const body of [
        { ...ask, model: "claude-sonnet-5", temperature: 1, thinking: { type: "disabled" } },
        {
          ...ask,
          model: "claude-sonnet-5",
          tools,
          tool_choice: { type: "tool", name: "get_weather" },
        },
        {
          ...ask,
          model: "claude-opus-4-7",
          messages: loop,
          tools,
          thinking: { type: "adaptive", display: "summarized" },
          output_config: { effort: "high" },
        },
      ]
    ) {
      const { status, json } = await post(fake, body);
      assert.equal(status, 200, JSON.stringify(json));
    }
  }));

Deno.test("anthropic fake: the newer models return thinking text only when asked for it summarized", () =>
  withAnthropic(async (fake) => {
    const thought = { type: "thinking" as const, thinking: "Let me see." };
    const body = {
      model: "claude-opus-4-7",
      max_tokens: 4096,
      messages: [{ role: "user", content: "Hi" }],
    };
    fake.script({ content: [thought, { type: "text", text: "Hello" }] });
    const omitted = await post(fake, { ...body, thinking: { type: "adaptive" } });
    assert.equal(omitted.json.content[0].thinking, "");
    fake.script({ content: [thought, { type: "text", text: "Hello" }] });
    const shown = await post(fake, {
      ...body,
      thinking: { type: "adaptive", display: "summarized" },
    });
    assert.equal(shown.json.content[0].thinking, "Let me see.");
    // Billed the same either way.
    assert.equal(omitted.json.usage.output_tokens, shown.json.usage.output_tokens);
  }));

Deno.test("anthropic fake: 4.6 on refuse a prefill, Opus 5 turns thinking off only at effort high or below, and an output format must close its objects", () =>
  withAnthropic(async (fake) => {
    const ask = { max_tokens: 4096, messages: [{ role: "user", content: "Hi" }] };
    const prefill = {
      ...ask,
      messages: [...ask.messages, { role: "assistant", content: "Hello" }],
    };
    for (const model of ["claude-sonnet-4-6", "anthropic.claude-opus-4-7-20260416-v1:0"]) {
      assert.equal(
        (await refused(fake, { ...prefill, model })).message,
        "This model does not support assistant message prefill. The conversation must end with a user message.",
      );
    }
    assert.equal((await post(fake, { ...prefill, model: "claude-sonnet-4-5" })).status, 200);
    assert.match(
      (await refused(fake, {
        ...ask,
        model: "claude-opus-5",
        thinking: { type: "disabled" },
        output_config: { effort: "max" },
      })).message,
      /^"thinking\.type\.disabled" is not supported with effort "max"/,
    );
    const open = { type: "object", properties: { a: { type: "object" } } };
    assert.equal(
      (await refused(fake, {
        ...ask,
        model: "claude-opus-5-5",
        output_config: { format: { type: "json_schema", schema: open } },
      })).message,
      "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false",
    );
    assert.equal(
      (await refused(fake, {
        ...ask,
        model: "claude-opus-5-5",
        output_config: {
          format: {
            type: "json_schema",
            schema: {
              type: "object",
              properties: { n: { type: "integer", minimum: 0 } },
              additionalProperties: false,
            },
          },
        },
      })).message,
      "output_config.format.schema.properties.n: For 'integer' type, property 'minimum' is not supported",
    );
    const closed = { ...open, additionalProperties: false };
    assert.match(
      (await refused(fake, {
        ...ask,
        model: "claude-opus-5-5",
        output_config: { format: { type: "json_schema", schema: closed } },
      })).message,
      /^output_config\.format\.schema\.properties\.a: /,
    );
    // The platform's and the preview's names are their models'.
    for (const model of ["anthropic.claude-sonnet-5", "claude-mythos-preview"]) {
      const { status, json } = await post(fake, {
        ...ask,
        model,
        thinking: { type: "adaptive", display: "summarized" },
      });
      assert.equal(status, 200, JSON.stringify(json));
    }
  }));

Deno.test("anthropic fake: an output format takes JSON Schema's subset only — no oneOf, no other string formats, no tuples, no recursion", () =>
  withAnthropic(async (fake) => {
    const ask = {
      model: "claude-opus-5-5",
      max_tokens: 4096,
      messages: [{ role: "user", content: "Hi" }],
    };
    const object = (properties: Record<string, unknown>) => ({
      type: "object",
      properties,
      required: Object.keys(properties),
      additionalProperties: false,
    });
    const refusal = async (schema: unknown) =>
      (await refused(fake, { ...ask, output_config: { format: { type: "json_schema", schema } } }))
        .message;
    assert.equal(
      await refusal(object({ a: { oneOf: [{ type: "string" }, { type: "number" }] } })),
      "output_config.format.schema.properties.a: For 'undefined' type, property 'oneOf' is not supported",
    );
    assert.equal(
      await refusal(object({ id: { type: "string", format: "cuid2" } })),
      "output_config.format.schema.properties.id: format 'cuid2' is not supported",
    );
    assert.match(
      await refusal(
        object({ p: { type: "array", prefixItems: [{ type: "string" }], items: false } }),
      ),
      /property 'prefixItems' is not supported/,
    );
    assert.equal(
      await refusal(object({ kids: { type: "array", items: { $ref: "#" } } })),
      "output_config.format.schema: Recursive schemas are not supported",
    );
    const fine = object({
      a: { anyOf: [{ type: "string" }, { type: "null" }] },
      at: { type: "string", format: "date-time" },
      n: { $ref: "#/$defs/N" },
    });
    const { status, json } = await post(fake, {
      ...ask,
      output_config: {
        format: { type: "json_schema", schema: { ...fine, $defs: { N: { type: "number" } } } },
      },
    });
    assert.equal(status, 200, JSON.stringify(json));
  }));

Deno.test("anthropic fake: a strict tool's schema takes the output format's subset, refused at the tool; a model before 4.5 takes no strict tool nor output format", () =>
  withAnthropic(async (fake) => {
    const ask = { max_tokens: 1024, messages: [{ role: "user", content: "Hi" }] };
    const tool = (input_schema: unknown) => ({ name: "w", input_schema, strict: true });
    const closed = {
      type: "object",
      properties: { days: { type: "array", items: { type: "string" }, maxItems: 3 } },
      required: ["days"],
      additionalProperties: false,
    };
    assert.equal(
      (await refused(fake, { ...ask, model: "claude-sonnet-4-5", tools: [tool(closed)] })).message,
      "tools.0.custom: For 'array' type, property 'maxItems' is not supported",
    );
    const { maxItems: _, ...days } = closed.properties.days;
    const fine = { ...closed, properties: { days } };
    assert.equal(
      (await refused(fake, {
        ...ask,
        model: "claude-sonnet-4-5",
        tools: [tool({ ...fine, additionalProperties: true })],
      })).message,
      "tools.0.custom: For 'object' type, 'additionalProperties' must be explicitly set to false",
    );
    // Unstrict, the same schema is taken.
    const unstrict = { ...tool(closed), strict: false };
    assert.equal((await post(fake, { ...ask, model: MODEL, tools: [unstrict] })).status, 200);
    for (const model of ["claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-opus-5-5"]) {
      const { status, json } = await post(fake, { ...ask, model, tools: [tool(fine)] });
      assert.equal(status, 200, `${model}: ${JSON.stringify(json)}`);
    }
    for (
      const model of ["claude-sonnet-4-20250514", "claude-opus-4-1", "claude-3-7-sonnet-latest"]
    ) {
      assert.equal(
        (await refused(fake, { ...ask, model, tools: [{ ...unstrict, name: "v" }, tool(fine)] }))
          .message,
        "tools.1.custom.strict: strict tool use is not supported for this model.",
        model,
      );
      assert.equal(
        (await refused(fake, {
          ...ask,
          model,
          output_config: { format: { type: "json_schema", schema: fine } },
        })).message,
        "output_config.format: structured outputs are not supported for this model.",
      );
    }
  }));

Deno.test("anthropic fake: a request's strict schemas are held to the stated limits together, output format included: 20 strict tools, 24 optional parameters, 16 with union types", () =>
  withAnthropic(async (fake) => {
    const ask = {
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      messages: [{ role: "user", content: "Hi" }],
    };
    const schema = (names: string[], type: unknown, required: boolean) => ({
      type: "object",
      properties: Object.fromEntries(names.map((n) => [n, { type }])),
      required: required ? names : [],
      additionalProperties: false,
    });
    const names = (n: number, prefix = "f") => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
    const tools = (n: number, s = schema([], "string", true)) =>
      Array.from({ length: n }, (_, i) => ({ name: `t${i}`, input_schema: s, strict: true }));
    assert.equal((await post(fake, { ...ask, tools: tools(20) })).status, 200);
    assert.match((await refused(fake, { ...ask, tools: tools(21) })).message, /strict tools/);
    // 21 tools of which only 20 strict are taken.
    const mixed = [...tools(20), { name: "loose", input_schema: { type: "object" } }];
    assert.equal((await post(fake, { ...ask, tools: mixed })).status, 200);
    const optional = schema(names(24), "string", false);
    assert.equal((await post(fake, { ...ask, tools: tools(1, optional) })).status, 200);
    const format = (s: unknown) => ({
      output_config: { format: { type: "json_schema", schema: s } },
    });
    assert.match(
      (await refused(fake, {
        ...ask,
        tools: tools(1, optional),
        ...format(schema(["x"], "string", false)),
      })).message,
      /optional parameters/,
    );
    const unions = schema(names(16), ["string", "null"], true);
    assert.equal((await post(fake, { ...ask, tools: tools(1, unions) })).status, 200);
    assert.match(
      (await refused(fake, {
        ...ask,
        tools: [...tools(1, unions), { ...tools(1, unions)[0], name: "u" }],
      }))
        .message,
      /union types/,
    );
  }));
