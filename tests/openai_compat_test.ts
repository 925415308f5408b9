/**
 * The OpenAI-compatible provider against the shapes compatible servers really send, the families
 * configured through the catalog alone, and usage beyond the reservation.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { generateText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { formatUsd } from "@/lib/core/mod.ts";
import { countPromptTokens, countTextTokens } from "@/lib/gateway/tokens.ts";
import {
  assertAuditClean,
  readSse,
  serveLoopback,
  startService,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import {
  completionStream,
  cost,
  fixture,
  fixtureJson,
  sseEvents,
  sseResponse,
  startUpstreamService,
  UPSTREAM_KEY,
  upstreamModel,
} from "./upstreams.ts";

const START = 5_000_000;
const PROMPT = "Say hello";

function chunk(delta: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return `data: ${
    JSON.stringify({
      id: "chatcmpl-x",
      object: "chat.completion.chunk",
      created: 1733000000,
      model: "m",
      choices: [{ index: 0, delta, finish_reason: null }],
      ...extra,
    })
  }\n\n`;
}

function finalChunk(extra: Record<string, unknown> = {}) {
  return `data: ${
    JSON.stringify({
      id: "chatcmpl-x",
      object: "chat.completion.chunk",
      created: 1733000000,
      model: "m",
      choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
      ...extra,
    })
  }\n\n`;
}

async function withOpenAi(
  answer: (body: Record<string, unknown>, headers: Headers) => Response,
  fn: (s: TestService, apiKey: string, appId: string) => Promise<void>,
) {
  const fake = serveLoopback(async (req) => answer(await req.json(), req.headers));
  const s = await startUpstreamService({ up: { kind: "openai", base_url: fake.url } });
  try {
    const { apiKey, appId } = await s.newApp();
    await fn(s, apiKey, appId);
    assert.equal((await s.wallet(appId)).reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
}

function streamAsk(s: TestService, apiKey: string, model = "up/m") {
  return s.chat(apiKey, {
    model,
    messages: userMessage(PROMPT),
    stream: true,
    stream_options: { include_usage: true },
  });
}

async function streamed(res: Response) {
  assert.equal(res.status, 200);
  const data = await readSse(res);
  const chunks = data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d));
  return { data, chunks, usage: chunks.findLast((c) => c.usage)?.usage };
}

Deno.test("openai streaming with include_usage: every chunk says usage null, and the usage chunk repeats the stream's fingerprint and tier, as OpenAI's do", () =>
  withOpenAi(
    () => sseResponse(sseEvents(fixture("openai_stream_usage_last.sse"))),
    async (s, apiKey) => {
      const { chunks } = await streamed(await streamAsk(s, apiKey));
      const last = chunks.at(-1);
      assert.deepEqual(last.choices, []);
      for (const chunk of chunks.slice(0, -1)) {
        assert.ok("usage" in chunk && chunk.usage === null, JSON.stringify(chunk));
      }
      assert.equal(last.system_fingerprint, chunks[0].system_fingerprint);
      assert.ok(last.system_fingerprint);
      // Without include_usage no chunk mentions usage at all.
      const plain = await s.chat(apiKey, {
        model: "up/m",
        messages: userMessage(PROMPT),
        stream: true,
      });
      for (const chunk of (await streamed(plain)).chunks) assert.equal("usage" in chunk, false);
    },
  ));

Deno.test("openai non-streaming: the documented completion is billed from its usage", () =>
  withOpenAi(
    () => completionStream(fixtureJson("openai_completion.json")),
    async (s, apiKey, appId) => {
      const res = await s.chat(apiKey, { model: "up/m", messages: userMessage(PROMPT) });
      assert.equal(res.status, 200);
      const body = await res.json();
      assert.equal(body.model, "up/m");
      assert.equal(body.choices[0].message.content, "Hello! How can I assist you today?");
      assert.equal(body.usage.prompt_tokens, 19);
      assert.equal((await s.wallet(appId)).available, START - cost(19, 10));
    },
  ));

Deno.test("openai streaming: usage only in the last chunk with choices [] is billed", () =>
  withOpenAi((body) => {
    assert.deepEqual(body.stream_options, { include_usage: true });
    return sseResponse(sseEvents(fixture("openai_stream_usage_last.sse")));
  }, async (s, apiKey, appId) => {
    const { data, usage, chunks } = await streamed(await streamAsk(s, apiKey));
    assert.equal(data.at(-1), "[DONE]");
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""), "Hello!");
    assert.equal(usage.prompt_tokens, 9);
    assert.equal(usage.completion_tokens, 2);
    assert.equal(usage.cost, formatUsd(cost(9, 2)));
    assert.equal((await s.wallet(appId)).available, START - cost(9, 2));
  }));

Deno.test("openai streaming: a usage chunk with choices null is billed", () =>
  withOpenAi(
    () =>
      sseResponse([
        chunk({ role: "assistant", content: "Hi" }),
        finalChunk(),
        `data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m","choices":null,"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}\n\n`,
        "data: [DONE]\n\n",
      ]),
    async (s, apiKey, appId) => {
      const { usage } = await streamed(await streamAsk(s, apiKey));
      assert.equal(usage.completion_tokens, 1);
      assert.equal((await s.wallet(appId)).available, START - cost(7, 1));
    },
  ));

Deno.test("openai streaming: usage repeated cumulatively on every chunk is taken from the last, never summed", () =>
  withOpenAi(
    () =>
      sseResponse([
        chunk({ role: "assistant", content: "One" }, {
          usage: { prompt_tokens: 7, completion_tokens: 1, total_tokens: 8 },
        }),
        chunk({ content: " two" }, {
          usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 },
        }),
        finalChunk({ usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }),
        "data: [DONE]\n\n",
      ]),
    async (s, apiKey, appId) => {
      const { usage } = await streamed(await streamAsk(s, apiKey));
      assert.equal(usage.prompt_tokens, 7);
      assert.equal(usage.completion_tokens, 3);
      assert.equal((await s.wallet(appId)).available, START - cost(7, 3));
    },
  ));

Deno.test("openai streaming: no usage at all is counted with the tokenizer and marked so", () =>
  withOpenAi(
    () =>
      sseResponse([
        chunk({ role: "assistant", content: "Hello" }),
        chunk({ content: " there, friend" }),
        finalChunk(),
        "data: [DONE]\n\n",
      ]),
    async (s, apiKey, appId) => {
      const { usage } = await streamed(await streamAsk(s, apiKey));
      const prompt = countPromptTokens([{ content: PROMPT }]);
      const completion = countTextTokens("Hello there, friend");
      assert.equal(usage.prompt_tokens, prompt);
      assert.equal(usage.completion_tokens, completion);
      assert.equal((await s.wallet(appId)).available, START - cost(prompt, completion));
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.countedLocally, true);
      assert.equal(record.outcome, "completed");
    },
  ));

Deno.test("openai non-streaming: no usage is counted with the tokenizer and reported in the body", () =>
  withOpenAi(
    () =>
      completionStream({
        id: "x",
        object: "chat.completion",
        created: 1,
        model: "m",
        choices: [{
          index: 0,
          message: { role: "assistant", content: "Hello there" },
          finish_reason: "stop",
        }],
      }),
    async (s, apiKey, appId) => {
      const res = await s.chat(apiKey, { model: "up/m", messages: userMessage(PROMPT) });
      const body = await res.json();
      const prompt = countPromptTokens([{ content: PROMPT }]);
      assert.equal(body.usage.prompt_tokens, prompt);
      assert.equal(body.usage.completion_tokens, countTextTokens("Hello there"));
      assert.equal(
        (await s.wallet(appId)).available,
        START - cost(prompt, countTextTokens("Hello there")),
      );
    },
  ));

Deno.test("openai streaming: a stream that ends after finish_reason without [DONE] completes normally", () =>
  withOpenAi(
    () => sseResponse([chunk({ role: "assistant", content: "Hi" }), finalChunk()]),
    async (s, apiKey) => {
      const { data } = await streamed(await streamAsk(s, apiKey));
      assert.equal(data.at(-1), "[DONE]");
    },
  ));

Deno.test("openai streaming: an error object inside a 200 stream ends the client's stream with an error, produced tokens charged", () =>
  withOpenAi(
    () =>
      sseResponse([
        chunk({ role: "assistant", content: "Partial answer" }),
        `data: {"error":{"message":"The server had an error while processing your request.","type":"server_error"}}\n\n`,
      ]),
    async (s, apiKey, appId) => {
      const { data } = await streamed(await streamAsk(s, apiKey));
      assert.ok(!data.includes("[DONE]"));
      const error = JSON.parse(data.at(-1)!).error;
      assert.equal(error.code, "stream_interrupted");
      assert.match(error.message, /server had an error/);
      const prompt = countPromptTokens([{ content: PROMPT }]);
      assert.equal(
        (await s.wallet(appId)).available,
        START - cost(prompt, countTextTokens("Partial answer")),
      );
    },
  ));

Deno.test("openai streaming: an error object as the first event is a real 502, nothing charged", () =>
  withOpenAi(
    () => sseResponse([`data: {"error":{"message":"model overloaded","type":"server_error"}}\n\n`]),
    async (s, apiKey, appId) => {
      const res = await streamAsk(s, apiKey);
      assert.equal(res.status, 502);
      assert.equal((await res.json()).error.code, "provider_unreachable");
      assert.equal((await s.wallet(appId)).available, START);
    },
  ));

/** Where each family's OpenAI-compatible API lives, as the README documents it. */
const FAMILIES = {
  groq: { path: "/openai/v1", env: "GROQ_API_KEY" },
  together: { path: "/v1", env: "TOGETHER_API_KEY" },
  deepseek: { path: "/v1", env: "DEEPSEEK_API_KEY" },
  mistral: { path: "/v1", env: "MISTRAL_API_KEY" },
  gemini: { path: "/v1beta/openai", env: "GEMINI_API_KEY" },
  vllm: { path: "/v1", env: "VLLM_API_KEY" },
  ollama: { path: "/v1", env: "OLLAMA_API_KEY" },
};

