/**
 * A fast fake OpenAI-compatible upstream for the benchmark: no delay, deterministic answers and
 * usage. Model "hold" streams its first chunk and then waits until `POST /release` (for the memory
 * scenario: many streams open at once). Run as its own process so it does not share the gateway's CPU.
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
const chunk = (delta: Record<string, unknown>, finish: string | null, model: string) =>
  encoder.encode(
    `data: ${
      JSON.stringify({
        id: "chatcmpl-bench",
        object: "chat.completion.chunk",
        created: CREATED,
        model,
        choices: [{ index: 0, delta, finish_reason: finish }],
      })
    }\n\n`,
  );
const streamHead = chunk({ role: "assistant", content: "" }, null, "fast");
const streamBody = [
  ...WORDS.map((w) => chunk({ content: w }, null, "fast")),
  chunk({}, "stop", "fast"),
  encoder.encode(
    `data: ${
      JSON.stringify({
        id: "chatcmpl-bench",
        object: "chat.completion.chunk",
        created: CREATED,
        model: "fast",
        choices: [],
        usage: USAGE,
      })
    }\n\ndata: [DONE]\n\n`,
  ),
];

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
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(streamHead);
      if (hold) await new Promise<void>((resolve) => held.push(resolve));
      for (const part of streamBody) controller.enqueue(part);
      controller.close();
    },
  });
  return new Response(stream, {
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
  });
});

console.log(JSON.stringify({ event: "listening", port }));
