import assert from "node:assert/strict";
import { Registry } from "./metrics.ts";

function registryWith(
  counts: { ok: number; failed: number; latencies: number[]; commits: number },
) {
  const registry = new Registry();
  const requests = registry.counter("requests_total", "Requests.");
  requests.inc({ status: "200" }, counts.ok);
  if (counts.failed) requests.inc({ status: "500" }, counts.failed);
  const latency = registry.histogram("latency_seconds", "Latency.", [0.1, 1]);
  for (const s of counts.latencies) latency.observe(s);
  registry.gauge("outstanding", "Read from KV at scrape time.").set(7);
  registry.sampled("apps_total", "Kept in KV.", "counter", "shared", () => [{ value: 3 }]);
  registry.sampled("commits_total", "This thread's.", "counter", "thread", () => [{
    value: counts.commits,
  }]);
  return registry;
}

function sampleValue(text: string, sample: string): number {
  const line = text.split("\n").find((l) => l.startsWith(sample + " "));
  assert.ok(line, `no sample ${sample} in:\n${text}`);
  return Number(line.slice(sample.length + 1));
}

Deno.test("a scrape adds the other workers' counters and histograms to its own", () => {
  const mine = registryWith({ ok: 5, failed: 0, latencies: [0.05, 0.5], commits: 10 });
  const other = registryWith({ ok: 2, failed: 1, latencies: [0.05, 3], commits: 4 });
  const text = mine.render([other.snapshot()]);
  assert.equal(sampleValue(text, 'requests_total{status="200"}'), 7);
  assert.equal(sampleValue(text, 'requests_total{status="500"}'), 1, "a series only another has");
  assert.equal(sampleValue(text, 'latency_seconds_bucket{le="0.1"}'), 2);
  assert.equal(sampleValue(text, 'latency_seconds_bucket{le="1"}'), 3);
  assert.equal(sampleValue(text, 'latency_seconds_bucket{le="+Inf"}'), 4);
  assert.equal(sampleValue(text, "latency_seconds_count"), 4);
  assert.ok(Math.abs(sampleValue(text, "latency_seconds_sum") - 3.6) < 1e-9);
  assert.equal(sampleValue(text, "commits_total"), 14, "a thread's own sampled counter adds up");
});

Deno.test("values every worker reads from shared state are not added up", () => {
  const mine = registryWith({ ok: 1, failed: 0, latencies: [], commits: 0 });
  const others = [1, 2].map(() =>
    registryWith({ ok: 1, failed: 0, latencies: [], commits: 0 }).snapshot()
  );
  const text = mine.render(others);
  assert.equal(sampleValue(text, "outstanding"), 7);
  assert.equal(sampleValue(text, "apps_total"), 3);
  assert.equal(sampleValue(text, 'requests_total{status="200"}'), 3);
});

Deno.test("rendering with other workers' values leaves this worker's own counts unchanged", () => {
  const mine = registryWith({ ok: 5, failed: 0, latencies: [0.05], commits: 1 });
  const other = registryWith({ ok: 2, failed: 0, latencies: [0.05], commits: 1 }).snapshot();
  mine.render([other]);
  mine.render([other]);
  assert.equal(sampleValue(mine.render(), 'requests_total{status="200"}'), 5);
  assert.equal(sampleValue(mine.render(), 'latency_seconds_bucket{le="0.1"}'), 1);
});

Deno.test("a label set counts as one series whatever the order of its names", () => {
  const registry = new Registry();
  const requests = registry.counter("requests_total", "Requests.");
  requests.inc({ status: "200", model: "a/b" });
  requests.inc({ model: "a/b", status: "200" }, 2);
  const text = registry.render();
  assert.equal(text.split("\n").filter((l) => l.startsWith("requests_total{")).length, 1);
  assert.equal(sampleValue(text, 'requests_total{status="200",model="a/b"}'), 3);
});

Deno.test("label sets whose values would run into each other stay separate series", () => {
  const registry = new Registry();
  const requests = registry.counter("requests_total", "Requests.");
  requests.inc({ a: "x;b=y" });
  requests.inc({ a: "x;b=1:y" }, 2);
  requests.inc({ a: "x", b: "y" }, 5);
  const text = registry.render();
  assert.equal(sampleValue(text, 'requests_total{a="x;b=y"}'), 1);
  assert.equal(sampleValue(text, 'requests_total{a="x;b=1:y"}'), 2);
  assert.equal(sampleValue(text, 'requests_total{a="x",b="y"}'), 5);
});

Deno.test("labels given in another order count in the same series", () => {
  const registry = new Registry();
  const requests = registry.counter("requests_total", "Requests.");
  requests.inc({ model: "m", status: "200" });
  requests.inc({ status: "200", model: "m" }, 2);
  requests.inc({ status: "200", model: "m,status=200" });
  const text = registry.render();
  assert.equal(sampleValue(text, 'requests_total{model="m",status="200"}'), 3);
  assert.equal(sampleValue(text, 'requests_total{status="200",model="m,status=200"}'), 1);
});

Deno.test("a series found once counts into the series its labels name", () => {
  const registry = new Registry();
  const requests = registry.counter("requests_total", "Requests.");
  const ok = requests.child({ status: "200", model: "m" });
  ok.inc();
  ok.inc(4);
  requests.inc({ model: "m", status: "200" });
  const latency = registry.histogram("latency_seconds", "Latency.", [0.1, 1]);
  const fast = latency.child({ model: "m" });
  fast.observe(0.05);
  latency.observe(0.5, { model: "m" });
  const text = registry.render();
  assert.equal(sampleValue(text, 'requests_total{status="200",model="m"}'), 6);
  assert.equal(sampleValue(text, 'latency_seconds_bucket{model="m",le="0.1"}'), 1);
  assert.equal(sampleValue(text, 'latency_seconds_bucket{model="m",le="1"}'), 2);
  assert.equal(sampleValue(text, 'latency_seconds_count{model="m"}'), 2);
});
