/**
 * Upper bounds of what a provider bills as input for a request: message text, tool calls and
 * results, tool definitions, response schemas and images, by each provider's published rules.
 * One function per provider kind; the same number serves the context check, the tokens-per-minute
 * limit and the reservation, so that the reservation covers whatever the provider can bill.
 */
import { utf8Length } from "@/lib/core/mod.ts";
import {
  HIGH_RES_IMAGE_EDGE,
  type ImagePatches,
  type Model,
  type Tokenizer,
} from "@/lib/catalog/mod.ts";
import {
  type ChatMessage,
  type ChatRequest,
  hasDocuments,
  imagePartsOf,
  type ProviderKind,
  type ToolDefinition,
} from "./chat_request.ts";
import { claudeTokenBound, claudeTokenBoundOfJson, jsonIndentation } from "./claude_tokens.ts";
import { readImageSize } from "./image_size.ts";
import { claudeThinkingBlocks, openAiReasoningItems } from "./reasoning_details.ts";
import {
  messagesTools,
  OPENING_USER_TEXT,
  opensWithAssistant,
  toolInput,
  toolNameAsSent,
  toolUseIds,
} from "./providers/anthropic/request.ts";
import { toolImagesInUserMessages } from "./providers/openai/request.ts";
import {
  CountCache,
  countExactTokensWith,
  countSimulatedTokens,
  countTokensWith,
} from "./tokens.ts";

/** OpenAI's chat framing, as its cookbook counts it: per message, and the primed reply. */
const OPENAI_TOKENS_PER_MESSAGE = 4;
const OPENAI_TOKENS_PER_REPLY = 3;
/** The cookbook's overheads for function definitions (12 once, 7 per function) with room over. */
const OPENAI_TOOLS_OVERHEAD = 16;
const OPENAI_TOKENS_PER_TOOL = 10;
const OPENAI_TOKENS_PER_TOOL_CALL = 10;
const OPENAI_SCHEMA_OVERHEAD = 16;
/**
 * A text part after the first: whatever separates it from the one before, or what gluing it to
 * that one costs where the server joins a message's parts with nothing between (vLLM's harmony
 * path does): a cut inside a word merges differently, up to 2 tokens more in a search for the
 * worst; 1,000 parts of one long word were held 859 tokens under their joined count.
 */
const OPENAI_TOKENS_PER_PART = 4;
/**
 * With `utf8_bytes` (open models behind the OpenAI kind), allowances for their chat templates
 * over the text's bytes: Llama 3.1's dated system block (about 20 tokens) with begin-of-text and
 * the reply's header, about 5 tokens of headers per message, and Qwen's tool instructions (about
 * 90 tokens), each with room over. A template that adds more is not covered.
 */
const OPEN_TEMPLATE_BASE_TOKENS = 64;
const OPEN_TEMPLATE_TOKENS_PER_MESSAGE = 8;
const OPEN_TEMPLATE_TOOLS_TOKENS = 256;
/**
 * Llama 3.x's chat templates write each tool as `tojson(indent=4)`: a member a line, four spaces
 * a level, whitespace the compact JSON's bytes leave out and a byte-level tokenizer may bill a
 * token a byte. Tools of arrays 55 deep around 3,000 `[[]]` were held at 15,548 tokens and billed
 * 36,439 by Llama 3's own tokenizer.
 */
const OPEN_TEMPLATE_TOOL_INDENT = 4;

/**
 * OpenAI's harmony format (gpt-oss), as `openai/harmony` renders a chat: a system message of its
 * own (identity, knowledge cutoff, date, reasoning level, channels: about 70 tokens) and a developer
 * message's headers, before any text; `<|start|>`, role, channel and `<|end|>` around each message
 * (about 6), a tool result headed by its function's name rather than the call's id (counted apart);
 * tools as a commented namespace of declarations (about 20, and a dozen per tool). Each with room
 * over.
 */
