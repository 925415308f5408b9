/**
 * One paid request's life, independent of HTTP: price, reserve, call the provider, settle.
 * Every path that reserves ends in exactly one settle or release (or, after a crash, the sweeper).
 */
import {
  type Catalog,
  claudeRulesByName,
  type Model,
  type ModelType,
  type ProviderConfig,
  reservationCost,
  type Route,
} from "@/lib/catalog/mod.ts";
import {
  asksHourCacheWrites,
  assertSupported,
  type ChatRequest,
  DEFAULT_MAX_TOKENS,
  firstFilePath,
  hasDocuments,
  withoutDocuments,
} from "./chat_request.ts";
import { countEmbeddingTokens, type EmbeddingsRequest } from "./embeddings_request.ts";
import type { ReservationRecord, UsageOutcome } from "@/lib/db.ts";
import { ApiError, causedByBusyKv, formatUsd, type Micros, Sweep } from "@/lib/core/mod.ts";
import type { Providers } from "./providers/mod.ts";
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  type Embedding,
  ProviderError,
  type StreamPart,
  type UpstreamRequest,
} from "./providers/types.ts";
import { assembleCompletion } from "./providers/assemble.ts";
import { PaidStream, type StreamEvent } from "./paid_stream.ts";
import { type PlannedReservation, SettleFailedError, WalletDesk } from "./wallet_desk.ts";
import { apiErrorOfUpstream, cutReason } from "./provider_errors.ts";
import { textsOf, upstreamErrorLog } from "./upstream_log.ts";
import { extraOutputBound, inputBound, outputBound, unreadImageTokens } from "./input_bound.ts";
import { clientUsage } from "./providers/usage.ts";
import {
  NOTHING_TO_RECALL,
  type RecalledThinking,
  ThinkingMemory,
  type ThinkingRecall,
  thinkingToRecall,
  withThinking,
} from "./thinking_memory.ts";

import type { Caller, RequestTrace } from "./caller.ts";
import type { Wallets } from "@/lib/billing/mod.ts";

export type { StreamEvent };
export type { Caller, RequestTrace } from "./caller.ts";

export interface GatewayDeps {
  kv: Deno.Kv;
  wallets: Wallets;
  catalog: Catalog;
  providers: Providers;
  publicUrl: string;
  log: (fields: Record<string, unknown>) => void;
  /**
   * A streamed chunk left unread this long means the client has stalled without closing: the
   * stream is then ended as if it had gone (upstream stopped, what was produced charged), so its
   * reservation is not kept alive forever. Defaults to two minutes.
   */
  clientStallMs?: number;
  /**
   * Start a non-streamed call's upstream while its reservation commits when the wallet as this
   * process last committed it says the reservation fits; a refusal then aborts it (a misprediction).
   */
  optimisticUpstream?: boolean;
  /**
   * A request whose bound-based reservation exceeds this share of the app's balance (as last seen)
   * has its input counted exactly first, where the provider counts for free. Defaults to 0.5.
   */
  exactCountShare?: number;
  /** How long the free count may take before the bound stands. Defaults to 2 s. */
  countTokensTimeoutMs?: number;
}

export interface CompletionOutcome {
  completion: ChatCompletion;
  /**
   * The chunks it was assembled from, in order: what the Responses API makes its items of, as
   * it does a stream's (a chat message holds several of the upstream's messages as one).
   */
  chunks: ChatCompletionChunk[];
  /** The catalog provider that answered (the first, or a fallback). */
  provider: string;
  charged: Micros;
  available: Micros;
}

export interface StreamOutcome {
  /** Balance right after the reservation. */
  available: Micros;
  /** The catalog provider that answered (the first, or a fallback). */
  provider: string;
  /** In batches, as the upstream's parts came: never an empty batch. */
  events: AsyncGenerator<StreamEvent[]>;
  /** The client went away: stop the upstream and settle what was produced. */
  cancel(): Promise<void>;
  /**
   * Settled because the client stopped reading (without leaving): its request is over, though
   * the connection may stay open for as long as the client keeps it.
   */
  stalled: Promise<void>;
}

