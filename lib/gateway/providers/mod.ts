import { type Catalog, type ProviderConfig, providersOf } from "@/lib/catalog/mod.ts";
import { createAnthropicProvider } from "./anthropic/anthropic.ts";
import { createOpenAiProvider } from "./openai/openai.ts";
import { createOpenAiResponsesProvider } from "./openai_responses/openai_responses.ts";
import { createSimulator } from "./simulator/simulator.ts";
import type { Provider } from "./types.ts";

export type Providers = (config: ProviderConfig) => Provider;

/** One adapter per provider of the catalog, built once at start. */
export function createProviders(
  catalog: Catalog,
  options: { timeoutMs: number; fetch?: typeof fetch },
): Providers {
  const byName = new Map<string, Provider>();
  for (const model of catalog.models) {
    for (const config of providersOf(model)) {
      if (byName.has(config.name)) continue;
      byName.set(config.name, createProvider(config, options));
    }
  }
  return (config) => byName.get(config.name)!;
}

function createProvider(
  config: ProviderConfig,
  options: { timeoutMs: number; fetch?: typeof fetch },
): Provider {
  switch (config.kind) {
    case "simulator":
      return createSimulator({ tokenDelayMs: config.tokenDelayMs });
    case "openai":
      return createOpenAiProvider({
        ...config,
        timeoutMs: config.timeoutMs ?? options.timeoutMs,
        fetch: options.fetch,
      });
    case "openai_responses":
      return createOpenAiResponsesProvider({
        ...config,
        timeoutMs: config.timeoutMs ?? options.timeoutMs,
        fetch: options.fetch,
      });
    case "anthropic":
      return createAnthropicProvider({
        ...config,
        timeoutMs: config.timeoutMs ?? options.timeoutMs,
        fetch: options.fetch,
      });
  }
}
