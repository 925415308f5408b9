/**
 * OpenAI's Responses API (`POST /v1/responses`) for the strict OpenAI fake: validation, billing,
 * the Response object, its event stream, and the sealed reasoning items a stateless client carries
 * across a tool loop. openai_upstream.ts routes to it and shares its key check, model rules, script
 * queue, fault knobs and records; openai_shared.ts holds the types, errors, validation helpers and
 * token counting the two APIs have in common.
 *
 * Sources (cited again where each rule is implemented):
 * - request, item, event and usage types: openai-node v7.57 `resources/responses/responses.d.ts`
 *   (ResponseCreateParamsBase, ResponseInputItem, ResponseStreamEvent, ResponseUsage,
 *   ResponseReasoningItem, ResponseFunctionToolCall) and `resources/shared.d.ts` (Reasoning);
 * - what a real client reads and sends back: @ai-sdk/openai v4.0.118 `dist/index.js` (its
 *   Responses model: the event schemas it parses, the reasoning items it returns with
 *   `store: false`);
 * - the live wire: a recorded api.openai.com stream (o4-mini and gpt-5 with reasoning summaries
 *   and encrypted content) in charmbracelet/fantasy
 *   `providertests/testdata/TestOpenAIResponsesWithSummaryThinking/*`;
 * - error texts: OpenAI's live answers as quoted in public issue threads (cited inline).
 */
import { z } from "zod";
import { base64Bytes, type ReceivedRequest, sleep, sseBody } from "./common.ts";
import {
  cacheBreakpoint,
  type ChatRequest,
  check,
  checkStrictSchema,
  decimal,
  functionName,
  int,
  invalid,
  type ModelRules,
  type OpenAiAnswer,
  OpenAiError,
  randomId,
  refusalPart,
  responseFormatTokens,
  supportedList,
  tokenCount,
  tokenPieces,
  toolsTokens,
  unverifiedStreamingRefusal,
} from "./openai_shared.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

/** A validated Responses request as the fake saw it (a ChatRequest, so chat scripts apply). */
export interface ResponsesRequest extends ChatRequest {
  api: "responses";
  /** input_tokens the fake bills (before the script's overrides); also `promptTokens`. */
  inputTokens: number;
  /** Reasoning tokens of the reasoning items sent back that belong to the ongoing tool loop. */
  carriedReasoningTokens: number;
  /** Reasoning items sent back before the last user message: dropped, not billed. */
  droppedReasoningItems: number;
}

// =============================================================================================
// Request schema (ResponseCreateParamsBase, openai-node v7.57).

const INCLUDABLE = [
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.output_text.logprobs",
] as const;

const textFormat = z.union([
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    name: functionName,
    schema: z.record(z.string(), z.unknown()),
    description: z.string().optional(),
    strict: z.boolean().nullable().optional(),
  }),
]);

const toolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.strictObject({ type: z.literal("function"), name: z.string() }),
  z.strictObject({
    type: z.literal("allowed_tools"),
    mode: z.enum(["auto", "required"]),
    tools: z.array(z.strictObject({ type: z.literal("function"), name: z.string() })),
  }),
]);

/**
 * The parameters the fake accepts. Chat-only fields (messages, max_tokens, stop, n, seed,
 * response_format, reasoning_effort, penalties, logit_bias, …) are not among them, so they are
 * refused as unknown, as OpenAI does. Real parameters whose behaviour the fake does not model
 * (conversation, prompt, context_management, prompt_cache_options, moderation, image,
 * access_programs) are refused as unknown too, so a test relying on them notices.
 */
const responsesFields = {
  model: z.string(),
  input: z.union([z.string(), z.array(z.unknown())]).optional(),
  instructions: z.string().nullable().optional(),
  // Below 16 is refused in handle(), in the validator's integer form.
  max_output_tokens: int().min(16).nullable().optional(),
  max_tool_calls: int().min(1).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  // Responses' stream options carry only include_obfuscation (ResponseCreateParams.StreamOptions).
  stream_options: z.strictObject({ include_obfuscation: z.boolean().optional() }).nullable()
    .optional(),
  store: z.boolean().nullable().optional(),
  include: z.array(z.enum(INCLUDABLE)).nullable().optional(),
  reasoning: z.strictObject({
    effort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).nullable()
      .optional(),
    summary: z.enum(["auto", "concise", "detailed"]).nullable().optional(),
    generate_summary: z.enum(["auto", "concise", "detailed"]).nullable().optional(),
  }).nullable().optional(),
  text: z.strictObject({
    format: textFormat.optional(),
    verbosity: z.enum(["low", "medium", "high"]).nullable().optional(),
  }).optional(),
  tools: z.array(z.unknown()).optional(),
  tool_choice: toolChoice.optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  temperature: decimal(0, 2),
  top_p: decimal(0, 1),
  top_logprobs: int().min(0).max(20).nullable().optional(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
  user: z.string().optional(),
  safety_identifier: z.string().max(128).nullable().optional(),
  prompt_cache_key: z.string().nullable().optional(),
  prompt_cache_retention: z.enum(["in_memory", "24h"]).nullable().optional(),
  service_tier: z.enum(["auto", "default", "flex", "scale", "priority", "fast"]).nullable()
    .optional(),
  truncation: z.enum(["auto", "disabled"]).nullable().optional(),
  previous_response_id: z.string().nullable().optional(),
  background: z.boolean().nullable().optional(),
};
const responsesSchema = z.strictObject(responsesFields);
export const RESPONSES_PARAMS = Object.keys(responsesFields);

