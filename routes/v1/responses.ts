import type { Context } from "hono";
import { ApiError } from "@/lib/core/mod.ts";
import { encodeSseEvent, type Responses } from "@/lib/gateway/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { jsonBody } from "@/routes/json_body.ts";
import { paidAnswerHeaders, paidEventStream, withEndUser } from "./paid_answer.ts";

/** POST /v1/responses: createResponse (OpenAI's Responses API), paid like a chat completion. */
export function responsesRoute(responses: Responses) {
  return async (c: Context<Env>) => {
    const body = responses.parse(await jsonBody(c));
    const caller = withEndUser(c.get("caller"), body.user);
    const requestId = c.get("requestId");
    const trace = c.get("trace");
    if (!body.stream) {
      const outcome = await responses.create(caller, body, requestId, trace);
      paidAnswerHeaders(c, outcome);
      return c.json(outcome.response);
    }
    const outcome = await responses.stream(caller, body, requestId, trace);
    return paidEventStream(c, outcome, (event) => {
      const bytes = encodeSseEvent(event.type, JSON.stringify(event));
      return event.type === "error" ? { bytes, errorCode: String(event.code) } : { bytes };
    });
  };
}

/**
 * GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: the app's stored
 * responses, read back or deleted. Free: they reserve nothing and call no provider.
 */
export function storedResponseRoutes(responses: Responses) {
  const id = (c: Context<Env>) => c.req.param("id") ?? "";
  return {
    retrieve: async (c: Context<Env>) => {
      refuseReplay(c);
      return c.json(await responses.retrieve(c.get("caller"), id(c)));
    },
    delete: async (c: Context<Env>) => c.json(await responses.delete(c.get("caller"), id(c))),
    inputItems: async (c: Context<Env>) =>
      c.json(
        await responses.inputItems(c.get("caller"), id(c), {
          after: c.req.query("after"),
          limit: c.req.query("limit"),
          order: c.req.query("order"),
        }),
      ),
    /** Only a background response can be cancelled, and `background: true` is refused. */
    cancel: (c: Context<Env>) => {
      throw new ApiError(
        "not_found",
        `No background response '${
          id(c).slice(0, 100)
        }' to cancel: background responses are not supported (background: true is refused), so none is ever in progress.`,
        { param: "response_id" },
      );
    },
  };
}

/**
 * `stream` and `starting_after` on a retrieve replay a background response's events, which are
 * never kept here (`background: true` is refused): answering with the JSON object instead would
 * give a client that asked for events an empty stream and no error.
 */
function refuseReplay(c: Context<Env>) {
  const stream = c.req.query("stream");
  const param = stream !== undefined && stream !== "false"
    ? "stream"
    : c.req.query("starting_after") !== undefined
    ? "starting_after"
    : null;
  if (param === null) return;
  throw new ApiError(
    "unsupported_parameter",
    `'${param}' streams a background response's events, and background responses are not supported (background: true is refused). Retrieve the stored response without it.`,
    { param },
  );
}
