/**
 * The chat-completions dialect Tollbooth accepts: OpenAI's request format as the official clients
 * send it (tools, tool messages, images, developer role, structured output, reasoning), validated
 * strictly so that a malformed request gets a 400 naming the exact path, before any money moves.
 *
 * Every request field is on an explicit list, with what each provider kind does with it
 * (`FIELD_SUPPORT`): passed on, translated, ignored as a harmless hint, or refused with a 400.
 * Nothing unlisted reaches a provider, and nothing that would change the price is passed on
 * unpriced.
 */
import { z } from "zod";
import { ApiError } from "@/lib/core/mod.ts";
import type { ClaudeRules } from "@/lib/catalog/mod.ts";
import { readImageSize } from "./image_size.ts";
import { claudeThinkingBlocks, ReasoningDetails } from "./reasoning_details.ts";

export const DEFAULT_MAX_TOKENS = 2048;

/** The wire formats of the catalog's providers. */
export type ProviderKind = "openai" | "openai_responses" | "anthropic" | "simulator";

// ---------------------------------------------------------------------------------------------
// Messages

/** Anthropic's prompt-cache breakpoint, accepted on text parts and tools; other kinds drop it. */
export const CacheControl = z.strictObject({
  type: z.literal("ephemeral", "must be 'ephemeral'"),
  // Five minutes unless said; an hour costs more to write (the catalog's 1-hour write price).
  ttl: z.enum(["5m", "1h"], { error: "must be one of 5m, 1h" }).optional(),
});

/** A message's content without these fields on its parts (a kind's cache marks another kind refuses). */
export function withoutPartFields<T>(content: T, fields: readonly string[]): T {
  if (!Array.isArray(content)) return content;
  return content.map((part) => {
    if (!part || typeof part !== "object" || !fields.some((f) => f in part)) return part;
    const rest = { ...part };
    for (const field of fields) delete rest[field];
    return rest;
  }) as T;
}

/** OpenAI's explicit prompt-cache breakpoint on a content part (GPT-5.6 on). */
export const PromptCacheBreakpoint = z.strictObject({
  mode: z.literal("explicit", "must be 'explicit'"),
  ttl: z.enum(["30m", "12h"], { error: "must be one of 30m, 12h" }).optional(),
});

/** OpenAI's request-wide prompt-cache options (GPT-5.6 on). */
export const PromptCacheOptions = z.strictObject({
  mode: z.enum(["implicit", "explicit"], { error: "must be one of implicit, explicit" }).optional(),
  ttl: z.literal("30m", "must be '30m'").optional(),
}, { error: "must be an object" });

/** OpenAI's retention of cached prompts (deprecated for prompt_cache_options, still taken). */
export const PromptCacheRetention = z.enum(["in_memory", "24h"], {
  error: "must be one of in_memory, 24h",
});

const TextPart = z.strictObject({
  type: z.literal("text"),
  text: z.string({ error: "must be a string" }),
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
});

const ImagePart = z.strictObject({
  type: z.literal("image_url"),
  image_url: z.strictObject({
    // https only, as documented: the provider fetches the image, and over plain http anyone on
    // the way can swap it; whether a provider fetches http at all differs, and a clear 400 here
    // beats one provider's refusal after the reservation.
    url: z.string({ error: "must be a string" }).refine(
      (url) => url.startsWith("data:") || /^https:\/\/[^\s]+$/i.test(url),
      "must be an https URL or a data URL",
    ),
    // Null is the default (auto), as the Responses path takes it; not sent on, where it is no
    // value OpenAI documents.
    detail: z.enum(["auto", "low", "high"], { error: "must be one of auto, low, high" })
      .nullish().transform((detail) => detail ?? undefined),
  }),
  // Claude caches an image block too: a screenshot an agent loop sends every turn.
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
});

const AudioPart = z.strictObject({
  type: z.literal("input_audio"),
  input_audio: z.strictObject({ data: z.string(), format: z.string() }),
});

/**
 * A file as OpenAI's chat API takes it (the openai SDK, the AI SDK's and LangChain's OpenAI
 * providers send PDFs so): its bytes as a data URL in `file_data`, or the id of an upload. Only a
 * PDF's bytes are taken (checkFiles), and only where the provider counts them (assertSupported).
 */
const FilePart = z.strictObject({
  type: z.literal("file"),
  file: z.strictObject({
    file_data: z.string({ error: "must be a string" }).optional(),
    file_id: z.string({ error: "must be a string" }).optional(),
    filename: z.string({ error: "must be a string" }).optional(),
  }),
  // A PDF re-sent every turn of an agent loop is what a cache breakpoint is for: Claude's, and
  // OpenAI's explicit one (GPT-5.6 on), each sent only to its own kind, as on text parts.
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
});

const RefusalPart = z.strictObject({ type: z.literal("refusal"), refusal: z.string() });

const partsOf = <T extends z.ZodType>(part: T, what: string) =>
  z.array(part, { error: `must be a string or an array of ${what}` }).min(
    1,
    "must not be an empty array",
  );

const UserPart = z.discriminatedUnion("type", [TextPart, ImagePart, AudioPart, FilePart], {
  error: "must be a part of type text, image_url, input_audio or file",
});
const AssistantPart = z.discriminatedUnion("type", [TextPart, RefusalPart], {
  error: "must be a part of type text or refusal",
});
const TextOnlyPart = z.discriminatedUnion("type", [TextPart], {
  error: "must be a part of type text",
});
/** A tool's output may show what it saw (a screenshot, a chart, a PDF it fetched). */
const ToolPart = z.discriminatedUnion("type", [TextPart, ImagePart, FilePart], {
  error: "must be a part of type text, image_url or file",
});

/** A participant's name; null, as clients that serialise every field send it, is no name. */
const Name = z.string({ error: "must be a string" }).min(1, "must not be empty").max(256).nullish();

const ToolCall = z.strictObject({
  id: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  type: z.literal("function", "must be 'function'"),
  function: z.strictObject({
    name: z.string({ error: "must be a string" }).min(1, "must not be empty"),
    arguments: z.string({ error: "must be a JSON string" }),
    // The openai SDK's parse helpers add the arguments parsed; accepted, never forwarded.
    parsed_arguments: z.unknown().optional(),
  }),
  /**
   * What a server attached to the call for its own use, sent back as it came: Gemini's thought
   * signature (`{google: {thought_signature}}`), without which Gemini 3 refuses the next turn.
   * Forwarded to routes whose model is Gemini's (see openAiRequestBody).
   */
  extra_content: z.record(z.string(), z.unknown(), { error: "must be an object" }).optional(),
});

const SystemMessage = z.strictObject({
  role: z.literal("system"),
  content: z.union([z.string(), partsOf(TextOnlyPart, "text parts")], {
    error: "must be a string or an array of text parts",
  }),
  name: Name,
});
const DeveloperMessage = SystemMessage.extend({ role: z.literal("developer") });
const UserMessage = z.strictObject({
  role: z.literal("user"),
  content: z.union([z.string(), partsOf(UserPart, "content parts")], {
    error: "must be a string or an array of content parts",
  }),
  name: Name,
});
/**
 * What an assistant message was in its turn (OpenAI's Responses API): a preamble before tool calls
 * (`commentary`) or the answer (`final_answer`).
 */
