/**
 * The strict fakes answer in the shape of the providers' documented examples (tests/fixtures,
 * sources in tests/fixtures/README.md): for the same script, every field a fixture has is in the
 * fake's answer with the same JSON type, and a stream's event sequence — collapsing runs of the
 * same delta kind, whose count depends on tokenization — is the documented one.
 */
import assert from "node:assert/strict";
import { startAnthropicUpstream } from "./anthropic_upstream.ts";
import { startOpenAiUpstream } from "./openai_upstream.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

function fixture(name: string): string {
  return Deno.readTextFileSync(new URL(`../fixtures/${name}`, import.meta.url));
}

function kind(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

/** Every field of `expected` is in `actual`, with the same JSON type, recursively. */
export function assertShapeIncludes(actual: unknown, expected: unknown, path = "$") {
  assert.equal(
    kind(actual),
    kind(expected),
    `${path}: ${kind(actual)} where the fixture has ${kind(expected)}`,
  );
  if (Array.isArray(expected)) {
    const a = actual as unknown[];
    if (expected.length && a.length) {
      // Arrays of blocks/choices/tool calls compare pairwise; longer ones compare their first.
      const pairs = expected.length === a.length ? expected.length : 1;
      for (let i = 0; i < pairs; i++) assertShapeIncludes(a[i], expected[i], `${path}[${i}]`);
    }
  } else if (expected && typeof expected === "object") {
    for (const [key, value] of Object.entries(expected)) {
      assert.ok(key in (actual as object), `${path}.${key} is missing`);
      assertShapeIncludes((actual as Json)[key], value, `${path}.${key}`);
    }
  }
}

/** An SSE text as its events: [event name or "", parsed data or the raw "[DONE]"]. */
function parseSse(text: string): { event: string; data: Json }[] {
  return text.split("\n\n").filter((b) => b.trim()).map((block) => {
    const event = /^event: (.*)$/m.exec(block)?.[1] ?? "";
    const data = /^data: (.*)$/m.exec(block)![1];
    return { event, data: data === "[DONE]" ? data : JSON.parse(data) };
  });
}

function collapse(kinds: string[]): string[] {
  return kinds.filter((k, i) => k !== kinds[i - 1]);
}

function openAiKind(chunk: Json): string {
  if (chunk === "[DONE]") return "done";
  if (!chunk.choices.length) return "usage";
  const { delta, finish_reason } = chunk.choices[0];
  if (finish_reason) return `finish:${finish_reason}`;
  if (delta.role) return delta.tool_calls ? "role+tool_call_start" : "role";
  if (delta.tool_calls) return delta.tool_calls[0].id ? "tool_call_start" : "tool_call_arguments";
  if ("content" in delta) return "content";
  if ("refusal" in delta) return "refusal";
  return "other";
}

function anthropicKind(event: Json): string {
  const sub = event.delta?.type ?? event.content_block?.type ?? "";
  return sub ? `${event.type}:${sub}` : event.type;
}

/** Compares a fake's stream with a fixture stream: sequences, then each event's shape. */
function assertStreamLike(
  actual: { event: string; data: Json }[],
  expected: { event: string; data: Json }[],
  kindOf: (data: Json) => string,
) {
  // Pings may come anywhere ("Event streams may also include any number of ping events").
  const a = actual.filter((e) => e.data?.type !== "ping");
  const x = expected.filter((e) => e.data?.type !== "ping");
  assert.deepEqual(collapse(a.map((e) => kindOf(e.data))), collapse(x.map((e) => kindOf(e.data))));
  for (const e of a) {
    assert.equal(e.event, e.data?.type ?? "", "the SSE event name is the data's type");
  }
  for (const ex of x) {
    const match = a.find((e) => kindOf(e.data) === kindOf(ex.data));
    assertShapeIncludes(match!.data, ex.data, kindOf(ex.data));
  }
}

async function postJson(url: string, headers: Record<string, string>, body: unknown) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200);
  return res;
}

