import type { Model, Usage } from "@/lib/catalog/mod.ts";
import type { ChatRequest } from "../chat_request.ts";
import type { ReasoningDetail } from "../reasoning_details.ts";

export interface UpstreamRequest {
  /** The route: the model as this provider names it (a fallback has its own upstream name). */
  model: Model;
  /** The validated request; each adapter sends or translates the fields its kind supports. */
  request: ChatRequest;
  /** The output cap: the client's, or the default; the reservation was priced on it. */
  maxTokens: number;
  signal: AbortSignal;
  requestId: string;
}

/** Usage in the compatible shape, with the details both providers report. */
export interface UsageObject {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number; [k: string]: unknown };
  completion_tokens_details?: { reasoning_tokens?: number; [k: string]: unknown };
  [k: string]: unknown;
}

/** A chat.completion object in the common compatible shape. */
export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: {
    index: number;
    message: { role: "assistant"; content: string | null; [k: string]: unknown };
    finish_reason: string | null;
    [k: string]: unknown;
  }[];
  usage?: UsageObject;
  [k: string]: unknown;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: number;
    delta: { role?: string; content?: string | null; [k: string]: unknown };
    finish_reason: string | null;
    [k: string]: unknown;
  }[];
  usage?: unknown;
  [k: string]: unknown;
}

export interface CompletionResult {
  completion: ChatCompletion;
  /** Null when the upstream reported no usage; the caller counts it. */
  usage: Usage | null;
}

/** What a provider's stream yields: content chunks, and the usage once it is known. */
export type StreamPart =
  | { type: "chunk"; chunk: ChatCompletionChunk }
  /**
   * The upstream's own prompt count, known before the end; used if the final usage never comes.
   * The cache breakdown, when the upstream gives one, is priced as the final usage's would be.
   */
  | {
    type: "prompt_tokens";
    promptTokens: number;
    cachedTokens?: number;
    cacheWriteTokens?: number;
    cacheWrite1hTokens?: number;
  }
  /** `raw` is the usage object to show the client (the upstream's, details kept), when there is one. */
  | { type: "usage"; usage: Usage; raw?: UsageObject }
  /**
   * Output the upstream produced, and bills, that no chunk carries (yet): text held back or
   * dropped by a converter. Cumulative, so the last wins; counted with the chunks' output when the
   * upstream's usage never comes.
   */
  | { type: "unshown_output"; text: string }
  /**
   * The upstream is doing work it bills and does not show, unasked (a Claude model that thinks
   * without being asked to): a client that leaves saves nothing, so the stream is read to its usage.
   */
  | { type: "hidden_work" }
  /**
   * An answer of a Claude that thinks by budget ends calling tools with this signed thinking: kept
   * for the app before the answer's last chunk goes out (thinking_memory.ts), sent before that
   * chunk. `toolCallId` is the first call's id, as the client sees it.
   */
  | { type: "signed_thinking"; toolCallId: string; details: ReasoningDetail[] };

/**
 * Every kind of upstream failure, with what it means: the log line's `upstreamFailure` and the
 * `kind` label of `tollbooth_upstream_failures_total`, whose help text and /docs/operations list
 * are made from this table.
 */
export const PROVIDER_FAILURES = {
  not_configured: "the provider's key is not set",
  unreachable: "no connection (refused, DNS, TLS, reset before an answer)",
  timeout: "no answer, or no data mid-answer, for the provider's timeout",
  upstream_error: "a 5xx, 404 or 408 answer",
  upstream_auth: "our key refused (401, 402, 403)",
  rate_limited: "the provider's 429",
  bad_request: "another 4xx: the provider refused the request as invalid",
  malformed_response: "an answer we could not read",
  stream_cut: "the provider broke off mid-answer (connection dropped, error event, unfinished)",
} as const;

export type ProviderFailure = keyof typeof PROVIDER_FAILURES;

/** What an upstream's error object names besides its message (OpenAI's and Anthropic's shapes). */
export interface UpstreamErrorFields {
  type: string | null;
  code: string | null;
  param: string | null;
}

/**
 * The error object of an error answer or event: `{error: {…}}` (OpenAI, Anthropic), the object
 * itself (older vLLM, xAI's `{code, error: "<text>"}`, Mistral's `{object: "error", message}`), or
 * the one element of an array (Gemini's compatible endpoint answers `[{error: {…}}]`).
 */
