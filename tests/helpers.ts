import assert from "node:assert/strict";
import { type AppDeps, createApp } from "@/app.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { auditWallets, Wallets } from "@/lib/billing/mod.ts";
import type { SettleInput } from "@/lib/billing/wallet_types.ts";
import { buildCatalog, type Catalog, type CatalogFile } from "@/lib/catalog/catalog.ts";
import { type Config, flushLogs, loadConfig, type Logger, openKv } from "@/lib/core/mod.ts";
import { keys } from "@/lib/db.ts";
import type { UsageRecord, WalletRecord } from "@/lib/db.ts";
import { assertMatchesOpenApi } from "./openapi_check.ts";

export const PUBLIC_URL = "http://tollbooth.test";

/** A catalog with the simulator and, when given, an OpenAI-compatible upstream at `openaiBaseUrl`. */
export function testCatalogFile(openaiBaseUrl = "http://127.0.0.1:9"): CatalogFile {
  return {
    providers: {
      tollbooth: { kind: "simulator" },
      fake: {
        kind: "openai",
        base_url: openaiBaseUrl,
        api_key_env: "FAKE_OPENAI_KEY",
        timeout_ms: 2000,
      },
      nokey: { kind: "openai", base_url: openaiBaseUrl, api_key_env: "MISSING_KEY" },
    },
    models: [
      model("tollbooth/echo", "tollbooth", "echo", "0.50", "1.50"),
      model("tollbooth/lorem", "tollbooth", "lorem", "0.50", "1.50"),
      model("fake/gpt", "fake", "gpt-test", "2.00", "8.00"),
      model("nokey/gpt", "nokey", "gpt-test", "2.00", "8.00"),
      {
        ...model("tollbooth/tiny", "tollbooth", "echo", "0.50", "1.50"),
        context_tokens: 64,
        max_output_tokens: 32,
      },
      embeddingModel("tollbooth/embed", "tollbooth", "embed", "0.02"),
      embeddingModel("fake/embed", "fake", "text-embedding-3-small", "0.13"),
    ],
  };
}

function embeddingModel(id: string, provider: string, upstream: string, input: string) {
  return {
    id,
    type: "embedding" as const,
    provider,
    upstream_model: upstream,
    input_usd_per_mtok: input,
    context_tokens: 8192,
  };
}

function model(id: string, provider: string, upstream: string, input: string, output: string) {
  return {
    id,
    provider,
    upstream_model: upstream,
    input_usd_per_mtok: input,
    output_usd_per_mtok: output,
    context_tokens: 32768,
    max_output_tokens: 8192,
  };
}

export interface TestService {
  kv: Deno.Kv;
  config: Config;
  catalog: Catalog;
  logs: Record<string, unknown>[];
  handle: (request: Request) => Promise<Response>;
  wallets: ReturnType<typeof createApp>["wallets"];
  /** Webhook detection (nudged by the wallet) and delivery (driven by the tests). */
  webhooks: ReturnType<typeof createApp>["webhooks"];
  /** Marks the instance as shutting down (/readyz answers 503). */
  startDraining: () => void;
  /** Creates an app (5.00 USD) and returns its id and raw key. */
  newApp(
    name?: string,
  ): Promise<{ appId: string; apiKey: string; keyId: string; topUpToken: string }>;
  chat(
    apiKey: string | null,
    body: unknown,
    init?: { headers?: Record<string, string>; signal?: AbortSignal },
  ): Promise<Response>;
  /**
   * GET an API path, the response held to the document's operation at `template` (the path with
   * `{param}`s; the path itself when omitted).
   */
  get(
    apiKey: string | null,
    path: string,
    init?: { template?: string; headers?: Record<string, string> },
  ): Promise<Response>;
  /** POST a JSON body (a string is sent as is) to an API path, held to the document like `chat`. */
  post(
    apiKey: string | null,
    path: string,
    body: unknown,
    init?: { headers?: Record<string, string>; signal?: AbortSignal },
  ): Promise<Response>;
  wallet(appId: string): Promise<WalletRecord>;
  close(): Promise<void>;
}

