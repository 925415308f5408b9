/**
 * The stored-response operations of the OpenAPI document (`GET`/`DELETE /responses/{id}`, its
 * input items, and the cancel that answers 404): free reads and a delete, beside createResponse.
 */
import type { ErrorCode } from "@/lib/core/mod.ts";

/** A free read's errors, and what an unknown id or a bad page parameter gives. */
const STORED_ERRORS: ErrorCode[] = [
  "unsupported_version",
  "invalid_api_key",
  "service_unavailable",
  "internal_error",
  "not_found",
];

export function storedResponsesOpenApi(helpers: {
  versionParameter: unknown;
  readHeaders: Record<string, unknown>;
  errorResponse: (status: number, codes: ErrorCode[]) => unknown;
  statusesOf: (codes: ErrorCode[]) => number[];
  ref: (name: string) => unknown;
}) {
  const { versionParameter, readHeaders, errorResponse, statusesOf, ref } = helpers;
  const idParameter = {
    name: "response_id",
    in: "path",
    required: true,
    description: "The `id` of a response this app stored (`store`, default true).",
    schema: { type: "string" },
  };
  const errors = (codes: ErrorCode[]) =>
    Object.fromEntries(statusesOf(codes).map((s) => [String(s), errorResponse(s, codes)]));
  const ok = (description: string, schema: unknown) => ({
    description,
    headers: readHeaders,
    content: { "application/json": { schema } },
  });
  const free =
    "Free: it reserves nothing, calls no provider and is not counted against the rate limits. A response of another app, deleted, expired (30 days) or created with `store: false` is 404 `not_found`.";
  return {
    paths: {
      "/responses/{response_id}": {
        get: {
          operationId: "retrieveResponse",
          summary: "A stored response, as it was answered.",
          description:
            `${free} A response stored before its object was kept (it can still be continued with \`previous_response_id\`) is 404 too.`,
          parameters: [
            versionParameter,
            idParameter,
            {
              name: "stream",
              in: "query",
              required: false,
              description:
                "Only `false`: streaming a response's events is for background responses, which are not supported (400 `unsupported_parameter`).",
              schema: { type: "boolean", const: false },
            },
            {
              name: "starting_after",
              in: "query",
              required: false,
              description:
                "Not supported: it resumes a background response's event stream (400 `unsupported_parameter`).",
              schema: { type: "integer" },
            },
          ],
          responses: {
            "200": ok("The response object.", ref("Response")),
            ...errors([...STORED_ERRORS, "unsupported_parameter"]),
          },
        },
        delete: {
          operationId: "deleteResponse",
          summary: "Deletes a stored response and its items.",
          description:
            `${free} Deleting it again gives the same answer until it would have expired; afterwards it cannot be retrieved, continued (\`previous_response_id\`) or referenced (\`item_reference\`).`,
          parameters: [versionParameter, idParameter],
          responses: {
            "200": ok("Deleted.", {
              type: "object",
              required: ["id", "object", "deleted"],
              properties: {
                id: { type: "string" },
                object: { const: "response" },
                deleted: { const: true },
              },
            }),
            ...errors(STORED_ERRORS),
          },
        },
      },
      "/responses/{response_id}/input_items": {
        get: {
          operationId: "listInputItems",
          summary: "The input items of a stored response's request, a page at a time.",
          description:
            `${free} Only that request's \`input\` (a string as one user message; an \`item_reference\` as the item it named), not a previous response's; \`include\` is ignored.`,
          parameters: [
            versionParameter,
            idParameter,
            {
              name: "after",
              in: "query",
              required: false,
              description: "An item id: the page starts after it, in the order asked for.",
              schema: { type: "string" },
            },
            {
              name: "limit",
              in: "query",
              required: false,
              description: "Items per page, 1 to 100.",
              schema: { type: "integer", minimum: 1, maximum: 100, default: 20 },
            },
            {
              name: "order",
              in: "query",
              required: false,
              description: "`asc`: in input order; `desc`: the last first.",
              schema: { type: "string", enum: ["asc", "desc"], default: "desc" },
            },
          ],
          responses: {
            "200": ok("A page of input items.", {
              type: "object",
              required: ["object", "data", "first_id", "last_id", "has_more"],
              properties: {
                object: { const: "list" },
                data: {
                  type: "array",
                  items: {
                    type: "object",
                    required: ["id", "type"],
                    properties: { id: { type: "string" }, type: { type: "string" } },
                  },
                },
                first_id: { type: ["string", "null"] },
                last_id: { type: ["string", "null"] },
                has_more: { type: "boolean" },
              },
            }),
            ...errors([...STORED_ERRORS, "invalid_parameter"]),
          },
        },
      },
      "/responses/{response_id}/cancel": {
        post: {
          operationId: "cancelResponse",
          summary: "Always 404: only a background response can be cancelled, and none is served.",
          parameters: [versionParameter, idParameter],
          responses: errors(STORED_ERRORS),
        },
      },
    },
  };
}
