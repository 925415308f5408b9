import assert from "node:assert/strict";
import {
  callUpstream,
  guardedParts,
  readAnswerJson,
  watchedCalls,
  wholeAnswerBytes,
  wholeAnswerTimeoutMs,
} from "./http.ts";
import { openAiSseParts } from "./openai/stream.ts";
import { ProviderError, type StreamPart } from "./types.ts";

/** A loopback server that answers every connection with these bytes and then keeps it open. */
function silentAfter(bytes: string) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open: Deno.Conn[] = [];
  (async () => {
    for await (const conn of listener) {
      open.push(conn);
      await conn.read(new Uint8Array(65_536));
      await conn.write(new TextEncoder().encode(bytes));
    }
  })().catch(() => {});
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/v1/chat/completions`,
    close() {
      listener.close();
      for (const conn of open) conn.close();
    },
  };
}

/** A loopback server that answers every request with this body. */
function serveBody(body: ReadableStream<Uint8Array>, init: ResponseInit) {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(body, init),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}/v1/chat/completions`,
    close: () => server.shutdown(),
  };
}

/** A call as the providers make it, with a fake key. */
function upstreamCall(url: string, timeoutMs: number, signal = new AbortController().signal) {
  return callUpstream({
    url,
    headers: { "content-type": "application/json", authorization: "Bearer sk-test-0123456789" },
    body: "{}",
    signal,
    timeoutMs,
  });
}

Deno.test("an upstream that goes silent inside an error body ends in a timeout, not a hang", async () => {
  const server = silentAfter(
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n" +
      '{"error":{"mess',
  );
  let hang: ReturnType<typeof setTimeout> | undefined;
  try {
    const call = upstreamCall(server.url, 100);
    const outcome = await Promise.race([
      call.then(() => "answered", (error) => error),
      new Promise((resolve) =>
        hang = setTimeout(() => resolve("still waiting after 10 s"), 10_000)
      ),
    ]);
    assert.ok(outcome instanceof ProviderError, String(outcome));
    assert.equal(outcome.kind, "upstream_error");
    assert.equal(outcome.upstreamStatus, 503);
  } finally {
    clearTimeout(hang);
    server.close();
  }
});

Deno.test("a stream left between two reads is not watched for silence, nor kept by the watch", async () => {
  const server = silentAfter(
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
      "6\r\nfirst\n\r\n",
  );
  const abort = new AbortController();
  try {
    const call = await upstreamCall(server.url, 60_000, abort.signal);
    assert.equal(watchedCalls(), 1, "waiting for the body: watched");
    const body = call.response.body;
    assert.ok(body && !(body instanceof ReadableStream), "the client's own body reader");
    const parts = guardedParts(
      (async function* () {
        for (;;) {
          const { value, done } = await body.read(new Uint8Array(64));
          if (done) return;
          yield value;
        }
      })(),
      call,
    );
    assert.ok(!(await parts.next()).done);
    // The consumer holds the part and never asks again (a client gone before its reader started):
    // nothing may keep this call alive in the watch.
    assert.equal(watchedCalls(), 0);
  } finally {
    abort.abort();
    server.close();
  }
});

Deno.test("keep-alive comments count as signs of life: a stream that sends only them for longer than the timeout is not cut", async () => {
  const encoder = new TextEncoder();
  const chunk = JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: { content: "Done thinking." }, finish_reason: "stop" }],
  });
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      async start(controller) {
        // Four timeouts long, a comment every quarter of one.
        for (let i = 0; i < 16; i++) {
          controller.enqueue(encoder.encode(": PROCESSING\n\n"));
          await new Promise((r) => setTimeout(r, 25));
        }
        controller.enqueue(encoder.encode(`data: ${chunk}\n\ndata: [DONE]\n\n`));
        controller.close();
      },
    }),
    { headers: { "content-type": "text/event-stream" } },
  );
  try {
    const call = await upstreamCall(server.url, 100);
    const parts = [];
    for await (
      const batch of guardedParts(openAiSseParts(call.response.body!, call.idle.touch), call)
    ) {
      parts.push(...batch);
    }
    assert.deepEqual(parts.map((p) => p.type), ["chunk"]);
  } finally {
    await server.close();
  }
});

Deno.test("an upstream's error answer is read only so far: an endless one still ends in its error, with its reason", async () => {
  const encoder = new TextEncoder();
  const padding = encoder.encode(" ".repeat(65_536));
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode('{"error":{"message":"the model is overloaded"}}'));
      },
      pull(controller) {
        controller.enqueue(padding);
      },
    }),
    { status: 503, headers: { "content-type": "application/json" } },
  );
  try {
    const error = await upstreamCall(server.url, 10_000).then(() => null, (error) => error);
    assert.ok(error instanceof ProviderError, String(error));
    assert.equal(error.upstreamStatus, 503);
    assert.match(error.message, /the model is overloaded/);
  } finally {
    await server.close();
  }
});

