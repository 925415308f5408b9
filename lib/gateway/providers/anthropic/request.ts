/**
 * The request converter of the Anthropic kind: a chat-completions request as a Messages request.
 * System and developer messages become `system`; tool calls become `tool_use` blocks and tool
 * messages `tool_result` blocks in a user turn; images become image blocks; turns of one role are
 * merged, as Messages wants them to alternate; `response_format` becomes a forced tool whose input
 * is the answer (a strict schema goes as an output format where the model cannot be made to call a
 * tool);
 * `reasoning_effort` becomes thinking as the model takes it: a budget, or adaptive thinking at an
 * effort.
 */
import {
  assistantMessageSaysSomething,
  type ChatMessage,
  type ChatRequest,
  claudeThinks,
  contentText,
  type FileContentPart,
  type ImageContentPart,
  isBlank,
  pdfBase64,
  strictSchema,
  type TextContentPart,
  userMessageSaysSomething,
} from "../../chat_request.ts";
import { type ClaudeRules, claudeRulesByName } from "@/lib/catalog/mod.ts";
import { imageMediaTypeOf, parseImageDataUrl, readImageSize } from "../../image_size.ts";
import { claudeThinkingBlocks } from "../../reasoning_details.ts";
import { offeredTools, plainToolChoice } from "../allowed_tools.ts";
import { formatSchema, isRecursive, withinStrictLimits } from "./output_format.ts";
import type { UpstreamRequest } from "../types.ts";

type Block = Record<string, unknown> & { type: string };
interface Turn {
  role: "user" | "assistant";
  blocks: Block[];
}

/** The longest tool name Anthropic takes (`^[a-zA-Z0-9_-]{1,64}$`). */
const MAX_TOOL_NAME = 64;

/** Anthropic's least thinking budget. */
export const MIN_THINKING_BUDGET = 1024;

/** Thinking budgets per reasoning effort, at most (THINKING_SHARE keeps room for the answer). */
const THINKING_BUDGET: Record<string, number> = {
  minimal: 1024,
  low: 2048,
  medium: 8192,
  high: 24576,
  xhigh: 32768,
  max: 65536,
};

/**
 * The most of the output cap a budget may take, per effort (OpenRouter's shares): the thinking
 * counts within `max_tokens`, and a budget of the cap less one (2,047 of the default 2,048) left
 * the answer a token when the model thought to its budget.
 */
const THINKING_SHARE: Record<string, number> = {
  minimal: 0.1,
  low: 0.2,
  medium: 0.5,
  high: 0.8,
  xhigh: 0.9,
  max: 0.95,
};

/** Anthropic's effort levels for OpenAI's reasoning efforts: Messages has no `minimal`. */
const EFFORT: Record<string, string> = {
  minimal: "low",
  low: "low",
  medium: "medium",
  high: "high",
  xhigh: "xhigh",
  max: "max",
};

/** The rules of the route's Claude model (the catalog sets them on every Anthropic route). */
export function routeRules(up: UpstreamRequest): ClaudeRules {
  return up.model.claude ?? claudeRulesByName(up.model.upstreamModel);
}

/**
 * The thinking budget of a request to a model that thinks by budget, or null when it asks for no
 * thinking (or cannot have it), or the model thinks adaptively.
 */
export function thinkingBudget(
  request: ChatRequest,
  maxTokens: number,
  rules: ClaudeRules,
  upstreamModel: string,
): number | null {
  if (rules.thinking !== "budget" || !claudeThinks(request, rules, upstreamModel)) return null;
  const effort = request.params.reasoning_effort!;
  // A cap at or under the least budget is refused before (assertClaudeRules): it stays below.
  const share = Math.floor(maxTokens * THINKING_SHARE[effort]);
  return Math.max(MIN_THINKING_BUDGET, Math.min(THINKING_BUDGET[effort], share));
}

/**
 * The `thinking` of a request to a model that thinks adaptively, or null to send none. Summarized,
 * not the default (omitted) of these models, so that the client sees the thinking it pays for as
 * `reasoning_content` rather than a long silence; `display` changes nothing billed.
 */