const HARMONY_BASE_TOKENS = 128;
const HARMONY_TOKENS_PER_MESSAGE = 12;
const HARMONY_TOOLS_TOKENS = 64;
/**
 * Over each element of a tool's schema as harmony writes it in TypeScript (`openai/harmony`'s
 * json_schema_to_typescript), where an element may be a line of its own (a `oneOf` variant's
 * ` | any`, an example's `// - ""`: 3 tokens), indented by its depth (up to 2 more, a token to
 * spare), which held `{}` at a token and `""` at three: a property of 3,000 empty variants was
 * held at 3,267 tokens and billed 9,113.
 */
const HARMONY_TOKENS_PER_SCHEMA_ELEMENT = 5;
/**
 * Over each variant of a `oneOf` or `anyOf` in a tool's schema on OpenAI's own models: OpenAI
 * published harmony as its models' format, which writes each variant on a line of its own (as
 * HARMONY_TOKENS_PER_SCHEMA_ELEMENT); a property of 3,000 empty variants was held at a third of
 * what harmony renders. Only the variants: other elements it writes inline, as counted.
 */
const OPENAI_TOKENS_PER_SCHEMA_VARIANT = 5;

/** Framing over the text, by the chat template a route's server renders. */
const FRAMING = {
  openai: {
    base: OPENAI_TOKENS_PER_REPLY,
    perMessage: OPENAI_TOKENS_PER_MESSAGE,
    tools: OPENAI_TOOLS_OVERHEAD,
    schema: { perElement: 0, perVariant: OPENAI_TOKENS_PER_SCHEMA_VARIANT },
  },
  harmony: {
    base: HARMONY_BASE_TOKENS,
    perMessage: HARMONY_TOKENS_PER_MESSAGE,
    tools: HARMONY_TOOLS_TOKENS,
    schema: { perElement: HARMONY_TOKENS_PER_SCHEMA_ELEMENT, perVariant: 0 },
  },
  open: {
    base: OPEN_TEMPLATE_BASE_TOKENS,
    perMessage: OPEN_TEMPLATE_TOKENS_PER_MESSAGE,
    tools: OPEN_TEMPLATE_TOOLS_TOKENS,
    // Held at the bytes of their indented JSON (openTemplateToolBytes) as well.
    schema: { perElement: 0, perVariant: 0 },
  },
} as const;

/** OpenAI's image rule: a 2048-px square box, then the short side to 768 px, in 512-px tiles. */
const OPENAI_IMAGE_BOX = 2048;
const OPENAI_IMAGE_SHORT_SIDE = 768;
const OPENAI_TILE = 512;
/** A picture twice as long as wide, the size that gives the most tiles after the scaling: 8. */
const OPENAI_MAX_TILES = 8;
/** A patch is 32 × 32 pixels of the image as sent. */
const OPENAI_PATCH = 32;

/**
 * Anthropic's framing is not published; its documented examples bill about a dozen tokens for a
 * one-line message. These allowances sit above every count its documentation shows.
 */
const ANTHROPIC_TOKENS_PER_MESSAGE = 10;
const ANTHROPIC_BASE_TOKENS = 20;
/**
 * The tool-use system prompt Anthropic adds when tools are offered: 346 tokens on current models,
 * up to 530 on older ones (its pricing page lists them); the bound takes the largest with room.
 */
const ANTHROPIC_TOOLS_SYSTEM_PROMPT = 600;
const ANTHROPIC_TOKENS_PER_TOOL_BLOCK = 20;
/**
 * A text part after the first, which the adapter sends after a blank line or as a block of its
 * own: the blank line, the cut between two bounds (at most 7 tokens, see claude_tokens.ts) and a
 * block's framing.
 */
