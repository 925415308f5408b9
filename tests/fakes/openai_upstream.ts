/**
 * A strict loopback fake of OpenAI's Chat Completions API (plus minimal embeddings and models),
 * for proving compatibility with a provider the tests cannot reach.
 *
 * It VALIDATES every request the way api.openai.com does and refuses what OpenAI refuses, with
 * OpenAI's error shape `{error: {message, type, param, code}}` and status; it answers with a
 * SCRIPTED completion (text, refusal, tool calls, reasoning tokens, logprobs, cached tokens) in
 * the non-streamed or the streamed wire format; and it bills usage the way OpenAI counts it.
 *
 * Sources (cited again where each rule is implemented):
 * - request/response types: openai-node `src/resources/chat/completions/completions.ts` (v7.57,
 *   the SDK in deno.json), `src/resources/shared.ts`, `src/resources/completions.ts` (usage);
 * - streaming and tool-call deltas: OpenAI API reference "The chat completion chunk object" and
 *   the function-calling guide, section "Streaming";
 * - error texts: OpenAI's live answers as quoted verbatim in public issue threads (cited inline);
 * - token counting: the OpenAI Cookbook "How to count tokens with tiktoken" (per-message and
 *   per-tool overheads) and the vision guide "Calculating costs" (image tiles).
 *
 * Usage from a test:
 *   const fake = startOpenAiUpstream();
 *   fake.script({ toolCalls: [{ name: "get_weather", arguments: { location: "Paris" } }] });
 *   const client = new OpenAI({ apiKey: fake.apiKey, baseURL: fake.baseUrl });
 *   ...; fake.chatRequests()[0].body.tools; await fake.close();
 */
import { z } from "zod";
import {
  createResponsesEndpoint,
  echoResponses,
  type ResponsesRequest,
} from "./openai_responses.ts";
import {
  base64Bytes,
  headersObject,
  imageInfo,
  parseDataUrl,
  type ReceivedRequest,
  ScriptQueue,
  serveOnLoopback,
  sleep,
  sseBody,
} from "./common.ts";
import {
  cacheBreakpoint,
  type ChatRequest,
  check,
  checkStrictSchema,
  decimal,
  functionName,
  int,
  invalid,
  jsonTypeName,
  messageText,
  type ModelRules,
  type OpenAiAnswer,
  OpenAiError,
  type OpenAiModelConfig,
  openAiPath,
  randomId,
  refusalPart,
  responseFormatTokens,
  supportedList,
  tokenCount,
  tokenPieces,
  toolsTokens,
  unverifiedStreamingRefusal,
} from "./openai_shared.ts";

// Defined in openai_shared.ts, still this module's API: the script and request types, and the
// token counts tests compare against.
export type {
  ChatRequest,
  OpenAiAnswer,
  OpenAiModelConfig,
  ScriptedToolCall,
} from "./openai_shared.ts";
export { responseFormatTokens, tokenCount, toolsTokens } from "./openai_shared.ts";

export const OPENAI_FAKE_KEY = "sk-fake-openai-upstream";

// =============================================================================================
// Scripts and options (the answer and request types are in openai_shared.ts).

export type OpenAiScript = OpenAiAnswer | ((request: ChatRequest) => OpenAiAnswer);

export interface OpenAiUpstreamOptions {
  apiKey?: string;
  /** Per upstream model; unknown models get defaults from their name. */
  models?: Record<string, OpenAiModelConfig>;
  /** When true, a model not in `models` is answered 404 model_not_found. */
  onlyKnownModels?: boolean;
  /** Pixel sizes of the https image URLs a test sends (the fake cannot download them). */
  imageSizes?: Record<string, { width: number; height: number }>;
  /**
   * How unknown top-level parameters are refused. OpenAI's classic answer, and the default, is
   * "Unrecognized request argument supplied: x" (code null); its newer validator answers
   * "Unknown parameter: 'x'." (code unknown_parameter), as quoted in
   * github.com/teabranch/open-responses-server/issues/41.
   */
  unknownParameterStyle?: "unrecognized" | "unknown_parameter";
  /** The first answer when nothing is scripted: echoes the last user message (see echoAnswer). */
  defaultAnswer?: OpenAiScript;
}

/** Names OpenAI serves as reasoning models: the o-series and gpt-5 family. */
export function isReasoningModelName(model: string): boolean {
  return /^(o\d|gpt-5)/.test(model);
}

// =============================================================================================
// Request schemas (openai-node v7.57 src/resources/chat/completions/completions.ts).

