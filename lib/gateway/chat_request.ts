import { z } from "zod";
import { ApiError } from "@/lib/core/mod.ts";
import type { ChatMessage } from "./providers/types.ts";

export const DEFAULT_MAX_TOKENS = 2048;

/** Fields we interpret; every other field of the body is passed on to the upstream untouched. */
const INTERPRETED = new Set([
  "model",
  "messages",
  "max_tokens",
  "max_completion_tokens",
  "stream",
  "stream_options",
  "n",
]);

const TextPart = z.object({ type: z.literal("text"), text: z.string() });

const MessageSchema = z.object({
  role: z.enum(["system", "user", "assistant"], {
    error: "must be one of system, user, assistant",
  }),
  content: z.union([z.string(), z.array(TextPart).min(1)], {
    error: "must be a string (or an array of text parts)",
  }),
  name: z.string().optional(),
});

const TokenCap = z.number({ error: "must be an integer" })
  .int("must be an integer")
  .min(1, "must be at least 1")
  .max(10_000_000, "is far above any model's output limit");

const BodySchema = z.object({
  model: z.string({ error: "must be a string" }).min(1, "must not be empty"),
  messages: z.array(MessageSchema, { error: "must be an array of messages" }).min(
    1,
    "must contain at least one message",
  ),
  max_tokens: TokenCap.nullish(),
  max_completion_tokens: TokenCap.nullish(),
  stream: z.boolean({ error: "must be a boolean" }).nullish(),
  stream_options: z.object(
    { include_usage: z.boolean({ error: "must be a boolean" }).optional() },
    {
      error: "must be an object",
    },
  ).nullish(),
  n: z.literal(1, "only n = 1 is supported").nullish(),
});

/**
 * Passed-through fields are re-serialised for the upstream, and serialising is recursive: a value
 * nested deeper than any real option (tool schemas run to a dozen levels) is refused up front.
 */
const MAX_PASSTHROUGH_DEPTH = 64;

/** Depth of a parsed JSON value, measured without recursion and stopping past the limit. */
function nestingDepth(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    deepest = Math.max(deepest, depth);
    if (deepest > MAX_PASSTHROUGH_DEPTH) return deepest;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return deepest;
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  /** Undefined when the client gave no cap; the default is applied against the model. */
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  passthrough: Record<string, unknown>;
}

/** Turns a parsed JSON body into a chat request, or throws the 400 that names the bad field. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new ApiError("invalid_json", "The request body must be a JSON object.");
  }
  const record = body as Record<string, unknown>;
  for (const field of ["model", "messages"]) {
    if (!Object.hasOwn(record, field) || record[field] === undefined || record[field] === null) {
      throw new ApiError("missing_parameter", `Missing required parameter: '${field}'.`, {
        param: field,
      });
    }
  }
  const parsed = BodySchema.safeParse(record);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = formatPath(issue.path);
    throw new ApiError("invalid_parameter", `Invalid value for '${param}': ${issue.message}.`, {
      param,
    });
  }
  const data = parsed.data;
  if (
    data.max_tokens != null && data.max_completion_tokens != null &&
    data.max_tokens !== data.max_completion_tokens
  ) {
    throw new ApiError(
      "invalid_parameter",
      "'max_tokens' and 'max_completion_tokens' disagree; send one of them.",
      {
        param: "max_completion_tokens",
      },
    );
  }
  const passthrough: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(record)) {
    if (INTERPRETED.has(k)) continue;
    if (nestingDepth(v) > MAX_PASSTHROUGH_DEPTH) {
      throw new ApiError("invalid_parameter", `Invalid value for '${k}': nested too deeply.`, {
        param: k,
      });
    }
    passthrough[k] = v;
  }
  return {
    model: data.model,
    messages: data.messages.map((m) => ({
      role: m.role,
      content: typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join(""),
    })),
    maxTokens: data.max_tokens ?? data.max_completion_tokens ?? undefined,
    stream: data.stream ?? false,
    includeUsage: data.stream_options?.include_usage ?? false,
    passthrough,
  };
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    out += typeof part === "number" ? `[${part}]` : out ? `.${String(part)}` : String(part);
  }
  return out || "(body)";
}
