/**
 * A strict loopback fake of Anthropic's Messages API (`POST /v1/messages`) and its free token
 * counter (`POST /v1/messages/count_tokens`), for proving compatibility with a provider the tests
 * cannot reach.
 *
 * It VALIDATES every request as api.anthropic.com does — refusing what Anthropic refuses with its
 * error shape `{type: "error", error: {type, message}, request_id}` — answers a SCRIPTED message
 * (text, tool_use, thinking, redacted thinking; stop reasons; cache reads and writes) as JSON or as
 * Anthropic's event stream, and bills input the way Anthropic counts it, with Claude's published
 * tokenizer (`@anthropic-ai/tokenizer`).
 *
 * Two API versions are served, as the real API does, chosen by the `anthropic-version` header:
 * - 2023-06-01 (what Tollbooth sends): temperature/top_p/top_k accepted on messages (temperature
 *   0..1, only 1 with thinking; temperature and top_p not together), never on count_tokens;
 * - 2026-10-21 (what @anthropic-ai/sdk 1.x sends): temperature, top_p and top_k are refused even
 *   at their defaults ("temperature: Extra inputs are not permitted"), so are `document` blocks
 *   in assistant messages and non-empty `citations` on text blocks of user messages
 *   (platform.claude.com/docs/en/api/migration-2026-10-21, "Breaking changes").
 * The SDK 1.x also sends its key as `Authorization: Bearer`; the API accepts that or `x-api-key`,
 * and uses x-api-key when both are present (same guide).
 *
 * Sources (cited again where each rule is implemented):
 * - request/response types: @anthropic-ai/sdk 1.12 `src/resources/messages/messages.ts`;
 * - the event stream: docs "Streaming Messages" (event flow, ping and error events, cumulative
 *   usage in message_delta, input_json_delta, thinking_delta and signature_delta);
 * - error texts: Anthropic's live answers as quoted verbatim in public issue threads (inline);
 * - tokens: docs "Vision" (image tokens ≈ width × height / 750 after scaling to 1568 px),
 *   "Tool use … pricing" (tool-use system prompt: 346 tokens for auto/none, 313 for any/tool on
 *   Claude 4 models), "Prompt caching" (input_tokens excludes cache reads and writes; minimum
 *   cacheable prompt) and "Extended thinking" (previous turns' thinking is not input).
 *
 * Usage from a test:
 *   const fake = startAnthropicUpstream();
 *   fake.script({ content: [{ type: "tool_use", name: "get_weather", input: { location: "Paris" } }] });
 *   const client = new Anthropic({ apiKey: fake.apiKey, baseURL: fake.url });
 *   ...; fake.messages()[0].body.tools; await fake.close();
 */
import { getTokenizer } from "@anthropic-ai/tokenizer";
import { z } from "zod";
import {
  base64Bytes,
  type FaultKnobs,
  headersObject,
  imageInfo,
  type ReceivedRequest,
  ScriptQueue,
  serveOnLoopback,
  sleep,
  sseBody,
  valueAt,
} from "./common.ts";

export const ANTHROPIC_FAKE_KEY = "sk-ant-fake-upstream";
export const API_VERSIONS = ["2023-06-01", "2026-10-21"] as const;

// deno-lint-ignore no-explicit-any
type Json = any;

// =============================================================================================
// Scripts: what the model answers.

export type ScriptedBlock =
  | {
    type: "text";
    text: string;
    /** How the text is split over text_delta events (default: one Claude token each). */
    chunks?: string[];
  }
  | {
    type: "tool_use";
    /** Defaults to a toolu_… id. */
    id?: string;
    name: string;
    input: Record<string, unknown>;
    /** How the input JSON is split over input_json_delta events (default: a few pieces). */
    chunks?: string[];
  }
  | {
    type: "thinking";
    thinking: string;
    chunks?: string[];
  }
  | { type: "redacted_thinking"; data: string };

export interface AnthropicAnswer extends FaultKnobs {
  /** Shorthand for one text block. */
  text?: string;
  content?: ScriptedBlock[];
  /** Defaults to tool_use when a tool_use block is answered, end_turn otherwise. */
  stopReason?:
    | "end_turn"
    | "max_tokens"
    | "stop_sequence"
    | "tool_use"
    | "pause_turn"
    | "refusal"
    | "model_context_window_exceeded";
  stopSequence?: string;
  /** Input tokens read from / written to the prompt cache (only with cache_control markers). */
  cacheReadInputTokens?: number;
  cacheCreationInputTokens?: number;
  /** Part of those writes kept for an hour (only where a breakpoint asks `ttl: "1h"`). */
  cacheCreation1hInputTokens?: number;
  /** Overrides of what the fake bills. */
  inputTokens?: number;
  outputTokens?: number;
  /** Thinking tokens billed (Claude 4 bills full thinking though it returns a summary). */
  thinkingTokens?: number;
  /** Answers this HTTP status with Anthropic's error shape instead of a message. */
  status?: number;
  error?: { type?: string; message?: string };
  /** Streams an `event: error` after this many events, then ends (as overload mid-stream). */
  errorEventAfter?: number;
  /** Sends a ping after message_start and after each Nth event (default: one ping, as docs). */
  pingEvery?: number;
  /** The model name the answer reports. */
  model?: string;
}

export type AnthropicScript = AnthropicAnswer | ((request: MessagesRequest) => AnthropicAnswer);

export interface MessagesRequest {
  body: Json;
  headers: Record<string, string>;
  version: (typeof API_VERSIONS)[number];
  /** What the fake bills as input before caching splits it (count_tokens answers this). */
  inputTokens: number;
  /** Whether the request marks anything for caching (cache_control anywhere). */
  cacheable: boolean;
  /** Whether a breakpoint asks to be kept for an hour. */
  hourCacheable: boolean;
}

export interface AnthropicModelConfig {
  /** max_tokens above this is refused ("max_tokens: N > M, which is the maximum …"). */
  maxOutputTokens?: number;
  /**
   * Prompts above this are refused ("prompt is too long: N tokens > M maximum"), and so are
   * prompts that leave less room than `max_tokens` ("input length and `max_tokens` exceed context
   * limit: N + C > M").
   */
  contextWindow?: number;
  /** Tool-use system prompt tokens (Claude 4 family: 346 for auto/none, 313 for any/tool). */
  toolSystemPromptTokens?: { auto: number; any: number };
  /** Shortest cacheable prompt (1024 for Sonnet/Opus, 2048 for Haiku; Prompt caching docs). */
  minCacheableTokens?: number;
}

export interface AnthropicUpstreamOptions {
  apiKey?: string;
  models?: Record<string, AnthropicModelConfig>;
  /** Pixel sizes of URL images and page counts of URL PDFs (the fake cannot download them). */
  imageSizes?: Record<string, { width: number; height: number }>;
  /** Tokens billed per PDF page (Anthropic: ~1,500–3,000 text tokens plus the page image). */
  pdfPageTokens?: number;
  defaultAnswer?: AnthropicScript;
}

// =============================================================================================
// Errors in Anthropic's shape.

export class AnthropicError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
  response(): Response {
    const requestId = `req_${randomId(24)}`;
    return Response.json(
      { type: "error", error: { type: this.type, message: this.message }, request_id: requestId },
      { status: this.status, headers: { "request-id": requestId, ...this.headers } },
    );
  }
}

const invalid = (message: string) => new AnthropicError(400, "invalid_request_error", message);

/** Anthropic's error type for each status (docs "Errors", "HTTP errors"). */
function errorTypeFor(status: number): string {
  return ({
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
  } as Record<number, string>)[status] ?? "api_error";
}

// =============================================================================================
// Schemas (@anthropic-ai/sdk 1.12 src/resources/messages/messages.ts) and pydantic-style errors.

const cacheControl = z.strictObject({
  type: z.literal("ephemeral"),
  ttl: z.enum(["5m", "1h"]).optional(),
}).nullable().optional();

const textBlock = z.strictObject({
  type: z.literal("text"),
  text: z.string(),
  cache_control: cacheControl,
  citations: z.array(z.looseObject({ type: z.string() })).nullable().optional(),
});
const base64Image = z.strictObject({
  type: z.literal("base64"),
  media_type: z.enum(["image/jpeg", "image/png", "image/gif", "image/webp"]),
  data: z.string(),
});
const urlSource = z.strictObject({ type: z.literal("url"), url: z.string() });
const fileSource = z.strictObject({ type: z.literal("file"), file_id: z.string() });
const imageBlockFields = {
  type: z.literal("image"),
  source: z.unknown(),
  cache_control: cacheControl,
  transformations: z.looseObject({}).nullable().optional(),
};
const documentBlockFields = {
  type: z.literal("document"),
  source: z.unknown(),
  cache_control: cacheControl,
  citations: z.strictObject({ enabled: z.boolean().optional() }).nullable().optional(),
  context: z.string().nullable().optional(),
  title: z.string().nullable().optional(),
};
const pdfSource = z.strictObject({
  type: z.literal("base64"),
  media_type: z.literal("application/pdf"),
  data: z.string(),
});
const plainTextSource = z.strictObject({
  type: z.literal("text"),
  media_type: z.literal("text/plain"),
  data: z.string(),
});
const contentSource = z.strictObject({
  type: z.literal("content"),
  content: z.union([z.string(), z.array(z.unknown())]),
});
/** Anthropic's pattern for a tool_use id, and for the tool_result that answers it. */
const toolUseId = z.string().regex(/^[a-zA-Z0-9_-]+$/);
const toolUseBlock = z.strictObject({
  type: z.literal("tool_use"),
  id: toolUseId,
  name: z.string(),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl,
});
const toolResultFields = {
  type: z.literal("tool_result"),
  tool_use_id: toolUseId,
  content: z.union([z.string(), z.array(z.unknown())]).optional(),
  is_error: z.boolean().optional(),
  cache_control: cacheControl,
};
const thinkingBlock = z.strictObject({
  type: z.literal("thinking"),
  thinking: z.string(),
  signature: z.string(),
});
const redactedThinkingBlock = z.strictObject({
  type: z.literal("redacted_thinking"),
  data: z.string(),
});

