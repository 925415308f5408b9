import assert from "node:assert/strict";
import type { UsageRecord } from "@/lib/db.ts";
import { parseUsd } from "@/lib/core/mod.ts";
import { usageCost } from "@/lib/catalog/mod.ts";
import { countPromptTokens, countTextTokens } from "@/lib/gateway/tokens.ts";
import { watchedStreams } from "@/lib/gateway/gateway.ts";
import {
  assertAuditClean,
  readSse,
  serveLoopback,
  startService,
  type TestService,
  until,
  usageRecords,
  userMessage,
  withService,
} from "./helpers.ts";

const encoder = new TextEncoder();

/** One chunk event with these top-level fields (choices, usage) as given. */
function rawChunk(fields: Record<string, unknown>) {
  return `data: ${
    JSON.stringify({
      id: "chatcmpl-fake",
      object: "chat.completion.chunk",
      created: 1,
      model: "gpt-test",
      ...fields,
    })
  }\n\n`;
}

function chunk(content: string | Record<string, unknown>, finish: string | null = null) {
  const delta = typeof content === "string" ? { content } : content;
  return rawChunk({ choices: [{ index: 0, delta, finish_reason: finish }] });
}

/**
 * An OpenAI-compatible upstream whose stream sends these events, then behaves as `ending` says:
 * "hang" keeps the connection open, sending nothing, until the client goes away; "end" ends it.
 */
function eventUpstream(events: string[], ending: "hang" | "cut" | "end") {
  const seen = { aborted: false, requests: 0 };
  const server = serveLoopback((request) => {
    seen.requests++;
    request.signal.addEventListener("abort", () => (seen.aborted = true));
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        for (const event of events) controller.enqueue(encoder.encode(event));
        if (ending === "end") controller.close();
        if (ending === "cut") {
          await new Promise((r) => setTimeout(r, 5));
          controller.error(new Error("upstream died"));
        }
      },
      cancel() {
        seen.aborted = true;
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  return { ...server, seen };
}

/** An upstream whose stream sends `words` (a delta's content, or a whole delta), then `ending`. */
function fakeUpstream(words: (string | Record<string, unknown>)[], ending: "hang" | "cut") {
  return eventUpstream(words.map((word) => chunk(word)), ending);
}

/** The calls logged as ended early with their exposure, and what the wallet stats sum of them. */
function endedEarly(s: TestService) {
  return {
    logged: s.logs.filter((l) => l.event === "upstream_ended_early")
      .map(({ outcome, charged, exposure }) => ({ outcome, charged, exposure })),
    calls: s.wallets.stats.endedEarlyCalls,
    exposure: s.wallets.stats.endedEarlyExposureMicros,
  };
}

async function onlyUsage(kv: Deno.Kv, appId: string): Promise<UsageRecord> {
  const records = await usageRecords(kv, appId);
  assert.equal(records.length, 1);
  return records[0];
}

/**
 * Runs `check` against a fresh service on this OpenAI-kind upstream, with one app; every wallet is
 * then held to the audit (withService), and the upstream closed. `check`'s result is returned.
 */
async function withUpstream<T>(
  upstream: { url: string; close(): Promise<void> },
  check: (s: TestService, app: { appId: string; apiKey: string }) => Promise<T>,
): Promise<T> {
  let result!: T;
  try {
    await withService(async (s) => {
      result = await check(s, await s.newApp());
    }, { openaiBaseUrl: upstream.url });
  } finally {
    await upstream.close();
  }
  return result;
}

Deno.test("a client that disconnects mid-stream stops the upstream and pays for what was produced", async () => {
  const upstream = fakeUpstream(["Hello", " wide", " world"], "hang");
  await withUpstream(upstream, async (s, { appId, apiKey }) => {
    const server = serveLoopback(s.handle);
    try {
      const abort = new AbortController();
      const messages = userMessage("say hello");
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "fake/gpt", messages, stream: true, max_tokens: 500 }),
        signal: abort.signal,
      });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      let received = "";
      while (!received.includes("world")) {
        received += new TextDecoder().decode((await reader.read()).value);
      }
      abort.abort();

      await until(
        async () => (await s.wallet(appId)).reserved === 0,
        "the reservation to be settled",
      );
      await until(() => upstream.seen.aborted, "the upstream request to be aborted");
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.outcome, "client_closed");
      assert.equal(usage.countedLocally, true);
      assert.equal(usage.completionTokens, countTextTokens("Hello wide world"));
      assert.equal(usage.promptTokens, countPromptTokens(messages));
      const model = s.catalog.get("fake/gpt")!;
      assert.equal(usage.cost, usageCost(model, usage));
      assert.equal((await s.wallet(appId)).spent, usage.cost);
      // Charged by our count: what the provider may bill beyond it is the operator's, and told.
      const exposure = usage.reserved - usage.cost;
      assert.ok(exposure > 0);
      assert.deepEqual(endedEarly(s), {
        logged: [{ outcome: "client_closed", charged: usage.cost, exposure }],
        calls: 1,
        exposure,
      });
    } finally {
      await server.close();
    }
  });
});

