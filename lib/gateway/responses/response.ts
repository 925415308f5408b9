/**
 * Chat completions back into the Responses API: a stream of completion chunks into the documented
 * sequence of response events, and a non-streamed answer's chunks into the response they end with.
 */
import { isRecord } from "@/lib/core/mod.ts";
import { isMessagePhase, type MessagePhase } from "../chat_request.ts";
import { askedSummary, type ResponsesBody } from "./request.ts";
import { appendReasoningDetail, encryptedContentOf } from "../reasoning_details.ts";

export interface ResponseMeta {
  id: string;
  createdAt: number;
  /** The catalog id. */
  model: string;
  store: boolean;
  previousResponseId: string | null;
  /** Makes item ids (`rs_…`, `msg_…`, `fc_…`); random in the service, fixed in tests. */
  newItemId(prefix: "rs" | "msg" | "fc" | "fco"): string;
}

/** The chat usage object, as the gateway gives it. */
interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** What left the wallet, in a stream's usage (USD). */
  cost?: string;
  prompt_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number };
  completion_tokens_details?: { reasoning_tokens?: number };
  /** DeepSeek's cache hits, billed at the cache-read price like `cached_tokens`. */
  prompt_cache_hit_tokens?: number;
}

/** A token of the text with its log probability, as an `output_text` part lists them. */
interface TextLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

type OutputText = { type: "output_text"; text: string; annotations: []; logprobs: TextLogprob[] };

const utf8 = new TextEncoder();

/**
 * A chat choice's `logprobs.content` as the Responses API gives them: the same tokens, each with
 * its UTF-8 bytes (a server that leaves them out gets them computed) and its top alternatives.
 */
function textLogprobs(logprobs: { content?: unknown } | null | undefined): TextLogprob[] {
  const entries = logprobs?.content;
  if (!Array.isArray(entries)) return [];
  const token = (entry: Record<string, unknown>) => {
    const text = typeof entry.token === "string" ? entry.token : "";
    return {
      token: text,
      logprob: typeof entry.logprob === "number" ? entry.logprob : 0,
      bytes: Array.isArray(entry.bytes) ? entry.bytes as number[] : [...utf8.encode(text)],
    };
  };
  return entries.filter(isRecord).map((entry) => ({
    ...token(entry),
    top_logprobs: Array.isArray(entry.top_logprobs)
      ? entry.top_logprobs.filter(isRecord).map(token)
      : [],
  }));
}

/** The model's reasoning as a summary part: what the AI SDK and LangChain read it from. */
type SummaryText = { type: "summary_text"; text: string };

export type OutputItem =
  | {
    type: "reasoning";
    id: string;
    summary: SummaryText[];
    /** Claude's signed thinking, for the client to send back (reasoning_details.ts). */
    encrypted_content?: string;
    status: "in_progress" | "completed" | "incomplete";
  }
  | {
    type: "message";
    id: string;
    status: "in_progress" | "completed" | "incomplete";
    role: "assistant";
    content: (OutputText | { type: "refusal"; refusal: string })[];
    /** Whether the upstream (OpenAI's Responses API) made it a preamble or the answer. */
    phase?: MessagePhase;
  }
  | {
    type: "function_call";
    id: string;
    call_id: string;
    name: string;
    arguments: string;
    /**
     * What the server attached to the call (Gemini 3's thought signature), for the client to send
     * back with the item, as the chat dialect's tool calls carry it.
     */
    extra_content?: Record<string, unknown>;
    status: "in_progress" | "completed" | "incomplete";
  };

export function responseUsage(usage: ChatUsage) {
  const written = usage.prompt_tokens_details?.cache_write_tokens;
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: {
      cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ??
        0,
      // Billed at the cache-write price: without it a client could not reconcile the cost.
      ...(written ? { cache_write_tokens: written } : {}),
    },
    output_tokens: usage.completion_tokens,
    output_tokens_details: {
      reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0,
    },
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    ...(usage.cost !== undefined ? { cost: usage.cost } : {}),
  };
}