export const MessagePhase = z.enum(["commentary", "final_answer"], {
  error: "must be commentary or final_answer",
});

export type MessagePhase = z.infer<typeof MessagePhase>;

export function isMessagePhase(value: unknown): value is MessagePhase {
  return value === "commentary" || value === "final_answer";
}

const AssistantMessage = z.strictObject({
  role: z.literal("assistant"),
  content: z.union([z.string(), partsOf(AssistantPart, "text or refusal parts")], {
    error: "must be a string, an array of text or refusal parts, or null",
  }).nullish(),
  name: Name,
  refusal: z.string({ error: "must be a string" }).nullish(),
  tool_calls: z.array(ToolCall, { error: "must be an array of tool calls" }).nullish(),
  // Fields of a response message that clients push back into the conversation as they got it
  // (the openai SDK's `parsed`, OpenAI's `annotations`, reasoning text): accepted, never forwarded,
  // except `reasoning_content` to a provider that asks for it back (forward_reasoning_content).
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish(),
  // Claude's signed thinking (reasoning_details.ts): sent back to Claude, to no other provider.
  reasoning_details: ReasoningDetails.nullish(),
  // A Responses item's phase, which GPT-5.3-codex on want back with the message: sent to the
  // Responses kind, to no other provider (chat completions has no such field).
  phase: MessagePhase.nullish(),
  annotations: z.array(z.unknown()).nullish(),
  parsed: z.unknown().optional(),
  audio: z.null({ error: "audio output is not supported" }).optional(),
  function_call: z.null({ error: "the deprecated functions API is not supported" }).optional(),
});

// `reasoning_content` stays on the message: a provider that wants it back (DeepSeek's thinking
// mode, within a tool loop) is sent it, the others never (see openAiRequestBody).
const ECHOED_RESPONSE_FIELDS = [
  "reasoning",
  "annotations",
  "parsed",
  "audio",
  "function_call",
] as const;

/**
 * A message as the conversation needs it: without the echoed response-only fields, and fields sent
 * as null.
 */
function conversationMessage(m: ChatMessage): ChatMessage {
  if (m.role !== "assistant") {
    if (m.name !== null) return m;
    const { name: _name, ...rest } = m;
    return rest as ChatMessage;
  }
  const out: Record<string, unknown> = { ...m };
  for (const field of ECHOED_RESPONSE_FIELDS) delete out[field];
  if (m.name === null) delete out.name;
  // An empty one stays: DeepSeek refuses a tool loop's turn without the field, empty or not.
  if (m.reasoning_content == null) delete out.reasoning_content;
  if (!m.reasoning_details?.length) delete out.reasoning_details;
  if (m.phase == null) delete out.phase;
  if (!m.tool_calls?.length) delete out.tool_calls;
  else if (m.tool_calls?.some((call) => "parsed_arguments" in call.function)) {
    out.tool_calls = m.tool_calls.map(({ function: { name, arguments: args }, ...call }) => ({
      ...call,
      function: { name, arguments: args },
    }));
  }
  return out as ChatMessage;
}
const ToolMessage = z.strictObject({
  role: z.literal("tool"),
  content: z.union([z.string(), partsOf(ToolPart, "text, image_url or file parts")], {
    error: "must be a string or an array of text, image_url or file parts",
  }),
  tool_call_id: z.string({ error: "must be the id of the tool call it answers" }).min(
    1,
    "must not be empty",
  ),
  // The tool's name, which LangChain's tools put on the message they return and OpenAI's own
  // cookbook sends: passed on by the OpenAI kind as the client's other fields are (Gemini's and
  // Mistral's compatible APIs read it); Claude's tool_result and the Responses API's
  // function_call_output have no such field, and are sent none.
  name: Name,
});

const Message = z.discriminatedUnion(
  "role",
  [SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage],
  { error: "must be one of system, developer, user, assistant, tool" },
);

export type ChatMessage = z.infer<typeof Message>;
export type UserContentPart = z.infer<typeof UserPart>;
export type ImageContentPart = z.infer<typeof ImagePart>;
export type FileContentPart = z.infer<typeof FilePart>;
export type ToolContentPart = z.infer<typeof ToolPart>;
export type TextContentPart = z.infer<typeof TextPart>;
export type ToolCallMessagePart = z.infer<typeof ToolCall>;

// ---------------------------------------------------------------------------------------------
// Request fields

const TokenCap = z.number({ error: "must be an integer" })
  .int("must be an integer")
  .min(1, "must be at least 1")
  .max(10_000_000, "is far above any model's output limit");

const JsonObject = z.record(z.string(), z.unknown(), { error: "must be a JSON Schema object" });

const FunctionName = z.string({ error: "must be a string" }).regex(
  /^[a-zA-Z0-9_-]{1,64}$/,
  "must be 1 to 64 letters, digits, underscores or dashes",
);

const Tool = z.strictObject({
  type: z.literal("function", "must be 'function' (the only tool type)"),
  function: z.strictObject({
    name: FunctionName,
    description: z.string({ error: "must be a string" }).optional(),
    parameters: JsonObject.optional(),
    strict: z.boolean({ error: "must be a boolean" }).nullish(),
  }),
  cache_control: CacheControl.optional(),
});

/**
 * OpenAI's allowed tools (GPT-5 on): the model may call only these of `tools`, which are all still
 * sent, so that a prompt cached with every tool stays cached while the choice changes per turn.
 * `auto` lets it answer instead, `required` makes it call one of them.
 */
const AllowedTools = z.strictObject({
  mode: z.enum(["auto", "required"], { error: "must be one of auto, required" }),
  tools: z.array(
    z.strictObject({
      type: z.literal("function", "must be 'function' (the only tool type)"),
      function: z.strictObject({ name: FunctionName }),
    }),
    { error: "must be an array of {type: 'function', function: {name}}" },
  ).min(1, "must name at least one tool of 'tools'"),
});

const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  // Told apart by type: an allowed_tools choice without its object is named as such, where the
  // function branch's type would otherwise be the issue the union reports.
  z.discriminatedUnion("type", [
    z.strictObject({
      type: z.literal("function"),
      function: z.strictObject({ name: FunctionName }),
    }),
    z.strictObject({ type: z.literal("allowed_tools"), allowed_tools: AllowedTools }),
  ], { error: "must be 'function' or 'allowed_tools'" }),
], {
  error:
    "must be none, auto, required, {type: 'function', function: {name}} or {type: 'allowed_tools', allowed_tools: {mode, tools}}",
});

export type ToolChoiceSpec = z.infer<typeof ToolChoice>;

