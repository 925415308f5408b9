/**
 * What the strict OpenAI fake's two APIs share: openai_upstream.ts (Chat Completions) and
 * openai_responses.ts (the Responses API) both import it, and it imports neither, so the
 * dependencies point one way (openai_upstream.ts → openai_responses.ts → here).
 *
 * It holds the scripted answer and request types, OpenAI's error shape, the zod pieces both
 * request schemas use, the translation of zod issues into OpenAI's validation messages, the strict
 * schema rule of Structured Outputs, o200k token counting with the Cookbook's tool and
 * response-format rules, and OpenAI-style ids. Sources are cited where each rule is implemented.
 */
import { decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import { z } from "zod";
import { type FaultKnobs, valueAt } from "./common.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

// =============================================================================================
// Scripts and requests: what the model answers, what the fake saw.

export interface ScriptedToolCall {
  /** Defaults to a call_… id derived from the request. */
  id?: string;
  name: string;
  /** A JSON string as the model emits it, or a value to serialize. */
  arguments: string | Record<string, unknown>;
  /** How the arguments are split over stream chunks (defaults to one token per chunk). */
  argumentChunks?: string[];
}

export interface OpenAiAnswer extends FaultKnobs {
  /** The assistant's text. */
  content?: string;
  /** How `content` is split over stream chunks (defaults to one o200k token per chunk). */
  contentChunks?: string[];
  /** A refusal instead of content (message.content is then null). */
  refusal?: string;
  toolCalls?: ScriptedToolCall[];
  /** Hidden reasoning tokens a reasoning model spent (billed as completion tokens). */
  reasoningTokens?: number;
  /** Prompt tokens served from OpenAI's prompt cache (a subset of prompt_tokens). */
  cachedTokens?: number;
  /**
   * Prompt tokens written to the cache: GPT-5.6 and later report them as `cache_write_tokens` and
   * bill them at 1.25× input ("Prompt caching"); earlier models neither report nor bill them.
   */
  cacheWriteTokens?: number;
  /** Overrides the finish reason the fake derives (stop / length / tool_calls). */
  finishReason?: "stop" | "length" | "tool_calls" | "content_filter";
  /** The logprob given to every sampled token when the request asks for logprobs. */
  logprob?: number;
  /** Overrides the billed counts (the fake computes them otherwise). */
  promptTokens?: number;
  completionTokens?: number;
  /** Streams no usage chunk even when include_usage was asked (a provider misbehaving). */
  omitUsageChunk?: boolean;
  /** Answers this HTTP status with OpenAI's error shape instead of a completion. */
  status?: number;
  error?: { message?: string; type?: string; param?: string | null; code?: string | null };
  /** The model name the answer reports (OpenAI reports a dated snapshot). */
  model?: string;
  /**
   * Responses API only: the reasoning summary a reasoning model gives when the request asks for
   * one (`reasoning.summary`), as one summary_text part.
   */
  reasoningSummary?: string;
  /**
   * Responses API only: a second message after the tool calls, the answer (`phase:
   * "final_answer"` for the models that label phases), as GPT-5.4 may follow its preamble and
   * calls with an answer in one response. The message before the calls is then the preamble.
   */
  finalAnswer?: string;
  /**
   * Responses API only: after this many events the stream fails, with `response.failed`
   * (response.error {code, message}) or, with `event: "error"`, a bare error event.
   */
  streamError?: {
    afterEvents: number;
    event?: "response.failed" | "error";
    code?: string;
    message?: string;
  };
}

/** A validated chat request as the fake saw it. */
export interface ChatRequest {
  // deno-lint-ignore no-explicit-any
  body: Record<string, any>;
  headers: Record<string, string>;
  /** What the fake bills as prompt_tokens (before the script's overrides). */
  promptTokens: number;
  reasoningModel: boolean;
}

export interface OpenAiModelConfig {
  /** Reasoning models refuse max_tokens and non-default sampling (o1/o3/o4/gpt-5 by default). */
  reasoning?: boolean;
  /** The context window, checked against prompt + max tokens ("context_length_exceeded"). */
  contextWindow?: number;
  /** The most completion tokens the model may be asked for. */
  maxOutputTokens?: number;
  /** Image token costs: base and per 512-px tile (85/170 for gpt-4o; 2833/5667 for 4o-mini). */
  imageBaseTokens?: number;
  imageTileTokens?: number;
  /**
   * The model reads an image at its own size (GPT-5.4's `original`, `auto` on later models): one
   * patch per 32 × 32 pixels times a multiplier, whatever the detail; more than `most` is refused.
   */
  imagePatches?: { multiplier: number; most: number } | null;
  /**
   * The organization is not verified for this model, which OpenAI then refuses to stream (o3,
   * GPT-5): a request with `stream: true` is answered 400, param `stream`, code
   * `unsupported_value`, in the words quoted in continuedev/continue#8209 and
   * BeehiveInnovations/pal-mcp-server#134.
   */
  unverifiedStreaming?: boolean;
  /**
   * How an embedding model of another family counts its input (Mistral's splits digits one by
   * one); OpenAI's count by default.
   */
  countTokens?: (text: string) => number;
  /** An embedding model's vector length when `dimensions` is not sent (OpenAI's 1,536 by default). */
  embeddingLength?: number;
}

/** OpenAI's refusal to stream a model to an organization it has not verified. */
export function unverifiedStreamingRefusal(): OpenAiError {
  return invalid(
    "Your organization must be verified to stream this model. Please go to: https://platform.openai.com/settings/organization/general and click on Verify Organization. If you just verified, it can take up to 15 minutes for access to propagate.",
    "stream",
    "unsupported_value",
  );
}

export interface ModelRules extends
  Required<
    Omit<
      OpenAiModelConfig,
      "contextWindow" | "maxOutputTokens" | "countTokens" | "embeddingLength" | "imagePatches"
    >
  > {
  imagePatches: { multiplier: number; most: number } | null;
  contextWindow?: number;
  maxOutputTokens?: number;
}

// =============================================================================================
// Errors in OpenAI's shape.

export class OpenAiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string | null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
  response(): Response {
    return Response.json(
      { error: { message: this.message, type: this.type, param: this.param, code: this.code } },
      { status: this.status, headers: { "x-request-id": crypto.randomUUID(), ...this.headers } },
    );
  }
}

