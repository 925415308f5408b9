/**
 * The body of `POST /v1/responses` (OpenAI's Responses API), validated strictly and turned into
 * a chat-completions body of the dialect `parseChatRequest` accepts, so that one paid path serves
 * both endpoints and every provider kind the chat dialect translates to.
 *
 * Pure: stored items (`item_reference`) and the conversation of `previous_response_id` are looked
 * up by the caller and handed in.
 */
import { z } from "zod";
import { ApiError } from "@/lib/core/mod.ts";
import {
  CacheControl,
  describeIssue,
  EndUser,
  formatPath,
  innermostIssue,
  MessagePhase,
  Metadata,
  Probability,
  PromptCacheBreakpoint,
  PromptCacheKey,
  PromptCacheOptions,
  PromptCacheRetention,
  REASONING_EFFORTS,
  ReasoningSummary,
  SafetyIdentifier,
  withoutPartFields,
} from "../chat_request.ts";
import { detailsOfEncryptedContent } from "../reasoning_details.ts";
import { type ChatTurn, chatTurns, type ConversationItem } from "./turns.ts";

// Claude's breakpoint (`cache_control`) beside OpenAI's, as on chat's parts: a Claude route is
// otherwise never asked to cache, and a long prompt pays its whole input price every turn.
const InputText = z.strictObject({
  type: z.literal("input_text"),
  text: z.string(),
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
});
const InputImage = z.strictObject({
  type: z.literal("input_image"),
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
  image_url: z.string({ error: "must be an https URL or a data URL" }).optional(),
  file_id: z.string().nullish(),
  // Not "original": the chat path's image bound and the providers it translates to know no such
  // detail, so its tokens could not be bounded before the call. Null is the default (auto).
  detail: z.enum(["auto", "low", "high"], {
    error: "must be one of auto, low, high ('original' is not supported)",
  }).nullish(),
});
/** A file in a user message or a tool's output: a PDF's bytes as `file_data` (fileFieldsOf). */
const InputFile = z.looseObject({
  type: z.literal("input_file"),
  file_data: z.string({ error: "must be a string" }).optional(),
  filename: z.string({ error: "must be a string" }).optional(),
  cache_control: CacheControl.optional(),
  prompt_cache_breakpoint: PromptCacheBreakpoint.optional(),
});
/** What a client pushes back of an earlier answer: its text (annotations are dropped). */
const OutputText = z.looseObject({ type: z.literal("output_text"), text: z.string() });
const Refusal = z.looseObject({ type: z.literal("refusal"), refusal: z.string() });

const ContentPart = z.discriminatedUnion("type", [
  InputText,
  InputImage,
  InputFile,
  OutputText,
  Refusal,
], { error: "must be a part of type input_text, input_image, input_file, output_text or refusal" });

/** A tool's output may show what it saw (a screenshot, a chart, a PDF it fetched). */
const ToolOutputPart = z.discriminatedUnion("type", [InputText, InputImage, InputFile], {
  error: "must be a part of type input_text, input_image or input_file",
});

const MessageItem = z.strictObject({
  type: z.literal("message").optional(),
  role: z.enum(["user", "assistant", "system", "developer"], {
    error: "must be one of user, assistant, system, developer",
  }),
  content: z.union([z.string(), z.array(ContentPart).min(1, "must not be empty")], {
    error: "must be a string or an array of content parts",
  }),
  id: z.string().nullish(),
  status: z.string().nullish(),
  // GPT-5.3-codex on label an assistant message as a preamble or the answer, and do worse when a
  // later turn drops the label: it goes back with the message to the Responses kind.
  phase: MessagePhase.nullish(),
});

const FunctionCallItem = z.strictObject({
  type: z.literal("function_call"),
  call_id: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  name: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  arguments: z.string({ error: "must be a JSON string" }),
  id: z.string().nullish(),
  status: z.string().nullish(),
  // The openai SDK's parse helpers add the arguments parsed to the output they return, which a
  // client pushes back as input: accepted, never forwarded.
  parsed_arguments: z.unknown().optional(),
  // What the server attached to the call (Gemini 3's thought signature), as Tollbooth answered it:
  // the chat tool call's own, sent back with it.
  extra_content: z.record(z.string(), z.unknown(), { error: "must be an object" }).optional(),
});