const ANTHROPIC_TOKENS_PER_PART = 10;
/**
 * An image block beyond its pixels' tokens: count_tokens measures 65 (Haiku 4.5) to 77 (Claude 5.5)
 * more for a message with one than without, which the documented formula leaves out; without it,
 * hundreds of one-pixel images were held at a token each.
 */
const ANTHROPIC_TOKENS_PER_IMAGE = 100;

/**
 * Reasoning a provider sealed (a signature, encrypted content, as base64) and bills as input when
 * it is sent back: a token for every byte it decodes to. The bound assumes every billed token of
 * the reasoning inside takes at least a byte there (a real OpenAI item takes 6 to 30).
 */
function sealedTokens(base64: string): number {
  return Math.ceil(base64.length * 3 / 4);
}

/**
 * A thinking block sent back to Claude (reasoning_details.ts), which it bills as input in the turn
 * of a tool loop, and on newer models in earlier turns too: its text, and a token for every byte
 * its signature (or a redacted block's data) decodes to. The signature carries the thinking the
 * model wrote, encrypted, of which the text is at most a summary (or nothing, where the display is
 * omitted); the bound assumes every billed token of it takes at least a byte there.
 */
function claudeThinkingTokens(m: Extract<ChatMessage, { role: "assistant" }>): number {
  let tokens = 0;
  for (const block of claudeThinkingBlocks(m.reasoning_details)) {
    const sealed = block.type === "thinking" ? block.signature : block.data;
    tokens += ANTHROPIC_TOKENS_PER_PART + sealedTokens(sealed);
    if (block.type === "thinking") tokens += claudeTokenBound(block.thinking);
  }
  return tokens;
}
/**
 * Anthropic scales an image to fit the model's long edge (1568 px, 2576 from Opus 4.7: the route's
 * `claude.imageLongEdge`) and bills width × height / 750; its newer vision docs describe 28-px
 * patches instead (the image padded to multiples of 28, a token a patch), which bill a thin image
 * far more (1 × 1568 px: 56 patches, 3 by the area). The bound takes the larger of the two, and
 * no cap on megapixels below the edge's square.
 */
const ANTHROPIC_PIXELS_PER_TOKEN = 750;
const ANTHROPIC_PATCH = 28;

export function openAiImageTokens(
  size: { width: number; height: number } | null,
  detail: "auto" | "low" | "high" | undefined,
  model: Pick<Model, "imageBaseTokens" | "imageTileTokens" | "imagePatches">,
): number {
  return Math.max(
    tiledImageTokens(size, detail, model),
    model.imagePatches ? patchedImageTokens(size, model.imagePatches) : 0,
  );
}

/** An image read at its own size, whatever the detail asked: its patches, up to the most read. */
function patchedImageTokens(
  size: { width: number; height: number } | null,
  patches: ImagePatches,
): number {
  const count = size
    ? Math.min(
      patches.most,
      Math.ceil(size.width / OPENAI_PATCH) * Math.ceil(size.height / OPENAI_PATCH),
    )
    : patches.most;
  return Math.ceil(count * patches.multiplier);
}

function tiledImageTokens(
  size: { width: number; height: number } | null,
  detail: "auto" | "low" | "high" | undefined,
  model: Pick<Model, "imageBaseTokens" | "imageTileTokens">,
): number {
  if (detail === "low") return model.imageBaseTokens;
  if (!size) return model.imageBaseTokens + model.imageTileTokens * OPENAI_MAX_TILES;
  let { width, height } = size;
  const box = Math.min(1, OPENAI_IMAGE_BOX / Math.max(width, height));
  width *= box;
  height *= box;
  const short = Math.min(1, OPENAI_IMAGE_SHORT_SIDE / Math.min(width, height));
  width *= short;
  height *= short;
  const tiles = Math.ceil(width / OPENAI_TILE) * Math.ceil(height / OPENAI_TILE);
  return model.imageBaseTokens + model.imageTileTokens * tiles;
}

