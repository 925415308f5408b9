/**
 * A streamed answer after its 200 went out: forwards the upstream's chunks and settles the
 * reservation exactly once, however the stream ends (finished, cut by the upstream, left by the
 * client, or stalled by a client that stopped reading).
 */
import { ApiError, causedByBusyKv, formatUsd, type Micros } from "@/lib/core/mod.ts";
import type { UsageOutcome } from "@/lib/db.ts";
import type { ProviderConfig, Usage } from "@/lib/catalog/mod.ts";
import {
  type ChatCompletionChunk,
  ProviderError,
  type StreamPart,
  type UsageObject,
} from "./providers/types.ts";
import { clientUsage } from "./providers/usage.ts";
import type { UpstreamErrorLog } from "./upstream_log.ts";
import { cutReason } from "./provider_errors.ts";
import { SettleFailedError } from "./wallet_desk.ts";

export type StreamEvent =
  | { type: "chunk"; chunk: ChatCompletionChunk }
  | { type: "error"; error: ApiError };

/** How the stream ended, once it has; decides the usage record's outcome and the last event. */
export type Ending =
  | { kind: "completed" }
  | { kind: "upstream_cut"; failure: ProviderError; logged: UpstreamErrorLog }
  | { kind: "client_gone" }
  | { kind: "stalled"; afterMs: number };

/** More characters than any one output token holds: output past the cap times this cannot be real. */
const MAX_CHARS_PER_TOKEN = 256;

export interface PaidStreamOptions {
  requestId: string;
  /** Who is answering: whether its reason for a cut may be shown. */
  provider: ProviderConfig;
  /** The catalog id the client asked for: every chunk carries it, whoever served. */
  modelId: string;
  /** The prompt as we counted it, used when the upstream never reports its own. */
  countedPromptTokens: number;
  /** Output tokens of produced text, counted the way the provider kind bills it (an upper bound). */
  countOutput(text: string): number;
  /**
   * The most output the provider may bill (the cap the reservation covers): a count of our own is
   * an upper bound that can run far above the real one (a long run of one character is counted by
   * its bytes), and never charges beyond what the provider could have.
   */
  maxOutputTokens: number;
  includeUsage: boolean;
  /** Takes the cost of `usage` from the reservation; throws when the commit fails. */
  settle(usage: Usage, outcome: UsageOutcome, countedLocally: boolean): Promise<Micros>;
  /** The upstream broke off after the 200: the failure as logged, for the request's log line. */
  onUpstreamCut(logged: UpstreamErrorLog): void;
  /**
   * An upstream failure as a log line may carry it, its message rid of quotes of the request and of
   * `output` (what the upstream produced so far).
   */
  upstreamErrorLog(error: unknown, output: string[]): UpstreamErrorLog;
  /**
   * The provider bills work it does not stream (a reasoning model's hidden reasoning, Claude's
   * full thinking behind its summary): a client that leaves or stalls does not stop the upstream,
   * which is read to its end (bounded by its idle timeout and the output cap the reservation
   * covers) so that its usage, and nothing less, is charged.
   */
  drainOnLeave?: boolean;
  /**
   * Keeps an answer's signed thinking (a `signed_thinking` part) for the client's next turn; the
   * chunks that follow it wait for it, so that it is kept before the client can answer the calls.
   * Never throws: a keep that fails leaves the next turn without thinking, as before.
   */
  keepThinking?: (part: Extract<StreamPart, { type: "signed_thinking" }>) => Promise<void>;
  log: (fields: Record<string, unknown>) => void;
}

export class PaidStream {
  readonly #options: PaidStreamOptions;
  readonly #parts: AsyncIterator<StreamPart[]>;
  #first: IteratorResult<StreamPart[]> | null;
  readonly #upstreamAbort: AbortController;

  #ending: Ending | null = null;
  /** Set at the start by the route, or later by the upstream's own sign of hidden work. */
  #drainOnLeave: boolean;
  #produced = "";
  /** Output the upstream produced that no chunk carried (a converter held it back or dropped it). */
  #unshown = "";
  #reportedUsage: Usage | null = null;
  /** How much output had come when the upstream last reported its usage. */
  #producedAtReport = 0;
  #unshownAtReport = 0;
  /** The upstream's own usage object, details kept, to hand on to the client. */
  #reportedUsageObject: UsageObject | null = null;
  /** The upstream's prompt count (with its cache breakdown) before its final usage. */
  #reportedPrompt: Omit<Usage, "completionTokens"> | null = null;
  /** The first chunk's fields that every chunk of the stream repeats, the usage chunk included. */
  #meta: StreamMeta | null = null;
  /** Set while a batch waits for the client to ask for it (null while we wait for the upstream). */
  #waitingForClientSince: number | null = null;
  #settlement: Promise<void> | null = null;
  /** What was charged, once settled; null when the settle failed (the sweeper releases the reservation). */
  #charged: Micros | null = null;
  /** Why the settle failed, when it did. */
  #settleFailure: unknown = null;
  #settledUsage: Usage | null = null;
  #draining: Promise<void> | null = null;
  /** A keep of signed thinking the next events wait for. */
  #keeping: Promise<void> | null = null;
  /** The events in batches, one per batch of the upstream's parts: never an empty batch. */
  readonly events: AsyncGenerator<StreamEvent[]>;