const FunctionCallOutputItem = z.strictObject({
  type: z.literal("function_call_output"),
  call_id: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  output: z.union([z.string(), z.array(ToolOutputPart).min(1, "must not be an empty array")], {
    error: "must be a string or an array of input_text, input_image or input_file parts",
  }),
  id: z.string().nullish(),
  status: z.string().nullish(),
});

/**
 * Ids Tollbooth gives are far shorter; a longer one names nothing (and is no KV key: KV refuses
 * keys over 2 KB).
 */
const MAX_ID_LENGTH = 256;

const StoredId = z.string({ error: "must be a string" }).min(1, "must not be empty")
  .max(MAX_ID_LENGTH, `must be at most ${MAX_ID_LENGTH} characters`);

/** The openai SDK's own types leave `type` out (`type?: 'item_reference' | null`). */
const ItemReference = z.strictObject({
  type: z.literal("item_reference").nullish(),
  id: StoredId,
});

/**
 * Reasoning items carry the provider's hidden state in `encrypted_content`: Claude's thinking, as
 * Tollbooth answered it, goes back to Claude with the assistant turn after it; any other is
 * dropped, as no chat provider can take it back.
 */
const ReasoningItem = z.looseObject({
  type: z.literal("reasoning"),
  encrypted_content: z.string({ error: "must be a string" }).nullish(),
});

export const InputItem = z.union([
  MessageItem,
  FunctionCallItem,
  FunctionCallOutputItem,
  ItemReference,
  ReasoningItem,
]);

export type ResponseInputItem = z.infer<typeof InputItem>;

const FunctionTool = z.strictObject({
  type: z.literal("function", "must be 'function' (the only tool type)"),
  name: z.string({ error: "must be a string" }),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  // Told apart by type, so that an allowed_tools choice's own fields (mode, tools, both at the
  // depth of a function's name) are named when wrong, not its type. A tool_choice of another type
  // (custom, MCP, a built-in tool) names a tool no request here has.
  z.discriminatedUnion("type", [
    z.strictObject({ type: z.literal("function"), name: z.string() }),
    // The chat dialect's allowed tools in the Responses API's flat shape (the chat request checks
    // the names and the mode's values, see responses.ts for their paths).
    z.strictObject({
      type: z.literal("allowed_tools"),
      mode: z.enum(["auto", "required"], { error: "must be one of auto, required" }),
      tools: z.array(
        z.strictObject({
          type: z.literal("function", "must be 'function' (the only tool type)"),
          name: z.string({ error: "must be a string" }),
        }),
        { error: "must be an array of {type: 'function', name}" },
      ),
    }),
  ], {
    error:
      "must be 'function' or 'allowed_tools': only function tools are served (no custom, MCP or built-in tools)",
  }),
], {
  error:
    "must be none, auto, required, {type: 'function', name} or {type: 'allowed_tools', mode, tools}",
});

const TextFormat = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    name: z.string(),
    schema: z.record(z.string(), z.unknown()),
    description: z.string().nullish(),
    strict: z.boolean().nullish(),
  }),
], { error: "must be of type text, json_object or json_schema" });

/**
 * What `include` may ask for, as OpenAI lists it. Only the text's logprobs change an answer here:
 * reasoning comes with its encrypted content whenever a model gives one, and the rest are outputs
 * of OpenAI's built-in tools and stored inputs, which no answer here has.
 */
export const RESPONSE_INCLUDABLES = [
  "message.output_text.logprobs",
  "reasoning.encrypted_content",
  "message.input_image.image_url",
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
] as const;