/** The names an `allowed_tools` choice allows, in their order, once each; null for any other. */
export function allowedToolNames(choice: ToolChoiceSpec | null | undefined): string[] | null {
  if (!choice || typeof choice !== "object" || choice.type !== "allowed_tools") return null;
  return [...new Set(choice.allowed_tools.tools.map((t) => t.function.name))];
}

/** Whether the choice makes the model call a tool: `required`, a named one, or allowed_tools' `required`. */
export function forcesToolCall(choice: ToolChoiceSpec | null | undefined): boolean {
  if (!choice || choice === "none" || choice === "auto") return false;
  return choice === "required" || choice.type === "function" ||
    choice.allowed_tools.mode === "required";
}

const ResponseFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    json_schema: z.strictObject({
      name: FunctionName,
      description: z.string().optional(),
      schema: JsonObject.optional(),
      strict: z.boolean().nullish(),
    }),
  }),
], { error: "must be of type text, json_object or json_schema" });

export const REASONING_EFFORTS = [
  "none",
  "minimal",
  "low",
  "medium",
  "high",
  "xhigh",
  "max",
] as const;

/**
 * Fields OpenAI's chat, Responses and embeddings requests share, held to OpenAI's limits (the
 * Responses and embeddings parsers take them from here).
 */
export const Probability = (max: number) =>
  z.number({ error: "must be a number" }).min(0, "must be at least 0").max(
    max,
    `must be at most ${max}`,
  );
const Penalty = z.number({ error: "must be a number" }).min(-2, "must be at least -2").max(
  2,
  "must be at most 2",
);

/**
 * OpenAI's `user`: the app's end user, whose spend caps apply. Storage keys hold it as UTF-8, where
 * every lone surrogate becomes U+FFFD: such names would share one end user's caps.
 */
export const EndUser = z.string({ error: "must be a string" }).max(
  256,
  "must be at most 256 characters",
).refine((user) => user.isWellFormed(), "must be Unicode text, without a lone surrogate");
export const SafetyIdentifier = z.string({ error: "must be a string" }).max(
  256,
  "must be at most 256 characters",
);
export const PromptCacheKey = z.string({ error: "must be a string" }).max(
  1024,
  "must be at most 1024 characters",
);

/**
 * `metadata` within OpenAI's limits (at most 16 pairs, keys of at most 64 characters, values of
 * at most 512), on chat and Responses alike: OpenAI refuses more after our reservation, and other
 * providers would take what OpenAI's would not.
 */
export const METADATA_LIMITS = { pairs: 16, keyChars: 64, valueChars: 512 } as const;

// Its pairs are counted before any is checked: 300,000 pairs each checked took a second.
export const Metadata = z.unknown().superRefine((metadata, ctx) => {
  const pairs = metadata && typeof metadata === "object" && !Array.isArray(metadata)
    ? Object.keys(metadata).length
    : 0;
  if (pairs > METADATA_LIMITS.pairs) {
    ctx.addIssue({
      code: "custom",
      message: `must hold at most ${METADATA_LIMITS.pairs} key-value pairs (it holds ${pairs})`,
      continue: false,
    });
  }
}).pipe(
  z.record(
    z.string(),
    z.string({ error: "must be a string" }).max(
      METADATA_LIMITS.valueChars,
      `must be at most ${METADATA_LIMITS.valueChars} characters`,
    ),
    { error: "must be an object of strings" },
  ).superRefine((metadata, ctx) => {
    const long = Object.keys(metadata).find((key) => key.length > METADATA_LIMITS.keyChars);
    if (long !== undefined) {
      ctx.addIssue({
        code: "custom",
        message: `keys must be at most ${METADATA_LIMITS.keyChars} characters ('${
          long.slice(0, 20)
        }…' has ${long.length})`,
      });
    }
  }),
);

/** Every field of the body Tollbooth accepts; anything else is a 400 naming it. */
export const ChatRequestSchema = z.strictObject({
  model: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  messages: z.array(Message, { error: "must be an array of messages" }).min(
    1,
    "must contain at least one message",
  ),
  max_tokens: TokenCap.nullish(),
  max_completion_tokens: TokenCap.nullish(),
  stream: z.boolean({ error: "must be a boolean" }).nullish(),
  stream_options: z.strictObject({
    include_usage: z.boolean({ error: "must be a boolean" }).optional(),
    include_obfuscation: z.boolean({ error: "must be a boolean" }).optional(),
  }, { error: "must be an object" }).nullish(),
  n: z.literal(1, "only n = 1 is supported").nullish(),
  tools: z.array(Tool, { error: "must be an array of tools" }).max(128, "at most 128 tools")
    .nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean({ error: "must be a boolean" }).nullish(),
  response_format: ResponseFormat.nullish(),
  reasoning_effort: z.enum(REASONING_EFFORTS, {
    error: `must be one of ${REASONING_EFFORTS.join(", ")}`,
  }).nullish(),
  logprobs: z.boolean({ error: "must be a boolean" }).nullish(),
  top_logprobs: z.number({ error: "must be an integer" }).int("must be an integer").min(0).max(
    20,
    "must be at most 20",
  ).nullish(),
  seed: z.number({ error: "must be an integer" }).int("must be an integer").nullish(),
  stop: z.union([
    z.string(),
    z.array(z.string({ error: "must be a string" })).max(4, "at most 4 stop sequences"),
  ], { error: "must be a string or an array of up to 4 strings" }).nullish(),
  user: EndUser.nullish(),
  metadata: Metadata.nullish(),
  temperature: Probability(2).nullish(),
  top_p: Probability(1).nullish(),
  top_k: z.number({ error: "must be an integer" }).int("must be an integer").min(0).nullish(),
  frequency_penalty: Penalty.nullish(),
  presence_penalty: Penalty.nullish(),
  logit_bias: z.record(
    z.string(),
    z.number({ error: "must be a number" }).min(-100, "must be at least -100").max(
      100,
      "must be at most 100",
    ),
    { error: "must be an object of token ids to numbers" },
  ).nullish(),
  prediction: z.strictObject({
    type: z.literal("content"),
    content: z.union([z.string(), partsOf(TextOnlyPart, "text parts")]),
  }).nullish(),
  service_tier: z.enum(["auto", "default", "flex", "scale", "priority", "fast"], {
    error: "must be one of auto, default, flex, scale, priority, fast",
  }).nullish(),
  store: z.boolean({ error: "must be a boolean" }).nullish(),
  verbosity: z.enum(["low", "medium", "high"], { error: "must be one of low, medium, high" })
    .nullish(),
  prompt_cache_key: PromptCacheKey.nullish(),
  prompt_cache_options: PromptCacheOptions.nullish(),
  prompt_cache_retention: PromptCacheRetention.nullish(),
  safety_identifier: SafetyIdentifier.nullish(),
  modalities: z.array(z.string()).nullish(),
});

type Body = z.infer<typeof ChatRequestSchema>;

/** Fields other than the conversation, the cap and streaming: what providers pass or translate. */
export type ChatParams = Omit<
  Body,
  "model" | "messages" | "max_tokens" | "max_completion_tokens" | "stream" | "n" | "modalities"
