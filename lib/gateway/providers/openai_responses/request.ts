/**
 * The request converter of the OpenAI Responses kind: a chat request as the body of OpenAI's
 * `POST /v1/responses`, for the models OpenAI serves only there (o3-pro, GPT-5 pro, the Codex
 * models) and for reasoning that must go back to OpenAI across a tool loop, which only that API
 * carries (encrypted reasoning items).
 *
 * Messages become input items: text, images and PDFs as input parts, an assistant's text as
 * `output_text`, its tool calls as `function_call` items and tool messages as
 * `function_call_output` items; an assistant message's reasoning that this model made
 * (`reasoning_details`, see reasoning_details.ts) goes back before it as the reasoning items they
 * were. Nothing is stored at OpenAI (`store: false`): the encrypted reasoning comes back with the
 * answer instead, for the client to send with the conversation.
 */
import type {
  ChatMessage,
  ChatRequest,
  ReasoningSummary,
  UserContentPart,
} from "../../chat_request.ts";
import { openAiReasoningItems } from "../../reasoning_details.ts";
import { askedServiceTier, isReasoningModel } from "../openai/request.ts";
import type { UpstreamRequest } from "../types.ts";

type Json = Record<string, unknown>;

/** Chat's text part, without what only Anthropic reads (`cache_control`). */
function inputTextPart(part: { text: string; prompt_cache_breakpoint?: unknown }): Json {
  const out: Json = { type: "input_text", text: part.text };
  if (part.prompt_cache_breakpoint) out.prompt_cache_breakpoint = part.prompt_cache_breakpoint;
  return out;
}

/** A chat part as a Responses input part. */
function inputPart(part: UserContentPart): Json {
  if (part.type === "text") return inputTextPart(part);
  if (part.type === "image_url") {
    const out: Json = {
      type: "input_image",
      image_url: part.image_url.url,
      // Required by the Responses API; chat's default is "auto".
      detail: part.image_url.detail ?? "auto",
    };
    if (part.prompt_cache_breakpoint) out.prompt_cache_breakpoint = part.prompt_cache_breakpoint;
    return out;
  }
  if (part.type === "file") {
    // OpenAI's examples always name the file; a name is given where the client gave none.
    const out: Json = {
      type: "input_file",
      file_data: part.file.file_data,
      filename: part.file.filename ?? DEFAULT_PDF_NAME,
    };
    if (part.prompt_cache_breakpoint) out.prompt_cache_breakpoint = part.prompt_cache_breakpoint;
    return out;
  }
  // Audio parts are refused before the call (assertSupported): their tokens cannot be bounded.
  throw new Error(`unreachable: a ${part.type} part`);
}

/** The name a PDF goes by when the client gave it none. */
export const DEFAULT_PDF_NAME = "document.pdf";

/** A user message's content, or a tool message's output (its text, images and PDFs). */
function inputContent(content: string | UserContentPart[]): string | Json[] {
  return typeof content === "string" ? content : content.map(inputPart);
}

function systemContent(content: string | { type: "text"; text: string }[]): string | Json[] {
  return typeof content === "string" ? content : content.map(inputTextPart);
}

function assistantItems(
  m: Extract<ChatMessage, { role: "assistant" }>,
  upstreamModel: string,
): Json[] {
  const items: Json[] = [];
  const content: Json[] = [];
  if (typeof m.content === "string") {
    if (m.content) content.push({ type: "output_text", text: m.content });
  } else if (m.content) {
    for (const part of m.content) {
      content.push(
        part.type === "text"
          ? { type: "output_text", text: part.text }
          : { type: "refusal", refusal: part.refusal },
      );
    }
  }
  if (m.refusal) content.push({ type: "refusal", refusal: m.refusal });
  // A reasoning item goes back only with the output that followed it: OpenAI refuses one without
  // (an answer cut at the cap while the model reasoned has none).
  if (content.length > 0 || (m.tool_calls?.length ?? 0) > 0) {
    items.push(...openAiReasoningItems(m.reasoning_details, upstreamModel));
  }
  if (content.length > 0) {
    items.push({ role: "assistant", content, ...(m.phase ? { phase: m.phase } : {}) });
  }
  // The call's own item id (fc_…) is never sent: OpenAI would then want the reasoning item that
  // came with it, which a conversation moved from another model does not have.
  for (const call of m.tool_calls ?? []) {
    items.push({
      type: "function_call",
      call_id: call.id,
      name: call.function.name,
      arguments: call.function.arguments,
    });
  }
  return items;
}

/** The conversation as Responses input items, in order. */
export function inputItems(request: ChatRequest, upstreamModel: string): Json[] {
  const items: Json[] = [];
  for (const m of request.messages) {
    switch (m.role) {
      case "system":
      case "developer":
        items.push({ role: m.role, content: systemContent(m.content) });
        break;
      case "user":
        items.push({ role: "user", content: inputContent(m.content) });
        break;
      case "assistant":
        items.push(...assistantItems(m, upstreamModel));
        break;
      case "tool":
        items.push({
          type: "function_call_output",
          call_id: m.tool_call_id,
          output: inputContent(m.content),
        });
        break;
    }
  }
  return items;
}