function adaptiveThinking(
  request: ChatRequest,
  rules: ClaudeRules,
  upstreamModel: string,
): Record<string, unknown> | null {
  if (rules.thinking === "budget") return null;
  if (claudeThinks(request, rules, upstreamModel)) {
    return { type: "adaptive", display: "summarized" };
  }
  // A model that thinks by default is told not to; one that thinks on request is not asked.
  return rules.thinking === "adaptive_by_default" ? { type: "disabled" } : null;
}

/**
 * How `response_format` goes on this route: as the tool whose input is the answer, or, where the
 * model cannot be made to call a tool, a strict schema as `output_config.format`. Anything else
 * keeps the tool, offered unforced: Anthropic's formats take no schema that allows any object or
 * leaves `additionalProperties` open, which OpenAI's strict schemas never do and its others may,
 * nor a recursive one.
 */
function responseShape(
  up: UpstreamRequest,
  rules: ClaudeRules,
): { tool: { name: string; schema: unknown } | null; format: Record<string, unknown> | null } {
  const schema = rules.forcedToolChoice ? null : strictSchema(up.request);
  if (schema && !isRecursive(schema)) return { tool: null, format: schema };
  return { tool: responseTool(up.request), format: null };
}

/** The tool standing in for `response_format` on this route (responseShape), or null. */
export function answerTool(up: UpstreamRequest): { name: string; schema: unknown } | null {
  return responseShape(up, routeRules(up)).tool;
}

/**
 * The tool that would stand in for `response_format`, whose input is the answer; null without one.
 * The input bound counts it on every route: what `output_config.format` adds instead (the schema,
 * and the instructions Anthropic gives the model about it) stays below it.
 */
export function responseTool(request: ChatRequest): { name: string; schema: unknown } | null {
  const format = request.params.response_format;
  if (!format || format.type === "text") return null;
  const taken = new Set([
    ...(request.params.tools ?? []).map((t) => t.function.name),
    ...historyToolNames(request),
  ]);
  const base = format.type === "json_schema" ? format.json_schema.name : "json_response";
  let name = base;
  // Anthropic takes names of at most 64 characters, and a schema may be named after a tool at
  // that length (OpenAI takes both): the base is shortened to make room for the suffix, which
  // counts up so that a shortened name that is taken too is never tried again.
  for (let n = 1; taken.has(name); n++) {
    const suffix = n === 1 ? "_response" : `_response_${n}`;
    name = base.slice(0, MAX_TOOL_NAME - suffix.length) + suffix;
  }
  const schema = format.type === "json_schema"
    ? format.json_schema.schema ?? { type: "object" }
    : { type: "object" };
  return { name, schema };
}

/**
 * The user turn sent before a conversation that opens with the assistant (a chat UI's greeting):
 * Messages must open with a user turn. The input bound holds it (input_bound.ts).
 */
export const OPENING_USER_TEXT = ".";

/** Blank text is not sent: Anthropic refuses a text block of only whitespace. */
function textBlock(part: TextContentPart): Block | null {
  if (isBlank(part.text)) return null;
  return part.cache_control
    ? { type: "text", text: part.text, cache_control: part.cache_control }
    : { type: "text", text: part.text };
}

function textBlocks(content: ChatMessage["content"]): Block[] {
  if (content === null || content === undefined) return [];
  if (typeof content === "string") return isBlank(content) ? [] : [{ type: "text", text: content }];
  const out: Block[] = [];
  for (const part of content) {
    if (part.type === "text") {
      const block = textBlock(part);
      if (block) out.push(block);
    } else if (part.type === "refusal" && !isBlank(part.refusal)) {
      out.push({ type: "text", text: part.refusal });
    }
  }
  return out;
}

function userBlocks(m: Extract<ChatMessage, { role: "user" }>): Block[] {
  if (typeof m.content === "string") return textBlocks(m.content);
  const out: Block[] = [];
  for (const part of m.content) {
    if (part.type === "text") {
      const block = textBlock(part);
      if (block) out.push(block);
    } else if (part.type === "image_url") {
      out.push(imageBlock(part));
    } else if (part.type === "file") {
      out.push(documentBlock(part));
    }
    // Audio parts are refused before the request gets here (assertSupported).
  }
  return out;
}