// Input items (ResponseInputItem): the message forms, function calls and outputs, reasoning.
const inputText = z.strictObject({
  type: z.literal("input_text"),
  text: z.string(),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const inputImage = z.strictObject({
  type: z.literal("input_image"),
  detail: z.enum(["low", "high", "auto", "original"]).optional(),
  image_url: z.string().nullable().optional(),
  file_id: z.string().nullable().optional(),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const inputFile = z.strictObject({
  type: z.literal("input_file"),
  detail: z.enum(["auto", "low", "high"]).optional(),
  file_data: z.string().optional(),
  file_id: z.string().nullable().optional(),
  file_url: z.string().optional(),
  filename: z.string().optional(),
  prompt_cache_breakpoint: cacheBreakpoint.optional(),
});
const outputText = z.strictObject({
  type: z.literal("output_text"),
  text: z.string(),
  annotations: z.array(z.unknown()).optional(),
  logprobs: z.array(z.unknown()).optional(),
});
const INPUT_PARTS: Record<string, z.ZodType> = {
  input_text: inputText,
  input_image: inputImage,
  input_file: inputFile,
};
const ASSISTANT_PARTS: Record<string, z.ZodType> = {
  output_text: outputText,
  refusal: refusalPart,
};
const status = z.enum(["in_progress", "completed", "incomplete"]);
const messageItem = z.strictObject({
  type: z.literal("message").optional(),
  role: z.enum(["user", "system", "developer", "assistant"]),
  content: z.unknown(),
  // ResponseOutputMessage (an assistant message sent back) has an id and a status.
  id: z.string().optional(),
  status: status.optional(),
  phase: z.enum(["commentary", "final_answer"]).nullable().optional(),
});
const functionCallItem = z.strictObject({
  type: z.literal("function_call"),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string(),
  id: z.string().optional(),
  status: status.optional(),
});
const functionCallOutputItem = z.strictObject({
  type: z.literal("function_call_output"),
  call_id: z.string(),
  output: z.union([z.string(), z.array(z.unknown())]),
  id: z.string().nullable().optional(),
  status: status.nullable().optional(),
});
const reasoningItem = z.strictObject({
  type: z.literal("reasoning"),
  id: z.string().optional(),
  summary: z.array(z.strictObject({ type: z.literal("summary_text"), text: z.string() })),
  encrypted_content: z.string().nullable().optional(),
  content: z.array(z.unknown()).optional(),
  status: status.optional(),
});
const itemReference = z.strictObject({
  type: z.literal("item_reference").optional(),
  id: z.string(),
});
const ITEMS: Record<string, z.ZodType> = {
  message: messageItem,
  function_call: functionCallItem,
  function_call_output: functionCallOutputItem,
  reasoning: reasoningItem,
  item_reference: itemReference,
};

const functionTool = z.strictObject({
  type: z.literal("function"),
  name: functionName,
  description: z.string().nullable().optional(),
  parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  strict: z.boolean().nullable().optional(),
});

// =============================================================================================
// Sealed reasoning: what `include: ["reasoning.encrypted_content"]` returns.

/**
 * OpenAI's encrypted_content is a Fernet token (base64url, version byte 0x80: every live value
 * starts "gAAAAA") over the whole reasoning. The fake's is shaped alike — 0x80, the payload's
 * length, the payload {model, reasoning tokens, item id}, padding to 4 bytes per reasoning token
 * so its size grows with the reasoning as the real one does, then an HMAC-SHA256 under a secret
 * private to each fake — so a client can only send it back untouched, to the same model.
 */
export interface SealedReasoning {
  model: string;
  reasoningTokens: number;
  itemId: string;
}

const encoder = new TextEncoder();

function base64Url(bytes: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_");
}

export class ReasoningSeal {
  #key: Promise<CryptoKey>;
  constructor() {
    this.#key = crypto.subtle.importKey(
      "raw",
      crypto.getRandomValues(new Uint8Array(32)),
      { name: "HMAC", hash: "SHA-256" },
      false,
      ["sign", "verify"],
    );
  }

  async seal(content: SealedReasoning): Promise<string> {
    const payload = encoder.encode(
      JSON.stringify({ m: content.model, r: content.reasoningTokens, id: content.itemId }),
    );
    const size = Math.max(5 + payload.length + 16, 4 * content.reasoningTokens);
    const body = new Uint8Array(size);
    body[0] = 0x80;
    new DataView(body.buffer).setUint32(1, payload.length);
    body.set(payload, 5);
    // getRandomValues fills at most 64 KiB at a time; long reasoning seals more than that.
    for (let at = 5 + payload.length; at < size; at += 65_536) {
      crypto.getRandomValues(body.subarray(at, Math.min(size, at + 65_536)));
    }
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await this.#key, body));
    const token = new Uint8Array(size + mac.length);
    token.set(body);
    token.set(mac, size);
    return base64Url(token);
  }

  /** The sealed content, or null when the token is not one this fake sealed, untouched. */
  async open(token: string): Promise<SealedReasoning | null> {
    const bytes = base64Bytes(token.replaceAll("-", "+").replaceAll("_", "/"));
    if (!bytes || bytes.length < 5 + 32 || bytes[0] !== 0x80) return null;
    const body = new Uint8Array(bytes.subarray(0, bytes.length - 32));
    const mac = new Uint8Array(bytes.subarray(bytes.length - 32));
    if (!await crypto.subtle.verify("HMAC", await this.#key, mac, body)) return null;
    const length = new DataView(body.buffer, body.byteOffset).getUint32(1);
    try {
      const p = JSON.parse(new TextDecoder().decode(body.subarray(5, 5 + length)));
      return { model: p.m, reasoningTokens: p.r, itemId: p.id };
    } catch {
      return null;
    }
  }
}

// =============================================================================================
// Validation: what OpenAI refuses beyond the field types.

/** Its type, reading a bare `{role, content}` as a message (EasyInputMessage's optional type). */
function itemType(item: Json): string | undefined {
  if (item?.type !== undefined) return item.type;
  if (item?.role !== undefined) return "message";
  if (item?.id !== undefined) return "item_reference";
  return undefined;
}

/**
 * A message's content, or a function_call_output's `output` (a string, or input parts: text,
 * images, files; ResponseFunctionCallOutputItemList).
 */
function validateContent(item: Json, root: unknown, path: PropertyKey[], field = "content") {
  const content = item[field];
  const param = `${path.map((p) => typeof p === "number" ? `[${p}]` : `.${String(p)}`).join("")}`
    .replace(/^\./, "");
  if (typeof content === "string") return;
  if (!Array.isArray(content)) {
    throw invalid(
      `Invalid type for '${param}.${field}': expected one of a string or array of objects, but got ${
        content === undefined ? "nothing" : typeof content
      } instead.`,
      `${param}.${field}`,
      "invalid_type",
    );
  }
  // An assistant message carries output parts; the others input parts. OpenAI's words for an
  // input part in an assistant message: "Invalid value: 'input_text'. Supported values are:
  // 'output_text' and 'refusal'." (param input[N].content[K]).
  const parts = item.role === "assistant" ? ASSISTANT_PARTS : INPUT_PARTS;
  content.forEach((part: Json, k: number) => {
    const type = part?.type;
    if (!(type in parts)) {
      throw invalid(
        `Invalid value: '${type}'. Supported values are: ${supportedList(Object.keys(parts))}.`,
        `${param}.${field}[${k}]`,
        "invalid_value",
      );
    }
    check(parts[type], part, root, [...path, field, k]);
    if (type === "input_file" && typeof part.file_data === "string") {
      const pdf = pdfText(part.file_data);
      // Assumed wording: OpenAI documents the data URL (file_data), not its refusal of a bad one.
      if (pdf === null) {
        throw invalid(
          `Invalid file data: '${param}.${field}[${k}].file_data'. Expected a base64-encoded data URL with an application/pdf MIME type.`,
          `${param}.${field}[${k}].file_data`,
          "invalid_value",
        );
      }
      if (!pdf.startsWith("%PDF-") || !pdf.trimEnd().endsWith("%%EOF")) {
        throw invalid(
          "The file could not be parsed as a PDF.",
          `${param}.${field}[${k}].file_data`,
          "invalid_file",
        );
      }
    }
    if (type === "input_image" && !part.image_url && !part.file_id) {
      // Assumed wording: ResponseInputImage needs one of image_url or file_id.
      throw invalid(
        `Missing required parameter: '${param}.${field}[${k}].image_url'.`,
        `${param}.${field}[${k}].image_url`,
        "missing_required_parameter",
      );
    }
  });
}

/**
 * Tools in the Responses API are flat: {type: "function", name, description, parameters,
 * strict}. The Chat Completions shape {type, function: {...}} has no `name`, which is how OpenAI
 * refuses it: "Missing required parameter: 'tools[0].name'." (code missing_required_parameter,
 * param tools[N].name; as quoted in icebear0828/codex-proxy#399 and diegosouzapw/OmniRoute#1914).
 */
function validateTools(body: Json) {
  const tools: Json[] = body.tools ?? [];
  tools.forEach((tool, k) => {
    if (tool?.type !== "function") {
      // The fake models function tools only; OpenAI's built-in tools are not served.
      throw invalid(
        `Invalid value: '${tool?.type}'. Supported values are: 'function'.`,
        `tools[${k}].type`,
        "invalid_value",
      );
    }
    if (tool.name === undefined) {
      throw invalid(
        `Missing required parameter: 'tools[${k}].name'.`,
        `tools[${k}].name`,
        "missing_required_parameter",
      );
    }
    check(functionTool, tool, body, ["tools", k]);
    const params = tool.parameters;
    if (params && params.type !== undefined && params.type !== "object") {
      throw invalid(
        `Invalid schema for function '${tool.name}': schema must be a JSON Schema of 'type: "object"', got 'type: "${params.type}"'.`,
        `tools[${k}].parameters`,
        "invalid_function_parameters",
      );
    }
    // strict omitted (null) is read as non-strict here: clients (the AI SDK among them) send
    // non-strict schemas without it and OpenAI accepts them.
    if (tool.strict === true) {
      checkStrictSchema(params ?? {}, `function '${tool.name}'`, `tools[${k}].parameters`);
    }
  });
  const names = tools.map((t) => t.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate !== undefined) {
    throw invalid(
      `Invalid 'tools': duplicate function name '${duplicate}'.`,
      "tools",
      "invalid_value",
    );
  }
  const choice = body.tool_choice;
  const chosen = choice?.type === "function"
    ? [choice.name]
    : choice?.type === "allowed_tools"
    ? choice.tools.map((t: Json) => t.name)
    : [];
  const named = chosen.find((name: string) => !names.includes(name));
  if (named !== undefined) {
    // Assumed wording (OpenAI's Responses answer is not quoted in a public source we found).
    throw invalid(
      `Tool choice 'function' not found in 'tools' parameter.`,
      "tool_choice",
      "invalid_value",
    );
  }
}

/**
 * Function calls and their outputs pair by call_id. OpenAI's refusals (param "input", code null):
 * "No tool call found for function call output with call_id call_…." (continuedev/continue#10092)
 * and "No tool output found for function call call_…." (tjardoo/openai-client#124).
 */
function validateToolSequence(items: Json[]) {
  const calls = new Set<string>();
  const answered = new Set<string>();
  for (const item of items) {
    const type = itemType(item);
    if (type === "function_call") calls.add(item.call_id);
    if (type === "function_call_output") {
      if (!calls.has(item.call_id)) {
        throw invalid(
          `No tool call found for function call output with call_id ${item.call_id}.`,
          "input",
        );
      }
      answered.add(item.call_id);
    }
  }
  const unanswered = [...calls].find((id) => !answered.has(id));
  if (unanswered !== undefined) {
    throw invalid(`No tool output found for function call ${unanswered}.`, "input");
  }
}

/**
 * What reasoning models refuse on the Responses API: temperature other than the default 1 is
 * "Unsupported parameter: 'temperature' is not supported with this model." (code
 * unsupported_parameter; gpt-5 on /v1/responses as tested live in
 * OpenHands/software-agent-sdk#992 — unlike Chat Completions' "Unsupported value" form).
 * top_p is assumed to be refused alike (unless 1). Non-reasoning models refuse a reasoning
 * config: "Unsupported parameter: 'reasoning.effort' is not supported with this model."
 */
function validateForModel(body: Json, rules: ModelRules) {
  if (rules.unverifiedStreaming && body.stream === true) throw unverifiedStreamingRefusal();
  const unsupported = (name: string) =>
    invalid(
      `Unsupported parameter: '${name}' is not supported with this model.`,
      name,
      "unsupported_parameter",
    );
  if (rules.reasoning) {
    for (const name of ["temperature", "top_p"]) {
      if (body[name] !== undefined && body[name] !== null && body[name] !== 1) {
        throw unsupported(name);
      }
    }
    // Reasoning (shared.d.ts): "`concise` is supported for `computer-use-preview` models and all
    // reasoning models after `gpt-5`." The refusal's words are assumed, in the shape of the other
    // unsupported values.
    for (const name of ["summary", "generate_summary"]) {
      if (body.reasoning?.[name] === "concise" && !takesConciseSummary(body.model)) {
        throw invalid(
          `Unsupported value: 'reasoning.${name}' does not support 'concise' with this model. Supported values are: 'auto' and 'detailed'.`,
          `reasoning.${name}`,
          "unsupported_value",
        );
      }
    }
  } else if (body.reasoning) {
    for (const name of ["effort", "summary", "generate_summary"]) {
      if (body.reasoning[name] !== undefined && body.reasoning[name] !== null) {
        throw unsupported(`reasoning.${name}`);
      }
    }
  }
}

/** The reasoning models after gpt-5 (gpt-5.1 on, their codex, mini and pro variants). */
function takesConciseSummary(model: string): boolean {
  return /^computer-use-preview/.test(model) || /^gpt-5\.\d/.test(model) ||
    /^gpt-([6-9]|\d{2,})/.test(model);
}

// =============================================================================================
// Billing.

/**
 * What the fake bills a PDF page: OpenAI extracts each page's text and an image of it (docs "File
 * inputs") and publishes no rate; a flat one, as the Anthropic fake's, stands in.
 */
export const PDF_PAGE_TOKENS = 1_500;

/** A PDF's bytes as text, from a `data:application/pdf;base64,` URL; null for anything else. */
function pdfText(fileData: string): string | null {
  const match = /^data:application\/pdf;base64,([A-Za-z0-9+/]*={0,2})$/.exec(fileData);
  return match && base64Bytes(match[1]) ? atob(match[1]) : null;
}

function pdfTokens(fileData: string): number {
  const pages = (pdfText(fileData)?.match(/\/Type\s*\/Page(?!s)/g) ?? []).length || 1;
  return pages * PDF_PAGE_TOKENS;
}

/**
 * input_tokens of a Responses request, counted like the chat fake's prompt tokens (o200k, the
 * Cookbook's per-message framing, num_tokens_for_tools, images by the tile rule, PDFs at a flat
 * rate a page): `instructions`
 * as a leading system message; a message item as a chat message; a function_call as a chat tool
 * call (3 + name + arguments); a function_call_output as a tool message (3 + "tool" + call_id +
 * output); a text.format json_schema as the chat fake's response_format; plus `reasoningTokens`,
 * what the caller found carried back in the ongoing tool loop's reasoning items. Reasoning items
 * cost nothing here by themselves: their tokens are what was sealed.
 */
export function responsesInputTokens(
  body: Json,
  imageTokens: (part: Json) => number = () => 0,
  reasoningTokens = 0,
): number {
  let total = 3 + reasoningTokens;
  const message = (role: string, content: Json) => {
    total += 3 + tokenCount(role);
    if (typeof content === "string") return total += tokenCount(content);
    for (const part of Array.isArray(content) ? content : []) {
      if (part.type === "input_text" || part.type === "output_text") {
        total += tokenCount(part.text);
      } else if (part.type === "refusal") total += tokenCount(part.refusal);
      else if (part.type === "input_file") total += pdfTokens(part.file_data ?? "");
      else if (part.type === "input_image") {
        total += imageTokens({
          image_url: { url: part.image_url ?? part.file_id, detail: part.detail },
        });
      }
    }
  };
  if (typeof body.instructions === "string") message("system", body.instructions);
  const items: Json[] = typeof body.input === "string"
    ? [{ role: "user", content: body.input }]
    : Array.isArray(body.input)
    ? body.input
    : [];
  for (const item of items) {
    const type = itemType(item);
    if (type === "message") message(item.role, item.content);
    else if (type === "function_call") {
      total += 3 + tokenCount(item.name ?? "") + tokenCount(item.arguments ?? "");
    } else if (type === "function_call_output") {
      total += tokenCount(item.call_id ?? "");
      // A tool message's framing and text; images in its output billed as a message's.
      message("tool", item.output);
    }
  }
  total += toolsTokens((body.tools ?? []).map((t: Json) => ({ function: t })));
  const format = body.text?.format;
  if (format?.type === "json_schema") {
    total += responseFormatTokens({ type: "json_schema", json_schema: format });
  }
  return total;
}

// =============================================================================================
// The answer.

/** The snapshot OpenAI reports for an alias (as in live answers: "o4-mini-2025-04-16"). */
const SNAPSHOTS: Record<string, string> = {
  "gpt-4o": "gpt-4o-2024-08-06",
  "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
  "gpt-4.1": "gpt-4.1-2025-04-14",
  "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
  "o3": "o3-2025-04-16",
  "o3-pro": "o3-pro-2025-06-10",
  "o4-mini": "o4-mini-2025-04-16",
  "gpt-5": "gpt-5-2025-08-07",
  "gpt-5-mini": "gpt-5-mini-2025-08-07",
  "gpt-5-pro": "gpt-5-pro-2025-10-06",
};

interface RenderedResponses {
  reasoning: { id: string; tokens: number; summary: string | null; encrypted?: string } | null;
  message: {
    id: string;
    kind: "output_text" | "refusal";
    pieces: string[];
    text: string;
    status: string;
  } | null;
  calls: {
    id: string;
    callId: string;
    name: string;
    arguments: string;
    chunks: string[];
  }[];
  /** The message after the calls (finalAnswer): only in a response that was not cut. */
  answer: { id: string; pieces: string[]; text: string } | null;
  incomplete: boolean;
  usage: Json;
}

async function renderResponses(
  answer: OpenAiAnswer,
  request: ResponsesRequest,
  seal: ReasoningSeal,
): Promise<RenderedResponses> {
  const body = request.body;
  const limit: number | undefined = body.max_output_tokens ?? undefined;
  let reasoning = request.reasoningModel ? answer.reasoningTokens ?? 0 : 0;
  let pieces = answer.refusal !== undefined
    ? tokenPieces(answer.refusal)
    : answer.contentChunks ?? (answer.content ? tokenPieces(answer.content) : []);
  let calls = (answer.toolCalls ?? []).map((call) => {
    const args = typeof call.arguments === "string"
      ? call.arguments
      : JSON.stringify(call.arguments);
    return {
      id: randomId("fc_", 48),
      callId: call.id ?? randomId("call_"),
      name: call.name,
      arguments: args,
      chunks: call.argumentChunks ?? tokenPieces(args),
    };
  });
  const callTokens = (c: { name: string; arguments: string }) =>
    3 + tokenCount(c.name) + tokenCount(c.arguments);
  let incomplete = false;
  // max_output_tokens bounds reasoning and visible tokens together (ResponseCreateParams doc:
  // "including visible output tokens and reasoning tokens").
  if (limit !== undefined && answer.completionTokens === undefined) {
    if (reasoning >= limit) {
      incomplete = reasoning > limit || pieces.length > 0 || calls.length > 0;
      reasoning = limit;
      pieces = [];
      calls = [];
    } else {
      let room = limit - reasoning;
      const kept: string[] = [];
      for (const piece of pieces) {
        const n = tokenCount(piece);
        if (n > room) {
          incomplete = true;
          break;
        }
        kept.push(piece);
        room -= n;
      }
      pieces = kept;
      const keptCalls = [];
      for (const call of incomplete ? [] : calls) {
        if (callTokens(call) > room) {
          incomplete = true;
          break;
        }
        keptCalls.push(call);
        room -= callTokens(call);
      }
      if (incomplete) calls = keptCalls;
    }
  }
  const text = pieces.join("");
  const answerText = incomplete ? "" : answer.finalAnswer ?? "";
  const visible = tokenCount(text) + calls.reduce((n, c) => n + callTokens(c), 0) +
    tokenCount(answerText);
  const output = incomplete && limit !== undefined
    ? limit
    : answer.completionTokens ?? visible + reasoning;
  const input = answer.promptTokens ?? request.inputTokens;
  // Prompt caching applies to prompts of 1024 tokens or more (prompt-caching guide).
  const cached = input >= 1024 ? Math.min(answer.cachedTokens ?? 0, input) : 0;
  let reasoningItem: RenderedResponses["reasoning"] = null;
  if (request.reasoningModel) {
    const id = randomId("rs_", 48);
    const summary = body.reasoning?.summary || body.reasoning?.generate_summary
      ? answer.reasoningSummary ?? null
      : null;
    reasoningItem = { id, tokens: reasoning, summary };
    if ((body.include ?? []).includes("reasoning.encrypted_content")) {
      reasoningItem.encrypted = await seal.seal({
        model: body.model,
        reasoningTokens: reasoning,
        itemId: id,
      });
    }
  }
  const hasMessage = pieces.length > 0 || answer.content !== undefined ||
    answer.refusal !== undefined || (calls.length === 0 && !incomplete);
  return {
    reasoning: reasoningItem,
    message: hasMessage
      ? {
        id: randomId("msg_", 48),
        kind: answer.refusal !== undefined ? "refusal" : "output_text",
        pieces,
        text,
        status: incomplete ? "incomplete" : "completed",
      }
      : null,
    calls,
    answer: answerText
      ? { id: randomId("msg_", 48), pieces: tokenPieces(answerText), text: answerText }
      : null,
    incomplete,
    usage: {
      input_tokens: input,
      input_tokens_details: { cached_tokens: cached },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: reasoning },
      total_tokens: input + output,
    },
  };
}

function logprobsOf(pieces: string[], body: Json, value: number): Json[] {
  if (!(body.include ?? []).includes("message.output_text.logprobs")) return [];
  const top = body.top_logprobs ?? 0;
  return pieces.map((token) => ({
    token,
    logprob: value,
    bytes: [...encoder.encode(token)],
    top_logprobs: Array.from(
      { length: top },
      (_, k) => ({
        token: k ? `${token}${"~".repeat(k)}` : token,
        logprob: value - 2 * k,
        bytes: [],
      }),
    ),
  }));
}

/**
 * The models that label their messages with a phase (ResponseOutputMessage.phase, openai-node
 * v7.57: "for models like gpt-5.3-codex and beyond"; GPT-5.4 on, as OpenAI announced it).
 */
function labelsPhase(model: string): boolean {
  return /^gpt-5\.3-codex/.test(model) || /^gpt-5\.([4-9]|\d{2,})/.test(model) ||
    /^gpt-([6-9]|\d{2,})/.test(model);
}

/** The output items, as they stand when done (or as first announced, `added`). */
function outputItems(r: RenderedResponses, answer: OpenAiAnswer, body: Json, added = false) {
  const items: Json[] = [];
  if (r.reasoning) {
    const item: Json = { id: r.reasoning.id, type: "reasoning", summary: [] };
    if (r.reasoning.encrypted !== undefined) item.encrypted_content = r.reasoning.encrypted;
    if (!added && r.reasoning.summary !== null) {
      item.summary = [{ type: "summary_text", text: r.reasoning.summary }];
    }
    items.push(item);
  }
  if (r.message) {
    items.push({
      id: r.message.id,
      type: "message",
      status: added ? "in_progress" : r.message.status,
      content: added ? [] : [contentPart(r, answer, body)],
      role: "assistant",
      // A message before tool calls (or another message) is a preamble; one without, the answer.
      ...(labelsPhase(body.model)
        ? { phase: r.calls.length || r.answer ? "commentary" : "final_answer" }
        : {}),
    });
  }
  for (const call of r.calls) {
    items.push({
      id: call.id,
      type: "function_call",
      status: added ? "in_progress" : "completed",
      arguments: added ? "" : call.arguments,
      call_id: call.callId,
      name: call.name,
    });
  }
  if (r.answer) {
    items.push({
      id: r.answer.id,
      type: "message",
      status: added ? "in_progress" : "completed",
      content: added ? [] : [{
        type: "output_text",
        annotations: [],
        logprobs: logprobsOf(r.answer.pieces, body, answer.logprob ?? -0.0001),
        text: r.answer.text,
      }],
      role: "assistant",
      ...(labelsPhase(body.model) ? { phase: "final_answer" } : {}),
    });
  }
  return items;
}

function contentPart(r: RenderedResponses, answer: OpenAiAnswer, body: Json, empty = false) {
  const m = r.message!;
  if (m.kind === "refusal") return { type: "refusal", refusal: empty ? "" : m.text };
  return {
    type: "output_text",
    annotations: [],
    logprobs: empty ? [] : logprobsOf(m.pieces, body, answer.logprob ?? -0.0001),
    text: empty ? "" : m.text,
  };
}

function responseObject(
  request: ResponsesRequest,
  answer: OpenAiAnswer,
  r: RenderedResponses | null,
  meta: { id: string; createdAt: number; status: string; error?: Json },
) {
  const body = request.body;
  const reasoningModel = request.reasoningModel;
  const done = meta.status !== "in_progress" && meta.status !== "queued";
  return {
    id: meta.id,
    object: "response",
    created_at: meta.createdAt,
    status: meta.status,
    background: body.background ?? false,
    completed_at: meta.status === "completed" ? Math.floor(Date.now() / 1000) : null,
    error: meta.error ?? null,
    frequency_penalty: 0.0,
    incomplete_details: meta.status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    model: answer.model ?? SNAPSHOTS[body.model] ?? body.model,
    output: done && r ? outputItems(r, answer, body) : [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    presence_penalty: 0.0,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    prompt_cache_retention: body.prompt_cache_retention ?? null,
    reasoning: reasoningModel
      ? {
        effort: body.reasoning?.effort ?? "medium",
        summary: body.reasoning?.summary ?? body.reasoning?.generate_summary ?? null,
      }
      : { effort: null, summary: null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: done ? (body.service_tier ?? "default") : (body.service_tier ?? "auto"),
    store: body.store ?? true,
    temperature: body.temperature ?? 1.0,
    text: {
      format: body.text?.format ?? { type: "text" },
      verbosity: body.text?.verbosity ?? "medium",
    },
    tool_choice: body.tool_choice ?? "auto",
    tools: (body.tools ?? []).map((t: Json) => ({
      type: "function",
      description: t.description ?? null,
      name: t.name,
      parameters: t.parameters ?? null,
      strict: t.strict ?? false,
    })),
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? 1.0,
    truncation: body.truncation ?? "disabled",
    usage: done && r ? r.usage : null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  };
}

/**
 * The event sequence OpenAI streams (API reference "Streaming events"; the live recordings
 * cited above): response.created and response.in_progress with the empty response; per output
 * item output_item.added, its part/delta/done events, output_item.done with the whole item
 * (encrypted_content included); then response.completed or response.incomplete with the whole
 * response and usage. Every event has a sequence_number; deltas carry `obfuscation` unless
 * stream_options.include_obfuscation is false. No [DONE] follows.
 */
function responseEvents(
  request: ResponsesRequest,
  answer: OpenAiAnswer,
  r: RenderedResponses,
  meta: { id: string; createdAt: number },
): Json[] {
  const body = request.body;
  const obfuscate = body.stream_options?.include_obfuscation !== false;
  const events: Json[] = [];
  const push = (type: string, fields: Json, delta = false) => {
    const event: Json = { type, ...fields };
    if (delta && obfuscate) event.obfuscation = randomId("", 1 + (events.length % 15));
    event.sequence_number = events.length;
    events.push(event);
  };
  const base = (status: string) => responseObject(request, answer, r, { ...meta, status });
  push("response.created", { response: base("in_progress") });
  push("response.in_progress", { response: base("in_progress") });
  const added = outputItems(r, answer, body, true);
  const done = outputItems(r, answer, body);
  let index = 0;
  if (r.reasoning) {
    const item_id = r.reasoning.id;
    const output_index = index++;
    push("response.output_item.added", { item: added[output_index], output_index });
    const summary = r.reasoning.summary;
    if (summary !== null) {
      const at = { item_id, output_index, summary_index: 0 };
      push("response.reasoning_summary_part.added", {
        ...at,
        part: { type: "summary_text", text: "" },
      });
      for (const piece of tokenPieces(summary)) {
        push("response.reasoning_summary_text.delta", { ...at, delta: piece }, true);
      }
      push("response.reasoning_summary_text.done", { ...at, text: summary });
      push("response.reasoning_summary_part.done", {
        ...at,
        part: { type: "summary_text", text: summary },
      });
    }
    push("response.output_item.done", { item: done[output_index], output_index });
  }
  if (r.message) {
    const m = r.message;
    const output_index = index++;
    const at = { item_id: m.id, output_index, content_index: 0 };
    push("response.output_item.added", { item: added[output_index], output_index });
    push("response.content_part.added", { ...at, part: contentPart(r, answer, body, true) });
    if (m.kind === "refusal") {
      for (const piece of m.pieces) push("response.refusal.delta", { ...at, delta: piece }, true);
      push("response.refusal.done", { ...at, refusal: m.text });
    } else {
      const logprob = answer.logprob ?? -0.0001;
      for (const piece of m.pieces) {
        push("response.output_text.delta", {
          ...at,
          delta: piece,
          logprobs: logprobsOf([piece], body, logprob),
        }, true);
      }
      push("response.output_text.done", {
        ...at,
        text: m.text,
        logprobs: logprobsOf(m.pieces, body, logprob),
      });
    }
    push("response.content_part.done", { ...at, part: contentPart(r, answer, body) });
    push("response.output_item.done", { item: done[output_index], output_index });
  }
  for (const call of r.calls) {
    const output_index = index++;
    const at = { item_id: call.id, output_index };
    push("response.output_item.added", { item: added[output_index], output_index });
    for (const piece of call.chunks) {
      push("response.function_call_arguments.delta", { ...at, delta: piece }, true);
    }
    push("response.function_call_arguments.done", { ...at, arguments: call.arguments });
    push("response.output_item.done", { item: done[output_index], output_index });
  }
  if (r.answer) {
    const output_index = index++;
    const at = { item_id: r.answer.id, output_index, content_index: 0 };
    const logprob = answer.logprob ?? -0.0001;
    push("response.output_item.added", { item: added[output_index], output_index });
    push("response.content_part.added", {
      ...at,
      part: { type: "output_text", annotations: [], logprobs: [], text: "" },
    });
    for (const piece of r.answer.pieces) {
      push("response.output_text.delta", {
        ...at,
        delta: piece,
        logprobs: logprobsOf([piece], body, logprob),
      }, true);
    }
    const part = (done[output_index].content as Json[])[0];
    push("response.output_text.done", { ...at, text: r.answer.text, logprobs: part.logprobs });
    push("response.content_part.done", { ...at, part });
    push("response.output_item.done", { item: done[output_index], output_index });
  }
  const final = r.incomplete ? "incomplete" : "completed";
  push(`response.${final}`, { response: base(final) });
  return events;
}

/**
 * The default answer for /v1/responses: the chat fake's echo (openai_upstream.ts echoAnswer) of
 * the last user message, reading the same commands. A "cut:N" falls after N text deltas, counted
 * past the events that precede the first delta.
 */
export function echoResponses(
  request: ResponsesRequest,
  echo: (request: ChatRequest) => OpenAiAnswer,
): OpenAiAnswer {
  const input = request.body.input;
  const items: Json[] = typeof input === "string"
    ? [{ role: "user", content: input }]
    : input ?? [];
  const last = items.findLast((m) => itemType(m) === "message" && m.role === "user");
  const messages = last ? [{ role: "user", content: last.content }] : [];
  const answer = echo({ ...request, body: { ...request.body, messages } });
  if (answer.cutAfterEvents !== undefined) {
    // echo counts one role chunk before the text; here created, in_progress, item and part
    // precede it, and a reasoning model's reasoning item (added, done) before those.
    answer.cutAfterEvents += 3 + (request.reasoningModel ? 2 : 0);
  }
  return answer;
}

// =============================================================================================
// The endpoint.

export interface ResponsesEndpointDeps {
  parseJson(raw: string): Json;
  rulesFor(model: string): ModelRules;
  /** Image tokens for a chat-shaped image part {image_url: {url, detail}} under a model's rules. */
  imageTokensFor(rules: ModelRules): (part: Json) => number;
  nextAnswer(request: ResponsesRequest): OpenAiAnswer;
  counts: { ok: number; refused: number; failed: number; cut: number };
  responses: ResponsesRequest[];
  /** The input token counts answered, with the bodies counted. */
  tokenCounts: { body: Json; inputTokens: number }[];
}

/** The parameters of `POST /v1/responses/input_tokens` (InputTokenCountParams). */
const COUNT_PARAMS = [
  "conversation",
  "input",
  "instructions",
  "model",
  "parallel_tool_calls",
  "personality",
  "previous_response_id",
  "reasoning",
  "text",
  "tool_choice",
  "tools",
  "truncation",
];

export function createResponsesEndpoint(deps: ResponsesEndpointDeps) {
  const seal = new ReasoningSeal();
  /** What a stored (store: true) response left behind: its reasoning items, by id. */
  const storedReasoning = new Map<string, SealedReasoning>();
  const storedResponses = new Set<string>();

  /**
   * The reasoning items sent back: sealed ones are opened and checked, bare ones looked up among
   * the stored items. Returns the tokens of those after the last user message (the ongoing tool
   * loop; the reasoning guide: reasoning items from before the last user turn are dropped).
   */
  async function carriedReasoning(body: Json, items: Json[]) {
    const lastUser = items.findLastIndex((m) => itemType(m) === "message" && m.role === "user");
    let carried = 0;
    let dropped = 0;
    for (const [i, item] of items.entries()) {
      const type = itemType(item);
      if (type !== "reasoning" && type !== "item_reference") continue;
      let content: SealedReasoning | null | undefined;
      if (type === "reasoning" && typeof item.encrypted_content === "string") {
        content = await seal.open(item.encrypted_content);
        const forItem = item.id === undefined || content?.itemId === item.id;
        if (!content || content.model !== body.model || !forItem) {
          // OpenAI's words, as quoted in smallmain/vscode-unify-chat-provider#178 (with an item
          // id) and openai/codex#8145 (without): code invalid_encrypted_content, param null. A
          // token sealed for another model is assumed to be refused the same way.
          const token = item.encrypted_content;
          throw invalid(
            item.id !== undefined
              ? `The encrypted content for item ${item.id} could not be verified. Reason: Encrypted content could not be decrypted or parsed.`
              : `The encrypted content ${token.slice(0, 4)}...${
                token.slice(-4)
              } could not be verified.`,
            null,
            "invalid_encrypted_content",
          );
        }
      } else {
        content = storedReasoning.get(item.id);
        if (!content) {
          // OpenAI's words, as quoted in router-for-me/CLIProxyAPI#2381 (type
          // invalid_request_error, param input, code null), answered 404 (can1357/oh-my-pi#41).
          // With store on, the fake keeps only the reasoning items it issued; the first sentence
          // alone is assumed for an unknown item then.
          throw new OpenAiError(
            404,
            body.store === false
              ? `Item with id '${item.id}' not found. Items are not persisted when \`store\` is set to false. Try again with \`store\` set to true, or remove this item from your input.`
              : `Item with id '${item.id}' not found.`,
            "invalid_request_error",
            "input",
            null,
          );
        }
      }
      if (i > lastUser) carried += content.reasoningTokens;
      else dropped++;
    }
    return { carried, dropped };
  }

  function validate(body: Json, rules: ModelRules): Json[] {
    const items: Json[] = typeof body.input === "string" ? [] : body.input ?? [];
    items.forEach((item, i) => {
      const type = itemType(item);
      if (!(type! in ITEMS)) {
        throw invalid(
          `Invalid value: '${type}'. Supported values are: ${supportedList(Object.keys(ITEMS))}.`,
          `input[${i}].type`,
          "invalid_value",
        );
      }
      check(ITEMS[type!], item, body, ["input", i]);
      if (type === "message") validateContent(item, body, ["input", i]);
      if (type === "function_call_output") validateContent(item, body, ["input", i], "output");
    });
    // A reasoning item stands before the item it produced. OpenAI's words when it is last
    // (as quoted in the OpenAI community thread "How to use reasoning.encrypted_content with
    // store=False"): "Item 'rs_…' of type 'reasoning' was provided without its required
    // following item." Param and code assumed (input, null).
    items.forEach((item, i) => {
      if (itemType(item) === "reasoning" && i === items.length - 1) {
        throw invalid(
          `Item '${item.id}' of type 'reasoning' was provided without its required following item.`,
          "input",
        );
      }
    });
    validateToolSequence(items);
    validateTools(body);
    if (body.text?.format?.type === "json_schema" && body.text.format.strict) {
      checkStrictSchema(
        body.text.format.schema ?? {},
        `text.format '${body.text.format.name}'`,
        "text.format.schema",
      );
    }
    validateForModel(body, rules);
    if (body.previous_response_id && !storedResponses.has(body.previous_response_id)) {
      // Assumed wording and code for a response id this fake did not store.
      throw invalid(
        `Previous response with id '${body.previous_response_id}' not found.`,
        "previous_response_id",
        "previous_response_not_found",
      );
    }
    return items;
  }

  async function handle(request: Request, raw: string, record: ReceivedRequest) {
    const body = deps.parseJson(raw);
    record.body = body;
    if (body.model === undefined) {
      throw invalid("Missing required parameter: 'model'.", "model", "missing_required_parameter");
    }
    // The Responses API's validator refuses unknown parameters one at a time, as "Unknown
    // parameter: 'x'." (code unknown_parameter; quoted in
    // github.com/teabranch/open-responses-server/issues/41).
    const unknown = Object.keys(body).find((k) => !RESPONSES_PARAMS.includes(k));
    if (unknown !== undefined) {
      throw invalid(`Unknown parameter: '${unknown}'.`, unknown, "unknown_parameter");
    }
    const limit = body.max_output_tokens;
    if (Number.isInteger(limit) && limit < 16) {
      // OpenAI's words, as quoted in vectorize-io/hindsight#58 (code integer_below_min_value).
      // Checked before the schema: its int bound reports as "decimal", which OpenAI does not say.
      throw invalid(
        `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got ${limit} instead.`,
        "max_output_tokens",
        "integer_below_min_value",
      );
    }
    check(responsesSchema, body, body, []);
    const rules = deps.rulesFor(body.model);
    const items = validate(body, rules);
    const { carried, dropped } = await carriedReasoning(body, items);
    const inputTokens = responsesInputTokens(body, deps.imageTokensFor(rules), carried);
    if (rules.contextWindow !== undefined && inputTokens > rules.contextWindow) {
      // Assumed wording of the Responses API's context refusal.
      throw invalid(
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "input",
        "context_length_exceeded",
      );
    }
    const req: ResponsesRequest = {
      api: "responses",
      body,
      headers: record.headers,
      promptTokens: inputTokens,
      inputTokens,
      carriedReasoningTokens: carried,
      droppedReasoningItems: dropped,
      reasoningModel: rules.reasoning,
    };
    deps.responses.push(req);
    const answer = deps.nextAnswer(req);
    if (answer.delayMs) await sleep(answer.delayMs, request.signal);
    if (answer.status !== undefined && answer.status !== 200) {
      deps.counts.failed++;
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
    const r = await renderResponses(answer, req, seal);
    const meta = { id: randomId("resp_", 48), createdAt: Math.floor(Date.now() / 1000) };
    if (body.store !== false) {
      storedResponses.add(meta.id);
      if (r.reasoning) {
        storedReasoning.set(r.reasoning.id, {
          model: body.model,
          reasoningTokens: r.reasoning.tokens,
          itemId: r.reasoning.id,
        });
      }
    }
    const headers = { "x-request-id": crypto.randomUUID(), ...answer.headers };
    if (!body.stream) {
      deps.counts.ok++;
      const status = r.incomplete ? "incomplete" : "completed";
      return Response.json(responseObject(req, answer, r, { ...meta, status }), { headers });
    }
    let events = responseEvents(req, answer, r, meta);
    const failure = answer.streamError;
    if (failure && failure.afterEvents < events.length) {
      events = events.slice(0, failure.afterEvents);
      const message = failure.message ??
        "The server had an error while processing your request. Sorry about that!";
      const code = failure.code ?? "server_error";
      events.push(
        failure.event === "error"
          // ResponseErrorEvent: {type: "error", code, message, param, sequence_number}.
          ? { type: "error", code, message, param: null, sequence_number: events.length }
          : {
            type: "response.failed",
            response: {
              ...responseObject(req, answer, null, { ...meta, status: "failed" }),
              error: { code, message },
            },
            sequence_number: events.length,
          },
      );
      deps.counts.failed++;
    } else if (answer.cutAfterEvents !== undefined && answer.cutAfterEvents < events.length) {
      deps.counts.cut++;
    } else deps.counts.ok++;
    return sseBody(
      events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`),
      { ...answer, headers },
      request.signal,
    );
  }

  /**
   * `POST /v1/responses/input_tokens` (openai-node's `responses.inputTokens.count`): the input a
   * response with this body would bill, validated as the response's own input is. Its parameters
   * are openai-node v7.57's InputTokenCountParams; a body without `model` is assumed refused as a
   * response's is.
   */
  async function countInputTokens(raw: string, record: ReceivedRequest) {
    const body = deps.parseJson(raw);
    record.body = body;
    if (body.model === undefined) {
      throw invalid("Missing required parameter: 'model'.", "model", "missing_required_parameter");
    }
    const unknown = Object.keys(body).find((k) => !COUNT_PARAMS.includes(k));
    if (unknown !== undefined) {
      throw invalid(`Unknown parameter: '${unknown}'.`, unknown, "unknown_parameter");
    }
    check(responsesSchema, body, body, []);
    const rules = deps.rulesFor(body.model);
    const items = validate(body, rules);
    const { carried } = await carriedReasoning(body, items);
    const inputTokens = responsesInputTokens(body, deps.imageTokensFor(rules), carried);
    deps.tokenCounts.push({ body, inputTokens });
    return Response.json({ object: "response.input_tokens", input_tokens: inputTokens });
  }

  return {
    handle,
    countInputTokens,
    /** input_tokens for a body, reasoning carried back included when its seals open. */
    async inputTokens(body: Json, imageTokens: (part: Json) => number): Promise<number> {
      const items: Json[] = Array.isArray(body.input) ? body.input : [];
      const { carried } = await carriedReasoning(body, items).catch(() => ({ carried: 0 }));
      return responsesInputTokens(body, imageTokens, carried);
    },
  };
}
