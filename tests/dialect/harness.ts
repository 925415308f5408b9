/**
 * The dialect suites' world: Tollbooth on a loopback port, its catalog pointing an OpenAI-kind and
 * an Anthropic-kind model at the strict provider fakes, and one funded app. Each suite drives it
 * with a real client library and checks what the upstream received and what was charged.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { ChatOpenAI, type ChatOpenAIFields } from "@langchain/openai";
import {
  type AIMessageChunk,
  type BaseMessage,
  HumanMessage,
  ToolMessage,
} from "@langchain/core/messages";
import { type AnthropicUpstream, startAnthropicUpstream } from "../fakes/anthropic_upstream.ts";
import { type OpenAiUpstream, startOpenAiUpstream } from "../fakes/openai_upstream.ts";
import {
  assertAuditClean,
  newUsageOf,
  serveLoopback,
  startService,
  type TestService,
} from "../helpers.ts";
import type { UsageRecord } from "@/lib/db.ts";

/** Prices in micro-USD per million tokens, written out here rather than read from the catalog. */
export const PRICES = {
  "oai/gpt-4.1-mini": {
    input: 400_000n,
    output: 1_600_000n,
    cacheRead: 100_000n,
    cacheWrite: 400_000n,
    cacheWrite1h: 400_000n,
  },
  "oai/gpt-5.6": {
    input: 1_250_000n,
    output: 10_000_000n,
    cacheRead: 125_000n,
    cacheWrite: 1_562_500n,
    cacheWrite1h: 1_562_500n,
  },
  "oai/o4-mini": {
    input: 1_100_000n,
    output: 4_400_000n,
    cacheRead: 275_000n,
    cacheWrite: 1_100_000n,
    cacheWrite1h: 1_100_000n,
  },
  "oair/o4-mini": {
    input: 1_100_000n,
    output: 4_400_000n,
    cacheRead: 275_000n,
    cacheWrite: 1_100_000n,
    cacheWrite1h: 1_100_000n,
  },
  "oair/gpt-4.1-mini": {
    input: 400_000n,
    output: 1_600_000n,
    cacheRead: 100_000n,
    cacheWrite: 400_000n,
    cacheWrite1h: 400_000n,
  },
  "oairs/gpt-5.4": {
    input: 1_250_000n,
    output: 10_000_000n,
    cacheRead: 125_000n,
    cacheWrite: 1_250_000n,
    cacheWrite1h: 1_250_000n,
  },
  "ant/claude-sonnet": {
    input: 3_000_000n,
    output: 15_000_000n,
    cacheRead: 300_000n,
    cacheWrite: 3_750_000n,
    cacheWrite1h: 6_000_000n,
  },
  "ant/claude-opus-4-7": {
    input: 5_000_000n,
    output: 25_000_000n,
    cacheRead: 500_000n,
    cacheWrite: 6_250_000n,
    cacheWrite1h: 10_000_000n,
  },
  "ant/claude-sonnet-5": {
    input: 3_000_000n,
    output: 15_000_000n,
    cacheRead: 300_000n,
    cacheWrite: 3_750_000n,
    cacheWrite1h: 6_000_000n,
  },
  "ant/claude-opus-5-5": {
    input: 4_000_000n,
    output: 20_000_000n,
    cacheRead: 200_000n,
    cacheWrite: 5_000_000n,
    cacheWrite1h: 8_000_000n,
  },
} as const;

export type DialectModel = keyof typeof PRICES;
/** Served through OpenAI's chat API, and its requests holding a PDF through the Responses API. */
export const OPENAI_MODEL = "oai/gpt-4.1-mini";
export const REASONING_MODEL = "oai/o4-mini";
/** A GPT that bills its cache writes (GPT-5.6 on); served through OpenAI's chat API alone. */
export const CACHE_WRITING_GPT = "oai/gpt-5.6";
/** Served through OpenAI's Responses API (the provider kind openai_responses). */
export const RESPONSES_REASONING_MODEL = "oair/o4-mini";
export const RESPONSES_MODEL = "oair/gpt-4.1-mini";
/** Served through OpenAI's Responses API by a verified organization: asked for summaries. */
export const SUMMARIZED_MODEL = "oairs/gpt-5.4";
export const CLAUDE_MODEL = "ant/claude-sonnet";
/** Newer Claude generations, by the rules their names carry (claude_rules.ts). */
export const ADAPTIVE_CLAUDE = "ant/claude-opus-4-7";
export const THINKING_CLAUDE = "ant/claude-sonnet-5";
export const UNFORCEABLE_CLAUDE = "ant/claude-opus-5-5";

