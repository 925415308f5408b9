/**
 * The body of `POST /v1/embeddings`, validated strictly: OpenAI's fields only, with OpenAI's
 * documented limits (2,048 inputs, 300,000 tokens in all); the per-input limit is the model's.
 */
import { z } from "zod";
import { ApiError } from "@/lib/core/mod.ts";
import type { Tokenizer } from "@/lib/catalog/mod.ts";
import { countLimitTokens, countTokensWith } from "./tokens.ts";
import { EndUser } from "./chat_request.ts";

/** OpenAI's limits for one request (text-embedding-3): inputs per request, tokens over all. */
export const MAX_EMBEDDING_INPUTS = 2048;
export const MAX_EMBEDDING_REQUEST_TOKENS = 300_000;

/** One input to embed: text, or token ids as the client already encoded them. */
export type EmbeddingInput = string | number[];

export interface EmbeddingsRequest {
  model: string;
  /** The `input` field as sent, forwarded unchanged. */
  input: string | string[] | number[] | number[][];
  /** The same, one entry per input. */
  inputs: EmbeddingInput[];
  encodingFormat: "float" | "base64";
  dimensions: number | undefined;
  user: string | undefined;
}

const FIELDS = ["model", "input", "encoding_format", "dimensions", "user"];

const TokenId = z.number({ error: "must be an integer token id" })
  .int("must be an integer token id")
  .min(0, "must be a token id (0 or more)")
  .max(2 ** 31 - 1, "is beyond any tokenizer's vocabulary");

const Text = z.string({ error: "must be a string" }).min(1, "must not be empty");

const TokenIds = z.array(TokenId, { error: "must be an array of token ids" })
  .min(1, "must contain at least one token id");

const InputSchema = z.union([
  Text,
  z.array(Text).min(1).max(MAX_EMBEDDING_INPUTS),
  TokenIds,
  z.array(TokenIds).min(1).max(MAX_EMBEDDING_INPUTS),
]);

const BodySchema = z.object({
  model: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  input: z.unknown(),
  encoding_format: z.enum(["float", "base64"], { error: "must be float or base64" }).optional(),
  dimensions: z.number({ error: "must be an integer" }).int("must be an integer")
    .min(1, "must be at least 1").max(65_536, "is larger than any embedding model's").optional(),
  user: EndUser.optional(),
});

/** Turns a parsed JSON body into an embeddings request, or throws the 400 naming the field. */
export function parseEmbeddingsRequest(body: unknown): EmbeddingsRequest {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new ApiError("invalid_json", "The request body must be a JSON object.");
  }
  const record = body as Record<string, unknown>;
  for (const field of ["model", "input"]) {
    if (record[field] === undefined || record[field] === null) {
      throw new ApiError("missing_parameter", `Missing required parameter: '${field}'.`, {
        param: field,
      });
    }
  }
  const unknown = Object.keys(record).find((k) => !FIELDS.includes(k));
  if (unknown !== undefined) {
    throw invalid(
      unknown.slice(0, 100),
      `Unrecognized request argument supplied: '${
        unknown.slice(0, 100)
      }'. The embeddings endpoint takes ${FIELDS.join(", ")}.`,
    );
  }
  const parsed = BodySchema.safeParse(record);
  if (!parsed.success) throw fromIssue(parsed.error.issues[0]);
  const inputs = inputsOf(record.input);
  return {
    model: parsed.data.model,
    input: record.input as EmbeddingsRequest["input"],
    inputs,
    encodingFormat: parsed.data.encoding_format ?? "float",
    dimensions: parsed.data.dimensions,
    user: parsed.data.user,
  };
}

