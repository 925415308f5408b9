import assert from "node:assert/strict";
import { CONFIG_DEFAULTS, loadConfig } from "@/lib/core/mod.ts";

/** The README's environment table: variable name → the default it states. */
async function readmeDefaults(): Promise<Map<string, string>> {
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const section = readme.split("## Operating it")[1].split("\n## ")[0];
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const cells = line.split("|").map((cell) => cell.trim());
    const name = /^`([A-Z_]+)`$/.exec(cells[1] ?? "")?.[1];
    if (name) rows.set(name, cells[2]);
  }
  return rows;
}

Deno.test("every numeric default the README states is the one the config module applies", async () => {
  const documented = await readmeDefaults();
  const applied = loadConfig({});
  const appliedOf: Record<keyof typeof CONFIG_DEFAULTS, number> = {
    RESERVATION_TTL_SECONDS: applied.reservationTtlSeconds,
    RATE_LIMIT_RPM: applied.rateLimitRpm,
    RATE_LIMIT_TPM: applied.rateLimitTpm,
    MAX_BODY_BYTES: applied.maxBodyBytes,
    BODY_READ_TIMEOUT_MS: applied.bodyReadTimeoutMs,
    IDEMPOTENCY_REPLAY_MAX_BYTES: applied.idempotencyReplayMaxBytes,
    UPSTREAM_TIMEOUT_MS: applied.upstreamTimeoutMs,
    EXACT_COUNT_PERCENT: applied.exactCountPercent,
    COUNT_TOKENS_TIMEOUT_MS: applied.countTokensTimeoutMs,
    SHUTDOWN_GRACE_MS: applied.shutdownGraceMs,
    MAX_APPS_PER_OWNER: applied.maxAppsPerOwner,
    MAX_APP_CREATIONS_PER_DAY: applied.maxAppCreationsPerDay,
    MAX_SIGNUPS_PER_ADDRESS_PER_DAY: applied.maxSignupsPerAddressPerDay,
    MAX_LIVE_KEYS_PER_APP: applied.maxLiveKeysPerApp,
    TRUSTED_PROXY_COUNT: applied.trustedProxyCount,
    WALLET_SLICE_POST_MS: applied.walletSlicePostMs,
    WALLET_SLICE_HOT_RPS: applied.walletSliceHotRps,
  };
  for (const [name, value] of Object.entries(CONFIG_DEFAULTS)) {
    assert.equal(appliedOf[name as keyof typeof CONFIG_DEFAULTS], value, `${name} as applied`);
    assert.equal(documented.get(name), String(value), `${name} in the README`);
  }
});

Deno.test("the upstream timeout defaults to two minutes", () => {
  assert.equal(loadConfig({}).upstreamTimeoutMs, 120_000);
});

Deno.test("SERVE_WORKERS takes auto or 1 to 31 (one bit each in the shared commit locks), and refuses the rest", () => {
  assert.equal(loadConfig({ SERVE_WORKERS: "31" }).serveWorkers, 31);
  assert.equal(loadConfig({}).serveWorkers, "auto");
  for (const bad of ["0", "32", "-1", "two"]) {
    assert.throws(() => loadConfig({ SERVE_WORKERS: bad }), /SERVE_WORKERS.*1 to 31/);
  }
});