export function anthropicImageTokens(
  size: { width: number; height: number } | null,
  longEdge: number,
): number {
  const { width, height } = size ?? { width: longEdge, height: longEdge };
  const scale = Math.min(1, longEdge / Math.max(width, height));
  // Rounded up at each step, so the bound never falls below the provider's own rounding.
  const w = Math.ceil(width * scale);
  const h = Math.ceil(height * scale);
  return Math.max(
    Math.ceil((w * h) / ANTHROPIC_PIXELS_PER_TOKEN),
    Math.ceil(w / ANTHROPIC_PATCH) * Math.ceil(h / ANTHROPIC_PATCH),
  );
}

/**
 * What the images whose size we cannot read (URLs the provider fetches itself) may cost at most on
 * a route of this kind: an exact count (Anthropic's count_tokens, OpenAI's input token count) saw
 * them as they were when it fetched them, and the call fetches them again, when they may be other
 * images.
 */
export function unreadImageTokens(
  kind: ProviderKind,
  request: ChatRequest,
  model: RouteRules,
): number {
  let total = 0;
  for (const m of request.messages) {
    for (const part of imagePartsOf(m)) {
      if (imageSizeOf(part.image_url.url)) continue;
      total += kind === "anthropic"
        ? anthropicImageTokens(null, imageLongEdgeOf(model))
        : openAiImageTokens(null, part.image_url.detail, model);
    }
  }
  return total;
}

function imageSizeOf(url: string): { width: number; height: number } | null {
  return url.startsWith("data:") ? readImageSize(url) : null;
}

/** Tool definitions as the provider reads them (our cache_control extension is not sent). */
function toolsValue(tools: readonly ToolDefinition[]) {
  return tools.map((t) => ({ type: t.type, function: t.function }));
}

/**
 * Over each string, number and key of a tool definition or a response schema: its quotes and
 * separator, or the `| ` between enum values, a property's `?: `, a description's `// `.
 */
const OPENAI_TOKENS_PER_JSON_ELEMENT = 3;
/**
 * Over each line break in one: a description rendered as comments (harmony's) starts every line
 * with `// `, and its line breaks no longer run together into one token. A description of 60,000
 * blank lines was held as 60,000 tokens and billed 120,000.
 */
const TOKENS_PER_COMMENT_LINE = 3;

/**
 * Tokens of a tool definition or response schema, whatever layout the provider renders it in.
 * OpenAI renders them as TypeScript-like declarations (an enum as `"a" | "b"`; its cookbook counts 3
 * tokens per enum value besides the value's own), while compact JSON runs short values together
 * into far fewer tokens: 42,000 empty enum values were held as 23,000 tokens and billed 126,000.
 * So every string, number and key is counted on its own with its punctuation, and the bound is
 * never below the compact JSON's own count.
 */
function jsonTokenBound(
  value: unknown,
  count: TextCounter,
  counter: string,
  limit: number,
  /** Tokens over elements beyond their own, where a renderer gives them a line (SchemaLines). */
  lines: SchemaLines = NO_LINES,
): number {
  const json = JSON.stringify(value);
  // An agent loop sends the same tools every turn; walking them costs far more than one count.
  // Cached per way of counting: a hold's count beyond the merge ration is no exact bill. A count
  // past the limit may have stopped there: not kept.
  const key = `${counter}:${lines.perElement}:${lines.perVariant}\n${json}`;
  return jsonBounds.count(key, () => {
    const tokens = Math.max(count(json), elementTokens(value, count, limit, lines));
    return tokens > limit ? { count: tokens, exact: false } : tokens;
  });
}

/**
 * Tokens a renderer of a schema adds beyond its JSON's: over each element (not a key), and over
 * each variant of a `oneOf` or `anyOf` besides.
 */
interface SchemaLines {
  perElement: number;
  perVariant: number;
}

const NO_LINES: SchemaLines = { perElement: 0, perVariant: 0 };

const jsonBounds = new CountCache();

