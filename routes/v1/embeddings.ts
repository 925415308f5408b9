import type { Context } from "hono";
import { type Gateway, parseEmbeddingsRequest } from "@/lib/gateway/mod.ts";
import type { Env } from "@/routes/middleware.ts";
import { jsonBody } from "@/routes/json_body.ts";
import { paidAnswerHeaders, withEndUser } from "./paid_answer.ts";

/** POST /v1/embeddings: createEmbedding, paid like a chat completion without output. */
export function embeddings(gateway: Gateway) {
  return async (c: Context<Env>) => {
    const request = parseEmbeddingsRequest(await jsonBody(c));
    const outcome = await gateway.embed(
      withEndUser(c.get("caller"), request.user),
      request,
      c.get("requestId"),
      c.get("trace"),
    );
    paidAnswerHeaders(c, outcome);
    return c.json(outcome.embeddings);
  };
}
