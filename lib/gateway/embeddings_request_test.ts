import assert from "node:assert/strict";
import { ApiError } from "@/lib/core/mod.ts";
import {
  countEmbeddingTokens,
  MAX_EMBEDDING_INPUTS,
  parseEmbeddingsRequest,
} from "./embeddings_request.ts";
import { countLimitTokens, countTextTokens, countTextTokensEitherEncoding } from "./tokens.ts";

const MODEL = "openai/text-embedding-3-small";
const SMALL = { id: MODEL, contextTokens: 8192, tokenizer: "cl100k" as const };

function refusal(body: unknown): { code: string; param?: string; message: string } {
  try {
    parseEmbeddingsRequest(body);
  } catch (error) {
    assert.ok(error instanceof ApiError, String(error));
    return { code: error.code, param: error.param, message: error.message };
  }
  assert.fail(`accepted ${JSON.stringify(body).slice(0, 200)}`);
}

Deno.test("input may be a string, strings, token ids, or arrays of token ids", () => {
  const cases: [unknown, unknown[]][] = [
    ["hello", ["hello"]],
    [["a", "b"], ["a", "b"]],
    [[1, 2, 3], [[1, 2, 3]]],
    [[[1, 2], [3]], [[1, 2], [3]]],
  ];
  for (const [input, inputs] of cases) {
    const request = parseEmbeddingsRequest({ model: MODEL, input });
    assert.deepEqual(request.inputs, inputs);
    assert.deepEqual(request.input, input, "the input is forwarded as sent");
    assert.equal(request.encodingFormat, "float");
  }
});

Deno.test("encoding_format, dimensions and user are read; float is the default format", () => {
  const request = parseEmbeddingsRequest({
    model: MODEL,
    input: "x",
    encoding_format: "base64",
    dimensions: 256,
    user: "end-user-7",
  });
  assert.equal(request.encodingFormat, "base64");
  assert.equal(request.dimensions, 256);
  assert.equal(request.user, "end-user-7");
});

Deno.test("model and input are required: 400 missing_parameter naming the field", () => {
  assert.deepEqual(refusal({ input: "x" }).param, "model");
  assert.equal(refusal({ input: "x" }).code, "missing_parameter");
  assert.deepEqual(refusal({ model: MODEL, input: null }).param, "input");
});

Deno.test("a body that is not an object is invalid_json", () => {
  for (const body of [null, [], "text", 5]) assert.equal(refusal(body).code, "invalid_json");
});

Deno.test("a field the endpoint does not take is refused, named in param", () => {
  const r = refusal({ model: MODEL, input: "x", temperature: 1 });
  assert.equal(r.code, "invalid_parameter");
  assert.equal(r.param, "temperature");
  assert.match(r.message, /Unrecognized request argument/);
});

Deno.test("each malformed input is refused with the exact path of the bad element", () => {
  const cases: [unknown, string][] = [
    ["", "input"],
    [[], "input"],
    [42, "input"],
    [{ text: "x" }, "input"],
    [["a", ""], "input[1]"],
    [["a", 5], "input[1]"],
    [[1, 2, -3], "input[2]"],
    [[1, 2.5], "input[1]"],
    [[1, "2"], "input[1]"],
    [[[1], []], "input[1]"],
    [[[1], [2, "x"]], "input[1][1]"],
    [[[1], "x"], "input[1]"],
    [[true], "input[0]"],
    [[null], "input[0]"],
  ];
  for (const [input, param] of cases) {
    const r = refusal({ model: MODEL, input });
    assert.equal(r.code, "invalid_parameter", JSON.stringify(input));
    assert.equal(r.param, param, JSON.stringify(input));
  }
});

Deno.test(`at most ${MAX_EMBEDDING_INPUTS} inputs per request`, () => {
  parseEmbeddingsRequest({ model: MODEL, input: Array(MAX_EMBEDDING_INPUTS).fill("a") });
  const r = refusal({ model: MODEL, input: Array(MAX_EMBEDDING_INPUTS + 1).fill("a") });
  assert.equal(r.param, "input");
  assert.match(r.message, /at most 2048 inputs/);
  assert.equal(
    refusal({ model: MODEL, input: Array(MAX_EMBEDDING_INPUTS + 1).fill([1]) }).param,
    "input",
  );
  // One token array is one input, however long (the model's per-input limit applies later).
  parseEmbeddingsRequest({ model: MODEL, input: Array(5000).fill(7) });
});