export const ResponsesRequestSchema = z.strictObject({
  model: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  input: z.union([z.string(), z.array(z.unknown()).min(1, "must not be empty")], {
    error: "must be a string or an array of input items",
  }),
  instructions: z.string({ error: "must be a string" }).nullish(),
  tools: z.array(FunctionTool, { error: "must be an array of function tools" }).nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean({ error: "must be a boolean" }).nullish(),
  max_output_tokens: z.number({ error: "must be an integer" }).int("must be an integer")
    .min(16, "must be at least 16").nullish(),
  text: z.strictObject({
    format: TextFormat.optional(),
    verbosity: z.enum(["low", "medium", "high"]).nullish(),
  }).nullish(),
  reasoning: z.strictObject({
    effort: z.enum(REASONING_EFFORTS, {
      error: `must be one of ${REASONING_EFFORTS.join(", ")}`,
    }).nullish(),
    summary: ReasoningSummary.nullish(),
    generate_summary: ReasoningSummary.nullish(),
    // GPT-5.6's pro mode and reasoning carried across turns are the Responses API's own; the
    // chat-completions call every answer is made of has neither.
    mode: z.literal("standard", "only 'standard' is supported").nullish(),
    context: z.enum(["auto", "current_turn"], {
      error: "must be auto or current_turn: earlier turns' reasoning is not kept",
    }).nullish(),
  }).nullish(),
  stream: z.boolean({ error: "must be a boolean" }).nullish(),
  stream_options: z.strictObject({ include_obfuscation: z.boolean().optional() }).nullish(),
  store: z.boolean({ error: "must be a boolean" }).nullish(),
  previous_response_id: StoredId.nullish(),
  temperature: Probability(2).nullish(),
  top_p: Probability(1).nullish(),
  metadata: Metadata.nullish(),
  user: EndUser.nullish(),
  safety_identifier: SafetyIdentifier.nullish(),
  prompt_cache_key: PromptCacheKey.nullish(),
  prompt_cache_options: PromptCacheOptions.nullish(),
  prompt_cache_retention: PromptCacheRetention.nullish(),
  service_tier: z.string().nullish(),
  truncation: z.literal("disabled", "only 'disabled' is supported").nullish(),
  include: z.array(
    z.enum(RESPONSE_INCLUDABLES, { error: `must be one of ${RESPONSE_INCLUDABLES.join(", ")}` }),
    { error: "must be an array" },
  ).nullish(),
  top_logprobs: z.number({ error: "must be an integer" }).int("must be an integer")
    .min(0, "must be at least 0").max(20, "must be at most 20").nullish(),
  background: z.literal(false, "background responses are not supported").nullish(),
  // It bounds the built-in tools' calls, which OpenAI runs itself; the function tools served here
  // are called by the client, so it has nothing to bound.
  max_tool_calls: z.number({ error: "must be an integer" }).int("must be an integer")
    .min(1, "must be at least 1").nullish(),
});

export type ResponsesBody = z.infer<typeof ResponsesRequestSchema>;

/** What the caller looked up: the earlier conversation and the stored items referenced. */
export interface StoredContext {
  /** Chat messages of `previous_response_id`'s conversation, its answer included. */
  previous: Record<string, unknown>[];
  /** Stored output items by id, for `item_reference`. */
  items: Map<string, ResponseInputItem>;
}

export interface ConvertedRequest {
  body: ResponsesBody;
  /** A body for `parseChatRequest`. */
  chat: Record<string, unknown>;
  /** The conversation as sent to the model, without `instructions`, for storing. */
  conversation: Record<string, unknown>[];
  /**
   * A chat path (`messages[3].content[0].image_url.url`) as the Responses body names the same
   * thing (`input[1].content[0].image_url`), or as near as it is exact (`input[1]`, `input`).
   */
  inputPath(chatPath: string): string;
}

/** Where a chat message came from, for naming its fields in an error. */
type Origin =
  | { from: "instructions" }
  | { from: "previous" }
  | {
    from: "input";
    /** The input item of the message, or of its text (null for a turn of calls alone). */
    item: number | null;
    kind: "message" | "function_call_output" | "function_calls";
    /** The item stood behind an item_reference: its fields are not in the request. */
    referenced: boolean;
    /** The input item of each of the turn's tool calls, in order. */
    calls: { item: number; referenced: boolean }[];
  };

/** Validates the body, or throws the 400 naming the field by its Responses path. */
/** The reasoning summary the request asks for (`generate_summary` is its older name), if any. */
export function askedSummary(body: ResponsesBody): ReasoningSummary | null {
  return body.reasoning?.summary ?? body.reasoning?.generate_summary ?? null;
}

