import assert from "node:assert/strict";
import type { StreamEvent } from "../gateway.ts";
import type { ChatCompletionChunk } from "../providers/types.ts";
import { type ResponseEvent, ResponseEvents } from "./response.ts";
import { responseStreamEvents } from "./responses.ts";
import { testBody, testMeta } from "./test_support.ts";

const chunk = (content: string, finish: string | null = null): StreamEvent => ({
  type: "chunk",
  chunk: {
    id: "c",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: { content }, finish_reason: finish }],
  } as ChatCompletionChunk,
});

/** A converter that breaks on the chunk saying "boom", as a bug of ours would. */
class BreakingEvents extends ResponseEvents {
  override chunk(chunk: Parameters<ResponseEvents["chunk"]>[0]): ResponseEvent[] {
    if (chunk.choices?.[0]?.delta?.content === "boom") throw new TypeError("converter bug");
    return super.chunk(chunk);
  }
}

/** The upstream's answer as the gateway hands it on, counting how much of it was read. */
function source(contents: string[]) {
  const read = { count: 0 };
  async function* events(): AsyncGenerator<StreamEvent[]> {
    for (const [i, content] of contents.entries()) {
      read.count++;
      yield [chunk(content, i === contents.length - 1 ? "stop" : null)];
    }
  }
  return { events: events(), read };
}

async function run(converter: ResponseEvents, contents: string[]) {
  const logs: Record<string, unknown>[] = [];
  const upstream = source(contents);
  const out: ResponseEvent[] = [];
  for await (
    const batch of responseStreamEvents(upstream.events, converter, {
      requestId: "req_test",
      log: (fields) => logs.push(fields),
      beforeFinish: () => Promise.resolve(),
    })
  ) {
    out.push(...batch);
  }
  return { events: out, logs, read: upstream.read.count };
}

Deno.test("a conversion that throws mid-stream ends with error and response.failed, logged with the request id", async () => {
  const body = testBody({ stream: true });
  const { events, logs, read } = await run(new BreakingEvents(body, testMeta({ store: false })), [
    "Hello",
    "boom",
    " more",
    " and more",
  ]);
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
  assert.ok(!events.some((e) => e.type === "response.completed"));
  const failed = events.at(-1)!.response as { status: string; error: { code: string } };
  assert.equal(failed.status, "failed");
  assert.equal(failed.error.code, "internal_error");
  assert.match(String(events.at(-2)!.message), /req_test/);
  // What was converted before the break reached the client.
  assert.ok(events.some((e) => e.type === "response.output_text.delta" && e.delta === "Hello"));
  const sequence = events.map((e) => e.sequence_number);
  assert.deepEqual(sequence, [...sequence].sort((a, b) => a - b), "sequence numbers still rise");
  assert.equal(logs.length, 1);
  assert.equal(logs[0].event, "response_conversion_failed");
  assert.equal(logs[0].requestId, "req_test");
  assert.equal(logs[0].error, "converter bug");
  assert.equal(read, 4, "the upstream is read to its end, so its own usage is what is charged");
});

Deno.test("a conversion that throws at the end (after the last chunk) ends with error and response.failed too", async () => {
  class BreakingAtFinish extends ResponseEvents {
    override finish(): ResponseEvent[] {
      throw new RangeError("finish bug");
    }
  }
  const body = testBody({ stream: true });
  const { events, logs, read } = await run(new BreakingAtFinish(body, testMeta({ store: false })), [
    "Hi",
    " there",
  ]);
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
  assert.equal(logs[0].error, "finish bug");
  assert.equal(read, 2);
});

Deno.test("a stream converted without a fault ends with response.completed and logs nothing", async () => {
  const body = testBody({ stream: true });
  const { events, logs } = await run(new ResponseEvents(body, testMeta({ store: false })), [
    "Hi",
    " there",
  ]);
  assert.equal(events.at(-1)!.type, "response.completed");
  assert.equal(logs.length, 0);
});
