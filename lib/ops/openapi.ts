/**
 * The OpenAPI 3.1 document of the public API (served at /openapi.json). Error responses are
 * generated from ERROR_CODES, so a new code appears here, on the error page and in `doc_url` at once.
 */
import { DEFAULT_MAX_TOKENS } from "@/lib/gateway/mod.ts";
import { ERROR_CODES, type ErrorCode } from "@/lib/core/mod.ts";

/** The rate-limit headers of the common compatible form (see /docs/rate-limits). */
export const RATE_LIMIT_HEADERS = {
  "x-ratelimit-limit-requests": "Requests allowed per minute (RATE_LIMIT_RPM).",
  "x-ratelimit-remaining-requests": "Requests left in the current window.",
  "x-ratelimit-reset-requests": "Time until the request window resets, such as `1s` or `6m0s`.",
  "x-ratelimit-limit-tokens": "Tokens allowed per minute (RATE_LIMIT_TPM).",
  "x-ratelimit-remaining-tokens": "Tokens left in the current window.",
  "x-ratelimit-reset-tokens": "Time until the token window resets, such as `1s` or `6m0s`.",
} as const;

/** Amounts in headers and bodies: USD with exactly six decimals. */
const MONEY_PATTERN = "^[0-9]+\\.[0-9]{6}$";

const ENDPOINT_ERRORS = (Object.keys(ERROR_CODES) as ErrorCode[]).filter((c) => c !== "not_found");

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

function errorResponse(status: number) {
  const codes = ENDPOINT_ERRORS.filter((c) => ERROR_CODES[c].status === status);
  const headers: Record<string, unknown> = {
    "Tollbooth-Request-Id": headerRef("RequestId"),
    "Tollbooth-Version": headerRef("Version"),
  };
  if (status === 429) headers["Retry-After"] = headerRef("RetryAfter");
  // A 401 has no caller to count; a 500 may be the limiter's own storage failing.
  if (status !== 401 && status !== 500) {
    for (const name of Object.keys(RATE_LIMIT_HEADERS)) headers[name] = headerRef(name);
  }
  return {
    description: codes.map((c) => `\`${c}\`: ${ERROR_CODES[c].title}.`).join(" "),
    headers,
    content: {
      "application/json": {
        schema: status === 402 ? ref("InsufficientCreditsError") : errorSchema(codes),
      },
    },
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
    paths: {
      "/chat/completions": {
        post: {
          operationId: "createChatCompletion",
          summary: "Creates a chat completion, streaming or not.",
          parameters: [{
            name: "Tollbooth-Version",
            in: "header",
            required: false,
            description:
              "Pins the API version. Omit it, or send the current and only version; any other value gives 400 `unsupported_version`.",
            schema: { type: "string", enum: [apiVersion] },
          }],
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
    },
    components: {
      securitySchemes: {
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
        ...rateLimitHeaders,
      },
      schemas: {
        Message: {
          type: "object",
          required: ["role", "content"],
          properties: {
            role: { type: "string", enum: ["system", "user", "assistant"] },
            content: {
              oneOf: [
                { type: "string" },
                {
                  type: "array",
                  minItems: 1,
                  items: {
                    type: "object",
                    required: ["type", "text"],
                    properties: { type: { const: "text" }, text: { type: "string" } },
                  },
                },
              ],
            },
            name: { type: "string" },
          },
        },
        CreateChatCompletionRequest: {
          type: "object",
          required: ["model", "messages"],
          description:
            "Fields not listed (temperature, top_p, stop, seed, user, …) are passed to the provider untouched.",
          properties: {
            model: {
              type: "string",
              minLength: 1,
              description: "Curated model ID `<provider>/<model_name>`; see /models.",
              examples: ["tollbooth/echo"],
            },
            messages: { type: "array", minItems: 1, items: ref("Message") },
            max_tokens: {
              type: ["integer", "null"],
              minimum: 1,
              description:
                `Output token cap, and the basis of the reservation. Default ${DEFAULT_MAX_TOKENS} (or the model's maximum output when lower).`,
            },
            max_completion_tokens: {
              type: ["integer", "null"],
              minimum: 1,
              description: "Alias of `max_tokens`.",
            },
            stream: { type: ["boolean", "null"], default: false },
            stream_options: {
              type: ["object", "null"],
              properties: { include_usage: { type: "boolean" } },
            },
            n: { type: ["integer", "null"], const: 1 },
          },
        },
        Usage: {
          type: "object",
          required: ["prompt_tokens", "completion_tokens", "total_tokens"],
          properties: {
            prompt_tokens: { type: "integer", minimum: 0 },
            completion_tokens: { type: "integer", minimum: 0 },
            total_tokens: { type: "integer", minimum: 0 },
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
                    },
                  },
                  finish_reason: { type: ["string", "null"] },
                },
              },
            },
            usage: ref("Usage"),
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
                    },
                  },
                  finish_reason: { type: ["string", "null"] },
                },
              },
            },
            usage: ref("Usage"),
          },
        },
        Error: errorSchema(ENDPOINT_ERRORS),
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
