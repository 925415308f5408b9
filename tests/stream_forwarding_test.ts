import assert from "node:assert/strict";
import { assertAuditClean, serveLoopback, startService, userMessage } from "./helpers.ts";

const encoder = new TextEncoder();

function chunk(content: string, finish: string | null = null) {
  return encoder.encode(
    `data: ${
      JSON.stringify({
        id: "chatcmpl-1",
        object: "chat.completion.chunk",
        created: 1,
        model: "gpt-test",
        choices: [{ index: 0, delta: { content }, finish_reason: finish }],
      })
    }\n\n`,
  );
}

Deno.test("each streamed chunk reaches the client before the upstream sends the next one", async () => {
  // The upstream sends its second chunk only once the client has seen the first: a gateway that
  // buffered, or waited for more, would never deliver the first and the test would time out.
  let releaseRest!: () => void;
  const rest = new Promise<void>((r) => (releaseRest = r));
  const upstream = serveLoopback(() =>
    new Response(
      new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(chunk("first"));
          await rest;
          controller.enqueue(chunk(" second", "stop"));
          controller.enqueue(
            encoder.encode(
              `data: ${
                JSON.stringify({
                  id: "chatcmpl-1",
                  object: "chat.completion.chunk",
                  created: 1,
                  model: "gpt-test",
                  choices: [],
                  usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
                })
              }\n\ndata: [DONE]\n\n`,
            ),
          );
          controller.close();
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    )
  );
  const s = await startService({ openaiBaseUrl: upstream.url });
  try {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("Hi"),
      stream: true,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("the first chunk was held back")), 10_000);
    });
    try {
      while (!seen.includes('"first"')) {
        const { value, done } = await Promise.race([reader.read(), timeout]);
        assert.equal(done, false, "the stream ended before the first chunk");
        seen += value;
      }
    } finally {
      clearTimeout(timer);
    }
    assert.equal(seen.includes("second"), false);
    releaseRest();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    assert.match(seen, /" second"/);
    assert.match(seen, /data: \[DONE\]\n\n$/);
    await assertAuditClean(s.kv);
  } finally {
    releaseRest();
    await s.close();
    await upstream.close();
  }
});