export function parseResponsesBody(raw: unknown): ResponsesBody {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new ApiError("invalid_json", "The request body must be a JSON object.");
  }
  const record = raw as Record<string, unknown>;
  for (const field of ["model", "input"]) {
    if (record[field] === undefined || record[field] === null) {
      throw new ApiError("missing_parameter", `Missing required parameter: '${field}'.`, {
        param: field,
      });
    }
  }
  const parsed = ResponsesRequestSchema.safeParse(record);
  if (!parsed.success) throw fromIssue(parsed.error.issues[0]);
  return parsed.data;
}

/**
 * At most this many `item_reference` items, from at most MAX_REFERENCED_RESPONSES stored responses:
 * each response is read whole, before anything is reserved, so references must not be free work.
 */
export const MAX_ITEM_REFERENCES = 256;
export const MAX_REFERENCED_RESPONSES = 32;

/**
 * The item ids `input` references, to be looked up before `toChatRequest`. Every reference counts
 * against the limit, a repeated one too: each is sent, and counted, again.
 */
export function referencedItems(body: ResponsesBody): string[] {
  return [...new Set(referencesOf(body))];
}

/** Each reference's id, in order, repeats included: read once per body, for both checks. */
const references = new WeakMap<ResponsesBody, string[]>();

function referencesOf(body: ResponsesBody): string[] {
  let ids = references.get(body);
  if (ids) return ids;
  ids = [];
  for (const item of typeof body.input === "string" ? [] : body.input) {
    const ref = ItemReference.safeParse(item);
    if (!ref.success) continue;
    if (ids.push(ref.data.id) > MAX_ITEM_REFERENCES) {
      throw invalid("input", `references stored items more than ${MAX_ITEM_REFERENCES} times`);
    }
  }
  references.set(body, ids);
  return ids;
}

/**
 * The referenced items' size in all (their JSON), each as often as it is referenced: at most
 * `max`. A 2 MB item referenced a hundred times was 200 MB of text to count.
 */
export function assertReferencedSize(
  body: ResponsesBody,
  items: Map<string, unknown>,
  max: number,
) {
  const sizes = new Map<string, number>();
  let total = 0;
  for (const id of referencesOf(body)) {
    if (!items.has(id)) continue;
    let size = sizes.get(id);
    if (size === undefined) {
      size = JSON.stringify(items.get(id)).length;
      sizes.set(id, size);
    }
    total += size;
    if (total > max) {
      throw invalid("input", `references more than ${max} characters of stored items in all`);
    }
  }
}

/**
 * A stored message without the cache breakpoints its turn had: each turn marks its own newest input
 * (Anthropic's pattern for a conversation), and a chain of turns would otherwise send every earlier
 * mark again, which the client cannot take back: past 4, Claude refuses the request.
 */
function withoutCacheMarks(message: Record<string, unknown>): Record<string, unknown> {
  return {
    ...message,
    content: withoutPartFields(message.content, ["cache_control", "prompt_cache_breakpoint"]),
  };
}

/** The chat-completions body the response is served by. */
export function toChatRequest(body: ResponsesBody, stored: StoredContext): ConvertedRequest {
  const input = inputMessages(body, stored.items, stored.previous.map(withoutCacheMarks));
  const conversation = input.messages;
  const messages = body.instructions
    ? [{ role: "system", content: body.instructions }, ...conversation]
    : conversation;
  const origins: Origin[] = [
    ...(body.instructions ? [{ from: "instructions" as const }] : []),
    ...input.origins,
  ];
  if (messages.length === 0) {
    throw invalid("input", "holds nothing to answer (only reasoning items)");
  }
  const chat = { model: body.model, messages, ...chatFieldsOf(body) };
  return { body, chat, conversation, inputPath: (path) => inputPath(path, origins) };
}

