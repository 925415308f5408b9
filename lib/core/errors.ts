/**
 * Every error code the API can return, with its status and type. The error page and the OpenAPI
 * document are generated from this table, so a code cannot exist without its documentation.
 */
export const ERROR_CODES = {
  invalid_json: {
    status: 400,
    type: "invalid_request_error",
    title: "Body is not a JSON object",
    cause:
      "The request body could not be parsed as JSON, or it is JSON but not an object, or it names a key `__proto__` (refused: it would set an object's prototype).",
    fix: "Send a JSON object with `Content-Type: application/json`.",
  },
  missing_parameter: {
    status: 400,
    type: "invalid_request_error",
    title: "A required field is missing",
    cause:
      "A required field is absent: `model` or `messages` (chat completions), `model` or `input` (embeddings). `param` names the missing field.",
    fix: "Add the field named in `param`.",
  },
  invalid_parameter: {
    status: 400,
    type: "invalid_request_error",
    title: "A field has the wrong type or value",
    cause:
      "A field is present but invalid: a message role other than system, developer, user, assistant or tool, empty `messages`, a non-integer or out-of-range `max_tokens`, a prompt plus `max_tokens` larger than the tokens-per-minute limit (waiting would never help), and so on. `param` is the path of the field, such as `messages[2].role`.",
    fix: "Correct the field named in `param`; the message says what is allowed.",
  },
  unsupported_parameter: {
    status: 400,
    type: "invalid_request_error",
    title: "A field the model's provider cannot honour",
    cause:
      "The request is valid, but the field named in `param` cannot be served as asked: the model's provider kind has no equivalent (such as `logprobs` on an Anthropic model), or it would change the price beyond the catalog's (a `service_tier` other than auto or default, audio output, web search), or its tokens cannot be bounded before the call (audio and file parts). Nothing was charged.",
    fix:
      "Drop the field named in `param`, or use a model whose provider supports it; the dialect table on the docs page lists what each provider kind does with every field.",
  },
  model_not_found: {
    status: 400,
    type: "invalid_request_error",
    title: "Unknown model",
    cause: "`model` is not on the curated list.",
    fix: "Use a model ID from the models page, of the form `<provider>/<model_name>`.",
  },
  unsupported_version: {
    status: 400,
    type: "invalid_request_error",
    title: "Unsupported API version",
    cause: "The `Tollbooth-Version` request header names a version this service does not serve.",
    fix: "Omit the header, or send `2026-07-29`, the current and only version.",
  },
  request_too_large: {
    status: 400,
    type: "invalid_request_error",
    title: "Request body too large",
    cause:
      "The request body is larger than the documented limit (4 MiB by default), or decodes to more than it (a body sent with `Content-Encoding`).",
    fix: "Send a shorter conversation, or smaller images and PDFs (a PDF's base64 counts in full).",
  },
  unsupported_content_encoding: {
    status: 415,
    type: "invalid_request_error",
    title: "Request body in an unsupported coding",
    cause:
      "The request's `Content-Encoding` names a coding other than `gzip`, `deflate`, `br` or `zstd` (or several codings, one over another). Nothing was charged.",
    fix: "Send the body as is, or compressed with one of gzip, deflate, br or zstd.",
  },
  request_timeout: {
    status: 408,
    type: "invalid_request_error",
    title: "Request body not received in time",
    cause:
      "The request body had not arrived whole `BODY_READ_TIMEOUT_MS` (60 seconds by default) after its headers. A slow upload holds a connection and what it has sent, so it is cut off. Nothing was charged.",
    fix: "Send the body at once, and retry; the OpenAI SDKs retry a 408 by themselves.",
  },
  context_length_exceeded: {
    status: 400,
    type: "invalid_request_error",
    title: "Prompt too long for the model",
    cause:
      "The prompt plus `max_tokens` does not fit the model's context window, or the provider said the prompt is too long; for embeddings, one input has more tokens than the model takes (`param` names it). Nothing was charged.",
    fix: "Shorten the conversation or lower `max_tokens`; split or shorten the embedding input.",
  },
  model_not_supported: {
    status: 400,
    type: "invalid_request_error",
    title: "Model of another type",
    cause:
      "`model` is on the curated list but is not served by this endpoint: an embedding model sent to `POST /v1/chat/completions` or `POST /v1/responses`, or a chat model sent to `POST /v1/embeddings`. `param` is `model`. Nothing was charged.",
    fix:
      "Use a model whose `type` (in `GET /v1/models`) matches the endpoint: `chat` for chat completions, `embedding` for embeddings.",
  },
  upstream_rejected: {
    status: 400,
    type: "invalid_request_error",
    title: "The provider rejected the request",
    cause:
      "The model's provider refused the request as invalid; the message quotes its reason, and `param` names the field when the provider named one (as it was sent upstream: `max_completion_tokens` for a reasoning model's cap). Nothing was charged.",
    fix:
      "Correct the request as the message says (often a passed-through field the model does not support).",
  },
  idempotency_key_with_stream: {
    status: 400,
    type: "invalid_request_error",
    title: "Idempotency-Key on a streamed request",
    cause:
      "The request has an `Idempotency-Key` header and `stream: true`. A stream is delivered live as it is produced; a recorded copy is not replayed, so keys are refused on streams rather than silently ignored. Nothing was charged.",
    fix:
      "Send the streamed request without `Idempotency-Key`, or send it non-streamed when a retry must never run twice.",
  },
  idempotency_key_in_use: {
    status: 409,
    type: "invalid_request_error",
    title: "Idempotency key in use",
    cause:
      "A request with the same `Idempotency-Key` is still running. This one was not run and nothing was charged for it.",
    fix:
      "Retry after a moment with the same key: once the first request has finished, its answer is replayed (`Idempotent-Replayed: true`).",
  },
  idempotency_key_reused: {
    status: 422,
    type: "invalid_request_error",
    title: "Idempotency key reused with another request",
    cause:
      "The `Idempotency-Key` was used in the last 24 hours for another endpoint (method and path; the message names it), or with a different body (compared as canonical JSON: key order and spacing do not matter). Nothing was run or charged.",
    fix:
      "Use a new key (a UUID) for every distinct request; reuse a key only to retry the same one.",
  },
  idempotency_answer_lost: {
    status: 422,
    type: "invalid_request_error",
    title: "Idempotent answer lost",
    cause:
      "The first request with this `Idempotency-Key` was charged, but the server stopped before it recorded the answer, so it cannot be given again. This repeat was not run and nothing was charged for it; the message names the first request's id and its cost.",
    fix:
      "To run the request again, and be charged again, send it with a new key. The first request's usage record (by its id) shows what it was charged.",
  },
  idempotency_replay_too_large: {
    status: 422,
    type: "invalid_request_error",
    title: "Idempotent answer too large to replay",
    cause:
      "The first request with this `Idempotency-Key` and body succeeded and was charged, but its answer was larger than the server keeps for replays (8 MiB by default), so it was not recorded. This repeat was not run and nothing was charged for it; the message names the first request's id.",
    fix:
      'Ask for a smaller answer where a retry must be safe (embeddings: fewer inputs per request, or `encoding_format: "base64"`). To run the request again, and be charged again, send it with a new key.',
  },
  invalid_api_key: {
    status: 401,
    type: "authentication_error",
    title: "Invalid API key",
    cause: "The `Authorization` header is missing or malformed, or the key is unknown or revoked.",
    fix: "Send `Authorization: Bearer <API_KEY>` with a live key from the dashboard.",
  },
  invalid_management_key: {
    status: 401,
    type: "authentication_error",
    title: "Invalid management key",
    cause:
      "A management API route was called without `Authorization: Bearer tbm_…`, or with a management key that is malformed, unknown or revoked. App API keys (`tb_…`) do not open the management API.",
    fix: "Create a management key in the dashboard (Account → Management keys) and send it.",
  },
  resource_not_found: {
    status: 404,
    type: "invalid_request_error",
    title: "No such resource",
    cause:
      "The app or key named in the path does not exist, or belongs to another owner (the two look the same), or a segment of the path is longer than 512 characters, which no id is; a key the dashboard was asked to rotate had been revoked (by another tab, or a click before). `param` names the path parameter.",
    fix: "List your apps (`GET /v1/management/apps`) or the app's keys for valid ids.",
  },
  api_key_limit_reached: {
    status: 403,
    type: "invalid_request_error",
    title: "The app has as many API keys as allowed",
    cause:
      "A new API key was asked (management API or dashboard) for an app that already has the most live (not revoked) keys an app may have, 100 by default (`MAX_LIVE_KEYS_PER_APP`). Nothing was created. Rotating a key replaces it and is never refused.",
    fix:
      "Revoke keys the app no longer uses (`POST /v1/management/apps/{app_id}/keys/{key_id}/revoke`, or the dashboard), then create the new one.",
  },
  insufficient_credits: {
    status: 402,
    type: "insufficient_credits",
    title: "Insufficient credits",
    cause:
      "The app's wallet cannot cover the reservation of this request: the prompt plus `max_tokens` of output at the model's prices. `balance` is the current balance.",
    fix: "Send your user to `top_up_url`, or lower `max_tokens` so that the reservation fits.",
  },
  key_spend_cap_exceeded: {
    status: 402,
    type: "spend_cap_error",
    title: "The API key's spend cap is reached",
    cause:
      "The request's reservation does not fit under a spend cap the owner set on this API key: `cap` says which (`total`, `daily` or `monthly`, UTC windows), `cap_amount` its amount and `remaining` what the key may still reserve (requests in flight count until they are settled). The wallet may have money: topping it up does not help. Nothing was reserved.",
    fix:
      "Wait for the next UTC day or month for a daily or monthly cap, lower `max_tokens` so the reservation fits `remaining`, or ask the app's owner to raise the cap.",
  },
  user_spend_cap_exceeded: {
    status: 402,
    type: "spend_cap_error",
    title: "The end user's spend cap is reached",
    cause:
      "The request's `user` has reached the spend cap the app's owner set for each end user: `cap` says which (`total`, `daily` or `monthly`), `cap_amount` its amount and `remaining` what this end user may still reserve. Other end users are not affected. Nothing was reserved.",
    fix:
      "Tell your end user their allowance is used up until the next day or month, or raise the per-end-user cap in the dashboard or the management API.",
  },
  rate_limit_exceeded: {
    status: 429,
    type: "rate_limit_error",
    title: "Rate limit exceeded",
    cause:
      "This API key or its app has used its requests or tokens per minute (the tighter of the two limits applies). A request counts its prompt plus `max_tokens` when it starts, corrected to the tokens actually used when it ends. Nothing was reserved, charged or counted for the refused request; a 429 is about time, a 402 about money, and rate is checked first. Management API: the account's management keys, which share one count, have made `MANAGEMENT_RATE_LIMIT_RPM` requests (300 by default) between them in the current minute; the request was not run and nothing was created, changed or counted.",
    fix:
      "Wait the number of seconds in `Retry-After`, then retry (the official OpenAI clients do this by themselves). Pace requests with the `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` headers; a lower `max_tokens` counts fewer tokens. On the management API, `Retry-After` is the time to the end of the minute, and `x-ratelimit-remaining-requests` what the account has left of it.",
  },
  upstream_rate_limited: {
    status: 429,
    type: "rate_limit_error",
    title: "The provider is rate limiting",
    cause:
      "The model's provider answered 429 to us. This is not your app's limit. Nothing was charged.",
    fix: "Wait the number of seconds in `Retry-After`, or use another model.",
  },
  not_found: {
    status: 404,
    type: "invalid_request_error",
    title: "No such endpoint or model",
    cause:
      "The path or method does not exist (see `/openapi.json`: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/embeddings`, `GET /v1/models`, `GET /v1/models/{model}` and the management API under `/v1/management/`), or `GET /v1/models/{model}` names a model that is not on the curated list (`param`: `model`), or a segment of the path is longer than 512 characters, which no model id is.",
    fix: "Check the path and method, or take the model ID from `GET /v1/models`.",
  },
  provider_unreachable: {
    status: 502,
    type: "api_error",
    title: "Upstream provider unreachable",
    cause:
      "The model's provider (and each of its fallbacks) refused the connection, failed DNS or TLS, did not answer within its timeout, answered 5xx, refused our credentials, or sent malformed data before the response began. Nothing was charged.",
    fix: "Retry later, or use another model.",
  },
  stream_interrupted: {
    status: 502,
    type: "api_error",
    title: "The provider's stream broke off",
    cause:
      "Sent only as the last event of a stream that had already begun (the HTTP status was 200): the provider cut the stream, stalled longer than the timeout, sent an error event or malformed data. There is no `[DONE]`. The tokens produced before the cut are charged, counted by us when the provider gave no usage.",
    fix:
      "Keep what arrived or retry the request; ask for `stream_options.include_usage` to see the exact charge in the usage chunk before this event.",
  },
  upstream_interrupted: {
    status: 502,
    type: "api_error",
    title: "The provider broke off mid-answer",
    cause:
      "A non-streamed request is served from a streamed upstream call: the provider cut the connection, sent an error, or stayed silent longer than its timeout after it had begun answering. The provider bills the tokens it produced, so they are charged (counted by us when the provider gave no usage); `Tollbooth-Request-Cost` on this response says how much. The partial answer is not returned.",
    fix:
      "Retry the request if you want the answer (a retry is charged again), or stream it (`stream: true`) to keep what arrives before a cut. The response says `x-should-retry: false`, so the official OpenAI and Anthropic SDKs do not retry it by themselves; clients that retry every 5xx (the Vercel AI SDK, LangChain) do, unless the request carries an `Idempotency-Key`.",
  },
  payments_unavailable: {
    status: 503,
    type: "api_error",
    title: "Payments are not configured",
    cause:
      "Answered only to Stripe's webhook (`POST /webhooks/stripe`): this server has no `STRIPE_SECRET_KEY` and `STRIPE_WEBHOOK_SECRET`, so it cannot check or credit the event. Nothing was credited; Stripe delivers the event again later.",
    fix:
      "Set both secrets on the server that `PUBLIC_URL/webhooks/stripe` reaches, or point the Stripe webhook at the server that has them.",
  },
  refund_failed: {
    status: 502,
    type: "api_error",
    title: "A refused payment's refund failed",
    cause:
      "Answered only to Stripe's webhook (`POST /webhooks/stripe`): a paid top-up could not be credited, because its app's wallet was credited to the most a wallet may hold (one billion USD) after the checkout opened, and refunding the payment through Stripe's Refunds API failed this time (Stripe refused it or did not answer). Nothing was credited; Stripe delivers the event again later, and the refund is tried again then (once made, never again).",
    fix:
      "Nothing, if a later delivery succeeds. If it persists, the `top_up_refund_failed` log lines quote Stripe's error: check that the secret key may create refunds and that the Stripe balance covers the refund.",
  },
  service_unavailable: {
    status: 503,
    type: "api_error",
    title: "Busy for a moment",
    cause:
      "Our storage stayed busy (other instances held its lock) for longer than we wait, about two seconds (for a finished response's bill, about 80 seconds), so the request was stopped before it was answered. Nothing was charged for it.",
    fix:
      "Wait the number of seconds in `Retry-After`, then retry (the official OpenAI clients do this by themselves).",
  },
  internal_error: {
    status: 500,
    type: "api_error",
    title: "Internal error",
    cause:
      "An unexpected error on our side. Nothing was charged for a request that did not complete.",
    fix: "Retry; if it persists, contact support with the `Tollbooth-Request-Id`.",
  },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/** An error meant for the client, in the spec's error shape. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly param?: string;
  readonly extra: Record<string, string>;
  readonly headers: Record<string, string>;

  constructor(
    code: ErrorCode,
    message: string,
    options: { param?: string; extra?: Record<string, string>; headers?: Record<string, string> } =
      {},
  ) {
    super(message);
    this.code = code;
    this.param = options.param;
    this.extra = options.extra ?? {};
    this.headers = options.headers ?? {};
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  body(docsBaseUrl: string) {
    return errorBody(this.code, this.message, docsBaseUrl, {
      param: this.param,
      extra: this.extra,
    });
  }
}

export function errorBody(
  code: ErrorCode,
  message: string,
  docsBaseUrl: string,
  options: { param?: string; extra?: Record<string, string> } = {},
) {
  const error: Record<string, string> = { type: ERROR_CODES[code].type, code, message };
  if (options.param !== undefined) error.param = options.param;
  error.doc_url = `${docsBaseUrl}/docs/errors#${code}`;
  return { error: { ...error, ...options.extra } };
}

/** A record the caller named does not exist (an app, a key); routes turn it into their own 404. */
export class NotFoundError extends Error {}
