/**
 * `reasoning_details`: OpenRouter's field for the reasoning a provider signs or encrypts, which a
 * client sends back unchanged on the assistant message it came with, so that the model goes on
 * from its own reasoning. Claude needs this in a tool loop: its thinking blocks come back with
 * their signatures or the model reasons from scratch (and a thinking budget cannot be sent at
 * all). Tollbooth answers each of Claude's thinking blocks as one detail, and sends the details
 * Claude signed back to Claude as the blocks they were; so with OpenAI's reasoning items through
 * its Responses API (their encrypted content); another provider is sent them as they came only
 * where the catalog says it wants them (OpenRouter: `forward_reasoning_details`).
 *
 * A signature holds only for the model that made it: Claude refuses the whole request when one
 * block in it came from another model, as after a conversation moved from one Claude to another,
 * or to a fallback. So a detail's `id` names the model that signed it (`<model>#<index>`; OpenAI's
 * `<model>#<item id>`), and a request sends a model only its own.
 */
import { isRecord } from "@/lib/core/mod.ts";
import { z } from "zod";

/** The `format` of a detail that is one of Claude's thinking blocks (OpenRouter's name). */
export const CLAUDE_REASONING_FORMAT = "anthropic-claude-v1";

const common = {
  id: z.string({ error: "must be a string" }).nullish(),
  format: z.string({ error: "must be a string" }).nullish(),
  index: z.int({ error: "must be an integer" }).nonnegative("must not be negative").optional(),
};

export const ReasoningDetail = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("reasoning.text"),
    text: z.string({ error: "must be a string" }).nullish(),
    signature: z.string({ error: "must be a string" }).nullish(),
    ...common,
  }),
  z.strictObject({
    type: z.literal("reasoning.encrypted"),
    data: z.string({ error: "must be a string" }),
    ...common,
  }),
  z.strictObject({
    type: z.literal("reasoning.summary"),
    summary: z.string({ error: "must be a string" }),
    ...common,
  }),
], {
  error:
    "must be a reasoning detail of type reasoning.text, reasoning.encrypted or reasoning.summary",
});

export type ReasoningDetail = z.infer<typeof ReasoningDetail>;

/**
 * The most details one assistant message may carry: an answer has a thinking block or a few, and
 * the cap keeps a hostile list from costing more than its bytes to walk.
 */
export const MAX_REASONING_DETAILS = 256;

/** An assistant message's `reasoning_details`. */
export const ReasoningDetails = z.array(ReasoningDetail, {
  error: "must be an array of reasoning details",
}).max(MAX_REASONING_DETAILS, `must hold at most ${MAX_REASONING_DETAILS} reasoning details`);

/** The fields of a reasoning detail that stream in pieces; the others are set by the last. */
const DETAIL_PIECES: readonly string[] = ["text", "summary", "data"];

/**
 * A streamed `reasoning_details` entry into a message's list: a piece of the last detail when it
 * carries the same `index` and type (OpenRouter streams a detail's text in pieces, its signature
 * last), else a detail of its own. The assembled answer and the Responses API's reasoning item
 * both take a stream's details this way.
 */
export function appendReasoningDetail(details: Record<string, unknown>[], raw: unknown) {
  if (!isRecord(raw)) return;
  const last = details.at(-1);
  if (!last || raw.index === undefined || last.index !== raw.index || last.type !== raw.type) {
    details.push({ ...raw });
    return;
  }
  for (const field in raw) {
    // Set as data, not as the object's prototype.
    if (field === "__proto__") continue;
    const value = raw[field];
    if (
      DETAIL_PIECES.includes(field) && typeof value === "string" && typeof last[field] === "string"
    ) {
      last[field] += value;
    } else if (value !== null && value !== undefined) last[field] = value;
  }
}

/** A Claude thinking block, as Messages takes it back. */
export type ClaudeThinkingBlock =
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "redacted_thinking"; data: string };

/** The model that signed a detail Tollbooth answered with (its `id`), or null. */
function signerOf(detail: ReasoningDetail): string | null {
  const cut = detail.id?.lastIndexOf("#") ?? -1;
  return cut > 0 ? detail.id!.slice(0, cut) : null;
}

/**
 * The thinking blocks `model` signed among an assistant message's details, in their order; any
 * Claude's where `model` is not given (to bound what a request may be sent). Details of other
 * formats or models, and text without a signature, are left out: Claude refuses a block it did
 * not sign.
 */
