import assert from "node:assert/strict";
import { encodeSseData, encodeSseEvent, MAX_LINE_CHARS, parseSse, type SseEvent } from "./sse.ts";
import { ProviderError } from "./providers/types.ts";
import { until } from "../../tests/fakes/common.ts";

const encoder = new TextEncoder();

/** A body that delivers exactly these chunks, one read each. */
function body(...chunks: (string | Uint8Array)[]): ReadableStream<Uint8Array> {
  const queue = chunks.map((c) => typeof c === "string" ? encoder.encode(c) : c);
  return new ReadableStream({
    pull(controller) {
      const next = queue.shift();
      if (next) controller.enqueue(next);
      else controller.close();
    },
  });
}

async function events(stream: ReadableStream<Uint8Array>): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  for await (const batch of parseSse(stream)) out.push(...batch);
  return out;
}

Deno.test("the events one read completes come as one batch; a read that completes none brings none", async () => {
  const batches = await Array.fromAsync(
    parseSse(body("data: one\n\ndata: two\n\nda", "ta: three\n", "\n: comment\n\n")),
  );
  assert.deepEqual(batches, [
    [{ event: null, data: "one" }, { event: null, data: "two" }],
    [{ event: null, data: "three" }],
  ]);
});

Deno.test("a read is a sign of life when it ends a line, a comment's too; bytes that never end one are not", async () => {
  let signs = 0;
  const reads = ["data: {", '"a"', ":1}", "\n", "\n", ": keep-alive\r", "\n", "data: x"];
  await Array.fromAsync(parseSse(body(...reads), undefined, () => signs++));
  // "\n", "\n", ": keep-alive\r": the lone CR ends its line; the LF after it ends nothing new.
  assert.equal(signs, 3);
});

Deno.test("events are separated by blank lines, LF line endings", async () => {
  assert.deepEqual(await events(body("data: one\n\ndata: two\n\n")), [
    { event: null, data: "one" },
    { event: null, data: "two" },
  ]);
});

Deno.test("CRLF line endings end lines and events like LF", async () => {
  assert.deepEqual(await events(body("data: one\r\n\r\ndata: two\r\n\r\n")), [
    { event: null, data: "one" },
    { event: null, data: "two" },
  ]);
});

Deno.test("a lone CR ends a line", async () => {
  assert.deepEqual(await events(body("data: one\r\rdata: two\r\r")), [
    { event: null, data: "one" },
    { event: null, data: "two" },
  ]);
});

Deno.test("a CRLF split across two chunks is one line ending, not a blank line", async () => {
  assert.deepEqual(await events(body("data: a\r", "\ndata: b\r\n\r\n")), [
    { event: null, data: "a\nb" },
  ]);
});

Deno.test("a lone CR at the end of a chunk ends its line once the next chunk shows no LF", async () => {
  assert.deepEqual(await events(body("data: a\r", "\r", "data: b\r", "\r")), [
    { event: null, data: "a" },
    { event: null, data: "b" },
  ]);
});

Deno.test("an event split anywhere across chunks, even inside a field name, is reassembled", async () => {
  const text = 'event: delta\ndata: {"x":1}\n\n';
  for (let cut = 1; cut < text.length; cut++) {
    assert.deepEqual(
      await events(body(text.slice(0, cut), text.slice(cut))),
      [{ event: "delta", data: '{"x":1}' }],
      `cut at ${cut}`,
    );
  }
});

Deno.test("a multi-byte character split across chunks is decoded whole", async () => {
  const bytes = encoder.encode("data: é€😀\n\n");
  const cut = bytes.indexOf(0x82); // inside the euro sign
  assert.deepEqual(await events(body(bytes.slice(0, cut), bytes.slice(cut))), [
    { event: null, data: "é€😀" },
  ]);
});

Deno.test("a line longer than the limit cuts the stream, with or without CRs, before more is held", async () => {
  for (const start of ["data: ", "data: \r"]) {
    const mebibyte = encoder.encode("x".repeat(1024 * 1024));
    let sent = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(sent === 0 ? encoder.encode(start) : mebibyte);
        sent++;
      },
    });
    await assert.rejects(
      events(endless),
      (error) => error instanceof ProviderError && error.kind === "stream_cut",
    );
    assert.ok(sent <= MAX_LINE_CHARS / (1024 * 1024) + 3, `read ${sent} MiB before the cut`);
  }
});

