import assert from "node:assert/strict";
import { createApp } from "@/app.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig, REQUEST_LOG_FIELDS } from "@/lib/core/mod.ts";
import { PROVIDER_FAILURES } from "@/lib/gateway/mod.ts";
import { parsePrometheus } from "./prometheus.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  readSse,
  startService,
  testCatalogFile,
  type TestService,
  until,
  userMessage,
} from "./helpers.ts";

const ECHO = "tollbooth/echo";
const TOKEN = "metrics-secret-token";

async function withService(
  fn: (s: TestService) => Promise<void>,
  env: Record<string, string> = { METRICS_TOKEN: TOKEN },
) {
  const service = await startService({ env });
  try {
    await fn(service);
    await assertAuditClean(service.kv);
  } finally {
    await service.close();
  }
}

const get = (s: TestService, path: string, headers: Record<string, string> = {}) =>
  s.handle(new Request(`${PUBLIC_URL}${path}`, { headers }));

const scrape = async (s: TestService) => {
  const res = await get(s, "/metrics", { authorization: `Bearer ${TOKEN}` });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/);
  return parsePrometheus(await res.text());
};

const requestLines = (s: TestService) => s.logs.filter((l) => l.event === "request");

const LINE_FIELDS = [
  "event",
  "requestId",
  "method",
  "path",
  "status",
  "errorCode",
  "appId",
  "keyId",
  "model",
  "provider",
  "streamed",
  "promptTokens",
  "completionTokens",
  "reserved",
  "cost",
  "uncharged",
  "outcome",
  "upstreamFailure",
  "upstreamError",
  "totalMs",
  "upstreamMs",
];

Deno.test("/docs/operations lists every field of the request log line", () =>
  withService(async (s) => {
    assert.deepEqual(REQUEST_LOG_FIELDS, LINE_FIELDS);
    const docs = await (await get(s, "/docs/operations")).text();
    const listed = /when it is settled\):\s*<code>([a-zA-Z, ]+)<\/code>/.exec(docs)?.[1];
    assert.deepEqual(listed?.split(", "), LINE_FIELDS.filter((f) => f !== "event"));
    assert.ok(listed?.includes("uncharged"));
  }));

Deno.test("a non-streamed request writes exactly one log line with every field and no key", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: ECHO,
      messages: userMessage("Hello"),
      max_tokens: 9,
    });
    const body = await res.json();
    const lines = requestLines(s);
    assert.equal(lines.length, 1);
    const line = lines[0];
    for (const field of LINE_FIELDS) assert.ok(field in line, `the line has ${field}`);
    assert.equal(line.requestId, res.headers.get("tollbooth-request-id"));
    assert.equal(line.status, 200);
    assert.equal(line.appId, appId);
    assert.equal(line.keyId, keyId);
    assert.equal(line.model, ECHO);
    assert.equal(line.provider, "tollbooth");
    assert.equal(line.streamed, false);
    assert.equal(line.promptTokens, body.usage.prompt_tokens);
    assert.equal(line.completionTokens, body.usage.completion_tokens);
    assert.equal(line.cost, Math.round(Number(res.headers.get("tollbooth-request-cost")) * 1e6));
    assert.equal(line.uncharged, 0, "the balance covered it all");
    assert.equal(line.errorCode, null);
    assert.equal(typeof line.totalMs, "number");
    assert.equal(typeof line.upstreamMs, "number");
    assert.ok(!JSON.stringify(s.logs).includes(apiKey), "the raw key never reaches the logs");
  }));

Deno.test("a stream writes its one log line when it is settled, with its usage", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "tollbooth/lorem",
      messages: userMessage("go"),
      max_tokens: 5,
      stream: true,
    });
    assert.equal(requestLines(s).length, 0, "no line before the stream ends");
    await readSse(res);
    await until(() => requestLines(s).length === 1, "one line after the stream");
    const line = requestLines(s)[0];
    assert.equal(line.streamed, true);
    assert.equal(line.status, 200);
    assert.equal(line.completionTokens, 5);
    assert.equal(line.outcome, "completed");
    assert.ok((line.cost as number) > 0);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(requestLines(s).length, 1, "still exactly one line");
  }));