/**
 * Gemini's compatible endpoint reports cumulative usage on every content chunk, its thinking in
 * `total_tokens` only; Mistral and Together on the chunk that finishes. Three such chunks, then
 * the upstream hangs (or breaks off).
 */
function usageOnContentChunks(ending: "hang" | "cut") {
  const thinking = 3_000;
  const events = [1, 2, 3].map((i) =>
    rawChunk({
      choices: [{ index: 0, delta: { content: ` word${i}` }, finish_reason: null }],
      usage: { prompt_tokens: 40, completion_tokens: i * 2, total_tokens: 40 + thinking + i * 2 },
    })
  );
  return {
    ...eventUpstream(events, ending),
    billed: { promptTokens: 40, completionTokens: 6 + thinking },
  };
}

Deno.test("a client that leaves a stream whose upstream reported usage on its content chunks pays that usage, hidden thinking included", async () => {
  const upstream = usageOnContentChunks("hang");
  await withUpstream(upstream, async (s, { appId, apiKey }) => {
    const server = serveLoopback(s.handle);
    try {
      const abort = new AbortController();
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "fake/gpt",
          messages: userMessage("go on"),
          stream: true,
          max_tokens: 4000,
        }),
        signal: abort.signal,
      });
      const reader = res.body!.getReader();
      let received = "";
      while (!received.includes("word3")) {
        received += new TextDecoder().decode((await reader.read()).value);
      }
      abort.abort();
      await until(async () => (await s.wallet(appId)).reserved === 0, "the stream to be settled");
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.outcome, "client_closed");
      assert.equal(usage.countedLocally, false);
      assert.equal(usage.promptTokens, upstream.billed.promptTokens);
      assert.equal(usage.completionTokens, upstream.billed.completionTokens);
      assert.equal(usage.cost, usageCost(s.catalog.get("fake/gpt")!, upstream.billed));
      assert.equal((await s.wallet(appId)).spent, usage.cost);
      // The provider's own bill was charged: no exposure beyond it.
      assert.deepEqual(endedEarly(s), { logged: [], calls: 0, exposure: 0 });
    } finally {
      await server.close();
    }
  });
});

Deno.test("a stream cut after its upstream reported usage on a content chunk is charged that usage, streamed or not", async () => {
  for (const stream of [true, false]) {
    const upstream = usageOnContentChunks("cut");
    await withUpstream(upstream, async (s, { appId, apiKey }) => {
      const res = await s.chat(apiKey, {
        model: "fake/gpt",
        messages: userMessage("go on"),
        stream,
        max_tokens: 4000,
      });
      await res.text();
      await until(async () => (await s.wallet(appId)).reserved === 0, "the stream to be settled");
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.outcome, "upstream_cut", `stream: ${stream}`);
      assert.equal(usage.countedLocally, false, `stream: ${stream}`);
      assert.equal(usage.completionTokens, upstream.billed.completionTokens, `stream: ${stream}`);
      assert.equal(endedEarly(s).calls, 0, `stream: ${stream}`);
    });
  }
});

const LOREM = " lorem ipsum dolor sit amet".repeat(40);