Deno.test("the events a read completed before a line too long are handed on before the cut", async () => {
  const read = encoder.encode(`data: usage\n\ndata: ${"x".repeat(MAX_LINE_CHARS + 1)}`);
  const seen: SseEvent[] = [];
  await assert.rejects(
    async () => {
      for await (const batch of parseSse(body(read))) seen.push(...batch);
    },
    (error) => error instanceof ProviderError && error.kind === "stream_cut",
  );
  assert.deepEqual(seen, [{ event: null, data: "usage" }]);
});

Deno.test("comment lines are ignored, and a block of comments alone is no event", async () => {
  assert.deepEqual(await events(body(": keep-alive\n\n:ping\ndata: x\n: between\n\n")), [
    { event: null, data: "x" },
  ]);
});

Deno.test("several data lines of one event are joined with a line feed", async () => {
  assert.deepEqual(await events(body("data: first\ndata: second\ndata:\ndata: fourth\n\n")), [
    { event: null, data: "first\nsecond\n\nfourth" },
  ]);
});

Deno.test("an event name applies to its own event only", async () => {
  assert.deepEqual(
    await events(body("event: message_start\ndata: {}\n\ndata: plain\n\nevent: ping\ndata: 1\n\n")),
    [
      { event: "message_start", data: "{}" },
      { event: null, data: "plain" },
      { event: "ping", data: "1" },
    ],
  );
});

Deno.test("one space after the colon is dropped, further spaces are data", async () => {
  assert.deepEqual(await events(body("data:none\n\ndata:  two\n\n")), [
    { event: null, data: "none" },
    { event: null, data: " two" },
  ]);
});

Deno.test("a field line without a colon is the field with an empty value", async () => {
  assert.deepEqual(await events(body("data\n\n")), [{ event: null, data: "" }]);
});

Deno.test("an empty data line is an event with empty data, and joins others as an empty line", async () => {
  assert.deepEqual(await events(body("data:\n\ndata: a\ndata:\ndata: b\n\n")), [
    { event: null, data: "" },
    { event: null, data: "a\n\nb" },
  ]);
});

Deno.test("fields other than data and event (id, retry, unknown) are ignored", async () => {
  assert.deepEqual(await events(body("id: 7\nretry: 100\nfoo: bar\ndata: x\n\n")), [
    { event: null, data: "x" },
  ]);
});

Deno.test("an event name without data is no event", async () => {
  assert.deepEqual(await events(body("event: ping\n\ndata: x\n\n")), [
    { event: null, data: "x" },
  ]);
});

Deno.test("a last event whose lines end but no blank line follows is still delivered", async () => {
  assert.deepEqual(await events(body("data: one\n\nevent: last\ndata: two\n")), [
    { event: null, data: "one" },
    { event: "last", data: "two" },
  ]);
});

Deno.test("a consumer that stops early cancels the body", async () => {
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(encoder.encode("data: one\n\ndata: two\n\n"));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const batch of parseSse(stream)) {
    assert.equal(batch[0].data, "one");
    break;
  }
  assert.equal(cancelled, true);
});

Deno.test("encodeSseData writes one data event ended by a blank line", () => {
  assert.equal(new TextDecoder().decode(encodeSseData('{"a":1}')), 'data: {"a":1}\n\n');
});

Deno.test("encoded events keep their own bytes while later ones are encoded, past any one buffer", () => {
  const texts = Array.from(
    { length: 2_000 },
    (_, i) => JSON.stringify({ i, text: i % 3 ? "péage 🚗" : "x".repeat(i % 700) }),
  );
  const encoded = texts.map((text) => encodeSseData(text));
  const decoder = new TextDecoder();
  encoded.forEach((bytes, i) => assert.equal(decoder.decode(bytes), `data: ${texts[i]}\n\n`));
});

Deno.test("an event larger than the shared buffer is encoded whole", () => {
  const data = "é".repeat(100_000);
  assert.equal(
    new TextDecoder().decode(encodeSseEvent("big", data)),
    `event: big\ndata: ${data}\n\n`,
  );
});

Deno.test("a last line with no line break at all is still read, so a final usage event counts", async () => {
  assert.deepEqual(await events(body('data: {"a":1}\n\ndata: {"usage":', "7}")), [
    { event: null, data: '{"a":1}' },
    { event: null, data: '{"usage":7}' },
  ]);
});

Deno.test("a stream ending in a lone CR ends its last line there", async () => {
  assert.deepEqual(await events(body("event: done\rdata: x\r")), [{ event: "done", data: "x" }]);
});

