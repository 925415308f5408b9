/**
 * The management API's part of the OpenAPI document: its paths, schemas and errors. Errors come
 * from ERROR_CODES like the rest of the document.
 */
import { ERROR_CODES, type ErrorCode } from "@/lib/core/mod.ts";

/** Codes only the management API answers (the chat endpoint never does). */
export const MANAGEMENT_ONLY_ERRORS: ErrorCode[] = [
  "invalid_management_key",
  "resource_not_found",
  "api_key_limit_reached",
];

const READ_ERRORS: ErrorCode[] = [
  "invalid_parameter",
  "unsupported_version",
  "invalid_management_key",
  "resource_not_found",
  "rate_limit_exceeded",
  "service_unavailable",
  "internal_error",
];
const WRITE_ERRORS: ErrorCode[] = [
  ...READ_ERRORS,
  "invalid_json",
  "missing_parameter",
  "request_too_large",
  "unsupported_content_encoding",
  "request_timeout",
  "idempotency_key_in_use",
  "idempotency_key_reused",
  "idempotency_replay_too_large",
];

/**
 * The paid API's request-window headers, counting the owner's management requests: every answer
 * after the key is accepted carries them.
 */
const MANAGEMENT_RATE_LIMIT_HEADERS = {
  "x-ratelimit-limit-requests": {
    component: "ManagementLimitRequests",
    pattern: "^[0-9]+$",
    description:
      "Requests a minute the owner's management keys may make together (MANAGEMENT_RATE_LIMIT_RPM).",
  },
  "x-ratelimit-remaining-requests": {
    component: "ManagementRemainingRequests",
    pattern: "^[0-9]+$",
    description:
      "Requests the owner's management keys have left in the current UTC minute, after this one.",
  },
  "x-ratelimit-reset-requests": {
    component: "ManagementResetRequests",
    // Go's duration notation, as the paid API's resets: `250ms`, `45s`, `1.5s`, `1m0s`.
    pattern: "^([0-9]{1,3}ms|([0-9]+m)?[0-9]+(\\.[0-9]{1,3})?s)$",
    description: "Time to the end of the current UTC minute, such as `45s` or `1.5s`.",
  },
} as const;

const OVER_THE_LIMIT =
  "The owner's management keys, which share one count, have made `MANAGEMENT_RATE_LIMIT_RPM` requests in this UTC minute: the request was not run. `Retry-After` is the seconds to the end of the minute.";

const MONEY = { type: "string", pattern: "^-?[0-9]+\\.[0-9]{6}$" };
/** A USD amount with up to six decimals, such as "5" or "5.000000". */
const CAP_AMOUNT = { type: "string", pattern: "^[0-9]{1,9}(\\.[0-9]{1,6})?$" };
const TIME = { type: "integer", description: "Unix time in seconds." };
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const nullable = (schema: Record<string, unknown>) => ({ oneOf: [schema, { type: "null" }] });