Deno.test("each compatible family works through the catalog alone: kind, base_url and key env", async () => {
  const seen: { path: string; auth: string | null; model: unknown }[] = [];
  const fake = serveLoopback(async (req) => {
    const body = await req.json();
    seen.push({
      path: new URL(req.url).pathname,
      auth: req.headers.get("authorization"),
      model: body.model,
    });
    // Non-streamed requests are served from a stream too: both get the streamed fixture.
    return sseResponse(sseEvents(fixture("openai_stream_usage_last.sse")));
  });
  const env = Object.fromEntries(
    Object.entries(FAMILIES).map(([name, f]) => [f.env, `key-${name}`]),
  );
  const s = await startService({
    env,
    catalogFile: {
      providers: Object.fromEntries(
        Object.entries(FAMILIES).map((
          [name, f],
        ) => [name, { kind: "openai", base_url: `${fake.url}${f.path}`, api_key_env: f.env }]),
      ),
      models: Object.keys(FAMILIES).map((name) =>
        upstreamModel(`${name}/m`, name, `${name}-upstream`, {
          context_tokens: 32768,
          max_output_tokens: 4096,
        })
      ),
    },
  });
  try {
    const { apiKey, appId } = await s.newApp();
    let spent = 0;
    for (const [name, family] of Object.entries(FAMILIES)) {
      const plain = await s.chat(apiKey, { model: `${name}/m`, messages: userMessage(PROMPT) });
      assert.equal(plain.status, 200, name);
      assert.equal(plain.headers.get("tollbooth-provider"), name);
      assert.equal((await plain.json()).model, `${name}/m`);
      const { usage } = await streamed(await streamAsk(s, apiKey, `${name}/m`));
      assert.equal(usage.completion_tokens, 2);
      spent += 2 * cost(9, 2);
      for (const call of seen.splice(0)) {
        assert.equal(call.path, `${family.path}/chat/completions`);
        assert.equal(call.auth, `Bearer key-${name}`);
        assert.equal(call.model, `${name}-upstream`);
      }
    }
    assert.equal((await s.wallet(appId)).available, START - spent);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

Deno.test("compatible servers' error bodies reach the client with their reason, and a prompt too long is context_length_exceeded", async () => {
  const cases: { family: string; status: number; body: unknown; code: string; says: RegExp }[] = [
    {
      // Gemini's compatible endpoint: an array of one error.
      family: "gemini",
      status: 400,
      body: [{
        error: {
          code: 400,
          message:
            "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
          status: "INVALID_ARGUMENT",
        },
      }],
      code: "context_length_exceeded",
      says: /input token count \(1200293\)/,
    },
    {
      family: "gemini",
      status: 400,
      body: [{
        error: {
          code: 400,
          message:
            'Invalid JSON payload received. Unknown name "frequency_penalty": Cannot find field.',
          status: "INVALID_ARGUMENT",
        },
      }],
      code: "upstream_rejected",
      says: /Unknown name "frequency_penalty"/,
    },
    {
      // xAI: a gRPC status's words as `code`, the reason as `error`.
      family: "xai",
      status: 400,
      body: {
        code: "Client specified an invalid argument",
        error:
          "This model's maximum prompt length is 131072 but the request contains 136973 tokens.",
      },
      code: "context_length_exceeded",
      says: /maximum prompt length is 131072/,
    },
    {
      // Mistral: validation details under `message.detail`.
      family: "mistral",
      status: 422,
      body: {
        object: "error",
        message: {
          detail: [{
            type: "extra_forbidden",
            loc: ["body", "seed"],
            msg: "Extra inputs are not permitted",
            input: 1,
          }],
        },
        type: "invalid_request_error",
        param: null,
        code: null,
      },
      code: "upstream_rejected",
      says: /body\.seed: Extra inputs are not permitted/,
    },
    {
      // DeepSeek: a generic code, the cause in the words.
      family: "deepseek",
      status: 400,
      body: {
        error: {
          message:
            "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens.",
          type: "invalid_request_error",
          param: null,
          code: "invalid_request_error",
        },
      },
      code: "context_length_exceeded",
      says: /maximum context length is 65536/,
    },
  ];
  for (const { family, status, body, code, says } of cases) {
    await withOpenAi(() => Response.json(body, { status }), async (s, apiKey) => {
      const res = await s.chat(apiKey, { model: "up/m", messages: userMessage(PROMPT) });
      const { error } = await res.json();
      assert.equal(error.code, code, family);
      assert.match(error.message, says, family);
    });
  }
});

/**
 * As Gemini 3's compatible endpoint: a first turn calls get_weather with a thought signature in
 * the call's extra_content; a turn that answers a call without its signature is refused, one with
 * it is answered in text.
 */
function startGeminiFake() {
  const signature = { google: { thought_signature: "CiQB0e2Kb-signature==" } };
  const sent: Record<string, unknown>[] = [];
  const fake = serveLoopback(async (req) => {
    const body = await req.json();
    sent.push(body);
    const assistant = body.messages.find((m: { role: string }) => m.role === "assistant");
    if (assistant && !assistant.tool_calls?.[0]?.extra_content?.google?.thought_signature) {
      return Response.json([{
        error: {
          code: 400,
          message: "Function call is missing a thought_signature in functionCall parts.",
          status: "INVALID_ARGUMENT",
        },
      }], { status: 400 });
    }
    if (assistant) {
      return sseResponse([
        chunk({ role: "assistant", content: "20C and sunny." }),
        finalChunk({
          choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
          usage: { prompt_tokens: 50, completion_tokens: 5, total_tokens: 55 },
        }),
        "data: [DONE]\n\n",
      ]);
    }
    return sseResponse([
      chunk({
        role: "assistant",
        tool_calls: [{
          extra_content: signature,
          function: { arguments: "{}", name: "get_weather" },
          id: "call_a",
          type: "function",
        }],
      }),
      finalChunk({
        choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }],
        usage: { prompt_tokens: 30, completion_tokens: 10, total_tokens: 40 },
      }),
      "data: [DONE]\n\n",
    ]);
  });
  /** The extra_content of the call in the assistant turn of the last body sent. */
  const lastSentSignature = () => {
    const messages = sent.at(-1)!.messages as { role: string; tool_calls?: unknown[] }[];
    const assistant = messages.find((m) => m.role === "assistant")!;
    return (assistant.tool_calls![0] as { extra_content: unknown }).extra_content;
  };
  return { fake, signature, lastSentSignature };
}

Deno.test("Gemini 3's thought signature on a tool call reaches the client, streamed or not, and goes back upstream with the call", async () => {
  const { fake, signature, lastSentSignature } = startGeminiFake();
  const s = await startUpstreamService({ up: { kind: "openai", base_url: fake.url } }, [
    upstreamModel("up/gemini", "up", "gemini-3-pro-preview"),
  ]);
  try {
    const { apiKey } = await s.newApp();
    const tools = [{ type: "function", function: { name: "get_weather" } }];
    const ask = { model: "up/gemini", tools, messages: [{ role: "user", content: "Weather?" }] };
    const plain = await (await s.chat(apiKey, ask)).json();
    const call = plain.choices[0].message.tool_calls[0];
    assert.deepEqual(call.extra_content, signature, "kept in the assembled answer");
    const { chunks } = await streamed(await s.chat(apiKey, { ...ask, stream: true }));
    const streamedCall = chunks.find((c) => c.choices?.[0]?.delta?.tool_calls);
    assert.deepEqual(streamedCall.choices[0].delta.tool_calls[0].extra_content, signature);
    const next = await s.chat(apiKey, {
      ...ask,
      messages: [
        ...ask.messages,
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: "20C" },
      ],
    });
    assert.equal(next.status, 200, JSON.stringify(await next.clone().json()));
    await next.body?.cancel();
    assert.deepEqual(lastSentSignature(), signature);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

/** The events of a Responses stream (each block an `event:` line, then its `data:` line). */
function responseEvents(
  text: string,
): { type: string; response?: { output: Record<string, unknown>[] } }[] {
  return text.split("\n\n").flatMap((block) => {
    const data = block.split("\n").find((line) => line.startsWith("data: "));
    return data ? [JSON.parse(data.slice(6))] : [];
  });
}

Deno.test("Gemini 3's thought signature travels through the Responses API: on the function_call item, back as input or by previous_response_id", async () => {
  const { fake, signature, lastSentSignature } = startGeminiFake();
  const s = await startUpstreamService({ up: { kind: "openai", base_url: fake.url } }, [
    upstreamModel("up/gemini", "up", "gemini-3-pro-preview"),
  ]);
  try {
    const { apiKey } = await s.newApp();
    const tools = [{ type: "function", name: "get_weather", parameters: { type: "object" } }];
    const question = { role: "user", content: "Weather?" };
    for (const stream of [false, true]) {
      // Without storing: the output items go back as input, the call's extra_content with it.
      const first = await s.post(apiKey, "/responses", {
        model: "up/gemini",
        input: [question],
        tools,
        store: false,
        stream,
      });
      const output = stream
        ? responseEvents(await first.text()).findLast((e) => e.type === "response.completed")!
          .response!.output
        : (await first.json()).output;
      const call = output.find((item: { type: string }) => item.type === "function_call");
      assert.deepEqual(call.extra_content, signature, `on the item (stream: ${stream})`);
      const next = await s.post(apiKey, "/responses", {
        model: "up/gemini",
        input: [question, ...output, {
          type: "function_call_output",
          call_id: call.call_id,
          output: "20C",
        }],
        tools,
        store: false,
      });
      assert.equal(next.status, 200, JSON.stringify(await next.clone().json()));
      const answer = (await next.json()).output.find((i: { type: string }) => i.type === "message");
      assert.equal(answer.content[0].text, "20C and sunny.");
    }
    // Stored: previous_response_id carries it.
    const stored = await (await s.post(apiKey, "/responses", {
      model: "up/gemini",
      input: [question],
      tools,
    })).json();
    const call = stored.output.find((item: { type: string }) => item.type === "function_call");
    const continued = await s.post(apiKey, "/responses", {
      model: "up/gemini",
      previous_response_id: stored.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "20C" }],
      tools,
    });
    assert.equal(continued.status, 200, JSON.stringify(await continued.clone().json()));
    await continued.body?.cancel();
    assert.deepEqual(lastSentSignature(), signature);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

Deno.test("DeepSeek's thinking mode runs a tool loop with forward_reasoning_content, the reasoning sent back and held, as a fallback too", async () => {
  const reasoning = "I should call get_weather for Paris first. ".repeat(50);
  const reasoningTokens = countTextTokens(reasoning);
  const sent: Record<string, Record<string, unknown>[]> = { plain: [], ds: [] };
  // As DeepSeek's thinking mode (under /ds): a tool loop's turn without the reasoning that made its
  // calls is refused (api-docs.deepseek.com/guides/thinking_mode#tool-calls); it bills what it is
  // sent. Under /plain, a server that is never sent the reasoning; under /router, one that is down.
  const fake = serveLoopback(async (req) => {
    const family = new URL(req.url).pathname.split("/")[1];
    if (family === "router") return new Response("overloaded", { status: 503 });
    const body = await req.json();
    const i = body.messages.findIndex((m: { role: string }) => m.role === "assistant");
    sent[family].push(body.messages[i]);
    const thought = body.messages[i].reasoning_content;
    if (family === "ds" && typeof thought !== "string") {
      return Response.json({
        error: {
          message:
            `Missing \`reasoning_content\` field in the assistant message at message index ${i}.`,
          type: "invalid_request_error",
          param: null,
          code: "invalid_request_error",
        },
      }, { status: 400 });
    }
    const prompt = 40 + (thought ? countTextTokens(thought) : 0);
    return sseResponse([
      chunk({ role: "assistant", content: "It is 20C." }),
      finalChunk({
        usage: { prompt_tokens: prompt, completion_tokens: 5, total_tokens: prompt + 5 },
      }),
      "data: [DONE]\n\n",
    ]);
  });
  const provider = (family: string, forward: boolean) => ({
    kind: "openai" as const,
    base_url: `${fake.url}/${family}/v1`,
    api_key_env: "UPSTREAM_KEY",
    ...(forward ? { forward_reasoning_content: true } : {}),
  });
  const model = (id: string, provider: string, fallbacks: { provider: string }[] = []) =>
    upstreamModel(id, provider, "deepseek-reasoner", {
      fallbacks: fallbacks.map((f) => ({ ...f, upstream_model: "deepseek-reasoner" })),
      context_tokens: 65536,
      max_output_tokens: 4096,
    });
  const s = await startService({
    env: { UPSTREAM_KEY: "key" },
    catalogFile: {
      providers: {
        plain: provider("plain", false),
        ds: provider("ds", true),
        router: provider("router", false),
      },
      models: [
        model("plain/reasoner", "plain"),
        model("ds/reasoner", "ds"),
        model("routed/reasoner", "router", [{ provider: "ds" }]),
      ],
    },
  });
  try {
    const { apiKey, appId } = await s.newApp();
    const seen = new Set<string>();
    const ask = async (id: string, thought = reasoning) => {
      const res = await s.chat(apiKey, {
        model: id,
        tools: [{ type: "function", function: { name: "get_weather" } }],
        messages: [
          { role: "user", content: "Weather in Paris?" },
          {
            role: "assistant",
            content: "",
            reasoning_content: thought,
            tool_calls: [{
              id: "call_1",
              type: "function",
              function: { name: "get_weather", arguments: "{}" },
            }],
          },
          { role: "tool", tool_call_id: "call_1", content: "20C" },
        ],
        max_tokens: 100,
      });
      assert.equal(res.status, 200, id);
      await res.body?.cancel();
      const record = (await usageRecords(s.kv, appId)).find((r) => !seen.has(r.id))!;
      seen.add(record.id);
      return record;
    };
    const plain = await ask("plain/reasoner");
    assert.equal("reasoning_content" in sent.plain[0], false, "never sent where not asked for");
    const forwarded = await ask("ds/reasoner");
    assert.equal(sent.ds[0].reasoning_content, reasoning);
    assert.ok(
      forwarded.reserved - plain.reserved >= reasoningTokens * 2,
      `the hold covers the reasoning sent back: ${forwarded.reserved} against ${plain.reserved}`,
    );
    // The down router's bound leaves the reasoning out; the fallback it falls to is sent it.
    const routed = await ask("routed/reasoner");
    assert.equal(routed.provider, "ds");
    assert.equal(routed.reserved, forwarded.reserved, "held as the fallback that forwards");
    for (const r of [plain, forwarded, routed]) assert.equal(r.uncharged, 0, r.model);
    // An empty reasoning still goes back: DeepSeek wants the field, empty or not.
    await ask("ds/reasoner", "");
    assert.equal(sent.ds.at(-1)!.reasoning_content, "");
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

/** Mistral's answer to a field it does not know: 422 with pydantic's `extra_forbidden`. */
function mistralRefusal(field: string) {
  return Response.json({
    object: "error",
    message: {
      detail: [{
        type: "extra_forbidden",
        loc: ["body", field, "include_usage"],
        msg: "Extra inputs are not permitted",
        input: true,
      }],
    },
    type: "invalid_request_error",
    param: null,
    code: null,
  }, { status: 422 });
}

Deno.test('a server that refuses stream_options (Mistral\'s) is served with "stream_options": false in its catalog entry, billed by the usage it sends unasked', async () => {
  const bodies: Record<string, unknown>[] = [];
  const fake = serveLoopback(async (req) => {
    const body = await req.json();
    bodies.push(body);
    if ("stream_options" in body) return mistralRefusal("stream_options");
    // Mistral reports usage on its finishing chunk, unasked.
    return sseResponse([
      chunk({ role: "assistant", content: "Hello there" }),
      finalChunk({ usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } }),
      "data: [DONE]\n\n",
    ]);
  });
  const mistral = (streamOptions?: boolean) => ({
    kind: "openai" as const,
    base_url: `${fake.url}/v1`,
    api_key_env: "MISTRAL_API_KEY",
    ...(streamOptions === undefined ? {} : { stream_options: streamOptions }),
  });
  const model = (id: string, provider: string) =>
    upstreamModel(id, provider, "mistral-large-latest", {
      context_tokens: 32768,
      max_output_tokens: 4096,
    });
  const s = await startService({
    env: { MISTRAL_API_KEY: "key-mistral" },
    catalogFile: {
      providers: { mistral: mistral(false), asks: mistral() },
      models: [model("mistral/large", "mistral"), model("asks/large", "asks")],
    },
  });
  try {
    const { apiKey, appId } = await s.newApp();
    const plain = await s.chat(apiKey, { model: "mistral/large", messages: userMessage(PROMPT) });
    assert.equal(plain.status, 200);
    assert.equal((await plain.json()).usage.completion_tokens, 2);
    const { usage } = await streamed(await streamAsk(s, apiKey, "mistral/large"));
    assert.equal(usage.completion_tokens, 2);
    assert.ok(bodies.every((body) => !("stream_options" in body)), "never sent, the client's too");
    const records = await usageRecords(s.kv, appId);
    assert.deepEqual(records.map((r) => [r.countedLocally, r.cost]), [
      [false, cost(9, 2)],
      [false, cost(9, 2)],
    ]);
    // Asked, as by default, the same server refuses every request: nothing is charged.
    const refused = await s.chat(apiKey, { model: "asks/large", messages: userMessage(PROMPT) });
    assert.ok(refused.status >= 400);
    await refused.body?.cancel();
    assert.equal((await usageRecords(s.kv, appId)).length, 2);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

Deno.test("a compatible server without allowed_tools (vLLM's) is offered only the tools a client's allowed_tools allow, with the plain choice; one marked allowed_tools gets them as sent; billed exactly", async () => {
  const bodies: Record<string, unknown>[] = [];
  const fake = serveLoopback(async (req) => {
    const body = await req.json();
    bodies.push(body);
    // vLLM validates tool_choice against the choices it knows and refuses any other.
    const choice = body.tool_choice;
    const known = choice === undefined || ["none", "auto", "required"].includes(choice) ||
      (choice?.type === "function" && typeof choice.function?.name === "string");
    if (!known && new URL(req.url).pathname.startsWith("/vllm")) {
      return Response.json({
        object: "error",
        message:
          "1 validation error for ChatCompletionRequest\ntool_choice: Input should be 'none', 'auto' or 'required'",
        type: "BadRequestError",
        param: null,
        code: 400,
      }, { status: 400 });
    }
    return sseResponse([
      chunk({ role: "assistant", content: "" }),
      chunk({
        tool_calls: [{
          index: 0,
          id: "call_1",
          type: "function",
          function: { name: "get_time", arguments: '{"city":"Paris"}' },
        }],
      }),
      finalChunk({
        choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }],
        usage: { prompt_tokens: 90, completion_tokens: 12, total_tokens: 102 },
      }),
      "data: [DONE]\n\n",
    ]);
  });
  const s = await startUpstreamService(
    {
      vllm: { kind: "openai", base_url: `${fake.url}/vllm/v1` },
      proxy: { kind: "openai", base_url: `${fake.url}/proxy/v1`, allowed_tools: true },
    },
  );
  const server = serveLoopback(s.handle);
  try {
    const { apiKey, appId } = await s.newApp();
    const client = new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const parameters = { type: "object", properties: { city: { type: "string" } } };
    const tools = ["get_weather", "get_time", "get_news"].map((name) => ({
      type: "function" as const,
      function: { name, parameters },
    }));
    const allowed = (mode: "auto" | "required", names: string[]) => ({
      type: "allowed_tools" as const,
      allowed_tools: {
        mode,
        tools: names.map((name) => ({ type: "function" as const, function: { name } })),
      },
    });
    const ask = (model: string, tool_choice: ReturnType<typeof allowed>) =>
      client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Time in Paris?" }],
        tools,
        tool_choice,
      });
    const sentTools = () =>
      (bodies.at(-1)!.tools as { function: { name: string } }[])
        .map((t) => t.function.name);

    const auto = await ask("vllm/m", allowed("auto", ["get_time", "get_news"]));
    assert.equal(auto.choices[0].finish_reason, "tool_calls");
    assert.deepEqual(sentTools(), ["get_time", "get_news"]);
    assert.equal(bodies.at(-1)!.tool_choice, "auto");

    await ask("vllm/m", allowed("required", ["get_time", "get_news"]));
    assert.deepEqual(sentTools(), ["get_time", "get_news"]);
    assert.equal(bodies.at(-1)!.tool_choice, "required");

    // One tool that must be called: named, every tool still sent for the cached prefix.
    await ask("vllm/m", allowed("required", ["get_time"]));
    assert.deepEqual(sentTools(), ["get_weather", "get_time", "get_news"]);
    assert.deepEqual(bodies.at(-1)!.tool_choice, {
      type: "function",
      function: { name: "get_time" },
    });

    const choice = allowed("auto", ["get_time"]);
    await ask("proxy/m", choice);
    assert.deepEqual(sentTools(), ["get_weather", "get_time", "get_news"]);
    assert.deepEqual(bodies.at(-1)!.tool_choice, choice);

    const records = await usageRecords(s.kv, appId);
    assert.deepEqual(records.map((r) => r.cost), [1, 2, 3, 4].map(() => cost(90, 12)));
    assert.equal((await s.wallet(appId)).available, START - 4 * cost(90, 12));
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
    await fake.close();
  }
});

/** Spends directly from the wallet until `left` micro-USD remain. */
async function spendDownTo(s: TestService, appId: string, left: number) {
  const amount = (await s.wallet(appId)).available - left;
  const reserved = await s.wallets.reserve(appId, {
    amount,
    keyId: "key_test",
    requestId: "req_spend",
    model: "up/m",
  });
  assert.ok(reserved.ok);
  await s.wallets.settle(appId, reserved.reservation.id, {
    requestId: "req_spend",
    keyId: "key_test",
    model: "up/m",
    provider: "up",
    promptTokens: 0,
    completionTokens: 0,
    cost: amount,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
  });
}

Deno.test("usage beyond the reservation is taken from the balance down to zero; the rest is recorded uncharged", () =>
  withOpenAi(
    () => {
      const completion = fixtureJson("openai_completion.json");
      return completionStream({
        ...completion,
        usage: { prompt_tokens: 19, completion_tokens: 1000, total_tokens: 1019 },
      });
    },
    async (s, apiKey, appId) => {
      const prompt = countPromptTokens([{ content: PROMPT }]);
      const reservation = cost(prompt, 10);
      await spendDownTo(s, appId, reservation + 100);
      const res = await s.chat(apiKey, {
        model: "up/m",
        messages: userMessage(PROMPT),
        max_tokens: 10,
      });
      assert.equal(res.status, 200);
      const charged = reservation + 100;
      assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(charged));
      assert.equal(res.headers.get("tollbooth-balance"), "0.000000");
      const wallet = await s.wallet(appId);
      assert.equal(wallet.available, 0);
      const record = (await usageRecords(s.kv, appId)).find((u) => u.requestId !== "req_spend")!;
      assert.equal(record.cost, charged);
      assert.equal(record.uncharged, cost(19, 1000) - charged);
      assert.equal(record.reserved, reservation);
    },
  ));

Deno.test("usage beyond the reservation is charged in full when the balance covers it", () =>
  withOpenAi(
    () =>
      completionStream({
        ...fixtureJson("openai_completion.json"),
        usage: { prompt_tokens: 19, completion_tokens: 1000, total_tokens: 1019 },
      }),
    async (s, apiKey, appId) => {
      const res = await s.chat(apiKey, {
        model: "up/m",
        messages: userMessage(PROMPT),
        max_tokens: 10,
      });
      assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(cost(19, 1000)));
      assert.equal((await s.wallet(appId)).available, START - cost(19, 1000));
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.uncharged, 0);
    },
  ));

Deno.test("the OpenAI-compatible request carries the key, the upstream model, max_tokens and passthrough fields", () =>
  withOpenAi((body, headers) => {
    assert.equal(headers.get("authorization"), `Bearer ${UPSTREAM_KEY}`);
    assert.equal(body.model, "up-model");
    assert.equal(body.max_tokens, 77);
    assert.equal(body.temperature, 0.5);
    assert.equal(body.stream, true);
    return completionStream(fixtureJson("openai_completion.json"));
  }, async (s, apiKey) => {
    const res = await s.chat(apiKey, {
      model: "up/m",
      messages: userMessage(PROMPT),
      max_tokens: 77,
      temperature: 0.5,
    });
    assert.equal(res.status, 200);
  }));

Deno.test("Mistral's reasoning answer, its content a list of thinking and text parts, reaches the openai SDK and the AI SDK as text and reasoning, billed by Mistral's usage", async () => {
  const recorded = await Deno.readTextFile(
    new URL(
      "../lib/gateway/providers/openai/fixtures/stream_mistral_thinking.sse",
      import.meta.url,
    ),
  );
  const fake = serveLoopback(() =>
    new Response(recorded, { headers: { "content-type": "text/event-stream" } })
  );
  const s = await startUpstreamService(
    { mistral: { kind: "openai", base_url: fake.url, stream_options: false } },
    [upstreamModel("mistral/magistral", "mistral", "magistral-medium-2509")],
  );
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
    const ask = {
      model: "mistral/magistral",
      messages: [{ role: "user" as const, content: "6 × 7?" }],
    };
    const plain = (await openai.chat.completions.create(ask)).choices[0].message;
    assert.equal(plain.content, "The answer is 42.");
    assert.equal(
      (plain as { reasoning_content?: string }).reasoning_content,
      "Six sevens: forty-two.",
    );
    const final = await openai.chat.completions.stream(ask).finalChatCompletion();
    assert.equal(final.choices[0].message.content, "The answer is 42.");
    const compatible = createOpenAICompatible({
      name: "tollbooth",
      baseURL: `${server.url}/v1`,
      apiKey,
    });
    const { text, reasoningText } = await generateText({
      model: compatible("mistral/magistral"),
      prompt: "6 × 7?",
      maxRetries: 0,
    });
    assert.equal(text, "The answer is 42.");
    assert.equal(reasoningText, "Six sevens: forty-two.");
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 3);
    for (const record of records) assert.equal(record.cost, cost(12, 28));
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
    await fake.close();
  }
});

