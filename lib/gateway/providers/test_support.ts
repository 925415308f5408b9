/** What the converter tests share: a catalog model, a parsed request, a replayed SSE fixture. */
import { buildCatalog, type CatalogFile } from "@/lib/catalog/catalog.ts";
import type { Model } from "@/lib/catalog/mod.ts";
import { parseChatRequest } from "../chat_request.ts";
import { parseSse } from "../sse.ts";
import type { StreamPart, UpstreamRequest } from "./types.ts";

export function testModel(
  kind: "openai" | "openai_responses" | "anthropic" | "simulator",
  upstreamModel: string,
  extra: Partial<CatalogFile["models"][number]> = {},
): Model {
  const provider = kind === "simulator"
    ? { kind }
    : { kind, base_url: "http://127.0.0.1:9", api_key_env: "K" };
  return buildCatalog({
    providers: { p: provider },
    models: [{
      id: "p/m",
      provider: "p",
      upstream_model: upstreamModel,
      input_usd_per_mtok: "2.00",
      output_usd_per_mtok: "8.00",
      context_tokens: 200_000,
      max_output_tokens: 64_000,
      ...extra,
    }],
  }, {}).get("p/m")!;
}

export function upstreamRequest(
  model: Model,
  body: Record<string, unknown>,
  maxTokens = 2048,
): UpstreamRequest {
  return {
    model,
    request: parseChatRequest({ model: "p/m", ...body }),
    maxTokens,
    signal: new AbortController().signal,
    requestId: "req_test",
  };
}

export function fixtureEvents(url: URL) {
  const bytes = Deno.readFileSync(url);
  return parseSse(new Blob([bytes]).stream());
}

/** Every part of a converter's batches, in order. */
export async function collect(batches: AsyncIterable<StreamPart[]>): Promise<StreamPart[]> {
  return (await Array.fromAsync(batches)).flat();
}
