/** The response converter of the OpenAI kind: the completion passes whole; usage is read from it. */
import { z } from "zod";
import { parseOpenAiUsage } from "../usage.ts";
import { type ChatCompletion, type CompletionResult, ProviderError } from "../types.ts";

/** Tolerant: what a completion must have to be one; every other field is kept as it came. */
const CompletionSchema = z.looseObject({
  choices: z.array(
    z.looseObject({
      message: z.looseObject({
        content: z.string().nullish(),
        tool_calls: z.array(z.looseObject({})).nullish(),
      }),
    }),
  ),
});

export function openAiCompletionResult(json: unknown): CompletionResult {
  const parsed = CompletionSchema.safeParse(json);
  if (!parsed.success) {
    throw new ProviderError(
      "malformed_response",
      "upstream answered 200 without a chat completion",
    );
  }
  const completion = json as ChatCompletion;
  return { completion, usage: parseOpenAiUsage(completion.usage)?.usage ?? null };
}