/**
 * A stream whose upstream reports `usage` on its first chunk ("Hi") and not again, then sends
 * `chunks` chunks of LOREM and hangs; the client reads them all and leaves. The usage record.
 */
async function leftAfterEarlyUsage(usage: Record<string, number>, chunks: number) {
  const server = eventUpstream([
    rawChunk({ choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }], usage }),
    ...Array.from({ length: chunks }, () => chunk(LOREM)),
  ], "hang");
  return await withUpstream(server, async (s, { appId, apiKey }) => {
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("go on"),
      stream: true,
      max_tokens: 8000,
    });
    const reader = res.body!.getReader();
    let received = "";
    while ((received.match(/lorem/g)?.length ?? 0) < chunks * 40) {
      received += new TextDecoder().decode((await reader.read()).value);
    }
    await reader.cancel();
    await until(async () => (await s.wallet(appId)).reserved === 0, "the stream to be settled");
    return await onlyUsage(s.kv, appId);
  });
}

Deno.test("a usage an upstream reported early and not again does not cap the charge of the output it sent after it", async () => {
  const usage = await leftAfterEarlyUsage(
    { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
    10,
  );
  assert.equal(usage.outcome, "client_closed");
  assert.equal(usage.promptTokens, 9, "the upstream's prompt count");
  assert.equal(usage.completionTokens, countTextTokens("Hi" + LOREM.repeat(10)));
  assert.equal(usage.countedLocally, true);
});

Deno.test("hidden thinking in an early usage report stays charged beside the output counted after it", async () => {
  // Gemini's thinking shows only in total_tokens: 500 of it before the first text.
  const usage = await leftAfterEarlyUsage(
    { prompt_tokens: 9, completion_tokens: 1, total_tokens: 510 },
    3,
  );
  assert.equal(usage.completionTokens, 501 + countTextTokens(LOREM.repeat(3)));
});

Deno.test("when output after an early usage raises the charge, the client is shown the usage it was charged for, streamed or not", async () => {
  const events = [
    rawChunk({
      choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }],
      usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
    }),
    ...Array.from({ length: 5 }, () => chunk(LOREM)),
    chunk({}, "stop"),
    "data: [DONE]\n\n",
  ];
  await withUpstream(eventUpstream(events, "hang"), async (s, { appId, apiKey }) => {
    const ask = { model: "fake/gpt", messages: userMessage("go on"), max_tokens: 8000 };
    const plain = await (await s.chat(apiKey, ask)).json();
    const streamedChunks = (await readSse(
      await s.chat(apiKey, { ...ask, stream: true, stream_options: { include_usage: true } }),
    )).filter((e) => e !== "[DONE]").map((e) => JSON.parse(e));
    const streamedUsage = streamedChunks.findLast((c) => c.usage).usage;
    const completion = countTextTokens("Hi" + LOREM.repeat(5));
    for (const shown of [plain.usage, streamedUsage]) {
      assert.equal(shown.completion_tokens, completion);
      assert.equal(shown.total_tokens, 9 + completion);
    }
    const records = await usageRecords(s.kv, appId);
    assert.deepEqual(records.map((r) => r.completionTokens), [completion, completion]);
  });
});

/** Streams a chat whose upstream sends `words` and then breaks off; `check` sees what came. */
async function withCutStream(
  words: (string | Record<string, unknown>)[],
  check: (s: TestService, appId: string, events: string[]) => Promise<void>,
  body: Record<string, unknown> = {},
) {
  await withUpstream(fakeUpstream(words, "cut"), async (s, { appId, apiKey }) => {
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("go on"),
      stream: true,
      ...body,
    });
    assert.equal(res.status, 200);
    await check(s, appId, await readSse(res));
  });
}

Deno.test("a stream the upstream cuts is charged for what was produced and ends with an error event", () =>
  withCutStream(["One", " two"], async (s, appId, events) => {
    assert.notEqual(events.at(-1), "[DONE]");
    const last = JSON.parse(events.at(-1)!);
    assert.equal(last.error.code, "stream_interrupted");
    const text = events.slice(0, -1).map((e) => JSON.parse(e).choices[0].delta.content).join("");
    assert.equal(text, "One two");

    const usage = await onlyUsage(s.kv, appId);
    assert.equal(usage.outcome, "upstream_cut");
    assert.equal(usage.completionTokens, countTextTokens("One two"));
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.spent, usage.cost);
  }));

