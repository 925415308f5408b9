/**
 * The strict OpenAI fake, driven by the official SDK: the chat-completions dialect round trips
 * (tools, streaming tool-call fragments, images, structured outputs, reasoning models, logprobs,
 * cached tokens), and each validation rule refuses what OpenAI refuses, in OpenAI's words.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { jpegBase64, pngBase64 } from "./common.ts";
import {
  openAiImageTokens,
  type OpenAiUpstream,
  type OpenAiUpstreamOptions,
  startOpenAiUpstream,
  tokenCount,
} from "./openai_upstream.ts";

async function withOpenAi(
  fn: (fake: OpenAiUpstream, client: OpenAI) => Promise<void>,
  options: OpenAiUpstreamOptions = {},
) {
  const fake = startOpenAiUpstream(options);
  const client = new OpenAI({ apiKey: fake.apiKey, baseURL: fake.baseUrl, maxRetries: 0 });
  try {
    await fn(fake, client);
  } finally {
    await fake.close();
  }
}

interface Refusal {
  status: number | undefined;
  message: string;
  type: string;
  param: string | null;
  code: string | null;
}

/** The error OpenAI would answer: status and body.error, whatever the SDK made of it. */
async function refusal(promise: Promise<unknown>): Promise<Refusal> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof OpenAI.APIError) {
      return { status: error.status, ...(error.error as Omit<Refusal, "status">) };
    }
    throw error;
  }
  assert.fail("expected OpenAI to refuse the request");
}

const WEATHER_TOOL = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Get the current weather in a given location.",
    parameters: {
      type: "object",
      properties: {
        location: { type: "string", description: "The city, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["location"],
    },
  },
};

Deno.test("openai fake: a full tool round trip with the SDK, non-streamed", () =>
  withOpenAi(async (fake, client) => {
    fake.script({
      toolCalls: [{ id: "call_1", name: "get_weather", arguments: { location: "Paris" } }],
    });
    const first = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [
        { role: "developer", content: "Answer briefly." },
        { role: "user", content: "What's the weather in Paris?" },
      ],
      tools: [WEATHER_TOOL],
      tool_choice: "auto",
    });
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, null);
    const call = choice.message.tool_calls![0];
    assert.equal(call.type, "function");
    assert.ok(call.type === "function");
    assert.deepEqual(JSON.parse(call.function.arguments), { location: "Paris" });
    // prompt_tokens counts the messages and the tool definitions.
    assert.equal(first.usage!.prompt_tokens, fake.chats[0].promptTokens);
    const withoutTools = fake.promptTokens({ ...fake.chats[0].body, tools: undefined });
    assert.ok(first.usage!.prompt_tokens > withoutTools + 20);

    fake.script({ content: "It is 21 °C and sunny in Paris." });
    const second = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [
        { role: "user", content: "What's the weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: "call_1", content: "21 °C, sunny" },
      ],
      tools: [WEATHER_TOOL],
    });
    assert.equal(second.choices[0].message.content, "It is 21 °C and sunny in Paris.");
    assert.equal(second.choices[0].finish_reason, "stop");
    assert.equal(second.usage!.completion_tokens, tokenCount("It is 21 °C and sunny in Paris."));
    // What reached the upstream: the tool message, as sent.
    const sent = fake.chats[1].body.messages;
    assert.deepEqual(sent[2], { role: "tool", tool_call_id: "call_1", content: "21 °C, sunny" });
    assert.equal(fake.received[1].headers.authorization, `Bearer ${fake.apiKey}`);
  }));