/** Stops once past `limit`: a schema of millions of elements is refused without counting each. */
function elementTokens(
  value: unknown,
  count: TextCounter,
  limit: number,
  lines: SchemaLines,
): number {
  const { perElement, perVariant } = lines;
  if (typeof value === "string") return stringTokens(value, count) + perElement;
  if (value === null || typeof value !== "object") {
    return count(String(value)) + OPENAI_TOKENS_PER_JSON_ELEMENT + perElement;
  }
  // A bracket or brace; the request's nesting depth is bounded, and so is this recursion.
  let tokens = 1 + perElement;
  if (Array.isArray(value)) {
    for (const item of value) {
      if (tokens > limit) return tokens;
      tokens += elementTokens(item, count, limit, lines);
    }
    return tokens;
  }
  for (const [key, item] of Object.entries(value)) {
    if (tokens > limit) return tokens;
    if (item === undefined) continue;
    tokens += stringTokens(key, count) + elementTokens(item, count, limit, lines);
    if ((key === "oneOf" || key === "anyOf") && Array.isArray(item)) {
      tokens += perVariant * item.length;
    }
  }
  return tokens;
}

function stringTokens(text: string, count: TextCounter): number {
  let lineBreaks = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 10 || code === 13) lineBreaks++;
  }
  return count(text) + OPENAI_TOKENS_PER_JSON_ELEMENT + TOKENS_PER_COMMENT_LINE * lineBreaks;
}

/**
 * The bytes of the tools as an open model's chat template writes them, each on its own and
 * indented (OPEN_TEMPLATE_TOOL_INDENT), counted without writing them: a deep schema indents every
 * line by four times its depth.
 */
function openTemplateToolBytes(tools: readonly ToolDefinition[]): number {
  let bytes = 0;
  for (const tool of toolsValue(tools)) {
    bytes += utf8Length(JSON.stringify(tool)) + jsonIndentation(tool, OPEN_TEMPLATE_TOOL_INDENT);
  }
  return bytes;
}

/**
 * What writing a tool's result as a JSON string adds to its text's bytes: Llama 3.x's templates
 * pass it through `tojson` (in Jinja a string is iterable, so a plain result takes the mapping's
 * branch), which quotes it and writes each control character as a six-byte `\u00XX` escape, a
 * quote, backslash or line break as two. 20,000 control characters were held at 20,107 tokens and
 * billed 60,060 by Llama 3's tokenizer.
 */
function jsonEscapeBytes(content: ChatMessage["content"]): number {
  const texts = typeof content === "string"
    ? [content]
    : (content ?? []).flatMap((part) => part.type === "text" ? [part.text] : []);
  let added = 0;
  for (const text of texts) added += utf8Length(JSON.stringify(text)) - utf8Length(text);
  return added;
}

/** The response schema the provider reads, or null when the request asks for none. */
function schemaValue(request: ChatRequest): unknown {
  const format = request.params.response_format;
  if (!format || format.type === "text") return null;
  if (format.type === "json_object") return {};
  return format.json_schema;
}

type TextCounter = (text: string) => number;

/**
 * A message's text parts, each counted on its own plus what joining them costs: counted glued
 * together, 30,000 one-character parts came to a twelfth of what Claude bills for them sent with a
 * blank line between each.
 */
function contentTokens(content: ChatMessage["content"], count: TextCounter, perPart: number) {
  if (typeof content === "string") return count(content);
  let tokens = 0;
  let parts = 0;
  for (const part of content ?? []) {
    const text = part.type === "text" ? part.text : part.type === "refusal" ? part.refusal : null;
    if (text === null) continue;
    tokens += count(text);
    parts++;
  }
  return tokens + perPart * Math.max(0, parts - 1);
}