/** z.int() reports a string as "expected number"; this marks its type issues as integer ones. */
const INT = "expected an integer";
const int = () => z.int({ error: INT });

const toolSchema = z.strictObject({
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/),
  description: z.string().optional(),
  input_schema: z.looseObject({ type: z.literal("object") }),
  cache_control: cacheControl,
  type: z.literal("custom").nullable().optional(),
  strict: z.boolean().optional(),
  input_examples: z.array(z.record(z.string(), z.unknown())).optional(),
  defer_loading: z.boolean().optional(),
  eager_input_streaming: z.boolean().nullable().optional(),
});

const TOOL_CHOICES: Record<string, z.ZodType> = {
  auto: z.strictObject({
    type: z.literal("auto"),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  any: z.strictObject({
    type: z.literal("any"),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  tool: z.strictObject({
    type: z.literal("tool"),
    name: z.string(),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  none: z.strictObject({ type: z.literal("none") }),
};
const THINKING: Record<string, z.ZodType> = {
  enabled: z.strictObject({
    type: z.literal("enabled"),
    budget_tokens: int().min(1024),
    display: z.enum(["summarized", "omitted"]).nullable().optional(),
  }),
  disabled: z.strictObject({ type: z.literal("disabled") }),
  adaptive: z.strictObject({
    type: z.literal("adaptive"),
    display: z.enum(["summarized", "omitted"]).nullable().optional(),
  }),
  between_tools: z.strictObject({ type: z.literal("between_tools") }),
};

/** MessageCreateParamsBase body fields (header params user_profile_id/workspace_id excluded). */
const messagesFields = {
  model: z.string(),
  max_tokens: int().min(0),
  messages: z.array(z.unknown()),
  cache_control: cacheControl,
  container: z.unknown().optional(),
  diagnostics: z.looseObject({}).nullable().optional(),
  inference_geo: z.string().nullable().optional(),
  metadata: z.strictObject({ user_id: z.string().max(256).nullable().optional() }).optional(),
  output_config: z.strictObject({
    effort: z.enum(["low", "medium", "high", "xhigh", "max"]).nullable().optional(),
    format: z.strictObject({
      type: z.literal("json_schema"),
      schema: z.record(z.string(), z.unknown()),
    })
      .nullable().optional(),
  }).optional(),
  service_tier: z.enum(["auto", "standard_only"]).optional(),
  speed: z.enum(["standard", "fast"]).nullable().optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.boolean().optional(),
  system: z.union([z.string(), z.array(z.unknown())]).optional(),
  thinking: z.unknown().optional(),
  tool_choice: z.unknown().optional(),
  tools: z.array(z.unknown()).optional(),
};
/** Sampling parameters, removed in 2026-10-21 (migration guide, "Sampling parameters removed"). */
const samplingFields = {
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: int().min(0).optional(),
};
/** MessageCountTokensParams body fields. */
const countFields = {
  model: messagesFields.model,
  messages: messagesFields.messages,
  cache_control: cacheControl,
  output_config: messagesFields.output_config,
  speed: messagesFields.speed,
  system: messagesFields.system,
  thinking: messagesFields.thinking,
  tool_choice: messagesFields.tool_choice,
  tools: messagesFields.tools,
};

/** count_tokens' documented body has no sampling fields in any version: "Extra inputs are not permitted". */
function schemaFor(endpoint: "messages" | "count", version: string) {
  if (endpoint === "count") return z.strictObject(countFields);
  return z.strictObject(
    version === "2023-06-01" ? { ...messagesFields, ...samplingFields } : messagesFields,
  );
}

/**
 * Rules of the Messages body beyond its schema, in Anthropic's words as quoted in public threads:
 * Claude 4.5 models take temperature or top_p, not both ("Migrating to Claude 4.5"), and a stop
 * sequence must hold more than whitespace (BerriAI/litellm#3286).
 */
function validateSampling(body: Json) {
  if (body.temperature !== undefined && body.top_p !== undefined) {
    throw invalid(
      "`temperature` and `top_p` cannot both be specified for this model. Please use only one.",
    );
  }
  for (const stop of body.stop_sequences ?? []) {
    if (stop.trim() === "") {
      throw invalid("stop_sequences: each stop sequence must contain non-whitespace");
    }
  }
}

function pyList(values: readonly unknown[]): string {
  const quoted = values.map((v) => `'${String(v)}'`);
  return quoted.length <= 1
    ? quoted.join("")
    : `${quoted.slice(0, -1).join(", ")} or ${quoted.at(-1)}`;
}

/**
 * A zod issue in Anthropic's (pydantic's) words, e.g. "max_tokens: Field required",
 * "temperature: Extra inputs are not permitted", "thinking.enabled.budget_tokens: Input should be
 * greater than or equal to 1024", "messages.0.content.1.image.source.base64.media_type: Input
 * should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'". The path joins with dots and,
 * inside tagged unions (content blocks, sources, thinking, tool_choice), names the tag.
 */
function pydanticError(
  issue: z.core.$ZodIssue,
  root: unknown,
  prefix: string[],
  valuePath: PropertyKey[],
) {
  const rawPath = [...valuePath, ...issue.path];
  const at = (extra: PropertyKey[] = []) =>
    [...prefix, ...issue.path, ...extra].map(String).join(".");
  const value = valueAt(root, rawPath);
  switch (issue.code) {
    case "unrecognized_keys":
      return invalid(`${at([issue.keys[0]])}: Extra inputs are not permitted`);
    case "invalid_type": {
      const expected = issue.message === INT ? "int" : issue.expected;
      if (value === undefined) return invalid(`${at()}: Field required`);
      const what: Record<string, string> = {
        string: "a valid string",
        int: "a valid integer",
        number: "a valid number",
        boolean: "a valid boolean",
        array: "a valid list",
        object: "a valid dictionary",
        record: "a valid dictionary",
      };
      return invalid(
        `${at()}: Input should be ${what[expected] ?? `a valid ${expected}`}`,
      );
    }
    case "invalid_value":
      return invalid(`${at()}: Input should be ${pyList(issue.values)}`);
    case "too_small":
      if (issue.origin === "array") {
        return invalid(
          `${at()}: List should have at least ${issue.minimum} item${
            issue.minimum === 1 ? "" : "s"
          } after validation, not ${(value as unknown[]).length}`,
        );
      }
      if (issue.origin === "string") {
        return invalid(`${at()}: String should have at least ${issue.minimum} character`);
      }
      return invalid(`${at()}: Input should be greater than or equal to ${issue.minimum}`);
    case "too_big":
      if (issue.origin === "array") {
        return invalid(`${at()}: List should have at most ${issue.maximum} items after validation`);
      }
      if (issue.origin === "string") {
        return invalid(`${at()}: String should have at most ${issue.maximum} characters`);
      }
      return invalid(`${at()}: Input should be less than or equal to ${issue.maximum}`);
    case "invalid_format":
      return invalid(
        `${at()}: String should match pattern '${
          "pattern" in issue ? String(issue.pattern).slice(1, -1) : issue.format
        }'`,
      );
    default:
      return invalid(`${at()}: ${issue.message}`);
  }
}

function check(
  schema: z.ZodType,
  value: unknown,
  root: unknown,
  prefix: string[],
  valuePath: PropertyKey[],
) {
  const result = schema.safeParse(value);
  if (!result.success) throw pydanticError(result.error.issues[0], root, prefix, valuePath);
}

/** pydantic's words for a tagged union whose tag matches nothing. */
function badTag(path: string[], tag: unknown, tags: string[]) {
  if (tag === undefined) {
    return invalid(`${path.join(".")}: Unable to extract tag using discriminator 'type'`);
  }
  return invalid(
    `${path.join(".")}: Input tag '${
      String(tag)
    }' found using 'type' does not match any of the expected tags: ${
      tags.map((t) => `'${t}'`).join(", ")
    }`,
  );
}

// =============================================================================================
// Validation beyond field types.

interface Context {
  root: Json;
  version: string;
  options: AnthropicUpstreamOptions;
}

const BLOCKS_BY_ROLE: Record<string, string[]> = {
  user: ["text", "image", "document", "tool_result"],
  assistant: ["text", "tool_use", "thinking", "redacted_thinking", "document"],
  system: ["text"],
};

function validateBlock(block: Json, role: string, path: PropertyKey[], ctx: Context) {
  const names = path.map(String);
  const type = block?.type;
  const tags = BLOCKS_BY_ROLE[role];
  if (block === null || typeof block !== "object" || !tags.includes(type)) {
    throw badTag(names, type, tags);
  }
  const tagged = [...names, type];
  switch (type) {
    case "text":
      check(textBlock, block, ctx.root, tagged, path);
      // Anthropic: "messages: text content blocks must be non-empty" (as quoted in public threads).
      if (block.text === "") throw invalid("messages: text content blocks must be non-empty");
      if (!block.text.trim()) {
        throw invalid("messages: text content blocks must contain non-whitespace text");
      }
      if (ctx.version !== "2023-06-01" && role === "user" && block.citations?.length) {
        throw invalid(
          `${
            tagged.join(".")
          }.citations: Citations are not accepted on text blocks in user messages in API version ${ctx.version}; remove them.`,
        );
      }
      return;
    case "image":
      check(z.strictObject(imageBlockFields), block, ctx.root, tagged, path);
      validateImageSource(block.source, [...tagged, "source"], [...path, "source"], ctx);
      return;
    case "document":
      if (ctx.version !== "2023-06-01" && role === "assistant") {
        throw invalid(
          `${
            tagged.join(".")
          }: document blocks are not accepted in assistant messages in API version ${ctx.version}; send documents in user messages.`,
        );
      }
      check(z.strictObject(documentBlockFields), block, ctx.root, tagged, path);
      validateDocumentSource(block.source, [...tagged, "source"], [...path, "source"], ctx);
      return;
    case "tool_use":
      check(toolUseBlock, block, ctx.root, tagged, path);
      return;
    case "tool_result":
      check(z.strictObject(toolResultFields), block, ctx.root, tagged, path);
      if (Array.isArray(block.content)) {
        block.content.forEach((inner: Json, k: number) => {
          const innerPath = [...path, "content", k];
          const innerType = inner?.type;
          if (!["text", "image", "document"].includes(innerType)) {
            throw badTag(
              [...tagged, "content", String(k)],
              innerType,
              ["text", "image", "document", "search_result", "tool_reference"],
            );
          }
          validateBlock(inner, "user", innerPath, ctx);
        });
      }
      return;
    case "thinking": {
      check(thinkingBlock, block, ctx.root, tagged, path);
      const sealed = unsealThinking(block.signature);
      const shown = sealed !== null && sealed.model === ctx.root.model &&
        (block.thinking === sealed.thinking ||
          (block.thinking === "" && generationOf(sealed.model).display === "omitted"));
      // Anthropic's words, as quoted in anthropics/claude-code#10627: a block edited, or made by
      // another model, is refused.
      if (!shown) throw invalid(`${names.join(".")}: Invalid \`signature\` in \`thinking\` block`);
      return;
    }
    case "redacted_thinking":
      check(redactedThinkingBlock, block, ctx.root, tagged, path);
      if (unsealThinking(block.data)?.model !== ctx.root.model) {
        throw invalid(`${names.join(".")}: Invalid \`data\` in \`redacted_thinking\` block`);
      }
      return;
  }
}

/**
 * A thinking block's signature, and a redacted block's data, as the fake makes them: the thinking
 * and the model that wrote it, sealed (a random prefix, then base64), as Anthropic's carry the
 * thinking encrypted. So a block comes back only whole and to its own model, and the thinking it
 * holds (all of it, whatever the block showed) is what a tool loop's turn bills as input.
 */
export function sealThinking(prefix: string, model: string, thinking: string): string {
  const salt = crypto.getRandomValues(new Uint8Array(12));
  const body = new TextEncoder().encode(`${model}\n${thinking}`);
  const bytes = new Uint8Array(salt.length + body.length);
  bytes.set(salt);
  bytes.set(body, salt.length);
  // In pieces: one spread of a long thinking's bytes overflows the call stack.
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return prefix + btoa(binary);
}

function unsealThinking(sealed: string): { model: string; thinking: string } | null {
  try {
    const bytes = Uint8Array.from(atob(sealed.slice(2)), (c) => c.charCodeAt(0));
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(12));
    const cut = text.indexOf("\n");
    return cut < 0 ? null : { model: text.slice(0, cut), thinking: text.slice(cut + 1) };
  } catch {
    return null;
  }
}

/**
 * Image sources: base64 (media type one of jpeg/png/gif/webp, and the bytes must be that type —
 * Anthropic: "…: The image was specified using the image/jpeg media type, but the image appears to
 * be a image/png image"), url or file. 5 MB per image (Vision docs, "Image size limits").
 */
function validateImageSource(source: Json, names: string[], path: PropertyKey[], ctx: Context) {
  const type = source?.type;
  if (type === "base64") {
    check(base64Image, source, ctx.root, [...names, "base64"], path);
    const bytes = base64Bytes(source.data);
    const where = [...names, "base64"].join(".");
    if (!bytes) throw invalid(`${where}.data: Invalid base64 data`);
    if (bytes.length > 5 * 1024 * 1024) {
      throw invalid(`${where}: image exceeds 5 MB maximum: ${bytes.length} bytes > 5242880 bytes`);
    }
    const info = imageInfo(bytes);
    if (!info) throw invalid(`${where}: Could not process image`);
    if (info.mediaType !== source.media_type) {
      throw invalid(
        `${where}: The image was specified using the ${source.media_type} media type, but the image appears to be a ${info.mediaType} image`,
      );
    }
  } else if (type === "url") {
    check(urlSource, source, ctx.root, [...names, "url"], path);
  } else if (type === "file") {
    check(fileSource, source, ctx.root, [...names, "file"], path);
  } else throw badTag(names, type, ["base64", "url", "file"]);
}

function validateDocumentSource(source: Json, names: string[], path: PropertyKey[], ctx: Context) {
  const type = source?.type;
  const schemas: Record<string, z.ZodType> = {
    base64: pdfSource,
    text: plainTextSource,
    content: contentSource,
    url: urlSource,
    file: fileSource,
  };
  if (!(type in schemas)) throw badTag(names, type, Object.keys(schemas));
  check(schemas[type], source, ctx.root, [...names, type], path);
  if (type === "content" && Array.isArray(source.content)) {
    source.content.forEach((b: Json, k: number) => {
      if (b?.type !== "text" && b?.type !== "image") {
        throw badTag([...names, type, "content", String(k)], b?.type, ["text", "image"]);
      }
      validateBlock(b, "user", [...path, "content", k], ctx);
    });
  }
}

function blocksOf(content: Json): Json[] {
  return typeof content === "string" ? [{ type: "text", text: content }] : content;
}

function validateMessages(body: Json, ctx: Context) {
  const messages: Json[] = body.messages;
  // "messages: at least one message is required" (Anthropic's words).
  if (messages.length === 0) throw invalid("messages: at least one message is required");
  messages.forEach((m, i) => {
    const path = ["messages", String(i)];
    if (m === null || typeof m !== "object" || Array.isArray(m)) {
      throw invalid(`${path.join(".")}: Input should be a valid dictionary`);
    }
    check(
      z.strictObject({ role: z.enum(["user", "assistant", "system"]), content: z.unknown() }),
      m,
      ctx.root,
      path,
      ["messages", i],
    );
    if (typeof m.content !== "string" && !Array.isArray(m.content)) {
      throw invalid(
        m.content === undefined
          ? `${path.join(".")}.content: Field required`
          : `${path.join(".")}.content: Input should be a valid list`,
      );
    }
    if (Array.isArray(m.content)) {
      m.content.forEach((b: Json, k: number) =>
        validateBlock(b, m.role, ["messages", i, "content", k], ctx)
      );
    }
  });
  const turns = messages.filter((m) => m.role !== "system");
  // 'messages: first message must use the "user" role' (Anthropic's words, as quoted in public
  // threads). Consecutive turns of one role are merged into one turn (API reference, messages).
  if (turns.length && turns[0].role !== "user") {
    throw invalid('messages: first message must use the "user" role');
  }
  messages.forEach((m, i) => {
    const empty = m.content === "" || (Array.isArray(m.content) && m.content.length === 0);
    const finalAssistant = i === messages.length - 1 && m.role === "assistant";
    if (empty && !finalAssistant) {
      throw invalid(
        `messages.${i}: all messages must have non-empty content except for the optional final assistant message`,
      );
    }
  });
  const last = messages.at(-1);
  if (last?.role === "assistant") {
    // Prefill: "final assistant content cannot end with trailing whitespace".
    const blocks = blocksOf(last.content);
    const tail = blocks.at(-1);
    if (tail?.type === "text" && /\s$/.test(tail.text)) {
      throw invalid("messages: final assistant content cannot end with trailing whitespace");
    }
  }
  validateToolPairs(messages);
}

/**
 * Every tool_use must be answered by a tool_result in the very next message, and each tool_result
 * must answer a tool_use of the message just before (tool-use docs, "Handling tool use and tool
 * result content blocks": tool_result blocks come first in that user message). Anthropic's words,
 * verbatim as quoted in public threads (e.g. anthropics/claude-code#1237, Kilo-Org/kilocode#5163):
 *   "messages.N: `tool_use` ids were found without `tool_result` blocks immediately after: ids.
 *    Each `tool_use` block must have a corresponding `tool_result` block in the next message."
 *   "messages.N.content.K: unexpected `tool_use_id` found in `tool_result` blocks: id. Each
 *    `tool_result` block must have a corresponding `tool_use` block in the previous message."
 */
function validateToolPairs(messages: Json[]) {
  const used = new Set<string>();
  messages.forEach((m, i) => {
    const blocks = blocksOf(m.content);
    blocks.forEach((b: Json, k: number) => {
      if (b.type !== "tool_use") return;
      // Anthropic's words: an id is unique in the whole request, not only in its turn.
      if (used.has(b.id)) {
        throw invalid(`messages.${i}.content.${k}: \`tool_use\` ids must be unique`);
      }
      used.add(b.id);
    });
    const previous = i > 0 ? blocksOf(messages[i - 1].content) : [];
    const offered = new Set(
      messages[i - 1]?.role === "assistant"
        ? previous.filter((b: Json) => b.type === "tool_use").map((b: Json) => b.id)
        : [],
    );
    blocks.forEach((b: Json, k: number) => {
      if (b.type === "tool_result" && !offered.has(b.tool_use_id)) {
        throw invalid(
          `messages.${i}.content.${k}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${b.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
        );
      }
    });
    if (m.role !== "assistant") return;
    const uses = blocks.filter((b: Json) => b.type === "tool_use").map((b: Json) => b.id);
    if (!uses.length) return;
    const next = messages[i + 1];
    if (!next && i === messages.length - 1) return; // a prefill ending in tool_use: the model continues
    const nextBlocks = next?.role === "user" ? blocksOf(next.content) : [];
    // Results must lead the next message: a result after other content does not count.
    const leading: string[] = [];
    for (const b of nextBlocks) {
      if (b.type !== "tool_result") break;
      leading.push(b.tool_use_id);
    }
    const missing = uses.filter((id: string) => !leading.includes(id));
    if (missing.length) {
      throw invalid(
        `messages.${
          i + 1
        }: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${
          missing.join(", ")
        }. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
      );
    }
  });
}

function validateSystem(system: Json, ctx: Context) {
  if (Array.isArray(system)) {
    system.forEach((b: Json, k: number) => {
      if (b?.type !== "text") throw badTag(["system", String(k)], b?.type, ["text"]);
      check(textBlock, b, ctx.root, ["system", String(k)], ["system", k]);
    });
  }
}

function validateTools(body: Json, ctx: Context) {
  const tools: Json[] = body.tools ?? [];
  tools.forEach((t, k) => {
    if (t?.type && t.type !== "custom") {
      // Server tools (bash, web_search, …) are not modeled by this fake.
      throw badTag(["tools", String(k)], t.type, ["custom"]);
    }
    check(toolSchema, t, ctx.root, ["tools", String(k)], ["tools", k]);
  });
  const toolBlocks = (body.messages ?? []).some((m: Json) =>
    blocksOf(m?.content).some((b: Json) => b?.type === "tool_use" || b?.type === "tool_result")
  );
  if (toolBlocks && !tools.length) {
    // Anthropic's words; OpenAI takes tool calls and results in a request without tools.
    throw invalid(
      "Requests which include `tool_use` or `tool_result` blocks must define tools.",
    );
  }
  const names = tools.map((t) => t.name);
  if (names.some((n, i) => names.indexOf(n) !== i)) {
    // Anthropic: "tools: Tool names must be unique."
    throw invalid("tools: Tool names must be unique.");
  }
  const choice = body.tool_choice;
  if (choice !== undefined) {
    const type = choice?.type;
    if (!(type in TOOL_CHOICES)) throw badTag(["tool_choice"], type, Object.keys(TOOL_CHOICES));
    check(TOOL_CHOICES[type], choice, ctx.root, ["tool_choice", type], ["tool_choice"]);
    if (type === "tool" && !names.includes(choice.name)) {
      throw invalid(`tool_choice: Tool '${choice.name}' not found in tools.`);
    }
    if (type !== "none" && type !== "auto" && !tools.length) {
      throw invalid("tool_choice: tool_choice may only be specified while providing tools.");
    }
  }
}

const THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

/**
 * What the newer models take, from Anthropic's migration guides (platform.claude.com, "Migrating
 * to Claude Opus 4.7", "… Opus 4.8", "… Claude Sonnet 5", "… Claude Fable 5", and "What's new in
 * Claude Opus 5.5"); every other model follows the rules of Claude 4.6 and earlier.
 * - thinking: `budget` takes `enabled` with a budget and thinks only when sent it (Claude 4.5 and
 *   earlier refuse `adaptive`); `either` takes both (the 4.6 models); `adaptive`
 *   refuses a budget and thinks only when sent `adaptive`; `by_default` also thinks when sent no
 *   `thinking`; `always` refuses `disabled` too.
 * - sampling: Opus 4.7 on refuse temperature, top_p and top_k ("Requests that include them return
 *   a 400 error"); Sonnet 5 refuses them at other than their defaults.
 * - forcedTools: Opus 5.5 and Fable 5.1 answer a forcing tool_choice with a 400.
 * - prefill: a final assistant turn is refused from the 4.6 models on ("Migrating to the 4.6
 *   family"; the words quoted in anomalyco/opencode#13768).
 * - display: thinking text is returned only with `display: "summarized"` (the default, "omitted",
 *   streams thinking blocks with empty text).
 */
interface Generation {
  thinking: "budget" | "either" | "adaptive" | "by_default" | "always";
  sampling: "any" | "defaults" | "none";
  forcedTools: boolean;
  prefill: boolean;
  display: "summarized" | "omitted";
  /** Reads images at up to 2576 px on the long edge (Opus 4.7's "high-resolution vision"). */
  highResImages?: boolean;
}
const EARLIER_GENERATION: Generation = {
  thinking: "budget",
  sampling: "any",
  forcedTools: true,
  prefill: true,
  display: "summarized",
};
const GENERATIONS: Record<string, Generation> = {
  "claude-opus-4-6": { ...EARLIER_GENERATION, thinking: "either", prefill: false },
  "claude-sonnet-4-6": { ...EARLIER_GENERATION, thinking: "either", prefill: false },
  "claude-opus-4-7": {
    thinking: "adaptive",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
    highResImages: true,
  },
  "claude-opus-4-8": {
    thinking: "adaptive",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
    highResImages: true,
  },
  "claude-sonnet-5": {
    thinking: "by_default",
    sampling: "defaults",
    forcedTools: true,
    prefill: false,
    display: "omitted",
  },
  "claude-opus-5": {
    thinking: "by_default",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
  },
  "claude-fable-5": {
    thinking: "always",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
  },
  "claude-mythos-5": {
    thinking: "always",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
  },
  "claude-mythos-preview": {
    thinking: "always",
    sampling: "none",
    forcedTools: true,
    prefill: false,
    display: "omitted",
  },
  "claude-opus-5-5": {
    thinking: "always",
    sampling: "none",
    forcedTools: false,
    prefill: false,
    display: "omitted",
  },
  "claude-fable-5-1": {
    thinking: "always",
    sampling: "none",
    forcedTools: false,
    prefill: false,
    display: "omitted",
  },
};

/**
 * A model's generation by the model its name holds: a dated snapshot (`claude-opus-4-7-20260416`,
 * `…@20260416`) or a platform's name for it (`anthropic.claude-sonnet-5`) is that model's.
 */
export function generationOf(model: string): Generation {
  const named =
    /claude-(?:mythos-preview|(?:opus|sonnet|haiku|fable|mythos)-\d{1,2}(?:-\d{1,2}(?!\d))?)/
      .exec(model);
  return (named && GENERATIONS[named[0]]) || EARLIER_GENERATION;
}

/**
 * The JSON Schema subset structured outputs take (docs "Structured outputs", "JSON Schema
 * limitations"): these keywords, the string formats below, `minItems` 0 or 1, closed objects, one
 * schema for `items`, no recursion. Anything else is refused, in Anthropic's words as quoted in
 * agentjido/req_llm#302 ("For 'integer' type, property 'minimum' is not supported"); the words for
 * open objects, formats and recursion are ours.
 */
const SCHEMA_KEYWORDS = new Set([
  "type",
  "enum",
  "const",
  "anyOf",
  "allOf",
  "$ref",
  "$defs",
  "definitions",
  "description",
  "title",
  "properties",
  "additionalProperties",
  "required",
  "format",
  "items",
  "minItems",
]);
const SCHEMA_FORMATS = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "uri",
  "ipv4",
  "ipv6",
  "uuid",
]);

/** Whether a schema's references loop back (to the root, or a definition to itself). */
function schemaLoops(root: Json): boolean {
  const refs = (node: Json, out: string[] = []): string[] => {
    if (Array.isArray(node)) node.forEach((n) => refs(n, out));
    else if (node && typeof node === "object") {
      for (const [key, value] of Object.entries(node)) {
        if (key === "$ref") out.push(String(value));
        else if (key !== "$defs" && key !== "definitions") refs(value, out);
      }
    }
    return out;
  };
  const defs: Json = { ...root.definitions, ...root.$defs };
  const target = (ref: string) => ref.match(/^#\/(?:\$defs|definitions)\/(.+)$/)?.[1];
  if (refs(root).some((ref) => target(ref) === undefined)) return true;
  const loops = (name: string, path: string[]): boolean =>
    refs(defs[name]).some((ref) => {
      const next = target(ref);
      return next === undefined || path.includes(next) || loops(next, [...path, next]);
    });
  return Object.keys(defs).some((name) => loops(name, [name]));
}

/**
 * `path`: where a refusal says it is, each nested schema's own for an output format's; a strict
 * tool's refusals all name the tool (`tools.0.custom: For 'array' type, property 'maxItems' is not
 * supported`, quoted in experientiallabs/experiential#804), so `flat` keeps its path.
 */
function validateOutputSchema(schema: Json, path: string[], flat = false, root = true) {
  if (!schema || typeof schema !== "object") return;
  if (root && schemaLoops(schema)) {
    throw invalid(`${path.join(".")}: Recursive schemas are not supported`);
  }
  if (schema.type === "object" && schema.additionalProperties !== false) {
    throw invalid(
      `${
        path.join(".")
      }: For 'object' type, 'additionalProperties' must be explicitly set to false`,
    );
  }
  const refused = Object.keys(schema).find((key) => !SCHEMA_KEYWORDS.has(key)) ??
    (schema.minItems > 1 ? "minItems" : undefined) ??
    (Array.isArray(schema.items) || schema.items === false ? "items" : undefined);
  if (refused) {
    throw invalid(
      `${path.join(".")}: For '${schema.type}' type, property '${refused}' is not supported`,
    );
  }
  if (schema.format !== undefined && !SCHEMA_FORMATS.has(schema.format)) {
    throw invalid(`${path.join(".")}: format '${schema.format}' is not supported`);
  }
  const under = (...keys: string[]) => flat ? path : [...path, ...keys];
  for (const [key, value] of Object.entries(schema)) {
    if (key === "properties" || key === "$defs" || key === "definitions") {
      for (const [name, sub] of Object.entries(value as Json)) {
        validateOutputSchema(sub, under(key, name), flat, false);
      }
    } else if (key === "items") validateOutputSchema(value, under(key), flat, false);
    else if (key === "anyOf" || key === "allOf" || key === "oneOf") {
      (value as Json[]).forEach((sub, i) =>
        validateOutputSchema(sub, under(key, String(i)), flat, false)
      );
    }
  }
}

/**
 * Whether a model takes structured outputs (an output format, strict tools): Claude 4.5 and later
 * ("Structured outputs", generally available on Opus, Sonnet and Haiku 4.5 on, no beta header).
 */
function takesStructuredOutputs(model: string): boolean {
  if (/claude-mythos-preview/.test(model)) return true;
  const named = /claude-(?:opus|sonnet|haiku|fable|mythos)-(\d{1,2})(?:-(\d{1,2})(?!\d))?/.exec(
    model,
  );
  return named !== null && Number(named[1]) * 100 + Number(named[2] ?? 0) >= 405;
}

/**
 * Structured outputs' rules: the model must take them (the refusal's words are ours), and a
 * strict tool's schema is held to the output format's subset.
 */
function validateStructuredOutputs(body: Json) {
  const tools: Json[] = body.tools ?? [];
  const strict = tools.findIndex((t) => t?.strict === true);
  if (!takesStructuredOutputs(body.model)) {
    if (body.output_config?.format) {
      throw invalid("output_config.format: structured outputs are not supported for this model.");
    }
    if (strict !== -1) {
      throw invalid(
        `tools.${strict}.custom.strict: strict tool use is not supported for this model.`,
      );
    }
    return;
  }
  tools.forEach((t, k) => {
    if (t?.strict === true) {
      validateOutputSchema(t.input_schema, ["tools", String(k), "custom"], true);
    }
  });
  validateSchemaComplexity([
    ...tools.filter((t) => t?.strict === true).map((t) => t.input_schema),
    ...(body.output_config?.format ? [body.output_config.format.schema] : []),
  ], tools.filter((t) => t?.strict === true).length);
}

/**
 * The explicit limits over every strict schema of a request, output format included ("Schema
 * complexity limits": 20 strict tools, 24 optional parameters, 16 parameters with union types;
 * the refusals' words are ours).
 */
function validateSchemaComplexity(schemas: Json[], strictTools: number) {
  if (strictTools > 20) throw invalid(`Too many strict tools: ${strictTools}, at most 20.`);
  let optional = 0;
  let unions = 0;
  const visit = (schema: Json) => {
    if (!schema || typeof schema !== "object") return;
    for (const [name, sub] of Object.entries(schema.properties ?? {}) as [string, Json][]) {
      if (!(schema.required ?? []).includes(name)) optional++;
      if (Array.isArray(sub?.anyOf) || Array.isArray(sub?.type)) unions++;
      visit(sub);
    }
    visit(schema.items);
    for (const sub of [...schema.anyOf ?? [], ...schema.allOf ?? []]) visit(sub);
    for (const sub of Object.values({ ...schema.$defs, ...schema.definitions })) visit(sub as Json);
  };
  schemas.forEach(visit);
  if (optional > 24) {
    throw invalid(`Too many optional parameters in strict schemas: ${optional}, at most 24.`);
  }
  if (unions > 16) {
    throw invalid(`Too many parameters with union types in strict schemas: ${unions}, at most 16.`);
  }
}

/**
 * The newer models' refusals, in Anthropic's words where they are quoted: the thinking one from
 * "What's new in Claude Opus 5.5", the sampling one from Comfy-Org/ComfyUI#13923; the forced-tool
 * one is ours (the guide states the 400, not its text).
 */
function validateGeneration(body: Json, endpoint: "messages" | "count") {
  const generation = generationOf(body.model);
  const type = body.thinking?.type;
  const budgets = generation.thinking === "budget" || generation.thinking === "either";
  const refusesType = (type === "enabled" && !budgets) ||
    (type === "disabled" && generation.thinking === "always");
  if (refusesType) {
    throw invalid(
      `"thinking.type.${type}" is not supported for this model. Use "thinking.type.adaptive" and "output_config.effort" to control thinking behavior.`,
    );
  }
  if (type === "adaptive" && generation.thinking === "budget") {
    throw invalid(`"thinking.type.adaptive" is not supported for this model.`);
  }
  // Opus 5 takes `disabled` at effort high or below only ("What's new in Claude Opus 5.5").
  const effort = body.output_config?.effort;
  if (
    type === "disabled" && generation.thinking === "by_default" &&
    (effort === "xhigh" || effort === "max")
  ) {
    throw invalid(
      `"thinking.type.disabled" is not supported with effort "${effort}" for this model.`,
    );
  }
  if (!generation.prefill && body.messages.at(-1)?.role === "assistant") {
    throw invalid(
      "This model does not support assistant message prefill. The conversation must end with a user message.",
    );
  }
  validateStructuredOutputs(body);
  const format = body.output_config?.format;
  if (format) validateOutputSchema(format.schema, ["output_config", "format", "schema"]);
  if (endpoint === "messages") {
    const defaults: Record<string, number | undefined> = {
      temperature: 1,
      top_p: 1,
      top_k: undefined,
    };
    for (const field of ["temperature", "top_p", "top_k"]) {
      if (body[field] === undefined || generation.sampling === "any") continue;
      if (generation.sampling === "defaults" && body[field] === defaults[field]) continue;
      throw invalid(`\`${field}\` is deprecated for this model.`);
    }
  }
  const forced = body.tool_choice?.type;
  if (!generation.forcedTools && (forced === "any" || forced === "tool")) {
    throw invalid(
      "tool_choice: forced tool use is not supported for this model. Use `auto` or `none`.",
    );
  }
}

/**
 * Extended thinking's rules (docs "Extended thinking", "Important considerations"), with
 * Anthropic's words as quoted in public threads:
 *   "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
 *   "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation
 *    at …#max-tokens-and-context-window-size"
 *   "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation
 *    at …#important-considerations-when-using-extended-thinking"
 *   forced tool use (tool_choice any/tool) is incompatible with thinking.
 * And the final assistant turn, in a tool loop or as a prefill, must start with a thinking block.
 */
function validateThinking(body: Json, ctx: Context, endpoint: "messages" | "count") {
  const thinking = body.thinking;
  if (thinking === undefined) return;
  const type = thinking?.type;
  if (!(type in THINKING)) throw badTag(["thinking"], type, Object.keys(THINKING));
  check(THINKING[type], thinking, ctx.root, ["thinking", type], ["thinking"]);
  if (type !== "enabled" && type !== "adaptive") return;
  if (endpoint === "messages" && type === "enabled" && body.max_tokens <= thinking.budget_tokens) {
    throw invalid(
      `\`max_tokens\` must be greater than \`thinking.budget_tokens\`. Please consult our documentation at ${THINKING_DOCS}#max-tokens-and-context-window-size`,
    );
  }
  if (body.temperature !== undefined && body.temperature !== 1) {
    throw invalid(
      `\`temperature\` may only be set to 1 when thinking is enabled. Please consult our documentation at ${THINKING_DOCS}#important-considerations-when-using-extended-thinking`,
    );
  }
  if (body.top_k !== undefined) {
    throw invalid(
      `\`top_k\` is not supported when thinking is enabled. Please consult our documentation at ${THINKING_DOCS}#important-considerations-when-using-extended-thinking`,
    );
  }
  if (body.top_p !== undefined && body.top_p < 0.95) {
    throw invalid(
      `\`top_p\` must be greater than or equal to 0.95 or unset when thinking is enabled. Please consult our documentation at ${THINKING_DOCS}#important-considerations-when-using-extended-thinking`,
    );
  }
  // Adaptive thinking takes a forced tool on the Claude API (Sonnet 5 guide: only Bedrock needs
  // thinking off for it) and a final assistant turn that opens with tool_use (a turn may not think
  // at all): these two rules are the budget's.
  if (type !== "enabled") return;
  const forced = body.tool_choice?.type;
  if (forced === "any" || forced === "tool") {
    throw invalid("Thinking may not be enabled when tool_choice forces tool use.");
  }
  const loop = activeToolLoop(body.messages);
  if (loop !== null) {
    const first = blocksOf(body.messages[loop].content)[0];
    if (first?.type !== "thinking" && first?.type !== "redacted_thinking") {
      throw invalid(
        `messages.${loop}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${first?.type}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at ${THINKING_DOCS}`,
      );
    }
  }
  // A prefill (the conversation ending with the assistant) is a final assistant message too, as
  // quoted in Aider-AI/aider#3820 (a reply cut at max_tokens, continued without its thinking).
  const prefill = body.messages.length - 1;
  if (endpoint === "messages" && body.messages[prefill]?.role === "assistant") {
    const first = blocksOf(body.messages[prefill].content)[0];
    if (first?.type !== "thinking" && first?.type !== "redacted_thinking") {
      throw invalid(
        `messages.${prefill}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${first?.type}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block. We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at ${THINKING_DOCS}`,
      );
    }
  }
}

/** The index of the assistant message whose tool_use the final user message answers, or null. */
function activeToolLoop(messages: Json[]): number | null {
  const last = messages.at(-1);
  const before = messages.at(-2);
  if (last?.role !== "user" || before?.role !== "assistant") return null;
  const answers = blocksOf(last.content).some((b: Json) => b.type === "tool_result");
  return answers ? messages.length - 2 : null;
}

function hasCacheControl(body: Json): boolean {
  return !!body.cache_control || cacheTtls(body).length > 0;
}

/**
 * The TTLs of a request's breakpoints in the order the prompt is read (tools, system, messages;
 * Prompt caching docs, "Mixing different TTLs": 1-hour entries must come before 5-minute ones).
 */
function cacheTtls(body: Json): string[] {
  const blocks: Json[] = [
    ...(body.tools ?? []),
    ...(Array.isArray(body.system) ? body.system : []),
    ...body.messages.flatMap((m: Json) => (Array.isArray(m.content) ? m.content : [])),
  ];
  return blocks.filter((b) => b?.cache_control).map((b) => b.cache_control.ttl ?? "5m");
}

// =============================================================================================
// Billing: input tokens the way Anthropic counts them.

let tokenizer: ReturnType<typeof getTokenizer> | undefined;
/** Tokens of text by Claude's published tokenizer (@anthropic-ai/tokenizer, NFKC as it does). */
export function claudeTokens(text: string): number {
  if (!text) return 0;
  tokenizer ??= getTokenizer();
  return tokenizer.encode(text.normalize("NFKC"), "all").length;
}

/**
 * An image's tokens by Anthropic's published rule (docs "Vision", "Evaluate image size"): an image
 * whose long edge exceeds 1568 px, or that exceeds ~1,600 tokens (1.15 megapixels), is first
 * scaled down preserving its aspect ratio; then tokens = width × height / 750, rounded up. A model
 * with high-resolution vision (Opus 4.7) reads up to 2576 px on the long edge and about 3.75
 * megapixels, in 28-px patches, a token each (docs "Vision": ⌈width / 28⌉ × ⌈height / 28⌉).
 */
/**
 * What count_tokens says an image block costs beyond its pixels (measured differences with and
 * without the block: 65 on Haiku 4.5, 77 on Claude 5.5); the docs' formula leaves it out.
 */
export const IMAGE_BLOCK_TOKENS = 77;

export function anthropicImageTokens(width: number, height: number, highRes = false): number {
  if (highRes) return highResImageTokens(width, height);
  let w = width;
  let h = height;
  const long = Math.max(w, h);
  if (long > 1568) {
    w = w * 1568 / long;
    h = h * 1568 / long;
  }
  const maxPixels = 1600 * 750;
  if (w * h > maxPixels) {
    const scale = Math.sqrt(maxPixels / (w * h));
    w *= scale;
    h *= scale;
  }
  return Math.ceil(Math.floor(w) * Math.floor(h) / 750);
}

function highResImageTokens(width: number, height: number): number {
  let scale = Math.min(1, 2576 / Math.max(width, height));
  scale = Math.min(scale, Math.sqrt(3_750_000 / (width * height)));
  const w = Math.floor(width * scale);
  const h = Math.floor(height * scale);
  return Math.ceil(w / 28) * Math.ceil(h / 28);
}

/** Per-message framing the fake adds (role markers); Anthropic publishes no figure for it. */
const TOKENS_PER_MESSAGE = 3;

interface Counter {
  image(source: Json): number;
  pdf(source: Json): number;
  toolSystemPrompt: { auto: number; any: number };
}

function blockTokens(block: Json, counter: Counter, countThinking: boolean): number {
  switch (block.type) {
    case "text":
      return claudeTokens(block.text);
    case "image":
      return counter.image(block.source);
    case "document": {
      const s = block.source;
      const framing = claudeTokens(block.title ?? "") + claudeTokens(block.context ?? "");
      if (s.type === "text") return framing + claudeTokens(s.data);
      if (s.type === "content") {
        return framing +
          (typeof s.content === "string"
            ? claudeTokens(s.content)
            : s.content.reduce((n: number, b: Json) => n + blockTokens(b, counter, false), 0));
      }
      return framing + counter.pdf(s);
    }
    case "tool_use":
      return claudeTokens(block.name) + claudeTokens(JSON.stringify(block.input));
    case "tool_result":
      return claudeTokens(block.tool_use_id) +
        (typeof block.content === "string"
          ? claudeTokens(block.content)
          : (block.content ?? []).reduce(
            (n: number, b: Json) => n + blockTokens(b, counter, false),
            0,
          ));
    case "thinking":
      return countThinking ? claudeTokens(unsealThinking(block.signature)?.thinking ?? "") : 0;
    case "redacted_thinking":
      return countThinking ? claudeTokens(unsealThinking(block.data)?.thinking ?? "") : 0;
    default:
      return 0;
  }
}

/**
 * Input tokens of a Messages request, counted with Claude's published tokenizer: the system
 * prompt; each message's blocks plus 3 for its framing; tools as the tokens of name, description
 * and JSON schema, plus the tool-use system prompt Anthropic adds (346 tokens with tool_choice
 * auto/none, 313 with any/tool on Claude 4 models); images by the Vision rule; PDF pages at a flat
 * rate. Thinking blocks of earlier turns are not input (docs "Extended thinking", "The context
 * window … previous thinking blocks are stripped"), except in the assistant turn of an ongoing
 * tool loop, which is.
 *
 * The legacy tokenizer is not the one Claude 3+ models use (Anthropic says so in its README): the
 * fake is a consistent, documented stand-in, not an oracle of Anthropic's exact counts.
 */
export function anthropicInputTokens(body: Json, counter: Counter): number {
  let total = 0;
  if (typeof body.system === "string") total += claudeTokens(body.system);
  else for (const b of body.system ?? []) total += claudeTokens(b.text);
  const loop = body.thinking ? activeToolLoop(body.messages) : null;
  body.messages.forEach((m: Json, i: number) => {
    total += TOKENS_PER_MESSAGE;
    for (const b of blocksOf(m.content)) total += blockTokens(b, counter, i === loop);
  });
  const tools: Json[] = body.tools ?? [];
  if (tools.length) {
    const forced = body.tool_choice?.type === "any" || body.tool_choice?.type === "tool";
    total += forced ? counter.toolSystemPrompt.any : counter.toolSystemPrompt.auto;
    for (const t of tools) {
      total += claudeTokens(t.name) + claudeTokens(t.description ?? "") +
        claudeTokens(JSON.stringify(t.input_schema));
    }
  }
  return total;
}

/** Output tokens of an answer: its text, tool calls and thinking, by the same tokenizer. */
export function anthropicOutputTokens(blocks: ScriptedBlock[]): number {
  return blocks.reduce((n, b) => {
    switch (b.type) {
      case "text":
        return n + claudeTokens(b.text);
      case "tool_use":
        return n + claudeTokens(b.name) + claudeTokens(JSON.stringify(b.input));
      case "thinking":
        return n + claudeTokens(b.thinking);
      case "redacted_thinking":
        return n + Math.ceil(b.data.length / 4);
    }
  }, 0);
}

// =============================================================================================
// The answer, as a message and as an event stream.

function randomId(length: number): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let id = "";
  for (const b of crypto.getRandomValues(new Uint8Array(length))) {
    id += alphabet[b % alphabet.length];
  }
  return id;
}

/** Token-sized pieces of text by Claude's tokenizer (a split character stays whole). */
export function claudePieces(text: string): string[] {
  tokenizer ??= getTokenizer();
  const decoder = new TextDecoder("utf-8", { fatal: false });
  const pieces: string[] = [];
  let pending: number[] = [];
  for (const token of tokenizer.encode(text, "all")) {
    pending.push(token);
    const piece = decoder.decode(tokenizer.decode(new Uint32Array(pending)));
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decoder.decode(tokenizer.decode(new Uint32Array(pending))));
  return pieces.join("") === text ? pieces : [text];
}

interface Resolved {
  blocks: Json[];
  pieces: string[][];
  stopReason: string;
  stopSequence: string | null;
  usage: Json;
}

function resolve(
  answer: AnthropicAnswer,
  request: MessagesRequest,
  minCacheable: number,
): Resolved {
  const scripted: ScriptedBlock[] = answer.content ??
    (answer.text !== undefined ? [{ type: "text", text: answer.text }] : []);
  const blocks: Json[] = [];
  const pieces: string[][] = [];
  for (const b of scripted) {
    if (b.type === "text") {
      blocks.push({ type: "text", text: b.text });
      pieces.push(b.chunks ?? claudePieces(b.text));
    } else if (b.type === "tool_use") {
      const json = JSON.stringify(b.input);
      blocks.push({
        type: "tool_use",
        id: b.id ?? `toolu_01${randomId(22)}`,
        name: b.name,
        input: b.input,
      });
      // The API streams tool input as partial JSON, starting with an empty fragment; a call
      // without arguments gets that empty fragment alone, never "{}" (BerriAI/litellm#5063,
      // pipecat-ai/pipecat#409).
      const noInput = Object.keys(b.input).length === 0;
      pieces.push(b.chunks ?? (noInput ? [""] : ["", ...splitEvery(json, 12)]));
    } else if (b.type === "thinking") {
      const signature = sealThinking("Eq", request.body.model, b.thinking);
      // Omitted thinking streams its block with no text, as the newer models do by default.
      const omitted = generationOf(request.body.model).display === "omitted" &&
        request.body.thinking?.display !== "summarized";
      blocks.push({ type: "thinking", thinking: omitted ? "" : b.thinking, signature });
      pieces.push(omitted ? [] : b.chunks ?? splitEvery(b.thinking, 40));
    } else {
      blocks.push({
        type: "redacted_thinking",
        data: sealThinking("Em", request.body.model, b.data),
      });
      pieces.push([]);
    }
  }
  const hasToolUse = blocks.some((b) => b.type === "tool_use");
  const stopReason = answer.stopReason ?? (hasToolUse ? "tool_use" : "end_turn");
  const total = answer.inputTokens ?? request.inputTokens;
  // Caching needs a cache_control marker and a long enough prompt (Prompt caching docs); input
  // tokens are then what was neither read from nor written to the cache.
  const cacheOk = request.cacheable && total >= minCacheable;
  const read = cacheOk ? Math.min(answer.cacheReadInputTokens ?? 0, total) : 0;
  const write = cacheOk ? Math.min(answer.cacheCreationInputTokens ?? 0, total - read) : 0;
  const hourWrite = request.hourCacheable
    ? Math.min(answer.cacheCreation1hInputTokens ?? 0, write)
    : 0;
  const isThinking = (b: ScriptedBlock) => b.type === "thinking" || b.type === "redacted_thinking";
  const thinkingBlocks = scripted.filter(isThinking);
  const thinking = answer.thinkingTokens ?? anthropicOutputTokens(thinkingBlocks);
  const output = answer.outputTokens ??
    anthropicOutputTokens(scripted.filter((b) => !isThinking(b))) + thinking;
  return {
    blocks,
    pieces,
    stopReason,
    stopSequence: stopReason === "stop_sequence" ? answer.stopSequence ?? null : null,
    usage: {
      input_tokens: total - read - write,
      cache_creation_input_tokens: write,
      cache_read_input_tokens: read,
      cache_creation: {
        ephemeral_5m_input_tokens: write - hourWrite,
        ephemeral_1h_input_tokens: hourWrite,
      },
      output_tokens: output,
      ...(thinking ? { output_tokens_details: { thinking_tokens: thinking } } : {}),
      service_tier: "standard",
    },
  };
}

function splitEvery(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out.length ? out : [""];
}

function messageBody(answer: AnthropicAnswer, request: MessagesRequest, r: Resolved) {
  return {
    id: `msg_01${randomId(22)}`,
    type: "message",
    role: "assistant",
    model: answer.model ?? request.body.model,
    content: r.blocks,
    stop_reason: r.stopReason,
    stop_sequence: r.stopSequence,
    stop_details: null,
    usage: r.usage,
  };
}

/**
 * The events Anthropic streams (docs "Streaming Messages", "Event types" and the raw examples):
 * message_start with the message, content [] and the input usage (output_tokens small); a ping;
 * per block content_block_start (text "", tool_use with input {}, thinking with thinking "" and
 * signature ""), its deltas (text_delta, input_json_delta partial_json, thinking_delta then one
 * signature_delta) and content_block_stop; message_delta with stop_reason, stop_sequence and the
 * cumulative usage; message_stop. Each event is "event: <type>\ndata: <json>\n\n".
 */
export function streamEvents(
  answer: AnthropicAnswer,
  request: MessagesRequest,
  r: Resolved,
): Json[] {
  const events: Json[] = [];
  const start = messageBody(answer, request, r);
  events.push({
    type: "message_start",
    message: {
      ...start,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      usage: {
        ...r.usage,
        output_tokens: Math.min(1, r.usage.output_tokens),
        output_tokens_details: undefined,
      },
    },
  });
  const pingEvery = answer.pingEvery;
  const maybePing = () => {
    if (pingEvery && events.length % pingEvery === 0) events.push({ type: "ping" });
  };
  r.blocks.forEach((block, index) => {
    const pieces = r.pieces[index];
    if (block.type === "text") {
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "text", text: "" },
      });
      for (const text of pieces) {
        events.push({ type: "content_block_delta", index, delta: { type: "text_delta", text } });
        maybePing();
      }
    } else if (block.type === "tool_use") {
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: block.id, name: block.name, input: {} },
      });
      for (const partial_json of pieces) {
        events.push({
          type: "content_block_delta",
          index,
          delta: { type: "input_json_delta", partial_json },
        });
        maybePing();
      }
    } else if (block.type === "thinking") {
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "thinking", thinking: "", signature: "" },
      });
      for (const thinking of pieces) {
        events.push({
          type: "content_block_delta",
          index,
          delta: { type: "thinking_delta", thinking },
        });
        maybePing();
      }
      events.push({
        type: "content_block_delta",
        index,
        delta: { type: "signature_delta", signature: block.signature },
      });
    } else {
      events.push({ type: "content_block_start", index, content_block: block });
    }
    // The ping comes after the first block opens, as in the docs' examples and live streams.
    if (index === 0) events.splice(2, 0, { type: "ping" });
    events.push({ type: "content_block_stop", index });
  });
  if (!r.blocks.length) events.push({ type: "ping" });
  events.push({
    type: "message_delta",
    delta: { stop_reason: r.stopReason, stop_sequence: r.stopSequence, stop_details: null },
    usage: {
      input_tokens: r.usage.input_tokens,
      cache_creation_input_tokens: r.usage.cache_creation_input_tokens,
      cache_read_input_tokens: r.usage.cache_read_input_tokens,
      output_tokens: r.usage.output_tokens,
      ...(r.usage.output_tokens_details
        ? { output_tokens_details: r.usage.output_tokens_details }
        : {}),
    },
  });
  events.push({ type: "message_stop" });
  return events;
}