/** A byte stream (as a fetch body is), read into one reused buffer by parseSse. */
function byteBody(...chunks: string[]): ReadableStream<Uint8Array> {
  const queue = chunks.map((c) => encoder.encode(c));
  let cancelled = false;
  const stream = new ReadableStream({
    type: "bytes",
    pull(controller) {
      const next = queue.shift();
      if (next) return controller.enqueue(next);
      controller.close();
      // A byte source closing under a pending BYOB read must answer it (with 0 bytes).
      controller.byobRequest?.respond(0);
    },
    cancel() {
      cancelled = true;
    },
  });
  return Object.assign(stream, { cancelled: () => cancelled });
}

Deno.test("a byte stream is read whole through the reused buffer, an event longer than the buffer included", async () => {
  const long = "x".repeat(40_000);
  const got = await events(
    byteBody(
      `data: a\n\ndata: ${long.slice(0, 25_000)}`,
      `${long.slice(25_000)}\n\n`,
      "data: b\n\n",
    ),
  );
  assert.deepEqual(got.map((e) => e.data), ["a", long, "b"]);
});

Deno.test("byte streams read at the same time, and after others ended, each read their own bytes", async () => {
  const read = (n: number) =>
    events(byteBody(...Array.from({ length: 1 + n % 7 }, (_, i) => `data: ${n}-${i}\n\n`)));
  const expected = (n: number) => Array.from({ length: 1 + n % 7 }, (_, i) => `${n}-${i}`);
  for (let round = 0; round < 3; round++) {
    const bodies = Array.from({ length: 40 }, (_, n) => read(round * 100 + n));
    const got = await Promise.all(bodies);
    got.forEach((e, n) => assert.deepEqual(e.map((x) => x.data), expected(round * 100 + n)));
  }
});

Deno.test("a consumer that stops early cancels a byte stream too", async () => {
  const stream = byteBody("data: one\n\ndata: two\n\n", "data: three\n\n");
  for await (const batch of parseSse(stream)) {
    assert.equal(batch[0].data, "one");
    break;
  }
  assert.equal((stream as unknown as { cancelled(): boolean }).cancelled(), true);
});

/** A body that counts how it ended: read to its end, or cancelled. */
function endingBody(chunks: string[], after: () => Uint8Array | null = () => null) {
  const ending = { readToEnd: false, cancelled: false };
  const queue = chunks.map((c) => encoder.encode(c));
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = queue.shift() ?? after();
      if (next) return controller.enqueue(next);
      ending.readToEnd = true;
      controller.close();
    },
    cancel() {
      ending.cancelled = true;
    },
  });
  return { stream, ending };
}

Deno.test("a reader that stops at the stream's last event leaves the body to be read to its end, not cancelled (the connection can be reused)", async () => {
  const { stream, ending } = endingBody(["data: a\n\n", "data: [DONE]\n\n", ""]);
  for await (const batch of parseSse(stream, (e) => e.data === "[DONE]")) {
    if (batch.some((event) => event.data === "[DONE]")) break;
  }
  await until(() => ending.readToEnd || ending.cancelled, "the body's end");
  assert.deepEqual(ending, { readToEnd: true, cancelled: false });
});

Deno.test("a reader that stops before the last event cancels the body (the upstream stops)", async () => {
  const { stream, ending } = endingBody(["data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"]);
  for await (const _batch of parseSse(stream, (e) => e.data === "[DONE]")) break;
  await until(() => ending.readToEnd || ending.cancelled, "the body's end");
  assert.deepEqual(ending, { readToEnd: false, cancelled: true });
});

Deno.test("a body that goes on after its last event is cancelled once 64 KiB more have come", async () => {
  const filler = new Uint8Array(8_192);
  let sentAfter = 0;
  const { stream, ending } = endingBody(["data: [DONE]\n\n"], () => {
    sentAfter++;
    return filler;
  });
  for await (const _batch of parseSse(stream, (e) => e.data === "[DONE]")) break;
  await until(() => ending.cancelled, "the cancel");
  assert.equal(ending.cancelled, true);
  assert.ok(sentAfter <= 10, `read ${sentAfter} chunks of 8 KiB after the end`);
});

Deno.test("a body that sends nothing after its last event and stays open is cancelled after 2 s, not held", async () => {
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(encoder.encode("data: [DONE]\n\n"));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const _batch of parseSse(stream, (e) => e.data === "[DONE]")) break;
  await until(() => cancelled, "the cancel", { timeoutMs: 5_000 });
});