/** A call's arguments and function name as the provider is sent them. */
interface SentCalls {
  arguments(args: string): string;
  name(name: string): string;
}
const asGiven: SentCalls = { arguments: (args) => args, name: (name) => name };
const asMessagesInput: SentCalls = {
  arguments: (args) => JSON.stringify(toolInput(args)),
  name: toolNameAsSent,
};

function messageTextTokens(
  m: ChatMessage,
  count: TextCounter,
  perPart: number,
  sent: SentCalls,
  /** The ids the calls or the tool result go with where they are not the client's (toolUseIds). */
  sentIds?: readonly string[],
): number {
  let tokens = contentTokens(m.content, count, perPart);
  if ("name" in m && m.name) tokens += count(m.name) + 1;
  if (m.role === "assistant") {
    if (m.refusal) tokens += count(m.refusal);
    for (const [k, call] of (m.tool_calls ?? []).entries()) {
      tokens += count(sentIds?.[k] ?? call.id) + count(sent.name(call.function.name)) +
        count(sent.arguments(call.function.arguments));
      // A server's own payload (Gemini's thought signature) goes back with the call.
      if (call.extra_content) tokens += count(JSON.stringify(call.extra_content));
    }
  }
  if (m.role === "tool") tokens += count(sentIds?.[0] ?? m.tool_call_id);
  return tokens;
}

/** What a route bills its input by: its image rule and chat template (a fallback has its own). */
export type RouteRules =
  & Pick<Model, "imageBaseTokens" | "imageTileTokens" | "imagePatches" | "chatTemplate">
  & { claude?: { imageLongEdge: number; strictTools: boolean } | null };

/** The longest edge a Claude route reads an image at; a route without rules, the most any does. */
function imageLongEdgeOf(route: RouteRules): number {
  return route.claude?.imageLongEdge ?? HIGH_RES_IMAGE_EDGE;
}

/**
 * The input OpenAI (or an OpenAI-compatible server) bills for this request, its text counted with
 * `tokenizer` (the route's: tokenizerOf) and framed as the route's chat template frames it.
 */
export function openAiInputBound(
  request: ChatRequest,
  model: RouteRules,
  tokenizer: Tokenizer,
  /**
   * A hold's count (rationed: see tokens.ts) by default; the simulator's bill, its own count of
   * the text (never above a hold's), by the same rules for the rest.
   */
  counting: "held" | "simulated" = "held",
  /**
   * Counting stops once the bound passes this (a context's room for the prompt): the number
   * returned is then above it, not the whole bound. A bill (the simulator's) has none; its count
   * before the call may.
   */
  limit = Infinity,
): number {
  const countTextTokens: TextCounter = counting === "held"
    ? (text) => countTokensWith(tokenizer, text, undefined, limit)
    : (text) => countSimulatedTokens(text, limit);
  // Open models' chat templates and harmony add more than OpenAI's framing: a dated system block
  // (Llama 3.1, harmony), a default system prompt (Qwen), tool instructions, channels.
  const framing = FRAMING[model.chatTemplate];
  let total = framing.base;
  // Harmony heads a tool's result with its function's name, which the call's id stands for here.
  const callNames = model.chatTemplate === "harmony" ? new Map<string, string>() : null;
  // As the chat kind sends them (a tool's images in a user message of their own), which bounds
  // the Responses kind's too (they stay in the tool's output there, without the labels).
  for (const m of toolImagesInUserMessages(request.messages)) {
    if (total > limit) return total;
    total += framing.perMessage +
      messageTextTokens(m, countTextTokens, OPENAI_TOKENS_PER_PART, asGiven);
    if (m.role === "assistant") total += OPENAI_TOKENS_PER_TOOL_CALL * (m.tool_calls?.length ?? 0);
    if (callNames && m.role === "assistant") {
      for (const call of m.tool_calls ?? []) callNames.set(call.id, call.function.name);
    }
    if (callNames && m.role === "tool") {
      total += countTextTokens(callNames.get(m.tool_call_id) ?? m.name ?? "");
    }
    if (model.chatTemplate === "open" && m.role === "tool") total += jsonEscapeBytes(m.content);
    for (const part of imagePartsOf(m)) {
      total += openAiImageTokens(imageSizeOf(part.image_url.url), part.image_url.detail, model);
    }
  }
  const tools = request.params.tools ?? [];
  if (tools.length) {
    const definitions = jsonTokenBound(
      toolsValue(tools),
      countTextTokens,
      `${tokenizer}:${counting}`,
      limit,
      framing.schema,
    );
    total += framing.tools + OPENAI_TOKENS_PER_TOOL * tools.length +
      (model.chatTemplate === "open"
        ? Math.max(definitions, openTemplateToolBytes(tools))
        : definitions);
    // Every tool is sent beside allowed tools; how OpenAI tells the model which it may call is
    // not published, so the list is held as if it were read as written.
    const choice = request.params.tool_choice;
    if (typeof choice === "object" && choice?.type === "allowed_tools") {
      total += jsonTokenBound(choice, countTextTokens, `${tokenizer}:${counting}`, limit);
    }
  }
  const schema = schemaValue(request);
  if (schema !== null) {
    total += OPENAI_SCHEMA_OVERHEAD +
      jsonTokenBound(schema, countTextTokens, `${tokenizer}:${counting}`, limit);
  }
  return total;
}