export function invalid(message: string, param: string | null = null, code: string | null = null) {
  return new OpenAiError(400, message, "invalid_request_error", param, code);
}

// =============================================================================================
// Request schema pieces both APIs use.

export const cacheBreakpoint = z.strictObject({
  mode: z.literal("explicit"),
  ttl: z.enum(["30m", "12h"]).optional(),
});
export const refusalPart = z.strictObject({ type: z.literal("refusal"), refusal: z.string() });
export const functionName = z.string().max(64).regex(/^[a-zA-Z0-9_-]+$/);

/** z.int() reports a string as "expected number"; this marks its type issues as integer ones. */
const INT = "expected an integer";
export const int = () => z.int({ error: INT });
export const decimal = (min: number, max: number) =>
  z.number().min(min).max(max).nullable().optional();

// =============================================================================================
// Zod issues → OpenAI's validation messages.

/** OpenAI writes paths as messages[0].content[1].image_url (param and message alike). */
export function openAiPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const p of path) out += typeof p === "number" ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

export function jsonTypeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "number") return Number.isInteger(v) ? "an integer" : "a decimal";
  if (typeof v === "string") return "a string";
  if (typeof v === "boolean") return "a boolean";
  return "an object";
}

function expectedName(expected: string): string {
  switch (expected) {
    case "string":
      return "a string";
    case "int":
      return "an integer";
    case "number":
      return "a decimal";
    case "boolean":
      return "a boolean";
    case "array":
      return "an array";
    case "object":
    case "record":
      return "an object";
    default:
      return expected;
  }
}

/** "'a', 'b', and 'c'", as OpenAI lists supported values. */
export function supportedList(values: readonly unknown[]): string {
  const quoted = values.map((v) => `'${String(v)}'`);
  if (quoted.length <= 1) return quoted.join("");
  if (quoted.length === 2) return `${quoted[0]} and ${quoted[1]}`;
  return `${quoted.slice(0, -1).join(", ")}, and ${quoted.at(-1)}`;
}

/**
 * Turns the first zod issue into OpenAI's message. The forms are OpenAI's, as quoted in public
 * threads: "Invalid type for 'max_tokens': expected an integer, but got a string instead."
 * (code invalid_type), "Invalid 'temperature': decimal above maximum value. Expected a value <= 2,
 * but got 3 instead." (decimal_above_max_value), "Invalid 'messages[1].content': empty array.
 * Expected an array with minimum length 1, but got an empty array instead." (empty_array),
 * "Missing required parameter: 'messages[0].role'." (missing_required_parameter), "Invalid value:
 * 'x'. Supported values are: 'a', 'b', and 'c'." (invalid_value), "Unknown parameter: 'x.y'."
 * (unknown_parameter).
 */
