/**
 * What `deno task dev` tells the person who just typed it: where things are and the next command.
 * Written to stderr, so that stdout stays one JSON object per line for log shippers and `jq`.
 */
import type { Catalog } from "@/lib/catalog/mod.ts";

export interface DevBannerInput {
  /** The address the service is reached at: PUBLIC_URL, else localhost and the listening port. */
  baseUrl: string;
  catalog: Catalog;
  /** Whether top-ups use the test checkout (no real money). */
  testCheckout: boolean;
}

export function devBanner({ baseUrl, catalog, testCheckout }: DevBannerInput): string {
  const builtIn = catalog.models.filter((m) => m.provider.kind === "simulator").map((m) => m.id);
  const missingKeys = new Set<string>();
  let keyless = 0;
  for (const model of catalog.models) {
    const p = model.provider;
    if (p.kind !== "simulator" && p.apiKey === undefined) {
      keyless++;
      missingKeys.add(p.apiKeyEnv);
    }
  }
  const lines = [
    "",
    `  Tollbooth (development) is running at ${baseUrl}`,
    "",
    `    Dashboard  ${baseUrl}/dashboard   (new here? ${baseUrl}/signup)`,
    `    Docs       ${baseUrl}/docs`,
    `    API        ${baseUrl}/v1/chat/completions`,
    "",
    "  Create an app, with $5.000000 of starter credits and an API key:",
    "    deno task admin create-app --name demo",
    "",
  ];
  if (builtIn.length > 0) {
    lines.push(
      `  ${listed(builtIn)} ${builtIn.length === 1 ? "is" : "are"} built in: no key needed.`,
    );
  }
  if (keyless > 0) {
    lines.push(
      `  ${keyless === 1 ? "1 other model answers" : `${keyless} other models answer`} 502 until ${
        listed([...missingKeys])
      } ${missingKeys.size === 1 ? "is" : "are"} set.`,
    );
  }
  if (testCheckout) {
    lines.push("  Top-ups use the test checkout: credits are added without paying.");
  }
  lines.push("  The log follows as JSON lines on stdout.", "");
  return lines.join("\n");
}

function listed(items: string[]): string {
  return items.length <= 1
    ? items.join("")
    : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`;
}
