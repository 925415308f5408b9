import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { messagesRequest } from "@/lib/gateway/providers/anthropic/anthropic.ts";
import { parseChatRequest } from "@/lib/gateway/chat_request.ts";
import { claudeTokenBound } from "@/lib/gateway/claude_tokens.ts";
import type { Model } from "@/lib/catalog/mod.ts";
import { keys } from "@/lib/db.ts";
import { assertAuditClean, readSse, userMessage } from "./helpers.ts";
import { serveLoopback } from "./helpers.ts";
import {
  cost,
  fixture,
  fixtureJson,
  sseEvents,
  sseResponse,
  startUpstreamService,
  UPSTREAM_KEY,
} from "./upstreams.ts";

/** A fake Messages API: checks what the official SDK would send, answers with a fixture. */
function fakeAnthropic(answer: (body: Record<string, unknown>) => Response) {
  const seen: { headers: Headers; body: Record<string, unknown>; path: string }[] = [];
  const server = serveLoopback(async (req) => {
    const body = await req.json();
    seen.push({ headers: req.headers, body, path: new URL(req.url).pathname });
    if (req.headers.get("x-api-key") !== UPSTREAM_KEY) {
      const { authentication } = fixtureJson<Record<string, { body: unknown }>>(
        "anthropic_errors.json",
      );
      return Response.json(authentication.body, { status: 401 });
    }
    return answer(body);
  });
  return { ...server, seen };
}

function streamOrMessage(streamFixture: string) {
  return (body: Record<string, unknown>) =>
    body.stream
      ? sseResponse(sseEvents(fixture(streamFixture)))
      : Response.json(fixtureJson("anthropic_message_basic.json"));
}

async function withAnthropic(
  answer: (body: Record<string, unknown>) => Response,
  fn: (
    s: Awaited<ReturnType<typeof startUpstreamService>>,
    fake: ReturnType<typeof fakeAnthropic>,
  ) => Promise<void>,
) {
  const fake = fakeAnthropic(answer);
  const s = await startUpstreamService({ claude: { kind: "anthropic", base_url: fake.url } });
  try {
    await fn(s, fake);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
}

Deno.test("the compatible request becomes a Messages request: system, max_tokens, stop_sequences, sampling", () => {
  const model = { upstreamModel: "claude-sonnet-4-5" } as Model;
  const body = messagesRequest({
    model,
    request: parseChatRequest({
      model: "claude/m",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
        { role: "user", content: "Again" },
        { role: "assistant", content: "Hello" },
        { role: "system", content: "Answer in French." },
        { role: "user", content: "Bye" },
      ],
      stop: ["END", "\n", " "],
      temperature: 0.3,
      top_p: 0.9,
      seed: 4,
      user: "u-1",
    }),
    maxTokens: 300,
    signal: new AbortController().signal,
    requestId: "req_x",
  }, true);
  assert.deepEqual(body, {
    model: "claude-sonnet-4-5",
    max_tokens: 300,
    system: "Be brief.\n\nAnswer in French.",
    messages: [
      { role: "user", content: "Hi\n\nAgain" },
      { role: "assistant", content: "Hello" },
      { role: "user", content: "Bye" },
    ],
    // Blank stop sequences left out (Anthropic refuses them); top_p left out beside temperature
    // (Claude 4.5 takes one of the two).
    stop_sequences: ["END"],
    temperature: 0.3,
    metadata: { user_id: "u-1" },
    stream: true,
  });
});

Deno.test("anthropic non-streaming: x-api-key and anthropic-version sent, the streamed message becomes one chat.completion, usage billed exactly", () =>
  withAnthropic(streamOrMessage("anthropic_stream_basic.sse"), async (s, fake) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "claude/m",
      messages: [{ role: "system", content: "You are terse." }, ...userMessage("Hello, Claude")],
      max_tokens: 1024,
      stop: ["\n\nHuman:"],
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("tollbooth-provider"), "claude");
    const body = await res.json();
    assert.equal(body.object, "chat.completion");
    assert.equal(body.model, "claude/m");
    assert.equal(body.choices[0].message.content, "Hello!");
    assert.equal(body.choices[0].finish_reason, "stop");
    assert.deepEqual(body.usage, {
      prompt_tokens: 25,
      completion_tokens: 15,
      total_tokens: 40,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      cost: res.headers.get("tollbooth-request-cost"),
    });

    const sent = fake.seen[0];
    assert.equal(sent.path, "/v1/messages");
    assert.equal(sent.headers.get("anthropic-version"), "2023-06-01");
    assert.equal(sent.headers.get("authorization"), null);
    assert.equal(sent.body.system, "You are terse.");
    assert.deepEqual(sent.body.stop_sequences, ["\n\nHuman:"]);
    assert.equal(sent.body.max_tokens, 1024);
    assert.equal(sent.body.model, "claude-model");
    // Served from a stream, so the upstream timeout measures silence, not the answer's length.
    assert.equal(sent.body.stream, true);

    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000 - cost(25, 15));
    assert.equal(wallet.reserved, 0);
  }));

Deno.test("anthropic streaming: the documented event sequence becomes chunks and [DONE], output tokens from message_delta", () =>
  withAnthropic(streamOrMessage("anthropic_stream_basic.sse"), async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "claude/m",
      messages: userMessage("Hello"),
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(res.status, 200);
    const events = await readSse(res);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.ok(chunks.every((c) => c.object === "chat.completion.chunk" && c.model === "claude/m"));
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const text = chunks.flatMap((c) =>
      c.choices.map((ch: { delta: { content?: string } }) => ch.delta.content ?? "")
    )
      .join("");
    assert.equal(text, "Hello!");
    assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === "stop"));
    const usage = chunks.at(-1).usage;
    assert.equal(usage.prompt_tokens, 25);
    assert.equal(usage.completion_tokens, 15);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000 - cost(25, 15));
    assert.equal(wallet.reserved, 0);
  }));