Deno.test("a stream that stalls after its usage chunk, until the idle guard cuts it, still hands on that usage", async () => {
  const encoder = new TextEncoder();
  const usage = { prompt_tokens: 900, completion_tokens: 5000, total_tokens: 5900 };
  const chunk = (fields: Record<string, unknown>) =>
    `data: ${
      JSON.stringify({
        id: "c",
        object: "chat.completion.chunk",
        created: 1,
        model: "m",
        ...fields,
      })
    }\n\n`;
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode(
          chunk({ choices: [{ index: 0, delta: { content: "42" }, finish_reason: "stop" }] }) +
            chunk({ choices: [], usage }),
        ));
        // No [DONE]: the upstream stalls here until the guard cuts it.
      },
    }),
    { headers: { "content-type": "text/event-stream" } },
  );
  try {
    const call = await upstreamCall(server.url, 100);
    const parts: StreamPart[] = [];
    await assert.rejects(async () => {
      for await (
        const batch of guardedParts(openAiSseParts(call.response.body!, call.idle.touch), call)
      ) parts.push(...batch);
    });
    const billed = parts.find((p) => p.type === "usage");
    assert.ok(billed?.type === "usage", "the provider's usage reached the reader before the cut");
    assert.equal(billed.usage.completionTokens, 5000);
  } finally {
    await server.close();
  }
});

Deno.test("a non-streamed answer longer than its limit is refused as malformed, not read on", async () => {
  // Valid JSON, so that only the limit can refuse it.
  const json = new TextEncoder().encode(`[${"1,".repeat(100_000)}1]`);
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (let at = 0; at < json.length; at += 16_384) {
          controller.enqueue(json.subarray(at, at + 16_384));
        }
        controller.close();
      },
    }),
    { status: 200, headers: { "content-type": "application/json" } },
  );
  try {
    const call = await upstreamCall(server.url, 10_000);
    const error = await readAnswerJson(call, 100_000).then(() => null, (error) => error);
    assert.ok(error instanceof ProviderError, String(error));
    assert.equal(error.kind, "malformed_response");
    assert.match(error.message, /larger than 100000 bytes/);
  } finally {
    await server.close();
  }
});

Deno.test("a non-streamed answer within its limit is read whole", async () => {
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"input_tokens":'));
        controller.enqueue(new TextEncoder().encode("42}"));
        controller.close();
      },
    }),
    { status: 200, headers: { "content-type": "application/json" } },
  );
  try {
    const call = await upstreamCall(server.url, 10_000);
    assert.deepEqual(await readAnswerJson(call, 19), { input_tokens: 42 });
  } finally {
    await server.close();
  }
});

Deno.test("a non-streamed answer that keeps coming is read whole, however long it takes: silence is what times out", async () => {
  const encoder = new TextEncoder();
  let sent = 0;
  const server = serveBody(
    new ReadableStream<Uint8Array>({
      async pull(controller) {
        await new Promise((resolve) => setTimeout(resolve, 60));
        if (sent === 8) {
          controller.enqueue(encoder.encode("1]"));
          controller.close();
          return;
        }
        controller.enqueue(encoder.encode(sent === 0 ? "[1," : "1,"));
        sent++;
      },
    }),
    { status: 200, headers: { "content-type": "application/json" } },
  );
  try {
    // Nine pieces 60 ms apart: over half a second in all, never 200 ms without a byte.
    const call = await upstreamCall(server.url, 200);
    assert.deepEqual(await readAnswerJson(call, 1024), new Array(9).fill(1));
  } finally {
    await server.close();
  }
});

Deno.test("a whole answer may take a minute and 20 ms a token of its cap, at most an hour, never less than the provider's timeout", () => {
  assert.equal(wholeAnswerTimeoutMs(120_000, 16), 120_000);
  assert.equal(wholeAnswerTimeoutMs(120_000, 100_000), 2_060_000);
  assert.equal(wholeAnswerTimeoutMs(900_000, 10_000), 900_000);
  assert.equal(wholeAnswerTimeoutMs(1_000, 10_000_000), 3_600_000);
});

Deno.test("a whole answer may be as long as its cap allows plus the request it repeats", () => {
  const tools = Array.from(
    { length: 100 },
    (_, i) => ({ name: `t${i}`, description: "x".repeat(3000) }),
  );
  const small = wholeAnswerBytes(16, {});
  const echoing = wholeAnswerBytes(16, { tools });
  assert.ok(echoing - small >= new TextEncoder().encode(JSON.stringify({ tools })).length);
  assert.ok(wholeAnswerBytes(100_000, {}) > wholeAnswerBytes(16, {}));
});