/** The response object around its output: the request's settings echoed as OpenAI does. */
export function responseObject(
  body: ResponsesBody,
  meta: ResponseMeta,
  state: {
    status: "in_progress" | "completed" | "incomplete" | "failed";
    output: OutputItem[];
    usage: ChatUsage | null;
    incompleteReason?: string | null;
    error?: { code: string; message: string } | null;
  },
) {
  return {
    id: meta.id,
    object: "response",
    created_at: meta.createdAt,
    status: state.status,
    error: state.error ?? null,
    incomplete_details: state.incompleteReason ? { reason: state.incompleteReason } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: meta.model,
    output: state.output,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: meta.previousResponseId,
    reasoning: {
      effort: body.reasoning?.effort ?? null,
      summary: askedSummary(body),
    },
    store: meta.store,
    temperature: body.temperature ?? 1,
    text: {
      format: body.text?.format ?? { type: "text" },
      ...(body.text?.verbosity != null ? { verbosity: body.text.verbosity } : {}),
    },
    tool_choice: body.tool_choice ?? "auto",
    tools: (body.tools ?? []).map((t) => ({
      type: "function",
      name: t.name,
      description: t.description ?? null,
      parameters: t.parameters ?? null,
      // As it was served: a call is strict only when the client said so (chat's default).
      strict: t.strict ?? false,
    })),
    top_p: body.top_p ?? 1,
    top_logprobs: body.top_logprobs ?? 0,
    truncation: "disabled",
    usage: state.usage ? responseUsage(state.usage) : null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
    max_tool_calls: body.max_tool_calls ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    safety_identifier: body.safety_identifier ?? null,
    service_tier: body.service_tier ?? null,
  };
}

export type ResponseObject = ReturnType<typeof responseObject>;

/** How a chat finish reason ends a response: completed, or incomplete and why. */
function endingOf(finishReason: string | null | undefined) {
  if (finishReason === "length") {
    return { status: "incomplete" as const, incompleteReason: "max_output_tokens" };
  }
  if (finishReason === "content_filter") {
    return { status: "incomplete" as const, incompleteReason: "content_filter" };
  }
  return { status: "completed" as const, incompleteReason: null };
}

/** The text the client reads as the answer: every output_text of every message. */
export function outputText(output: OutputItem[]): string {
  return output.flatMap((item) =>
    item.type === "message"
      ? item.content.flatMap((p) => (p.type === "output_text" ? [p.text] : []))
      : []
  ).join("");
}

export type ResponseEvent = { type: string; sequence_number: number; [k: string]: unknown };

interface ChunkLike {
  choices?: {
    delta?: {
      content?: string | null;
      refusal?: string | null;
      reasoning_content?: string | null;
      reasoning_details?: unknown;
      phase?: unknown;
      tool_calls?: {
        index: number;
        id?: string;
        function?: { name?: string; arguments?: string };
        extra_content?: unknown;
      }[];
    };
    logprobs?: { content?: unknown } | null;
    finish_reason?: string | null;
  }[];
  usage?: unknown;
}

type OpenItem =
  | {
    kind: "reasoning";
    index: number;
    item: Extract<OutputItem, { type: "reasoning" }>;
    /** Its reasoning details, sealed into `encrypted_content` when it closes. */
    details: Record<string, unknown>[];
  }
  | {
    kind: "message";
    index: number;
    item: Extract<OutputItem, { type: "message" }>;
    part: "output_text" | "refusal" | null;
  }
  | {
    kind: "call";
    index: number;
    item: Extract<OutputItem, { type: "function_call" }>;
  };

/**
 * Chat chunks in, response events out, in OpenAI's documented order: response.created and
 * response.in_progress; per item output_item.added, its content or arguments deltas and their
 * done events, output_item.done; last response.completed (or .incomplete) with the usage.
 */
export class ResponseEvents {
  readonly #body: ResponsesBody;
  readonly #meta: ResponseMeta;
  #sequence = 0;
  readonly #output: OutputItem[] = [];
  /** The message or reasoning item open; calls are open in #calls. */
  #open: Exclude<OpenItem, { kind: "call" }> | null = null;
  /**
   * The function calls open, by the chat call they are (its `index`, or its `id` from a server
   * that sends no index): parallel calls may come interleaved, a piece of each at a time.
   */
  readonly #calls = new Map<string, Extract<OpenItem, { kind: "call" }>>();
  #lastCall: string | undefined;
  #finishReason: string | null = null;
  /** The phase the upstream gave the message, which comes before its text. */
  #phase: MessagePhase | undefined;

