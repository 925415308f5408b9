/**
 * SERVE_WORKERS: one process, several workers on one port and one KV file, as one service. The
 * kernel spreads connections among the workers; the money is as exact as with one.
 */
import assert from "node:assert/strict";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { parsePrometheus } from "./prometheus.ts";
import { admin, instanceFiles, PRICEY, startInstance } from "./instances.ts";
import { until } from "./helpers.ts";
import { threadCpuMs } from "../bench/harness.ts";

/** Linux's /proc counts CPU time in USER_HZ ticks, 100 a second on every architecture. */
const TICKS_PER_SECOND = 100;

const METRICS_TOKEN = "workers-metrics";

/** A process of two workers on the simulator's PRICEY model, once both listen. */
async function startTwoWorkers(env: Record<string, string>) {
  const files = await instanceFiles({ models: [PRICEY] });
  const instance = await startInstance({
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    SERVE_WORKERS: "2",
    METRICS_TOKEN,
    ...env,
  });
  try {
    await until(() => instance.lines.some((l) => l.event === "workers_listening"), "both workers", {
      timeoutMs: 5_000,
    });
  } catch (error) {
    await instance.stop();
    await files.remove();
    throw error;
  }
  return { files, instance };
}

Deno.test({
  name:
    "two workers serve one port from one process: what left the wallet is the sum of the answered costs, every scrape counts every request, their commits never fail each other's, SIGTERM stops both",
  // Workers share the port by SO_REUSEPORT's balancing, which is Linux's.
  ignore: Deno.build.os !== "linux",
}, async () => {
  const { files, instance } = await startTwoWorkers({
    WALLET_STATS_LOG_MS: "100",
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
  });
  const kv = await Deno.openKv(files.kvPath);
  // A new connection per request, so that the kernel may hand each to either worker.
  const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  try {
    const listening = instance.lines.filter((l) => l.event === "listening");
    assert.deepEqual(listening.map((l) => l.worker).sort(), [0, 1]);
    assert.deepEqual(new Set(listening.map((l) => l.port)).size, 1, "both on one port");

    const { app, key } = await createAppRecord(kv, { name: "workers" });
    const body = JSON.stringify({
      model: PRICEY.id,
      messages: [{ role: "user", content: "go" }],
      max_tokens: 20,
    });
    const answers = await Promise.all(Array.from({ length: 60 }, async () => {
      const res = await fetch(`${instance.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key.apiKey}` },
        body,
        client,
      });
      await res.body?.cancel();
      return { status: res.status, cost: res.headers.get("tollbooth-request-cost") };
    }));
    assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]));
    const charged = answers.reduce((sum, a) => sum + parseUsd(a.cost!), 0);

    // Whichever worker answers a scrape adds what the other counted.
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${instance.url}/metrics`, {
        headers: { authorization: `Bearer ${METRICS_TOKEN}` },
        client,
      });
      const metrics = parsePrometheus(await res.text());
      assert.equal(
        metrics.value("tollbooth_chat_completions_total", { model: PRICEY.id, status: "200" }),
        60,
      );
      assert.equal(
        metrics.value("tollbooth_charged_micro_usd_total", { model: PRICEY.id }),
        charged,
      );
    }

    assert.equal((await instance.stop()).code, 0);
    const stopped = instance.lines.filter((l) => l.event === "shut_down");
    assert.deepEqual(stopped.map((l) => l.worker).sort(), [0, 1], "each worker drained");
    const finalStats = [0, 1].map((w) =>
      instance.lines.findLast((l) => l.event === "wallet_stats" && l.worker === w)!
    );
    for (const stats of finalStats) {
      assert.ok((stats.opsCommitted as number) > 0, `worker ${stats.worker} served requests`);
      // Their commits of the one wallet take turns (commit locks) instead of failing each other's.
      assert.equal(stats.conflicts, 0, `worker ${stats.worker}'s commits never failed`);
    }

    const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    assert.equal(
      wallet.spent,
      charged,
      "what the answers said left the wallet, to the micro-dollar",
    );
    assert.equal(wallet.reserved, 0);
    const audit = await admin(files.kvPath, "audit");
    assert.equal(audit.code, 0, audit.stderr);
    assert.equal(audit.output.ok, true);
    assert.equal(audit.output.totals.spent, formatUsd(charged));
  } finally {
    client.close();
    kv.close();
    await instance.stop();
    await files.remove();
  }
});