/** A PDF as Anthropic's document block; its file name, where given, as the block's title. */
function documentBlock(part: FileContentPart): Block {
  return {
    type: "document",
    source: { type: "base64", media_type: "application/pdf", data: pdfBase64(part) },
    ...(part.file.filename ? { title: part.file.filename } : {}),
    ...(part.cache_control ? { cache_control: part.cache_control } : {}),
  };
}

function imageBlock(part: ImageContentPart): Block {
  const { url } = part.image_url;
  const cache = part.cache_control ? { cache_control: part.cache_control } : {};
  if (!url.startsWith("data:")) return { type: "image", source: { type: "url", url }, ...cache };
  // Claude refuses a media type its bytes are not; the request's may be any image type (readImageSize).
  const { base64 } = parseImageDataUrl(url);
  const mediaType = imageMediaTypeOf(base64) ?? readImageSize(url).mediaType;
  return {
    type: "image",
    source: { type: "base64", media_type: mediaType, data: base64 },
    ...cache,
  };
}

/**
 * The id each message's tool calls (an assistant's) or tool result (a tool message's, one) is
 * sent with, by message index; none for other messages. Anthropic refuses an id outside
 * `^[a-zA-Z0-9_-]+$` (Kimi's `functions.get_weather:0`) or one used twice in a request (`call_0`
 * in every turn), both of which OpenAI takes: other characters become `_`, and an id already sent
 * takes a suffix. A tool result answers a call of the assistant message just before it
 * (checkConversation), so it takes the id that call is sent with.
 */
export function toolUseIds(messages: readonly ChatMessage[]): (readonly string[])[] {
  const sent = new Set<string>();
  // Per base, the suffix to try next: ten thousand ids that all become `_` took each a search
  // from `_2` on, minutes of one thread.
  const nextSuffix = new Map<string, number>();
  let answered = new Map<string, string>();
  return messages.map((m) => {
    if (m.role === "tool") return [answered.get(m.tool_call_id) ?? m.tool_call_id];
    if (m.role !== "assistant") return [];
    answered = new Map();
    return (m.tool_calls ?? []).map((call) => {
      const base = call.id.replace(/[^a-zA-Z0-9_-]/g, "_");
      let id = base;
      let n = nextSuffix.get(base) ?? 2;
      for (; sent.has(id); n++) id = `${base}_${n}`;
      nextSuffix.set(base, n);
      sent.add(id);
      answered.set(call.id, id);
      return id;
    });
  });
}

/**
 * An assistant message's blocks; when this request thinks, the thinking blocks the route's model
 * (`signer`) signed for it (its `reasoning_details`) first, as Claude wrote them. They are not
 * sent otherwise: only a request that thinks takes them.
 */
function assistantBlocks(
  m: Extract<ChatMessage, { role: "assistant" }>,
  signer: string | null,
  ids: readonly string[],
): Block[] {
  const text = textBlocks(m.content);
  if (text.length === 0 && !m.tool_calls?.length && !(m.refusal && !isBlank(m.refusal))) return [];
  const out: Block[] = signer === null ? [] : claudeThinkingBlocks(m.reasoning_details, signer);
  out.push(...text);
  if (text.length === 0 && m.refusal && !isBlank(m.refusal)) {
    out.push({ type: "text", text: m.refusal });
  }
  for (const [k, call] of (m.tool_calls ?? []).entries()) {
    out.push({
      type: "tool_use",
      id: ids[k],
      name: toolNameAsSent(call.function.name),
      input: toolInput(call.function.arguments),
    });
  }
  return out;
}

/**
 * A call's arguments as Messages takes them: an object, written out again by JSON.stringify (so
 * `1e20` is sent as 21 digits). Arguments are checked to be a JSON object before the request is
 * accepted (assertSupported).
 */
export function toolInput(args: string): Record<string, unknown> {
  if (args.trim() === "") return {};
  return JSON.parse(args);
}

/** Whether an assistant message has anything to send: text, a refusal, or tool calls. */

/**
 * Whether the conversation's first turn that is sent is the assistant's, so that the opening user
 * turn goes before it. Blank messages are not sent (see turns), and neither are system messages.
 */
export function opensWithAssistant(messages: readonly ChatMessage[]): boolean {
  for (const m of messages) {
    if (m.role === "tool") return false;
    if (m.role === "user" && userMessageSaysSomething(m)) return false;
    if (m.role === "assistant" && assistantMessageSaysSomething(m)) return true;
  }
  return false;
}

