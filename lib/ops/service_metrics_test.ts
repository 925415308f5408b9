import assert from "node:assert/strict";
import { requestLogLine } from "@/lib/core/mod.ts";
import type { WalletStats } from "@/lib/billing/mod.ts";
import { ServiceMetrics } from "./service_metrics.ts";

const chatLine = (status: number, model: string, cost: number) =>
  requestLogLine(
    { requestId: "req_1", method: "POST", path: "/v1/chat/completions", status, totalMs: 20 },
    {
      model,
      provider: "openai",
      streamed: false,
      promptTokens: 10,
      completionTokens: 5,
      cost,
      upstreamMs: 15,
    },
  );

function series(metrics: ServiceMetrics, family: string, labels: Record<string, string>) {
  const found = metrics.snapshot()[family]?.find((s) =>
    Object.entries(labels).every(([name, value]) => s.labels[name] === value) &&
    Object.keys(s.labels).length === Object.keys(labels).length
  );
  assert.ok(found, `no ${family} series ${JSON.stringify(labels)}`);
  return found;
}

Deno.test("every request of a kind is counted, and each kind in its own series", () => {
  const metrics = new ServiceMetrics({} as WalletStats);
  for (let i = 0; i < 3; i++) metrics.observeRequest(chatLine(200, "openai/a", 7));
  metrics.observeRequest(chatLine(200, "openai/b", 11));
  metrics.observeRequest(chatLine(402, "openai/a", 0));
  const value = (family: string, labels: Record<string, string>) => {
    const s = series(metrics, family, labels);
    return "value" in s ? s.value : s.count;
  };
  assert.equal(value("tollbooth_http_requests_total", { status: "200" }), 4);
  assert.equal(value("tollbooth_http_requests_total", { status: "402" }), 1);
  const a200 = { model: "openai/a", status: "200", streamed: "false" };
  assert.equal(value("tollbooth_chat_completions_total", a200), 3);
  assert.equal(value("tollbooth_chat_completions_total", { ...a200, model: "openai/b" }), 1);
  assert.equal(value("tollbooth_chat_completions_total", { ...a200, status: "402" }), 1);
  assert.equal(
    value("tollbooth_chat_completion_duration_seconds", { model: "openai/a", streamed: "false" }),
    4,
  );
  assert.equal(value("tollbooth_tokens_total", { model: "openai/a", kind: "prompt" }), 40);
  assert.equal(value("tollbooth_charged_micro_usd_total", { model: "openai/a" }), 21);
  assert.equal(value("tollbooth_charged_micro_usd_total", { model: "openai/b" }), 11);
});

Deno.test("a request of any other path counts only by status", () => {
  const metrics = new ServiceMetrics({} as WalletStats);
  metrics.observeRequest(
    requestLogLine(
      { requestId: "r", method: "GET", path: "/v1/models", status: 200, totalMs: 1 },
      {},
    ),
  );
  assert.equal(metrics.snapshot()["tollbooth_chat_completions_total"]?.length ?? 0, 0);
  const s = series(metrics, "tollbooth_http_requests_total", { status: "200" });
  assert.ok("value" in s && s.value === 1);
});

Deno.test("a provider named null is not counted as a request without a provider", () => {
  const metrics = new ServiceMetrics({} as WalletStats);
  const line = (provider: string | null) =>
    requestLogLine(
      { requestId: "r", method: "POST", path: "/v1/chat/completions", status: 502, totalMs: 5 },
      { model: "x/m", provider: provider ?? undefined, upstreamFailure: "timeout" },
    );
  metrics.observeRequest(line(null));
  metrics.observeRequest(line("null"));
  const failures = metrics.snapshot()["tollbooth_upstream_failures_total"] ?? [];
  const of = (provider: string) =>
    failures.find((s) => s.labels.provider === provider && "value" in s && s.value === 1);
  assert.ok(of("none"), "the request without a provider");
  assert.ok(of("null"), "the provider named null");
});