>;

export type ToolDefinition = z.infer<typeof Tool>;
export type ResponseFormatSpec = z.infer<typeof ResponseFormat>;

/** What a provider kind does with a field: send it on as is, translate it, drop it, or refuse it. */
export type Support = "pass" | "translate" | "ignore" | "refuse";

type SupportRow = Record<ProviderKind, Support> & { note: string };

/**
 * The allow-list, per provider kind. "ignore" is for hints whose absence cannot change what the
 * client is billed or can parse (a seed, a cache key); a field a client relies on is refused.
 */
export const FIELD_SUPPORT: Record<string, SupportRow> = {
  model: {
    openai: "translate",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note: "renamed to the upstream model",
  },
  messages: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note: "see the message table",
  },
  max_tokens: {
    openai: "translate",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note: "sent as the model's cap field (Responses: max_output_tokens, at least 16); default 2048",
  },
  max_completion_tokens: {
    openai: "translate",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note: "the same cap as max_tokens",
  },
  stream: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note: "",
  },
  stream_options: {
    openai: "translate",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note:
      "include_usage is always asked of the upstream, unless its catalog entry says stream_options: false (the server reports usage unasked)",
  },
  n: {
    openai: "pass",
    openai_responses: "ignore",
    anthropic: "ignore",
    simulator: "ignore",
    note: "only 1",
  },
  tools: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note:
      "function tools; Anthropic input_schema, strict where the model takes structured outputs; Responses flat function tools, strict only when asked",
  },
  tool_choice: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "translate",
    note:
      "Anthropic auto/any/tool/none; allowed_tools: Anthropic, and compatible servers other than OpenAI's own, are sent only the allowed tools (or made to call the one required); Responses in its flat shape",
  },
  parallel_tool_calls: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "translate",
    simulator: "ignore",
    note: "Anthropic disable_parallel_tool_use",
  },
  response_format: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "ignore",
    note:
      "Anthropic: a forced tool whose input is the answer, or output_config.format; Responses text.format",
  },
  reasoning_effort: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "translate",
    simulator: "ignore",
    note:
      "Anthropic thinking: a budget, or adaptive at output_config.effort; Responses reasoning.effort",
  },
  logprobs: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "refuse",
    simulator: "refuse",
    note: "Responses: include message.output_text.logprobs",
  },
  top_logprobs: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "refuse",
    simulator: "refuse",
    note: "",
  },
  seed: {
    openai: "pass",
    openai_responses: "ignore",
    anthropic: "ignore",
    simulator: "ignore",
    note: "",
  },
  stop: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "translate",
    simulator: "ignore",
    note: "Anthropic stop_sequences",
  },
  user: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "translate",
    simulator: "ignore",
    note: "Anthropic metadata.user_id",
  },
  metadata: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "OpenAI's chat API: only with store: true, which it requires",
  },
  temperature: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "translate",
    simulator: "ignore",
    note: "Anthropic allows at most 1",
  },
  top_p: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "pass",
    simulator: "ignore",
    note: "",
  },
  top_k: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "pass",
    simulator: "ignore",
    note: "for compatible servers that take it",
  },
  frequency_penalty: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "refuse",
    simulator: "ignore",
    note: "0 is accepted everywhere",
  },
  presence_penalty: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "refuse",
    simulator: "ignore",
    note: "0 is accepted everywhere",
  },
  logit_bias: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "refuse",
    simulator: "ignore",
    note: "",
  },
  prediction: {
    openai: "pass",
    openai_responses: "refuse",
    anthropic: "refuse",
    simulator: "ignore",
    note: "counted in the reservation as output",
  },
  service_tier: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "auto and default only: other tiers change the price",
  },
  store: {
    openai: "pass",
    openai_responses: "ignore",
    anthropic: "ignore",
    simulator: "ignore",
    note: "Responses: never stored at OpenAI (store: false)",
  },
  verbosity: {
    openai: "pass",
    openai_responses: "translate",
    anthropic: "ignore",
    simulator: "ignore",
    note: "Responses text.verbosity",
  },
  prompt_cache_key: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "",
  },
  prompt_cache_options: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "Anthropic: cache_control marks its breakpoints",
  },
  prompt_cache_retention: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "",
  },
  safety_identifier: {
    openai: "pass",
    openai_responses: "pass",
    anthropic: "ignore",
    simulator: "ignore",
    note: "",
  },
  modalities: {
    openai: "pass",
    openai_responses: "ignore",
    anthropic: "ignore",
    simulator: "ignore",
    note: '["text"] only: audio output is not priced',
  },
};

/** Fields clients may know from OpenAI that Tollbooth refuses, with the reason given in the 400. */
const REFUSED_FIELDS: Record<string, string> = {
  functions: "the deprecated functions API is not supported; send 'tools'",
  function_call: "the deprecated functions API is not supported; send 'tool_choice'",
  audio: "audio output is not priced in the catalog",
  web_search_options: "web search is billed per call and is not priced in the catalog",
};

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  /** Undefined when the client gave no cap; the default is applied against the model. */
  maxTokens: number | undefined;
  /** The cap field the client used, so that a compatible upstream gets the one it was sent. */
  capParam: "max_tokens" | "max_completion_tokens" | null;
  stream: boolean;
  includeUsage: boolean;
  params: ChatParams;
  /**
   * The reasoning summary a Responses request asked for (`reasoning.summary`), which chat has no
   * field for: a provider that gives summaries is asked for this one rather than "auto".
   */
  reasoningSummary?: ReasoningSummary;
}

/** What a Responses request may ask of its reasoning summary (`reasoning.summary`). */
export const ReasoningSummary = z.enum(["auto", "concise", "detailed"]);
export type ReasoningSummary = z.infer<typeof ReasoningSummary>;

/**
 * Values are re-serialised for the upstream, and serialising is recursive: a value nested deeper
 * than any real option (tool schemas run to a dozen levels) is refused up front.
 */
const MAX_NESTING_DEPTH = 64;

/** Depth of a parsed JSON value, measured without recursion and stopping past the limit. */
function nestingDepth(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  let deepest = 0;
  // Containers only: a tuple pushed for each of 1.9 million numbers in a schema took a second.
  const stack: [object, number][] = [[value, 1]];
  const push = (child: unknown, depth: number) => {
    if (child !== null && typeof child === "object") stack.push([child, depth]);
  };
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    deepest = Math.max(deepest, depth);
    if (deepest > MAX_NESTING_DEPTH) return deepest;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) push(v[i], depth + 1);
    } else {
      for (const child of Object.values(v)) push(child, depth + 1);
    }
  }
  return deepest;
}

/** Whether a request marks any breakpoint for Anthropic's 1-hour cache (dearer to write). */
export function asksHourCacheWrites(request: ChatRequest): boolean {
  if (request.params.tools?.some((t) => t.cache_control?.ttl === "1h")) return true;
  return request.messages.some((m) =>
    Array.isArray(m.content) &&
    m.content.some((part) => "cache_control" in part && part.cache_control?.ttl === "1h")
  );
}

