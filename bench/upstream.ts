/**
 * A fast fake OpenAI-compatible upstream for the benchmark: no delay, deterministic answers and
 * usage. Model "hold" streams its first chunk and then waits until `POST /release` (for the memory
 * scenario: many streams open at once); model "long" streams 200 chunks. Run as its own process so it does not share the gateway's CPU.
 *
 *   deno run -A bench/upstream.ts --port=18600
 */
const port = Number(Deno.args.find((a) => a.startsWith("--port="))?.slice(7) ?? 0);

const USAGE = { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 };
const WORDS = ["Tolls", " are", " paid", " per", " token", ",", " exactly", "."];
const CREATED = 1_790_000_000;

const completion = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: CREATED,
  model: "fast",
  choices: [{
    index: 0,
    message: { role: "assistant", content: WORDS.join("") },
    finish_reason: "stop",
  }],
  usage: USAGE,
});

const encoder = new TextEncoder();
/** OpenAI's chunk, with the `usage: null` it carries on every chunk when usage was asked for. */
const chunkText = (
  delta: Record<string, unknown>,
  finish: string | null,
  model: string,
  usageNull: boolean,
) =>
  `data: ${
    JSON.stringify({
      id: "chatcmpl-bench",
      object: "chat.completion.chunk",
      created: CREATED,
      model,
      choices: [{ index: 0, delta, finish_reason: finish }],
      ...(usageNull ? { usage: null } : {}),
    })
  }\n\n`;
const usageText = (usage: typeof USAGE) =>
  `data: ${
    JSON.stringify({
      id: "chatcmpl-bench",
      object: "chat.completion.chunk",
      created: CREATED,
      model: "fast",
      choices: [],
      usage,
    })
  }\n\ndata: [DONE]\n\n`;
/** A streamed answer's first part and the rest, as the upstream writes them. */
const streamOf = (words: string[], usage: typeof USAGE, usageNull: boolean) => ({
  head: encoder.encode(chunkText({ role: "assistant", content: "" }, null, "fast", usageNull)),
  body: [
    ...words.map((w) => encoder.encode(chunkText({ content: w }, null, "fast", usageNull))),
    encoder.encode(chunkText({}, "stop", "fast", usageNull)),
    encoder.encode(usageText(usage)),
  ],
});
/** Model "long": a 200-chunk answer, where the cost of relaying each chunk shows. */
const LONG_WORDS = Array.from({ length: 200 }, (_, i) => (i % 2 ? " toll" : " paid"));
const LONG_USAGE = { prompt_tokens: 12, completion_tokens: 200, total_tokens: 212 };
const streams = {
  fast: [streamOf(WORDS, USAGE, false), streamOf(WORDS, USAGE, true)],
  long: [streamOf(LONG_WORDS, LONG_USAGE, false), streamOf(LONG_WORDS, LONG_USAGE, true)],
};

let held: (() => void)[] = [];

Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, async (request) => {
  const url = new URL(request.url);
  if (request.method === "POST" && url.pathname === "/release") {
    const n = held.length;
    for (const release of held) release();
    held = [];
    return new Response(JSON.stringify({ released: n }));
  }
  if (request.method !== "POST" || !url.pathname.endsWith("/chat/completions")) {
    return new Response("not found", { status: 404 });
  }
  const body = await request.json();
  if (!body.stream) {
    return new Response(completion, { headers: { "content-type": "application/json" } });
  }
  const hold = body.model === "hold";
  const { head, body: rest } = streams[body.model === "long" ? "long" : "fast"][
    body.stream_options?.include_usage === true ? 1 : 0
  ];
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(head);
      if (hold) await new Promise<void>((resolve) => held.push(resolve));
      for (const part of rest) controller.enqueue(part);
      controller.close();
    },
  });
  return new Response(stream, {
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
  });
});

console.log(JSON.stringify({ event: "listening", port }));