Deno.test("fixtures: the OpenAI fake answers in the documented completion shapes", async () => {
  const fake = startOpenAiUpstream();
  const auth = { authorization: `Bearer ${fake.apiKey}` };
  const url = `${fake.baseUrl}/chat/completions`;
  try {
    fake.script({ content: "Hello! How can I assist you today?" });
    const text = await postJson(url, auth, {
      model: "gpt-4.1",
      messages: [{ role: "user", content: "Hello!" }],
    });
    assertShapeIncludes(await text.json(), JSON.parse(fixture("openai_completion.json")));

    fake.script({
      toolCalls: [{ name: "get_current_weather", arguments: '{\n"location": "Boston, MA"\n}' }],
    });
    const tools = await postJson(url, auth, {
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "What's the weather like in Boston today?" }],
      tools: [{
        type: "function",
        function: {
          name: "get_current_weather",
          description: "Get the current weather in a given location",
          parameters: {
            type: "object",
            properties: {
              location: {
                type: "string",
                description: "The city and state, e.g. San Francisco, CA",
              },
              unit: { type: "string", enum: ["celsius", "fahrenheit"] },
            },
            required: ["location"],
          },
        },
      }],
      tool_choice: "auto",
    });
    assertShapeIncludes(
      await tools.json(),
      JSON.parse(fixture("openai_completion_tool_calls.json")),
    );
  } finally {
    await fake.close();
  }
});