/** The chat request's fields but its model and messages, as the body's fields make them. */
export function chatFieldsOf(body: ResponsesBody): Record<string, unknown> {
  const chat: Record<string, unknown> = {};
  if (body.max_output_tokens != null) chat.max_completion_tokens = body.max_output_tokens;
  if (body.stream) chat.stream = true;
  if (body.tools?.length) {
    chat.tools = body.tools.map((t) => ({
      type: "function",
      function: {
        name: t.name,
        ...(t.description != null ? { description: t.description } : {}),
        ...(t.parameters != null ? { parameters: t.parameters } : {}),
        ...(t.strict != null ? { strict: t.strict } : {}),
      },
    }));
  }
  if (body.tool_choice != null) {
    const choice = body.tool_choice;
    chat.tool_choice = typeof choice === "string"
      ? choice
      : choice.type === "function"
      ? { type: "function", function: { name: choice.name } }
      : {
        type: "allowed_tools",
        allowed_tools: {
          mode: choice.mode,
          tools: choice.tools.map((t) => ({ type: "function", function: { name: t.name } })),
        },
      };
  }
  const format = body.text?.format;
  if (format && format.type !== "text") {
    chat.response_format = format.type === "json_object" ? { type: "json_object" } : {
      type: "json_schema",
      json_schema: {
        name: format.name,
        schema: format.schema,
        ...(format.description != null ? { description: format.description } : {}),
        ...(format.strict != null ? { strict: format.strict } : {}),
      },
    };
  }
  if (body.include?.includes("message.output_text.logprobs")) {
    chat.logprobs = true;
    if (body.top_logprobs != null) chat.top_logprobs = body.top_logprobs;
  }
  if (body.text?.verbosity != null) chat.verbosity = body.text.verbosity;
  if (body.reasoning?.effort != null) chat.reasoning_effort = body.reasoning.effort;
  // The Responses API takes it without tools, Chat Completions does not; without tools it means
  // nothing, so it goes only with them.
  if (body.parallel_tool_calls != null && body.tools?.length) {
    chat.parallel_tool_calls = body.parallel_tool_calls;
  }
  for (
    const field of [
      "temperature",
      "top_p",
      "metadata",
      "user",
      "safety_identifier",
      "prompt_cache_key",
      "prompt_cache_options",
      "prompt_cache_retention",
      "service_tier",
    ] as const
  ) {
    if (body[field] != null) chat[field] = body[field];
  }
  return chat;
}

/**
 * The input items of a request as OpenAI lists them (`GET /v1/responses/{id}/input_items`): each
 * with an id (the client's, or a new one), text content as parts, a reference as the item it
 * names. Only this request's input: a previous response's is listed under that response.
 */
export function inputItemsOf(
  body: ResponsesBody,
  items: Map<string, ResponseInputItem>,
  newId: (prefix: "msg" | "fc" | "fco" | "rs") => string,
): (Record<string, unknown> & { id: string; type: string })[] {
  const raw = typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input;
  const listed = raw.map((one, i) => {
    let item = parseItem(one, i);
    if (item.type === "item_reference") item = items.get(item.id) ?? item;
    if (item.type === "item_reference") return { type: "item_reference", id: item.id };
    if (item.type === "function_call" || item.type === "function_call_output") {
      // The parse helpers' parsed_arguments is accepted and dropped: neither stored nor listed.
      const { id, status, parsed_arguments: _parsed, ...rest } = item as typeof item & {
        parsed_arguments?: unknown;
      };
      return {
        id: id ?? newId(item.type === "function_call" ? "fc" : "fco"),
        ...rest,
        status: status ?? "completed",
      };
    }
    if (item.type === "reasoning") {
      return { ...item, id: typeof item.id === "string" ? item.id : newId("rs") };
    }
    if (!("role" in item)) return { type: "item_reference", id: String(item.id) };
    const { id, status, phase, type: _type, content, role } = item;
    const text = role === "assistant" ? "output_text" : "input_text";
    return {
      id: id ?? newId("msg"),
      type: "message",
      role,
      content: typeof content === "string"
        ? [{ type: text, text: content, ...(text === "output_text" ? { annotations: [] } : {}) }]
        : content,
      ...(role === "assistant" && phase != null ? { phase } : {}),
      status: status ?? "completed",
    };
  });
  // Listed items are paged by id (`after`): an id twice would page in a circle.
  const seen = new Set<string>();
  listed.forEach((item, i) => {
    if (seen.has(item.id)) {
      throw new ApiError(
        "invalid_parameter",
        `Duplicate item found with id '${item.id.slice(0, 100)}': each input item is given once.`,
        { param: `input[${i}]` },
      );
    }
    seen.add(item.id);
  });
  return listed;
}

