import type { Context } from "hono";
import { encodeSseData, type Gateway, parseChatRequest, SSE_DONE } from "@/lib/gateway/mod.ts";
import { errorBody } from "@/lib/core/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { paidAnswerHeaders, paidEventStream, withEndUser } from "../paid_answer.ts";
import { jsonBody } from "@/routes/json_body.ts";

/** POST /v1/chat/completions: createChatCompletion. */
export function chatCompletions(
  gateway: Gateway,
  options: { docsBaseUrl: string },
) {
  return async (c: Context<Env>) => {
    const request = parseChatRequest(await jsonBody(c));
    const caller = withEndUser(c.get("caller"), request.params.user);
    const requestId = c.get("requestId");
    const trace = c.get("trace");

    if (!request.stream) {
      const outcome = await gateway.complete(caller, request, requestId, trace);
      paidAnswerHeaders(c, outcome);
      return c.json(outcome.completion);
    }

    const outcome = await gateway.stream(caller, request, requestId, trace);
    return paidEventStream(c, outcome, (event) => {
      if (event.type === "chunk") return { bytes: encodeSseData(JSON.stringify(event.chunk)) };
      const { code, message } = event.error;
      const body = errorBody(code, message, options.docsBaseUrl);
      return { bytes: encodeSseData(JSON.stringify(body)), errorCode: code };
    }, SSE_DONE);
  };
}