/**
 * Anthropic reads a prompt as its tools, then its system prompt, then the messages, and refuses a
 * 1-hour cache breakpoint after a 5-minute one: refused here, before anything is reserved.
 */
function assertCacheTtlOrder(request: ChatRequest) {
  const marks: { ttl: "5m" | "1h"; param: string }[] = [];
  request.params.tools?.forEach((tool, i) => {
    if (tool.cache_control) {
      marks.push({ ttl: tool.cache_control.ttl ?? "5m", param: `tools[${i}].cache_control` });
    }
  });
  const inSystem = (m: ChatMessage) => m.role === "system" || m.role === "developer";
  for (const system of [true, false]) {
    request.messages.forEach((m, i) => {
      if (inSystem(m) !== system || !Array.isArray(m.content)) return;
      m.content.forEach((part, j) => {
        if ("cache_control" in part && part.cache_control) {
          const ttl = part.cache_control.ttl ?? "5m";
          marks.push({ ttl, param: `messages[${i}].content[${j}].cache_control` });
        }
      });
    });
  }
  const fiveMinutes = marks.find((mark) => mark.ttl === "5m");
  const late = fiveMinutes && marks.slice(marks.indexOf(fiveMinutes)).find((m) => m.ttl === "1h");
  if (late) {
    throw invalid(
      `${late.param}.ttl`,
      `a 1-hour cache breakpoint must come before every 5-minute one (ttl '5m' or none), and ${fiveMinutes.param} comes first in the order Anthropic reads a prompt: tools, system and developer messages, then the others`,
    );
  }
}

function invalid(param: string, message: string): ApiError {
  return new ApiError("invalid_parameter", `Invalid value for '${param}': ${message}.`, { param });
}

/** Turns a parsed JSON body into a chat request, or throws the 400 that names the bad field. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new ApiError("invalid_json", "The request body must be a JSON object.");
  }
  const record = body as Record<string, unknown>;
  for (const field of ["model", "messages"]) {
    if (!Object.hasOwn(record, field) || record[field] === undefined || record[field] === null) {
      throw new ApiError("missing_parameter", `Missing required parameter: '${field}'.`, {
        param: field,
      });
    }
  }
  for (const [field, value] of Object.entries(record)) {
    if (Object.hasOwn(REFUSED_FIELDS, field) && value != null) {
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported parameter '${field}': ${REFUSED_FIELDS[field]}.`,
        { param: field },
      );
    }
    if (!Object.hasOwn(FIELD_SUPPORT, field)) {
      throw new ApiError(
        "invalid_parameter",
        `Unrecognized request argument supplied: '${
          field.slice(0, 100)
        }'. The fields Tollbooth accepts are listed at /docs#dialect.`,
        { param: field.slice(0, 100) },
      );
    }
    if (nestingDepth(value) > MAX_NESTING_DEPTH) throw invalid(field, "nested too deeply");
  }
  const parsed = ChatRequestSchema.safeParse(record);
  if (!parsed.success) {
    const issue = innermostIssue(parsed.error.issues[0]);
    const path = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]] : issue.path;
    const param = formatPath(path);
    throw invalid(param, describeIssue(issue));
  }
  const data = parsed.data;
  if (
    data.max_tokens != null && data.max_completion_tokens != null &&
    data.max_tokens !== data.max_completion_tokens
  ) {
    throw new ApiError(
      "invalid_parameter",
      "'max_tokens' and 'max_completion_tokens' disagree; send one of them.",
      { param: "max_completion_tokens" },
    );
  }
  checkConversation(data);
  checkTools(data);
  if (data.top_logprobs != null && data.logprobs !== true) {
    throw invalid("top_logprobs", "requires 'logprobs' to be true");
  }
  if (data.modalities && data.modalities.some((m) => m !== "text")) {
    throw new ApiError(
      "unsupported_parameter",
      "Unsupported value for 'modalities': only [\"text\"]; audio output is not priced in the catalog.",
      { param: "modalities" },
    );
  }
  if (data.service_tier && data.service_tier !== "auto" && data.service_tier !== "default") {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported value for 'service_tier': '${data.service_tier}' is billed at other prices than the catalog's; send auto or default.`,
      { param: "service_tier" },
    );
  }
  const {
    model,
    messages,
    max_tokens,
    max_completion_tokens,
    stream,
    stream_options,
    n: _n,
    modalities: _modalities,
    ...rest
  } = data;
  const params: ChatParams = Object.fromEntries(
    Object.entries(rest).filter(([, v]) => v !== null && v !== undefined),
  );
  if (stream_options) params.stream_options = stream_options;
  return {
    model,
    messages: messages.map(conversationMessage),
    maxTokens: max_tokens ?? max_completion_tokens ?? undefined,
    capParam: max_completion_tokens != null
      ? "max_completion_tokens"
      : max_tokens != null
      ? "max_tokens"
      : null,
    stream: stream ?? false,
    includeUsage: stream_options?.include_usage ?? false,
    params,
  };
}

/**
 * Conversation rules every provider enforces, checked here so that the client learns the exact
 * path: an assistant turn says something or calls tools; each tool call is answered by a tool
 * message right after it, and each tool message answers a call of that turn; images are readable.
 */
function checkConversation(data: Body) {
  let open: { index: number; ids: Set<string> } | null = null;
  const refuseUnanswered = () => {
    if (!open || open.ids.size === 0) return;
    throw invalid(
      `messages[${open.index}].tool_calls`,
      `the tool call '${
        [...open.ids][0]
      }' has no answer: each tool call must be followed by a tool message with its tool_call_id`,
    );
  };
  data.messages.forEach((m, i) => {
    if (m.role !== "tool") refuseUnanswered();
    if (m.role === "assistant") {
      const calls = m.tool_calls ?? [];
      const hasContent = typeof m.content === "string" ? true : Array.isArray(m.content);
      if (!hasContent && calls.length === 0 && !m.refusal) {
        throw invalid(`messages[${i}].content`, "an assistant message needs content or tool_calls");
      }
      const ids = new Set<string>();
      calls.forEach((call, j) => {
        if (ids.has(call.id)) {
          throw invalid(`messages[${i}].tool_calls[${j}].id`, "repeats the id of another call");
        }
        ids.add(call.id);
      });
      open = { index: i, ids };
    } else if (m.role === "tool") {
      if (!open || !open.ids.has(m.tool_call_id)) {
        throw invalid(
          `messages[${i}].tool_call_id`,
          "must answer a tool call of the assistant message just before the tool messages",
        );
      }
      open.ids.delete(m.tool_call_id);
    } else {
      open = null;
    }
    const parts = mediaPartsOf(m);
    checkFiles(parts, i);
    parts.forEach((part, j) => {
      if (part.type !== "image_url" || !part.image_url.url.startsWith("data:")) return;
      try {
        readImageSize(part.image_url.url);
      } catch (error) {
        throw invalid(`messages[${i}].content[${j}].image_url.url`, (error as Error).message);
      }
    });
  });
  // OpenAI and Anthropic both refuse calls left unanswered when the conversation ends with them.
  refuseUnanswered();
}

