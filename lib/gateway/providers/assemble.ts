/**
 * A streamed answer assembled into one chat.completion, as a client library assembles it: content,
 * refusal and reasoning concatenated, tool calls merged by `index` (id and name from the first
 * fragment, arguments from all), reasoning details likewise (their text, summary and data joined,
 * the other fields set), logprobs appended, the last finish reason and the usage kept.
 * It lets a non-streamed request be served from a streamed upstream call, in the shape the
 * non-streamed call would have had: a `refusal` the stream carried (null included) is kept, and an
 * answer of only tool calls, or only a refusal, has `content: null`. Per-chunk padding (`obfuscation`) is dropped.
 */
import { isRecord } from "@/lib/core/mod.ts";
import type { ChatCompletion, CompletionResult, StreamPart, UsageObject } from "./types.ts";
import type { Usage } from "@/lib/catalog/mod.ts";
import { appendReasoningDetail } from "../reasoning_details.ts";

interface ToolCallDraft {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
  /** What the server attached to the call (Gemini's thought signature): kept for the next turn. */
  extra_content?: Record<string, unknown>;
}

interface ChoiceDraft {
  index: number;
  content: string | null;
  refusal: string | null;
  /** Whether any delta carried the refusal field (OpenAI's deltas do, as null). */
  refusalSeen: boolean;
  reasoning: string | null;
  reasoningDetails: Record<string, unknown>[];
  /** The Responses kind's message phase: the last given, as the stream's. */
  phase: unknown;
  toolCalls: Map<number, ToolCallDraft>;
  logprobs: { content: unknown[] | null; refusal: unknown[] | null } | null;
  finishReason: string | null;
}

/** The chunk fields the assembly sets itself or drops (`obfuscation` is per-chunk padding). */
const ASSEMBLED_FIELDS = new Set([
  "id",
  "created",
  "model",
  "choices",
  "object",
  "usage",
  "obfuscation",
]);

function appendAll(list: unknown[], items: unknown[]) {
  for (const item of items) list.push(item);
}

/**
 * Where a tool-call fragment without `index` goes: a call of its own when it opens one (an id
 * other than the last call's, or a name without an id, as Gemini sends whole calls), else the
 * last call, which it continues (a fragment of arguments alone, or the call's own id repeated).
 */
function indexOfUnnumbered(draft: ChoiceDraft, raw: Record<string, unknown>): number {
  const last = draft.toolCalls.size - 1;
  const current = draft.toolCalls.get(last);
  const id = typeof raw.id === "string" ? raw.id : "";
  const name = (raw.function as { name?: unknown } | undefined)?.name;
  const opens = !current ||
    (id !== "" ? id !== current.id : typeof name === "string" && name !== "");
  return opens ? draft.toolCalls.size : last;
}

function append(previous: string | null, piece: unknown): string | null {
  return typeof piece === "string" ? (previous ?? "") + piece : previous;
}