export function managementOpenApi(
  helpers: {
    errorSchema: (codes: ErrorCode[]) => unknown;
    headerRef: (name: string) => unknown;
  },
) {
  const common = {
    "Tollbooth-Request-Id": helpers.headerRef("RequestId"),
    "Tollbooth-Version": helpers.headerRef("Version"),
  };
  const counted = {
    ...common,
    ...Object.fromEntries(
      Object.entries(MANAGEMENT_RATE_LIMIT_HEADERS).map((
        [name, { component }],
      ) => [name, helpers.headerRef(component)]),
    ),
  };
  // A path segment too long to be any id is a 404 before the key is read, so it is not counted.
  const countedUnlessPathTooLong = {
    ...common,
    ...Object.fromEntries(
      Object.entries(MANAGEMENT_RATE_LIMIT_HEADERS).map(([name, { description, pattern }]) => [
        name,
        {
          description:
            `${description} Absent on the 404 of a path segment too long to be any id, answered before the key is read.`,
          schema: { type: "string", pattern },
        },
      ]),
    ),
  };
  const errors = (codes: ErrorCode[]) => {
    const statuses = [...new Set(codes.map((c) => ERROR_CODES[c].status))].sort();
    return Object.fromEntries(statuses.map((status) => {
      const these = codes.filter((c) => ERROR_CODES[c].status === status);
      // A 401 has no owner to count; a 500 or 503 may be the limiter's own storage failing.
      const headers = status === 401 || status >= 500
        ? common
        : status === 404
        ? countedUnlessPathTooLong
        : counted;
      const titles = these.map((c) => `\`${c}\`: ${ERROR_CODES[c].title}.`).join(" ");
      return [String(status), {
        description: status === 429 ? `${titles} ${OVER_THE_LIMIT}` : titles,
        headers: status === 429 || status === 503
          ? { ...headers, "Retry-After": helpers.headerRef("RetryAfter") }
          : headers,
        content: { "application/json": { schema: helpers.errorSchema(these) } },
      }];
    }));
  };
  const ok = (schema: unknown, description: string, status = "200") => ({
    [status]: { description, headers: counted, content: { "application/json": { schema } } },
  });
  const appId = {
    name: "app_id",
    in: "path",
    required: true,
    schema: { type: "string" },
    description: "An app of the owner (`app_…`).",
  };
  const page = [
    {
      name: "limit",
      in: "query",
      required: false,
      schema: { type: "integer", minimum: 1, maximum: 100, default: 20 },
      description: "Items per page.",
    },
    {
      name: "starting_after",
      in: "query",
      required: false,
      schema: { type: "string" },
      description:
        "The `next_cursor` of the previous page. Pages are newest first and stable while new items land: a walk to the end shows every item that existed when it began, each once. A value that is no cursor of this list: 400 `invalid_parameter`.",
    },
  ];
  const usageFilters = [
    { name: "user", description: "Only this end user's requests (the request's `user` field)." },
    { name: "key_id", description: "Only this API key's requests." },
    { name: "model", description: "Only this model's requests." },
  ].map((p) => ({ ...p, in: "query", required: false, schema: { type: "string" } }));
  const security = [{ managementKey: [] }];
  const idempotencyKey = { $ref: "#/components/parameters/IdempotencyKey" };
  const listOf = (item: string) => ({
    type: "object",
    required: ["object", "data", "has_more", "next_cursor"],
    properties: {
      object: { const: "list" },
      data: { type: "array", items: ref(item) },
      has_more: { type: "boolean" },
      next_cursor: { type: ["string", "null"] },
    },
  });

  const operations = {
    "/management/apps": {
      get: {
        operationId: "listApps",
        summary: "The owner's apps with their balances, newest first.",
        security,
        parameters: page,
        responses: { ...ok(listOf("App"), "A page of apps."), ...errors(READ_ERRORS) },
      },
    },
    "/management/apps/{app_id}": {
      get: {
        operationId: "getApp",
        summary: "One app with its balance and the amount held by requests in flight.",
        security,
        parameters: [appId],
        responses: { ...ok(ref("App"), "The app."), ...errors(READ_ERRORS) },
      },
    },
    "/management/apps/{app_id}/keys": {
      get: {
        operationId: "listApiKeys",
        summary: "The app's API keys, live and revoked, newest first (never the secret).",
        security,
        parameters: [appId, ...page],
        responses: { ...ok(listOf("ApiKey"), "A page of the app's keys."), ...errors(READ_ERRORS) },
      },
      post: {
        operationId: "createApiKey",
        summary:
          "Issues an API key; the secret `api_key` is in this answer only. An app has at most `MAX_LIVE_KEYS_PER_APP` (100) live keys: one more is 403 `api_key_limit_reached`. A `spend_cap` is stored in the commit that issues the key: when it cannot be, no key is issued (500 `internal_error`).",
        security,
        parameters: [appId, idempotencyKey],
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("CreateApiKeyRequest") } },
        },
        responses: {
          ...ok(ref("CreatedApiKey"), "The new key, with its secret.", "201"),
          ...errors([...WRITE_ERRORS, "api_key_limit_reached"]),
        },
      },
    },
    "/management/apps/{app_id}/keys/{key_id}/revoke": {
      post: {
        operationId: "revokeApiKey",
        summary:
          "Revokes a key: its very next request is refused (401). Its spend caps and rate-limit override go with it (`spend_cap`: null); its requests in flight are still charged only within its cap.",
        security,
        parameters: [appId, {
          name: "key_id",
          in: "path",
          required: true,
          schema: { type: "string" },
        }, idempotencyKey],
        responses: { ...ok(ref("ApiKey"), "The revoked key."), ...errors(WRITE_ERRORS) },
      },
    },
    "/management/apps/{app_id}/keys/{key_id}/spend_cap": {
      post: {
        operationId: "setApiKeySpendCap",
        summary:
          "Replaces the key's spend caps (absent or null: no such cap). Enforced in the same commit as each request's reservation, holds counted: no burst passes a cap. A request over it gets 402 `key_spend_cap_exceeded`.",
        security,
        parameters: [appId, {
          name: "key_id",
          in: "path",
          required: true,
          schema: { type: "string" },
        }, idempotencyKey],
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("SpendCap") } },
        },
        responses: { ...ok(ref("ApiKey"), "The key with its caps."), ...errors(WRITE_ERRORS) },
      },
    },
    "/management/apps/{app_id}/end_user_spend_cap": {
      get: {
        operationId: "getEndUserSpendCap",
        summary:
          "The caps each end user (the `user` of a chat, Responses or embeddings request) of the app has.",
        security,
        parameters: [appId],
        responses: { ...ok(ref("EndUserSpendCap"), "The caps."), ...errors(READ_ERRORS) },
      },
      post: {
        operationId: "setEndUserSpendCap",
        summary:
          "Replaces the caps of each end user of the app. A request whose `user` is over them gets 402 `user_spend_cap_exceeded`; requests without `user` are not end-user capped.",
        security,
        parameters: [appId, idempotencyKey],
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref("SpendCap") } },
        },
        responses: { ...ok(ref("EndUserSpendCap"), "The caps."), ...errors(WRITE_ERRORS) },
      },
    },
    "/management/apps/{app_id}/usage": {
      get: {
        operationId: "listUsage",
        summary: "Every settled request of the app, newest first.",
        security,
        parameters: [appId, ...page, ...usageFilters],
        responses: {
          ...ok(listOf("UsageRecord"), "A page of usage records."),
          ...errors(READ_ERRORS),
        },
      },
    },
    "/management/apps/{app_id}/usage/report": {
      get: {
        operationId: "usageReport",
        summary: "Usage summed per UTC day, model, key or end user.",
        security,
        parameters: [
          appId,
          {
            name: "group_by",
            in: "query",
            required: true,
            schema: { type: "string", enum: ["day", "model", "key", "user"] },
          },
          {
            name: "from",
            in: "query",
            required: false,
            schema: { type: "string", format: "date" },
            description:
              "First UTC day (default: 29 days before `to`), from 2000-01-01 to 9999-12-31.",
          },
          {
            name: "to",
            in: "query",
            required: false,
            schema: { type: "string", format: "date" },
            description:
              "Last UTC day, inclusive (default: today), from 2000-01-01 to 9999-12-31. At most 93 days in all, and not before `from`.",
          },
          ...page,
          ...usageFilters,
        ],
        responses: {
          ...ok(ref("UsageReport"), "Groups sorted by group; `null` (no end user) first."),
          ...errors(READ_ERRORS),
        },
      },
    },
    "/management/apps/{app_id}/ledger": {
      get: {
        operationId: "listLedger",
        summary:
          "The wallet's credits (starter, top-ups, operator credits) and charges, newest first.",
        security,
        parameters: [appId, ...page],
        responses: {
          ...ok(listOf("LedgerEntry"), "A page of ledger entries."),
          ...errors(READ_ERRORS),
        },
      },
    },
  };
  // The version header applies to every route, as on the rest of the API.
  const version = { $ref: "#/components/parameters/Version" };
  const paths = Object.fromEntries(
    Object.entries(operations).map(([path, item]) => [path, { parameters: [version], ...item }]),
  );

  const schemas = {
    App: {
      type: "object",
      required: [
        "id",
        "object",
        "name",
        "balance",
        "reserved",
        "spent",
        "credited",
        "refunded",
        "owed",
        "uncharged",
        "top_up_url",
      ],
      properties: {
        id: { type: "string" },
        object: { const: "app" },
        name: { type: "string" },
        balance: { ...MONEY, description: "Available balance (USD)." },
        reserved: { ...MONEY, description: "Held by requests in flight (USD)." },
        spent: { ...MONEY, description: "Charged to date (USD)." },
        credited: { ...MONEY, description: "Starter credits + top-ups + operator credits (USD)." },
        refunded: {
          ...MONEY,
          description:
            "Taken back for refunded and disputed top-ups, less disputes won (USD). balance + reserved + spent = credited − refunded.",
        },
        owed: {
          ...MONEY,
          description:
            "Taken back but not yet found: the refunded money was already spent or held. Taken from the balance as it comes back, before anything is reserved (USD).",
        },
        uncharged: {
          ...MONEY,
          description:
            "Usage the provider billed beyond what the reservation and the balance covered, never charged to this app (USD).",
        },
        top_up_url: { type: "string", format: "uri" },
        created: TIME,
      },
    },
    SpendCap: {
      type: "object",
      additionalProperties: false,
      description:
        "Caps in USD; null or absent: none. `daily` and `monthly` are UTC calendar windows. Spending is counted from when a cap was first set.",
      properties: {
        total: nullable(CAP_AMOUNT),
        daily: nullable(CAP_AMOUNT),
        monthly: nullable(CAP_AMOUNT),
      },
    },
    EndUserSpendCap: {
      type: "object",
      required: ["object", "spend_cap"],
      properties: {
        object: { const: "end_user_spend_cap" },
        spend_cap: { oneOf: [ref("SpendCap"), { type: "null" }] },
      },
    },
    ApiKey: {
      type: "object",
      required: ["id", "object", "name", "prefix", "created", "last_used", "revoked", "spend_cap"],
      properties: {
        id: { type: "string" },
        object: { const: "api_key" },
        name: { type: "string" },
        prefix: { type: "string", description: "The key's first characters, to recognise it." },
        created: TIME,
        last_used: nullable(TIME),
        revoked: nullable(TIME),
        spend_cap: { oneOf: [ref("SpendCap"), { type: "null" }] },
      },
    },
    CreateApiKeyRequest: {
      type: "object",
      required: ["name"],
      additionalProperties: false,
      properties: {
        name: { type: "string", minLength: 1, maxLength: 60 },
        spend_cap: ref("SpendCap"),
      },
    },
    CreatedApiKey: {
      allOf: [ref("ApiKey"), {
        type: "object",
        required: ["api_key"],
        properties: {
          api_key: {
            type: ["string", "null"],
            description:
              "The secret key, shown this once. `null` in an `Idempotent-Replayed` answer: secrets are never stored, so a client that lost the first answer revokes that key and creates another.",
          },
        },
      }],
    },
    UsageRecord: {
      type: "object",
      required: [
        "id",
        "object",
        "request_id",
        "key_id",
        "user",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "created",
      ],
      properties: {
        id: { type: "string" },
        object: { const: "usage_record" },
        request_id: { type: "string" },
        key_id: { type: "string" },
        user: { type: ["string", "null"], description: "The request's `user` field." },
        model: { type: "string" },
        provider: { type: "string" },
        prompt_tokens: { type: "integer" },
        completion_tokens: { type: "integer" },
        cost: { ...MONEY, description: "What left the wallet (USD)." },
        uncharged: MONEY,
        reserved: MONEY,
        streamed: { type: "boolean" },
        outcome: { type: "string", enum: ["completed", "upstream_cut", "client_closed"] },
        counted_locally: { type: "boolean" },
        created: TIME,
      },
    },
    UsageReport: {
      type: "object",
      required: ["object", "group_by", "from", "to", "data", "has_more", "next_cursor"],
      properties: {
        object: { const: "list" },
        group_by: { type: "string", enum: ["day", "model", "key", "user"] },
        from: { type: "string", format: "date" },
        to: { type: "string", format: "date" },
        data: {
          type: "array",
          items: {
            type: "object",
            required: ["object", "group", "requests", "prompt_tokens", "completion_tokens", "cost"],
            properties: {
              object: { const: "usage_report_row" },
              group: {
                type: ["string", "null"],
                description: "The day, model, key id or end user; `null`: requests with no `user`.",
              },
              requests: { type: "integer" },
              prompt_tokens: { type: "integer" },
              completion_tokens: { type: "integer" },
              cost: MONEY,
            },
          },
        },
        has_more: { type: "boolean" },
        next_cursor: { type: ["string", "null"] },
      },
    },
    LedgerEntry: {
      type: "object",
      required: ["id", "object", "type", "amount", "created"],
      properties: {
        id: { type: "string" },
        object: { const: "ledger_entry" },
        type: {
          type: "string",
          enum: [
            "starter",
            "top_up",
            "operator_credit",
            "refund",
            "chargeback",
            "refund_reversed",
            "chargeback_reversed",
            "charge",
          ],
        },
        amount: {
          ...MONEY,
          description:
            "USD; credits, and refunds and chargebacks given back, positive; charges, refunds and chargebacks negative.",
        },
        reason: { type: ["string", "null"] },
        reference: {
          type: ["string", "null"],
          description:
            "The payment reference: a top-up's, a refund's PaymentIntent, a chargeback's dispute.",
        },
        request_id: { type: ["string", "null"], description: "The request a charge paid for." },
        model: { type: ["string", "null"] },
        created: TIME,
      },
    },
  };

  const securityScheme = {
    type: "http",
    scheme: "bearer",
    description:
      "An owner's management key (`tbm_…`), created in the dashboard. It acts on all of the owner's apps; keep it server-side. The owner's management keys may make `MANAGEMENT_RATE_LIMIT_RPM` (300) requests a minute together (one count per owner, fixed UTC minutes), shown in the `x-ratelimit-*-requests` headers; one more is 429 `rate_limit_exceeded` with `Retry-After`, and is not run.",
  };
  const headers = Object.fromEntries(
    Object.values(MANAGEMENT_RATE_LIMIT_HEADERS).map(({ component, description, pattern }) => [
      component,
      { required: true, description, schema: { type: "string", pattern } },
    ]),
  );
  return { paths, schemas, securityScheme, headers };
}