/**
 * The charge of a usage at the model's prices: every component at its price, summed in
 * pico-dollars, rounded up once to micro-dollars (the documented rule), computed independently.
 */
export function expectedCharge(
  model: DialectModel,
  u: BilledUsage,
): number {
  const p = PRICES[model];
  const fresh = u.prompt - (u.cached ?? 0) - (u.cacheWrite ?? 0);
  const hour = u.cacheWrite1h ?? 0;
  const picos = BigInt(fresh) * p.input + BigInt(u.cached ?? 0) * p.cacheRead +
    BigInt((u.cacheWrite ?? 0) - hour) * p.cacheWrite + BigInt(hour) * p.cacheWrite1h +
    BigInt(u.completion) * p.output;
  return Number((picos + 999_999n) / 1_000_000n);
}

function usd(picosPerToken: bigint) {
  const micros = Number(picosPerToken);
  return (micros / 1_000_000).toFixed(6);
}

export interface Dialect {
  s: TestService;
  openai: OpenAiUpstream;
  claude: AnthropicUpstream;
  /** Tollbooth's API base, for any client's baseURL. */
  baseURL: string;
  apiKey: string;
  appId: string;
  /** The usage records written since the last call, oldest first. */
  newUsage(): Promise<UsageRecord[]>;
}

/** The openai client against Tollbooth, without retries: each test sees every answer as it came. */
export function openAiClient(d: Dialect) {
  return new OpenAI({ baseURL: d.baseURL, apiKey: d.apiKey, maxRetries: 0 });
}

/** LangChain's OpenAI chat model against Tollbooth, without retries, as the openAiClient is. */
export function langChainModel(
  d: Dialect,
  model: string,
  options: Omit<ChatOpenAIFields, "model" | "apiKey" | "configuration" | "maxRetries"> = {},
) {
  return new ChatOpenAI({
    model,
    apiKey: d.apiKey,
    configuration: { baseURL: d.baseURL },
    maxRetries: 0,
    ...options,
  });
}

/**
 * A Responses request's input and tools in which the user asked, the model called `tool` (call
 * `call_1`) and the tool answered `output`: a tool loop's second turn, as a client sends it.
 */
export function answeredToolCall(
  question: string,
  tool: string,
  output: OpenAI.Responses.ResponseInputItem.FunctionCallOutput["output"],
) {
  return {
    input: [
      { role: "user", content: question },
      { type: "function_call", call_id: "call_1", name: tool, arguments: "{}" },
      { type: "function_call_output", call_id: "call_1", output },
    ] satisfies OpenAI.Responses.ResponseInput,
    tools: [{
      type: "function",
      name: tool,
      parameters: null,
      strict: false,
    }] satisfies OpenAI.Responses.Tool[],
  };
}

