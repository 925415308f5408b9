/**
 * One paid request's life, independent of HTTP: price, reserve, call the provider, settle.
 * Every path that reserves ends in exactly one settle or release (or, after a crash, the sweeper).
 */
import { getApp, topUpUrl } from "@/lib/tenants/mod.ts";
import {
  type Catalog,
  type Model,
  reservationCost,
  type Usage,
  usageCost,
} from "@/lib/catalog/mod.ts";
import type { ChatRequest } from "./chat_request.ts";
import { DEFAULT_MAX_TOKENS } from "./chat_request.ts";
import type { ReservationRecord, UsageOutcome } from "@/lib/db.ts";
import { ApiError, formatUsd, type Micros, type TraceFields } from "@/lib/core/mod.ts";
import {
  rateLimitRefusal,
  type RateLimitStatus,
  releaseExpiredReservations,
} from "@/lib/billing/mod.ts";
import type { Providers } from "./providers/mod.ts";
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  ProviderError,
  type StreamPart,
} from "./providers/types.ts";
import { countPromptTokens, countTextTokens } from "./tokens.ts";
import { KeyRevokedError, type ReserveInput, type Wallets } from "@/lib/billing/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";

export interface Caller {
  appId: string;
  keyId: string;
  /** Checked by the reserve's commit: a key revoked since it was looked up is refused there. */
  keyGuard?: KeyGuard;
}

/** What a request did, for its log line; filled in as the request goes. */
export interface RequestTrace extends TraceFields {
  appId?: string;
  keyId?: string;
  model?: string;
  provider?: string;
  streamed?: boolean;
  promptTokens?: number;
  completionTokens?: number;
  cost?: Micros;
  reserved?: Micros;
  upstreamMs?: number;
  outcome?: UsageOutcome | "released";
  upstreamFailure?: string;
  errorCode?: string;
  /** The caller's rate-limit status after this request was counted (for the x-ratelimit headers). */
  rateLimit?: RateLimitStatus;
}

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
   * hold is not kept alive forever. Defaults to two minutes.
   */
  clientStallMs?: number;
}

export interface CompletionOutcome {
  completion: ChatCompletion;
  /** The catalog provider that answered (the first, or a fallback). */
  provider: string;
  charged: Micros;
  available: Micros;
}

export type StreamEvent =
  | { type: "chunk"; chunk: ChatCompletionChunk }
  | { type: "error"; error: ApiError };

export interface StreamOutcome {
  /** Balance right after the reservation. */
  available: Micros;
  /** The catalog provider that answered (the first, or a fallback). */
  provider: string;
  events: AsyncGenerator<StreamEvent>;
  /** The client went away: stop the upstream and settle what was produced. */
  cancel(): Promise<void>;
}

interface Prepared {
  model: Model;
  promptTokens: number;
  maxTokens: number;
  hold: ReservationRecord;
  available: Micros;
}

const DEFAULT_CLIENT_STALL_MS = 120_000;

/** The lazy sweep of one app's expired holds runs at most this often (per process). */
const LAZY_SWEEP_EVERY_MS = 1_000;

export class Gateway {
  readonly #deps: GatewayDeps;
  readonly #lastLazySweep = new Map<string, number>();

  constructor(deps: GatewayDeps) {
    this.#deps = deps;
  }