/**
 * The conversation as alternating turns; tool results open the user turn they belong to. A message
 * left with nothing to send (blank text, OpenAI's "" beside tool calls) is dropped, which Anthropic
 * requires, and the turns on either side of it merge. The request was refused before it got here
 * if nothing at all is left to ask (assertSupported). `signer`: the model whose thinking blocks
 * assistant turns carry, null for none (assistantBlocks).
 */
function turns(messages: readonly ChatMessage[], signer: string | null): Turn[] {
  const out: Turn[] = [];
  if (opensWithAssistant(messages)) {
    out.push({ role: "user", blocks: [{ type: "text", text: OPENING_USER_TEXT }] });
  }
  const push = (role: Turn["role"], blocks: Block[]) => {
    if (blocks.length === 0) return;
    const last = out.at(-1);
    if (last && last.role === role) {
      // Tool results come first in a user turn, as Messages requires.
      // Likewise thinking blocks in an assistant turn, which Claude checks opens with them.
      const leading = blocks[0]?.type === "tool_result"
        ? "tool_result"
        : isThinking(blocks[0])
        ? "thinking"
        : null;
      if (leading) {
        const lead = leading === "tool_result"
          ? (b: Block) => b.type === "tool_result"
          : isThinking;
        const firstOther = last.blocks.findIndex((b) => !lead(b));
        const count = blocks.findIndex((b) => !lead(b));
        if (firstOther !== -1) {
          last.blocks.splice(firstOther, 0, ...blocks.slice(0, count === -1 ? undefined : count));
          if (count !== -1) last.blocks.push(...blocks.slice(count));
          return;
        }
      }
      last.blocks.push(...blocks);
    } else out.push({ role, blocks });
  };
  const ids = toolUseIds(messages);
  for (const [i, m] of messages.entries()) {
    switch (m.role) {
      case "system":
      case "developer":
        break;
      case "user":
        push("user", userBlocks(m));
        break;
      case "assistant":
        push("assistant", assistantBlocks(m, signer, ids[i]));
        break;
      case "tool":
        push("user", [{
          type: "tool_result",
          tool_use_id: ids[i][0],
          content: toolResultContent(m),
        }]);
        break;
    }
  }
  // A final assistant turn is a prefill, which Anthropic refuses with trailing whitespace; the
  // model writes the whitespace itself when it goes on.
  const tail = out.at(-1)?.role === "assistant" ? out.at(-1)!.blocks.at(-1) : undefined;
  if (tail?.type === "text") tail.text = (tail.text as string).trimEnd();
  return out;
}

function isThinking(block: Block | undefined): boolean {
  return block?.type === "thinking" || block?.type === "redacted_thinking";
}

/**
 * A tool result's content: one string, as clients mostly send it; parts as blocks (text, images
 * and documents, which a tool result takes), so that a `cache_control` on one (an agent loop's
 * usual cache breakpoint) is kept and the parts are not run together.
 */
function toolResultContent(m: Extract<ChatMessage, { role: "tool" }>): string | Block[] {
  if (typeof m.content === "string") return m.content;
  const blocks: Block[] = [];
  for (const part of m.content) {
    if (part.type === "image_url") blocks.push(imageBlock(part));
    else if (part.type === "file") blocks.push(documentBlock(part));
    else {
      const block = textBlock(part);
      if (block) blocks.push(block);
    }
  }
  if (blocks.length > 1 || blocks.some((b) => b.cache_control || b.type !== "text")) return blocks;
  return contentText(m.content);
}

/** A turn of plain text is sent as one string, as clients write it; anything else as blocks. */
function turnContent(turn: Turn): string | Block[] {
  const plain = turn.blocks.every((b) => b.type === "text" && !b.cache_control);
  return plain ? turn.blocks.map((b) => b.text as string).join("\n\n") : turn.blocks;
}

function systemPrompt(messages: readonly ChatMessage[]): string | Block[] | undefined {
  const blocks: Block[] = [];
  for (const m of messages) {
    if (m.role === "system" || m.role === "developer") blocks.push(...textBlocks(m.content));
  }
  if (blocks.length === 0) return undefined;
  return blocks.some((b) => b.cache_control)
    ? blocks
    : blocks.map((b) => b.text as string).join("\n\n");
}

