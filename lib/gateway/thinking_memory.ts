/**
 * Claude's signed thinking kept for the clients that drop it. A Claude that thinks by budget may
 * think in a turn that answers its tool calls only when the assistant message that made them
 * brings back the thinking blocks it signed (`reasoning_details`, reasoning_details.ts). The chat
 * clients of the openai SDK (`runTools`), the AI SDK (`.chat()`, the OpenAI-compatible provider)
 * and LangChain's `ChatOpenAI` send back only the fields they know, so their agent loops stopped
 * thinking after the first step. An answer of such a Claude that calls tools and carries signed
 * thinking has its details kept here, per app, under the id of its first tool call (the id the
 * client got and echoes); a request answering those calls without details is given them back, as
 * if the client had sent them, before it is checked, held and converted.
 *
 * Nothing here is money: a keep that fails, expires or never happened leaves the next turn as it
 * was before (without thinking), and a crash between the keep and the answer leaves an entry that
 * nobody asks for and that expires.
 */
import { concatBytes, KV_VALUE_CHUNK_BYTES, within } from "@/lib/core/mod.ts";
import { keys, type SignedThinkingChunkRecord } from "@/lib/db.ts";
import { type ChatMessage, type ChatRequest, forcesToolCall } from "./chat_request.ts";
import { type ReasoningDetail, ReasoningDetails } from "./reasoning_details.ts";

/**
 * How long kept thinking is given back. An agent loop sends the tool results within seconds or
 * minutes of the call; an hour covers slow tools and a human approving a call, matches the longest
 * time Anthropic keeps a prompt cached (a loop resumed later reads its whole prompt again anyway),
 * and keeps the model's reasoning no longer than its use needs.
 */
export const SIGNED_THINKING_TTL_MS = 60 * 60 * 1000;
/**
 * The most thinking kept for one answer, as JSON: a 64k-token budget's text and its signature fit.
 * More is not kept (that turn answers without thinking, as before).
 */
export const MAX_SIGNED_THINKING_BYTES = 512 * 1024;
/** Chunks the largest kept thinking takes: all written in one commit, read in one getMany. */
export const MAX_SIGNED_THINKING_CHUNKS = Math.ceil(
  MAX_SIGNED_THINKING_BYTES / KV_VALUE_CHUNK_BYTES,
);
/** A longer id (a client's own, on a recall) is not a key: KV keys hold 2 KiB at most. */
const MAX_TOOL_CALL_ID_BYTES = 256;

/** The details as stored chunks' parts, or null when they are more than is kept. */
export function signedThinkingParts(details: readonly ReasoningDetail[]): Uint8Array[] | null {
  const bytes = new TextEncoder().encode(JSON.stringify(details));
  if (bytes.byteLength > MAX_SIGNED_THINKING_BYTES) return null;
  const parts: Uint8Array[] = [];
  for (let at = 0; at < bytes.byteLength; at += KV_VALUE_CHUNK_BYTES) {
    // A copy: a view inside a record is stored with its whole buffer.
    parts.push(bytes.slice(at, at + KV_VALUE_CHUNK_BYTES));
  }
  return parts;
}

/**
 * The details the stored chunks (read in order from the first) hold, or null when they do not make
 * one whole written entry that is still live: a chunk missing, expired, or of another write.
 */
export function signedThinkingOfChunks(
  chunks: readonly (SignedThinkingChunkRecord | null)[],
  now: number,
): ReasoningDetail[] | null {
  const head = chunks[0];
  if (!head || head.chunks < 1 || head.chunks > chunks.length) return null;
  const taken = chunks.slice(0, head.chunks);
  const whole = taken.every((c) =>
    c !== null && c.chunks === head.chunks && c.expiresAt === head.expiresAt && c.expiresAt > now
  );
  if (!whole) return null;
  const bytes = concatBytes(taken.map((c) => c!.part));
  try {
    const parsed = ReasoningDetails.safeParse(JSON.parse(new TextDecoder().decode(bytes)));
    return parsed.success && parsed.data.length > 0 ? parsed.data : null;
  } catch {
    return null;
  }
}

/** An assistant message (its index) and the tool call id its kept thinking would be found under. */
export interface ThinkingRecall {
  message: number;
  toolCallId: string;
}

/**
 * The most assistant messages one request is given kept thinking for, the latest first: each is
 * one read, all made at once. A longer loop's earlier steps go without theirs (Claude needs only
 * the last one's; the rest keep the prompt as the step before sent it, for its cache).
 */
export const MAX_THINKING_RECALLS = 32;

/** Shared by every request that recalls nothing: most, which should not allocate for it. */
export const NOTHING_TO_RECALL: readonly ThinkingRecall[] = [];

