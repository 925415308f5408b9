import assert from "node:assert/strict";
import { toBase64 } from "../../embedding_vectors.ts";
import { type EmbedRequest, ProviderError } from "../types.ts";
import type { Model } from "@/lib/catalog/mod.ts";
import {
  embeddingsAnswerBytes,
  embeddingsBody,
  MAX_VECTOR_DIMENSIONS,
  readEmbeddingsAnswer,
} from "./embeddings.ts";

const documented = JSON.parse(
  Deno.readTextFileSync(new URL("./fixtures/embeddings.json", import.meta.url)),
);

function request(fields: Partial<EmbedRequest> = {}): EmbedRequest {
  return {
    model: { upstreamModel: "text-embedding-3-small" } as Model,
    input: "The food was delicious and the waiter...",
    inputs: ["The food was delicious and the waiter..."],
    encodingFormat: "float",
    dimensions: undefined,
    user: undefined,
    signal: new AbortController().signal,
    requestId: "req_test",
    ...fields,
  };
}

function malformed(json: unknown, req = request()) {
  assert.throws(
    () => readEmbeddingsAnswer(json, req),
    (e: unknown) => e instanceof ProviderError && e.kind === "malformed_response",
  );
}

Deno.test("the request carries the upstream model, the input as sent, and only the fields given", () => {
  assert.deepEqual(embeddingsBody(request()), {
    model: "text-embedding-3-small",
    input: "The food was delicious and the waiter...",
    encoding_format: "float",
  });
  assert.deepEqual(
    embeddingsBody(request({
      input: [[1, 2], [3]],
      inputs: [[1, 2], [3]],
      encodingFormat: "base64",
      dimensions: 256,
      user: "u-1",
    })),
    {
      model: "text-embedding-3-small",
      input: [[1, 2], [3]],
      encoding_format: "base64",
      dimensions: 256,
      user: "u-1",
    },
  );
});

Deno.test("the documented answer gives its vector and its prompt tokens", () => {
  assert.deepEqual(readEmbeddingsAnswer(documented, request()), {
    data: [{
      object: "embedding",
      index: 0,
      embedding: [0.0023064255, -0.009327292, -0.0028842222],
    }],
    promptTokens: 8,
  });
});

Deno.test("an answer without usage leaves the tokens to be counted", () => {
  const { usage: _, ...bare } = documented;
  assert.equal(readEmbeddingsAnswer(bare, request()).promptTokens, null);
  assert.equal(readEmbeddingsAnswer({ ...bare, usage: "n/a" }, request()).promptTokens, null);
});

Deno.test("vectors come back in input order, by their index", () => {
  const answer = {
    data: [
      { object: "embedding", index: 1, embedding: [1] },
      { object: "embedding", index: 0, embedding: [0] },
    ],
  };
  const result = readEmbeddingsAnswer(answer, request({ input: ["a", "b"], inputs: ["a", "b"] }));
  assert.deepEqual(result.data.map((d) => d.embedding), [[0], [1]]);
  assert.deepEqual(result.data.map((d) => d.index), [0, 1]);
});

Deno.test("a server that ignores encoding_format still gives the client its encoding", () => {
  const asBase64 = readEmbeddingsAnswer(documented, request({ encodingFormat: "base64" }));
  assert.equal(
    asBase64.data[0].embedding,
    toBase64([0.0023064255, -0.009327292, -0.0028842222]),
  );
  const floats = readEmbeddingsAnswer(
    { data: [{ index: 0, embedding: toBase64([0.5, -1]) }] },
    request(),
  );
  assert.deepEqual(floats.data[0].embedding, [0.5, -1]);
});

Deno.test("an answer that is not one vector per input is malformed", () => {
  const two = request({ input: ["a", "b"], inputs: ["a", "b"] });
  malformed({ data: [{ embedding: [1] }] }, two);
  malformed({ data: [{ index: 0, embedding: [1] }, { index: 0, embedding: [2] }] }, two);
  malformed({ data: [{ index: 0, embedding: [1] }, { index: 5, embedding: [2] }] }, two);
  malformed({ object: "list" });
  malformed({ data: [{ embedding: { x: 1 } }] });
  malformed({ data: [{ embedding: "%%%" }] });
  malformed("not json object");
});

Deno.test("the read limit holds any answer the reader accepts: every number at its longest, full-size floats whatever size or encoding was asked", () => {
  const inputs = ["a", "b", "c"];
  // The longest a float32 widened to a double prints.
  const longest = -1.1754943508222875e-38;
  const answer = (size: number, base64: boolean) => {
    const vector = new Array(size).fill(longest);
    return JSON.stringify({
      object: "list",
      data: inputs.map((_, index) => ({
        object: "embedding",
        index,
        embedding: base64 ? toBase64(vector) : vector,
      })),
      model: "text-embedding-3-large-with-a-long-dated-name-2026-11-27",
      usage: { prompt_tokens: 123_456_789, total_tokens: 123_456_789 },
    });
  };
  const cases = [
    // As asked.
    { dimensions: 256, encodingFormat: "float", size: 256, base64: false },
    { dimensions: 256, encodingFormat: "base64", size: 256, base64: true },
    { dimensions: undefined, encodingFormat: "float", size: MAX_VECTOR_DIMENSIONS, base64: false },
    { dimensions: 12_000, encodingFormat: "float", size: 12_000, base64: false },
    // A server that ignores `dimensions` or `encoding_format`: full-size floats.
    { dimensions: 256, encodingFormat: "base64", size: MAX_VECTOR_DIMENSIONS, base64: false },
  ] as const;
  for (const { dimensions, encodingFormat, size, base64 } of cases) {
    const text = answer(size, base64);
    const limit = embeddingsAnswerBytes(request({ inputs, dimensions, encodingFormat }));
    assert.ok(text.length <= limit, `${text.length} > ${limit} (${dimensions} ${encodingFormat})`);
  }
});

Deno.test("the read limit grows with the inputs, about 213 KB each, not without bound", () => {
  const one = embeddingsAnswerBytes(request({ inputs: ["a"] }));
  const many = embeddingsAnswerBytes(request({ inputs: new Array(2048).fill("a") }));
  assert.ok(one < 300_000, String(one));
  assert.equal(many - one, 2047 * (one - 64 * 1024));
});