Deno.test("openai fake: streamed parallel tool calls arrive as OpenAI fragments the SDK assembles", () =>
  withOpenAi(async (fake, client) => {
    const answer = {
      content: "Checking both.",
      toolCalls: [
        { name: "get_weather", arguments: { location: "Paris", unit: "celsius" } },
        { name: "get_weather", arguments: { location: "Rome" } },
      ],
    };
    fake.script(answer);
    const stream = client.chat.completions.stream({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Weather in Paris and Rome?" }],
      tools: [WEATHER_TOOL],
      stream_options: { include_usage: true },
    });
    const final = await stream.finalChatCompletion();
    const calls = final.choices[0].message.tool_calls!;
    assert.equal(final.choices[0].finish_reason, "tool_calls");
    assert.equal(final.choices[0].message.content, "Checking both.");
    assert.deepEqual(
      calls.map((c) => c.type === "function" && JSON.parse(c.function.arguments)),
      [{ location: "Paris", unit: "celsius" }, { location: "Rome" }],
    );
    assert.ok(final.usage && final.usage.prompt_tokens > 0);

    // The raw chunks: a role chunk, then per call a first fragment (index, id, type, name, "")
    // and argument pieces carrying the index only; usage null on each, then a usage chunk.
    fake.script(answer);
    const res = await fetch(`${fake.baseUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fake.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "gpt-4o",
        messages: [{ role: "user", content: "Weather?" }],
        tools: [WEATHER_TOOL],
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    assert.match(res.headers.get("content-type")!, /^text\/event-stream/);
    const text = await res.text();
    const blocks = text.split("\n\n").filter(Boolean);
    assert.equal(blocks.at(-1), "data: [DONE]");
    const chunks = blocks.slice(0, -1).map((b) => JSON.parse(b.slice(6)));
    assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "", refusal: null });
    const fragments = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
    const starts = fragments.filter((f) => f.id);
    assert.deepEqual(
      starts.map((f) => [f.index, f.type, f.function.name, f.function.arguments]),
      [[0, "function", "get_weather", ""], [1, "function", "get_weather", ""]],
    );
    for (const f of fragments.filter((f) => !f.id)) {
      assert.deepEqual(Object.keys(f).sort(), ["function", "index"]);
      assert.deepEqual(Object.keys(f.function), ["arguments"]);
    }
    const finish = chunks.at(-2);
    assert.deepEqual(finish.choices[0], {
      index: 0,
      delta: {},
      logprobs: null,
      finish_reason: "tool_calls",
    });
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(
      usage.usage.total_tokens,
      usage.usage.prompt_tokens + usage.usage.completion_tokens,
    );
    assert.ok(chunks.slice(0, -1).every((c) => c.usage === null));
  }));

Deno.test("openai fake: images are billed by OpenAI's tile rule, read from the data URL or configured", () =>
  withOpenAi(async (fake, client) => {
    const url = "https://example.test/cat.jpg";
    const body = (detail: "low" | "high", image: string) => ({
      model: "gpt-4o",
      messages: [{
        role: "user" as const,
        content: [
          { type: "text" as const, text: "What is in this image?" },
          { type: "image_url" as const, image_url: { url: image, detail } },
        ],
      }],
    });
    const textOnly = fake.promptTokens({
      model: "gpt-4o",
      messages: [{ role: "user", content: [{ type: "text", text: "What is in this image?" }] }],
    });
    const high = await client.chat.completions.create(
      body("high", `data:image/png;base64,${pngBase64(1024, 1024)}`),
    );
    // 1024² → shortest side 768 → 2×2 tiles: 170 × 4 + 85.
    assert.equal(high.usage!.prompt_tokens, textOnly + 765);
    const low = await client.chat.completions.create(
      body("low", `data:image/jpeg;base64,${jpegBase64(4000, 3000)}`),
    );
    assert.equal(low.usage!.prompt_tokens, textOnly + 85);
    const remote = await client.chat.completions.create(body("high", url));
    assert.equal(remote.usage!.prompt_tokens, textOnly + openAiImageTokens(2048, 4096, "high"));
    assert.equal(openAiImageTokens(2048, 4096, "high"), 1105); // 1024×2048 → 768×1536: 2×3 tiles
    // A URL OpenAI cannot fetch (not configured here) is refused as OpenAI refuses it.
    const missing = await refusal(
      client.chat.completions.create(body("high", "https://example.test/none.png")),
    );
    assert.equal(missing.status, 400);
    assert.equal(missing.message, "Error while downloading https://example.test/none.png.");
    assert.equal(missing.code, "invalid_image_url");
  }, { imageSizes: { "https://example.test/cat.jpg": { width: 2048, height: 4096 } } }));

Deno.test("openai fake: reasoning models refuse max_tokens and sampling, bill reasoning tokens", () =>
  withOpenAi(async (fake, client) => {
    const messages = [{ role: "user" as const, content: "Think, then answer: 2+2?" }];
    const maxTokens = await refusal(
      client.chat.completions.create({ model: "o3-mini", messages, max_tokens: 100 }),
    );
    assert.deepEqual(maxTokens, {
      status: 400,
      message:
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
      type: "invalid_request_error",
      param: "max_tokens",
      code: "unsupported_parameter",
    });
    const temperature = await refusal(
      client.chat.completions.create({ model: "gpt-5", messages, temperature: 0.2 }),
    );
    assert.equal(
      temperature.message,
      "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported.",
    );
    assert.equal(temperature.code, "unsupported_value");
    const topP = await refusal(
      client.chat.completions.create({ model: "o1", messages, top_p: 0.5 }),
    );
    assert.equal(topP.message, "Unsupported parameter: 'top_p' is not supported with this model.");
    const effort = await refusal(
      client.chat.completions.create({ model: "gpt-4o", messages, reasoning_effort: "low" }),
    );
    assert.equal(
      effort.message,
      "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
    );

    fake.script({ content: "4", reasoningTokens: 320 });
    const ok = await client.chat.completions.create({
      model: "o3-mini",
      messages,
      max_completion_tokens: 1000,
      reasoning_effort: "low",
      temperature: 1,
    });
    assert.equal(ok.choices[0].message.content, "4");
    assert.equal(ok.usage!.completion_tokens_details!.reasoning_tokens, 320);
    assert.equal(ok.usage!.completion_tokens, 321);
    // Reasoning spends the whole budget: no visible answer, finish_reason length.
    fake.script({ content: "4", reasoningTokens: 500 });
    const cut = await client.chat.completions.create({
      model: "o3-mini",
      messages,
      max_completion_tokens: 200,
    });
    assert.equal(cut.choices[0].finish_reason, "length");
    assert.equal(cut.choices[0].message.content, "");
    assert.equal(cut.usage!.completion_tokens, 200);
  }));

Deno.test("openai fake: structured outputs — json_schema strict rules and json_object's word", () =>
  withOpenAi(async (fake, client) => {
    const schema = {
      type: "object",
      properties: { answer: { type: "string" }, confidence: { type: "number" } },
      required: ["answer", "confidence"],
      additionalProperties: false,
    };
    fake.script({ content: '{"answer":"Paris","confidence":0.9}' });
    const ok = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Capital of France?" }],
      response_format: {
        type: "json_schema",
        json_schema: { name: "capital", schema, strict: true },
      },
    });
    assert.deepEqual(JSON.parse(ok.choices[0].message.content!), {
      answer: "Paris",
      confidence: 0.9,
    });
    const plain = fake.promptTokens({ ...fake.chats[0].body, response_format: undefined });
    assert.ok(ok.usage!.prompt_tokens > plain + tokenCount(JSON.stringify(schema)));

    const loose = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Capital of France?" }],
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "capital",
          strict: true,
          schema: {
            type: "object",
            properties: { answer: { type: "string" } },
            required: ["answer"],
          },
        },
      },
    }));
    assert.equal(
      loose.message,
      "Invalid schema for response_format 'capital': In context=(), 'additionalProperties' is required to be supplied and to be false.",
    );
    const partial = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Weather?" }],
      tools: [{
        type: "function",
        function: {
          ...WEATHER_TOOL.function,
          strict: true,
          parameters: { ...WEATHER_TOOL.function.parameters, additionalProperties: false },
        },
      }],
    }));
    assert.equal(
      partial.message,
      "Invalid schema for function 'get_weather': In context=(), 'required' is required to be supplied and to be an array including every key in properties. Missing 'unit'.",
    );
    const noJson = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Capital of France?" }],
      response_format: { type: "json_object" },
    }));
    assert.equal(
      noJson.message,
      "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
    );
  }));

Deno.test("openai fake: tool messages must answer the assistant's tool_calls, all of them", () =>
  withOpenAi(async (_fake, client) => {
    const call = {
      id: "call_A",
      type: "function" as const,
      function: { name: "get_weather", arguments: '{"location":"Paris"}' },
    };
    const unanswered = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      tools: [WEATHER_TOOL],
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: "", tool_calls: [call, { ...call, id: "call_B" }] },
        { role: "tool", tool_call_id: "call_A", content: "sunny" },
        { role: "user", content: "And?" },
      ],
    }));
    assert.deepEqual(unanswered, {
      status: 400,
      message:
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_B",
      type: "invalid_request_error",
      param: "messages.[3].role",
      code: null,
    });
    const orphan = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [
        { role: "user", content: "Weather?" },
        { role: "tool", tool_call_id: "call_A", content: "sunny" },
      ],
    }));
    assert.equal(
      orphan.message,
      "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
    );
    assert.equal(orphan.param, "messages.[1].role");
    const noContent = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }, { role: "assistant" }, {
        role: "user",
        content: "Hi?",
      }],
    }));
    assert.equal(noContent.message, "Invalid value for 'content': expected a string, got null.");
  }));

Deno.test("openai fake: unknown parameters and malformed fields are refused in OpenAI's words", () =>
  withOpenAi(async (_fake, client) => {
    const base = { model: "gpt-4o", messages: [{ role: "user" as const, content: "Hi" }] };
    const unknown = await refusal(
      client.chat.completions.create({ ...base, frobnicate: 1 } as never),
    );
    assert.deepEqual(unknown, {
      status: 400,
      message: "Unrecognized request argument supplied: frobnicate",
      type: "invalid_request_error",
      param: null,
      code: null,
    });
    const nested = await refusal(client.chat.completions.create({
      ...base,
      messages: [{ role: "user", content: "Hi", foo: 1 }],
    } as never));
    assert.equal(nested.message, "Unknown parameter: 'messages[0].foo'.");
    assert.equal(nested.code, "unknown_parameter");
    const empty = await refusal(client.chat.completions.create({ ...base, messages: [] }));
    assert.equal(
      empty.message,
      "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
    );
    const hot = await refusal(client.chat.completions.create({ ...base, temperature: 3 }));
    assert.equal(
      hot.message,
      "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.",
    );
    assert.equal(hot.code, "decimal_above_max_value");
    const type = await refusal(
      client.chat.completions.create({ ...base, max_tokens: "ten" } as never),
    );
    assert.equal(
      type.message,
      "Invalid type for 'max_tokens': expected an integer, but got a string instead.",
    );
    const role = await refusal(client.chat.completions.create({
      ...base,
      messages: [{ role: "robot", content: "Hi" }],
    } as never));
    assert.equal(
      role.message,
      "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
    );
    const part = await refusal(client.chat.completions.create({
      ...base,
      messages: [{ role: "system", content: [{ type: "image_url", image_url: { url: "x" } }] }],
    } as never));
    assert.equal(part.message, "Invalid value: 'image_url'. Supported values are: 'text'.");
    assert.equal(part.param, "messages[0].content[0].type");
    const streamOptions = await refusal(client.chat.completions.create({
      ...base,
      stream_options: { include_usage: true },
    }));
    assert.equal(
      streamOptions.message,
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
    );
    const metadata = await refusal(
      client.chat.completions.create({ ...base, metadata: { a: "b" } }),
    );
    assert.equal(
      metadata.message,
      "The 'metadata' parameter is only allowed when 'store' is enabled.",
    );
    assert.equal(metadata.param, "metadata");
    const choice = await refusal(client.chat.completions.create({ ...base, tool_choice: "auto" }));
    assert.equal(
      choice.message,
      "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
    );
  }));

Deno.test("openai fake: the newer unknown-parameter wording, when asked for", () =>
  withOpenAi(async (_fake, client) => {
    const refused = await refusal(client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
      reasoning: { effort: "low" },
    } as never));
    assert.equal(refused.message, "Unknown parameter: 'reasoning'.");
    assert.equal(refused.code, "unknown_parameter");
  }, { unknownParameterStyle: "unknown_parameter" }));

Deno.test("openai fake: keys are checked as OpenAI checks them", () =>
  withOpenAi(async (fake) => {
    const wrong = new OpenAI({
      apiKey: "sk-proj-wrongkey1234",
      baseURL: fake.baseUrl,
      maxRetries: 0,
    });
    const refused = await refusal(
      wrong.chat.completions.create({
        model: "gpt-4o",
        messages: [{ role: "user", content: "Hi" }],
      }),
    );
    assert.equal(refused.status, 401);
    assert.equal(
      refused.message,
      "Incorrect API key provided: sk-proj-****1234. You can find your API key at https://platform.openai.com/account/api-keys.",
    );
    assert.equal(refused.code, "invalid_api_key");
    const none = await fetch(`${fake.baseUrl}/chat/completions`, { method: "POST", body: "{}" });
    assert.equal(none.status, 401);
    assert.match((await none.json()).error.message, /^You didn't provide an API key\./);
  }));

Deno.test("openai fake: logprobs, refusals, n and cached prompt tokens", () =>
  withOpenAi(async (fake, client) => {
    fake.script({ content: "Hello!", logprob: -0.25 });
    const withLogprobs = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
      logprobs: true,
      top_logprobs: 2,
    });
    const lp = withLogprobs.choices[0].logprobs!.content!;
    assert.deepEqual(lp.map((t) => t.token), ["Hello", "!"]);
    assert.deepEqual(lp[0].bytes, [72, 101, 108, 108, 111]);
    assert.equal(lp[0].logprob, -0.25);
    assert.equal(lp[0].top_logprobs.length, 2);

    fake.script({ refusal: "I can't help with that." });
    const refused = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Something bad" }],
    });
    assert.equal(refused.choices[0].message.content, null);
    assert.equal(refused.choices[0].message.refusal, "I can't help with that.");

    fake.script({ content: "Two answers." });
    const two = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
      n: 2,
    });
    assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
    assert.equal(two.usage!.completion_tokens, 2 * tokenCount("Two answers."));

    const long = "The quick brown fox jumps over the lazy dog. ".repeat(120);
    fake.script({ content: "Cached.", cachedTokens: 1024 }, {
      content: "Short.",
      cachedTokens: 1024,
    });
    const cached = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "system", content: long }, { role: "user", content: "Summarize." }],
    });
    assert.ok(cached.usage!.prompt_tokens >= 1024);
    assert.equal(cached.usage!.prompt_tokens_details!.cached_tokens, 1024);
    // Prompts under 1,024 tokens are never cached (prompt-caching guide).
    const short = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
    });
    assert.equal(short.usage!.prompt_tokens_details!.cached_tokens, 0);
  }));

Deno.test("openai fake: token limits, context windows and per-model output caps", () =>
  withOpenAi(async (fake, client) => {
    fake.script({ content: "one two three four five six seven eight nine ten" });
    const truncated = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Count to ten." }],
      max_tokens: 3,
    });
    assert.equal(truncated.choices[0].finish_reason, "length");
    assert.equal(truncated.usage!.completion_tokens, 3);
    const tooLarge = await refusal(client.chat.completions.create({
      model: "small",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 5000,
    }));
    assert.equal(
      tooLarge.message,
      "max_tokens is too large: 5000. This model supports at most 4096 completion tokens, whereas you provided 5000.",
    );
    const tooLong = await refusal(client.chat.completions.create({
      model: "small",
      messages: [{ role: "user", content: "word ".repeat(200) }],
    }));
    assert.equal(tooLong.code, "context_length_exceeded");
    assert.match(tooLong.message, /^This model's maximum context length is 100 tokens\./);
    const unknownModel = await refusal(
      client.chat.completions.create({
        model: "gpt-nope",
        messages: [{ role: "user", content: "Hi" }],
      }),
    );
    assert.equal(unknownModel.status, 404);
    assert.equal(unknownModel.code, "model_not_found");
  }, {
    models: { small: { contextWindow: 100, maxOutputTokens: 4096 }, "gpt-4o": {} },
    onlyKnownModels: true,
  }));

Deno.test("openai fake: fault knobs — scripted statuses, delays, cut streams, the old fake's commands", () =>
  withOpenAi(async (fake, client) => {
    fake.script({
      status: 429,
      error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" },
      headers: { "retry-after": "7" },
    });
    const limited = await refusal(
      client.chat.completions.create({
        model: "gpt-4o",
        messages: [{ role: "user", content: "Hi" }],
      }),
    );
    assert.equal(limited.status, 429);
    assert.equal(limited.code, "rate_limit_exceeded");
    assert.equal(fake.received[0].status, 429);

    fake.script({ content: "a b c d e f", cutAfterEvents: 3 });
    const stream = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
    });
    const seen: string[] = [];
    await assert.rejects(async () => {
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta.content ?? "");
    });
    assert.equal(seen.length, 3);
    assert.equal(fake.counts.cut, 1);

    fake.script({ content: "late", delayMs: 150 });
    const started = Date.now();
    await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
    });
    assert.ok(Date.now() - started >= 140);

    // Time between chunks.
    fake.script({ content: "a b c", contentChunks: ["a", " b", " c"], chunkDelayMs: 40 });
    const slowStart = Date.now();
    const slow = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
    });
    let slowText = "";
    for await (const chunk of slow) slowText += chunk.choices[0]?.delta.content ?? "";
    assert.equal(slowText, "a b c");
    assert.ok(Date.now() - slowStart >= 4 * 40, "five events, four gaps");

    // With nothing scripted, the old fake's commands still work.
    const echoed = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "hello there upstream" }],
    });
    assert.equal(echoed.choices[0].message.content, "hello there upstream");
    const failing = await refusal(
      client.chat.completions.create({
        model: "gpt-4o",
        messages: [{ role: "user", content: "status:503" }],
      }),
    );
    assert.equal(failing.status, 503);
    assert.equal(failing.type, "server_error");
  }));

Deno.test("openai fake: embeddings (the SDK's base64 default) and models", () =>
  withOpenAi(async (fake, client) => {
    const embedded = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: ["hello world", "hello world", "goodbye"],
    });
    assert.equal(embedded.data.length, 3);
    assert.equal(embedded.data[0].embedding.length, 1536);
    assert.deepEqual(embedded.data[0].embedding, embedded.data[1].embedding);
    assert.notDeepEqual(embedded.data[0].embedding, embedded.data[2].embedding);
    assert.equal(
      embedded.usage.prompt_tokens,
      2 * tokenCount("hello world") + tokenCount("goodbye"),
    );
    assert.equal((fake.received[0].body as { encoding_format: string }).encoding_format, "base64");
    const small = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: "x",
      dimensions: 8,
      encoding_format: "float",
    });
    assert.equal(small.data[0].embedding.length, 8);
    const models = await client.models.list();
    assert.ok(models.data.some((m) => m.id === "gpt-4o"));
    const notFound = await fetch(`${fake.baseUrl}/nothing`, {
      method: "POST",
      headers: { authorization: `Bearer ${fake.apiKey}` },
    });
    assert.equal(notFound.status, 404);
    assert.equal((await notFound.json()).error.message, "Invalid URL (POST /v1/nothing)");
  }));

Deno.test("openai fake: allowed_tools name declared tools", () =>
  withOpenAi(async (fake, client) => {
    const messages = [{ role: "user" as const, content: "Weather?" }];
    const allowed = (name: string) => ({
      type: "allowed_tools" as const,
      allowed_tools: {
        mode: "auto" as const,
        tools: [{ type: "function", function: { name } }],
      },
    });
    await client.chat.completions.create({
      model: "gpt-5",
      messages,
      tools: [WEATHER_TOOL],
      tool_choice: allowed("get_weather"),
    });
    const undeclared = await refusal(client.chat.completions.create({
      model: "gpt-5",
      messages,
      tools: [WEATHER_TOOL],
      tool_choice: allowed("get_news"),
    }));
    assert.equal(undeclared.status, 400);
    assert.equal(undeclared.param, "tool_choice");
    assert.equal(fake.chats.length, 1);
  }));

Deno.test("openai fake: a tool message may carry the tool's name, as OpenAI's cookbook sends it", () =>
  withOpenAi(async (fake, client) => {
    const messages = [{ role: "user" as const, content: "Weather?" }];
    await client.chat.completions.create({
      model: "gpt-5",
      messages: [
        ...messages,
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: "{}" },
          }],
        },
        { role: "tool", tool_call_id: "call_1", content: "sunny", name: "get_weather" } as never,
      ],
      tools: [WEATHER_TOOL],
    });
    assert.equal(fake.chats[0].body.messages[2].name, "get_weather");
  }));
