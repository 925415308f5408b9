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
  /**
   * The settings the admin command must share with this service (ADMIN_SHARED_SETTINGS, those
   * set): without the same KV file its app is not this service's, without the same address its
   * top-up URL points elsewhere, without the same rate limits it shows other defaults.
   */
  shared?: Record<string, string>;
}

/**
 * The settings of `env` that `deno task admin` must be given as the service was: the rate limits
 * too, since `show-app` and `set-limits` show a key's default limits as the service applies them.
 */
export const ADMIN_SHARED_SETTINGS = [
  "KV_PATH",
  "PORT",
  "PUBLIC_URL",
  "RATE_LIMIT_RPM",
  "RATE_LIMIT_TPM",
] as const;

export function devBanner(
  { baseUrl, catalog, testCheckout, shared = {} }: DevBannerInput,
): string {
  const prefix = Object.entries(shared).map(([name, value]) => `${name}=${shellWord(value)} `)
    .join("");
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
    "  Create an app, with $5.00 of starter credits and an API key:",
    `    ${prefix}deno task admin create-app --name demo`,
    "  and export its api_key as API_KEY for the README's examples. To see it in the dashboard,",
    `  sign up first and add --owner <your email>: without it the app is the operator's alone.`,
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

/** The value as one word of a POSIX shell command line. */
function shellWord(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}