/** A PDF's bytes as a data URL: what `file_data` must be (its first bytes are `%PDF-`). */
const PDF_DATA_URL = /^data:application\/pdf;base64,(JVBERi0[A-Za-z0-9+/]*={0,2})$/;

/**
 * Whether base64 of the alphabet decodes (as `atob` reads it): unpadded, any length but one more
 * than a multiple of four; padded, a multiple of four.
 */
function decodable(base64: string): boolean {
  const pads = base64.endsWith("==") ? 2 : base64.endsWith("=") ? 1 : 0;
  const digits = base64.length - pads;
  return pads === 0 ? digits % 4 !== 1 : base64.length % 4 === 0 && digits % 4 !== 1;
}

/** The base64 of a file part's PDF; checkFiles has made sure there is one. */
export function pdfBase64(part: FileContentPart): string {
  return PDF_DATA_URL.exec(part.file.file_data!)![1];
}

/**
 * A file part is a PDF given by its bytes: Tollbooth has no files endpoint for an id to name, and
 * other types' tokens are not counted by any provider it serves.
 */
function checkFiles(content: readonly (UserContentPart | ToolContentPart)[], i: number) {
  content.forEach((part, j) => {
    if (part.type !== "file") return;
    const path = `messages[${i}].content[${j}].file`;
    if (part.file.file_id !== undefined) {
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported parameter '${path}.file_id': there is no files endpoint here; send the PDF's bytes as file_data (a data URL).`,
        { param: `${path}.file_id` },
      );
    }
    if (part.file.file_data === undefined) {
      throw new ApiError(
        "missing_parameter",
        `Missing required parameter: '${path}.file_data'.`,
        { param: `${path}.file_data` },
      );
    }
    const base64 = PDF_DATA_URL.exec(part.file.file_data)?.[1];
    if (base64 === undefined || !decodable(base64)) {
      throw invalid(
        `${path}.file_data`,
        "must be a PDF as a data URL (data:application/pdf;base64,…)",
      );
    }
  });
}

function checkTools(data: Body) {
  const names = new Set<string>();
  data.tools?.forEach((tool, i) => {
    if (names.has(tool.function.name)) {
      throw invalid(`tools[${i}].function.name`, "repeats the name of another tool");
    }
    names.add(tool.function.name);
  });
  // OpenAI refuses it without tools, after our reservation: refused here, in OpenAI's words.
  if (data.parallel_tool_calls != null && names.size === 0) {
    throw invalid(
      "parallel_tool_calls",
      "'parallel_tool_calls' is only allowed when 'tools' are specified",
    );
  }
  const choice = data.tool_choice;
  if (choice && choice !== "none" && choice !== "auto" && names.size === 0) {
    throw invalid("tool_choice", "needs 'tools' to choose from");
  }
  if (choice && typeof choice === "object" && choice.type === "function") {
    if (!names.has(choice.function.name)) {
      throw invalid("tool_choice.function.name", "names no tool of 'tools'");
    }
  }
  // OpenAI's own refusal of an undeclared name would come after our reservation.
  if (choice && typeof choice === "object" && choice.type === "allowed_tools") {
    choice.allowed_tools.tools.forEach((tool, i) => {
      if (!names.has(tool.function.name)) {
        throw invalid(
          `tool_choice.allowed_tools.tools[${i}].function.name`,
          "names no tool of 'tools'",
        );
      }
    });
  }
}

/**
 * The least `max_output_tokens` OpenAI's Responses API takes: a smaller cap is refused before the
 * reservation rather than raised, as the hold is priced on the client's cap.
 */
const RESPONSES_MIN_OUTPUT_TOKENS = 16;

/**
 * The kinds whose provider counts a PDF before the call (Anthropic's count_tokens, OpenAI's input
 * token count of a Responses body, the simulator's own bill): nothing else bounds what one bills,
 * as each page is billed as its text and as an image of it. OpenAI's chat API has no count.
 */
export const COUNTED_DOCUMENT_KINDS: ReadonlySet<ProviderKind> = new Set([
  "anthropic",
  "openai_responses",
  "simulator",
]);

/** Each kind's upstream API, as a refusal names it. */
const KIND_API: Record<ProviderKind, string> = {
  openai: "OpenAI's chat API (which has no count)",
  openai_responses: "OpenAI's Responses API",
  anthropic: "Anthropic's Messages API",
  simulator: "the built-in simulator",
};

/** A user's or a tool's file parts (PDFs); no other role holds any. */
export function filePartsOf(m: ChatMessage): FileContentPart[] {
  return mediaPartsOf(m).filter((part) => part.type === "file");
}

/** Whether a message holds a file part: a scan, as every request's bound asks it. */
function holdsFile(m: ChatMessage): boolean {
  return mediaPartsOf(m).some((part) => part.type === "file");
}

/** The request without its file parts (PDFs): what a route that takes none would be asked. */
export function withoutDocuments(request: ChatRequest): ChatRequest {
  const messages = request.messages.map((m) =>
    holdsFile(m)
      ? { ...m, content: mediaPartsOf(m).filter((part) => part.type !== "file") } as ChatMessage
      : m
  );
  return { ...request, messages };
}

/** The path of a request's first file part (`messages[2].content[1]`), for a refusal of it. */
export function firstFilePath(request: ChatRequest): string {
  for (const [i, m] of request.messages.entries()) {
    const j = mediaPartsOf(m).findIndex((part) => part.type === "file");
    if (j !== -1) return `messages[${i}].content[${j}]`;
  }
  return "messages";
}

/** Whether a request holds a file part (a PDF): only its provider's count bounds its input. */
export function hasDocuments(request: ChatRequest): boolean {
  return request.messages.some(holdsFile);
}

/** How a refusal names the model the client asked for, as against one of its fallbacks. */
const PRIMARY = "this model";

/**
 * Refuses what the provider kinds serving the model cannot do, with the field's path: an allow-list
 * per kind rather than passing whatever came.
 */