Deno.test("a stream the upstream cuts before its usage reports its hold beyond the charge as the operator's exposure, streamed or not", async () => {
  for (const stream of [true, false]) {
    await withUpstream(fakeUpstream(["One", " two"], "cut"), async (s, { appId, apiKey }) => {
      const res = await s.chat(apiKey, {
        model: "fake/gpt",
        messages: userMessage("go on"),
        stream,
        max_tokens: 300,
      });
      await res.text();
      await until(async () => (await s.wallet(appId)).reserved === 0, "the stream to be settled");
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.countedLocally, true);
      const exposure = usage.reserved - usage.cost;
      assert.ok(exposure > 0, `stream: ${stream}`);
      assert.deepEqual(endedEarly(s), {
        logged: [{ outcome: "upstream_cut", charged: usage.cost, exposure }],
        calls: 1,
        exposure,
      }, `stream: ${stream}`);
    });
  }
});

Deno.test("a stream that runs to its end reports no exposure", async () => {
  const events = [chunk("Done"), chunk({}, "stop"), "data: [DONE]\n\n"];
  await withUpstream(eventUpstream(events, "end"), async (s, { appId, apiKey }) => {
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("go on"),
      stream: true,
      max_tokens: 300,
    });
    assert.equal((await readSse(res)).at(-1), "[DONE]");
    await until(async () => (await s.wallet(appId)).reserved === 0, "the stream to be settled");
    assert.equal((await onlyUsage(s.kv, appId)).outcome, "completed");
    assert.deepEqual(endedEarly(s), { logged: [], calls: 0, exposure: 0 });
  });
});

Deno.test("a cut stream's own count of its output never passes the output cap the reservation covers", () =>
  // An upstream that ignored max_tokens: the provider bills no more than the cap it was sent.
  withCutStream(["Here", ...Array(100).fill(" and more")], async (s, appId) => {
    const usage = await onlyUsage(s.kv, appId);
    assert.equal(usage.countedLocally, true);
    assert.equal(usage.completionTokens, 20, "the cap, not the 200 tokens counted");
    assert.ok(
      usage.cost <= usage.reserved,
      `charged ${usage.cost} within the hold ${usage.reserved}`,
    );
  }, { max_tokens: 20 }));

Deno.test("a cut stream whose reasoning comes under both of its names counts that reasoning once", () => {
  const thought = "Weighing the toll against the distance travelled";
  return withCutStream(
    [{ reasoning_content: thought, reasoning: thought }, "Pay."],
    async (s, appId) => {
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.countedLocally, true);
      assert.equal(usage.completionTokens, countTextTokens(`${thought}Pay.`));
    },
  );
});

Deno.test("a cut stream with an empty reasoning_content beside its reasoning counts the reasoning", () => {
  const thought = "Weighing the toll against the distance travelled";
  return withCutStream(
    [{ reasoning_content: "", reasoning: thought }, "Pay."],
    async (s, appId) => {
      const usage = await onlyUsage(s.kv, appId);
      assert.equal(usage.completionTokens, countTextTokens(`${thought}Pay.`));
    },
  );
});

Deno.test("a client that cancels the response body in process settles the stream too", async () => {
  await withUpstream(fakeUpstream(["a", " b"], "hang"), async (s, { appId, apiKey }) => {
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("x"),
      stream: true,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    await until(
      async () => (await s.wallet(appId)).reserved === 0,
      "the reservation to be settled",
    );
    assert.equal((await onlyUsage(s.kv, appId)).outcome, "client_closed");
  });
});