Deno.test({
  name:
    "workers refuse a port another process already listens on (REUSE_PORT off), and share it with REUSE_PORT=on",
  ignore: Deno.build.os !== "linux",
}, async () => {
  const files = await instanceFiles({ models: [PRICEY] });
  // Another process's workers: a listener that lets others share its port.
  const other = Deno.listen({ port: 0, reusePort: true });
  const port = String((other.addr as Deno.NetAddr).port);
  try {
    const env = {
      KV_PATH: files.kvPath,
      MODELS_FILE: files.modelsFile,
      SERVE_WORKERS: "2",
      PORT: port,
    };
    const refused = await startInstance(env).then(
      (instance) => instance.stop().then(() => null),
      (error: Error) => error.message,
    );
    assert.match(refused ?? "started", /instance exited \(1\)/);
    assert.match(refused!, new RegExp(`port ${port} is already in use by another process`));
    const shared = await startInstance({ ...env, REUSE_PORT: "on" });
    assert.equal(shared.port, Number(port));
    assert.equal((await shared.stop()).code, 0);
  } finally {
    other.close();
    await files.remove();
  }
});

/**
 * CPU time so far of each worker thread of a process, by the number in Deno's thread name
 * (`worker-N`, numbered in the order the threads were made: the pool's first worker, started
 * before the others, has the lowest).
 */
async function workerThreadCpuMs(pid: number): Promise<Map<number, number>> {
  const cpu = new Map<number, number>();
  for (const { name, ms } of (await threadCpuMs(pid, TICKS_PER_SECOND)).values()) {
    const number = /^worker-(\d+)$/.exec(name)?.[1];
    if (number !== undefined) cpu.set(Number(number), ms);
  }
  return cpu;
}

Deno.test({
  name:
    "two workers lightly loaded gather the keep-alive connections on the first: the second answers with Connection: close until its clients reconnect there",
  ignore: Deno.build.os !== "linux",
}, async () => {
  const { files, instance } = await startTwoWorkers({
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
  });
  const kv = await Deno.openKv(files.kvPath);
  // A new connection per request: the kernel hands about half of them to the second worker.
  const fresh = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  const kept = Deno.createHttpClient({});
  const { key } = await createAppRecord(kv, { name: "gathered" });
  const complete = async (client: Deno.HttpClient) => {
    const res = await fetch(`${instance.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.apiKey}` },
      body: JSON.stringify({
        model: PRICEY.id,
        messages: [{ role: "user", content: "go" }],
        max_tokens: 20,
      }),
      client,
    });
    await res.body?.cancel();
    assert.equal(res.status, 200);
    return res.headers.get("connection") === "close";
  };
  try {
    let closed = false;
    await until(
      async () => (closed ||= await complete(fresh)),
      "a response that closes its connection",
      { timeoutMs: 10_000 },
    );

    // One keep-alive connection, paced so that the load stays light (back to back, the first
    // worker would come near the spread line): once on the first worker, it is never closed again.
    const paced = async () => {
      await new Promise((resolve) => setTimeout(resolve, 8));
      return await complete(kept);
    };
    let inARow = 0;
    let requests = 0;
    while (inARow < 40 && requests < 400) {
      inARow = (await paced()) ? 0 : inARow + 1;
      requests++;
    }
    assert.equal(inARow, 40, `a connection kept for 40 requests in a row within ${requests}`);

    // And the worker that serves it is the first one: the other's thread stays idle meanwhile.
    const before = await workerThreadCpuMs(instance.pid);
    for (let i = 0; i < 150; i++) assert.equal(await paced(), false);
    const after = await workerThreadCpuMs(instance.pid);
    const [first, second] = [...after.keys()].sort((a, b) => a - b);
    const spent = (thread: number) => after.get(thread)! - (before.get(thread) ?? 0);
    assert.ok(
      spent(first) > 2 * spent(second),
      `the first worker's thread served them: ${spent(first)} ms against ${spent(second)} ms`,
    );

    const res = await fetch(`${instance.url}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      client: fresh,
    });
    const steered = parsePrometheus(await res.text()).value("tollbooth_connections_steered_total");
    assert.ok((steered ?? 0) >= 1, `marked responses counted: ${steered}`);
  } finally {
    fresh.close();
    kept.close();
    kv.close();
    await instance.stop();
    await files.remove();
  }
});

Deno.test({
  name: "with CONNECTION_STEERING=off no worker closes a connection to move it",
  ignore: Deno.build.os !== "linux",
}, async () => {
  const { files, instance } = await startTwoWorkers({ CONNECTION_STEERING: "off" });
  const fresh = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
  try {
    // Past the first samples, when a steering worker would have begun to close its connections.
    await new Promise((resolve) => setTimeout(resolve, 600));
    let closing = 0;
    for (let i = 0; i < 60; i++) {
      const res = await fetch(`${instance.url}/healthz`, { client: fresh });
      await res.body?.cancel();
      if (res.headers.get("connection") === "close") closing++;
    }
    assert.equal(closing, 0);
    const res = await fetch(`${instance.url}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      client: fresh,
    });
    const steered = parsePrometheus(await res.text()).value("tollbooth_connections_steered_total");
    assert.equal(steered, 0);
  } finally {
    fresh.close();
    await instance.stop();
    await files.remove();
  }
});