  constructor(
    options: PaidStreamOptions,
    parts: AsyncIterator<StreamPart[]>,
    first: IteratorResult<StreamPart[]>,
    upstreamAbort: AbortController,
  ) {
    this.#options = options;
    this.#drainOnLeave = options.drainOnLeave ?? false;
    this.#parts = parts;
    this.#first = first;
    this.#upstreamAbort = upstreamAbort;
    this.events = this.#events();
  }

  /**
   * The client went away: stop the upstream and settle what was produced, or, when the provider
   * bills hidden work, read the upstream to its end and settle its usage.
   */
  async cancel(): Promise<void> {
    this.#ending ??= { kind: "client_gone" };
    if (!this.#drainOnLeave) {
      this.#upstreamAbort.abort(new DOMException("client closed the stream", "AbortError"));
    }
    await this.events.return(undefined);
    // A stream cancelled before its first read never ran the generator's own drain.
    if (this.#drainOnLeave) await this.#drainUpstream();
    await this.settle();
  }

  /** How the stream ended and what it charged, once settled (for a non-streamed answer). */
  get result(): {
    ending: Ending;
    charged: Micros | null;
    usage: Usage | null;
    /** The upstream's own usage object (details kept) when it reported one. */
    usageObject: UsageObject | null;
    /** Why the settle failed (charged is null then). */
    settleFailure: unknown;
  } {
    return {
      ending: this.#ending ?? { kind: "completed" },
      charged: this.#charged,
      settleFailure: this.#settleFailure,
      usage: this.#settledUsage,
      usageObject: this.#reportedUsage ? this.#reportedUsageObject : null,
    };
  }

  /**
   * Ends a stream whose client has not asked for the next chunk for `stallMs`: it is settled now,
   * so its reservation does not wait for a client that may never read again. The stream stays
   * open and, should the client resume, ends with an error event. Returns whether it stalled.
   */
  endIfStalled(stallMs: number, now = Date.now()): boolean {
    if (this.#settlement) return false;
    const since = this.#waitingForClientSince;
    if (since === null || now - since < stallMs) return false;
    this.#ending = { kind: "stalled", afterMs: stallMs };
    if (this.#drainOnLeave) {
      this.#settlement = this.#drainUpstream().then(() => this.#settleOnce());
      return true;
    }
    this.#upstreamAbort.abort(new DOMException("the client stopped reading", "AbortError"));
    this.settle();
    return true;
  }

  get settled(): boolean {
    return this.#settlement !== null;
  }

  /** Settles once; later calls wait for the first. */
  settle(): Promise<void> {
    this.#settlement ??= this.#settleOnce();
    return this.#settlement;
  }

  async #settleOnce(): Promise<void> {
    const ending = this.#ending ?? { kind: "completed" };
    const outcome: UsageOutcome = ending.kind === "client_gone" || ending.kind === "stalled"
      ? "client_closed"
      : ending.kind;
    let usage = this.#reportedUsage;
    let countedLocally = usage === null;
    if (usage === null) {
      usage = {
        ...(this.#reportedPrompt ?? { promptTokens: this.#options.countedPromptTokens }),
        completionTokens: Math.min(
          this.#options.maxOutputTokens,
          // Counted apart: the upstream billed them as separate blocks.
          this.#options.countOutput(this.#produced) +
            (this.#unshown ? this.#options.countOutput(this.#unshown) : 0),
        ),
      };
    } else if (
      this.#produced.length > this.#producedAtReport || this.#unshown.length > this.#unshownAtReport
    ) {
      // Output came after the upstream's last report (one that reported early and not again):
      // the report covers what came before it, hidden reasoning included, and what came after is
      // counted by us on top.
      const after = this.#options.countOutput(this.#produced.slice(this.#producedAtReport)) +
        this.#options.countOutput(this.#unshown.slice(this.#unshownAtReport));
      const completionTokens = Math.max(
        usage.completionTokens,
        Math.min(this.#options.maxOutputTokens, usage.completionTokens + after),
      );
      if (completionTokens > usage.completionTokens) {
        usage = { ...usage, completionTokens };
        countedLocally = true;
        // The client is shown what it was charged for, the upstream's details kept.
        const raw = this.#reportedUsageObject;
        if (raw) {
          this.#reportedUsageObject = {
            ...raw,
            completion_tokens: completionTokens,
            total_tokens: usage.promptTokens + completionTokens,
          };
        }
      }
    }
    try {
      this.#charged = await this.#options.settle(usage, outcome, countedLocally);
      this.#settledUsage = usage;
    } catch (error) {
      // Nothing is charged, now or later: the wallet ends the hold recording the usage as
      // uncharged once KV lets it, or the sweeper releases it. The loss is said here.
      this.#settleFailure = error;
      this.#options.log({
        level: "error",
        requestId: this.#options.requestId,
        event: "stream_settle_failed",
        error: String(error),
        ...(error instanceof SettleFailedError ? error.unbilled : {}),
      });
    }
  }

  async *#events(): AsyncGenerator<StreamEvent[]> {
    try {
      yield* this.#forward();
    } finally {
      const left = this.#ending?.kind === "client_gone" || this.#ending?.kind === "stalled";
      if (this.#drainOnLeave && left) await this.#drainUpstream();
      await this.#parts.return?.().catch(() => {});
      await this.settle();
    }
    const closing = this.#closing();
    if (closing.length > 0) yield closing;
  }

  /**
   * Reads what the upstream still sends after the client left, for its usage: the output is
   * counted as if forwarded, and a failure ends the reading (what was produced is then charged).
   */
  #drainUpstream(): Promise<void> {
    this.#draining ??= (async () => {
      const first = this.#first;
      this.#first = null;
      if (first && !first.done) { for (const part of first.value) this.#record(part); }
      if (first?.done) return;
      try {
        for (let next = await this.#parts.next(); !next.done; next = await this.#parts.next()) {
          for (const part of next.value) this.#record(part);
          if (this.#pastCap()) {
            // More than the cap could be: an upstream that will not stop is cut here, charged
            // what the cap allows, rather than read (and held) for as long as it goes on.
            this.#options.log({
              level: "warn",
              requestId: this.#options.requestId,
              event: "upstream_drain_past_cap",
            });
            this.#upstreamAbort.abort();
            await this.#parts.return?.();
            return;
          }
        }
      } catch (error) {
        this.#options.log({
          level: "warn",
          requestId: this.#options.requestId,
          event: "upstream_drain_failed",
          ...this.#options.upstreamErrorLog(error, [this.#produced, this.#unshown]),
        });
      }
    })();
    return this.#draining;
  }

  /** Whether the text produced is longer than the output cap's tokens could be, at their longest. */
  #pastCap(): boolean {
    const chars = this.#produced.length + this.#unshown.length;
    return chars > this.#options.maxOutputTokens * MAX_CHARS_PER_TOKEN;
  }

  /** Notes a usage report or counts a chunk's output; returns the chunk to forward, if any. */
  #record(part: StreamPart): ChatCompletionChunk | null {
    if (part.type === "usage") {
      this.#reportedUsage = part.usage;
      this.#reportedUsageObject = part.raw ?? null;
      this.#producedAtReport = this.#produced.length;
      this.#unshownAtReport = this.#unshown.length;
      return null;
    }
    if (part.type === "prompt_tokens") {
      const { type: _, ...prompt } = part;
      this.#reportedPrompt = prompt;
      return null;
    }
    if (part.type === "hidden_work") {
      this.#drainOnLeave = true;
      return null;
    }
    if (part.type === "unshown_output") {
      this.#unshown = part.text;
      return null;
    }
    if (part.type === "signed_thinking") {
      // A client that left has no next turn.
      if (!this.#ending) this.#keeping = this.#options.keepThinking?.(part) ?? null;
      return null;
    }
    const chunk = { ...part.chunk, model: this.#options.modelId };
    this.#meta ??= streamMeta(chunk);
    // As OpenAI streams them when the usage is asked for: every chunk before it says it has none.
    if (this.#options.includeUsage) chunk.usage = null;
    for (const choice of chunk.choices) this.#produced += producedText(choice.delta);
    return chunk;
  }

  async *#forward(): AsyncGenerator<StreamEvent[]> {
    try {
      let next = this.#first!;
      this.#first = null;
      for (; !next.done; next = await this.#parts.next()) {
        const events: StreamEvent[] = [];
        for (const part of next.value) {
          const chunk = this.#record(part);
          if (chunk) events.push({ type: "chunk", chunk });
        }
        if (this.#keeping) {
          await this.#keeping;
          this.#keeping = null;
        }
        if (events.length > 0) {
          this.#waitingForClientSince = Date.now();
          yield events;
          this.#waitingForClientSince = null;
        }
      }
    } catch (error) {
      // A stream we ended ourselves (client gone, stall) is not an upstream failure.
      if (this.#ending) return;
      const failure = error instanceof ProviderError
        ? error
        : new ProviderError("stream_cut", String((error as Error)?.message ?? error), {
          cause: error,
        });
      const logged = this.#options.upstreamErrorLog(failure, [this.#produced, this.#unshown]);
      this.#ending = { kind: "upstream_cut", failure, logged };
      this.#options.onUpstreamCut(logged);
    }
  }

  /** What follows the last chunk: the usage chunk, and an error event when it did not end well. */
  #closing(): StreamEvent[] {
    const ending = this.#ending ?? { kind: "completed" };
    const charged = this.#charged;
    if (ending.kind === "client_gone") return [];
    if (ending.kind === "stalled") {
      return [this.#error(
        "stream_interrupted",
        `The stream was ended because it was not read for ${
          Math.round(ending.afterMs / 1000)
        } s; the tokens produced before then were charged (${formatUsd(charged ?? 0)} USD).`,
      )];
    }
    if (charged === null && causedByBusyKv(this.#settleFailure)) {
      // Storage locked by other instances past every try: a busy moment, said as the non-streamed
      // answer says it, so that the client knows it may simply try again.
      return [this.#error(
        "service_unavailable",
        "The service was too busy to bill the response; nothing was charged. It may be retried in a second.",
      )];
    }
    if (charged === null) {
      // Ending with [DONE] would claim a clean, billed completion; it was neither.
      return [this.#error(
        "internal_error",
        `The response could not be billed; nothing was charged. Quote request id ${this.#options.requestId} to support.`,
      )];
    }
    const events: StreamEvent[] = [];
    const usage = this.#settledUsage;
    if (this.#options.includeUsage && usage) {
      events.push({
        type: "chunk",
        chunk: {
          id: this.#meta?.id ?? `chatcmpl-${this.#options.requestId}`,
          object: "chat.completion.chunk",
          created: this.#meta?.created ?? Math.floor(Date.now() / 1000),
          model: this.#options.modelId,
          ...(this.#meta?.service_tier !== undefined
            ? { service_tier: this.#meta.service_tier }
            : {}),
          ...(this.#meta?.system_fingerprint !== undefined
            ? { system_fingerprint: this.#meta.system_fingerprint }
            : {}),
          choices: [],
          usage: clientUsage(
            this.#reportedUsage ? this.#reportedUsageObject : null,
            usage,
            charged,
          ),
        },
      });
    }
    if (ending.kind === "upstream_cut") {
      this.#options.log({
        level: "warn",
        requestId: this.#options.requestId,
        event: "upstream_stream_failed",
        ...ending.logged,
      });
      events.push(this.#error(
        "stream_interrupted",
        `The upstream stream failed after it had begun${
          cutReason(ending.failure, this.#options.provider)
        }; the tokens produced before the cut were charged (${formatUsd(charged)} USD).`,
      ));
    }
    return events;
  }

  #error(
    code: "stream_interrupted" | "internal_error" | "service_unavailable",
    message: string,
  ): StreamEvent {
    return { type: "error", error: new ApiError(code, message) };
  }
}