Deno.test("fixtures: the OpenAI fake streams as the documented chunk sequences", async () => {
  const fake = startOpenAiUpstream();
  const auth = { authorization: `Bearer ${fake.apiKey}` };
  const url = `${fake.baseUrl}/chat/completions`;
  try {
    fake.script({ content: "Hello!" });
    const text = await postJson(url, auth, {
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    assertStreamLike(
      parseSse(await text.text()),
      parseSse(fixture("openai_stream_usage_last.sse")),
      openAiKind,
    );

    fake.script({ toolCalls: [{ name: "get_weather", arguments: { location: "Paris, France" } }] });
    const tools = await postJson(url, auth, {
      model: "gpt-4o",
      messages: [{ role: "user", content: "What's the weather like in Paris today?" }],
      tools: [{
        type: "function",
        function: {
          name: "get_weather",
          parameters: { type: "object", properties: { location: { type: "string" } } },
        },
      }],
      stream: true,
      stream_options: { include_usage: true },
    });
    assertStreamLike(
      parseSse(await tools.text()),
      parseSse(fixture("openai_stream_tool_calls.sse")),
      openAiKind,
    );
  } finally {
    await fake.close();
  }
});

Deno.test("fixtures: the Anthropic fake answers and streams as the documented examples", async () => {
  const fake = startAnthropicUpstream();
  const headers = { "x-api-key": fake.apiKey, "anthropic-version": "2023-06-01" };
  const url = `${fake.url}/v1/messages`;
  const weather = {
    name: "get_weather",
    description: "Get the current weather in a given location",
    input_schema: {
      type: "object",
      properties: {
        location: { type: "string", description: "The city and state, e.g. San Francisco, CA" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["location"],
    },
  };
  const request = (stream: boolean, extra: Json = {}) => ({
    model: "claude-opus-4-6",
    max_tokens: 1024,
    messages: [{ role: "user", content: "What is the weather like in San Francisco?" }],
    stream,
    ...extra,
  });
  try {
    fake.script({ text: "Hello!" });
    const basic = await postJson(url, headers, request(false));
    assertShapeIncludes(await basic.json(), JSON.parse(fixture("anthropic_message_basic.json")));

    fake.script({ text: "Hello!" });
    const basicStream = await postJson(url, headers, request(true));
    assertStreamLike(
      parseSse(await basicStream.text()),
      parseSse(fixture("anthropic_stream_basic.sse")),
      anthropicKind,
    );

    const toolAnswer = {
      content: [
        { type: "text" as const, text: "I'll check the current weather in San Francisco for you." },
        {
          type: "tool_use" as const,
          name: "get_weather",
          input: { location: "San Francisco, CA", unit: "celsius" },
        },
      ],
    };
    fake.script(toolAnswer);
    const tool = await postJson(url, headers, request(false, { tools: [weather] }));
    assertShapeIncludes(await tool.json(), JSON.parse(fixture("anthropic_message_tool_use.json")));

    fake.script(toolAnswer);
    const toolStream = await postJson(url, headers, request(true, { tools: [weather] }));
    const events = parseSse(await toolStream.text());
    assertStreamLike(events, parseSse(fixture("anthropic_stream_tool_use.sse")), anthropicKind);
    // As in the docs: the ping follows the first block's start; tool input starts with "".
    assert.deepEqual(events.slice(0, 3).map((e) => e.event), [
      "message_start",
      "content_block_start",
      "ping",
    ]);
    const firstJson = events.find((e) => e.data.delta?.type === "input_json_delta");
    assert.equal(firstJson!.data.delta.partial_json, "");

    fake.script({
      content: [
        {
          type: "thinking",
          thinking:
            "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n1071 = 2 × 462 + 147\n462 = 3 × 147 + 21\n147 = 7 × 21 + 0\n\nSo GCD(1071, 462) = 21",
        },
        { type: "text", text: "The greatest common divisor of 1071 and 462 is **21**." },
      ],
    });
    const thinking = await postJson(url, headers, {
      model: "claude-opus-4-6",
      max_tokens: 20000,
      thinking: { type: "enabled", budget_tokens: 16000 },
      messages: [{ role: "user", content: "What is the greatest common divisor of 1071 and 462?" }],
      stream: true,
    });
    const thinkingEvents = parseSse(await thinking.text());
    assertStreamLike(
      thinkingEvents,
      parseSse(fixture("anthropic_stream_thinking.sse")),
      anthropicKind,
    );
    // One signature_delta, right before the thinking block stops.
    const signatureAt = thinkingEvents.findIndex((e) => e.data.delta?.type === "signature_delta");
    assert.equal(thinkingEvents[signatureAt + 1].data.type, "content_block_stop");
  } finally {
    await fake.close();
  }
});

Deno.test("fixtures: the OpenAI fake's Responses API answers and streams as the documented examples", async () => {
  const fake = startOpenAiUpstream();
  const auth = { authorization: `Bearer ${fake.apiKey}` };
  const url = `${fake.baseUrl}/responses`;
  // Output item events are told apart by the item's type, so each is compared with its own kind.
  const byType = (event: Json) => event.item ? `${event.type}:${event.item.type}` : event.type;
  try {
    fake.script({ content: "Once upon a time, a unicorn slept under the stars." });
    const basic = await postJson(url, auth, {
      model: "gpt-4.1",
      input: "Tell me a three sentence bedtime story about a unicorn.",
    });
    assertShapeIncludes(await basic.json(), JSON.parse(fixture("openai_response_basic.json")));

    fake.script({ content: "Hi there! How can I assist you today?" });
    const text = await postJson(url, auth, {
      model: "gpt-4.1",
      instructions: "You are a helpful assistant.",
      input: "Hello!",
      stream: true,
    });
    assertStreamLike(
      parseSse(await text.text()),
      parseSse(fixture("openai_responses_stream_text.sse")),
      byType,
    );

    const weather = {
      type: "function",
      name: "get_weather",
      description: "Get current temperature for a given location.",
      parameters: {
        type: "object",
        properties: {
          location: { type: "string", description: "City and country e.g. Bogotá, Colombia" },
        },
        required: ["location"],
        additionalProperties: false,
      },
      strict: true,
    };
    fake.script({ toolCalls: [{ name: "get_weather", arguments: { location: "Paris, France" } }] });
    const call = await postJson(url, auth, {
      model: "gpt-4.1",
      input: "What is the weather like in Paris today?",
      tools: [weather],
      stream: true,
    });
    assertStreamLike(
      parseSse(await call.text()),
      parseSse(fixture("openai_responses_stream_function_call.sse")),
      byType,
    );

    fake.script({
      reasoningTokens: 128,
      reasoningSummary: "**Retrieving weather for Florence**\n\nI need to answer the question.",
      toolCalls: [{ name: "weather", arguments: { location: "Florence, Italy" } }],
    });
    const reasoning = await postJson(url, auth, {
      model: "gpt-5",
      input: [
        { role: "developer", content: "You are a helpful assistant" },
        {
          role: "user",
          content: [{ type: "input_text", text: "What's the weather in Florence?" }],
        },
      ],
      reasoning: { effort: "high", summary: "auto" },
      include: ["reasoning.encrypted_content"],
      store: false,
      tools: [{ ...weather, name: "weather", strict: false }],
      stream: true,
    });
    const events = parseSse(await reasoning.text());
    assertStreamLike(events, parseSse(fixture("openai_responses_stream_reasoning.sse")), byType);
    // As on the wire: every event numbered in order; the reasoning item announced with its
    // encrypted content and an empty summary, done with the summary.
    assert.deepEqual(events.map((e) => e.data.sequence_number), events.map((_, i) => i));
    const added = events.find((e) => e.data.type === "response.output_item.added")!.data.item;
    assert.equal(added.type, "reasoning");
    assert.deepEqual(added.summary, []);
    assert.equal(typeof added.encrypted_content, "string");
  } finally {
    await fake.close();
  }
});
