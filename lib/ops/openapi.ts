/**
 * The OpenAPI 3.1 document of the public API (served at /openapi.json). Error responses are
 * generated from ERROR_CODES, so a new code appears here, on the error page and in `doc_url` at once.
 */
import { z } from "zod";
import {
  ChatRequestSchema,
  DEFAULT_MAX_TOKENS,
  FIELD_SUPPORT,
  MAX_EMBEDDING_INPUTS,
  MAX_EMBEDDING_REQUEST_TOKENS,
  RESPONSE_INCLUDABLES,
} from "@/lib/gateway/mod.ts";
import { ERROR_CODES, type ErrorCode } from "@/lib/core/mod.ts";
import { MANAGEMENT_ONLY_ERRORS, managementOpenApi } from "./management_openapi.ts";
import { storedResponsesOpenApi } from "./stored_responses_openapi.ts";

/** The rate-limit headers of the common compatible form (see /docs/rate-limits). */
export const RATE_LIMIT_HEADERS = {
  "x-ratelimit-limit-requests": "Requests allowed per minute (RATE_LIMIT_RPM).",
  "x-ratelimit-remaining-requests": "Requests left in the current window.",
  "x-ratelimit-reset-requests": "Time until the request window resets, such as `1s` or `6m0s`.",
  "x-ratelimit-limit-tokens": "Tokens allowed per minute (RATE_LIMIT_TPM).",
  "x-ratelimit-remaining-tokens": "Tokens left in the current window.",
  "x-ratelimit-reset-tokens": "Time until the token window resets, such as `1s` or `6m0s`.",
} as const;

/** On the answer of a repeated Idempotency-Key, replayed from the first request. */
const REPLAY_HEADERS = {
  "Idempotent-Replayed": {
    component: "IdempotentReplayed",
    description:
      "`true` when this is the recorded answer of an earlier request with the same `Idempotency-Key`: nothing ran and nothing was charged this time.",
    schema: { type: "string", const: "true" },
  },
  "Tollbooth-Original-Request-Id": {
    component: "OriginalRequestId",
    description:
      "On a replay: the `Tollbooth-Request-Id` of the request that ran (this response has its own).",
    schema: { type: "string", pattern: "^req_[0-9a-z]+$" },
  },
} as const;

/** Error codes whose answer was charged: they carry the cost, and an Idempotency-Key records them. */
const CHARGED_ERRORS: ErrorCode[] = ["upstream_interrupted"];

type Operation = { parameters?: unknown[]; responses: Record<string, { headers?: object }> };

/**
 * Adds the replay headers to every answer an `Idempotency-Key` records (a 2xx, or an error that
 * was charged: it carries `Tollbooth-Request-Cost`), on every operation that takes the key. Done
 * over the whole document, so an idempotent operation added later cannot miss them.
 */
function withReplayHeaders<P extends Record<string, Record<string, unknown>>>(paths: P): P {
  const takesKey = (op: Operation) =>
    (op.parameters ?? []).some((p) =>
      (p as { $ref?: string }).$ref === "#/components/parameters/IdempotencyKey"
    );
  for (const item of Object.values(paths)) {
    for (const op of Object.values(item) as Operation[]) {
      if (!takesKey(op)) continue;
      for (const [status, response] of Object.entries(op.responses)) {
        const charged = "Tollbooth-Request-Cost" in (response.headers ?? {});
        if (!status.startsWith("2") && !charged) continue;
        // A copy: responses of several operations may share one headers object.
        response.headers = {
          ...response.headers,
          ...Object.fromEntries(
            Object.entries(REPLAY_HEADERS).map(([name, h]) => [name, headerRef(h.component)]),
          ),
        };
      }
    }
  }
  return paths;
}

/** Amounts in headers and bodies: USD with exactly six decimals. */
const MONEY_PATTERN = "^[0-9]+\\.[0-9]{6}$";
/** Catalog prices: USD per million tokens, up to six decimals. */
const PRICE_PATTERN = "^[0-9]+(\\.[0-9]{1,6})?$";

/** Codes only Stripe's webhook answers: no endpoint of the document does. */
export const WEBHOOK_ONLY_ERRORS: ErrorCode[] = ["payments_unavailable", "refund_failed"];

const ENDPOINT_ERRORS = (Object.keys(ERROR_CODES) as ErrorCode[]).filter((c) =>
  c !== "not_found" && !MANAGEMENT_ONLY_ERRORS.includes(c) && !WEBHOOK_ONLY_ERRORS.includes(c)
);

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const headerRef = (name: string) => ({ $ref: `#/components/headers/${name}` });