function issueToError(issue: z.core.$ZodIssue, root: unknown, prefix: PropertyKey[]): OpenAiError {
  const path = [...prefix, ...issue.path];
  const param = openAiPath(path);
  const value = valueAt(root, path);
  switch (issue.code) {
    case "unrecognized_keys": {
      const key = openAiPath([...path, issue.keys[0]]);
      return invalid(`Unknown parameter: '${key}'.`, key, "unknown_parameter");
    }
    case "invalid_type": {
      const expected = issue.message === INT ? "int" : issue.expected;
      if (value === undefined) {
        return invalid(
          `Missing required parameter: '${param}'.`,
          param,
          "missing_required_parameter",
        );
      }
      return invalid(
        `Invalid type for '${param}': expected ${expectedName(expected)}, but got ${
          jsonTypeName(value)
        } instead.`,
        param,
        "invalid_type",
      );
    }
    case "invalid_value":
      return invalid(
        `Invalid value: '${String(value)}'. Supported values are: ${supportedList(issue.values)}.`,
        param,
        "invalid_value",
      );
    case "too_big":
    case "too_small": {
      const above = issue.code === "too_big";
      const bound = issue.code === "too_big" ? issue.maximum : issue.minimum;
      if (issue.origin === "array") {
        if (!above && Array.isArray(value) && value.length === 0) {
          return invalid(
            `Invalid '${param}': empty array. Expected an array with minimum length ${bound}, but got an empty array instead.`,
            param,
            "empty_array",
          );
        }
        return invalid(
          `Invalid '${param}': array too ${above ? "long" : "short"}. Expected an array with ${
            above ? "maximum" : "minimum"
          } length ${bound}, but got an array with length ${(value as unknown[]).length} instead.`,
          param,
          `array_${above ? "above_max" : "below_min"}_length`,
        );
      }
      if (issue.origin === "string") {
        return invalid(
          `Invalid '${param}': string too ${above ? "long" : "short"}. Expected a string with ${
            above ? "maximum" : "minimum"
          } length ${bound}, but got a string with length ${String(value).length} instead.`,
          param,
          `string_${above ? "above_max" : "below_min"}_length`,
        );
      }
      const kind = Number.isInteger(value) && issue.origin === "int" ? "integer" : "decimal";
      return invalid(
        `Invalid '${param}': ${kind} ${
          above ? "above maximum" : "below minimum"
        } value. Expected a value ${above ? "<=" : ">="} ${bound}, but got ${value} instead.`,
        param,
        `${kind}_${above ? "above_max" : "below_min"}_value`,
      );
    }
    case "invalid_format":
      return invalid(
        `Invalid '${param}': string does not match pattern. Expected a string that matches the pattern '${
          "pattern" in issue ? String(issue.pattern) : issue.format
        }'.`.replace(/'\/(.*)\/'/, "'$1'"),
        param,
        "invalid_value",
      );
    case "invalid_union":
      return invalid(
        `Invalid value for '${param}': ${JSON.stringify(value)} is not one of the accepted forms.`,
        param,
        "invalid_value",
      );
    default:
      return invalid(`Invalid '${param}': ${issue.message}.`, param, "invalid_value");
  }
}

export function check(
  schema: z.ZodType,
  value: unknown,
  root: unknown,
  prefix: PropertyKey[],
): unknown {
  const result = schema.safeParse(value);
  if (!result.success) throw issueToError(result.error.issues[0], root, prefix);
  return result.data;
}

// =============================================================================================
// Structured Outputs' strict schemas.

/** Python's repr of a tuple of strings, as OpenAI prints schema contexts: (), ('a',), ('a', 'b'). */
function pyTuple(parts: string[]): string {
  if (parts.length === 0) return "()";
  if (parts.length === 1) return `('${parts[0]}',)`;
  return `(${parts.map((p) => `'${p}'`).join(", ")})`;
}

/**
 * Structured Outputs' strict mode: every object schema must set additionalProperties: false and
 * list every property as required (Structured Outputs guide, "Supported schemas"). OpenAI's words:
 * "Invalid schema for function 'f': In context=(), 'additionalProperties' is required to be
 * supplied and to be false." and "… 'required' is required to be supplied and to be an array
 * including every key in properties. Missing 'unit'."
 */