/** The inputs one by one; the union's own error for a wrong shape would name no single path. */
function inputsOf(input: unknown): EmbeddingInput[] {
  if (!Array.isArray(input)) {
    if (typeof input !== "string") throw invalid("input", shapeMessage());
    if (input === "") throw invalid("input", "Invalid value for 'input': must not be empty.");
    return [input];
  }
  if (input.length === 0) {
    throw invalid("input", "Invalid value for 'input': must contain at least one input.");
  }
  const parsed = InputSchema.safeParse(input);
  if (parsed.success) {
    const value = parsed.data;
    return typeof value[0] === "number" ? [value as number[]] : value as EmbeddingInput[];
  }
  if (input.length > MAX_EMBEDDING_INPUTS && !input.every((x) => typeof x === "number")) {
    throw invalid(
      "input",
      `Invalid value for 'input': at most ${MAX_EMBEDDING_INPUTS} inputs per request (got ${input.length}).`,
    );
  }
  // Name the first element that breaks the shape its first element chose.
  const first = input[0];
  const schema = typeof first === "string"
    ? Text
    : typeof first === "number"
    ? TokenId
    : Array.isArray(first)
    ? TokenIds
    : null;
  if (!schema) throw invalid("input[0]", shapeMessage());
  for (const [i, item] of input.entries()) {
    const one = schema.safeParse(item);
    if (!one.success) {
      const issue = one.error.issues[0];
      const param = `input[${i}]${issue.path.map((p) => `[${String(p)}]`).join("")}`;
      throw invalid(param, `Invalid value for '${param}': ${issue.message}.`);
    }
  }
  throw invalid("input", shapeMessage());
}

function shapeMessage() {
  return "Invalid value for 'input': must be a string, an array of strings, an array of token ids, or an array of arrays of token ids.";
}

/**
 * The tokens to hold for the inputs: for text an upper bound (the larger of its o200k and cl100k
 * counts, as an OpenAI-compatible server may bill either; its bytes for a utf8_bytes model), for
 * token ids the length. The limits are checked in the model's own count instead (cl100k for
 * OpenAI's embedding models), as the provider checks them: the larger count would refuse inputs
 * the model takes. Throws when one input is longer than the model takes, or all of them more than
 * one request may carry. A utf8_bytes model's text has no count of its own to check a limit in
 * (its bytes would refuse text the model takes): its provider checks it.
 */
export function countEmbeddingTokens(
  request: Pick<EmbeddingsRequest, "input" | "inputs">,
  model: { id: string; contextTokens: number; tokenizer: Tokenizer },
): number {
  const { input, inputs } = request;
  // One string or one token array is the whole input; otherwise each input has its index.
  const single = !Array.isArray(input) || typeof input[0] === "number";
  let total = 0;
  let held = 0;
  for (const [i, one] of inputs.entries()) {
    // Counted only as far as the limit: an input past it is refused, however long.
    const tokens = typeof one !== "string"
      ? one.length
      : model.tokenizer === "utf8_bytes"
      ? 0
      : countLimitTokens(model.tokenizer, one, undefined, model.contextTokens);
    if (tokens > model.contextTokens) {
      const param = single ? "input" : `input[${i}]`;
      throw new ApiError(
        "context_length_exceeded",
        `Input ${i} has more than ${model.contextTokens} tokens, the most ${model.id} takes per input. Nothing was charged.`,
        { param },
      );
    }
    held += typeof one === "string" ? heldTokens(model.tokenizer, one) : one.length;
    total += tokens;
  }
  if (total > MAX_EMBEDDING_REQUEST_TOKENS) {
    throw invalid(
      "input",
      `Invalid value for 'input': ${total} tokens in all, more than the ${MAX_EMBEDDING_REQUEST_TOKENS} one request may carry. Split the inputs over several requests.`,
    );
  }
  return held;
}

/**
 * What an open model's server adds to each text it embeds: the tokenizer's special tokens (vLLM
 * adds them by default and bills them: BERT's [CLS] and [SEP], XLM-R's <s> and </s>), with room
 * over. 2,048 one-byte inputs were held at 2,048 tokens and billed 6,144.
 */
const OPEN_EMBEDDING_SPECIAL_TOKENS = 4;

/**
 * An upper bound of a text's tokens whichever tokenizer bills it: countTokensWith's cl100k is the
 * larger of both OpenAI encodings, and no byte-level tokenizer exceeds a text's bytes (and the
 * special tokens an open model's server adds).
 */
function heldTokens(tokenizer: Tokenizer, text: string): number {
  return tokenizer === "utf8_bytes"
    ? countTokensWith("utf8_bytes", text) + OPEN_EMBEDDING_SPECIAL_TOKENS
    : countTokensWith("cl100k", text);
}

function fromIssue(issue: z.core.$ZodIssue): ApiError {
  const param = issue.path.map(String).join(".") || "(body)";
  return invalid(param, `Invalid value for '${param}': ${issue.message}.`);
}

function invalid(param: string, message: string) {
  return new ApiError("invalid_parameter", message, { param });
}
