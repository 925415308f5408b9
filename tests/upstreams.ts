/** Fake upstreams for provider tests: fixtures from the providers' documentation, replayed. */
import type { CatalogFile } from "@/lib/catalog/catalog.ts";
import { startService, type TestService } from "./helpers.ts";

export const UPSTREAM_KEY = "sk-upstream-test";

export function fixture(name: string): string {
  return Deno.readTextFileSync(new URL(`./fixtures/${name}`, import.meta.url));
}

export function fixtureJson<T = Record<string, unknown>>(name: string): T {
  return JSON.parse(fixture(name));
}

/** Splits a recorded SSE body into its events, each still ending in its blank line. */
export function sseEvents(text: string): string[] {
  return text.split(/\n\n/).filter((e) => e.trim()).map((e) => `${e}\n\n`);
}

/**
 * An SSE response that sends the given events, then `paced` pieces one every `everyMs` (an
 * upstream that trickles, or will not stop), then ends (or, with `stall`, stays open silent).
 */
export function sseResponse(
  events: string[],
  options: {
    stall?: boolean;
    headers?: Record<string, string>;
    onCancel?: () => void;
    paced?: { everyMs: number; count: number; piece: (i: number) => string };
  } = {},
) {
  const encoder = new TextEncoder();
  let i = 0;
  let paced = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < events.length) {
        controller.enqueue(encoder.encode(events[i++]));
        return;
      }
      const { paced: pace } = options;
      if (pace && paced < pace.count) {
        return new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            controller.enqueue(encoder.encode(pace.piece(paced++)));
            resolve();
          }, pace.everyMs);
        });
      }
      if (!options.stall) {
        controller.close();
        return;
      }
      // Silent but open, until the reader goes away.
      return new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 60_000);
      });
    },
    cancel() {
      clearTimeout(timer);
      options.onCancel?.();
    },
  });
  return new Response(body, {
    headers: { "content-type": "text/event-stream", ...options.headers },
  });
}

/**
 * A chat.completion as an OpenAI-compatible server streams it (role, content, tool-call fragments,
 * the finish reason, the usage chunk, [DONE]): the gateway always calls upstreams streamed, so a
 * test's documented completion is answered this way.
 */
export function completionStream(
  completion: Record<string, unknown>,
  options: { headers?: Record<string, string> } = {},
): Response {
  // deno-lint-ignore no-explicit-any
  const { choices, usage, object: _object, ...meta } = completion as any;
  const chunk = (choice: Record<string, unknown>) =>
    `data: ${JSON.stringify({ ...meta, object: "chat.completion.chunk", choices: [choice] })}\n\n`;
  const events: string[] = [];
  for (const { index, message, finish_reason, logprobs } of choices) {
    const { role, content, tool_calls, ...rest } = message;
    events.push(
      chunk({ index, delta: { role, content: content ?? null, ...rest }, finish_reason: null }),
    );
    (tool_calls ?? []).forEach((call: Record<string, unknown>, k: number) =>
      events.push(
        chunk({ index, delta: { tool_calls: [{ index: k, ...call }] }, finish_reason: null }),
      )
    );
    events.push(chunk({ index, delta: {}, logprobs: logprobs ?? null, finish_reason }));
  }
  if (usage) {
    events.push(
      `data: ${
        JSON.stringify({ ...meta, object: "chat.completion.chunk", choices: [], usage })
      }\n\n`,
    );
  }
  events.push("data: [DONE]\n\n");
  return sseResponse(events, options);
}

export interface FakeProvider {
  kind: "openai" | "openai_responses" | "anthropic";
  base_url: string;
  timeout_ms?: number;
  /** Defaults to a variable that is set; use an unset name for "not configured". */
  api_key_env?: string;
  /** As in the catalog: false for a server that refuses `stream_options` (Mistral's). */
  stream_options?: boolean;
  /** As in the catalog: true for a router that wants `reasoning_details` back (OpenRouter). */
  forward_reasoning_details?: boolean;
  /** As in the catalog: true for a server that takes OpenAI's `allowed_tools` choice. */
  allowed_tools?: boolean;
}

/** A chat model at these tests' prices: 2 micro-USD per prompt token and 8 per completion token. */
export function upstreamModel(
  id: string,
  provider: string,
  upstream_model: string,
  extra: Partial<CatalogFile["models"][number]> = {},
): CatalogFile["models"][number] {
  return {
    id,
    provider,
    upstream_model,
    input_usd_per_mtok: "2.00",
    output_usd_per_mtok: "8.00",
    context_tokens: 200_000,
    max_output_tokens: 8192,
    ...extra,
  };
}

/** Every model here is an upstreamModel, at its prices. */
export function upstreamCatalog(
  providers: Record<string, FakeProvider>,
  extraModels: CatalogFile["models"] = [],
): CatalogFile {
  return {
    providers: Object.fromEntries(
      Object.entries(providers).map((
        [name, p],
      ) => [name, { timeout_ms: 2000, api_key_env: "UPSTREAM_KEY", ...p }]),
    ),
    models: [
      ...Object.keys(providers).map((name) => upstreamModel(`${name}/m`, name, `${name}-model`)),
      ...extraModels,
    ],
  };
}

export function cost(promptTokens: number, completionTokens: number): number {
  return promptTokens * 2 + completionTokens * 8;
}

export function startUpstreamService(
  providers: Record<string, FakeProvider>,
  extraModels: CatalogFile["models"] = [],
): Promise<TestService> {
  return startService({
    catalogFile: upstreamCatalog(providers, extraModels),
    env: { UPSTREAM_KEY },
  });
}
