import type { Context } from "hono";
import { encodeSseEvent, type Responses } from "@/lib/gateway/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { jsonBody } from "@/routes/json_body.ts";
import { paidAnswerHeaders, paidEventStream } from "./paid_answer.ts";

/** POST /v1/responses: createResponse (OpenAI's Responses API), paid like a chat completion. */
export function responsesRoute(
  responses: Responses,
  options: { redact: (text: string) => string },
) {
  return async (c: Context<Env>) => {
    const body = responses.parse(await jsonBody(c));
    const caller = c.get("caller");
    const requestId = c.get("requestId");
    const trace = c.get("trace");
    if (!body.stream) {
      const outcome = await responses.create(caller, body, requestId, trace);
      paidAnswerHeaders(c, outcome);
      return c.json(outcome.response);
    }
    const outcome = await responses.stream(caller, body, requestId, trace);
    return paidEventStream(c, outcome, (event) => {
      const data = JSON.stringify(event);
      // Only a failure quotes the upstream, and so only a failure may quote our key.
      if (event.type === "error") {
        return {
          bytes: encodeSseEvent(event.type, options.redact(data)),
          errorCode: String(event.code),
        };
      }
      const safe = event.type === "response.failed" ? options.redact(data) : data;
      return { bytes: encodeSseEvent(event.type, safe) };
    });
  };
}