export async function startService(options: {
  openaiBaseUrl?: string;
  /** Replaces the test catalog (providers and models) entirely. */
  catalogFile?: CatalogFile;
  env?: Record<string, string>;
  kvPath?: string;
  /** The KV the app is given, from the one the test reads (to watch what the app does with it). */
  wrapKv?: (kv: Deno.Kv) => Deno.Kv;
  log?: Logger;
  /** Payment wiring: `devServer` as under `deno task dev`, `stripe` a client aimed at a fake. */
  payments?: Pick<AppDeps, "devServer" | "stripe">;
  /** A clock for wallets and rate limits. */
  now?: () => number;
} = {}): Promise<TestService> {
  const env = { FAKE_OPENAI_KEY: "sk-fake-upstream", PUBLIC_URL, ...options.env };
  const config = loadConfig(env);
  const catalog = buildCatalog(
    options.catalogFile ?? testCatalogFile(options.openaiBaseUrl),
    env,
  );
  const kv = await openKv(options.kvPath ?? ":memory:");
  const logs: Record<string, unknown>[] = [];
  const { app, wallets, webhooks, startDraining } = createApp({
    kv: options.wrapKv?.(kv) ?? kv,
    config,
    catalog,
    log: options.log ?? ((f) => {
      logs.push(f);
      recordLogLine(f);
    }),
    ...options.payments,
    now: options.now,
  });
  const handle = async (request: Request) => {
    const response = await app.fetch(request);
    // A request's log line is written with the next batch of lines (logSoon): the response's own
    // continuations run first, then the batch is written now rather than up to 100 ms later.
    await new Promise((resolve) => setTimeout(resolve, 0));
    flushLogs();
    return response;
  };
  const post: TestService["post"] = async (apiKey, path, body, init = {}) => {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      ...init.headers,
    };
    if (apiKey) headers.authorization = `Bearer ${apiKey}`;
    const res = await handle(
      new Request(`${PUBLIC_URL}/v1${path}`, {
        method: "POST",
        headers,
        body: typeof body === "string" ? body : JSON.stringify(body),
        signal: init.signal,
      }),
    );
    // Every response of the suite is held to the published OpenAPI document (a stream's body
    // is checked in openapi_test.ts, since reading a clone would keep it running).
    await assertMatchesOpenApi(res, path);
    return res;
  };
  return {
    kv,
    config,
    catalog,
    logs,
    handle,
    wallets,
    webhooks,
    startDraining,
    async newApp(name = "test app") {
      const created = await createAppRecord(kv, { name });
      return {
        appId: created.app.id,
        apiKey: created.key.apiKey,
        keyId: created.key.record.id,
        topUpToken: created.app.topUpToken,
      };
    },
    chat: (apiKey, body, init = {}) => post(apiKey, "/chat/completions", body, init),
    post,
    async get(apiKey, path, init = {}) {
      const headers: Record<string, string> = { ...init.headers };
      if (apiKey) headers.authorization = `Bearer ${apiKey}`;
      const res = await handle(new Request(`${PUBLIC_URL}/v1${path}`, { headers }));
      await assertMatchesOpenApi(res, init.template ?? path, "get");
      return res;
    },
    async wallet(appId) {
      const entry = await kv.get<WalletRecord>(keys.wallet(appId));
      assert.ok(entry.value, `wallet of ${appId}`);
      return entry.value;
    },
    async close() {
      await wallets.drain();
      await webhooks.watcher.idle();
      kv.close();
    },
  };
}

/** Runs `fn` against a fresh service, then holds every wallet to the audit, and closes it. */
export async function withService(
  fn: (s: TestService) => Promise<void>,
  options: Parameters<typeof startService>[0] = {},
) {
  const s = await startService(options);
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

/** Fails the test unless every wallet's money adds up (the audit of `deno task admin audit`). */
export async function assertAuditClean(kv: Deno.Kv) {
  const report = await auditWallets(kv);
  assert.deepEqual(report.wallets.flatMap((w) => w.problems.map((p) => `${w.appId}: ${p}`)), []);
  assert.equal(report.ok, true);
  return report;
}

export function userMessage(content: string) {
  return [{ role: "user", content }];
}

/** Parses an SSE body into its data payloads, as a client sees them. */
export async function readSse(response: Response): Promise<string[]> {
  const text = await response.text();
  return text.split("\n\n").filter((block) => block.startsWith("data: ")).map((block) =>
    block.slice(6)
  );
}

/** A loopback HTTP server for fake upstreams; closed by the returned function. */
export function serveLoopback(handler: (request: Request) => Response | Promise<Response>) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, handler);
  const { port } = server.addr as Deno.NetAddr;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: async () => {
      await server.shutdown();
    },
  };
}