  constructor(body: ResponsesBody, meta: ResponseMeta) {
    this.#body = body;
    this.#meta = meta;
  }

  /** The output so far (all of it once finished). */
  get output(): OutputItem[] {
    return this.#output;
  }

  start(): ResponseEvent[] {
    const response = this.#response({ status: "in_progress", output: [], usage: null });
    return [
      this.#event("response.created", { response }),
      this.#event("response.in_progress", { response }),
    ];
  }

  chunk(chunk: ChunkLike): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      let text = typeof delta.content === "string" ? delta.content : "";
      if (isMessagePhase(delta.phase)) {
        // A phase opens a message of the upstream's (openai_responses/stream.ts), an item of its
        // own, with the blank line chat's one content puts between two beside it, which is no
        // item's text. The phase of the message already open, given again without that line (a
        // compatible server may give it on every chunk), opens none.
        const separated = text.startsWith("\n\n");
        if (separated) text = text.slice(2);
        const inMessage = this.#open?.kind === "message";
        if (!inMessage || separated || delta.phase !== this.#phase) {
          if (inMessage) events.push(...this.#close("completed"));
          this.#phase = delta.phase as MessagePhase;
        }
      }
      if (typeof delta.reasoning_content === "string" && delta.reasoning_content !== "") {
        events.push(...this.#reasoning(delta.reasoning_content));
      }
      if (Array.isArray(delta.reasoning_details) && delta.reasoning_details.length) {
        // A block's details come when it ends, its text (if any) already in the open item.
        events.push(...this.#openReasoning());
        // Pieces of one detail (OpenRouter streams its text in pieces) are joined, as assembled.
        const open = this.#open as Extract<OpenItem, { kind: "reasoning" }>;
        for (const detail of delta.reasoning_details) appendReasoningDetail(open.details, detail);
      }
      if (text !== "") {
        events.push(...this.#text("output_text", text, textLogprobs(choice.logprobs)));
      }
      if (typeof delta.refusal === "string" && delta.refusal !== "") {
        events.push(...this.#text("refusal", delta.refusal));
      }
      for (const call of delta.tool_calls ?? []) events.push(...this.#call(call));
      if (choice.finish_reason) this.#finishReason = choice.finish_reason;
    }
    return events;
  }

  /** Closes what is open and ends the response with its usage. */
  finish(usage: ChatUsage | null): ResponseEvent[] {
    const ending = endingOf(this.#finishReason);
    const events = this.#close(ending.status === "completed" ? "completed" : "incomplete");
    const response = this.#response({ ...ending, output: this.#output, usage });
    events.push(
      this.#event(ending.status === "completed" ? "response.completed" : "response.incomplete", {
        response,
      }),
    );
    return events;
  }

  /**
   * A stream that broke off after it began: the error, then response.failed, with the usage that
   * was charged for what the provider produced before the break, when it was.
   */
  fail(code: string, message: string, usage: ChatUsage | null = null): ResponseEvent[] {
    const events = this.#close("incomplete");
    events.push(this.error(code, message));
    events.push(
      this.#event("response.failed", {
        response: this.#response({
          status: "failed",
          output: this.#output,
          usage,
          error: { code, message },
        }),
      }),
    );
    return events;
  }

  /** The error event alone: what can still be said when the converter's own state broke. */
  error(code: string, message: string): ResponseEvent {
    return this.#event("error", { code, message, param: null });
  }

  /** The reasoning item open, opened (without a summary part) unless it is. */
  #openReasoning(): ResponseEvent[] {
    if (this.#open?.kind === "reasoning") return [];
    const events = this.#close("completed");
    const item: Extract<OutputItem, { type: "reasoning" }> = {
      type: "reasoning",
      id: this.#meta.newItemId("rs"),
      summary: [],
      status: "in_progress",
    };
    this.#open = { kind: "reasoning", index: this.#output.length, item, details: [] };
    this.#output.push(item);
    events.push(this.#event("response.output_item.added", {
      output_index: this.#open.index,
      item: structuredClone(item),
    }));
    return events;
  }

  /** Reasoning text streams as the one summary part of a reasoning item, as OpenAI's summaries do. */
  #reasoning(delta: string): ResponseEvent[] {
    const events = this.#openReasoning();
    const open = this.#open as Extract<OpenItem, { kind: "reasoning" }>;
    if (open.item.summary.length === 0) {
      open.item.summary.push({ type: "summary_text", text: "" });
      events.push(this.#event("response.reasoning_summary_part.added", {
        item_id: open.item.id,
        output_index: open.index,
        summary_index: 0,
        part: { type: "summary_text", text: "" },
      }));
    }
    open.item.summary[0].text += delta;
    events.push(this.#event("response.reasoning_summary_text.delta", {
      item_id: open.item.id,
      output_index: open.index,
      summary_index: 0,
      delta,
    }));
    return events;
  }

  #text(
    part: "output_text" | "refusal",
    delta: string,
    logprobs: TextLogprob[] = [],
  ): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    if (this.#open?.kind !== "message") {
      events.push(...this.#close("completed"));
      const item: Extract<OutputItem, { type: "message" }> = {
        type: "message",
        id: this.#meta.newItemId("msg"),
        status: "in_progress",
        role: "assistant",
        content: [],
        ...(this.#phase ? { phase: this.#phase } : {}),
      };
      this.#open = { kind: "message", index: this.#output.length, item, part: null };
      this.#output.push(item);
      events.push(this.#event("response.output_item.added", {
        output_index: this.#open.index,
        item: structuredClone(item),
      }));
    }
    const open = this.#open as Extract<OpenItem, { kind: "message" }>;
    if (open.part !== part) {
      if (open.part) events.push(...this.#closePart(open));
      open.part = part;
      const fresh = part === "output_text"
        ? { type: "output_text" as const, text: "", annotations: [] as [], logprobs: [] }
        : { type: "refusal" as const, refusal: "" };
      open.item.content.push(fresh);
      events.push(this.#event("response.content_part.added", {
        item_id: open.item.id,
        output_index: open.index,
        content_index: open.item.content.length - 1,
        part: structuredClone(fresh),
      }));
    }
    const current = open.item.content.at(-1)!;
    if (current.type === "output_text") {
      current.text += delta;
      for (const logprob of logprobs) current.logprobs.push(logprob);
    } else {
      current.refusal += delta;
    }
    events.push(this.#event(
      part === "output_text" ? "response.output_text.delta" : "response.refusal.delta",
      {
        item_id: open.item.id,
        output_index: open.index,
        content_index: open.item.content.length - 1,
        delta,
        ...(part === "output_text" ? { logprobs } : {}),
      },
    ));
    return events;
  }

  #call(
    call: NonNullable<NonNullable<ChunkLike["choices"]>[0]["delta"]>["tool_calls"] extends
      (infer T)[] | undefined ? T : never,
  ): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    // A piece without index or id goes on the call before it, as a server without indexes sends.
    const key = call.index !== undefined
      ? `index ${call.index}`
      : call.id
      ? `id ${call.id}`
      : this.#lastCall ?? "index 0";
    let open = this.#calls.get(key);
    if (!open) {
      if (this.#open) events.push(...this.#close("completed"));
      // A call whose arguments are whole is over: closed before the next is added, as OpenAI
      // streams them. One still unfinished stays open for pieces that come interleaved.
      for (const [earlier, call] of this.#calls) {
        if (!isJson(call.item.arguments)) continue;
        this.#calls.delete(earlier);
        events.push(...this.#closeItem(call, "completed"));
      }
      const item: Extract<OutputItem, { type: "function_call" }> = {
        type: "function_call",
        id: this.#meta.newItemId("fc"),
        call_id: call.id ?? this.#meta.newItemId("fc"),
        name: call.function?.name ?? "",
        arguments: "",
        ...(isRecord(call.extra_content) ? { extra_content: call.extra_content } : {}),
        status: "in_progress",
      };
      open = { kind: "call", index: this.#output.length, item };
      this.#calls.set(key, open);
      this.#output.push(item);
      events.push(this.#event("response.output_item.added", {
        output_index: open.index,
        item: structuredClone(item),
      }));
    }
    this.#lastCall = key;
    if (isRecord(call.extra_content)) open.item.extra_content = call.extra_content;
    const delta = call.function?.arguments ?? "";
    if (delta !== "") {
      open.item.arguments += delta;
      events.push(this.#event("response.function_call_arguments.delta", {
        item_id: open.item.id,
        output_index: open.index,
        delta,
      }));
    }
    return events;
  }

  #closePart(open: Extract<OpenItem, { kind: "message" }>): ResponseEvent[] {
    const contentIndex = open.item.content.length - 1;
    const part = open.item.content[contentIndex];
    const where = { item_id: open.item.id, output_index: open.index, content_index: contentIndex };
    return [
      part.type === "output_text"
        ? this.#event("response.output_text.done", {
          ...where,
          text: part.text,
          logprobs: part.logprobs,
        })
        : this.#event("response.refusal.done", { ...where, refusal: part.refusal }),
      this.#event("response.content_part.done", { ...where, part: structuredClone(part) }),
    ];
  }

  /** Closes the item open, or the calls open, in the order they were added. */
  #close(status: "completed" | "incomplete"): ResponseEvent[] {
    const open = [...(this.#open ? [this.#open] : []), ...this.#calls.values()];
    this.#open = null;
    this.#calls.clear();
    this.#lastCall = undefined;
    return open.flatMap((item) => this.#closeItem(item, status));
  }

  #closeItem(open: OpenItem, status: "completed" | "incomplete"): ResponseEvent[] {
    const events: ResponseEvent[] = [];
    if (open.kind === "reasoning") {
      const where = { item_id: open.item.id, output_index: open.index, summary_index: 0 };
      const part = open.item.summary[0];
      if (part) {
        events.push(
          this.#event("response.reasoning_summary_text.done", { ...where, text: part.text }),
          this.#event("response.reasoning_summary_part.done", {
            ...where,
            part: structuredClone(part),
          }),
        );
      }
      const sealed = encryptedContentOf(open.details);
      if (sealed !== null) open.item.encrypted_content = sealed;
    } else if (open.kind === "message") {
      if (open.part) events.push(...this.#closePart(open));
    } else {
      events.push(this.#event("response.function_call_arguments.done", {
        item_id: open.item.id,
        output_index: open.index,
        name: open.item.name,
        arguments: open.item.arguments,
      }));
    }
    open.item.status = status;
    events.push(this.#event("response.output_item.done", {
      output_index: open.index,
      item: structuredClone(open.item),
    }));
    return events;
  }

  #response(state: Parameters<typeof responseObject>[2]) {
    return responseObject(this.#body, this.#meta, {
      ...state,
      output: structuredClone(state.output),
    });
  }

  #event(type: string, fields: Record<string, unknown>): ResponseEvent {
    return { type, sequence_number: this.#sequence++, ...fields };
  }
}

/**
 * A non-streamed answer as a response object: what the events of its chunks add up to, as
 * OpenAI's non-streamed response is its stream's last, so that both list the same items in the
 * same order (a preamble, its calls, then the answer: not one message before all calls).
 */
export function chunksToResponse(
  chunks: Iterable<ChunkLike>,
  usage: ChatUsage | null,
  body: ResponsesBody,
  meta: ResponseMeta,
): ResponseObject {
  const events = new ResponseEvents(body, meta);
  for (const chunk of chunks) events.chunk(chunk);
  const response = events.finish(usage).at(-1)!.response as ResponseObject;
  // A reasoning item whose details could not be sealed holds nothing: a stream has announced it
  // by then, a whole answer need not list it.
  response.output = response.output.filter((item) =>
    item.type !== "reasoning" || item.summary.length > 0 || item.encrypted_content !== undefined
  );
  return response;
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