export function assembleCompletion(
  parts: Iterable<StreamPart>,
): CompletionResult & { promptTokens: number | null } {
  const choices = new Map<number, ChoiceDraft>();
  let meta: { id: string; created: number; model: string } | null = null;
  // No prototype, so a field named `__proto__` is set as data wherever `__proto__` is a setter.
  const extra: Record<string, unknown> = Object.create(null);
  let usage: Usage | null = null;
  let usageObject: UsageObject | null = null;
  let promptTokens: number | null = null;
  for (const part of parts) {
    if (part.type === "usage") {
      usage = part.usage;
      usageObject = part.raw ?? null;
      continue;
    }
    if (part.type === "prompt_tokens") {
      promptTokens = part.promptTokens;
      continue;
    }
    if (
      part.type === "unshown_output" || part.type === "hidden_work" ||
      part.type === "signed_thinking"
    ) continue;
    const chunk = part.chunk;
    meta ??= { id: chunk.id, created: chunk.created, model: chunk.model };
    // Copied field by field: a rest and a spread per chunk were a tenth of assembling an answer.
    for (const field in chunk) {
      if (!ASSEMBLED_FIELDS.has(field)) extra[field] = chunk[field as keyof typeof chunk];
    }
    for (const c of chunk.choices) {
      let draft = choices.get(c.index);
      if (!draft) {
        draft = {
          index: c.index,
          content: null,
          refusal: null,
          refusalSeen: false,
          reasoning: null,
          reasoningDetails: [],
          phase: undefined,
          toolCalls: new Map(),
          logprobs: null,
          finishReason: null,
        };
        choices.set(c.index, draft);
      }
      const d = c.delta ?? {};
      draft.content = append(draft.content, d.content);
      draft.refusal = append(draft.refusal, d.refusal);
      if ("refusal" in d) draft.refusalSeen = true;
      draft.reasoning = append(draft.reasoning, d.reasoning_content ?? d.reasoning);
      if (typeof d.phase === "string") draft.phase = d.phase;
      if (Array.isArray(d.reasoning_details)) {
        for (const raw of d.reasoning_details) appendReasoningDetail(draft.reasoningDetails, raw);
      }
      if (Array.isArray(d.tool_calls)) {
        for (const raw of d.tool_calls as Record<string, unknown>[]) {
          const index = typeof raw.index === "number" ? raw.index : indexOfUnnumbered(draft, raw);
          const fn = (raw.function ?? {}) as { name?: unknown; arguments?: unknown };
          const call = draft.toolCalls.get(index) ??
            { id: "", type: "function" as const, function: { name: "", arguments: "" } };
          if (typeof raw.id === "string" && raw.id) call.id = raw.id;
          // Set, not appended: some servers (Fireworks, NIM) repeat the name on every fragment.
          if (typeof fn.name === "string" && fn.name) call.function.name = fn.name;
          if (typeof fn.arguments === "string") call.function.arguments += fn.arguments;
          // Some send the arguments as the object itself rather than its JSON text.
          else if (isRecord(fn.arguments)) call.function.arguments += JSON.stringify(fn.arguments);
          if (isRecord(raw.extra_content)) call.extra_content = raw.extra_content;
          draft.toolCalls.set(index, call);
        }
      }
      const logprobs = c.logprobs as { content?: unknown; refusal?: unknown } | null | undefined;
      if (logprobs) {
        draft.logprobs ??= { content: null, refusal: null };
        // Appended in place: a copy per chunk made a long answer's logprobs quadratic.
        if (Array.isArray(logprobs.content)) {
          appendAll(draft.logprobs.content ??= [], logprobs.content);
        }
        if (Array.isArray(logprobs.refusal)) {
          appendAll(draft.logprobs.refusal ??= [], logprobs.refusal);
        }
      }
      if (c.finish_reason) draft.finishReason = c.finish_reason;
    }
  }
  const completion: ChatCompletion = {
    ...extra,
    id: meta?.id ?? "",
    object: "chat.completion",
    created: meta?.created ?? Math.floor(Date.now() / 1000),
    model: meta?.model ?? "",
    choices: [...choices.values()].sort((a, b) => a.index - b.index).map((d) => ({
      index: d.index,
      message: {
        role: "assistant",
        content: d.content === "" && (d.toolCalls.size || d.refusal) ? null : d.content,
        ...(d.refusalSeen || d.refusal !== null ? { refusal: d.refusal } : {}),
        ...(d.reasoning !== null ? { reasoning_content: d.reasoning } : {}),
        ...(d.reasoningDetails.length ? { reasoning_details: d.reasoningDetails } : {}),
        ...(d.phase !== undefined ? { phase: d.phase } : {}),
        ...(d.toolCalls.size
          ? { tool_calls: [...d.toolCalls.entries()].sort(([a], [b]) => a - b).map(([, c]) => c) }
          : {}),
      },
      logprobs: d.logprobs,
      finish_reason: d.finishReason,
    })),
  };
  if (usageObject) completion.usage = usageObject;
  return { completion, usage, promptTokens };
}