export function assertSupported(
  request: ChatRequest,
  routes: readonly {
    provider: { kind: ProviderKind };
    upstreamModel: string;
    claude: ClaudeRules | null;
  }[],
  maxTokens: number,
) {
  const p = request.params;
  routes.forEach((route, i) => {
    // A refusal by a fallback names it: the model the client asked for may take the request.
    const model = i === 0 ? PRIMARY : `this model's fallback ${route.upstreamModel}`;
    if (route.claude) {
      assertClaudeRules(request, maxTokens, route.claude, route.upstreamModel, model);
    }
  });
  for (const kind of new Set(routes.map((r) => r.provider.kind))) {
    if (kind === "anthropic") assertAnthropicCan(request);
    if (kind === "openai_responses" && maxTokens < RESPONSES_MIN_OUTPUT_TOKENS) {
      throw new ApiError(
        "invalid_parameter",
        `Invalid value for 'max_tokens': ${maxTokens} is below ${RESPONSES_MIN_OUTPUT_TOKENS}, the least output cap OpenAI's Responses API takes (this model is served through it).`,
        { param: request.capParam ?? "max_tokens" },
      );
    }
    for (const [field, value] of Object.entries(p)) {
      if (FIELD_SUPPORT[field]?.[kind] !== "refuse") continue;
      if ((field === "frequency_penalty" || field === "presence_penalty") && value === 0) continue;
      if (field === "logprobs" && value === false) continue;
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported parameter '${field}': models served by the ${kind} provider kind cannot honour it.`,
        { param: field },
      );
    }
    request.messages.forEach((m, i) => {
      mediaPartsOf(m).forEach((part, j) => {
        if (part.type === "input_audio") {
          throw new ApiError(
            "unsupported_parameter",
            `Unsupported content part 'input_audio': its tokens cannot be bounded before the call (the reservation must cover them), so it is not accepted; send text or images.`,
            { param: `messages[${i}].content[${j}].type` },
          );
        }
        if (part.type === "file" && !COUNTED_DOCUMENT_KINDS.has(kind)) {
          throw new ApiError(
            "unsupported_parameter",
            `Unsupported content part 'file' on this model: a PDF is taken only where its provider counts it before the call, as the reservation must cover it: on models served through Anthropic's Messages API, OpenAI's Responses API or the built-in simulator, not through ${
              KIND_API[kind]
            }.`,
            { param: `messages[${i}].content[${j}].type` },
          );
        }
      });
    });
  }
}

/**
 * Whether a Claude model thinks for this request. A model that thinks by default does unless
 * `reasoning_effort` is `none`; one that thinks on request does when it is set to more. A budget
 * (Claude 4.6 and earlier) is sent in a turn that continues a tool call, or a prefill, only with
 * the thinking block the model signed, which the client sends back as the assistant message's
 * `reasoning_details`: tool results after the last assistant message continue its tool calls even
 * when user messages follow them, as they are all one user turn upstream. Adaptive thinking has no
 * such rule (a turn may not think at all), so it thinks there too. A budget is not sent beside a
 * `tool_choice` that forces a tool either: Anthropic refuses the two together, while OpenAI's
 * reasoning models take them, so such a turn runs without thinking, as an adaptive model's does.
 */
export function claudeThinks(
  request: ChatRequest,
  rules: ClaudeRules,
  upstreamModel: string,
): boolean {
  const effort = request.params.reasoning_effort;
  switch (rules.thinking) {
    case "always":
      return true;
    case "adaptive_by_default":
      return effort !== "none";
    case "adaptive":
      return effort !== undefined && effort !== "none";
  }
  if (!effort || effort === "none") return false;
  if (forcesToolCall(request.params.tool_choice)) return false;
  const messages = request.messages;
  // A prefill is a final assistant message too: Claude takes it with a budget only when it opens
  // with the thinking block the model signed (an answer cut at its cap, sent back to go on).
  const final = lastSaying(messages);
  if (final >= 0 && messages[final].role === "assistant") {
    const prefill = messages[final] as Extract<ChatMessage, { role: "assistant" }>;
    return claudeThinkingBlocks(prefill.reasoning_details, upstreamModel).length > 0;
  }
  const lastAssistant = messages.findLastIndex((m) => m.role === "assistant");
  if (lastAssistant < 0 || !messages.slice(lastAssistant + 1).some((m) => m.role === "tool")) {
    return true;
  }
  const last = messages[lastAssistant] as Extract<ChatMessage, { role: "assistant" }>;
  return claudeThinkingBlocks(last.reasoning_details, upstreamModel).length > 0;
}

/**
 * What a Claude route's model cannot take although the Messages format can carry it (its rules:
 * claude_rules.ts); `model` names the route in a refusal.
 */
function assertClaudeRules(
  request: ChatRequest,
  maxTokens: number,
  rules: ClaudeRules,
  upstreamModel: string,
  model: string,
) {
  const effort = request.params.reasoning_effort;
  // Refusals worded for Claude at large name the fallback when it is a fallback's.
  const whose = model === PRIMARY ? "" : ` (${model})`;
  if (
    rules.thinking === "budget" && effort && effort !== "none" &&
    maxTokens <= ANTHROPIC_MIN_THINKING_BUDGET
  ) {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported value for 'reasoning_effort' with an output cap of ${maxTokens}: Anthropic's least thinking budget is ${ANTHROPIC_MIN_THINKING_BUDGET} tokens and must stay below the cap${whose}; raise max_tokens.`,
      { param: "reasoning_effort" },
    );
  }
  // A model that takes sampling parameters takes only some beside thinking, whichever kind.
  if (rules.sampling && claudeThinks(request, rules, upstreamModel)) {
    assertThinkingCan(request, rules.thinking === "budget", whose);
  }
  if (rules.thinking === "always" && effort === "none") {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported value: 'reasoning_effort' does not support 'none' with ${model}: it always thinks. Send 'minimal' or 'low' for the least thinking.`,
      { param: "reasoning_effort" },
    );
  }
  if (!rules.sampling) assertDefaultSampling(request, model);
  if (!rules.forcedToolChoice) {
    if (forcesToolCall(request.params.tool_choice)) {
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported value: 'tool_choice' cannot force a tool call with ${model}. Send 'auto' or 'none'.`,
        { param: "tool_choice" },
      );
    }
  }
  // Anthropic's output format (a strict schema where no tool can be forced) takes any root; the
  // answer tool standing in for it otherwise takes an object only, refused after the reservation.
  const format = request.params.response_format;
  if (format?.type === "json_schema" && (rules.forcedToolChoice || !strictSchema(request))) {
    assertObjectRoot(
      format.json_schema.schema,
      "response_format.json_schema.schema.type",
      `${model} answers in a JSON schema's shape through a tool, whose input is an object`,
    );
  }
  // An output format (a strict schema where no tool can be forced) takes no prefill either.
  if (!rules.prefill || (!rules.forcedToolChoice && strictSchema(request))) {
    const last = lastSaying(request.messages);
    if (last >= 0 && request.messages[last].role === "assistant") {
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported value for 'messages[${last}]': the conversation ends with an assistant message, which Claude would take as the start of its answer (a prefill), and ${model} takes none. End with a user or tool message.`,
        { param: `messages[${last}]` },
      );
    }
  }
}

/** What a Messages request cannot carry although the compatible format can, whatever the model. */
function assertAnthropicCan(request: ChatRequest) {
  assertCacheTtlOrder(request);
  request.params.tools?.forEach((tool, i) =>
    assertObjectRoot(
      tool.function.parameters,
      `tools[${i}].function.parameters.type`,
      "a tool's input is an object on a model served by the anthropic provider kind",
    )
  );
  // Blank messages are not sent (Anthropic refuses them), so what is left must still ask something.
  const asks = request.messages.some((m) =>
    m.role === "tool" || (m.role === "user" && userMessageSaysSomething(m))
  );
  if (!asks) {
    const blank = request.messages.findIndex((m) => m.role === "user");
    throw blank === -1
      ? invalid(
        "messages",
        "a model served by the anthropic provider kind needs a user message besides the system prompt",
      )
      : invalid(
        `messages[${blank}].content`,
        "is empty; a model served by the anthropic provider kind needs a user message with text or an image",
      );
  }
  request.messages.forEach((m, i) => {
    if (m.role !== "assistant") return;
    m.tool_calls?.forEach((call, j) => {
      const args = call.function.arguments;
      if (args.trim() === "") return;
      let value: unknown;
      try {
        value = JSON.parse(args);
      } catch {
        value = undefined;
      }
      if (!value || typeof value !== "object" || Array.isArray(value)) {
        throw invalid(
          `messages[${i}].tool_calls[${j}].function.arguments`,
          "must be a JSON object for a model served by the anthropic provider kind",
        );
      }
    });
  });
}

/**
 * Anthropic takes a tool's `input_schema` only with `type: "object"` and answers any other type
 * with a 400 after the reservation; a schema without a type is sent as an object's.
 */
function assertObjectRoot(schema: unknown, param: string, why: string) {
  if (!schema || typeof schema !== "object" || !("type" in schema)) return;
  if (schema.type === "object") return;
  throw invalid(param, `must be "object": ${why}`);
}

/**
 * Extended thinking's limits (Anthropic's "Extended thinking" docs), which Anthropic answers with a
 * 400 after the reservation: refused before it, naming the field.
 */
function assertThinkingCan(request: ChatRequest, budget: boolean, whose: string) {
  const p = request.params;
  const refuse = (param: string, rule: string) =>
    new ApiError(
      "unsupported_parameter",
      `Unsupported value for '${param}': ${rule} ${
        budget ? "when reasoning_effort is set (Claude's extended thinking)" : "while Claude thinks"
      }${whose}.`,
      { param },
    );
  // Above 1 is sent as 1 (Anthropic's range ends there), which thinking takes.
  if (typeof p.temperature === "number" && p.temperature < 1) {
    throw refuse("temperature", "Claude models accept only 1");
  }
  if (typeof p.top_p === "number" && p.top_p < 0.95) {
    throw refuse("top_p", "Claude models accept only 0.95 to 1");
  }
  if (typeof p.top_k === "number") throw refuse("top_k", "Claude models accept none");
}

/**
 * Claude models from Opus 4.7 on take no sampling parameters (Sonnet 5 their defaults only): a
 * default value is left out upstream (the converter), any other refused here, in OpenAI's words for
 * its reasoning models, which clients already know.
 */
function assertDefaultSampling(request: ChatRequest, model: string) {
  const p = request.params;
  // Above 1 is sent as 1 (Anthropic's range ends there): the default.
  if (typeof p.temperature === "number" && p.temperature < 1) {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported value: 'temperature' does not support ${p.temperature} with ${model}. Only the default (1) value is supported.`,
      { param: "temperature" },
    );
  }
  if (typeof p.top_p === "number" && p.top_p < 1) {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported value: 'top_p' does not support ${p.top_p} with ${model}. Only the default (1) value is supported.`,
      { param: "top_p" },
    );
  }
  if (typeof p.top_k === "number") {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported parameter: 'top_k' is not supported with ${model}.`,
      { param: "top_k" },
    );
  }
}

