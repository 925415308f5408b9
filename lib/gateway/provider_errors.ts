/**
 * How an upstream failure reaches the client: one row per kind of failure. Every row but a
 * rejected request releases the whole reservation, so each message says nothing was charged.
 */
import { ApiError } from "@/lib/core/mod.ts";
import { ProviderError, type ProviderFailure } from "./providers/types.ts";
import { readableEscapes, withoutQuotes } from "./upstream_log.ts";
import type { ProviderConfig } from "@/lib/catalog/mod.ts";
import { clientSafe, upstreamReasonsShown } from "./redact.ts";
import { retryAfterHeaders, retryAfterSeconds } from "@/lib/billing/mod.ts";

/**
 * The rejection reads like the prompt does not fit the model's context window. "context" alone is
 * not enough: OpenAI's schema errors say where they are with `In context=(...)`.
 */
const CONTEXT_OVERFLOW =
  /context.?(length|window|limit|size)|too long|maximum.*tokens|token limit/i;

/** Codes that name only the class of a rejection, not its cause (DeepSeek's, Gemini's). */
const GENERIC_CODE = /^(\d+|invalid_request_error|invalid_request|invalid_argument|bad_request)$/i;

/**
 * Whether a rejection is for the context window. The upstream's error code decides when it gave
 * a specific one (OpenAI's `context_length_exceeded`, `string_above_max_length`); else its words
 * do, with what it quoted of the request (`sent`) left out, so a prompt that says "too long"
 * cannot decide it.
 */
function overflowsContext(error: ProviderError, sent: () => string[]): boolean {
  const code = error.upstreamError?.code;
  if (code && !GENERIC_CODE.test(code)) return /context/i.test(code);
  return CONTEXT_OVERFLOW.test(withoutQuotes(readableEscapes(error.message), sent()));
}

/** What of an upstream's error a client may be told. */
interface Quoting {
  /**
   * Whether the upstream was sent the client's body as it came: only the OpenAI kind's is (its
   * embeddings too); a field another kind names is one of the body we made.
   */
  namesClientFields: boolean;
  /** Whether its reasons are shown at all (upstreamReasonsShown). */
  reasonShown: boolean;
}

/** The upstream's reason as a client reads it after "The upstream provider rejected the request". */
function rejection(e: ProviderError, quoting: Quoting): string {
  return quoting.reasonShown
    ? `: ${clientSafe(e.message)}`
    : " (its reason is in the operator's log: this provider's messages could quote our key)";
}

const API_ERROR_OF: Record<
  ProviderFailure,
  (error: ProviderError, sent: () => string[], quoting: Quoting) => ApiError
> = {
  rate_limited: (e) =>
    new ApiError(
      "upstream_rate_limited",
      `The upstream provider is rate limiting us; retry after ${
        retryAfterSeconds(e.retryAfterMs ?? 1000)
      } s. Nothing was charged.`,
      { headers: retryAfterHeaders(e.retryAfterMs ?? 1000) },
    ),
  bad_request: (e, sent, quoting) =>
    // A withheld reason is read whole: which words of the client's the check left out would tell
    // a client which of its guesses sat next to our key.
    overflowsContext(e, quoting.reasonShown ? sent : () => [])
      ? new ApiError(
        "context_length_exceeded",
        `The upstream provider rejected the request${rejection(e, quoting)}`,
        { param: "messages" },
      )
      : new ApiError(
        "upstream_rejected",
        `The upstream provider rejected the request${rejection(e, quoting)}`,
        // The field it names, when it names one (OpenAI-compatible servers do; Anthropic does not)
        // and its body is the client's own: a path in a body we translated (a Responses
        // `input[1].content[1].file_data`) names nothing the client sent. Its words still say it.
        e.upstreamError?.param && quoting.namesClientFields && quoting.reasonShown
          ? { param: clientSafe(e.upstreamError.param) }
          : {},
      ),
  // Our credentials are the operator's problem, not the client's: no detail leaves.
  upstream_auth: () =>
    new ApiError(
      "provider_unreachable",
      "The upstream provider is unavailable. Nothing was charged.",
    ),
  not_configured: unavailable,
  unreachable: unavailable,
  timeout: unavailable,
  upstream_error: unavailable,
  malformed_response: unavailable,
  stream_cut: unavailable,
};

function unavailable(e: ProviderError): ApiError {
  return new ApiError(
    "provider_unreachable",
    `The upstream provider failed (${e.kind}). Nothing was charged.`,
  );
}

/**
 * The API error for a failed upstream call, and the failure kind to log. `sent` gives the texts of
 * the request (`requestTexts`), which the upstream's message may quote.
 */
export function apiErrorOfUpstream(
  error: unknown,
  sent: () => string[] = () => [],
  /** The provider that failed, once one was called. */
  provider?: ProviderConfig,
): { error: ApiError; failure: ProviderFailure } {
  if (!(error instanceof ProviderError)) {
    return {
      failure: "unreachable",
      error: new ApiError(
        "provider_unreachable",
        "The upstream provider could not be reached. Nothing was charged.",
      ),
    };
  }
  return {
    failure: error.kind,
    error: API_ERROR_OF[error.kind](error, sent, {
      namesClientFields: provider === undefined || provider.kind === "openai",
      reasonShown: provider === undefined || upstreamReasonsShown(provider),
    }),
  };
}

/** A cut stream's reason as a client reads it after "broke off": in parentheses, or nothing. */
export function cutReason(failure: ProviderError, provider: ProviderConfig): string {
  return upstreamReasonsShown(provider) ? ` (${clientSafe(failure.message)})` : "";
}