/** Whether this request has the model reason: a reasoning model, or an effort asked for. */
export function reasons(up: UpstreamRequest): boolean {
  return isReasoningModel(up.model) || up.request.params.reasoning_effort !== undefined;
}

/** A GPT's version in a model name (`gpt-5.4-mini`, a router's `openai/gpt-5.1`). */
const GPT_VERSION = /(?:^|[^a-z0-9])gpt-(\d+)(?:\.(\d+))?/i;

/**
 * The reasoning summary a request is sent with: the one asked for, but `concise` only where the
 * model takes it ("supported for `computer-use-preview` models and all reasoning models after
 * `gpt-5`"). o3, o4-mini and gpt-5 refuse the whole request for it (400), where "auto", what they
 * were sent before a client could choose, gives a summary.
 */
function summaryFor(up: UpstreamRequest): ReasoningSummary {
  const asked = up.request.reasoningSummary ?? "auto";
  if (asked !== "concise") return asked;
  const model = up.model.upstreamModel;
  if (/(?:^|\/)computer-use-preview/i.test(model)) return asked;
  const gpt = GPT_VERSION.exec(model);
  return gpt && Number(gpt[1]) * 100 + Number(gpt[2] ?? 0) > 500 ? asked : "auto";
}

/**
 * The body for `POST {base_url}/responses`. Chat's defaults are kept where the Responses API's
 * differ: a function tool is strict only when the client says so (the Responses API makes it
 * strict unless told otherwise), and so is a JSON schema answer.
 */
export function responsesRequestBody(
  up: UpstreamRequest,
  options: { reasoningSummaries?: boolean; pinDefaultTier?: boolean } = {},
): Json {
  const p = up.request.params;
  const body: Json = {
    model: up.model.upstreamModel,
    input: inputItems(up.request, up.model.upstreamModel),
    max_output_tokens: up.maxTokens,
    stream: true,
    store: false,
  };
  for (
    const field of [
      "temperature",
      "top_p",
      "user",
      "metadata",
      "prompt_cache_key",
      "prompt_cache_options",
      "prompt_cache_retention",
      "safety_identifier",
    ] as const
  ) {
    if (p[field] !== undefined) body[field] = p[field];
  }
  const tier = askedServiceTier(p.service_tier, options.pinDefaultTier ?? false);
  if (tier !== undefined) body.service_tier = tier;
  if (p.tools?.length) {
    body.tools = p.tools.map(({ function: f }) => ({
      type: "function",
      name: f.name,
      ...(f.description !== undefined ? { description: f.description } : {}),
      parameters: f.parameters ?? { type: "object", properties: {} },
      strict: f.strict === true,
    }));
    const choice = p.tool_choice;
    if (choice != null) {
      body.tool_choice = typeof choice === "string"
        ? choice
        : choice.type === "function"
        ? { type: "function", name: choice.function.name }
        : {
          type: "allowed_tools",
          mode: choice.allowed_tools.mode,
          tools: choice.allowed_tools.tools.map((t) => ({
            type: "function",
            name: t.function.name,
          })),
        };
    }
    if (p.parallel_tool_calls !== undefined) body.parallel_tool_calls = p.parallel_tool_calls;
  }
  const text: Json = {};
  const format = p.response_format;
  if (format?.type === "json_object") text.format = { type: "json_object" };
  else if (format?.type === "json_schema") {
    const { name, description, schema, strict } = format.json_schema;
    text.format = {
      type: "json_schema",
      name,
      ...(description !== undefined ? { description } : {}),
      schema: schema ?? { type: "object" },
      strict: strict === true,
    };
  }
  if (p.verbosity) text.verbosity = p.verbosity;
  if (Object.keys(text).length > 0) body.text = text;
  const include: string[] = [];
  if (reasons(up)) {
    const reasoning: Json = {};
    if (p.reasoning_effort !== undefined) reasoning.effort = p.reasoning_effort;
    // The chat path has no field to ask for one, and reads summaries as reasoning_content: "auto"
    // unless a Responses request asked for another that the model takes.
    if (options.reasoningSummaries) reasoning.summary = summaryFor(up);
    if (Object.keys(reasoning).length > 0) body.reasoning = reasoning;
    // What the model reasoned comes back encrypted, for the next turn of a tool loop: OpenAI
    // keeps nothing of a request that is not stored.
    include.push("reasoning.encrypted_content");
  }
  if (p.logprobs) {
    include.push("message.output_text.logprobs");
    body.top_logprobs = p.top_logprobs ?? 0;
  }
  if (include.length > 0) body.include = include;
  return body;
}