/**
 * The names of the tools a conversation's calls use, when the request offers no tools: Anthropic
 * refuses `tool_use` and `tool_result` blocks in a request that defines none, where OpenAI takes
 * them (an agent's summary step, a client that turns its tools off). They are declared with the
 * least schema and `tool_choice: none` (toolChoice), so that the model cannot call them.
 */
function historyToolNames(request: ChatRequest): string[] {
  if (request.params.tools?.length) return [];
  const names = new Set<string>();
  for (const m of request.messages) {
    if (m.role !== "assistant") continue;
    for (const call of m.tool_calls ?? []) names.add(toolNameAsSent(call.function.name));
  }
  return [...names];
}

/**
 * A called function's name as Anthropic takes it (`^[a-zA-Z0-9_-]{1,64}$`): a conversation carried
 * over from a server that takes others (`weather.get`) is otherwise refused after the reservation.
 * A declared tool's name already is one (chat_request.ts checks it); the history's may not be.
 */
export function toolNameAsSent(name: string): string {
  return name.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, MAX_TOOL_NAME) || "_";
}

/**
 * A Messages request sent again without strict tools (the same schemas, so within what was held
 * for), or null when none went strict.
 */
export function withoutStrictTools(body: Record<string, unknown>): Record<string, unknown> | null {
  const tools = body.tools as Record<string, unknown>[] | undefined;
  if (!tools?.some((t) => t.strict === true)) return null;
  return { ...body, tools: tools.map(({ strict: _, ...tool }) => tool) };
}

/**
 * The tools of the Messages request, the answer tool standing in for `response_format` last; the
 * input bound counts these very values, so that what is sent is what is reserved for.
 * `strictTools`: whether the route's model takes strict tools (ClaudeRules).
 */
export function messagesTools(
  request: ChatRequest,
  answerTool: { name: string; schema: unknown } | null = responseTool(request),
  strictTools = false,
): Record<string, unknown>[] {
  const offered = offeredTools(request).map((t) => {
    const schema = objectSchema(t.function.parameters);
    // A strict tool's schema is compiled into a grammar as an output format's is, and takes the
    // same subset: it is rewritten the same way, and one that refers to itself goes unstrict, as a
    // recursive response format goes as the answer tool. A model without strict tools is sent
    // none, as it is sent no output format: its calls are then held to nothing.
    const strict = strictTools && t.function.strict === true && !isRecursive(schema);
    return { tool: t, schema, formatted: strict ? formatSchema(schema) : null };
  });
  // Past Anthropic's limits on a request's strict schemas the whole request is a 400: strictness
  // is a guarantee on top of a call that works without it (OpenAI's agent SDKs mark every tool
  // strict, each optional field a union), so then none goes strict rather than none going at all.
  const strictFits = withinStrictLimits(offered.flatMap((o) => o.formatted ? [o.formatted] : []));
  const tools: Record<string, unknown>[] = offered.map(({ tool: t, schema, formatted }) => {
    const strict = formatted !== null && strictFits;
    return {
      name: t.function.name,
      ...(t.function.description ? { description: t.function.description } : {}),
      input_schema: strict ? formatted : schema,
      ...(strict ? { strict: true } : {}),
      ...(t.cache_control ? { cache_control: t.cache_control } : {}),
    };
  });
  for (const name of historyToolNames(request)) {
    tools.push({ name, input_schema: { type: "object" } });
  }
  if (answerTool) {
    tools.push({
      name: answerTool.name,
      description: "Answer with this tool: its input is the response, in the requested format.",
      input_schema: objectSchema(answerTool.schema),
    });
  }
  return tools;
}

/**
 * A tool's schema as Anthropic takes it: `type: "object"` is required there, while OpenAI takes
 * `{}` or a schema without a type (its default for a function without parameters) as an object.
 */
function objectSchema(schema: unknown): unknown {
  if (schema === undefined || schema === null) return { type: "object", properties: {} };
  if (typeof schema !== "object" || Array.isArray(schema) || "type" in schema) return schema;
  return { type: "object", properties: {}, ...schema };
}

