import assert from "node:assert/strict";
import { convertBatches, type EventConversion } from "./part_batches.ts";
import { ProviderError, type StreamPart } from "./types.ts";

const usage = (n: number): StreamPart => ({
  type: "usage",
  usage: { promptTokens: n, completionTokens: n },
});

/** Events are numbers: each makes a usage part of itself, 0 is the last, -1 fails. */
function conversion(closing: number[]): EventConversion<number> {
  return {
    take(event, parts) {
      if (event === -1) throw new Error("bad event");
      if (event === 0) return true;
      parts.push(usage(event));
      return false;
    },
    finished: () => false,
    close(parts, cut) {
      closing.push(cut ? 1 : 0);
      parts.push(usage(cut ? 100 : 200));
    },
  };
}

async function* batches(...list: number[][]) {
  for (const batch of list) yield batch;
}

const tokens = (batch: StreamPart[]) =>
  batch.map((part) => part.type === "usage" ? part.usage.promptTokens : -1);

Deno.test("each batch of events becomes one batch of parts, an empty one none, and the last event ends them", async () => {
  const closing: number[] = [];
  const out = await Array.fromAsync(
    convertBatches(batches([1, 2], [], [3, 0, 4], [5]), conversion(closing), "cut"),
  );
  assert.deepEqual(out.map(tokens), [[1, 2], [3, 200]]);
  assert.deepEqual(closing, [0]);
});

Deno.test("a failure hands on the parts before it in its batch and what the cut owes, then is thrown", async () => {
  const closing: number[] = [];
  const seen: number[][] = [];
  await assert.rejects(async () => {
    for await (
      const batch of convertBatches(batches([1], [2, -1, 3]), conversion(closing), "cut")
    ) {
      seen.push(tokens(batch));
    }
  }, /bad event/);
  assert.deepEqual(seen, [[1], [2, 100]]);
  assert.deepEqual(closing, [1]);
});

Deno.test("events that end before the last one and unfinished are a stream_cut", async () => {
  const seen: number[][] = [];
  const error = await (async () => {
    try {
      for await (const batch of convertBatches(batches([1]), conversion([]), "ended early")) {
        seen.push(tokens(batch));
      }
    } catch (error) {
      return error;
    }
  })();
  assert.ok(error instanceof ProviderError);
  assert.equal(error.kind, "stream_cut");
  assert.equal(error.message, "ended early");
  assert.deepEqual(seen, [[1], [100]]);
});