function upstreamErrorObject(json: unknown): Record<string, unknown> {
  const body = Array.isArray(json) && json.length === 1 ? json[0] : json;
  const outer = body && typeof body === "object" ? body as Record<string, unknown> : {};
  return outer.error && typeof outer.error === "object"
    ? outer.error as Record<string, unknown>
    : outer;
}

/** The fields of an error answer or error event, in any of the shapes upstreamErrorObject reads. */
export function upstreamErrorFields(json: unknown): UpstreamErrorFields {
  const inner = upstreamErrorObject(json);
  const text = (value: unknown) =>
    typeof value === "string" || typeof value === "number" ? String(value) : null;
  const code = text(inner.code);
  // xAI puts a gRPC status's words in `code` ("Client specified an invalid argument"): not a code.
  return {
    type: text(inner.type),
    code: code?.includes(" ") ? null : code,
    param: text(inner.param),
  };
}

/**
 * The human-readable reason of an error answer or event: its message, or xAI's `error` text, or
 * Mistral's validation details (`message.detail`, each `loc` and `msg`), at most 500 characters.
 */
export function upstreamErrorMessage(json: unknown): string | null {
  const inner = upstreamErrorObject(json);
  const said = inner.message ?? (typeof inner.error === "string" ? inner.error : inner.detail);
  if (typeof said === "string") return said.slice(0, 500);
  if (said === undefined || said === null) return null;
  const details = (said as { detail?: unknown }).detail ?? said;
  if (Array.isArray(details)) {
    const lines = details.map((d) => {
      const { loc, msg } = (d ?? {}) as { loc?: unknown; msg?: unknown };
      const where = Array.isArray(loc) ? loc.join(".") : "";
      return typeof msg === "string" ? (where ? `${where}: ${msg}` : msg) : JSON.stringify(d);
    });
    return lines.join("; ").slice(0, 500);
  }
  return JSON.stringify(said).slice(0, 500);
}

/** A failure of the upstream; `kind` decides status and charge. */
export class ProviderError extends Error {
  readonly kind: ProviderFailure;
  readonly upstreamStatus?: number;
  /** How long the upstream asked us to wait before retrying (a 429), within the relayed cap. */
  readonly retryAfterMs?: number;
  /** What the upstream's error object said besides the message, when it sent one. */
  readonly upstreamError?: UpstreamErrorFields;

  constructor(
    kind: ProviderFailure,
    message: string,
    options: {
      upstreamStatus?: number;
      retryAfterMs?: number;
      upstreamError?: UpstreamErrorFields;
      cause?: unknown;
    } = {},
  ) {
    super(message, { cause: options.cause });
    this.kind = kind;
    this.upstreamStatus = options.upstreamStatus;
    this.retryAfterMs = options.retryAfterMs;
    this.upstreamError = options.upstreamError;
  }
}

/**
 * One wire format. There is only a streamed call: a non-streamed request is served from it,
 * assembled into one completion (assemble.ts), so that a timeout measures silence, not length.
 */
export interface Provider {
  /**
   * Resolves once the upstream has answered; the iterable then yields parts as they arrive, in
   * batches: what one read of the upstream brought, never an empty batch.
   */
  stream(request: UpstreamRequest): Promise<AsyncIterable<StreamPart[]>>;
  /**
   * Whether the provider bills work this request's stream does not show (a reasoning model's
   * hidden reasoning, Claude's full thinking behind its summary): such a stream is read to its
   * usage even when the client leaves.
   */
  billsHiddenWork?(request: UpstreamRequest): boolean;
  /**
   * The exact input tokens of a request, for a provider that counts them for free before the call
   * (Anthropic's count_tokens); absent where there is no such endpoint.
   */
  countInputTokens?(request: UpstreamRequest): Promise<number>;
  /** Absent for a wire format without embeddings (the catalog gives such a provider none). */
  embed?(request: EmbedRequest): Promise<EmbedResult>;
}

export interface EmbedRequest {
  model: Model;
  /** As the client sent it: a string, strings, token ids or arrays of token ids. */
  input: string | string[] | number[] | number[][];
  /** The same, one entry per input. */
  inputs: (string | number[])[];
  encodingFormat: "float" | "base64";
  dimensions: number | undefined;
  user: string | undefined;
  signal: AbortSignal;
  requestId: string;
}

export interface Embedding {
  object: "embedding";
  index: number;
  /** In the encoding the client asked for. */
  embedding: number[] | string;
}

export interface EmbedResult {
  /** One per input, in input order. */
  data: Embedding[];
  /** The input tokens the upstream billed; null when it reported none (the caller counts them). */
  promptTokens: number | null;
}