Deno.test("OpenRouter's reasoning_details, streamed in pieces, come back whole and go back upstream with forward_reasoning_details, held, by a fallback too", async () => {
  const thought = "The user wants the weather; call the tool. ".repeat(40);
  const signature = "Eq" + "S".repeat(3000);
  const sent: Record<string, unknown>[] = [];
  // As OpenRouter serving a Claude: the reasoning streams as reasoning_details pieces of one index,
  // the signature last; a tool loop's turn without them back is refused (OpenRouter asks for the
  // complete reasoning_details back; Anthropic refuses the turn without its signed block).
  // Under /down, a provider that is down (and not marked to forward the details).
  const fake = serveLoopback(async (req) => {
    if (new URL(req.url).pathname.startsWith("/down")) {
      return new Response("overloaded", { status: 503 });
    }
    const body = await req.json();
    const assistant = body.messages.find((m: { role: string }) => m.role === "assistant");
    sent.push(body);
    if (!assistant) {
      const piece = (detail: Record<string, unknown>) =>
        chunk({
          reasoning: detail.text ?? "",
          reasoning_details: [{ format: "anthropic-claude-v1", index: 0, ...detail }],
        });
      return sseResponse([
        chunk({ role: "assistant", content: "" }),
        piece({ type: "reasoning.text", text: thought.slice(0, 900) }),
        piece({ type: "reasoning.text", text: thought.slice(900) }),
        piece({ type: "reasoning.text", signature }),
        chunk({
          tool_calls: [{
            index: 0,
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: "{}" },
          }],
        }),
        finalChunk({
          choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }],
          usage: { prompt_tokens: 40, completion_tokens: 300, total_tokens: 340 },
        }),
        "data: [DONE]\n\n",
      ]);
    }
    const details = assistant.reasoning_details;
    if (details?.[0]?.signature !== signature || details[0].text !== thought) {
      return Response.json({ error: { message: "missing reasoning", code: 400 } }, {
        status: 400,
      });
    }
    // Billed for the thinking it read back, as Anthropic bills a tool loop's turn; the whole output
    // cap, so that the hold covers the bill only if its input bound does.
    const prompt = 60 + countTextTokens(thought);
    return sseResponse([
      chunk({ role: "assistant", content: "It is 20C." }),
      finalChunk({
        usage: { prompt_tokens: prompt, completion_tokens: 100, total_tokens: prompt + 100 },
      }),
      "data: [DONE]\n\n",
    ]);
  });
  const claude = "anthropic/claude-sonnet-4.5";
  const s = await startUpstreamService(
    {
      router: { kind: "openai", base_url: fake.url, forward_reasoning_details: true },
      down: { kind: "openai", base_url: `${fake.url}/down` },
    },
    [
      upstreamModel("router/claude", "router", claude),
      // The route that forwards is the fallback: the hold is the largest of the routes' bounds.
      upstreamModel("down/claude", "down", claude, {
        fallbacks: [{ provider: "router", upstream_model: claude }],
      }),
    ],
  );
  try {
    const { apiKey, appId } = await s.newApp();
    const tools = [{ type: "function", function: { name: "get_weather" } }];
    const question = { role: "user", content: "Weather in Paris?" };
    const first =
      await (await s.chat(apiKey, { model: "router/claude", tools, messages: [question] }))
        .json();
    const message = first.choices[0].message;
    assert.deepEqual(message.reasoning_details, [{
      type: "reasoning.text",
      text: thought,
      signature,
      format: "anthropic-claude-v1",
      index: 0,
    }]);
    for (const model of ["router/claude", "down/claude"]) {
      const next = await s.chat(apiKey, {
        model,
        tools,
        max_tokens: 100,
        messages: [question, message, { role: "tool", tool_call_id: "call_1", content: "20C" }],
      });
      assert.equal(next.status, 200, JSON.stringify(await next.clone().json()));
      await next.body?.cancel();
    }
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 3);
    for (const record of records.slice(1)) {
      assert.equal(record.promptTokens, 60 + countTextTokens(thought));
      assert.ok(record.reserved >= record.cost, `${record.model}: held ${record.reserved}`);
    }
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});