function errorSchema(codes: ErrorCode[]) {
  return {
    type: "object",
    required: ["error"],
    additionalProperties: false,
    properties: {
      error: {
        type: "object",
        required: ["type", "code", "message", "doc_url"],
        properties: {
          type: { type: "string", enum: [...new Set(codes.map((c) => ERROR_CODES[c].type))] },
          code: { type: "string", enum: codes },
          message: { type: "string", minLength: 1 },
          param: {
            type: "string",
            description: "The request field at fault, such as `messages[2].role`.",
          },
          doc_url: {
            type: "string",
            format: "uri",
            description: "Section of the error page for this code: `/docs/errors#<code>`.",
          },
        },
      },
    },
  };
}

/**
 * An embedding is one JSON answer, not assembled from a stream: nothing to break off after it
 * began, and a failed call is never charged.
 */
const EMBEDDING_ERRORS = ENDPOINT_ERRORS.filter((c) =>
  c !== "stream_interrupted" && c !== "upstream_interrupted"
);

/** The errors of a free read (GET /v1/models): no body, no wallet, no provider. */
const READ_ERRORS: ErrorCode[] = [
  "unsupported_version",
  "invalid_api_key",
  "service_unavailable",
  "internal_error",
];

function errorResponse(status: number, endpointErrors: ErrorCode[] = ENDPOINT_ERRORS) {
  const codes = endpointErrors.filter((c) => ERROR_CODES[c].status === status);
  const headers: Record<string, unknown> = {
    "Tollbooth-Request-Id": headerRef("RequestId"),
    "Tollbooth-Version": headerRef("Version"),
  };
  if (status === 429) {
    headers["Retry-After"] = headerRef("RetryAfter");
    headers["retry-after-ms"] = headerRef("RetryAfterMs");
  }
  if (status === 503) headers["Retry-After"] = headerRef("RetryAfter");
  const charged = codes.filter((c) => CHARGED_ERRORS.includes(c));
  if (charged.length > 0) {
    const only = charged.map((c) => `\`${c}\``).join(", ");
    headers["Tollbooth-Request-Cost"] = {
      description:
        `On ${only} only: what was charged for the work the provider did before it broke off (USD).`,
      schema: { type: "string", pattern: MONEY_PATTERN },
    };
    headers["Tollbooth-Balance"] = {
      description: `On ${only} only: wallet balance (USD) after that charge.`,
      schema: { type: "string", pattern: MONEY_PATTERN },
    };
    headers["Tollbooth-Provider"] = {
      description: `On ${only} only: the catalog provider whose work was charged.`,
      schema: { type: "string" },
    };
    headers["x-should-retry"] = {
      description:
        `On ${only} only: \`false\`. A retry would run and be charged again, so the official OpenAI and Anthropic SDKs, which retry a 5xx by themselves, leave it to the caller.`,
      schema: { type: "string", const: "false" },
    };
  }
  // A 401 has no caller to count; a 500 or 503 may be the limiter's own storage failing.
  if (status !== 401 && status !== 500 && status !== 503) {
    for (const name of Object.keys(RATE_LIMIT_HEADERS)) headers[name] = headerRef(name);
  }
  return {
    description: codes.map((c) => `\`${c}\`: ${ERROR_CODES[c].title}.`).join(" "),
    headers,
    content: {
      "application/json": {
        schema: status === 402
          ? { oneOf: [ref("InsufficientCreditsError"), ref("SpendCapError")] }
          : errorSchema(codes),
      },
    },
  };
}

/**
 * The request schema is the validator's own (so the document cannot drift from what is accepted),
 * each field described with what every provider kind does with it.
 */
function chatRequestSchema() {
  const { $schema: _dialect, ...schema } = z.toJSONSchema(ChatRequestSchema, {
    target: "draft-2020-12",
    io: "input",
    unrepresentable: "any",
  }) as Record<string, unknown> & { properties: Record<string, Record<string, unknown>> };
  for (const [field, row] of Object.entries(FIELD_SUPPORT)) {
    const property = schema.properties[field];
    if (!property) continue;
    const kinds =
      `OpenAI kind: ${row.openai}; OpenAI Responses kind: ${row.openai_responses}; Anthropic kind: ${row.anthropic}; simulator: ${row.simulator}.`;
    property.description = row.note ? `${kinds} ${row.note}.` : kinds;
  }
  schema.properties.max_tokens.description =
    `Output token cap, and the basis of the reservation. Default ${DEFAULT_MAX_TOKENS} (or the model's maximum output when lower). ${schema.properties.max_tokens.description}`;
  schema.properties.model.examples = ["tollbooth/echo"];
  return {
    ...schema,
    description:
      'OpenAI\'s chat-completions request. Every field is listed: any other is refused (400 `invalid_parameter`), and a field the model\'s provider kind cannot honour is refused with 400 `unsupported_parameter` (pass: sent as is; translate: sent in the provider\'s terms; ignore: a hint dropped without effect on the bill or the answer\'s shape). Non-standard: `cache_control` (`{type: "ephemeral", ttl?: "5m" | "1h"}`) on text, image and file parts and tools, sent to Anthropic only.',
  };
}

