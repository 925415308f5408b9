import assert from "node:assert/strict";
import type { Model } from "@/lib/catalog/mod.ts";
import { fromBase64 } from "../../embedding_vectors.ts";
import { countTextTokens, textTokenIds } from "../../tokens.ts";
import { type EmbedRequest, ProviderError } from "../types.ts";
import {
  createSimulator,
  hashedEmbedding,
  MAX_SIMULATED_DIMENSIONS,
  MAX_SIMULATED_VALUES,
  SIMULATED_DIMENSIONS,
} from "./simulator.ts";

const simulator = createSimulator({ tokenDelayMs: 0 });

function embed(
  input: string | string[] | number[] | number[][],
  fields: Partial<EmbedRequest> = {},
) {
  const inputs = typeof input === "string"
    ? [input]
    : typeof input[0] === "number"
    ? [input as number[]]
    : input as (string | number[])[];
  return simulator.embed!({
    model: { upstreamModel: "embed" } as Model,
    input,
    inputs,
    encodingFormat: "float",
    dimensions: undefined,
    user: undefined,
    signal: new AbortController().signal,
    requestId: "req_test",
    ...fields,
  });
}

const cosine = (a: number[], b: number[]) => a.reduce((sum, x, i) => sum + x * b[i], 0);

Deno.test("the simulator embeds each input as a unit vector and bills its o200k tokens", async () => {
  const texts = ["The cat sat on the mat.", "Stock markets fell sharply today."];
  const result = await embed(texts);
  assert.equal(result.promptTokens, countTextTokens(texts[0]) + countTextTokens(texts[1]));
  assert.deepEqual(result.data.map((d) => d.index), [0, 1]);
  for (const { embedding } of result.data) {
    const v = embedding as number[];
    assert.equal(v.length, SIMULATED_DIMENSIONS);
    assert.ok(Math.abs(cosine(v, v) - 1) < 1e-9);
  }
});

Deno.test("equal texts embed equally, and texts sharing words are closer than unrelated ones", async () => {
  const [a, again, near, far] = (await embed([
    "the quick brown fox jumps over the lazy dog",
    "the quick brown fox jumps over the lazy dog",
    "a quick brown fox leaps over a sleepy dog",
    "quarterly revenue grew by eleven percent",
  ])).data.map((d) => d.embedding as number[]);
  assert.deepEqual(a, again);
  assert.ok(cosine(a, near) > cosine(a, far) + 0.2, `${cosine(a, near)} vs ${cosine(a, far)}`);
});

Deno.test("token ids are embedded as they are, counted by their length", async () => {
  const result = await embed([[10, 20, 30], [10, 20]]);
  assert.equal(result.promptTokens, 5);
  assert.deepEqual(result.data[0].embedding, hashedEmbedding([10, 20, 30], SIMULATED_DIMENSIONS));
});

Deno.test("the simulator honours dimensions and base64, and refuses more than it can give", async () => {
  const small = await embed("hello", { dimensions: 8, encodingFormat: "base64" });
  const floats = fromBase64(small.data[0].embedding as string)!;
  assert.equal(floats.length, 8);
  assert.deepEqual(floats, hashedEmbedding(textTokenIds("hello"), 8).map(Math.fround));
  await assert.rejects(
    embed("hello", { dimensions: MAX_SIMULATED_DIMENSIONS + 1 }),
    (e: unknown) => e instanceof ProviderError && e.kind === "bad_request",
  );
});

Deno.test("the simulator returns at most 2,048 inputs' worth of default-sized vectors per request", async () => {
  const most = await embed(Array(2048).fill("a"));
  assert.equal(most.data.length * most.data[0].embedding.length, MAX_SIMULATED_VALUES);
  await embed(Array(170).fill("a"), { dimensions: MAX_SIMULATED_DIMENSIONS });
  // 2,048 inputs at 3,072 values each: a 34 MB answer to an 8 KB request.
  await assert.rejects(
    embed(Array(171).fill("a"), { dimensions: MAX_SIMULATED_DIMENSIONS }),
    (e: unknown) => e instanceof ProviderError && e.kind === "bad_request",
  );
});