export function checkStrictSchema(
  schema: Json,
  what: string,
  param: string,
  context: string[] = [],
) {
  if (!schema || typeof schema !== "object") return;
  const fail = (detail: string) =>
    invalid(
      `Invalid schema for ${what}: In context=${pyTuple(context)}, ${detail}`,
      param,
      "invalid_function_parameters",
    );
  const isObject = schema.type === "object" || (schema.properties && !schema.type);
  if (isObject) {
    if (schema.additionalProperties !== false) {
      throw fail("'additionalProperties' is required to be supplied and to be false.");
    }
    const keys = Object.keys(schema.properties ?? {});
    const required: string[] = Array.isArray(schema.required) ? schema.required : [];
    const missing = keys.find((k) => !required.includes(k));
    if (missing !== undefined || !Array.isArray(schema.required)) {
      throw fail(
        `'required' is required to be supplied and to be an array including every key in properties.${
          missing !== undefined ? ` Missing '${missing}'.` : ""
        }`,
      );
    }
    for (const k of keys) {
      checkStrictSchema(schema.properties[k], what, param, [...context, "properties", k]);
    }
  }
  if (schema.items) checkStrictSchema(schema.items, what, param, [...context, "items"]);
  for (const key of ["anyOf", "$defs", "definitions"]) {
    const sub = schema[key];
    if (Array.isArray(sub)) {
      sub.forEach((s, k) => checkStrictSchema(s, what, param, [...context, key, String(k)]));
    } else if (sub && typeof sub === "object") {
      for (const [name, s] of Object.entries(sub)) {
        checkStrictSchema(s, what, param, [...context, key, name]);
      }
    }
  }
}

// =============================================================================================
// Billing: tokens the way OpenAI counts them.

export function messageText(m: Json): string {
  if (typeof m.content === "string") return m.content;
  if (Array.isArray(m.content)) {
    return m.content.map((p: Json) => p.text ?? p.refusal ?? "").join("");
  }
  return "";
}

const PLAIN = { disallowedSpecial: new Set<string>() };
export function tokenCount(text: string): number {
  return text ? encode(text, PLAIN).length : 0;
}

/** Token-sized pieces of text (a character split over byte tokens stays whole). */
export function tokenPieces(text: string): string[] {
  const pieces: string[] = [];
  let pending: number[] = [];
  for (const token of encode(text, PLAIN)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decode(pending));
  return pieces;
}

/**
 * Tool definitions' tokens, after the OpenAI Cookbook's `num_tokens_for_tools` (gpt-4o family):
 * 7 per function, its "name:description", 3 to open the properties, 3 plus "key:type:description"
 * per property, enum values 3 each (−3 once), 12 to close. Nested object or array property
 * schemas, which the cookbook does not count, are added as their JSON's tokens, and each enum value
 * in them at the cookbook's 3 over its own (OpenAI renders an enum `"a" | "b"` at any depth).
 */
export function toolsTokens(tools: Json[]): number {
  if (!tools.length) return 0;
  let total = 0;
  for (const tool of tools) {
    const fn = tool.function ?? tool.custom ?? {};
    total += 7;
    total += tokenCount(`${fn.name}:${(fn.description ?? "").replace(/\.$/, "")}`);
    const properties = fn.parameters?.properties ?? {};
    const keys = Object.keys(properties);
    if (keys.length) {
      total += 3;
      for (const key of keys) {
        const p = properties[key] ?? {};
        total += 3;
        if (Array.isArray(p.enum)) {
          total -= 3;
          for (const item of p.enum) total += 3 + tokenCount(String(item));
        }
        const type = Array.isArray(p.type) ? p.type.join("|") : p.type ?? "";
        total += tokenCount(`${key}:${type}:${(p.description ?? "").replace(/\.$/, "")}`);
        if (p.properties || p.items || p.anyOf) {
          const nested = { ...p, description: undefined, enum: undefined };
          total += tokenCount(JSON.stringify(nested, withoutEnums)) + nestedEnumTokens(nested);
        }
      }
    }
  }
  return total + 12;
}

/** A JSON.stringify replacer that leaves enums out: nestedEnumTokens counts them. */
const withoutEnums = (key: string, value: unknown) => key === "enum" ? undefined : value;

/** Every enum value below a schema, at the cookbook's 3 tokens over its own. */
function nestedEnumTokens(schema: Json): number {
  if (schema === null || typeof schema !== "object") return 0;
  let total = 0;
  if (!Array.isArray(schema) && Array.isArray(schema.enum)) {
    for (const item of schema.enum) total += 3 + tokenCount(String(item));
  }
  for (const value of Object.values(schema)) total += nestedEnumTokens(value);
  return total;
}

/**
 * A structured-output schema's tokens. OpenAI publishes no rule; the fake counts the schema's
 * JSON, its name and description, plus 8 of framing (documented approximation), and each enum
 * value at 3 over its own, as in tool definitions.
 */
export function responseFormatTokens(format: Json): number {
  if (format?.type !== "json_schema") return 0;
  const s = format.json_schema;
  return 8 + tokenCount(s.name) + tokenCount(s.description ?? "") +
    tokenCount(JSON.stringify(s.schema ?? {}, withoutEnums)) + nestedEnumTokens(s.schema ?? {});
}

// =============================================================================================
// Ids.

export function randomId(prefix: string, length = 24): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let id = prefix;
  for (const b of crypto.getRandomValues(new Uint8Array(length))) {
    id += alphabet[b % alphabet.length];
  }
  return id;
}