Deno.test("encoding_format, dimensions and user are checked", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ encoding_format: "int8" }, "encoding_format"],
    [{ dimensions: 0 }, "dimensions"],
    [{ dimensions: 1.5 }, "dimensions"],
    [{ dimensions: "256" }, "dimensions"],
    [{ user: 7 }, "user"],
    [{ model: "" }, "model"],
  ];
  for (const [fields, param] of cases) {
    const r = refusal({ model: MODEL, input: "x", ...fields });
    assert.equal(r.code, "invalid_parameter", param);
    assert.equal(r.param, param);
  }
});

Deno.test("texts are counted with the larger of o200k and cl100k, token arrays by their length", () => {
  const texts = parseEmbeddingsRequest({ model: MODEL, input: ["Hello, Claude", "日本語"] });
  assert.equal(
    countEmbeddingTokens(texts, SMALL),
    countTextTokensEitherEncoding("Hello, Claude") + countTextTokensEitherEncoding("日本語"),
  );
  // The embedding models bill cl100k: 4 tokens for "日本語" where o200k counts 2.
  assert.ok(countEmbeddingTokens(texts, SMALL) >= countTextTokens("Hello, Claude") + 4);
  const ids = parseEmbeddingsRequest({ model: MODEL, input: [[1, 2, 3], [4]] });
  assert.equal(countEmbeddingTokens(ids, SMALL), 4);
});

Deno.test("an input longer than the model takes is context_length_exceeded, naming it", () => {
  const tiny = { ...SMALL, contextTokens: 3 };
  const cases: [unknown, string][] = [
    [[1, 2, 3, 4], "input"],
    ["one two three four five", "input"],
    [["ok", "one two three four five"], "input[1]"],
    [[[1], [1, 2, 3, 4]], "input[1]"],
  ];
  for (const [input, param] of cases) {
    const request = parseEmbeddingsRequest({ model: MODEL, input });
    assert.throws(
      () => countEmbeddingTokens(request, tiny),
      (e: unknown) =>
        e instanceof ApiError && e.code === "context_length_exceeded" && e.param === param,
    );
  }
});

Deno.test("all inputs together may hold at most 300,000 tokens", () => {
  const request = parseEmbeddingsRequest({
    model: MODEL,
    input: Array(40).fill(Array(8000).fill(1)),
  });
  assert.throws(
    () => countEmbeddingTokens(request, SMALL),
    (e: unknown) => e instanceof ApiError && e.code === "invalid_parameter" && e.param === "input",
  );
});

Deno.test("an input's limit is checked in the model's own count (cl100k), while the hold stays the larger count", () => {
  // Runs of newlines (each shorter than a long run): 3 cl100k tokens a unit, 5 in o200k.
  const unit = "\n".repeat(64) + " a";
  const text = unit.repeat(33) + "\n".repeat(32);
  assert.equal(countLimitTokens("cl100k", text), 100);
  assert.equal(countTextTokens(text), 167);
  const model = { ...SMALL, contextTokens: 100 };
  const request = parseEmbeddingsRequest({ model: MODEL, input: [text, "ok"] });
  assert.equal(
    countEmbeddingTokens(request, model),
    167 + countTextTokensEitherEncoding("ok"),
    "held at the larger count",
  );
  const over = parseEmbeddingsRequest({ model: MODEL, input: ["ok", text + unit] });
  assert.throws(
    () => countEmbeddingTokens(over, model),
    (e: unknown) =>
      e instanceof ApiError && e.code === "context_length_exceeded" && e.param === "input[1]" &&
      /has more than 100 tokens/.test(e.message),
  );
});

Deno.test("a utf8_bytes model's text is held at its bytes and its server's special tokens, its limit left to the provider; token ids are limited by their length", () => {
  const bytes = { ...SMALL, tokenizer: "utf8_bytes" as const, contextTokens: 10 };
  const accented = parseEmbeddingsRequest({ model: MODEL, input: "héllo" });
  assert.equal(countEmbeddingTokens(accented, bytes), 6 + 4);
  // 13 bytes against a limit of 10 tokens: the model may count fewer, so its provider decides.
  const longer = parseEmbeddingsRequest({ model: MODEL, input: ["héllo wörld", "ok"] });
  assert.equal(countEmbeddingTokens(longer, bytes), 13 + 4 + 2 + 4);
  assert.throws(
    () =>
      countEmbeddingTokens(
        parseEmbeddingsRequest({ model: MODEL, input: [[1], Array(11).fill(1)] }),
        bytes,
      ),
    (e: unknown) =>
      e instanceof ApiError && e.code === "context_length_exceeded" && e.param === "input[1]",
  );
});