const SPEND_DOWN_REQUEST = "req_spend_down";

/**
 * Sends `body` from a new app whose wallet holds exactly `held` (a hold learned on another app),
 * to see whether that hold covers the bill: the answer (its body dropped) and its usage record.
 */
export async function chatHoldingExactly(s: TestService, body: unknown, held: number) {
  const app = await s.newApp("exact");
  await spendDownTo(s.kv, app.appId, held);
  const res = await s.chat(app.apiKey, body);
  await res.body?.cancel();
  const record = (await usageRecords(s.kv, app.appId)).find((u) =>
    u.requestId !== SPEND_DOWN_REQUEST
  )!;
  return { res, record };
}

/** Spends through the wallet (one settled reservation) so that exactly `target` micro-USD remain. */
export async function spendDownTo(kv: Deno.Kv, appId: string, target: number) {
  const wallets = new Wallets(kv, { leaseMs: 60_000 });
  const wallet = await kv.get<WalletRecord>(keys.wallet(appId));
  const amount = wallet.value!.available - target;
  const requestId = SPEND_DOWN_REQUEST;
  const reserved = await wallets.reserve(appId, {
    amount,
    keyId: "key_test",
    requestId,
    model: "tollbooth/echo",
  });
  assert.ok(reserved.ok);
  const settled = await wallets.settle(appId, reserved.reservation.id, {
    requestId,
    keyId: "key_test",
    model: "tollbooth/echo",
    provider: "tollbooth",
    promptTokens: 0,
    completionTokens: 0,
    cost: amount,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
  });
  assert.ok(settled.settled && settled.available === target);
}

/**
 * With TOLLBOOTH_TEST_LOG set (CI sets it), every log line of every test service is appended to
 * that file, so the run's whole log output can be searched for raw API keys afterwards.
 */
const TEST_LOG = Deno.env.get("TOLLBOOTH_TEST_LOG");

function recordLogLine(fields: Record<string, unknown>) {
  if (!TEST_LOG) return;
  const line = JSON.stringify(fields, (_k, v) => typeof v === "bigint" ? v.toString() : v);
  Deno.writeTextFileSync(TEST_LOG, line + "\n", { append: true });
}

/** The usage records of an app, oldest first. */
export async function usageRecords(kv: Deno.Kv, appId: string): Promise<UsageRecord[]> {
  const entries = await Array.fromAsync(kv.list<UsageRecord>({ prefix: keys.appUsage(appId) }));
  return entries.map((e) => e.value);
}

/** The app's usage records written since the last call, once the wallet has committed them. */
export function newUsageOf(s: TestService, appId: string): () => Promise<UsageRecord[]> {
  let seen = 0;
  return async () => {
    await s.wallets.drain();
    const all = await usageRecords(s.kv, appId);
    const fresh = all.slice(seen);
    seen = all.length;
    return fresh;
  };
}

/** Waits (up to 2 s) for something that happens after a response, such as a stream's settle. */
export { until } from "./fakes/common.ts";

/** A wallet reserve for a request of 10 tokens holding `amount` micro-USD (wallet-level tests). */
export function holdInput(requestId: string, amount = 1_000) {
  return { amount, keyId: "key_t", requestId, model: "tollbooth/echo", tokens: 10 };
}

/** The settle of a `holdInput` request: 4 prompt and 6 completion tokens costing `cost`. */
export function usageInput(requestId: string, cost: number): SettleInput {
  return {
    ...settleInput(cost),
    requestId,
    keyId: "key_t",
    promptTokens: 4,
    completionTokens: 6,
  };
}

/** What a wallet's settle is given for a plain completed request of `cost` micro-USD. */
export function settleInput(cost: number): SettleInput {
  return {
    requestId: "req_test",
    keyId: "key_test",
    model: "tollbooth/echo",
    provider: "tollbooth",
    promptTokens: 10,
    completionTokens: 10,
    cost,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
  };
}