export function claudeThinkingBlocks(
  details: readonly ReasoningDetail[] | null | undefined,
  model?: string,
): ClaudeThinkingBlock[] {
  const blocks: ClaudeThinkingBlock[] = [];
  for (const detail of details ?? []) {
    if (detail.format !== CLAUDE_REASONING_FORMAT) continue;
    if (model !== undefined && signerOf(detail) !== model) continue;
    if (detail.type === "reasoning.text" && detail.signature) {
      blocks.push({ type: "thinking", thinking: detail.text ?? "", signature: detail.signature });
    } else if (detail.type === "reasoning.encrypted") {
      blocks.push({ type: "redacted_thinking", data: detail.data });
    }
  }
  return blocks;
}

/** One of Claude's thinking blocks, signed by `model`, as the detail a client is answered with. */
export function claudeReasoningDetail(
  block: ClaudeThinkingBlock,
  index: number,
  model: string,
): ReasoningDetail {
  const common = { id: `${model}#${index}`, format: CLAUDE_REASONING_FORMAT, index };
  return block.type === "thinking"
    ? { type: "reasoning.text", text: block.thinking, signature: block.signature, ...common }
    : { type: "reasoning.encrypted", data: block.data, ...common };
}

/**
 * The `format` of a detail that is one of OpenAI's reasoning items (OpenRouter's name): its
 * `encrypted_content` as `data`, which OpenAI takes back only from a request that does not store
 * it (`store: false`), and only with the item's `id`.
 */
export const OPENAI_REASONING_FORMAT = "openai-responses-v1";

/** A reasoning item as OpenAI's Responses API takes it back as input. */
export type OpenAiReasoningItem = {
  type: "reasoning";
  id: string;
  summary: { type: "summary_text"; text: string }[];
  encrypted_content: string;
};

/**
 * The reasoning items `model` made among an assistant message's details, in their order; any
 * OpenAI model's where `model` is not given (to bound what a request may be sent). An item is
 * sent back whole or not at all: without its encrypted content OpenAI looks it up among stored
 * items, and Tollbooth stores none.
 */
export function openAiReasoningItems(
  details: readonly ReasoningDetail[] | null | undefined,
  model?: string,
): OpenAiReasoningItem[] {
  const items: OpenAiReasoningItem[] = [];
  for (const detail of details ?? []) {
    if (detail.format !== OPENAI_REASONING_FORMAT || detail.type !== "reasoning.encrypted") {
      continue;
    }
    const signer = signerOf(detail);
    if (signer === null || (model !== undefined && signer !== model)) continue;
    const id = detail.id!.slice(signer.length + 1);
    if (!id) continue;
    items.push({ type: "reasoning", id, summary: [], encrypted_content: detail.data });
  }
  return items;
}

/**
 * One of OpenAI's reasoning items, made by `model`, as the detail a client is answered with: its
 * `id` keeps the item's own after the model's name, as OpenAI wants both back.
 */
export function openAiReasoningDetail(
  item: { id: string; encrypted_content: string },
  index: number,
  model: string,
): ReasoningDetail {
  return {
    type: "reasoning.encrypted",
    data: item.encrypted_content,
    id: `${model}#${item.id}`,
    format: OPENAI_REASONING_FORMAT,
    index,
  };
}

/**
 * The Responses API carries a reasoning item's hidden state in `encrypted_content`, which a client
 * sends back with the item (OpenAI's stateless use, `store: false`). Tollbooth puts the item's
 * details there, marked as its own; the signatures inside are Anthropic's.
 */
const ENCRYPTED_CONTENT_MARK = "tollbooth.reasoning_details.v1.";

/**
 * The `encrypted_content` of a reasoning item with these details, or null when none is one (an
 * upstream of the OpenAI kind may send details of any shape; only well-formed ones are kept), or
 * when there are more than a message may carry: an item Tollbooth would refuse back is not made.
 */
export function encryptedContentOf(details: readonly unknown[]): string | null {
  const kept = details.filter((detail) => ReasoningDetail.safeParse(detail).success);
  if (kept.length === 0 || kept.length > MAX_REASONING_DETAILS) return null;
  const json = new TextEncoder().encode(JSON.stringify(kept));
  let binary = "";
  for (let i = 0; i < json.length; i += 0x8000) {
    binary += String.fromCharCode(...json.subarray(i, i + 0x8000));
  }
  return ENCRYPTED_CONTENT_MARK + btoa(binary);
}

/**
 * The details in a reasoning item's `encrypted_content`: "foreign" for another provider's, which
 * no route here can take back; "malformed" for one marked as Tollbooth's that it did not make.
 */
export function detailsOfEncryptedContent(
  content: string,
): ReasoningDetail[] | "foreign" | "malformed" {
  if (!content.startsWith(ENCRYPTED_CONTENT_MARK)) return "foreign";
  try {
    const binary = atob(content.slice(ENCRYPTED_CONTENT_MARK.length));
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const parsed = ReasoningDetails.safeParse(
      JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes)),
    );
    return parsed.success ? parsed.data : "malformed";
  } catch {
    return "malformed";
  }
}