/** See ConvertedRequest.inputPath. */
function inputPath(chatPath: string, origins: Origin[]): string {
  const match = /^messages\[(\d+)\](.*)$/.exec(chatPath);
  if (!match) return chatPath === "messages" ? "input" : chatPath;
  const origin = origins[Number(match[1])];
  const rest = match[2];
  if (!origin) return "input";
  if (origin.from === "instructions") return "instructions";
  if (origin.from === "previous") return "previous_response_id";
  const call = /^\.tool_calls\[(\d+)\](.*)$/.exec(rest);
  if (call) {
    const called = origin.calls[Number(call[1])];
    if (!called) return "input";
    const field =
      { ".function.arguments": ".arguments", ".function.name": ".name", ".id": ".call_id" }[
        call[2]
      ];
    return `input[${called.item}]${called.referenced ? "" : field ?? ""}`;
  }
  if (origin.item === null) return "input";
  const item = `input[${origin.item}]`;
  if (origin.referenced) return item;
  if (origin.kind !== "message" && origin.kind !== "function_call_output") return item;
  // A tool output's content is its `output`.
  const content = origin.kind === "message" ? ".content" : ".output";
  // Parts are converted one for one; only an image's fields are named otherwise.
  const part =
    /^\.content(\[\d+\])(\.type|\.text|\.image_url\.url|\.image_url\.detail|\.file\.file_data)?$/
      .exec(rest);
  if (part) {
    const field = {
      ".image_url.url": ".image_url",
      ".image_url.detail": ".detail",
      ".file.file_data": ".file_data",
    }[part[2]] ?? part[2] ?? "";
    return item + content + part[1] + field;
  }
  if (rest === ".content") return item + content;
  if (origin.kind === "function_call_output") {
    return item + (rest === ".tool_call_id" ? ".call_id" : "");
  }
  return rest === ".role" ? item + rest : item;
}

/**
 * A call's arguments as a later turn sends them back: a call the output cap cut mid-JSON goes back
 * without them, as a call with no arguments, which every provider kind accepts (Anthropic's takes
 * only a JSON object), so the conversation can go on with that call's answer.
 */
export function sentBackArguments(args: string): string {
  try {
    JSON.parse(args);
    return args;
  } catch {
    return "";
  }
}

/** Where an input item of a chat turn came from. */
type InputSource = {
  /** Null for a string input. */
  item: number | null;
  kind: "message" | "function_call_output" | "function_call";
  /** The item stood behind an item_reference: its fields are not in the request. */
  referenced: boolean;
};

/** The input items as chat messages, after the conversation `previous_response_id` continues. */
function inputMessages(
  body: ResponsesBody,
  items: Map<string, ResponseInputItem>,
  previous: Record<string, unknown>[],
): { messages: Record<string, unknown>[]; origins: Origin[] } {
  const earlier = previous.map((message) => ({ message, source: null, calls: [] }));
  const converted: ConversationItem<InputSource>[] = typeof body.input === "string"
    ? [{
      type: "message",
      message: { role: "user", content: body.input },
      source: { item: null, kind: "message", referenced: false },
    }]
    : body.input.flatMap((raw, i) => conversationItem(raw, i, items));
  const turns = chatTurns(converted, earlier);
  const before = new Set<ChatTurn<InputSource>>(earlier);
  return {
    messages: turns.map((turn) => turn.message),
    origins: turns.map((turn): Origin => {
      if (before.has(turn)) return { from: "previous" };
      const { source, calls } = turn;
      return {
        from: "input",
        item: source?.item ?? null,
        kind: !source
          ? "function_calls"
          : source.kind === "function_call_output"
          ? source.kind
          : "message",
        referenced: (source ?? calls[0]).referenced,
        calls: calls.map(({ item, referenced }) => ({ item: item!, referenced })),
      };
    }),
  };
}