const textPart = z.strictObject({
  type: z.literal("text"),
  text: z.string(),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const imagePart = z.strictObject({
  type: z.literal("image_url"),
  image_url: z.strictObject({
    url: z.string(),
    detail: z.enum(["auto", "low", "high", "original"]).optional(),
  }),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const audioPart = z.strictObject({
  type: z.literal("input_audio"),
  input_audio: z.strictObject({ data: z.string(), format: z.enum(["wav", "mp3"]) }),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const filePart = z.strictObject({
  type: z.literal("file"),
  file: z.strictObject({
    file_data: z.string().optional(),
    file_id: z.string().optional(),
    filename: z.string().optional(),
  }),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const PARTS: Record<string, z.ZodType> = {
  text: textPart,
  refusal: refusalPart,
  image_url: imagePart,
  input_audio: audioPart,
  file: filePart,
};
/** Which content parts each role may carry (ChatCompletion*MessageParam.content). */
const PARTS_BY_ROLE: Record<string, string[]> = {
  system: ["text"],
  developer: ["text"],
  user: ["text", "image_url", "input_audio", "file"],
  assistant: ["text", "refusal"],
  tool: ["text"],
};

const functionToolCall = z.strictObject({
  id: z.string(),
  type: z.literal("function"),
  function: z.strictObject({ name: z.string(), arguments: z.string() }),
});
const customToolCall = z.strictObject({
  id: z.string(),
  type: z.literal("custom"),
  custom: z.strictObject({ name: z.string(), input: z.string() }),
});

const MESSAGE_FIELDS: Record<string, z.ZodType> = {
  system: z.strictObject({
    role: z.literal("system"),
    content: z.unknown(),
    name: z.string().optional(),
  }),
  developer: z.strictObject({
    role: z.literal("developer"),
    content: z.unknown(),
    name: z.string().optional(),
  }),
  user: z.strictObject({
    role: z.literal("user"),
    content: z.unknown(),
    name: z.string().optional(),
  }),
  assistant: z.strictObject({
    role: z.literal("assistant"),
    content: z.unknown().optional(),
    refusal: z.string().nullable().optional(),
    name: z.string().optional(),
    tool_calls: z.array(z.unknown()).min(1).optional(),
    function_call: z.strictObject({ name: z.string(), arguments: z.string() }).nullable()
      .optional(),
    audio: z.strictObject({ id: z.string() }).nullable().optional(),
  }),
  // `name` is not in OpenAI's types, but its cookbook sends it on tool messages and the API takes it.
  tool: z.strictObject({
    role: z.literal("tool"),
    content: z.unknown(),
    tool_call_id: z.string(),
    name: z.string().optional(),
  }),
  function: z.strictObject({
    role: z.literal("function"),
    content: z.string().nullable(),
    name: z.string(),
  }),
};

const functionTool = z.strictObject({
  type: z.literal("function"),
  function: z.strictObject({
    name: functionName,
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullable().optional(),
  }),
});
const customTool = z.strictObject({
  type: z.literal("custom"),
  custom: z.strictObject({
    name: functionName,
    description: z.string().optional(),
    format: z.union([
      z.strictObject({ type: z.literal("text") }),
      z.strictObject({
        type: z.literal("grammar"),
        grammar: z.strictObject({ definition: z.string(), syntax: z.enum(["lark", "regex"]) }),
      }),
    ]).optional(),
  }),
});

const toolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.strictObject({ type: z.literal("function"), function: z.strictObject({ name: z.string() }) }),
  z.strictObject({ type: z.literal("custom"), custom: z.strictObject({ name: z.string() }) }),
  z.strictObject({
    type: z.literal("allowed_tools"),
    allowed_tools: z.strictObject({
      mode: z.enum(["auto", "required"]),
      tools: z.array(z.union([
        z.strictObject({
          type: z.literal("function"),
          function: z.strictObject({ name: z.string() }),
        }),
        z.strictObject({ type: z.literal("custom"), custom: z.strictObject({ name: z.string() }) }),
      ])),
    }),
  }),
]);

const responseFormat = z.union([
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    json_schema: z.strictObject({
      name: functionName,
      description: z.string().optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().nullable().optional(),
    }),
  }),
]);

/** ChatCompletionCreateParamsBase, field by field. */
const chatFields = {
  messages: z.array(z.unknown()).min(1),
  model: z.string(),
  audio: z.strictObject({
    format: z.enum(["wav", "aac", "mp3", "flac", "opus", "pcm16"]),
    voice: z.union([z.string(), z.strictObject({ id: z.string() })]),
  }).nullable().optional(),
  frequency_penalty: decimal(-2, 2),
  function_call: z.union([
    z.enum(["none", "auto"]),
    z.strictObject({ name: z.string() }),
  ]).optional(),
  functions: z.array(z.strictObject({
    name: functionName,
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  })).optional(),
  logit_bias: z.record(z.string(), z.number().min(-100).max(100)).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  max_completion_tokens: int().min(1).nullable().optional(),
  max_tokens: int().min(1).nullable().optional(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
  modalities: z.array(z.enum(["text", "audio"])).nullable().optional(),
  moderation: z.looseObject({ model: z.string() }).nullable().optional(),
  n: int().min(1).max(128).nullable().optional(),
  parallel_tool_calls: z.boolean().optional(),
  prediction: z.strictObject({ type: z.literal("content"), content: z.unknown() }).nullable()
    .optional(),
  presence_penalty: decimal(-2, 2),
  prompt_cache_key: z.string().nullable().optional(),
  prompt_cache_options: z.looseObject({}).optional(),
  prompt_cache_retention: z.enum(["in_memory", "24h"]).nullable().optional(),
  reasoning_effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).nullable()
    .optional(),
  response_format: responseFormat.optional(),
  safety_identifier: z.string().max(128).nullable().optional(),
  seed: int().nullable().optional(),
  service_tier: z.enum(["auto", "default", "flex", "scale", "priority", "fast"]).nullable()
    .optional(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullable().optional(),
  store: z.boolean().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({
    include_usage: z.boolean().optional(),
    include_obfuscation: z.boolean().optional(),
  }).nullable().optional(),
  temperature: decimal(0, 2),
  tool_choice: toolChoice.optional(),
  tools: z.array(z.unknown()).optional(),
  top_logprobs: int().min(0).max(20).nullable().optional(),
  top_p: decimal(0, 1),
  user: z.string().optional(),
  verbosity: z.enum(["low", "medium", "high"]).nullable().optional(),
  web_search_options: z.looseObject({}).optional(),
};
const chatSchema = z.strictObject(chatFields);
export const CHAT_COMPLETION_PARAMS = Object.keys(chatFields);

const embeddingsFields = {
  input: z.union([
    z.string(),
    z.array(z.string()).min(1).max(2048),
    z.array(int()).min(1),
    z.array(z.array(int()).min(1)).min(1),
  ]),
  model: z.string(),
  dimensions: int().min(1).optional(),
  encoding_format: z.enum(["float", "base64"]).optional(),
  user: z.string().optional(),
};
const embeddingsSchema = z.strictObject(embeddingsFields);

// =============================================================================================
// Validation of a chat request: the rules OpenAI enforces beyond the field types.

// deno-lint-ignore no-explicit-any
type Json = any;

function validateContent(role: string, content: unknown, root: unknown, path: PropertyKey[]) {
  if (typeof content === "string") return;
  if (!Array.isArray(content)) {
    throw invalid(
      `Invalid type for '${
        openAiPath(path)
      }': expected one of a string or array of objects, but got ${jsonTypeName(content)} instead.`,
      openAiPath(path),
      "invalid_type",
    );
  }
  if (content.length === 0) {
    throw invalid(
      `Invalid '${
        openAiPath(path)
      }': empty array. Expected an array with minimum length 1, but got an empty array instead.`,
      openAiPath(path),
      "empty_array",
    );
  }
  content.forEach((part, k) => {
    const partPath = [...path, k];
    const type = (part as Json)?.type;
    const allowed = PARTS_BY_ROLE[role];
    if (!allowed.includes(type)) {
      throw invalid(
        `Invalid value: '${type}'. Supported values are: ${supportedList(allowed)}.`,
        openAiPath([...partPath, "type"]),
        "invalid_value",
      );
    }
    check(PARTS[type], part, root, partPath);
  });
}

function validateMessage(m: unknown, i: number, root: unknown) {
  const path: PropertyKey[] = ["messages", i];
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw invalid(
      `Invalid type for '${openAiPath(path)}': expected an object, but got ${
        jsonTypeName(m)
      } instead.`,
      openAiPath(path),
      "invalid_type",
    );
  }
  const role = (m as Json).role;
  if (role === undefined) {
    throw invalid(
      `Missing required parameter: '${openAiPath([...path, "role"])}'.`,
      openAiPath([...path, "role"]),
      "missing_required_parameter",
    );
  }
  if (!(role in MESSAGE_FIELDS)) {
    // The list and its order are OpenAI's, as quoted in public issue threads.
    throw invalid(
      `Invalid value: '${role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.`,
      openAiPath([...path, "role"]),
      "invalid_value",
    );
  }
  const message = check(MESSAGE_FIELDS[role], m, root, path) as Json;
  if (role === "assistant") {
    // "content: Required unless tool_calls or function_call is specified" (API reference); OpenAI's
    // words when it is missing: "Invalid value for 'content': expected a string, got null."
    const hasCalls = message.tool_calls?.length || message.function_call;
    if (message.content === undefined || message.content === null) {
      if (!hasCalls) {
        throw invalid(
          "Invalid value for 'content': expected a string, got null.",
          `messages.[${i}].content`,
        );
      }
    } else validateContent(role, message.content, root, [...path, "content"]);
    message.tool_calls?.forEach((call: unknown, k: number) => {
      const type = (call as Json)?.type;
      check(type === "custom" ? customToolCall : functionToolCall, call, root, [
        ...path,
        "tool_calls",
        k,
      ]);
    });
  } else if (role !== "function") {
    validateContent(role, message.content, root, [...path, "content"]);
  }
}

/**
 * Tool messages answer the tool_calls of the assistant message before them, and every call is
 * answered before the conversation goes on. OpenAI's refusals, verbatim as quoted in public
 * threads (e.g. github.com/sdcb/chats/pull/132), param "messages.[N].role", code null:
 *   "An assistant message with 'tool_calls' must be followed by tool messages responding to each
 *    'tool_call_id'. The following tool_call_ids did not have response messages: call_…"
 *   "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with
 *    'tool_calls'."  (OpenAI's spelling)
 */
function validateToolSequence(messages: Json[]) {
  let open: Set<string> | null = null;
  let callerIndex = -1;
  messages.forEach((m, i) => {
    if (m.role === "tool") {
      if (!open || !open.has(m.tool_call_id)) {
        throw invalid(
          "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
          `messages.[${i}].role`,
        );
      }
      open.delete(m.tool_call_id);
      return;
    }
    if (open && open.size > 0) throw missingToolResponses(open, i);
    open = null;
    if (m.role === "assistant" && m.tool_calls?.length) {
      open = new Set(m.tool_calls.map((c: Json) => c.id));
      callerIndex = i;
    }
  });
  const pending = open as Set<string> | null;
  // A conversation that ends on unanswered calls: the param names the calling message.
  if (pending && pending.size > 0) throw missingToolResponses(pending, callerIndex);
}

function missingToolResponses(ids: Set<string>, index: number) {
  return invalid(
    `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${
      [...ids].join(", ")
    }`,
    `messages.[${index}].role`,
  );
}

function validateTools(body: Json, root: unknown) {
  const tools: Json[] = body.tools ?? [];
  tools.forEach((tool, k) => {
    const type = tool?.type;
    if (type !== "function" && type !== "custom") {
      throw invalid(
        `Invalid value: '${type}'. Supported values are: 'function' and 'custom'.`,
        `tools[${k}].type`,
        "invalid_value",
      );
    }
    check(type === "function" ? functionTool : customTool, tool, root, ["tools", k]);
    if (type !== "function") return;
    const fn = tool.function;
    const params = fn.parameters;
    const param = `tools[${k}].function.parameters`;
    // Function parameters must describe an object (function-calling guide, "Defining functions").
    if (params && params.type !== undefined && params.type !== "object") {
      throw invalid(
        `Invalid schema for function '${fn.name}': schema must be a JSON Schema of 'type: "object"', got 'type: "${params.type}"'.`,
        param,
        "invalid_function_parameters",
      );
    }
    if (fn.strict) checkStrictSchema(params ?? {}, `function '${fn.name}'`, param);
  });
  const names = tools.map((t) => t.function?.name ?? t.custom?.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate !== undefined) {
    throw invalid(
      `Invalid 'tools': duplicate function name '${duplicate}'.`,
      "tools",
      "invalid_value",
    );
  }
  const choice = body.tool_choice;
  if (choice !== undefined && tools.length === 0) {
    // OpenAI: "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are
    // specified." (param tool_choice).
    throw invalid(
      "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
      "tool_choice",
    );
  }
  if (body.parallel_tool_calls !== undefined && tools.length === 0) {
    throw invalid(
      "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified.",
      "parallel_tool_calls",
    );
  }
  // Allowed tools name declared tools as the named choice does (the wording is assumed).
  const allowed = choice?.type === "allowed_tools"
    ? choice.allowed_tools.tools.map((t: Json) => t?.function?.name ?? t?.custom?.name)
    : [];
  for (const named of [choice?.function?.name ?? choice?.custom?.name, ...allowed]) {
    if (named !== undefined && !names.includes(named)) {
      throw invalid(
        `Invalid value for 'tool_choice': tool '${named}' is not in 'tools'.`,
        "tool_choice",
        "invalid_value",
      );
    }
  }
}

function modelRules(options: OpenAiUpstreamOptions, model: string): ModelRules | null {
  const config = options.models?.[model];
  if (!config && options.onlyKnownModels) return null;
  return {
    reasoning: config?.reasoning ?? isReasoningModelName(model),
    imageBaseTokens: config?.imageBaseTokens ?? 85,
    imageTileTokens: config?.imageTileTokens ?? 170,
    imagePatches: config?.imagePatches ?? null,
    contextWindow: config?.contextWindow,
    maxOutputTokens: config?.maxOutputTokens,
    unverifiedStreaming: config?.unverifiedStreaming ?? false,
  };
}

function formatNumber(n: number): string {
  return String(n);
}

/**
 * What reasoning models (o-series, gpt-5) refuse, with OpenAI's words as quoted in public threads
 * (e.g. microsoft/vscode-copilot-release#8065, owndev/Open-WebUI-Functions#98, lobehub#7747):
 *   max_tokens → "Unsupported parameter: 'max_tokens' is not supported with this model. Use
 *                 'max_completion_tokens' instead." (code unsupported_parameter)
 *   temperature ≠ 1 → "Unsupported value: 'temperature' does not support 0.2 with this model.
 *                 Only the default (1) value is supported." (code unsupported_value)
 *   top_p, penalties, logprobs, logit_bias → "Unsupported parameter: 'top_p' is not supported
 *                 with this model."
 * Non-reasoning models refuse reasoning_effort the same way.
 */
function validateForModel(body: Json, rules: ModelRules) {
  if (rules.unverifiedStreaming && body.stream === true) throw unverifiedStreamingRefusal();
  const unsupported = (name: string, hint = "") =>
    invalid(
      `Unsupported parameter: '${name}' is not supported with this model.${hint}`,
      name,
      "unsupported_parameter",
    );
  const present = (name: string) => body[name] !== undefined && body[name] !== null;
  if (rules.reasoning) {
    if (present("max_tokens")) {
      throw unsupported("max_tokens", " Use 'max_completion_tokens' instead.");
    }
    if (present("temperature") && body.temperature !== 1) {
      throw invalid(
        `Unsupported value: 'temperature' does not support ${
          formatNumber(body.temperature)
        } with this model. Only the default (1) value is supported.`,
        "temperature",
        "unsupported_value",
      );
    }
    for (
      const name of [
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
      ]
    ) {
      if (present(name)) throw unsupported(name);
    }
  } else if (present("reasoning_effort")) {
    throw unsupported("reasoning_effort");
  }
  // Explicit prompt caching is GPT-5.6's and later's: earlier models answer 400 ("Prompt
  // caching" guide; synthorai's GPT-5.6 guide: "a 400 on GPT-5.5 and older").
  const gpt = /gpt-(\d+)(?:\.(\d+))?/.exec(body.model);
  if (!gpt || Number(gpt[1]) * 100 + Number(gpt[2] ?? 0) < 506) {
    if (present("prompt_cache_options")) throw unsupported("prompt_cache_options");
    const marked = (body.messages ?? []).some((m: Json) =>
      Array.isArray(m.content) && m.content.some((p: Json) => p?.prompt_cache_breakpoint)
    );
    if (marked) throw unsupported("prompt_cache_breakpoint");
  }
  const limit = body.max_completion_tokens ?? body.max_tokens;
  if (
    rules.maxOutputTokens !== undefined && typeof limit === "number" &&
    limit > rules.maxOutputTokens
  ) {
    const name = body.max_completion_tokens !== undefined && body.max_completion_tokens !== null
      ? "max_completion_tokens"
      : "max_tokens";
    throw invalid(
      `max_tokens is too large: ${limit}. This model supports at most ${rules.maxOutputTokens} completion tokens, whereas you provided ${limit}.`,
      name,
      "invalid_value",
    );
  }
}

function validateChat(body: Json, rules: ModelRules) {
  body.messages.forEach((m: unknown, i: number) => validateMessage(m, i, body));
  validateToolSequence(body.messages);
  validateTools(body, body);
  if (body.stream_options !== undefined && body.stream_options !== null && !body.stream) {
    throw invalid(
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      "stream_options",
    );
  }
  // OpenAI's chat API keeps metadata only on a completion it stores; without `store: true` it
  // refuses the field, in these words (as quoted in langchaingo#1484 and QwenLM/qwen-code#243).
  if (body.metadata !== undefined && body.metadata !== null && body.store !== true) {
    throw invalid("The 'metadata' parameter is only allowed when 'store' is enabled.", "metadata");
  }
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && !body.logprobs) {
    throw invalid(
      "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
      "top_logprobs",
    );
  }
  const format = body.response_format;
  if (format?.type === "json_object") {
    // JSON mode guide: the conversation must ask for JSON. OpenAI's words, verbatim.
    const said = body.messages.some((m: Json) => /json/i.test(messageText(m)));
    if (!said) {
      throw invalid(
        "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
        "messages",
      );
    }
  }
  if (format?.type === "json_schema" && format.json_schema.strict) {
    checkStrictSchema(
      format.json_schema.schema ?? {},
      `response_format '${format.json_schema.name}'`,
      "response_format",
    );
  }
  validateForModel(body, rules);
}

// =============================================================================================
// Billing: prompt tokens the way OpenAI counts them.

/**
 * An image's tokens by OpenAI's published rule (vision guide, "Calculating costs", for gpt-4o,
 * gpt-4.1, o-series): detail "low" costs the base (85); otherwise the image is scaled to fit
 * 2048×2048, then so its shortest side is 768 px, and costs 170 per 512-px tile plus 85.
 * "auto" and "original" are billed as "high" here (the pessimistic reading).
 */
export function openAiImageTokens(
  width: number,
  height: number,
  detail: string = "auto",
  costs: { base: number; tile: number } = { base: 85, tile: 170 },
): number {
  if (detail === "low") return costs.base;
  let w = width;
  let h = height;
  if (w > 2048 || h > 2048) {
    const scale = 2048 / Math.max(w, h);
    w = Math.floor(w * scale);
    h = Math.floor(h * scale);
  }
  if (Math.min(w, h) > 768) {
    const scale = 768 / Math.min(w, h);
    w = Math.floor(w * scale);
    h = Math.floor(h * scale);
  }
  return costs.base + costs.tile * Math.ceil(w / 512) * Math.ceil(h / 512);
}

/**
 * prompt_tokens of a chat request, after the Cookbook's `num_tokens_from_messages` (3 per
 * message, its role and every string field, 1 more for a name, 3 to prime the reply), plus tool
 * definitions, the response_format schema and images. Tool calls in assistant messages count
 * their name and arguments plus 3. Audio and file parts are not modeled (0 tokens).
 */
export function openAiPromptTokens(
  body: Json,
  imageTokens: (part: Json) => number = () => 0,
): number {
  let total = 3;
  for (const m of body.messages) {
    total += 3 + tokenCount(m.role);
    if (m.name) total += 1 + tokenCount(m.name);
    if (typeof m.content === "string") total += tokenCount(m.content);
    else if (Array.isArray(m.content)) {
      for (const part of m.content) {
        if (part.type === "text") total += tokenCount(part.text);
        else if (part.type === "refusal") total += tokenCount(part.refusal);
        else if (part.type === "image_url") total += imageTokens(part);
      }
    }
    if (m.tool_call_id) total += tokenCount(m.tool_call_id);
    for (const call of m.tool_calls ?? []) {
      total += 3 + tokenCount(call.function?.name ?? call.custom?.name ?? "") +
        tokenCount(call.function?.arguments ?? call.custom?.input ?? "");
    }
    if (m.function_call) {
      total += 3 + tokenCount(m.function_call.name) + tokenCount(m.function_call.arguments);
    }
  }
  total += toolsTokens([
    ...(body.tools ?? []),
    ...(body.functions ?? []).map((f: Json) => ({ function: f })),
  ]);
  total += responseFormatTokens(body.response_format);
  return total;
}

// =============================================================================================
// The default answer: the older fake's commands, so its tests' faults carry over.

/**
 * Echoes the last user message word by word, reading the commands tests/fake_openai.ts reads:
 * "status:S" (answer status S), "cut:N" (drop the stream after N content chunks), "slow:MS"
 * (MS between chunks), "wait:MS …" (MS before the first byte).
 */
export function echoAnswer(request: ChatRequest): OpenAiAnswer {
  const last = request.body.messages.findLast((m: Json) => m.role === "user");
  let text = last ? messageText(last) : "";
  const answer: OpenAiAnswer = {};
  const wait = /^wait:(\d+) /.exec(text);
  if (wait) {
    answer.delayMs = Number(wait[1]);
    text = text.slice(wait[0].length);
  }
  const status = /^status:(\d{3})/.exec(text);
  if (status) return { ...answer, status: Number(status[1]) };
  const cut = /^cut:(\d+)/.exec(text);
  // role chunk, then N content chunks: the cut falls after N + 1 events.
  if (cut) answer.cutAfterEvents = Number(cut[1]) + 1;
  const slow = /^slow:(\d+)/.exec(text);
  if (slow) answer.chunkDelayMs = Number(slow[1]);
  const words = text.split(/\s+/).filter(Boolean);
  answer.content = words.join(" ");
  answer.contentChunks = words.map((w, i) => (i ? " " : "") + w);
  return answer;
}

// =============================================================================================
// The answer, non-streamed and streamed.

interface Rendered {
  content: string | null;
  contentPieces: string[];
  refusal: string | null;
  toolCalls: { id: string; name: string; arguments: string; chunks: string[] }[];
  finishReason: string;
  usage: Json;
}

function logprobsOf(pieces: string[], body: Json, value: number) {
  const top = body.top_logprobs ?? 0;
  return pieces.map((token, i) => {
    const bytes = [...new TextEncoder().encode(token)];
    const alternatives = Array.from(
      { length: top },
      (_, k) =>
        k === 0
          ? { token, logprob: value, bytes }
          : { token: `${token}${"~".repeat(k)}`, logprob: value - 2 * k - i * 0.001, bytes: null },
    );
    return { token, logprob: value, bytes, top_logprobs: alternatives };
  });
}

function render(answer: OpenAiAnswer, request: ChatRequest): Rendered {
  const body = request.body;
  const limit: number | undefined = body.max_completion_tokens ?? body.max_tokens ?? undefined;
  let reasoning = request.reasoningModel ? answer.reasoningTokens ?? 0 : 0;
  let pieces = answer.contentChunks ?? (answer.content ? tokenPieces(answer.content) : []);
  let finish: string = answer.toolCalls?.length ? "tool_calls" : "stop";
  // The token limit binds reasoning and visible tokens together (max_completion_tokens docs).
  if (limit !== undefined && answer.completionTokens === undefined) {
    if (reasoning >= limit) {
      reasoning = limit;
      pieces = [];
      finish = "length";
    } else {
      const room = limit - reasoning;
      let used = 0;
      const kept: string[] = [];
      for (const piece of pieces) {
        const n = tokenCount(piece);
        if (used + n > room) {
          finish = "length";
          break;
        }
        kept.push(piece);
        used += n;
      }
      pieces = kept;
    }
  }
  const content = answer.refusal !== undefined
    ? null
    : pieces.length || answer.content !== undefined
    ? pieces.join("")
    : answer.toolCalls?.length
    ? null
    : "";
  const toolCalls = (answer.toolCalls ?? []).map((call, k) => {
    const args = typeof call.arguments === "string"
      ? call.arguments
      : JSON.stringify(call.arguments);
    return {
      id: call.id ?? randomId("call_"),
      name: call.name,
      arguments: args,
      chunks: call.argumentChunks ?? tokenPieces(args),
      k,
    };
  });
  const completion = answer.completionTokens ??
    (tokenCount(content ?? "") + tokenCount(answer.refusal ?? "") + reasoning +
      toolCalls.reduce((n, c) => n + 3 + tokenCount(c.name) + tokenCount(c.arguments), 0));
  const n = body.n ?? 1;
  const prompt = answer.promptTokens ?? request.promptTokens;
  // Prompt caching applies to prompts of 1024 tokens or more (prompt-caching guide).
  const cached = prompt >= 1024 ? Math.min(answer.cachedTokens ?? 0, prompt) : 0;
  const gpt = /gpt-(\d+)(?:\.(\d+))?/.exec(body.model);
  const writes = !!gpt && Number(gpt[1]) * 100 + Number(gpt[2] ?? 0) >= 506;
  const written = writes && prompt >= 1024
    ? Math.min(answer.cacheWriteTokens ?? 0, prompt - cached)
    : 0;
  return {
    content,
    contentPieces: pieces,
    refusal: answer.refusal ?? null,
    toolCalls,
    finishReason: answer.finishReason ?? finish,
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion * n,
      total_tokens: prompt + completion * n,
      prompt_tokens_details: {
        cached_tokens: cached,
        audio_tokens: 0,
        ...(writes ? { cache_write_tokens: written } : {}),
      },
      completion_tokens_details: {
        reasoning_tokens: reasoning * n,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    },
  };
}

function completionBody(answer: OpenAiAnswer, request: ChatRequest, r: Rendered) {
  const body = request.body;
  const logprob = answer.logprob ?? -0.0001;
  const message: Json = {
    role: "assistant",
    content: r.content,
    refusal: r.refusal,
    annotations: [],
  };
  if (r.toolCalls.length) {
    message.tool_calls = r.toolCalls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.arguments },
    }));
  }
  return {
    id: randomId("chatcmpl-", 29),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: answer.model ?? body.model,
    choices: Array.from({ length: body.n ?? 1 }, (_, index) => ({
      index,
      message,
      logprobs: body.logprobs
        ? { content: logprobsOf(r.contentPieces, body, logprob), refusal: null }
        : null,
      finish_reason: r.finishReason,
    })),
    usage: r.usage,
    service_tier: "default",
    system_fingerprint: "fp_fake0penai",
  };
}