  async complete(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<CompletionOutcome> {
    const { model, promptTokens, maxTokens, hold } = await this.#prepare(
      caller,
      request,
      requestId,
      trace,
    );
    const started = performance.now();
    const stopRenewal = this.#keepHoldAlive(caller, hold);
    let result, route: Model;
    try {
      // A client that goes away mid-call does not stop a non-streamed request: the upstream's work
      // is done and billed to us either way, so it is finished and settled like any other.
      ({ value: result, route } = await this.#firstAnswer(
        model,
        requestId,
        trace,
        (route) =>
          this.#deps.providers(route.provider).complete({
            model: route,
            messages: request.messages,
            maxTokens,
            passthrough: request.passthrough,
            signal: new AbortController().signal,
            requestId,
          }),
      ));
    } catch (error) {
      trace.upstreamMs = performance.now() - started;
      await this.#release(caller, hold, trace);
      throw this.#providerError(error, trace);
    } finally {
      stopRenewal();
    }
    trace.upstreamMs = performance.now() - started;
    const content = result.completion.choices.map((c) => c.message?.content ?? "").join("");
    const usage = result.usage ?? { promptTokens, completionTokens: countTextTokens(content) };
    const settled = await this.#settle(caller, hold, route, usage, {
      requestId,
      streamed: false,
      outcome: "completed",
      countedLocally: result.usage === null,
    }, trace);
    const completion = { ...result.completion, model: model.id };
    if (!completion.usage || result.usage === null) {
      completion.usage = {
        prompt_tokens: usage.promptTokens,
        completion_tokens: usage.completionTokens,
        total_tokens: usage.promptTokens + usage.completionTokens,
      };
    }
    return {
      completion,
      provider: route.provider.name,
      charged: settled.charged,
      available: settled.available,
    };
  }

  async stream(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<StreamOutcome> {
    const { model, promptTokens, maxTokens, hold, available } = await this.#prepare(
      caller,
      request,
      requestId,
      trace,
    );
    const upstreamAbort = new AbortController();
    const started = performance.now();
    // A stream may outlive its lease; keep the hold alive from now on so the sweeper leaves it.
    const stopRenewal = this.#keepHoldAlive(caller, hold);
    let parts: AsyncIterator<StreamPart>, first: IteratorResult<StreamPart>, route: Model;
    try {
      // The first part is awaited before the client gets its 200, so that an upstream that fails
      // or stays silent at the start still gets a real status (and the next provider a chance).
      ({ value: { parts, first }, route } = await this.#firstAnswer(
        model,
        requestId,
        trace,
        async (route) => {
          const parts = (await this.#deps.providers(route.provider).stream({
            model: route,
            messages: request.messages,
            maxTokens,
            passthrough: request.passthrough,
            signal: upstreamAbort.signal,
            requestId,
          }))[Symbol.asyncIterator]();
          return { parts, first: await parts.next() };
        },
      ));
    } catch (error) {
      trace.upstreamMs = performance.now() - started;
      stopRenewal();
      await this.#release(caller, hold, trace);
      throw this.#providerError(error, trace);
    }
    trace.upstreamMs = performance.now() - started;

    let clientGone = false;
    /** The client stopped reading without leaving: the stream was settled and ends in an error. */
    let stalledMs: number | null = null;
    let settledOnce: Promise<void> | null = null;
    let produced = "";
    let usage: Usage | null = null;
    let upstreamPrompt: number | null = null;
    let failure: ProviderError | null = null;
    let meta: Pick<ChatCompletionChunk, "id" | "created"> | null = null;
    let charged = 0;

    let settleFailed = false;
    /** Set while a chunk waits for the client to ask for it (null while we wait for the upstream). */
    let waitingForClientSince: number | null = null;
    const settle = () => {
      settledOnce ??= (async () => {
        stopRenewal();
        const outcome: UsageOutcome = clientGone || stalledMs !== null
          ? "client_closed"
          : failure
          ? "upstream_cut"
          : "completed";
        const counted = usage === null;
        const final = usage ??
          {
            promptTokens: upstreamPrompt ?? promptTokens,
            completionTokens: countTextTokens(produced),
          };
        try {
          const result = await this.#settle(caller, hold, route, final, {
            requestId,
            streamed: true,
            outcome,
            countedLocally: counted,
          }, trace);
          usage = final;
          charged = result.charged;
        } catch (error) {
          // The hold stays in place with its lease: the sweeper releases it; nothing is charged twice.
          usage = null;
          settleFailed = true;
          this.#deps.log({
            level: "error",
            requestId,
            event: "stream_settle_failed",
            error: String(error),
          });
        }
      })();
      return settledOnce;
    };

    const log = this.#deps.log;
    async function* events(): AsyncGenerator<StreamEvent> {
      try {
        try {
          for (let next = first; !next.done; next = await parts.next()) {
            const part = next.value;
            if (part.type === "usage") {
              usage = part.usage;
              continue;
            }
            if (part.type === "prompt_tokens") {
              upstreamPrompt = part.promptTokens;
              continue;
            }
            const chunk = { ...part.chunk, model: model.id };
            meta ??= { id: chunk.id, created: chunk.created };
            for (const choice of chunk.choices) {
              if (typeof choice.delta?.content === "string") produced += choice.delta.content;
            }
            waitingForClientSince = Date.now();
            yield { type: "chunk", chunk };
            waitingForClientSince = null;
          }
        } catch (error) {
          // A stall ended the upstream itself: that is reported below, not as an upstream failure.
          if (clientGone) return;
          if (stalledMs === null) {
            failure = error instanceof ProviderError
              ? error
              : new ProviderError("stream_cut", String((error as Error)?.message ?? error), {
                cause: error,
              });
            trace.upstreamFailure = failure.kind;
          }
        }
      } finally {
        await parts.return?.().catch(() => {});
        await settle();
      }
      if (stalledMs !== null) {
        // The client came back after the stall: its answer was cut, never a clean [DONE].
        yield {
          type: "error",
          error: new ApiError(
            "stream_interrupted",
            `The stream was ended because it was not read for ${
              Math.round(stalledMs / 1000)
            } s; the tokens produced before then were charged (${formatUsd(charged)} USD).`,
          ),
        };
        return;
      }
      if (settleFailed) {
        // Ending with [DONE] would claim a clean, billed completion; it was neither.
        yield {
          type: "error",
          error: new ApiError(
            "internal_error",
            `The response could not be billed; nothing was charged. Quote request id ${requestId} to support.`,
          ),
        };
        return;
      }
      if (request.includeUsage && usage) {
        const u: Usage = usage;
        yield {
          type: "chunk",
          chunk: {
            id: meta?.id ?? `chatcmpl-${requestId}`,
            object: "chat.completion.chunk",
            created: meta?.created ?? Math.floor(Date.now() / 1000),
            model: model.id,
            choices: [],
            usage: {
              prompt_tokens: u.promptTokens,
              completion_tokens: u.completionTokens,
              total_tokens: u.promptTokens + u.completionTokens,
              cost: formatUsd(charged),
            },
          },
        };
      }
      if (failure) {
        log({
          level: "warn",
          requestId,
          event: "upstream_stream_failed",
          kind: failure.kind,
          message: failure.message,
        });
        yield {
          type: "error",
          error: new ApiError(
            "stream_interrupted",
            `The upstream stream failed after it had begun (${failure.message}); the tokens produced before the cut were charged (${
              formatUsd(charged)
            } USD).`,
          ),
        };
      }
    }

    const iterator = events();
    const cancel = async () => {
      clientGone = true;
      upstreamAbort.abort(new DOMException("client closed the stream", "AbortError"));
      await iterator.return(undefined);
      await settle();
    };
    const stallMs = this.#deps.clientStallMs ?? DEFAULT_CLIENT_STALL_MS;
    const watchdog = setInterval(() => {
      if (settledOnce) return clearInterval(watchdog);
      if (waitingForClientSince === null || Date.now() - waitingForClientSince < stallMs) return;
      clearInterval(watchdog);
      log({ level: "warn", requestId, event: "client_stalled", stalledMs: stallMs });
      // Settle now, so the hold does not wait for a client that may never read again; the stream
      // itself stays open and, should the client resume, ends with an error event.
      stalledMs = stallMs;
      upstreamAbort.abort(new DOMException("the client stopped reading", "AbortError"));
      settle();
    }, Math.max(50, Math.min(1_000, stallMs / 4)));
    return { available, provider: route.provider.name, events: iterator, cancel };
  }

  /**
   * Calls the model's provider, then its fallbacks in order, until one answers. Only failures that
   * happen before anything reached the client and that another provider may not share move on;
   * a request the upstream rejected as invalid would be rejected by the next one too.
   */
  async #firstAnswer<T>(
    model: Model,
    requestId: string,
    trace: RequestTrace,
    call: (route: Model) => Promise<T>,
  ): Promise<{ value: T; route: Model }> {
    const routes: Model[] = [
      model,
      ...model.fallbacks.map((f) => ({
        ...model,
        provider: f.provider,
        upstreamModel: f.upstreamModel,
      })),
    ];
    for (const [i, route] of routes.entries()) {
      trace.provider = route.provider.name;
      try {
        return { value: await call(route), route };
      } catch (error) {
        const last = i === routes.length - 1;
        if (last || !(error instanceof ProviderError) || error.kind === "bad_request") throw error;
        this.#deps.log({
          level: error.kind === "upstream_auth" ? "error" : "warn",
          requestId,
          event: "upstream_fallback",
          provider: route.provider.name,
          next: routes[i + 1].provider.name,
          kind: error.kind,
          message: error.message,
        });
      }
    }
    throw new Error("unreachable: a model has at least one route");
  }

  async #prepare(
    caller: Caller,
    request: ChatRequest,
    requestId: string,
    trace: RequestTrace,
  ): Promise<Prepared> {
    const model = this.#deps.catalog.get(request.model);
    if (!model) {
      throw new ApiError(
        "model_not_found",
        `The model '${request.model}' does not exist or is not on the curated list.`,
        {
          param: "model",
        },
      );
    }
    trace.model = model.id;
    trace.provider = model.provider.name;
    trace.streamed = request.stream;
    if (request.maxTokens !== undefined && request.maxTokens > model.maxOutputTokens) {
      throw new ApiError(
        "invalid_parameter",
        `Invalid value for 'max_tokens': ${model.id} allows at most ${model.maxOutputTokens} output tokens.`,
        { param: "max_tokens" },
      );
    }
    const maxTokens = request.maxTokens ?? Math.min(DEFAULT_MAX_TOKENS, model.maxOutputTokens);
    const promptTokens = countPromptTokens(request.messages);
    if (promptTokens + maxTokens > model.contextTokens) {
      throw new ApiError(
        "context_length_exceeded",
        `The prompt (${promptTokens} tokens) plus max_tokens (${maxTokens}) exceeds the context of ${model.id} (${model.contextTokens} tokens).`,
        { param: "messages" },
      );
    }
    const amount = reservationCost(model, promptTokens, maxTokens);
    const tokens = promptTokens + maxTokens;
    const input = {
      amount,
      keyId: caller.keyId,
      requestId,
      model: model.id,
      tokens,
      keyGuard: caller.keyGuard,
    };
    let result = await this.#reserve(caller, input, trace);
    if (!result.ok && result.reserved > 0 && this.#lazySweepDue(caller.appId)) {
      // Holds left by a crashed instance must not block an app until the cron sweeper runs.
      const released = await releaseExpiredReservations(
        this.#deps.kv,
        this.#deps.wallets,
        caller.appId,
      );
      if (released > 0) result = await this.#reserve(caller, input, trace);
    }
    if (!result.ok) {
      const app = await getApp(this.#deps.kv, caller.appId);
      throw new ApiError(
        "insufficient_credits",
        `This request needs ${
          formatUsd(amount)
        } USD reserved (prompt plus max_tokens ${maxTokens} at ${model.id} prices); the balance is ${
          formatUsd(result.available)
        } USD.`,
        {
          extra: {
            balance: formatUsd(result.available),
            top_up_url: topUpUrl(this.#deps.publicUrl, app),
          },
        },
      );
    }
    trace.reserved = amount;
    return {
      model,
      promptTokens,
      maxTokens,
      hold: result.reservation,
      available: result.available,
    };
  }

  /** Reserves, or throws the refusal for rate: rate is decided first, so a 429 is never a 402. */
  async #reserve(caller: Caller, input: ReserveInput, trace: RequestTrace) {
    const result = await this.#deps.wallets.reserve(caller.appId, input).catch((error) => {
      // The key was revoked (on any instance) since this process cached it.
      if (!(error instanceof KeyRevokedError)) throw error;
      throw new ApiError(
        "invalid_api_key",
        "Invalid API key: it is malformed, unknown or revoked.",
      );
    });
    if (result.rate) trace.rateLimit = result.rate;
    if (!result.ok && result.reason !== "insufficient_credits") {
      throw rateLimitRefusal(result.reason, result.breach, result.retryAfterMs);
    }
    return result;
  }

  async #settle(
    caller: Caller,
    hold: ReservationRecord,
    model: Model,
    usage: Usage,
    info: { requestId: string; streamed: boolean; outcome: UsageOutcome; countedLocally: boolean },
    trace: RequestTrace,
  ) {
    const cost = usageCost(model, usage);
    const result = await this.#deps.wallets.settle(caller.appId, hold.id, {
      requestId: info.requestId,
      keyId: caller.keyId,
      model: model.id,
      provider: model.provider.name,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      cost,
      streamed: info.streamed,
      outcome: info.outcome,
      countedLocally: info.countedLocally,
    });
    trace.promptTokens = usage.promptTokens;
    trace.completionTokens = usage.completionTokens;
    trace.outcome = info.outcome;
    if (!result.settled) {
      // The sweeper released the hold first: the request is not charged, and never twice.
      this.#deps.log({
        level: "warn",
        requestId: info.requestId,
        event: "settle_after_release",
        appId: caller.appId,
      });
      trace.cost = 0;
      return { charged: 0, available: result.available };
    }
    trace.cost = result.charged;
    if (result.rate) trace.rateLimit = result.rate;
    return { charged: result.charged, available: result.available };
  }

  /**
   * Whether a would-be 402 may look for expired holds of this app now. Leases last minutes, so once
   * a second is plenty, and a flood of 402s does not turn into a scan of the app's holds each.
   */
  #lazySweepDue(appId: string): boolean {
    const now = Date.now();
    if ((this.#lastLazySweep.get(appId) ?? 0) > now - LAZY_SWEEP_EVERY_MS) return false;
    if (this.#lastLazySweep.size >= 10_000) this.#lastLazySweep.clear();
    this.#lastLazySweep.set(appId, now);
    return true;
  }

  /**
   * Renews the hold's lease while the request runs, from the reservation on: a slow first byte or a
   * long call must never let the sweeper release a live hold (the request would then go unbilled).
   * Three renewals per lease leave room for a late timer or a slow commit.
   */
  #keepHoldAlive(caller: Caller, hold: ReservationRecord): () => void {
    const wallets = this.#deps.wallets;
    const timer = setInterval(() => {
      wallets.renew(caller.appId, hold.id).catch(() => {});
    }, Math.max(100, wallets.leaseMs / 3));
    return () => clearInterval(timer);
  }

  async #release(caller: Caller, hold: ReservationRecord, trace: RequestTrace) {
    const result = await this.#deps.wallets.release(caller.appId, hold.id);
    if (result.rate) trace.rateLimit = result.rate;
    trace.cost = 0;
    trace.outcome = "released";
  }

  #providerError(error: unknown, trace: RequestTrace): ApiError {
    if (!(error instanceof ProviderError)) {
      trace.upstreamFailure = "unreachable";
      return new ApiError(
        "provider_unreachable",
        "The upstream provider could not be reached. Nothing was charged.",
      );
    }
    trace.upstreamFailure = error.kind;
    switch (error.kind) {
      case "rate_limited":
        return new ApiError(
          "upstream_rate_limited",
          `The upstream provider is rate limiting us; retry after ${
            error.retryAfterSeconds ?? 1
          } s. Nothing was charged.`,
          { headers: { "retry-after": String(error.retryAfterSeconds ?? 1) } },
        );
      case "bad_request":
        return /context|too long|maximum.*tokens|token limit/i.test(error.message)
          ? new ApiError(
            "context_length_exceeded",
            `The upstream provider rejected the request: ${error.message}`,
            {
              param: "messages",
            },
          )
          : new ApiError(
            "upstream_rejected",
            `The upstream provider rejected the request: ${error.message}`,
          );
      case "upstream_auth":
        this.#deps.log({
          level: "error",
          event: "upstream_credentials_refused",
          provider: trace.provider,
          message: error.message,
        });
        return new ApiError(
          "provider_unreachable",
          "The upstream provider is unavailable. Nothing was charged.",
        );
      default:
        return new ApiError(
          "provider_unreachable",
          `The upstream provider failed (${error.kind}). Nothing was charged.`,
        );
    }
  }
}