/** Anthropic's least thinking budget, which must stay below max_tokens. */
const ANTHROPIC_MIN_THINKING_BUDGET = 1024;

/**
 * For a value that matched no branch of a union (content as a string or parts), the issue of the
 * branch that got furthest, with its full path: the client learns which part is wrong, and why.
 */
export function innermostIssue(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  if (issue.code !== "invalid_union" || issue.errors.length === 0) return issue;
  let best: z.core.$ZodIssue | null = null;
  for (const branch of issue.errors) {
    const first = branch[0];
    if (first && first.path.length > (best?.path.length ?? 0)) best = first;
  }
  if (!best) return issue;
  return innermostIssue({ ...best, path: [...issue.path, ...best.path] } as z.core.$ZodIssue);
}

/** The message of a schema issue, in the words of the field rather than of the validator. */
export function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === "unrecognized_keys") return "is not a field Tollbooth accepts here";
  if (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) {
    return "is required";
  }
  return issue.message;
}

/** A field's path as OpenAI writes it in `param`: `messages[2].content[0].image_url`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    out += typeof part === "number" ? `[${part}]` : out ? `.${String(part)}` : String(part);
  }
  return out || "(body)";
}

/** The text of a message's content, parts joined; images and other parts contribute nothing. */
export function contentText(content: ChatMessage["content"]): string {
  if (typeof content === "string") return content;
  if (!content) return "";
  let out = "";
  for (const part of content) {
    if (part.type === "text") out += part.text;
    else if (part.type === "refusal") out += part.refusal;
  }
  return out;
}

/** Text of only whitespace, which Anthropic refuses as a text block and no model can read. */
export function isBlank(text: string): boolean {
  return text.trim() === "";
}

/**
 * The index of the last message sent to Claude (system and developer messages and blank ones are
 * not), or -1.
 */
function lastSaying(messages: readonly ChatMessage[]): number {
  return messages.findLastIndex((m) => {
    switch (m.role) {
      case "tool":
        return true;
      case "user":
        return userMessageSaysSomething(m);
      case "assistant":
        return assistantMessageSaysSomething(m);
      default:
        return false;
    }
  });
}

/** Whether an assistant message has anything to send: text, a refusal, or tool calls. */
export function assistantMessageSaysSomething(
  m: Extract<ChatMessage, { role: "assistant" }>,
): boolean {
  return (m.tool_calls?.length ?? 0) > 0 || !isBlank(contentText(m.content)) ||
    (!!m.refusal && !isBlank(m.refusal));
}

/** The schema of a strict `json_schema` response format, or null. */
export function strictSchema(request: ChatRequest): Record<string, unknown> | null {
  const format = request.params.response_format;
  if (format?.type !== "json_schema" || format.json_schema.strict !== true) return null;
  return format.json_schema.schema ?? null;
}

/** A message's images: a user's, or a tool's (what it saw); no other role holds any. */
export function imagePartsOf(m: ChatMessage): ImageContentPart[] {
  return mediaPartsOf(m).filter((part) => part.type === "image_url");
}

/** A user's or a tool's content parts, the only ones that hold images or files; else none. */
export function mediaPartsOf(m: ChatMessage): (UserContentPart | ToolContentPart)[] {
  if ((m.role !== "user" && m.role !== "tool") || typeof m.content === "string") return [];
  return m.content;
}

/** Whether a user message gives the model anything: non-blank text, or an image (or file). */
export function userMessageSaysSomething(m: Extract<ChatMessage, { role: "user" }>): boolean {
  if (typeof m.content === "string") return !isBlank(m.content);
  return m.content.some((part) => part.type !== "text" || !isBlank(part.text));
}