function sse(event: Json): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

// =============================================================================================
// The server.

export interface AnthropicUpstream {
  /** http://127.0.0.1:PORT — Tollbooth's base_url and the SDK's baseURL alike. */
  url: string;
  apiKey: string;
  received: ReceivedRequest[];
  /** The /v1/messages requests that passed validation. */
  messages(): MessagesRequest[];
  /** The count_tokens requests that passed validation. */
  counts(): MessagesRequest[];
  tally: { ok: number; refused: number; failed: number; cut: number };
  script(...answers: AnthropicScript[]): void;
  setDefault(answer: AnthropicScript): void;
  /** What the fake bills as input for a (valid) request body, cache reads and writes included. */
  inputTokens(body: Json): number;
  close(): Promise<void>;
}

/** The default answer: a short greeting. */
export const HELLO: AnthropicAnswer = { text: "Hello!" };

export function startAnthropicUpstream(options: AnthropicUpstreamOptions = {}): AnthropicUpstream {
  const apiKey = options.apiKey ?? ANTHROPIC_FAKE_KEY;
  const received: ReceivedRequest[] = [];
  const accepted: MessagesRequest[] = [];
  const counted: MessagesRequest[] = [];
  const tally = { ok: 0, refused: 0, failed: 0, cut: 0 };
  const queue = new ScriptQueue<AnthropicScript>(options.defaultAnswer ?? HELLO);

  function counterFor(model: string): Counter {
    const config = options.models?.[model] ?? {};
    const highRes = generationOf(model).highResImages ?? false;
    return {
      toolSystemPrompt: config.toolSystemPromptTokens ?? { auto: 346, any: 313 },
      image(source: Json) {
        if (source.type === "base64") {
          const info = imageInfo(base64Bytes(source.data)!)!;
          return IMAGE_BLOCK_TOKENS + anthropicImageTokens(info.width, info.height, highRes);
        }
        const size = source.type === "url" ? options.imageSizes?.[source.url] : undefined;
        if (!size) {
          throw invalid(
            `Unable to download the file. Please verify the URL and try again.`,
          );
        }
        return IMAGE_BLOCK_TOKENS + anthropicImageTokens(size.width, size.height, highRes);
      },
      pdf(source: Json) {
        const perPage = options.pdfPageTokens ?? 2000;
        if (source.type !== "base64") return perPage;
        const text = base64Bytes(source.data) ? atob(source.data) : "";
        // Anthropic's answers to a file it cannot open, and to more pages than it takes (docs
        // "PDF support": 100 pages a request).
        if (!text.startsWith("%PDF-") || !text.trimEnd().endsWith("%%EOF")) {
          throw invalid("The PDF specified was not valid.");
        }
        const pages = (text.match(/\/Type\s*\/Page(?!s)/g) ?? []).length || 1;
        if (pages > 100) throw invalid("A maximum of 100 PDF pages may be provided.");
        return pages * perPage;
      },
    };
  }

  function authorize(request: Request) {
    // x-api-key wins over a Bearer token when both are sent (migration guide 2026-10-21).
    const key = request.headers.get("x-api-key") ??
      request.headers.get("authorization")?.replace(/^Bearer\s+/i, "") ?? null;
    if (key === null) {
      throw new AnthropicError(401, "authentication_error", "x-api-key header is required");
    }
    if (key !== apiKey) throw new AnthropicError(401, "authentication_error", "invalid x-api-key");
  }

  function apiVersion(request: Request): MessagesRequest["version"] {
    const version = request.headers.get("anthropic-version");
    // "anthropic-version: header is required" (Anthropic's words).
    if (!version) throw invalid("anthropic-version: header is required");
    if (!(API_VERSIONS as readonly string[]).includes(version)) {
      throw invalid(`anthropic-version: invalid version ${version}`);
    }
    return version as MessagesRequest["version"];
  }

  function parse(raw: string): Json {
    try {
      const value = JSON.parse(raw);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
      throw new Error();
    } catch {
      throw invalid(
        "There was an issue with the format or content of your request: invalid JSON body",
      );
    }
  }

  function validate(
    request: Request,
    raw: string,
    record: ReceivedRequest,
    endpoint: "messages" | "count",
  ): MessagesRequest {
    const version = apiVersion(request);
    const body = parse(raw);
    record.body = body;
    const ctx: Context = { root: body, version, options };
    check(schemaFor(endpoint, version), body, body, [], []);
    validateSystem(body.system, ctx);
    validateMessages(body, ctx);
    validateTools(body, ctx);
    validateThinking(body, ctx, endpoint);
    validateGeneration(body, endpoint);
    if (endpoint === "messages") validateSampling(body);
    const config = options.models?.[body.model] ?? {};
    if (
      endpoint === "messages" && config.maxOutputTokens !== undefined &&
      body.max_tokens > config.maxOutputTokens
    ) {
      // Anthropic's words, as quoted in ChatGPTNextWeb/NextChat#4964.
      throw invalid(
        `max_tokens: ${body.max_tokens} > ${config.maxOutputTokens}, which is the maximum allowed number of output tokens for ${body.model}`,
      );
    }
    const ttls = cacheTtls(body);
    const firstShort = ttls.indexOf("5m");
    if (firstShort >= 0 && ttls.lastIndexOf("1h") > firstShort) {
      // The rule is documented (Prompt caching, "Mixing different TTLs"); these words are ours.
      throw invalid(
        "cache_control: a breakpoint with ttl '1h' must not come after one with ttl '5m'",
      );
    }
    const inputTokens = anthropicInputTokens(body, counterFor(body.model));
    if (config.contextWindow !== undefined && inputTokens > config.contextWindow) {
      // As in tests/fixtures/anthropic_errors.json (context_too_long).
      throw invalid(`prompt is too long: ${inputTokens} tokens > ${config.contextWindow} maximum`);
    }
    if (
      endpoint === "messages" && config.contextWindow !== undefined &&
      inputTokens + body.max_tokens > config.contextWindow
    ) {
      // The output cap (thinking included) must fit in the window beside the prompt. Anthropic's
      // words, as quoted in continuedev/continue#6080 and docker/docker-agent#569.
      throw invalid(
        `input length and \`max_tokens\` exceed context limit: ${inputTokens} + ${body.max_tokens} > ${config.contextWindow}, decrease input length or \`max_tokens\` and try again`,
      );
    }
    return {
      body,
      headers: record.headers,
      version,
      inputTokens,
      cacheable: hasCacheControl(body),
      hourCacheable: cacheTtls(body).includes("1h"),
    };
  }

  async function messagesEndpoint(request: Request, raw: string, record: ReceivedRequest) {
    const parsed = validate(request, raw, record, "messages");
    accepted.push(parsed);
    const next = queue.next();
    const answer = typeof next === "function" ? next(parsed) : next;
    if (answer.delayMs) await sleep(answer.delayMs, request.signal);
    if (answer.status !== undefined && answer.status !== 200) {
      tally.failed++;
      throw new AnthropicError(
        answer.status,
        answer.error?.type ?? errorTypeFor(answer.status),
        answer.error?.message ?? (answer.status === 529 ? "Overloaded" : "Internal server error"),
        answer.headers,
      );
    }
    const config = options.models?.[parsed.body.model] ?? {};
    const r = resolve(answer, parsed, config.minCacheableTokens ?? 1024);
    const requestId = `req_${randomId(24)}`;
    if (!parsed.body.stream) {
      tally.ok++;
      return Response.json(messageBody(answer, parsed, r), {
        headers: { "request-id": requestId, ...answer.headers },
      });
    }
    let events = streamEvents(answer, parsed, r).map(sse);
    if (answer.errorEventAfter !== undefined) {
      // "We may occasionally send errors in the event stream" (Streaming docs, "Error events").
      events = events.slice(0, answer.errorEventAfter);
      events.push(sse({
        type: "error",
        error: {
          type: answer.error?.type ?? "overloaded_error",
          message: answer.error?.message ?? "Overloaded",
        },
      }));
      tally.failed++;
    } else if (answer.cutAfterEvents !== undefined && answer.cutAfterEvents < events.length) {
      tally.cut++;
    } else tally.ok++;
    return sseBody(
      events,
      { ...answer, headers: { "request-id": requestId, ...answer.headers } },
      request.signal,
    );
  }

  const server = serveOnLoopback(async (request) => {
    const url = new URL(request.url);
    const raw = await request.text();
    const record: ReceivedRequest = {
      method: request.method,
      path: url.pathname,
      headers: headersObject(request.headers),
      raw,
      body: undefined,
    };
    received.push(record);
    let response: Response;
    try {
      const route = `${request.method} ${url.pathname.replace(/\/$/, "")}`;
      if (route !== "POST /v1/messages" && route !== "POST /v1/messages/count_tokens") {
        throw new AnthropicError(404, "not_found_error", "Not Found");
      }
      authorize(request);
      if (route === "POST /v1/messages") response = await messagesEndpoint(request, raw, record);
      else {
        const parsed = validate(request, raw, record, "count");
        counted.push(parsed);
        response = Response.json({ input_tokens: parsed.inputTokens });
      }
    } catch (error) {
      if (!(error instanceof AnthropicError)) throw error;
      if (error.status < 500 && error.status !== 429 && error.status !== 529) tally.refused++;
      response = error.response();
    }
    record.status = response.status;
    return response;
  });

  return {
    url: server.url,
    apiKey,
    received,
    messages: () => accepted,
    counts: () => counted,
    tally,
    script: (...answers) => queue.push(...answers),
    setDefault: (answer) => queue.setDefault(answer),
    inputTokens: (body) => anthropicInputTokens(body, counterFor(body.model)),
    close: server.close,
  };
}