/**
 * The assistant messages whose kept thinking a request would be given back, and the ids it is kept
 * under: for a request that asks for reasoning, does not force a tool, and answers the tool calls
 * of its last assistant message (tool results after it), every assistant message with tool calls
 * and without `reasoning_details`, the latest first. Not only the last: it is the one Claude
 * needs, but the step before sent the earlier ones with their thinking too (given back then), and
 * a prompt that drops it differs from there on, so its cache is missed and written again, at the
 * client's cost; Claude models that keep earlier thinking in context also reason on from it.
 * Empty for any other request, without a look at KV.
 */
export function thinkingToRecall(request: ChatRequest): readonly ThinkingRecall[] {
  const effort = request.params.reasoning_effort;
  if (!effort || effort === "none" || forcesToolCall(request.params.tool_choice)) {
    return NOTHING_TO_RECALL;
  }
  const messages = request.messages;
  const last = messages.findLastIndex((m) => m.role === "assistant");
  if (last < 0 || !messages.slice(last + 1).some((after) => after.role === "tool")) {
    return NOTHING_TO_RECALL;
  }
  const recalls: ThinkingRecall[] = [];
  for (let i = last; i >= 0 && recalls.length < MAX_THINKING_RECALLS; i--) {
    const m = messages[i];
    if (m.role !== "assistant" || m.reasoning_details?.length) continue;
    const toolCallId = m.tool_calls?.[0]?.id;
    if (!toolCallId) continue;
    if (new TextEncoder().encode(toolCallId).byteLength > MAX_TOOL_CALL_ID_BYTES) continue;
    recalls.push({ message: i, toolCallId });
  }
  return recalls;
}

/** Kept details found for an assistant message (its index). */
export interface RecalledThinking {
  message: number;
  details: ReasoningDetail[];
}

/** The request with the kept details on their messages, as if the client had sent them. */
export function withThinking(
  request: ChatRequest,
  recalled: readonly RecalledThinking[],
): ChatRequest {
  if (recalled.length === 0) return request;
  const messages = request.messages.slice();
  for (const { message, details } of recalled) {
    messages[message] = { ...messages[message], reasoning_details: details } as ChatMessage;
  }
  return { ...request, messages };
}

/**
 * How long a keep may wait for its commit (a few milliseconds as a rule). The answer's last chunk,
 * and with it the request's settle, waits for the keep: a KV that does not answer must not hold
 * them, nor a reservation, for longer.
 */
export const KEEP_TIMEOUT_MS = 2_000;

export class ThinkingMemory {
  readonly #kv: Deno.Kv;
  readonly #now: () => number;
  readonly #keepTimeoutMs: number;

  constructor(
    kv: Deno.Kv,
    options: { now?: () => number; keepTimeoutMs?: number } = {},
  ) {
    this.#kv = kv;
    this.#now = options.now ?? Date.now;
    this.#keepTimeoutMs = options.keepTimeoutMs ?? KEEP_TIMEOUT_MS;
  }

  /**
   * Keeps an answer's signed thinking for the app under its first tool call's id, in one commit
   * (chunks of an earlier entry under that id beyond this one's are deleted with it). Returns
   * whether it was kept: not when it is larger than is kept, or the id cannot be a key.
   */
  async keep(appId: string, toolCallId: string, details: readonly ReasoningDetail[]) {
    if (new TextEncoder().encode(toolCallId).byteLength > MAX_TOOL_CALL_ID_BYTES) return false;
    const parts = signedThinkingParts(details);
    if (!parts) return false;
    const expiresAt = this.#now() + SIGNED_THINKING_TTL_MS;
    const op = this.#kv.atomic();
    for (let i = 0; i < MAX_SIGNED_THINKING_CHUNKS; i++) {
      const key = keys.signedThinkingChunk(appId, toolCallId, i);
      if (i >= parts.length) {
        op.delete(key);
        continue;
      }
      const record: SignedThinkingChunkRecord = { chunks: parts.length, expiresAt, part: parts[i] };
      op.set(key, record, { expireIn: SIGNED_THINKING_TTL_MS });
    }
    const committing = op.commit();
    if (!await within(committing, this.#keepTimeoutMs)) {
      throw new Error(`keeping signed thinking had no answer from KV in ${this.#keepTimeoutMs} ms`);
    }
    const result = await committing;
    if (!result.ok) throw new Error("keeping signed thinking failed its commit");
    return true;
  }

  /** The app's kept thinking under this tool call id, or null (none, expired, another app's). */
  async recall(appId: string, toolCallId: string): Promise<ReasoningDetail[] | null> {
    const entries = await this.#kv.getMany<SignedThinkingChunkRecord[]>(
      Array.from(
        { length: MAX_SIGNED_THINKING_CHUNKS },
        (_, i) => keys.signedThinkingChunk(appId, toolCallId, i),
      ),
    );
    return signedThinkingOfChunks(entries.map((e) => e.value), this.#now());
  }
}
