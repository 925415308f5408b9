import assert from "node:assert/strict";
import { CONFIG_DEFAULTS, CONFIG_RANGES, loadConfig, MAX_TIMER_MS } from "@/lib/core/mod.ts";
import { MAX_LIMIT } from "@/lib/billing/mod.ts";

/** The README's environment table: variable name → the given column of its row. */
async function readmeColumn(column: "default" | "range"): Promise<Map<string, string>> {
  const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const section = readme.split("## Operating it")[1].split("\n## ")[0];
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const cells = line.split("|").map((cell) => cell.trim());
    const name = /^`([A-Z_]+)`$/.exec(cells[1] ?? "")?.[1];
    if (name) rows.set(name, cells[column === "default" ? 2 : 3]);
  }
  return rows;
}

Deno.test("every numeric default the README states is the one the config module applies", async () => {
  const documented = await readmeColumn("default");
  const applied = loadConfig({});
  const appliedOf: Record<keyof typeof CONFIG_DEFAULTS, number> = {
    RESERVATION_TTL_SECONDS: applied.reservationTtlSeconds,
    RATE_LIMIT_RPM: applied.rateLimitRpm,
    RATE_LIMIT_TPM: applied.rateLimitTpm,
    MANAGEMENT_RATE_LIMIT_RPM: applied.managementRateLimitRpm,
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

Deno.test("every numeric variable takes the range the README states, both ends included, and refuses a value beyond either, naming the variable", async () => {
  const documented = await readmeColumn("range");
  for (const [name, [min, max]] of Object.entries(CONFIG_RANGES)) {
    assert.match(documented.get(name) ?? "", new RegExp(`(^|\\s)${min} to ${max}$`), name);
    for (const ok of [min, max]) loadConfig({ [name]: String(ok) });
    for (const bad of [max + 1, ...(min > 0 ? [min - 1] : [])]) {
      assert.throws(
        () => loadConfig({ [name]: String(bad) }),
        new RegExp(`^Error: environment variable ${name}: must be .*integer from ${min} to ${max}`),
        `${name}=${bad}`,
      );
    }
  }
});

Deno.test("a duration beyond what a timer holds is refused at start, not run as a 1 ms timer", () => {
  for (
    const name of [
      "SHUTDOWN_GRACE_MS",
      "WALLET_STATS_LOG_MS",
      "WALLET_SLICE_POST_MS",
      "UPSTREAM_TIMEOUT_MS",
      "BODY_READ_TIMEOUT_MS",
      "COUNT_TOKENS_TIMEOUT_MS",
    ]
  ) {
    assert.throws(() => loadConfig({ [name]: "3000000000" }), new RegExp(name));
  }
  // Its lease is renewed every third of it: the TTL in ms over 3 is a timer too.
  assert.throws(
    () => loadConfig({ RESERVATION_TTL_SECONDS: "9007199254740991" }),
    /RESERVATION_TTL_SECONDS/,
  );
});

Deno.test("every duration's largest value fits a timer, the lease renewal's third and the workers' stop margin included", () => {
  for (const [name, [, max]] of Object.entries(CONFIG_RANGES)) {
    if (name.endsWith("_MS")) assert.ok(max <= MAX_TIMER_MS, name);
  }
  assert.ok((CONFIG_RANGES.RESERVATION_TTL_SECONDS[1] * 1000) / 3 <= MAX_TIMER_MS);
  // main.ts gives its workers 5 s after the grace.
  assert.ok(CONFIG_RANGES.SHUTDOWN_GRACE_MS[1] + 5_000 <= MAX_TIMER_MS);
});

Deno.test("the default rate limits are bounded like the limits set-limits and the dashboard take", () => {
  assert.equal(CONFIG_RANGES.RATE_LIMIT_RPM[1], MAX_LIMIT);
  assert.equal(CONFIG_RANGES.RATE_LIMIT_TPM[1], MAX_LIMIT);
});

Deno.test("numbers are decimal digits only: hex, exponents, signs, fractions and spaces are refused", () => {
  for (const bad of ["0x1F41", "1e3", "+8001", "-1", "8001.0", " 8001", "8001 ", "0b11"]) {
    assert.throws(() => loadConfig({ PORT: bad }), /environment variable PORT: must be/, bad);
    assert.throws(
      () => loadConfig({ RESERVATION_TTL_SECONDS: bad }),
      /environment variable RESERVATION_TTL_SECONDS: must be/,
      bad,
    );
  }
  assert.equal(loadConfig({ PORT: "8001" }).port, 8001);
  assert.equal(loadConfig({ RESERVATION_TTL_SECONDS: "1000" }).reservationTtlSeconds, 1000);
});

Deno.test("PUBLIC_URL takes an http(s) base, a path prefix included, and refuses other schemes, queries, fragments and credentials", () => {
  assert.equal(
    loadConfig({ PUBLIC_URL: "https://pay.example.com/" }).publicUrl,
    "https://pay.example.com",
  );
  assert.equal(
    loadConfig({ PUBLIC_URL: "https://example.com/tollbooth/" }).publicUrl,
    "https://example.com/tollbooth",
  );
  assert.equal(
    loadConfig({ PUBLIC_URL: "http://localhost:8000" }).publicUrl,
    "http://localhost:8000",
  );
  for (
    const bad of [
      "javascript:alert(1)",
      "mailto:ops@example.com",
      "ftp://example.com",
      "https://x.example/?a=1#x",
      "https://x.example/?",
      "https://x.example/#top",
      "https://user:secret@x.example",
      "example.com",
    ]
  ) {
    assert.throws(
      () => loadConfig({ PUBLIC_URL: bad }),
      /environment variable PUBLIC_URL: must be an http\(s\) URL without query, fragment or credentials/,
      bad,
    );
  }
});

Deno.test("a denokv KV_PATH without DENO_KV_ACCESS_TOKEN is refused at start, naming both", () => {
  assert.throws(
    () => loadConfig({ KV_PATH: "https://kv.example.com" }),
    /KV_PATH is a denokv URL: set DENO_KV_ACCESS_TOKEN/,
  );
  assert.equal(
    loadConfig({ KV_PATH: "https://kv.example.com", DENO_KV_ACCESS_TOKEN: "t" }).kvPath,
    "https://kv.example.com",
  );
});