/**
 * The input Anthropic bills for this request translated to a Messages request. Each piece of text
 * is bounded on its own; the bound of a whole exceeds the sum of its parts' by at most 7 tokens per
 * cut (see claude_tokens.ts), which the per-message and per-block allowances cover.
 */
export function anthropicInputBound(
  request: ChatRequest,
  imageLongEdge: number,
  /** Whether the route's model takes strict tools, whose schemas are sent rewritten. */
  strictTools: boolean,
): number {
  let total = ANTHROPIC_BASE_TOKENS;
  const ids = toolUseIds(request.messages);
  for (const [i, m] of request.messages.entries()) {
    total += ANTHROPIC_TOKENS_PER_MESSAGE +
      messageTextTokens(m, claudeTokenBound, ANTHROPIC_TOKENS_PER_PART, asMessagesInput, ids[i]);
    if (m.role === "assistant") {
      total += ANTHROPIC_TOKENS_PER_TOOL_BLOCK * (m.tool_calls?.length ?? 0) +
        claudeThinkingTokens(m);
    }
    if (m.role === "tool") total += ANTHROPIC_TOKENS_PER_TOOL_BLOCK;
    for (const part of imagePartsOf(m)) {
      total += ANTHROPIC_TOKENS_PER_IMAGE +
        anthropicImageTokens(imageSizeOf(part.image_url.url), imageLongEdge);
    }
  }
  // A conversation that opens with the assistant is sent after a user turn of our own.
  if (opensWithAssistant(request.messages)) {
    total += ANTHROPIC_TOKENS_PER_MESSAGE + claudeTokenBound(OPENING_USER_TEXT);
  }
  // The tools exactly as sent: the answer tool's fixed description and the default input schema
  // of a tool without parameters are billed too.
  const tools = messagesTools(request, undefined, strictTools);
  if (tools.length) {
    total += ANTHROPIC_TOOLS_SYSTEM_PROMPT + ANTHROPIC_TOKENS_PER_TOOL_BLOCK * tools.length +
      claudeTokenBoundOfJson(tools);
  }
  return total;
}

/**
 * The bound for one route (its provider's kind, its tokenizer); the simulator bills by OpenAI's
 * rules. Assistants' reasoning is counted where the provider is sent it back. A request with a PDF
 * has none short of the provider's own count (Infinity): a page bills its text, which may be
 * compressed without limit in the file, and an image of itself.
 */