Deno.test("anthropic streaming: cache tokens count as prompt tokens and cumulative output is taken last, never summed", () =>
  withAnthropic(streamOrMessage("anthropic_stream_cached.sse"), async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "claude/m",
      messages: userMessage("Summarise the cached document"),
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = (await readSse(res)).slice(0, -1).map((e) => JSON.parse(e));
    assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === "length"));
    const usage = chunks.at(-1).usage;
    assert.equal(usage.prompt_tokens, 21 + 188 + 1800);
    assert.equal(usage.completion_tokens, 12); // 9 then 12 cumulative: 12, not 21
    // The 188 written to the cache at Anthropic's 1.25× the input price (2.5 micro-USD each).
    assert.equal((await s.wallet(appId)).available, 5_000_000 - cost(21 + 1800, 12) - 188 * 2.5);
  }));

Deno.test("anthropic streaming: a message_delta repeating the input's counts as zeros does not wipe the prompt's charge", () =>
  withAnthropic(
    (body) =>
      body.stream
        ? sseResponse(sseEvents(
          fixture("anthropic_stream_basic.sse").replace(
            '"usage": {"output_tokens": 15}',
            '"usage": {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 15}',
          ),
        ))
        : Response.json(fixtureJson("anthropic_message_basic.json")),
    async (s) => {
      const { appId, apiKey } = await s.newApp();
      const res = await s.chat(apiKey, {
        model: "claude/m",
        messages: userMessage("Hello"),
        stream: true,
        stream_options: { include_usage: true },
      });
      const usage = (await readSse(res)).slice(0, -1).map((e) => JSON.parse(e)).at(-1).usage;
      assert.equal(usage.prompt_tokens, 25);
      assert.equal(usage.completion_tokens, 15);
      const wallet = await s.wallet(appId);
      assert.equal(wallet.available, 5_000_000 - cost(25, 15));
      assert.equal(wallet.reserved, 0);
    },
  ));

Deno.test("anthropic stop_reason maps to finish_reason", async () => {
  const { finishReason } = await import("@/lib/gateway/providers/anthropic/anthropic.ts");
  assert.equal(finishReason("end_turn"), "stop");
  assert.equal(finishReason("stop_sequence"), "stop");
  assert.equal(finishReason("max_tokens"), "length");
  assert.equal(finishReason("tool_use"), "tool_calls");
  assert.equal(finishReason(null), null);
});

Deno.test("anthropic error event mid-stream: produced tokens billed with the upstream's prompt count, stream ends in an error", () =>
  withAnthropic(streamOrMessage("anthropic_stream_error.sse"), async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "claude/m",
      messages: userMessage("Tell me a story"),
      stream: true,
    });
    assert.equal(res.status, 200);
    const events = await readSse(res);
    assert.notEqual(events.at(-1), "[DONE]");
    const last = JSON.parse(events.at(-1)!);
    assert.equal(last.error.code, "stream_interrupted");
    assert.match(last.error.message, /overloaded_error/);
    // 14 prompt tokens from message_start; "Once upon a time", counted by us with the Claude
    // bound (Claude's tokenizer is not published), not with o200k, which undercounts Claude.
    const produced = claudeTokenBound("Once upon a time");
    assert.equal((await s.wallet(appId)).available, 5_000_000 - cost(14, produced));
    const usage = [...(await Array.fromAsync(s.kv.list({ prefix: keys.appUsage(appId) })))];
    assert.equal(usage.length, 1);
    const record = usage[0].value as { countedLocally: boolean; outcome: string };
    assert.equal(record.countedLocally, true);
    assert.equal(record.outcome, "upstream_cut");
  }));

Deno.test("the fake Messages server speaks what the official SDK parses", async () => {
  const fake = fakeAnthropic(streamOrMessage("anthropic_stream_basic.sse"));
  try {
    const client = new Anthropic({
      apiKey: UPSTREAM_KEY,
      baseURL: fake.url,
      maxRetries: 0,
      defaultHeaders: { "x-api-key": UPSTREAM_KEY },
    });
    const message = await client.messages.create({
      model: "claude-model",
      max_tokens: 64,
      messages: [{ role: "user", content: "Hello, Claude" }],
    });
    assert.equal(message.content[0].type, "text");
    assert.equal(message.usage.output_tokens, 6);
    const stream = client.messages.stream({
      model: "claude-model",
      max_tokens: 64,
      messages: [{ role: "user", content: "Hello" }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.content[0].type === "text" && final.content[0].text, "Hello!");
    assert.equal(final.usage.input_tokens, 25);
    assert.equal(final.usage.output_tokens, 15);
    assert.equal(final.stop_reason, "end_turn");
  } finally {
    await fake.close();
  }
});

Deno.test("anthropic stream cut after the final message_delta bills the upstream's counts", () =>
  withAnthropic(
    () => {
      const events = sseEvents(fixture("anthropic_stream_basic.sse"));
      return sseResponse(events.filter((e) => !e.includes("message_stop")));
    },
    async (s) => {
      const { appId, apiKey } = await s.newApp();
      const res = await s.chat(apiKey, {
        model: "claude/m",
        messages: userMessage("Hello"),
        stream: true,
      });
      const events = await readSse(res);
      assert.equal(JSON.parse(events.at(-1)!).error.code, "stream_interrupted");
      assert.equal((await s.wallet(appId)).available, 5_000_000 - cost(25, 15));
      const [entry] = await Array.fromAsync(s.kv.list({ prefix: keys.appUsage(appId) }));
      assert.equal((entry.value as { countedLocally: boolean }).countedLocally, false);
    },
  ));