/** One function tool, as chat requests offer it. */
export const WEATHER_TOOLS = [{
  type: "function" as const,
  function: {
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

export async function withDialect(
  fn: (d: Dialect) => Promise<void>,
  options: { claude?: Parameters<typeof startAnthropicUpstream>[0] } = {},
) {
  const openai = startOpenAiUpstream();
  const claude = startAnthropicUpstream(options.claude);
  const model = (id: DialectModel, provider: string, upstream: string, extra = {}) => ({
    id,
    provider,
    upstream_model: upstream,
    input_usd_per_mtok: usd(PRICES[id].input),
    output_usd_per_mtok: usd(PRICES[id].output),
    cache_read_usd_per_mtok: usd(PRICES[id].cacheRead),
    cache_write_usd_per_mtok: usd(PRICES[id].cacheWrite),
    context_tokens: 200_000,
    max_output_tokens: 32_000,
    ...extra,
  });
  const s = await startService({
    catalogFile: {
      providers: {
        oai: {
          kind: "openai",
          base_url: openai.baseUrl,
          api_key_env: "OAI_KEY",
          timeout_ms: 10_000,
          // It stands in for OpenAI's own API, which takes allowed tools as sent.
          allowed_tools: true,
        },
        oair: {
          kind: "openai_responses",
          base_url: openai.baseUrl,
          api_key_env: "OAI_KEY",
          timeout_ms: 10_000,
        },
        oairs: {
          kind: "openai_responses",
          base_url: openai.baseUrl,
          api_key_env: "OAI_KEY",
          timeout_ms: 10_000,
          reasoning_summaries: true,
        },
        ant: {
          kind: "anthropic",
          base_url: claude.url,
          api_key_env: "ANT_KEY",
          timeout_ms: 10_000,
        },
      },
      models: [
        model(OPENAI_MODEL, "oai", "gpt-4.1-mini", { documents_provider: "oair" }),
        model(REASONING_MODEL, "oai", "o4-mini"),
        model(CACHE_WRITING_GPT, "oai", "gpt-5.6", { output_cap_param: "max_completion_tokens" }),
        model(RESPONSES_REASONING_MODEL, "oair", "o4-mini"),
        model(RESPONSES_MODEL, "oair", "gpt-4.1-mini"),
        model(SUMMARIZED_MODEL, "oairs", "gpt-5.4"),
        model(CLAUDE_MODEL, "ant", "claude-sonnet-4-5"),
        model(ADAPTIVE_CLAUDE, "ant", "claude-opus-4-7"),
        model(THINKING_CLAUDE, "ant", "claude-sonnet-5"),
        model(UNFORCEABLE_CLAUDE, "ant", "claude-opus-5-5"),
      ],
    },
    env: { OAI_KEY: openai.apiKey, ANT_KEY: claude.apiKey },
  });
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    await fn({
      s,
      openai,
      claude,
      baseURL: `${server.url}/v1`,
      apiKey,
      appId,
      newUsage: newUsageOf(s, appId),
    });
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
    await openai.close();
    await claude.close();
  }
}

interface BilledUsage {
  prompt: number;
  completion: number;
  cached?: number;
  cacheWrite?: number;
  /** Part of the cache writes kept for an hour. */
  cacheWrite1h?: number;
}

/**
 * The usage records written since the last check, one per expected usage in order, each charged
 * exactly that usage at the catalog's prices. Returns the last record.
 */
export async function assertCharged(d: Dialect, model: DialectModel, ...usages: BilledUsage[]) {
  const records = await d.newUsage();
  assert.equal(records.length, usages.length, "one usage record per request");
  usages.forEach((usage, i) => {
    const record = records[i];
    assert.equal(record.model, model);
    assert.equal(record.promptTokens, usage.prompt, "prompt tokens billed");
    assert.equal(record.completionTokens, usage.completion, "completion tokens billed");
    assert.equal(record.cachedTokens ?? 0, usage.cached ?? 0, "cached tokens billed");
    assert.equal(record.cacheWriteTokens ?? 0, usage.cacheWrite ?? 0, "cache-write tokens billed");
    assert.equal(record.cacheWrite1hTokens ?? 0, usage.cacheWrite1h ?? 0, "1-hour writes billed");
    assert.equal(record.uncharged, 0);
    assert.equal(record.cost, expectedCharge(model, usage), "charged at the catalog's prices");
  });
  return records.at(-1)!;
}

/** The tool call, then the answer that uses its result; the usage of each step. */
export function scriptAgentLoop(d: Dialect, kind: "openai" | "anthropic") {
  if (kind === "openai") {
    d.openai.script(
      {
        toolCalls: [{ name: "weather", arguments: { city: "Paris" } }],
        promptTokens: 90,
        completionTokens: 15,
      },
      { content: "It is sunny in Paris.", promptTokens: 130, completionTokens: 7 },
    );
    return [{ prompt: 90, completion: 15 }, { prompt: 130, completion: 7 }];
  }
  d.claude.script(
    {
      content: [{ type: "tool_use", name: "weather", input: { city: "Paris" } }],
      inputTokens: 400,
      outputTokens: 30,
    },
    { text: "It is sunny in Paris.", inputTokens: 460, outputTokens: 8 },
  );
  return [{ prompt: 400, completion: 30 }, { prompt: 460, completion: 8 }];
}

/**
 * LangChain's agent loop written out, as its docs show it: three steps, each answer's tool calls
 * answered by `result` ("sunny" unless told); the last answer's text.
 */
export async function langChainLoop(
  llm: {
    invoke(messages: BaseMessage[]): Promise<AIMessageChunk>;
    stream(messages: BaseMessage[]): Promise<AsyncIterable<AIMessageChunk>>;
  },
  stream: boolean,
  result: (args: Record<string, unknown>) => string = () => "sunny",
): Promise<string> {
  const messages: BaseMessage[] = [new HumanMessage("Weather in Paris, Rome and Oslo?")];
  for (let step = 0; step < 3; step++) {
    let answer: AIMessageChunk | undefined;
    if (stream) {
      for await (const chunk of await llm.stream(messages)) {
        answer = answer ? answer.concat(chunk) : chunk;
      }
    } else answer = await llm.invoke(messages);
    messages.push(answer!);
    for (const call of answer!.tool_calls ?? []) {
      messages.push(new ToolMessage({ tool_call_id: call.id!, content: result(call.args) }));
    }
  }
  return messages.at(-1)!.text;
}