export function inputBound(
  provider: {
    kind: ProviderKind;
    forwardReasoningContent?: boolean;
    forwardReasoningDetails?: boolean;
  },
  request: ChatRequest,
  model: RouteRules,
  tokenizer: Tokenizer,
  /** Counting may stop once the bound passes this; the number returned is then above it. */
  limit = Infinity,
): number {
  if (hasDocuments(request)) return Infinity;
  if (provider.kind === "anthropic") {
    return anthropicInputBound(request, imageLongEdgeOf(model), model.claude?.strictTools ?? false);
  }
  const bound = openAiInputBound(request, model, tokenizer, "held", limit);
  if (bound > limit) return bound;
  if (provider.kind === "openai_responses") return bound + openAiReasoningTokens(request);
  if (!provider.forwardReasoningContent && !provider.forwardReasoningDetails) return bound;
  const count = (text: string) => countTokensWith(tokenizer, text);
  let reasoning = 0;
  for (const m of request.messages) {
    if (m.role !== "assistant") continue;
    if (provider.forwardReasoningContent && m.reasoning_content) {
      reasoning += count(m.reasoning_content) + OPENAI_TOKENS_PER_PART;
    }
    if (provider.forwardReasoningDetails) reasoning += reasoningDetailsTokens(m, count);
  }
  return bound + reasoning;
}

/**
 * Reasoning details sent back to a router (OpenRouter) that hands them to the model that made
 * them: their text and summaries, a token for every byte a signature or encrypted data decodes to
 * (it carries the reasoning the model wrote, of which the text is at most a summary; as for
 * Claude's own, claudeThinkingTokens), and the details' framing (their JSON less those values, at
 * a token a character).
 */
function reasoningDetailsTokens(
  m: Extract<ChatMessage, { role: "assistant" }>,
  count: (text: string) => number,
): number {
  let tokens = 0;
  for (const detail of m.reasoning_details ?? []) {
    const sealed = detail.type === "reasoning.text"
      ? detail.signature ?? ""
      : detail.type === "reasoning.encrypted"
      ? detail.data
      : "";
    const text = detail.type === "reasoning.text"
      ? detail.text ?? ""
      : detail.type === "reasoning.summary"
      ? detail.summary
      : "";
    const framing = JSON.stringify({ ...detail, text: "", signature: "", data: "", summary: "" });
    tokens += count(text) + sealedTokens(sealed) + framing.length;
  }
  return tokens;
}

/**
 * The reasoning items sent back to OpenAI's Responses API (any OpenAI model's, as the route's own
 * are a part of them): a token for every byte an item's encrypted content decodes to, and an
 * item's framing. The content carries the reasoning the model did, which OpenAI bills as input in
 * the turns of a tool loop; the bound assumes each billed token takes at least a byte of it, as
 * for Claude's signatures (claudeThinkingTokens).
 */
function openAiReasoningTokens(request: ChatRequest): number {
  let tokens = 0;
  for (const m of request.messages) {
    if (m.role !== "assistant") continue;
    for (const item of openAiReasoningItems(m.reasoning_details)) {
      tokens += OPENAI_TOKENS_PER_MESSAGE + sealedTokens(item.encrypted_content);
    }
  }
  return tokens;
}

/** Output a provider produced, counted by us when it reports none (a cut or abandoned stream). */
export function outputBound(kind: ProviderKind, text: string, tokenizer: Tokenizer): number {
  return kind === "anthropic" ? claudeTokenBound(text) : countExactTokensWith(tokenizer, text);
}

/**
 * Output the upstream may bill beyond the cap: OpenAI bills rejected predicted-output tokens as
 * completion tokens, and those are at most the prediction itself.
 */
export function extraOutputBound(request: ChatRequest, tokenizer: Tokenizer): number {
  const prediction = request.params.prediction;
  const count = (text: string) => countTokensWith(tokenizer, text);
  return prediction ? contentTokens(prediction.content, count, OPENAI_TOKENS_PER_PART) : 0;
}
