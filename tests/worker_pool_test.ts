/**
 * The supervisor of SERVE_WORKERS (lib/ops/workers.ts) with stand-in workers (worker_pool_fake.ts):
 * how it starts them on one port, stops them, and restarts one that fails.
 */
import assert from "node:assert/strict";
import { serveWorkerCount, WorkerPool } from "@/lib/ops/mod.ts";
import { until } from "./helpers.ts";

const FAKE = new URL("./worker_pool_fake.ts", import.meta.url);
/** What the process read of its catalog file when it started. */
const CATALOG_AT_START = { providers: {}, models: [{ id: "read/at-start" }] };

function pool(count: number) {
  const lines: Record<string, unknown>[] = [];
  const workers = new WorkerPool({
    count,
    entry: FAKE,
    devServer: false,
    log: (line) => lines.push(line),
    catalogSource: CATALOG_AT_START,
  });
  return { workers, lines };
}

function clearFakeEnv() {
  for (const name of Object.keys(Deno.env.toObject())) {
    if (name.startsWith("FAKE_WORKER_")) Deno.env.delete(name);
  }
}

Deno.test("auto runs one worker per core on Linux, one under --dev, elsewhere, on Deploy and with an in-memory KV", () => {
  const linux = { devServer: false, os: "linux", cores: 8, deploy: false };
  assert.equal(serveWorkerCount("auto", linux), 8);
  assert.equal(serveWorkerCount("auto", { ...linux, cores: 64 }), 16);
  assert.equal(serveWorkerCount("auto", { ...linux, devServer: true }), 1);
  assert.equal(serveWorkerCount("auto", { ...linux, os: "darwin" }), 1);
  assert.equal(serveWorkerCount("auto", { ...linux, deploy: true }), 1);
  assert.equal(serveWorkerCount(3, { ...linux, devServer: true }), 3, "a number is taken as is");
  assert.equal(serveWorkerCount(3, { ...linux, kvPath: ":memory:" }), 1);
});

Deno.test("with PORT=0 the first worker picks the port and the others listen on the same one", async () => {
  clearFakeEnv();
  const { workers } = pool(3);
  await workers.start(0);
  assert.equal(Deno.env.get("FAKE_WORKER_PORT_0"), "0");
  assert.equal(Deno.env.get("FAKE_WORKER_PORT_1"), "41234");
  assert.equal(Deno.env.get("FAKE_WORKER_PORT_2"), "41234");
  assert.equal(await workers.stop("SIGTERM", 5_000), true);
  for (const i of [0, 1, 2]) assert.equal(Deno.env.get(`FAKE_WORKER_STOPPED_${i}`), "SIGTERM");
  clearFakeEnv();
});

Deno.test("a worker that fails before it listens fails the start, and is not started again", async () => {
  clearFakeEnv();
  Deno.env.set("FAKE_WORKER_FAIL_START", "1");
  const { workers, lines } = pool(2);
  await assert.rejects(workers.start(8080), /worker 1 failed before it listened: .*cannot open KV/);
  await workers.stop("startup_failed", 1_000);
  await new Promise((resolve) => setTimeout(resolve, 1_200));
  assert.equal(Deno.env.get("FAKE_WORKER_STARTS_1"), "1");
  assert.equal(lines.filter((l) => l.event === "worker_failed").length, 1);
  clearFakeEnv();
});

/** Two workers on port 8080, the second of which fails once, soon after it listens. */
async function poolWithACrash() {
  clearFakeEnv();
  Deno.env.set("FAKE_WORKER_CRASH", "1");
  const started = pool(2);
  await started.workers.start(8080);
  return started;
}

Deno.test("a worker that fails after it served is logged and started again on the same port and catalog, the commit turns it held freed", async () => {
  const { workers, lines } = await poolWithACrash();
  // Restarted a second after it failed, then its modules load: more than until's default.
  await until(() => Deno.env.get("FAKE_WORKER_STARTS_1") === "2", "the restart", {
    timeoutMs: 10_000,
  });
  const failed = lines.find((l) => l.event === "worker_failed");
  assert.equal(failed?.worker, 1);
  assert.match(String(failed?.error), /worker crashed/);
  assert.equal(Deno.env.get("FAKE_WORKER_PORT_1"), "8080");
  // The catalog the process started with, not the file read again: its siblings serve that one.
  assert.equal(Deno.env.get("FAKE_WORKER_CATALOG_1"), JSON.stringify(CATALOG_AT_START));
  // It died in the middle of a commit turn: the supervisor freed it, so its restart waited for none.
  await until(() => Deno.env.get("FAKE_WORKER_LOCK_TAKEOVERS_1_2") !== undefined, "its first turn");
  assert.equal(Deno.env.get("FAKE_WORKER_LOCK_TAKEOVERS_1_2"), "0");
  assert.equal(await workers.stop("SIGTERM", 5_000), true);
  clearFakeEnv();
});

Deno.test("a restarted worker that fails before it listens is started again, after a longer pause", async () => {
  const { workers, lines } = await poolWithACrash();
  // Its restart (the second start) fails before it listens; the third start succeeds.
  Deno.env.set("FAKE_WORKER_FAIL_START", "1");
  await until(() => Deno.env.get("FAKE_WORKER_STARTS_1") === "2", "the first restart", {
    timeoutMs: 10_000,
  });
  Deno.env.delete("FAKE_WORKER_FAIL_START");
  await until(() => Deno.env.get("FAKE_WORKER_STARTS_1") === "3", "the second restart", {
    timeoutMs: 10_000,
  });
  assert.deepEqual(
    lines.filter((l) => l.event === "worker_failed").map((l) => l.worker),
    [1, 1],
  );
  assert.equal(await workers.stop("SIGTERM", 5_000), true);
  clearFakeEnv();
});

Deno.test("a worker asking for its siblings' metrics gets every other worker's snapshot", async () => {
  clearFakeEnv();
  Deno.env.set("FAKE_WORKER_ASK", "0");
  const { workers } = pool(3);
  await workers.start(8080);
  await until(
    () => [0, 1, 2].every((i) => Deno.env.get(`FAKE_WORKER_STARTS_${i}`) === "1"),
    "every worker running",
    { timeoutMs: 10_000 },
  );
  Deno.env.set("FAKE_WORKER_ASK_NOW", "1");
  await until(() => Deno.env.get("FAKE_WORKER_SIBLINGS_0") !== undefined, "the answer");
  const snapshots = JSON.parse(Deno.env.get("FAKE_WORKER_SIBLINGS_0")!);
  assert.deepEqual(snapshots, [
    { requests_total: [{ labels: {}, value: 2 }] },
    { requests_total: [{ labels: {}, value: 3 }] },
  ]);
  assert.equal(await workers.stop("SIGTERM", 5_000), true);
  clearFakeEnv();
});