/** An embeddings answer in OpenAI's shape, `model` the catalog id. */
export interface EmbeddingsList {
  object: "list";
  data: Embedding[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export interface EmbeddingsOutcome {
  embeddings: EmbeddingsList;
  provider: string;
  charged: Micros;
  available: Micros;
}

interface Prepared {
  model: Model;
  promptTokens: number;
  maxTokens: number;
  /** The most output any route may bill: the cap and what may be billed beyond it. */
  outputTokens: number;
  reservation: ReservationRecord;
  available: Micros;
}

/**
 * A request as its upstream failures need it: where they are noted, and its texts (collected only
 * when one fails), which the logs must not quote.
 */
interface FailingRequest {
  requestId: string;
  trace: RequestTrace;
  sent: () => string[];
  /** The provider of the route that failed (set as each is called). */
  provider?: ProviderConfig;
}

function failingRequest(requestId: string, trace: RequestTrace, request: unknown): FailingRequest {
  return { requestId, trace, sent: textsOf(request) };
}

const DEFAULT_CLIENT_STALL_MS = 120_000;

/**
 * Open streams whose client may stall, until each is settled: one sweep for all of them rather
 * than an interval per stream, whose last tick (after a short answer had ended) was a turn of the
 * event loop per stream.
 */
const stallWatch = new Sweep<{ paid: PaidStream; stallMs: number; stalled: () => void }>(
  ({ paid, stallMs, stalled }) => {
    if (paid.settled) return true;
    if (!paid.endIfStalled(stallMs)) return false;
    stalled();
    return true;
  },
);

/** A stall is noticed at most a quarter of its time late (50 ms to 1 s between checks). */
function watchStall(paid: PaidStream, stallMs: number, stalled: () => void) {
  stallWatch.watch({ paid, stallMs, stalled }, Math.max(50, Math.min(1_000, stallMs / 4)));
}

/** How many streams the stall sweep watches now (settled ones stay until its next tick). */
export function watchedStreams(): number {
  return stallWatch.size;
}

const DEFAULT_COUNT_TOKENS_TIMEOUT_MS = 2_000;

/**
 * The input to reserve for an exact count: count_tokens is documented as an estimate that may
 * differ from the billed input by a small amount, so 2% and 32 tokens are added (OpenAI's input
 * token count is held the same way).
 */
export function exactInputReservation(exact: number): number {
  return Math.ceil(exact * 1.02) + 32;
}

/**
 * The model as it serves this request: one holding a PDF goes to the model's documents route alone
 * where it has one (the catalog's documents_provider), as only that route's provider counts a PDF.
 */
function servingModel(model: Model, request: ChatRequest): Model {
  if (!model.documentRoute || !hasDocuments(request)) return model;
  return { ...model, ...model.documentRoute, fallbacks: [], documentRoute: null };
}

export class Gateway {
  readonly #deps: GatewayDeps;
  readonly #desk: WalletDesk;
  readonly #thinking: ThinkingMemory;

  constructor(deps: GatewayDeps) {
    this.#deps = deps;
    this.#desk = new WalletDesk(deps);
    this.#thinking = new ThinkingMemory(deps.kv);
  }

  /**
   * A non-streamed request, served from a streamed upstream call assembled into one completion:
   * the upstream timeout then measures silence, not length, so a long answer is not cut for being
   * long, and one cut after it began still knows what was produced, which is charged (the provider
   * bills it) and answered with a 502 that says so.
   */
  async complete(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<CompletionOutcome> {
    const started = performance.now();
    const recalls = this.#thinkingToRecall(request);
    if (recalls.length) request = await this.#withKeptThinking(caller, request, recalls, requestId);
    const opened = await this.#open(caller, request, requestId, trace, false);
    // A client that goes away mid-call does not stop a non-streamed request: the upstream's work
    // is billed to us either way, so it is read to its end and settled like any other.
    // A chunk event is a chunk part as it stands: assembled without a copy.
    const parts: Extract<StreamPart, { type: "chunk" }>[] = [];
    for await (const events of opened.paid.events) {
      for (const event of events) if (event.type === "chunk") parts.push(event);
    }
    trace.upstreamMs = performance.now() - started;
    const { ending, charged, usage, usageObject: reported, settleFailure } = opened.paid.result;
    // Storage locked by other instances for longer than the settle waits: a busy moment, as a
    // reserve that meets it is, answered as the error handler answers every busy KV (503).
    if (charged === null && causedByBusyKv(settleFailure)) throw settleFailure;
    if (charged === null || !usage) {
      throw new ApiError(
        "internal_error",
        `The response could not be billed; nothing was charged. Quote request id ${requestId} to support.`,
      );
    }
    const costHeaders = {
      "Tollbooth-Request-Cost": formatUsd(charged),
      "Tollbooth-Balance": formatUsd(opened.balance()),
      // Charged, so served: it names who served as any answer does.
      "Tollbooth-Provider": opened.route.provider.name,
    };
    if (ending.kind === "upstream_cut") {
      // The official SDKs retry a 5xx by themselves, and each run would be charged again; this
      // header (theirs, not a standard) is the one thing that stops them.
      throw new ApiError(
        "upstream_interrupted",
        `The upstream provider broke off after it had begun answering${
          cutReason(ending.failure, opened.route.provider)
        }; the provider bills the tokens it produced, so they were charged (${
          formatUsd(charged)
        } USD). The partial answer is not returned.`,
        { headers: { ...costHeaders, "x-should-retry": "false" } },
      );
    }
    const { completion } = assembleCompletion(parts);
    completion.model = opened.model.id;
    completion.usage = clientUsage(reported, usage, charged);
    return {
      completion,
      // Only the Responses API reads them: not listed for every chat completion.
      get chunks() {
        return parts.map((part) => part.chunk);
      },
      provider: opened.route.provider.name,
      charged,
      available: opened.balance(),
    };
  }

  /** Embeddings: reserved at the input price from the counted input, settled to the upstream's. */
  async embed(
    caller: Caller,
    request: EmbeddingsRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<EmbeddingsOutcome> {
    const model = this.#model(request.model, "embedding", trace);
    trace.streamed = false;
    const promptTokens = countEmbeddingTokens(request, model);
    const { reservation } = await this.#desk.reserveOrRefuse(
      caller,
      model,
      {
        amount: reservationCost(model, promptTokens, 0),
        tokens: promptTokens,
        covers: `${promptTokens} input tokens`,
        counted: { what: "the input tokens", param: "input" },
      },
      requestId,
      trace,
    );
    const { value: result, route } = await this.#paidCall(
      caller,
      reservation,
      model,
      failingRequest(requestId, trace, request.input),
      (route) =>
        this.#embedder(route).embed({
          model: route,
          input: request.input,
          inputs: request.inputs,
          encodingFormat: request.encodingFormat,
          dimensions: request.dimensions,
          user: request.user,
          signal: new AbortController().signal,
          requestId,
        }),
    );
    const usage = { promptTokens: result.promptTokens ?? promptTokens, completionTokens: 0 };
    const settled = await this.#desk.settle(caller, reservation, route, usage, {
      requestId,
      streamed: false,
      outcome: "completed",
      countedLocally: result.promptTokens === null,
    }, trace).catch((error) => {
      // Answered 503 (KV busy) or 500 by the error handler, neither of which says what was lost.
      if (error instanceof SettleFailedError) {
        this.#deps.log({
          level: "error",
          requestId,
          event: "settle_failed",
          error: String(error),
          ...error.unbilled,
        });
      }
      throw error;
    });
    return {
      embeddings: {
        object: "list",
        data: result.data,
        model: model.id,
        usage: { prompt_tokens: usage.promptTokens, total_tokens: usage.promptTokens },
      },
      provider: route.provider.name,
      charged: settled.charged,
      available: settled.available,
    };
  }

  #embedder(route: Model) {
    const provider = this.#deps.providers(route.provider);
    // The catalog gives an embedding model only providers whose wire format has embeddings.
    if (!provider.embed) throw new Error(`provider ${route.provider.name} has no embeddings`);
    return provider as Required<typeof provider>;
  }

  async stream(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<StreamOutcome> {
    const recalls = this.#thinkingToRecall(request);
    if (recalls.length) request = await this.#withKeptThinking(caller, request, recalls, requestId);
    const { paid, route, available } = await this.#open(caller, request, requestId, trace, true);
    const stallMs = this.#deps.clientStallMs ?? DEFAULT_CLIENT_STALL_MS;
    const stalled = Promise.withResolvers<void>();
    watchStall(paid, stallMs, () => {
      this.#deps.log({ level: "warn", requestId, event: "client_stalled", stalledMs: stallMs });
      paid.settle().then(stalled.resolve, stalled.resolve);
    });
    return {
      available,
      provider: route.provider.name,
      events: paid.events,
      cancel: () => paid.cancel(),
      stalled: stalled.promise,
    };
  }

  /**
   * Where a request may be given kept thinking (thinking_memory.ts), if anywhere: it answers tool
   * calls without their `reasoning_details` and asks for reasoning of a model one of whose Claude
   * routes thinks by budget. Decided without KV: other requests never wait on it.
   */
  #thinkingToRecall(request: ChatRequest): readonly ThinkingRecall[] {
    if (!request.params.reasoning_effort || request.params.reasoning_effort === "none") {
      return NOTHING_TO_RECALL;
    }
    const named = this.#deps.catalog.get(request.model);
    if (!named || named.type !== "chat") return NOTHING_TO_RECALL;
    const model = servingModel(named, request);
    const budget = (route: Route) =>
      route.provider.kind === "anthropic" &&
      (route.claude ?? claudeRulesByName(route.upstreamModel)).thinking === "budget";
    return [model, ...model.fallbacks].some(budget) ? thinkingToRecall(request) : NOTHING_TO_RECALL;
  }

  /** The request with the thinking kept for its assistant messages, those the app has. */
  async #withKeptThinking(
    caller: Caller,
    request: ChatRequest,
    wanted: readonly ThinkingRecall[],
    requestId: string,
  ): Promise<ChatRequest> {
    const found = await Promise.allSettled(
      wanted.map((w) => this.#thinking.recall(caller.appId, w.toolCallId)),
    );
    const recalled: RecalledThinking[] = [];
    const failed: unknown[] = [];
    for (const [k, outcome] of found.entries()) {
      if (outcome.status === "rejected") failed.push(outcome.reason);
      else if (outcome.value) recalled.push({ message: wanted[k].message, details: outcome.value });
    }
    // A read that failed is not found, as far as the request goes: its message goes without
    // thinking, as before.
    if (failed.length) {
      this.#deps.log({
        level: "warn",
        requestId,
        event: "signed_thinking_not_recalled",
        messages: failed.length,
        error: String(failed[0]),
      });
    }
    return withThinking(request, recalled);
  }

  /**
   * Reserves, opens the upstream stream (falling back before its first part) and wraps it in a
   * PaidStream that settles exactly once, however it ends.
   */
  async #open(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
    streamed: boolean,
  ) {
    const upstreamAbort = new AbortController();
    const failing = failingRequest(requestId, trace, request);
    const open = (maxTokens: number) => async (route: Model) => {
      const upstream = {
        model: route,
        request,
        maxTokens,
        signal: upstreamAbort.signal,
        requestId,
      };
      const parts = (await this.#deps.providers(route.provider).stream(upstream))
        [Symbol.asyncIterator]();
      // The first batch of parts is awaited before the client gets its 200, so that an upstream
      // that fails or stays silent at the start still gets a real status (and the next provider a
      // chance).
      const first = await parts.next();
      // Ended before any event (a lone `[DONE]`): nothing was answered, nor charged; the next
      // provider may answer.
      if (first.done) {
        throw new ProviderError("malformed_response", "the stream ended before its first event");
      }
      return { parts, first, upstream };
    };
    let early:
      | Promise<{ value: Awaited<ReturnType<ReturnType<typeof open>>>; route: Model }>
      | undefined;
    /** The hold the early call was started for: it bounds what its provider may bill. */
    let earlyHold = 0;
    let prepared: Prepared;
    try {
      prepared = await this.#prepare(caller, request, requestId, trace, (planned) => {
        // Optimistic upstream is for non-streamed calls: a stream's first part waits on its 200.
        if (streamed || !this.#deps.optimisticUpstream) return;
        if (!this.#deps.wallets.predictFits(caller.appId, planned.amount)) return;
        this.#deps.wallets.stats.optimisticStarts++;
        earlyHold = planned.amount;
        early = this.#firstAnswer(planned.model, failing, open(planned.maxTokens), planned.amount);
        // Awaited once the reservation holds; refused, it is aborted and its outcome ignored.
        early.catch(() => {});
      });
    } catch (error) {
      if (early) {
        upstreamAbort.abort();
        this.#deps.wallets.stats.mispredictions++;
        this.#deps.wallets.stats.mispredictionExposureMicros += earlyHold;
        this.#deps.log({
          level: "info",
          requestId,
          event: "optimistic_upstream_aborted",
          appId: caller.appId,
          status: error instanceof ApiError ? error.status : null,
          // Micro-USD: the most its provider may bill for it, which nobody is charged.
          exposure: earlyHold,
        });
      }
      throw error;
    }
    const { model, promptTokens, maxTokens, outputTokens, reservation, available } = prepared;
    const started = performance.now();
    // A stream may outlive its lease; keep the reservation alive from now on so the sweeper leaves it.
    const stopRenewal = this.#deps.wallets.keepAlive(caller.appId, reservation.id);
    let parts: AsyncIterator<StreamPart[]>, first: IteratorResult<StreamPart[]>, route: Model;
    let upstream: UpstreamRequest;
    try {
      ({ value: { parts, first, upstream }, route } = await (early ??
        this.#firstAnswer(model, failing, open(maxTokens), reservation.amount)));
    } catch (error) {
      trace.upstreamMs = performance.now() - started;
      stopRenewal();
      await this.#desk.release(caller, reservation, trace);
      throw this.#providerError(error, failing);
    }
    trace.upstreamMs = performance.now() - started;
    let balance = available;
    const paid = new PaidStream(
      {
        requestId,
        provider: route.provider,
        modelId: model.id,
        countedPromptTokens: promptTokens,
        countOutput: (text) => outputBound(route.provider.kind, text, route.tokenizer),
        maxOutputTokens: outputTokens,
        includeUsage: streamed && request.includeUsage,
        settle: async (usage, outcome, countedLocally) => {
          stopRenewal();
          const settled = await this.#desk.settle(caller, reservation, route, usage, {
            requestId,
            streamed,
            outcome,
            countedLocally,
          }, trace);
          balance = settled.available;
          if (outcome !== "completed" && countedLocally) {
            this.#endedEarly(requestId, route, outcome, reservation.amount, settled.charged);
          }
          return settled.charged;
        },
        onUpstreamCut: ({ kind, ...upstreamError }) => {
          trace.upstreamFailure = kind;
          trace.upstreamError = upstreamError;
        },
        upstreamErrorLog: (error, output) =>
          upstreamErrorLog(error, () => [...failing.sent(), ...output]),
        drainOnLeave: this.#deps.providers(route.provider).billsHiddenWork?.(upstream) ?? false,
        keepThinking: async ({ toolCallId, details }) => {
          try {
            await this.#thinking.keep(caller.appId, toolCallId, details);
          } catch (error) {
            this.#deps.log({
              level: "warn",
              requestId,
              event: "signed_thinking_not_kept",
              error: String(error),
            });
          }
        },
        log: this.#deps.log,
      },
      parts,
      first,
      upstreamAbort,
    );
    return { paid, model, route, available, balance: () => balance };
  }

  /**
   * Calls the model's provider, then its fallbacks in order, until one answers. Only failures that
   * happen before anything reached the client and that another provider may not share move on;
   * a request the upstream rejected as invalid would be rejected by the next one too.
   */
  async #firstAnswer<T>(
    model: Model,
    failing: FailingRequest,
    call: (route: Model) => Promise<T>,
    /** The hold the calls are made under: it bounds what a provider may bill for one. */
    hold: Micros,
  ): Promise<{ value: T; route: Model }> {
    const { requestId, trace } = failing;
    const routes: Model[] = [
      model,
      ...model.fallbacks.map((f) => ({ ...model, ...f })),
    ];
    for (const [i, route] of routes.entries()) {
      trace.provider = route.provider.name;
      failing.provider = route.provider;
      try {
        return { value: await call(route), route };
      } catch (error) {
        if (error instanceof ProviderError && error.kind === "timeout") {
          this.#abandoned(requestId, route, hold);
        }
        const last = i === routes.length - 1;
        if (last || !(error instanceof ProviderError) || error.kind === "bad_request") throw error;
        this.#deps.log({
          level: error.kind === "upstream_auth" ? "error" : "warn",
          requestId,
          event: "upstream_fallback",
          provider: route.provider.name,
          next: routes[i + 1].provider.name,
          ...upstreamErrorLog(error, failing.sent),
        });
      }
    }
    throw new Error("unreachable: a model has at least one route");
  }

  /**
   * A call sent and given up for the provider's timeout before any answer: the provider may bill
   * it, up to its hold, and nobody is charged, so the hold is counted and logged as the operator's.
   */
  #abandoned(requestId: string, route: Model, hold: Micros) {
    this.#deps.wallets.stats.abandonedCalls++;
    this.#deps.wallets.stats.abandonedExposureMicros += hold;
    this.#deps.log({
      level: "warn",
      requestId,
      event: "upstream_abandoned",
      provider: route.provider.name,
      // Micro-USD: the most its provider may bill for it, which nobody is charged.
      exposure: hold,
    });
  }

  /**
   * A call that ended before its upstream finished (the client left or stalled, the upstream broke
   * off) and without the provider's usage was charged by our count of what it produced; its
   * provider may bill more (some bill a generation to its end), up to the hold. What the hold
   * covers beyond the charge is counted and logged as the operator's.
   */
  #endedEarly(
    requestId: string,
    route: Model,
    outcome: UsageOutcome,
    hold: Micros,
    charged: Micros,
  ) {
    const exposure = Math.max(0, hold - charged);
    this.#deps.wallets.stats.endedEarlyCalls++;
    this.#deps.wallets.stats.endedEarlyExposureMicros += exposure;
    this.#deps.log({
      level: "info",
      requestId,
      event: "upstream_ended_early",
      provider: route.provider.name,
      outcome,
      charged,
      // Micro-USD: the most its provider may bill beyond the charge, which nobody is charged.
      exposure,
    });
  }

  /**
   * A non-streamed call to the model's provider (or its fallbacks) while the reservation's lease
   * is renewed; when every route fails the reservation is released whole and the failure thrown
   * as the client's error.
   */
  async #paidCall<T>(
    caller: Caller,
    reservation: ReservationRecord,
    model: Model,
    failing: FailingRequest,
    call: (route: Model) => Promise<T>,
  ): Promise<{ value: T; route: Model }> {
    const { trace } = failing;
    const started = performance.now();
    const stopRenewal = this.#deps.wallets.keepAlive(caller.appId, reservation.id);
    try {
      const answer = await this.#firstAnswer(model, failing, call, reservation.amount);
      trace.upstreamMs = performance.now() - started;
      return answer;
    } catch (error) {
      trace.upstreamMs = performance.now() - started;
      await this.#desk.release(caller, reservation, trace);
      throw this.#providerError(error, failing);
    } finally {
      stopRenewal();
    }
  }

  /**
   * Refuses a chat request's model as `complete` and `stream` would, for a caller that would
   * otherwise read what is stored for the request (a previous conversation) first.
   */
  assertChatModel(id: string, trace: RequestTrace): void {
    this.#model(id, "chat", trace);
  }

  /** The catalog model a request names, if it serves requests of this endpoint's type. */
  #model(id: string, type: ModelType, trace: RequestTrace): Model {
    const model = this.#deps.catalog.get(id);
    if (!model) {
      throw new ApiError(
        "model_not_found",
        `The model '${id.slice(0, 100)}' does not exist or is not on the curated list.`,
        { param: "model" },
      );
    }
    if (model.type !== type) {
      throw new ApiError(
        "model_not_supported",
        model.type === "embedding"
          ? `${model.id} is an embedding model: use it with POST /v1/embeddings.`
          : `${model.id} is a chat model, not an embedding model: use it with POST /v1/chat/completions.`,
        { param: "model" },
      );
    }
    trace.model = model.id;
    trace.provider = model.provider.name;
    return model;
  }

  async #prepare(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
    /** Called once the reservation is priced, just before it is asked for. */
    onPriced?: (planned: { model: Model; maxTokens: number; amount: Micros }) => void,
  ): Promise<Prepared> {
    const named = this.#model(request.model, "chat", trace);
    const model = servingModel(named, request);
    trace.provider = model.provider.name;
    trace.streamed = request.stream;
    if (request.maxTokens !== undefined && request.maxTokens > model.maxOutputTokens) {
      const param = request.capParam ?? "max_tokens";
      throw new ApiError(
        "invalid_parameter",
        `Invalid value for '${param}': ${model.id} allows at most ${model.maxOutputTokens} output tokens.`,
        { param },
      );
    }
    const maxTokens = request.maxTokens ?? Math.min(DEFAULT_MAX_TOKENS, model.maxOutputTokens);
    const routes: Route[] = [model, ...model.fallbacks];
    try {
      assertSupported(request, routes, maxTokens);
    } catch (error) {
      if (!(error instanceof ApiError) || model === named) throw error;
      // A refusal the model's own routes would make too is not the documents route's doing.
      try {
        assertSupported(withoutDocuments(request), [named, ...named.fallbacks], maxTokens);
      } catch {
        throw error;
      }
      throw new ApiError(
        error.code,
        `${error.message} A request holding a PDF is served on ${model.id} through OpenAI's Responses API, which counts it.`,
        { param: error.param },
      );
    }
    // The largest of the bounds of every route that may serve the request: the reservation covers
    // any. Routes alike (kind, tokenizer, image rules, whether reasoning is sent back) share one
    // count.
    const boundsByKind = new Map<string, number>();
    // A bound past the context's room for the prompt refuses the request (unless the provider's
    // own count says otherwise): counting stops there. A 4 MB prompt took seconds to count for a
    // 400.
    const room = model.contextTokens - maxTokens;
    const bounds = routes.map((r) => {
      const forwards = r.provider.kind === "openai" &&
        `${r.provider.forwardReasoningContent}/${r.provider.forwardReasoningDetails}`;
      const key =
        `${r.provider.kind}:${r.tokenizer}:${r.chatTemplate}:${r.imageBaseTokens}:${r.imageTileTokens}:${r.imagePatches?.multiplier}/${r.imagePatches?.most}:${r.claude?.imageLongEdge}:${forwards}`;
      let bound = boundsByKind.get(key);
      if (bound === undefined) {
        // Each route's own image rule: a fallback to another model may bill images otherwise.
        bound = inputBound(r.provider, request, r, r.tokenizer, room);
        boundsByKind.set(key, bound);
      }
      return bound;
    });
    let promptTokens = Math.max(...bounds);
    // The count is the primary model's: a fallback to another model (another tokenizer) keeps
    // its bound.
    const servesPrimary = (i: number) =>
      i === 0 || (model.fallbacks[i - 1].provider.name === model.provider.name &&
        model.fallbacks[i - 1].upstreamModel === model.upstreamModel);
    const documents = !Number.isFinite(promptTokens);
    if (documents && !routes.every((_, i) => servesPrimary(i))) {
      const path = firstFilePath(request);
      throw new ApiError(
        "unsupported_parameter",
        `Unsupported content part 'file' on ${model.id}: a PDF is counted by the provider of the model's first route, and its fallbacks are served by others, which would bill it uncounted.`,
        { param: `${path}.type` },
      );
    }
    // The provider's own count (Anthropic's count_tokens, OpenAI's input token count), asked only
    // when the bound decides: counted once, never cached. A PDF has no bound but that count, so a
    // request with one is served only once it is counted.
    let exactTried = false;
    const tryExact = async () => {
      if (exactTried) return false;
      exactTried = true;
      const exact = await this.#exactInputTokens(model, request, maxTokens, requestId, trace, {
        required: documents,
      });
      if (exact === null) return false;
      // Images the count fetched by URL may be other images when the call fetches them: held at
      // their most, up to what the context lets the provider bill.
      const withMargin = Math.max(
        exactInputReservation(exact),
        Math.min(
          exactInputReservation(exact) +
            unreadImageTokens(model.provider.kind, request, model),
          room,
        ),
      );
      const next = Math.max(...bounds.map((bound, i) => servesPrimary(i) ? withMargin : bound));
      // A bound the provider's own count exceeds is no bound: held at the count, logged, so that
      // what the bound missed is never served uncharged. A count under the bound whose margin
      // passes it leaves the bound, which holds it.
      if (next >= promptTokens && exact <= promptTokens) return false;
      // (A bound past the room may have stopped counting there: no bound to speak of.)
      if (next > promptTokens && promptTokens <= room) {
        this.#deps.log({
          level: "warn",
          requestId,
          event: "input_bound_below_count",
          model: model.id,
          bound: promptTokens,
          counted: exact,
        });
      }
      promptTokens = next;
      return true;
    };
    // Refusals name the cap as the client sent it (the default's as max_tokens).
    const cap = request.capParam ?? "max_tokens";
    const counted = { what: `prompt plus ${cap}`, param: cap };
    if (promptTokens + maxTokens > model.contextTokens) await tryExact();
    if (promptTokens + maxTokens > model.contextTokens) {
      throw new ApiError(
        "context_length_exceeded",
        `The prompt (more than ${room} tokens as counted, tools, schemas and images included) plus ${cap} (${maxTokens}) exceeds the context of ${model.id} (${model.contextTokens} tokens).`,
        { param: "messages" },
      );
    }
    // Output beyond the cap that the provider may bill (rejected predicted output).
    const outputTokens = maxTokens +
      Math.max(
        ...routes.map((r) => extraOutputBound(request, r.tokenizer)),
      );
    const hourWrites = asksHourCacheWrites(request);
    const plan = (): PlannedReservation => ({
      amount: reservationCost(model, promptTokens, outputTokens, hourWrites),
      tokens: promptTokens + outputTokens,
      covers: `${counted.what} ${maxTokens}`,
      counted,
      refine: async () => await tryExact() ? plan() : null,
    });
    const planned = plan();
    onPriced?.({ model, maxTokens, amount: planned.amount });
    const { reservation, available } = await this.#desk.reserveOrRefuse(
      caller,
      model,
      planned,
      requestId,
      trace,
    );
    return { model, promptTokens, maxTokens, outputTokens, reservation, available };
  }

  /**
   * The exact input tokens by the provider's free counting endpoint (Anthropic's count_tokens,
   * OpenAI's Responses input token count), when the model is served by such a provider: null when
   * there is none, or when the count fails or is slow (the bound then stands). Counted in the
   * request's log line, and so in the metrics.
   */
  async #exactInputTokens(
    model: Model,
    request: ChatRequest,
    maxTokens: number,
    requestId: string,
    trace: RequestTrace,
    { required }: { required: boolean },
  ): Promise<number | null> {
    const counter = this.#deps.providers(model.provider);
    if (!counter.countInputTokens) return null;
    // Counting a PDF reads every page: it is given the time an upstream call has to answer.
    const timeoutMs = required
      ? this.#deps.clientStallMs ?? DEFAULT_CLIENT_STALL_MS
      : this.#deps.countTokensTimeoutMs ?? DEFAULT_COUNT_TOKENS_TIMEOUT_MS;
    try {
      const exact = await counter.countInputTokens({
        model,
        request,
        maxTokens,
        signal: AbortSignal.timeout(timeoutMs),
        requestId,
      });
      trace.inputCount = "counted";
      return exact;
    } catch (error) {
      trace.inputCount = "failed";
      this.#deps.log({
        level: "warn",
        requestId,
        event: "count_tokens_failed",
        provider: model.provider.name,
        ...upstreamErrorLog(error, textsOf(request)),
      });
      // Nothing else bounds it: the client gets the count's failure as it would the call's
      // (its 400 for a PDF it cannot read, a 502 when it cannot be reached); nothing was held.
      if (required) {
        throw this.#providerError(error, {
          ...failingRequest(requestId, trace, request),
          provider: model.provider,
        });
      }
      return null;
    }
  }

  /** The client's error for a failed upstream call; the log line gets the failure as logged. */
  #providerError(error: unknown, failing: FailingRequest): ApiError {
    const { requestId, trace, sent } = failing;
    const mapped = apiErrorOfUpstream(error, sent, failing.provider);
    const { kind, ...upstreamError } = upstreamErrorLog(error, sent);
    trace.upstreamFailure = mapped.failure;
    trace.upstreamError = upstreamError;
    if (mapped.failure === "upstream_auth") {
      this.#deps.log({
        level: "error",
        requestId,
        event: "upstream_credentials_refused",
        provider: trace.provider,
        kind,
        ...upstreamError,
      });
    }
    return mapped.error;
  }
}