/**
 * The chunk sequence OpenAI streams (API reference, "The chat completion chunk object";
 * function-calling guide, "Streaming"): a first chunk with the role (content "" — or null with the
 * first tool call when the answer is only tool calls); content deltas; each tool call's first
 * fragment with index, id, type, function.name and empty arguments, then argument pieces with the
 * index only; a chunk with an empty delta and the finish_reason; with include_usage, a last chunk
 * with choices [] and the usage (every other chunk then carries "usage": null); then [DONE].
 */
export function streamChunks(answer: OpenAiAnswer, request: ChatRequest, r: Rendered): Json[] {
  const body = request.body;
  const includeUsage = !!body.stream_options?.include_usage;
  const obfuscate = body.stream_options?.include_obfuscation !== false;
  const logprob = answer.logprob ?? -0.0001;
  const base = {
    id: randomId("chatcmpl-", 29),
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: answer.model ?? body.model,
    service_tier: "default",
    system_fingerprint: "fp_fake0penai",
  };
  const chunks: Json[] = [];
  const chunk = (index: number, delta: Json, finish: string | null, logprobs: Json = null) => {
    const c: Json = { ...base, choices: [{ index, delta, logprobs, finish_reason: finish }] };
    if (includeUsage) c.usage = null;
    // Stream obfuscation pads each delta with random characters unless include_obfuscation is
    // false (ChatCompletionStreamOptions.include_obfuscation, default on).
    if (obfuscate) c.obfuscation = randomId("", 1 + (chunks.length % 7));
    chunks.push(c);
  };
  for (let index = 0; index < (body.n ?? 1); index++) {
    const onlyTools = r.toolCalls.length > 0 && r.content === null && r.refusal === null;
    if (onlyTools) {
      const first = r.toolCalls[0];
      chunk(index, {
        role: "assistant",
        content: null,
        tool_calls: [{
          index: 0,
          id: first.id,
          type: "function",
          function: { name: first.name, arguments: "" },
        }],
        refusal: null,
      }, null);
    } else {
      chunk(index, { role: "assistant", content: "", refusal: null }, null);
    }
    r.contentPieces.forEach((piece) => {
      chunk(
        index,
        { content: piece },
        null,
        body.logprobs ? { content: logprobsOf([piece], body, logprob), refusal: null } : null,
      );
    });
    if (r.refusal) {
      for (const piece of tokenPieces(r.refusal)) chunk(index, { refusal: piece }, null);
    }
    r.toolCalls.forEach((call, k) => {
      if (!(onlyTools && k === 0)) {
        chunk(index, {
          tool_calls: [{
            index: k,
            id: call.id,
            type: "function",
            function: { name: call.name, arguments: "" },
          }],
        }, null);
      }
      for (const piece of call.chunks) {
        chunk(index, { tool_calls: [{ index: k, function: { arguments: piece } }] }, null);
      }
    });
    chunk(index, {}, r.finishReason);
  }
  if (includeUsage && !answer.omitUsageChunk) {
    const last: Json = { ...base, choices: [], usage: r.usage };
    if (obfuscate) last.obfuscation = randomId("", 5);
    chunks.push(last);
  }
  return chunks;
}