/** An input item as the conversation takes it: none for reasoning that is not Claude's. */
function conversationItem(
  raw: unknown,
  i: number,
  items: Map<string, ResponseInputItem>,
): ConversationItem<InputSource>[] {
  let item = parseItem(raw, i);
  const referenced = item.type === "item_reference";
  if (item.type === "item_reference") {
    const found = items.get(item.id);
    if (!found) {
      throw invalid(
        `input[${i}].id`,
        `no stored item '${
          item.id.slice(0, 100)
        }' (items of responses created with store: false, expired or of another app are not kept)`,
      );
    }
    item = found;
  }
  if (item.type === "reasoning") {
    if (!item.encrypted_content) return [];
    const details = detailsOfEncryptedContent(item.encrypted_content);
    if (details === "malformed") {
      throw invalid(
        `input[${i}].encrypted_content`,
        "is not the encrypted_content of a reasoning item as Tollbooth answered it",
      );
    }
    if (details === "foreign") return [];
    return [{ type: "reasoning", details }];
  }
  if (item.type === "function_call") {
    // A stored call is sent back as previous_response_id sends it: one cut mid-JSON without
    // its arguments, which Claude would refuse.
    const args = referenced ? sentBackArguments(item.arguments) : item.arguments;
    const call = {
      id: item.call_id,
      type: "function",
      function: { name: item.name, arguments: args },
      ...(item.extra_content ? { extra_content: item.extra_content } : {}),
    };
    return [{ type: "function_call", call, source: { item: i, kind: item.type, referenced } }];
  }
  if (item.type === "function_call_output") {
    // Parts stay parts: run together they would lose the boundary between them.
    const content = typeof item.output === "string"
      ? item.output
      : item.output.map((p, j) => inputPartOf(p, `input[${i}].output[${j}]`));
    return [{
      type: "function_call_output",
      message: { role: "tool", tool_call_id: item.call_id, content },
      source: { item: i, kind: item.type, referenced },
    }];
  }
  if (!("role" in item)) throw invalid(`input[${i}].id`, "references another reference");
  return [{
    type: "message",
    message: messageOf(item, i),
    source: { item: i, kind: "message", referenced },
  }];
}

type Parsed = z.infer<typeof InputItem>;

/** An item without a type is a message, or a reference when it holds only an id. */
function isUntypedReference(raw: unknown): boolean {
  if (!raw || typeof raw !== "object") return false;
  const keys = Object.keys(raw);
  return keys.includes("id") && keys.every((k) => k === "id" || k === "type");
}

function parseItem(raw: unknown, i: number): Parsed {
  let type = raw && typeof raw === "object" ? (raw as { type?: unknown }).type : undefined;
  if (type == null && isUntypedReference(raw)) type = "item_reference";
  const schema = type === "function_call"
    ? FunctionCallItem
    : type === "function_call_output"
    ? FunctionCallOutputItem
    : type === "item_reference"
    ? ItemReference
    : type === "reasoning"
    ? ReasoningItem
    : type === undefined || type === "message"
    ? MessageItem
    : null;
  if (!schema) {
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported input item type '${
        String(type).slice(0, 50)
      }': only messages, function_call, function_call_output, item_reference and reasoning items.`,
      { param: `input[${i}].type` },
    );
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw fromIssue(parsed.error.issues[0], ["input", i]);
  if (schema === ItemReference) return { ...parsed.data, type: "item_reference" } as Parsed;
  return parsed.data as Parsed;
}

function messageOf(item: z.infer<typeof MessageItem>, i: number): Record<string, unknown> {
  const phase = item.role === "assistant" && item.phase != null ? { phase: item.phase } : {};
  if (typeof item.content === "string") {
    return { role: item.role, content: item.content, ...phase };
  }
  if (item.role === "assistant") {
    const text = item.content.map((p, j) => {
      if (p.type === "output_text" || p.type === "input_text") return p.text;
      if (p.type === "refusal") return p.refusal;
      throw invalid(`input[${i}].content[${j}].type`, "an assistant message holds text only");
    }).join("");
    return { role: "assistant", content: text, ...phase };
  }
  const parts = item.content.map((p, j) => {
    const path = `input[${i}].content[${j}]`;
    switch (p.type) {
      case "output_text":
        return { type: "text", text: p.text };
      case "refusal":
        throw invalid(`${path}.type`, "a refusal belongs to an assistant message");
      case "input_image":
        if (item.role !== "user") throw invalid(`${path}.type`, "only user messages hold images");
        break;
      case "input_file":
        if (item.role !== "user") throw invalid(`${path}.type`, "only user messages hold files");
    }
    return inputPartOf(p, path);
  });
  return { role: item.role, content: parts };
}

