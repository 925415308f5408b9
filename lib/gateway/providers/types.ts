import type { Model, Usage } from "@/lib/catalog/mod.ts";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface UpstreamRequest {
  model: Model;
  messages: ChatMessage[];
  maxTokens: number;
  /** Compatible fields we do not interpret (temperature, top_p, stop, seed, user…), passed on. */
  passthrough: Record<string, unknown>;
  signal: AbortSignal;
  requestId: string;
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
  usage?: {
    prompt_tokens: number;
    completion_tokens: number;
    total_tokens: number;
    [k: string]: unknown;
  };
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
  /** The upstream's own prompt count, known before the end; used if the final usage never comes. */
  | { type: "prompt_tokens"; promptTokens: number }
  | { type: "usage"; usage: Usage };

export type ProviderFailure =
  | "not_configured"
  | "unreachable"
  | "timeout"
  | "upstream_error"
  | "upstream_auth"
  | "rate_limited"
  | "bad_request"
  | "malformed_response"
  | "stream_cut";

/** A failure of the upstream; `kind` decides status and charge. */
export class ProviderError extends Error {
  readonly kind: ProviderFailure;
  readonly upstreamStatus?: number;
  readonly retryAfterSeconds?: number;

  constructor(
    kind: ProviderFailure,
    message: string,
    options: { upstreamStatus?: number; retryAfterSeconds?: number; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.kind = kind;
    this.upstreamStatus = options.upstreamStatus;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

export interface Provider {
  complete(request: UpstreamRequest): Promise<CompletionResult>;
  /** Resolves once the upstream has answered; the iterable then yields parts as they arrive. */
  stream(request: UpstreamRequest): Promise<AsyncIterable<StreamPart>>;
}