Deno.test("a stream the client abandons writes one line with outcome client_closed", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "tollbooth/lorem",
      messages: userMessage("go"),
      max_tokens: 500,
      stream: true,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    await until(() => requestLines(s).length === 1, "one line after the disconnect");
    assert.equal(requestLines(s)[0].outcome, "client_closed");
  }));

Deno.test("refused requests are logged once with their error code and status", () =>
  withService(async (s) => {
    await s.chat(null, { model: ECHO, messages: userMessage("x") });
    const { apiKey } = await s.newApp();
    await s.chat(apiKey, { model: "nope/nope", messages: userMessage("x") });
    const lines = requestLines(s);
    assert.deepEqual(lines.map((l) => [l.status, l.errorCode]), [
      [401, "invalid_api_key"],
      [400, "model_not_found"],
    ]);
    assert.equal(lines[1].model, null, "a model off the list is not echoed into logs");
  }));

Deno.test("/metrics is 404 without METRICS_TOKEN configured", () =>
  withService(async (s) => {
    const res = await get(s, "/metrics", { authorization: "Bearer anything" });
    assert.equal(res.status, 404);
    await res.body?.cancel();
  }, {}));

Deno.test("/metrics is 401 without the bearer token or with a wrong one", () =>
  withService(async (s) => {
    const attempts: Record<string, string>[] = [
      {},
      { authorization: "Bearer wrong" },
      { authorization: TOKEN },
    ];
    for (const headers of attempts) {
      const res = await get(s, "/metrics", headers);
      assert.equal(res.status, 401);
      assert.match(res.headers.get("www-authenticate")!, /^Bearer/);
      assert.ok(!(await res.text()).includes("tollbooth_"));
    }
  }));

Deno.test("/metrics counts requests by status and model, in a text format that parses back", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    for (let i = 0; i < 3; i++) {
      await (await s.chat(apiKey, { model: ECHO, messages: userMessage("hi") })).body?.cancel();
    }
    await readSse(
      await s.chat(apiKey, { model: ECHO, messages: userMessage("hi"), stream: true }),
    );
    await (await s.chat("tb_" + "0".repeat(36), { model: ECHO, messages: [] })).body?.cancel();
    await (await s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x") })).body?.cancel();
    await until(() => requestLines(s).length === 6, "six requests logged");

    const m = await scrape(s);
    const chat = "tollbooth_chat_completions_total";
    assert.equal(m.types.get(chat), "counter");
    assert.equal(m.value(chat, { model: ECHO, status: "200", streamed: "false" }), 3);
    assert.equal(m.value(chat, { model: ECHO, status: "200", streamed: "true" }), 1);
    assert.equal(m.value(chat, { model: "none", status: "401" }), 1);
    assert.equal(m.value(chat, { model: "fake/gpt", status: "502" }), 1);
    assert.equal(m.value("tollbooth_http_requests_total", { status: "200" }), 4);
    // Nothing listens on the fake upstream's port: a connection failure, counted by kind.
    const failures = m.all("tollbooth_upstream_failures_total", { provider: "fake" });
    assert.equal(failures.length, 1);
    assert.equal(failures[0].value, 1);

    const h = "tollbooth_chat_completion_duration_seconds";
    assert.equal(m.types.get(h), "histogram");
    const buckets = m.all(`${h}_bucket`, { model: ECHO, streamed: "false" });
    assert.ok(buckets.length > 5);
    const counts = buckets.map((b) => b.value);
    assert.deepEqual(counts, [...counts].sort((a, b) => a - b), "buckets are cumulative");
    assert.equal(buckets.at(-1)!.labels.le, "+Inf");
    assert.equal(buckets.at(-1)!.value, 3);
    assert.equal(m.value(`${h}_count`, { model: ECHO, streamed: "false" }), 3);
    assert.ok(m.value(`${h}_sum`, { model: ECHO, streamed: "false" })! > 0);
    assert.equal(m.value("tollbooth_upstream_duration_seconds_count", { model: ECHO }), 4);
    assert.ok(m.value("tollbooth_wallet_commits_total")! >= 8);
    assert.ok(m.value("tollbooth_wallet_ops_committed_total")! >= 10);
    assert.equal(m.types.get("tollbooth_wallet_conflicts_total"), "counter");
  }));