Deno.test("open streams are watched for a stalled client by one sweep, which forgets each stream once it is settled", async () => {
  // The stall limit is the upstream timeout: checked every 100 ms here.
  const s = await startService({ env: { UPSTREAM_TIMEOUT_MS: "400" } });
  try {
    const { apiKey } = await s.newApp();
    const bodies = await Promise.all(Array.from({ length: 3 }, async () => {
      const res = await s.chat(apiKey, {
        model: "tollbooth/echo",
        messages: userMessage("x"),
        stream: true,
      });
      assert.equal(res.status, 200);
      assert.ok(watchedStreams() >= 1, "watched while it is open");
      return await res.text();
    }));
    assert.ok(bodies.every((b) => b.includes("[DONE]")));
    await until(() => watchedStreams() === 0, "the sweep to forget the settled streams");
    assert.ok(
      !s.logs.some((l) => l.event === "client_stalled"),
      "a client that read is no staller",
    );
  } finally {
    await s.close();
  }
});

Deno.test("a client that stops reading a stream without leaving is treated as gone once it stalls", async () => {
  const words = Array.from({ length: 50 }, (_, i) => ` w${i}`);
  const upstream = fakeUpstream(words, "hang");
  // The stall limit is the upstream timeout: 400 ms here.
  const s = await startService({
    openaiBaseUrl: upstream.url,
    env: { UPSTREAM_TIMEOUT_MS: "400" },
  });
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("x"),
      stream: true,
    });
    assert.equal(res.status, 200);
    reader = res.body!.getReader();
    await reader.read();
    // The client neither reads on nor closes the connection.
    await until(
      async () => (await s.wallet(appId)).reserved === 0,
      "the stalled stream's reservation to settle",
    );
    await until(() => upstream.seen.aborted, "the upstream request to be aborted");
    const usage = await onlyUsage(s.kv, appId);
    assert.equal(usage.outcome, "client_closed");
    // What reached the gateway is what the provider produced and bills, read by the client or
    // not: more than nothing, never more than the whole answer it sent before it hung.
    assert.ok(usage.completionTokens > 0);
    assert.ok(usage.completionTokens <= countTextTokens(words.join("")));
    assert.ok(s.logs.some((l) => l.event === "client_stalled"));
    // Its request is logged now, while the client still holds the connection.
    const requestLines = () => s.logs.filter((l) => l.event === "request" && l.path !== "/");
    await until(() => requestLines().length === 1, "the request's log line");
    assert.equal(requestLines()[0].outcome, "client_closed");
    // The client comes back: its answer was cut, so the stream ends in an error, never [DONE].
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      rest += new TextDecoder().decode(r.value);
    }
    assert.ok(!rest.includes("[DONE]"));
    const last = JSON.parse(rest.trim().split("\n\n").at(-1)!.slice("data: ".length));
    assert.equal(last.error.code, "stream_interrupted");
    assert.match(last.error.message, /not read/);
    assert.equal((await onlyUsage(s.kv, appId)).cost, usage.cost, "charged once");
    assert.equal(requestLines().length, 1, "logged once");
    await assertAuditClean(s.kv);
  } finally {
    // Leaving also ends the upstream call, so a failure here cannot hang the cleanup.
    await reader?.cancel().catch(() => {});
    await upstream.close();
    await s.close();
  }
});

Deno.test("null entries an upstream slips into choices or tool calls are dropped: the answer is served and its cost told", async () => {
  const call = {
    index: 0,
    id: "call_1",
    type: "function",
    function: { name: "f", arguments: "{}" },
  };
  const server = serveLoopback(() =>
    new Response(
      [
        chunk({ role: "assistant", tool_calls: [null, call] }),
        rawChunk({ choices: [null] }),
        chunk({}, "tool_calls"),
        rawChunk({
          choices: [],
          usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 },
        }),
        "data: [DONE]\n\n",
      ].join(""),
      { headers: { "content-type": "text/event-stream" } },
    )
  );
  await withUpstream(server, async (s, { appId, apiKey }) => {
    const res = await s.chat(apiKey, { model: "fake/gpt", messages: userMessage("call f") });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.deepEqual(body.choices[0].message.tool_calls, [call].map(({ index: _, ...c }) => c));
    const usage = await onlyUsage(s.kv, appId);
    assert.equal([usage.promptTokens, usage.completionTokens].join(), "7,5");
    assert.equal(parseUsd(res.headers.get("tollbooth-request-cost")!), usage.cost);
    assert.equal((await s.wallet(appId)).spent, usage.cost);
  });
});