/** An input part (a message's or a tool output's) as a chat content part. */
function inputPartOf(p: z.infer<typeof ToolOutputPart>, path: string): Record<string, unknown> {
  switch (p.type) {
    case "input_text":
      return { type: "text", text: p.text, ...breakpointOf(p) };
    case "input_image":
      if (!p.image_url) {
        throw new ApiError(
          "unsupported_parameter",
          "Unsupported image by file_id: send image_url (an https URL or a data URL).",
          { param: `${path}.file_id` },
        );
      }
      return {
        type: "image_url",
        image_url: { url: p.image_url, ...(p.detail ? { detail: p.detail } : {}) },
        ...breakpointOf(p),
      };
    case "input_file":
      return fileFieldsOf(p, path);
  }
}

/**
 * A user's or a tool's file as the chat dialect's file part, whose checks (a PDF's bytes; a
 * provider that counts it) then apply; `file_data`, `filename` and the cache breakpoint are taken,
 * any other field (an uploaded `file_id`, a `file_url`) is refused by its path.
 */
function fileFieldsOf(p: z.infer<typeof InputFile>, path: string): Record<string, unknown> {
  const taken = ["type", "file_data", "filename", "cache_control", "prompt_cache_breakpoint"];
  for (const field of Object.keys(p)) {
    if (taken.includes(field)) continue;
    // A file stored at OpenAI or on the web is not here to count; any other field is not taken.
    const instead = field === "file_id" || field === "file_url"
      ? "send the PDF's bytes as file_data (a data URL)"
      : `a file part takes ${taken.slice(1).join(", ")}`;
    throw new ApiError(
      "unsupported_parameter",
      `Unsupported parameter '${path}.${field}': ${instead}.`,
      { param: `${path}.${field}` },
    );
  }
  if (p.file_data === undefined) {
    throw new ApiError("missing_parameter", `Missing required parameter: '${path}.file_data'.`, {
      param: `${path}.file_data`,
    });
  }
  const file = {
    file_data: p.file_data,
    ...(p.filename !== undefined ? { filename: p.filename } : {}),
  };
  return { type: "file", file, ...breakpointOf(p) };
}

/**
 * Fields of OpenAI's Responses API that need state at OpenAI, which no chat call made for the
 * answer has: refused by name, with what to send instead.
 */
const STATEFUL_FIELDS: Record<string, string> = {
  conversation:
    "conversations are kept at OpenAI, not here; send previous_response_id or the whole input",
  prompt: "prompt templates are kept in an OpenAI project; send instructions and input instead",
};

function fromIssue(outer: z.core.$ZodIssue, prefix: PropertyKey[] = []): ApiError {
  // A content part's own fault (an image's detail) rather than "must be a string or an array".
  const issue = innermostIssue(outer);
  const path = [...prefix, ...issue.path];
  if (issue.code === "unrecognized_keys") {
    const field = issue.keys[0].slice(0, 100);
    path.push(field);
    if (path.length === 1) {
      if (Object.hasOwn(STATEFUL_FIELDS, field)) {
        return new ApiError(
          "unsupported_parameter",
          `Unsupported parameter '${field}': ${STATEFUL_FIELDS[field]}.`,
          { param: field },
        );
      }
      return new ApiError(
        "invalid_parameter",
        `Unknown parameter: '${field}'. The fields Tollbooth accepts are listed at /docs/endpoints#responses.`,
        { param: field },
      );
    }
  }
  return invalid(formatPath(path), describeIssue(issue));
}

function invalid(param: string, message: string): ApiError {
  return new ApiError("invalid_parameter", `Invalid value for '${param}': ${message}.`, { param });
}

/** A part's prompt-cache breakpoints (Claude's, OpenAI's), carried to the chat part it becomes. */
function breakpointOf(
  part: {
    cache_control?: z.infer<typeof CacheControl>;
    prompt_cache_breakpoint?: z.infer<typeof PromptCacheBreakpoint>;
  },
) {
  return {
    ...(part.cache_control ? { cache_control: part.cache_control } : {}),
    ...(part.prompt_cache_breakpoint
      ? { prompt_cache_breakpoint: part.prompt_cache_breakpoint }
      : {}),
  };
}