Deno.test("the upstream failure kinds in /metrics' help and on /docs/operations are the ones counted", () =>
  withService(async (s) => {
    const res = await get(s, "/metrics", { authorization: `Bearer ${TOKEN}` });
    const help = /^# HELP tollbooth_upstream_failures_total .*\(([a-z_, ]+)\)\.$/m.exec(
      await res.text(),
    );
    assert.ok(help, "the help line lists the kinds");
    const kinds = Object.keys(PROVIDER_FAILURES);
    assert.deepEqual(help[1].split(", "), kinds);
    assert.ok(!kinds.includes("server_error"), "a 5xx is an upstream_error");
    const docs = await (await get(s, "/docs/operations")).text();
    const listed = docs.split("tollbooth_upstream_failures_total")[1].split("</ul>")[0];
    assert.deepEqual([...listed.matchAll(/<li><code>([a-z_]+)<\/code>/g)].map((m) => m[1]), kinds);
  }));

Deno.test("/metrics shows outstanding reservations and their total, read from KV", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const before = await scrape(s);
    assert.equal(before.value("tollbooth_reservations_outstanding"), 0);
    assert.equal(before.value("tollbooth_reservations_outstanding_micro_usd"), 0);

    const streams = await Promise.all([1, 2].map(() =>
      s.chat(apiKey, {
        model: "tollbooth/lorem",
        messages: userMessage("go"),
        max_tokens: 100,
        stream: true,
      })
    ));
    const reservedAmount = (await s.wallet(appId)).reserved;
    assert.ok(reservedAmount > 0);
    const during = await scrape(s);
    assert.equal(during.value("tollbooth_reservations_outstanding"), 2);
    assert.equal(during.value("tollbooth_reservations_outstanding_micro_usd"), reservedAmount);
    assert.equal(during.value("tollbooth_reservations_expired"), 0);
    assert.equal(during.value("tollbooth_reservations_scan_truncated"), 0);

    await Promise.all(streams.map(readSse));
    const after = await scrape(s);
    assert.equal(after.value("tollbooth_reservations_outstanding"), 0);
    assert.equal(after.value("tollbooth_reservations_outstanding_micro_usd"), 0);
  }));

Deno.test("/healthz answers while the process runs; /readyz checks KV, the catalog and shutdown", () =>
  withService(async (s) => {
    const health = await get(s, "/healthz");
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: "ok" });
    const ready = await get(s, "/readyz");
    assert.equal(ready.status, 200);
    assert.equal((await ready.json()).status, "ready");
    s.startDraining();
    const draining = await get(s, "/readyz");
    assert.equal(draining.status, 503);
    assert.equal((await draining.json()).checks.shutdown, "draining");
  }));

Deno.test("/readyz is 503 when KV does not answer, and keeps the store's own words for the log", async () => {
  const lines: Record<string, unknown>[] = [];
  const kv = await Deno.openKv(":memory:");
  const env = { PUBLIC_URL };
  const { app } = createApp({
    kv,
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(), env),
    log: (line) => void lines.push(line),
  });
  kv.close();
  const res = await app.fetch(new Request(`${PUBLIC_URL}/readyz`));
  assert.equal(res.status, 503);
  const body = await res.json();
  assert.equal(body.checks.kv, "error");
  const failed = lines.find((l) => l.event === "readiness_kv_failed");
  assert.ok(failed && typeof failed.error === "string" && failed.error.length > 0);
  assert.equal(body.checks.catalog, "ok");
});
