import assert from "node:assert/strict";
import type { ProviderConfig } from "@/lib/catalog/mod.ts";
import { PaidStream } from "./paid_stream.ts";
import type { ChatCompletionChunk, StreamPart } from "./providers/types.ts";

const chunk = (finish: string | null): StreamPart => ({
  type: "chunk",
  chunk: {
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 0,
    model: "m",
    choices: [{ index: 0, delta: {}, finish_reason: finish }],
  } as ChatCompletionChunk,
});

Deno.test("a stream's chunks after a signed_thinking part wait until the thinking is kept: the client gets the finish only once the keep committed", async () => {
  const kept = Promise.withResolvers<void>();
  let keeps = 0;
  const batches: StreamPart[][] = [
    [chunk(null)],
    [
      { type: "signed_thinking", toolCallId: "toolu_1", details: [] },
      chunk("tool_calls"),
      { type: "usage", usage: { promptTokens: 1, completionTokens: 1 } },
    ],
  ];
  const parts = (async function* () {
    yield* batches.slice(1);
  })();
  const paid = new PaidStream(
    {
      requestId: "req_1",
      provider: { name: "ant", kind: "anthropic" } as ProviderConfig,
      modelId: "ant/claude",
      countedPromptTokens: 1,
      countOutput: () => 0,
      maxOutputTokens: 10,
      includeUsage: false,
      settle: () => Promise.resolve(1),
      onUpstreamCut: () => {},
      upstreamErrorLog: () => ({}) as never,
      keepThinking: () => {
        keeps++;
        return kept.promise;
      },
      log: () => {},
    },
    parts,
    { done: false, value: batches[0] },
    new AbortController(),
  );
  const events = paid.events;
  assert.equal((await events.next()).done, false);
  let finished = false;
  const next = events.next().then((r) => {
    finished = true;
    return r;
  });
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(keeps, 1);
  assert.equal(finished, false, "the finish waited for the keep");
  kept.resolve();
  const batch = await next;
  assert.ok(!batch.done && batch.value.some((e) => e.type === "chunk"));
  while (!(await events.next()).done);
});