/** The Messages request for a compatible one. */
export function messagesRequest(up: UpstreamRequest, stream: boolean): Record<string, unknown> {
  const { request } = up;
  const p = request.params;
  const rules = routeRules(up);
  const signer = up.model.upstreamModel;
  const budget = thinkingBudget(request, up.maxTokens, rules, signer);
  const adaptive = adaptiveThinking(request, rules, signer);
  const thinks = budget !== null || adaptive?.type === "adaptive";
  const body: Record<string, unknown> = {
    model: up.model.upstreamModel,
    max_tokens: up.maxTokens,
    messages: turns(request.messages, thinks ? signer : null).map((t) => ({
      role: t.role,
      content: turnContent(t),
    })),
  };
  const system = systemPrompt(request.messages);
  if (system !== undefined) body.system = system;
  // Anthropic refuses a stop sequence of only whitespace ("\n" is a common OpenAI one), where the
  // model would stop at it; such sequences are left out.
  const stops = (typeof p.stop === "string" ? [p.stop] : p.stop ?? []).filter((s) => !isBlank(s));
  if (stops.length) body.stop_sequences = stops;
  // Models that take no sampling parameters were sent none but their defaults (assertSupported),
  // which are left out.
  if (rules.sampling) {
    // Anthropic's temperature runs from 0 to 1; OpenAI's to 2.
    if (typeof p.temperature === "number") body.temperature = Math.min(1, p.temperature);
    // Claude 4.5 models refuse temperature and top_p together; temperature is the one clients mean.
    else if (typeof p.top_p === "number") body.top_p = p.top_p;
    if (typeof p.top_k === "number") body.top_k = p.top_k;
  }
  if (typeof p.user === "string") body.metadata = { user_id: p.user };

  if (budget !== null) body.thinking = { type: "enabled", budget_tokens: budget };
  if (adaptive) body.thinking = adaptive;
  const outputConfig: Record<string, unknown> = {};
  const effort = p.reasoning_effort && EFFORT[p.reasoning_effort];
  if (rules.thinking !== "budget" && effort) outputConfig.effort = effort;
  const { tool: answer, format } = responseShape(up, rules);
  if (format) outputConfig.format = { type: "json_schema", schema: formatSchema(format) };
  if (Object.keys(outputConfig).length) body.output_config = outputConfig;

  const tools = messagesTools(request, answer, rules.strictTools);
  if (tools.length) body.tools = tools;
  const choice = toolChoice(
    request,
    answer?.name ?? null,
    budget !== null || !rules.forcedToolChoice,
  );
  if (choice) body.tool_choice = choice;
  if (stream) body.stream = true;
  return body;
}

/** The tool_choice; `unforced` where no tool may be forced (a thinking budget, or the model). */
function toolChoice(
  request: ChatRequest,
  answerTool: string | null,
  unforced: boolean,
): Record<string, unknown> | null {
  const p = request.params;
  const noParallel = p.parallel_tool_calls === false ? { disable_parallel_tool_use: true } : {};
  const choice = plainToolChoice(p.tool_choice);
  // Tools declared only for the conversation's calls (historyToolNames) may not be called.
  const historyOnly = historyToolNames(request).length > 0;
  if (answerTool) {
    // The answer tool is forced (or any tool, with others). `none` forbids the client's tools,
    // not the format: OpenAI still answers in it, so the answer tool is forced alone (Claude's
    // `none` would forbid it too). Where no tool may be forced, the answer tool is offered (auto),
    // except beside client tools under `none` or tools declared for the conversation's calls only:
    // none of those may be called, so the format goes unenforced.
    if (unforced) {
      return (choice === "none" && p.tools?.length) || historyOnly
        ? { type: "none" }
        : { type: "auto", ...noParallel };
    }
    if (!p.tools?.length || choice === "none") {
      return { type: "tool", name: answerTool, ...noParallel };
    }
    if (choice && typeof choice === "object" && choice.type === "function") {
      return { type: "tool", name: choice.function.name, ...noParallel };
    }
    return { type: "any", ...noParallel };
  }
  if (historyOnly) return { type: "none" };
  if (!p.tools?.length) return null;
  if (choice === "none") return { type: "none" };
  if (choice === "required") return { type: "any", ...noParallel };
  if (choice && typeof choice === "object" && choice.type === "function") {
    return { type: "tool", name: choice.function.name, ...noParallel };
  }
  return { type: "auto", ...noParallel };
}