// =============================================================================================
// The server.

export interface OpenAiUpstream {
  /** http://127.0.0.1:PORT — what Tollbooth's catalog takes as base_url. */
  url: string;
  /** url + "/v1" — what the openai SDK takes as baseURL. */
  baseUrl: string;
  apiKey: string;
  /** Every request, in order, with what the fake answered. */
  received: ReceivedRequest[];
  /** The chat requests that passed validation (body, headers, the billed prompt tokens). */
  chats: ChatRequest[];
  /**
   * The /v1/responses requests that passed validation (body, headers, the billed inputTokens,
   * the reasoning tokens carried back).
   */
  responses: ResponsesRequest[];
  /** The `/v1/responses/input_tokens` counts answered: the body counted, and its count. */
  tokenCounts: { body: Json; inputTokens: number }[];
  /** The answers given: ok completions, refused (4xx from validation), scripted failures, cuts. */
  counts: { ok: number; refused: number; failed: number; cut: number };
  /** Queues what the model answers to the next chat requests, in order. */
  script(...answers: OpenAiScript[]): void;
  /** What it answers when nothing is queued (echoAnswer by default). */
  setDefault(answer: OpenAiScript): void;
  /** prompt_tokens this fake bills for a request body (validated or not). */
  promptTokens(body: Json): number;
  /** input_tokens this fake bills for a /v1/responses body (carried reasoning included). */
  responsesInputTokens(body: Json): Promise<number>;
  close(): Promise<void>;
}