/**
 * What a delta adds to the output the provider bills: text, refusal, reasoning (as OpenAI-style
 * servers name it either way; some send the same text under both names, counted once) and tool
 * calls' names and arguments.
 */
function producedText(delta: ChatCompletionChunk["choices"][number]["delta"] | undefined): string {
  if (!delta) return "";
  let text = "";
  for (const field of ["content", "refusal"]) {
    const value = delta[field];
    if (typeof value === "string") text += value;
  }
  const reasoning = typeof delta.reasoning_content === "string" && delta.reasoning_content !== ""
    ? delta.reasoning_content
    : delta.reasoning;
  if (typeof reasoning === "string") text += reasoning;
  if (Array.isArray(delta.tool_calls)) {
    for (const call of delta.tool_calls) {
      const fn = (call as { function?: { name?: unknown; arguments?: unknown } })?.function;
      if (typeof fn?.name === "string") text += fn.name;
      if (typeof fn?.arguments === "string") text += fn.arguments;
    }
  }
  return text;
}

interface StreamMeta {
  id: string;
  created: number;
  system_fingerprint?: unknown;
  service_tier?: unknown;
}

/** What the usage chunk repeats of the stream's first chunk. */
function streamMeta(chunk: ChatCompletionChunk): StreamMeta {
  const meta: StreamMeta = { id: chunk.id, created: chunk.created };
  if (chunk.service_tier !== undefined) meta.service_tier = chunk.service_tier;
  if (chunk.system_fingerprint !== undefined) meta.system_fingerprint = chunk.system_fingerprint;
  return meta;
}