export function openApiDocument(publicUrl: string, apiVersion: string) {
  const statuses = [...new Set(ENDPOINT_ERRORS.map((c) => ERROR_CODES[c].status))].sort();
  const rateLimitHeaders = Object.fromEntries(
    Object.entries(RATE_LIMIT_HEADERS).map(([name, description]) => [name, {
      description: `${description} On every authenticated response.`,
      required: true,
      schema: { type: "string" },
    }]),
  );
  const versionParameter = {
    name: "Tollbooth-Version",
    in: "header",
    required: false,
    description:
      "Pins the API version. Omit it, or send the current and only version; any other value gives 400 `unsupported_version`.",
    schema: { type: "string", enum: [apiVersion] },
  };
  const readStatuses = [...new Set(READ_ERRORS.map((c) => ERROR_CODES[c].status))].sort();
  const readHeaders = {
    "Tollbooth-Request-Id": headerRef("RequestId"),
    "Tollbooth-Version": headerRef("Version"),
    ...Object.fromEntries(Object.keys(RATE_LIMIT_HEADERS).map((n) => [n, headerRef(n)])),
  };
  const embeddingStatuses = [...new Set(EMBEDDING_ERRORS.map((c) => ERROR_CODES[c].status))]
    .sort();
  /** The headers of every paid 200, streamed or not. */
  const paidHeaders = {
    "Tollbooth-Request-Id": headerRef("RequestId"),
    "Tollbooth-Version": headerRef("Version"),
    "Tollbooth-Balance": {
      required: true,
      description: "Wallet balance (USD) after this request; for a stream, after its reservation.",
      schema: { type: "string", pattern: MONEY_PATTERN },
    },
    "Tollbooth-Provider": {
      description: "The catalog provider that served the request.",
      schema: { type: "string" },
    },
    ...Object.fromEntries(Object.keys(RATE_LIMIT_HEADERS).map((n) => [n, headerRef(n)])),
  };
  const management = managementOpenApi({ errorSchema, headerRef });
  const stored = storedResponsesOpenApi({
    versionParameter,
    readHeaders,
    errorResponse,
    statusesOf: (codes) => [...new Set(codes.map((c) => ERROR_CODES[c].status))].sort(),
    ref,
  });
  return {
    openapi: "3.1.0",
    info: {
      title: "Tollbooth",
      version: apiVersion,
      summary: "Pay-as-you-go, OpenAI-compatible chat completions paid from an app's USD wallet.",
      description:
        `Every request is paid from the app's wallet: reserved before the model runs (prompt tokens plus max_tokens, default ${DEFAULT_MAX_TOKENS}), settled to the actual usage after. Guides: ${publicUrl}/docs`,
    },
    servers: [{ url: `${publicUrl}/v1` }],
    security: [{ apiKey: [] }],
    externalDocs: { url: `${publicUrl}/docs`, description: "Quick start and guides" },
    paths: withReplayHeaders({
      "/models": {
        get: {
          operationId: "listModels",
          summary: "Lists the curated models with their type, context and prices.",
          description:
            "Free: it reserves nothing and is not counted against the rate limits; its `x-ratelimit-*` headers show the current status.",
          parameters: [versionParameter],
          responses: {
            "200": {
              description: "Every model of the catalog, in OpenAI's list shape plus our fields.",
              headers: readHeaders,
              content: { "application/json": { schema: ref("ModelList") } },
            },
            ...Object.fromEntries(
              readStatuses.map((s) => [String(s), errorResponse(s, READ_ERRORS)]),
            ),
          },
        },
      },
      "/models/{model}": {
        get: {
          operationId: "retrieveModel",
          summary: "One curated model.",
          description:
            "Free, like `listModels`. The ID holds a slash, sent as is or percent-encoded (`openai%2Fgpt-4o-mini`, as the OpenAI SDKs send it).",
          parameters: [versionParameter, {
            name: "model",
            in: "path",
            required: true,
            description: "Curated model ID `<provider>/<model_name>`.",
            schema: { type: "string" },
          }],
          responses: {
            "200": {
              description: "The model.",
              headers: readHeaders,
              content: { "application/json": { schema: ref("Model") } },
            },
            ...Object.fromEntries(
              readStatuses.map((s) => [String(s), errorResponse(s, READ_ERRORS)]),
            ),
            "404": errorResponse(404, ["not_found"]),
          },
        },
      },
      "/embeddings": {
        post: {
          operationId: "createEmbedding",
          summary: "Embeds text or token ids with an embedding model.",
          description:
            `Paid like a chat completion without output: the counted input (the larger of each text's o200k and cl100k counts, its UTF-8 bytes on a model whose catalog entry says \`utf8_bytes\`, the length of each token array) is reserved at the model's input price, then settled to the provider's \`usage.prompt_tokens\`. At most ${MAX_EMBEDDING_INPUTS} inputs and ${MAX_EMBEDDING_REQUEST_TOKENS} tokens in all; each input at most the model's \`context_tokens\`, both counted in cl100k as OpenAI's embedding models count them (a \`utf8_bytes\` model's text by its provider). A chat model gives 400 \`model_not_supported\`.`,
          parameters: [versionParameter, { $ref: "#/components/parameters/IdempotencyKey" }],
          requestBody: {
            required: true,
            content: { "application/json": { schema: ref("CreateEmbeddingRequest") } },
          },
          responses: {
            "200": {
              description:
                "One embedding per input, in input order, in the encoding asked for, whatever the provider sent.",
              headers: {
                ...paidHeaders,
                "Tollbooth-Request-Cost": {
                  required: true,
                  description: "Exact cost (USD) of this request, what left the wallet.",
                  schema: { type: "string", pattern: MONEY_PATTERN },
                },
              },
              content: { "application/json": { schema: ref("EmbeddingList") } },
            },
            ...Object.fromEntries(
              embeddingStatuses.map((s) => [String(s), errorResponse(s, EMBEDDING_ERRORS)]),
            ),
          },
        },
      },
      "/responses": {
        post: {
          operationId: "createResponse",
          summary: "Creates a model response (OpenAI's Responses API) with any chat model.",
          description:
            "Served by the chat path: the request is translated to a chat completion of the model's provider (OpenAI-compatible or Anthropic), paid exactly like one (the same reservation: the input bound plus `max_output_tokens`, default 2048), and translated back. Stored responses (`store`, default true) are kept 30 days per app for `previous_response_id` and `item_reference`.",
          parameters: [versionParameter, { $ref: "#/components/parameters/IdempotencyKey" }],
          requestBody: {
            required: true,
            content: { "application/json": { schema: ref("CreateResponseRequest") } },
          },
          responses: {
            "200": {
              description:
                "A response object. With `stream: true`, server-sent events named after their `type` (`response.created`, `response.in_progress`, `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`, `response.function_call_arguments.delta`, their `.done` events, `response.output_item.done`, then `response.completed` or `response.incomplete` whose `usage.cost` is what left the wallet); a stream the upstream cuts ends with `error` and `response.failed`.",
              headers: {
                ...paidHeaders,
                "Tollbooth-Request-Cost": {
                  description:
                    "Exact cost (USD) of this request, what left the wallet. Non-streaming responses only.",
                  schema: { type: "string", pattern: MONEY_PATTERN },
                },
              },
              content: {
                "application/json": { schema: ref("Response") },
                "text/event-stream": {
                  schema: { type: "string", description: "Named server-sent events." },
                },
              },
            },
            ...Object.fromEntries(statuses.map((s) => [String(s), errorResponse(s)])),
          },
        },
      },
      "/chat/completions": {
        post: {
          operationId: "createChatCompletion",
          summary: "Creates a chat completion, streaming or not.",
          parameters: [versionParameter, { $ref: "#/components/parameters/IdempotencyKey" }],
          requestBody: {
            required: true,
            content: { "application/json": { schema: ref("CreateChatCompletionRequest") } },
          },
          responses: {
            "200": {
              description:
                "A chat completion. With `stream: true`, server-sent events: each `data:` line is a `ChatCompletionChunk` (the last one carries `usage` when `stream_options.include_usage` is true), then `data: [DONE]`. A stream that the upstream cuts ends with one `data:` line holding an `Error` body instead of `[DONE]`.",
              headers: {
                "Tollbooth-Request-Id": headerRef("RequestId"),
                "Tollbooth-Version": headerRef("Version"),
                "Tollbooth-Balance": {
                  required: true,
                  description:
                    "Wallet balance (USD) after this request; for a stream, after its reservation.",
                  schema: { type: "string", pattern: MONEY_PATTERN },
                },
                "Tollbooth-Request-Cost": {
                  description:
                    "Exact cost (USD) of this request, what left the wallet. Non-streaming responses only (a stream's cost is in its usage chunk).",
                  schema: { type: "string", pattern: MONEY_PATTERN },
                },
                "Tollbooth-Provider": {
                  description: "The catalog provider that served the request.",
                  schema: { type: "string" },
                },
                ...Object.fromEntries(
                  Object.keys(RATE_LIMIT_HEADERS).map((n) => [n, headerRef(n)]),
                ),
              },
              content: {
                "application/json": { schema: ref("ChatCompletion") },
                "text/event-stream": {
                  schema: {
                    type: "string",
                    description: "Server-sent events carrying `ChatCompletionChunk` objects.",
                  },
                },
              },
            },
            ...Object.fromEntries(statuses.map((s) => [String(s), errorResponse(s)])),
          },
        },
      },
      ...stored.paths,
      ...management.paths,
    }),
    components: {
      parameters: {
        Version: versionParameter,
        IdempotencyKey: {
          name: "Idempotency-Key",
          in: "header",
          required: false,
          description:
            "Makes a retry safe: the first request with a key runs and is charged; a repeat with the same key, to the same endpoint, with the same body within 24 hours gets the first answer again (status, body, `Tollbooth-Request-Cost`, `Tollbooth-Balance` as they were) with `Idempotent-Replayed: true`, and is neither run nor charged. Same key on another endpoint or with another body: 422 `idempotency_key_reused`; a repeat while the first still runs: 409 `idempotency_key_in_use`; a repeat of an answer over the 8 MiB kept for replays (`IDEMPOTENCY_REPLAY_MAX_BYTES`): 422 `idempotency_replay_too_large`, neither run nor charged. Keys are private to the API key that sends them (API) or the owner (management API): two API keys of one app never replay or block each other. Answers that were charged are recorded: every success, and a 502 `upstream_interrupted` (it carries `Tollbooth-Request-Cost`). After any other failure (400, 402, 429, 5xx) nothing was charged and a retry with the same key runs afresh. Not accepted on `stream: true` (400 `idempotency_key_with_stream`).",
          schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[!-~]+$" },
        },
      },
      securitySchemes: {
        managementKey: management.securityScheme,
        apiKey: {
          type: "http",
          scheme: "bearer",
          description: "An app API key (`tb_…`), server-side only.",
        },
      },
      headers: {
        RequestId: {
          required: true,
          description: "Request ID for support and debugging; on every response.",
          schema: { type: "string", pattern: "^req_[0-9a-z]+$" },
        },
        Version: {
          required: true,
          description: "The API version that served the request.",
          schema: { type: "string", enum: [apiVersion] },
        },
        RetryAfter: {
          required: true,
          description: "Whole seconds to wait before retrying.",
          schema: { type: "string", pattern: "^[0-9]+$" },
        },
        RetryAfterMs: {
          required: true,
          description:
            "The same wait in milliseconds, as OpenAI sends it (the openai SDK reads it first); `Retry-After` is it rounded up to whole seconds.",
          schema: { type: "string", pattern: "^[0-9]+$" },
        },
        ...Object.fromEntries(
          Object.values(REPLAY_HEADERS).map(({ component, description, schema }) => [
            component,
            { description, schema },
          ]),
        ),
        ...rateLimitHeaders,
        ...management.headers,
      },
      schemas: {
        CreateChatCompletionRequest: chatRequestSchema(),
        Usage: {
          type: "object",
          required: ["prompt_tokens", "completion_tokens", "total_tokens"],
          properties: {
            prompt_tokens: {
              type: "integer",
              minimum: 0,
              description: "All input read, cached and cache-written tokens included.",
            },
            completion_tokens: {
              type: "integer",
              minimum: 0,
              description: "All output, reasoning included.",
            },
            total_tokens: { type: "integer", minimum: 0 },
            prompt_tokens_details: {
              type: "object",
              properties: {
                cached_tokens: {
                  type: "integer",
                  minimum: 0,
                  description:
                    "Input read from the provider's cache (Anthropic: cache_read_input_tokens), billed at the catalog's cache-read price.",
                },
                cache_write_tokens: {
                  type: "integer",
                  minimum: 0,
                  description:
                    "Input written to the provider's cache (Anthropic: cache_creation_input_tokens; OpenAI's own from GPT-5.6 on), billed at the catalog's cache-write price.",
                },
              },
            },
            completion_tokens_details: {
              type: "object",
              properties: { reasoning_tokens: { type: "integer", minimum: 0 } },
            },
            cost: {
              type: "string",
              pattern: MONEY_PATTERN,
              description: "What left the wallet (USD); in a stream's usage chunk.",
            },
          },
        },
        ChatCompletion: {
          type: "object",
          required: ["id", "object", "created", "model", "choices", "usage"],
          properties: {
            id: { type: "string" },
            object: { const: "chat.completion" },
            created: { type: "integer" },
            model: { type: "string" },
            choices: {
              type: "array",
              items: {
                type: "object",
                required: ["index", "message", "finish_reason"],
                properties: {
                  index: { type: "integer" },
                  message: {
                    type: "object",
                    required: ["role", "content"],
                    properties: {
                      role: { const: "assistant" },
                      content: { type: ["string", "null"] },
                      refusal: { type: ["string", "null"] },
                      reasoning_content: {
                        type: "string",
                        description: "The model's reasoning, where the provider shows it.",
                      },
                      phase: {
                        enum: ["commentary", "final_answer"],
                        description:
                          "Where OpenAI's Responses API labels the message (GPT-5.4 on): a preamble to tool calls or the answer. Send it back with the message.",
                      },
                      tool_calls: { type: "array", items: ref("ToolCall") },
                    },
                  },
                  logprobs: { type: ["object", "null"] },
                  finish_reason: { type: ["string", "null"] },
                },
              },
            },
            usage: ref("Usage"),
          },
        },
        ToolCall: {
          type: "object",
          required: ["id", "type", "function"],
          properties: {
            id: { type: "string" },
            type: { const: "function" },
            function: {
              type: "object",
              required: ["name", "arguments"],
              properties: {
                name: { type: "string" },
                arguments: { type: "string", description: "A JSON object, as text." },
              },
            },
          },
        },
        ChatCompletionChunk: {
          type: "object",
          required: ["id", "object", "created", "model", "choices"],
          properties: {
            id: { type: "string" },
            object: { const: "chat.completion.chunk" },
            created: { type: "integer" },
            model: { type: "string" },
            choices: {
              type: "array",
              items: {
                type: "object",
                required: ["index", "delta", "finish_reason"],
                properties: {
                  index: { type: "integer" },
                  delta: {
                    type: "object",
                    properties: {
                      role: { type: "string" },
                      content: { type: ["string", "null"] },
                      refusal: { type: ["string", "null"] },
                      reasoning_content: { type: "string" },
                      phase: { enum: ["commentary", "final_answer"] },
                      tool_calls: {
                        type: "array",
                        description:
                          "Fragments: the first of a call has `index`, `id`, `type` and `function.name`; later ones add `function.arguments` pieces for the same `index`.",
                        items: {
                          type: "object",
                          required: ["index"],
                          properties: {
                            index: { type: "integer" },
                            id: { type: "string" },
                            type: { const: "function" },
                            function: {
                              type: "object",
                              properties: {
                                name: { type: "string" },
                                arguments: { type: "string" },
                              },
                            },
                          },
                        },
                      },
                    },
                  },
                  finish_reason: { type: ["string", "null"] },
                },
              },
            },
            usage: {
              description:
                "With `stream_options.include_usage`: null on every chunk but the last, whose `choices` is empty.",
              oneOf: [ref("Usage"), { type: "null" }],
            },
          },
        },
        CreateEmbeddingRequest: {
          type: "object",
          required: ["model", "input"],
          additionalProperties: false,
          properties: {
            model: {
              type: "string",
              minLength: 1,
              description: "An embedding model's ID (`type: embedding` in `GET /v1/models`).",
              examples: ["tollbooth/embed"],
            },
            input: {
              description:
                "A string, an array of strings, an array of token ids, or an array of arrays of token ids. No input may be empty.",
              oneOf: [
                { type: "string", minLength: 1 },
                {
                  type: "array",
                  minItems: 1,
                  maxItems: MAX_EMBEDDING_INPUTS,
                  items: { type: "string", minLength: 1 },
                },
                { type: "array", minItems: 1, items: { type: "integer", minimum: 0 } },
                {
                  type: "array",
                  minItems: 1,
                  maxItems: MAX_EMBEDDING_INPUTS,
                  items: {
                    type: "array",
                    minItems: 1,
                    items: { type: "integer", minimum: 0 },
                  },
                },
              ],
            },
            encoding_format: { type: "string", enum: ["float", "base64"], default: "float" },
            dimensions: {
              type: "integer",
              minimum: 1,
              description: "The size of each vector, for models that can shorten theirs.",
            },
            user: {
              type: "string",
              maxLength: 256,
              description: "Your end user's ID, passed to the provider.",
            },
          },
        },
        EmbeddingList: {
          type: "object",
          required: ["object", "data", "model", "usage"],
          properties: {
            object: { const: "list" },
            data: {
              type: "array",
              items: {
                type: "object",
                required: ["object", "index", "embedding"],
                properties: {
                  object: { const: "embedding" },
                  index: { type: "integer", minimum: 0 },
                  embedding: {
                    oneOf: [
                      { type: "array", items: { type: "number" } },
                      {
                        type: "string",
                        description: "base64 of the little-endian float32 values",
                      },
                    ],
                  },
                },
              },
            },
            model: { type: "string" },
            usage: {
              type: "object",
              required: ["prompt_tokens", "total_tokens"],
              properties: {
                prompt_tokens: { type: "integer", minimum: 0 },
                total_tokens: { type: "integer", minimum: 0 },
              },
            },
          },
        },
        CreateResponseRequest: {
          type: "object",
          required: ["model", "input"],
          description:
            "OpenAI's Responses request. Input items: messages (`input_text`, `input_image`, `input_file` with a PDF's `file_data`, `output_text` parts), `function_call` (its `extra_content`, Gemini 3's thought signature as Tollbooth answered it, goes back with the call), `function_call_output` (its `output` a string, or `input_text`, `input_image` and `input_file` parts: a tool's screenshot or PDF), `item_reference` (an output item of a stored response) and `reasoning` (Claude's signed thinking sealed in `encrypted_content` by Tollbooth goes back to Claude with the assistant turn after it; any other is dropped). Tools: `function` only. `conversation` and `prompt` (state kept at OpenAI) are 400 `unsupported_parameter`; unknown fields are refused with 400 naming them.",
          properties: {
            model: { type: "string", minLength: 1, examples: ["tollbooth/echo"] },
            input: { oneOf: [{ type: "string" }, { type: "array", minItems: 1 }] },
            instructions: { type: ["string", "null"] },
            tools: { type: ["array", "null"] },
            tool_choice: {},
            max_output_tokens: { type: ["integer", "null"], minimum: 16 },
            text: { type: ["object", "null"] },
            reasoning: { type: ["object", "null"] },
            stream: { type: ["boolean", "null"] },
            store: { type: ["boolean", "null"], default: true },
            previous_response_id: { type: ["string", "null"] },
            include: {
              type: ["array", "null"],
              items: { type: "string", enum: [...RESPONSE_INCLUDABLES] },
              description:
                "`message.output_text.logprobs` returns each output text token's logprob (with `top_logprobs` alternatives) on its `output_text` part and text delta events; the other values are accepted and change nothing.",
            },
            top_logprobs: { type: ["integer", "null"], minimum: 0, maximum: 20 },
            max_tool_calls: {
              type: ["integer", "null"],
              minimum: 1,
              description:
                "Accepted and not sent on: it bounds calls of built-in tools, and only function tools, which the client calls, are served.",
            },
          },
        },
        Response: {
          type: "object",
          required: ["id", "object", "created_at", "status", "model", "output", "usage"],
          properties: {
            id: { type: "string" },
            object: { const: "response" },
            created_at: { type: "integer" },
            status: { type: "string", enum: ["completed", "incomplete"] },
            model: { type: "string" },
            store: { type: "boolean" },
            output: {
              type: "array",
              items: {
                type: "object",
                required: ["type", "id"],
                properties: {
                  type: { type: "string", enum: ["reasoning", "message", "function_call"] },
                  id: { type: "string" },
                  encrypted_content: {
                    type: "string",
                    description:
                      "On a reasoning item: Claude's signed thinking, sealed, for the client to send back with the item (asked for or not).",
                  },
                  extra_content: {
                    type: "object",
                    description:
                      "On a function_call item: what the server attached to the call (Gemini 3's thought signature), for the client to send back with the item.",
                  },
                },
              },
            },
            usage: {
              type: "object",
              required: ["input_tokens", "output_tokens", "total_tokens"],
              properties: {
                input_tokens: { type: "integer", minimum: 0 },
                input_tokens_details: {
                  type: "object",
                  properties: {
                    cached_tokens: { type: "integer", minimum: 0 },
                    cache_write_tokens: {
                      type: "integer",
                      minimum: 0,
                      description:
                        "Input written to the provider's cache (Anthropic's cache writes, OpenAI's from GPT-5.6 on), billed at the catalog's cache-write price; absent when none.",
                    },
                  },
                },
                output_tokens: { type: "integer", minimum: 0 },
                output_tokens_details: {
                  type: "object",
                  properties: { reasoning_tokens: { type: "integer", minimum: 0 } },
                },
                total_tokens: { type: "integer", minimum: 0 },
                cost: { type: "string", pattern: MONEY_PATTERN },
              },
            },
          },
        },
        Model: {
          type: "object",
          required: [
            "id",
            "object",
            "created",
            "owned_by",
            "type",
            "context_tokens",
            "pricing",
          ],
          properties: {
            id: { type: "string", description: "Curated model ID `<provider>/<model_name>`." },
            object: { const: "model" },
            created: {
              type: "integer",
              description:
                "Unix seconds. The catalog records no release dates: every model carries the date of the API version.",
            },
            owned_by: { type: "string", description: "The `<provider>` part of the ID." },
            type: {
              type: "string",
              enum: ["chat", "embedding"],
              description:
                "`chat`: served by `POST /v1/chat/completions` and `POST /v1/responses`; `embedding`: by `POST /v1/embeddings`. A model sent to the other endpoint gets 400 `model_not_supported`.",
            },
            context_tokens: {
              type: "integer",
              minimum: 1,
              description:
                "A chat model's context window (prompt plus output); an embedding model's most tokens per input.",
            },
            max_output_tokens: {
              type: "integer",
              minimum: 1,
              description: "Chat models: the largest `max_tokens` accepted.",
            },
            pricing: {
              type: "object",
              description:
                "USD per million tokens, decimal strings as the catalog writes them. A request costs each kind of token at its price, rounded up once to the micro-dollar.",
              required: ["input_usd_per_mtok"],
              properties: {
                input_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                output_usd_per_mtok: {
                  type: "string",
                  pattern: PRICE_PATTERN,
                  description: "Chat models only.",
                },
                cache_read_usd_per_mtok: {
                  type: "string",
                  pattern: PRICE_PATTERN,
                  description:
                    "Input read from the provider's prompt cache; present when the catalog prices it apart (else it costs the input price).",
                },
                cache_write_usd_per_mtok: {
                  type: "string",
                  pattern: PRICE_PATTERN,
                  description:
                    "Input written to the provider's prompt cache; present when the catalog prices it apart (else it costs the input price), and always for a model an Anthropic route serves (1.25× the input price unless the catalog names another).",
                },
                cache_write_1h_usd_per_mtok: {
                  type: "string",
                  pattern: PRICE_PATTERN,
                  description:
                    'Input written to Anthropic\'s prompt cache for an hour (a `cache_control` breakpoint with `ttl: "1h"`); present for a model an Anthropic route serves (twice the input price unless the catalog names another).',
                },
                long_context: {
                  type: "object",
                  description:
                    "Chat models whose provider bills a large request dearer: a request whose input (cached and cache-written included) passes `above_input_tokens` costs every token at these prices, output included. Cache prices left out cost this tier's input price (a cache write on an Anthropic route 1.25× it).",
                  required: ["above_input_tokens", "input_usd_per_mtok", "output_usd_per_mtok"],
                  additionalProperties: false,
                  properties: {
                    above_input_tokens: { type: "integer", minimum: 1 },
                    input_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                    output_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                    cache_read_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                    cache_write_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                    cache_write_1h_usd_per_mtok: { type: "string", pattern: PRICE_PATTERN },
                  },
                },
              },
            },
          },
        },
        ModelList: {
          type: "object",
          required: ["object", "data"],
          properties: {
            object: { const: "list" },
            data: { type: "array", items: ref("Model") },
          },
        },
        ...management.schemas,
        Error: errorSchema(ENDPOINT_ERRORS),
        SpendCapError: {
          type: "object",
          required: ["error"],
          additionalProperties: false,
          properties: {
            error: {
              type: "object",
              required: [
                "type",
                "code",
                "message",
                "doc_url",
                "cap",
                "cap_amount",
                "remaining",
                "balance",
                "top_up_url",
              ],
              properties: {
                type: { const: "spend_cap_error" },
                code: { enum: ["key_spend_cap_exceeded", "user_spend_cap_exceeded"] },
                message: { type: "string", minLength: 1 },
                param: { const: "user", description: "Present for an end user's cap." },
                doc_url: { type: "string", format: "uri" },
                cap: { enum: ["total", "daily", "monthly"], description: "The cap reached." },
                cap_amount: { type: "string", pattern: MONEY_PATTERN },
                remaining: {
                  type: "string",
                  pattern: MONEY_PATTERN,
                  description: "What may still be reserved under the cap (USD).",
                },
                balance: {
                  type: "string",
                  pattern: MONEY_PATTERN,
                  description: "Current wallet balance (USD), as every 402 carries.",
                },
                top_up_url: {
                  type: "string",
                  format: "uri",
                  description:
                    "The app's hosted top-up page, as every 402 carries; a top-up does not lift a cap.",
                },
              },
            },
          },
        },
        InsufficientCreditsError: {
          type: "object",
          required: ["error"],
          additionalProperties: false,
          properties: {
            error: {
              type: "object",
              required: ["type", "code", "message", "doc_url", "balance", "top_up_url"],
              properties: {
                type: { const: "insufficient_credits" },
                code: { const: "insufficient_credits" },
                message: { type: "string", minLength: 1 },
                doc_url: { type: "string", format: "uri" },
                balance: {
                  type: "string",
                  pattern: MONEY_PATTERN,
                  description: "Current wallet balance (USD).",
                },
                top_up_url: {
                  type: "string",
                  format: "uri",
                  description: "The app's hosted top-up page; show it to your user.",
                },
              },
            },
          },
        },
      },
    },
  };
}