export function startOpenAiUpstream(options: OpenAiUpstreamOptions = {}): OpenAiUpstream {
  const apiKey = options.apiKey ?? OPENAI_FAKE_KEY;
  const received: ReceivedRequest[] = [];
  const chats: ChatRequest[] = [];
  const responses: ResponsesRequest[] = [];
  const tokenCounts: { body: Json; inputTokens: number }[] = [];
  const counts = { ok: 0, refused: 0, failed: 0, cut: 0 };
  const queue = new ScriptQueue<OpenAiScript>(options.defaultAnswer ?? echoAnswer);

  function imageTokensFor(rules: ModelRules) {
    return (part: Json) => {
      const { url, detail } = part.image_url;
      const size = imageSize(url);
      if (rules.imagePatches) {
        const patches = Math.ceil(size.width / 32) * Math.ceil(size.height / 32);
        if (patches > rules.imagePatches.most) {
          throw invalid(`Image has ${patches} patches, more than ${rules.imagePatches.most}.`);
        }
        return Math.ceil(patches * rules.imagePatches.multiplier);
      }
      return openAiImageTokens(size.width, size.height, detail, {
        base: rules.imageBaseTokens,
        tile: rules.imageTileTokens,
      });
    };
  }

  /**
   * An image's size: read from a data URL's bytes, or configured by the test for a URL. OpenAI
   * fetches URLs itself; one it cannot fetch is refused "Error while downloading <url>." (code
   * invalid_image_url), which is what this fake answers for a URL the test did not configure.
   */
  function imageSize(url: string) {
    if (url.startsWith("data:")) {
      const data = parseDataUrl(url);
      const info = data && /^image\/(png|jpeg|gif|webp)$/.test(data.mediaType)
        ? imageInfo(base64Bytes(data.data) ?? new Uint8Array())
        : null;
      if (!info) {
        throw invalid(
          "You uploaded an unsupported image. Please make sure your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp'].",
          null,
          "invalid_image_format",
        );
      }
      return info;
    }
    const size = options.imageSizes?.[url];
    if (!/^https?:\/\//.test(url) || !size) {
      throw invalid(`Error while downloading ${url}.`, null, "invalid_image_url");
    }
    return size;
  }

  function authorize(request: Request) {
    const header = request.headers.get("authorization");
    if (!header) {
      throw new OpenAiError(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. You can obtain an API key from https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
        null,
        null,
      );
    }
    const key = header.replace(/^Bearer\s+/i, "");
    if (key !== apiKey) {
      // OpenAI masks all but the first 8 and last 4 characters of the key it refuses.
      const masked = key.length > 12 ? `${key.slice(0, 8)}****${key.slice(-4)}` : "****";
      throw new OpenAiError(
        401,
        `Incorrect API key provided: ${masked}. You can find your API key at https://platform.openai.com/account/api-keys.`,
        "invalid_request_error",
        null,
        "invalid_api_key",
      );
    }
  }

  function parseJson(raw: string): Json {
    try {
      const value = JSON.parse(raw);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch { /* below */ }
    throw invalid(
      "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
    );
  }

  function rejectUnknown(body: Json, known: string[]) {
    const unknown = Object.keys(body).filter((k) => !known.includes(k));
    if (!unknown.length) return;
    if (options.unknownParameterStyle === "unknown_parameter") {
      throw invalid(`Unknown parameter: '${unknown[0]}'.`, unknown[0], "unknown_parameter");
    }
    throw invalid(
      unknown.length === 1
        ? `Unrecognized request argument supplied: ${unknown[0]}`
        : `Unrecognized request arguments supplied: ${unknown.join(", ")}`,
    );
  }

  function rulesFor(model: string): ModelRules {
    const rules = modelRules(options, model);
    if (!rules) {
      throw new OpenAiError(
        404,
        `The model \`${model}\` does not exist or you do not have access to it.`,
        "invalid_request_error",
        null,
        "model_not_found",
      );
    }
    return rules;
  }

  const responsesEndpoint = createResponsesEndpoint({
    parseJson,
    rulesFor,
    imageTokensFor,
    counts,
    responses,
    tokenCounts,
    nextAnswer(request) {
      const next = queue.next();
      if (next === echoAnswer) return echoResponses(request, echoAnswer);
      return typeof next === "function" ? next(request) : next;
    },
  });

  /** Image tokens that never refuse: what a body would cost, for a test's comparison. */
  function lenientImageTokens(model: string) {
    return (part: Json) => {
      try {
        const rules = modelRules({ ...options, onlyKnownModels: false }, model)!;
        return imageTokensFor(rules)(part);
      } catch {
        return 0;
      }
    };
  }

  async function chat(request: Request, raw: string, record: ReceivedRequest): Promise<Response> {
    const body = parseJson(raw);
    record.body = body;
    // A missing model is refused before anything else: "you must provide a model parameter".
    if (body.model === undefined) throw invalid("you must provide a model parameter");
    rejectUnknown(body, CHAT_COMPLETION_PARAMS);
    check(chatSchema, body, body, []);
    const rules = rulesFor(body.model);
    validateChat(body, rules);
    const promptTokens = openAiPromptTokens(body, imageTokensFor(rules));
    const limit = body.max_completion_tokens ?? body.max_tokens;
    if (rules.contextWindow !== undefined && promptTokens + (limit ?? 0) > rules.contextWindow) {
      // As quoted in tests/fixtures/openai_errors.json (context_too_long).
      throw invalid(
        limit
          ? `This model's maximum context length is ${rules.contextWindow} tokens. However, you requested ${
            promptTokens + limit
          } tokens (${promptTokens} in the messages, ${limit} in the completion). Please reduce the length of the messages or completion.`
          : `This model's maximum context length is ${rules.contextWindow} tokens. However, your messages resulted in ${promptTokens} tokens. Please reduce the length of the messages.`,
        "messages",
        "context_length_exceeded",
      );
    }
    const chatRequest: ChatRequest = {
      body,
      headers: record.headers,
      promptTokens,
      reasoningModel: rules.reasoning,
    };
    chats.push(chatRequest);
    const next = queue.next();
    const answer = typeof next === "function" ? next(chatRequest) : next;
    if (answer.delayMs) await sleep(answer.delayMs, request.signal);
    if (answer.status !== undefined && answer.status !== 200) {
      counts.failed++;
      throw new OpenAiError(
        answer.status,
        answer.error?.message ??
          `The server had an error while processing your request. Sorry about that!`,
        answer.error?.type ?? (answer.status >= 500 ? "server_error" : "invalid_request_error"),
        answer.error?.param ?? null,
        answer.error?.code ?? null,
        answer.headers,
      );
    }
    const rendered = render(answer, chatRequest);
    if (!body.stream) {
      counts.ok++;
      return Response.json(completionBody(answer, chatRequest, rendered), {
        headers: { "x-request-id": crypto.randomUUID(), ...answer.headers },
      });
    }
    const events = streamChunks(answer, chatRequest, rendered).map((c) =>
      `data: ${JSON.stringify(c)}\n\n`
    );
    events.push("data: [DONE]\n\n");
    if (answer.cutAfterEvents !== undefined && answer.cutAfterEvents < events.length) counts.cut++;
    else counts.ok++;
    return sseBody(events, answer, request.signal);
  }

  function embeddings(raw: string, record: ReceivedRequest): Response {
    const body = parseJson(raw);
    record.body = body;
    if (body.model === undefined) throw invalid("you must provide a model parameter");
    rejectUnknown(body, Object.keys(embeddingsFields));
    check(embeddingsSchema, body, body, []);
    const inputs: unknown[] = typeof body.input === "string" || typeof body.input[0] === "number"
      ? [body.input]
      : body.input;
    if (inputs.some((x) => x === "")) {
      throw invalid(
        "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
      );
    }
    const dims = body.dimensions ?? options.models?.[body.model]?.embeddingLength ?? 1536;
    const count = options.models?.[body.model]?.countTokens ?? tokenCount;
    let tokens = 0;
    const data = inputs.map((input, index) => {
      const text = typeof input === "string" ? input : (input as number[]).join(" ");
      tokens += typeof input === "string" ? count(input) : (input as number[]).length;
      const vector = pseudoEmbedding(text, dims);
      const embedding = body.encoding_format === "base64"
        ? btoa(String.fromCharCode(...new Uint8Array(Float32Array.from(vector).buffer)))
        : vector;
      return { object: "embedding", index, embedding };
    });
    counts.ok++;
    return Response.json({
      object: "list",
      data,
      model: body.model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  function models(path: string): Response {
    const ids = Object.keys(options.models ?? {});
    const list = (ids.length ? ids : ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "o3-mini", "gpt-5"]).map(
      (id) => ({ id, object: "model", created: 1715367049, owned_by: "system" }),
    );
    const one = /^\/v1\/models\/(.+)$/.exec(path);
    if (!one) return Response.json({ object: "list", data: list });
    const found = list.find((m) => m.id === decodeURIComponent(one[1]));
    if (!found) {
      throw new OpenAiError(
        404,
        `The model '${decodeURIComponent(one[1])}' does not exist`,
        "invalid_request_error",
        "model",
        "model_not_found",
      );
    }
    return Response.json(found);
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
      authorize(request);
      const route = `${request.method} ${url.pathname.replace(/\/$/, "")}`;
      if (route === "POST /v1/chat/completions") response = await chat(request, raw, record);
      else if (route === "POST /v1/responses") {
        response = await responsesEndpoint.handle(request, raw, record);
      } else if (route === "POST /v1/responses/input_tokens") {
        response = await responsesEndpoint.countInputTokens(raw, record);
      } else if (route === "POST /v1/embeddings") response = embeddings(raw, record);
      else if (request.method === "GET" && /^\/v1\/models(\/.+)?$/.test(url.pathname)) {
        response = models(url.pathname);
      } else {
        // OpenAI's answer to a path it does not serve.
        throw new OpenAiError(
          404,
          `Invalid URL (${request.method} ${url.pathname})`,
          "invalid_request_error",
          null,
          null,
        );
      }
    } catch (error) {
      if (!(error instanceof OpenAiError)) throw error;
      if (error.status < 500 && error.status !== 429) counts.refused++;
      response = error.response();
    }
    record.status = response.status;
    return response;
  });

  return {
    url: server.url,
    baseUrl: `${server.url}/v1`,
    apiKey,
    received,
    chats,
    counts,
    script: (...answers) => queue.push(...answers),
    setDefault: (answer) => queue.setDefault(answer),
    responses,
    tokenCounts,
    promptTokens(body) {
      return openAiPromptTokens(body, lenientImageTokens(body.model));
    },
    responsesInputTokens(body) {
      return responsesEndpoint.inputTokens(body, lenientImageTokens(body.model));
    },
    close: server.close,
  };
}

/** A deterministic unit vector derived from the text (equal texts embed equally). */
function pseudoEmbedding(text: string, dims: number): number[] {
  let seed = 2166136261;
  for (let i = 0; i < text.length; i++) seed = Math.imul(seed ^ text.charCodeAt(i), 16777619);
  const v: number[] = [];
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    seed = Math.imul(seed ^ (seed >>> 15), 2246822507) ^ i;
    const x = ((seed >>> 0) / 0xffffffff) * 2 - 1;
    v.push(x);
    norm += x * x;
  }
  return v.map((x) => x / Math.sqrt(norm));
}
