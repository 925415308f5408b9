/** What the Responses tests share: a response's identity with item ids counted from 1. */
import { parseResponsesBody, type ResponsesBody } from "./request.ts";
import type { ResponseMeta } from "./response.ts";

export function testMeta(fields: Partial<ResponseMeta> = {}): ResponseMeta {
  let n = 0;
  return {
    id: "resp_test",
    createdAt: 1_741_290_958,
    model: "openai/gpt-4o-mini",
    store: true,
    previousResponseId: null,
    newItemId: (prefix) => `${prefix}_${++n}`,
    ...fields,
  };
}

/** A Responses body for the test model, with `fields` on top. */
export const testBody = (fields: Record<string, unknown> = {}): ResponsesBody =>
  parseResponsesBody({ model: "openai/gpt-4o-mini", input: "Hi", ...fields });
