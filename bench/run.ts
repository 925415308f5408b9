/**
 * `deno task bench`: what Tollbooth adds to a call, side by side with calling the upstream directly
 * and with a peer gateway (Portkey's open-source gateway from npm), all in one run on loopback.
 * Starts and stops everything it starts; prints one table and writes it as JSON to bench/results/.
 *
 *   deno task bench            # the full run, a few minutes
 *   deno task bench --quick    # short durations, for working on the bench itself
 */
import {
  BENCH,
  busiestShare,
  cpuMs,
  freePort,
  kindSpent,
  openLoop as openLoopAt,
  percentile,
  ROOT,
  run,
  runStoppingAll,
  serveScript,
  type Service,
  sleep,
  start,
  startUpstream,
  stopAll,
  THREAD_KINDS,
  threadCpuMs,
  type ThreadKind,
  tollboothCommand,
  waitForHttp,
  workerSpent,
} from "./harness.ts";
import { report } from "./table.ts";

const PEER_DIR = `${BENCH}peer`;
const PEER_SERVER = `${PEER_DIR}/node_modules/@portkey-ai/gateway/build/start-server.js`;
const QUICK = Deno.args.includes("--quick");
const SECONDS = QUICK ? 3 : 10;
const OPEN_SECONDS = QUICK ? 3 : 6;
const STREAMS_SEQUENTIAL = QUICK ? 60 : 300;
const OPEN_STREAMS = 1000;
const MESSAGES = [{ role: "user", content: "Say hello to the benchmark." }];

interface Target {
  name: "direct" | "tollbooth" | "oneWorker" | "commits" | "portkey" | "floor";
  url: string;
  headers: Record<string, string>;
  model: string;
  holdModel: string;
  /** The model whose answer streams 200 chunks. */
  longModel: string;
  /** The process whose CPU and memory the target costs. */
  pid: number;
}

// ---- processes -------------------------------------------------------------------------------

/**
 * How many workers a serving Tollbooth process runs: its `workers_listening` line, logged once all
 * listen; a process on one worker logs none (given 2 s).
 */
async function workersOf(service: Service): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const log = await Deno.readTextFile(service.logFile);
    const line = log.split("\n").find((l) => l.includes('"workers_listening"'));
    if (line) return JSON.parse(line).workers;
    await sleep(100);
  }
  return 1;
}

async function waitForLog(service: Service, text: string) {
  for (let i = 0; i < 600; i++) {
    const log = await Deno.readTextFile(service.logFile).catch(() => "");
    if (log.includes(text)) return;
    await sleep(100);
  }
  throw new Error(`${service.name} did not log ${text}`);
}

async function hasCommand(command: string, args: string[]): Promise<boolean> {
  try {
    return (await run(command, args)).ok;
  } catch {
    return false;
  }
}

/**
 * The cores for the windows with the rig apart: the targets on the first half of this process's
 * CPUs, the rig (this process, which generates the load, and the fake upstream) on the rest. In
 * production neither runs beside the gateway; here they share its cores, and each request's write
 * wakes one of them on the core the gateway's thread runs on. Null (the windows skipped) on one
 * core or without `taskset` (util-linux).
 */
async function rigApartCores(): Promise<{ targets: string; rig: string; all: string } | null> {
  const current = await run("taskset", ["-c", "-p", String(Deno.pid)]).catch(() => null);
  // "pid 123's current affinity list: 0-3,6"
  const all = current?.ok ? current.stdout.trim().split(": ").at(-1) ?? "" : "";
  const cpus = all.split(",").flatMap((range) => {
    const [from, to = from] = range.split("-").map(Number);
    return Array.from({ length: to - from + 1 }, (_, i) => from + i);
  }).filter(Number.isInteger);
  if (cpus.length < 2) return null;
  const half = Math.floor(cpus.length / 2);
  return { targets: cpus.slice(0, half).join(","), rig: cpus.slice(half).join(","), all };
}

/** Puts every thread of a process on `cpus` (a list as taskset reads it, "0-3"). */
async function pinProcess(pid: number, cpus: string) {
  const pinned = await run("taskset", ["-a", "-p", "-c", cpus, String(pid)]);
  if (!pinned.ok) throw new Error(`taskset -c ${cpus} for ${pid} failed: ${pinned.stderr}`);
}

async function ensureWrk(): Promise<boolean> {
  if (await hasCommand("wrk", ["--version"]) || (await run("sh", ["-c", "command -v wrk"])).ok) {
    return true;
  }
  console.error("wrk is missing; installing the Debian package…");
  const install = await run("sh", [
    "-c",
    "(apt-get install -y -qq wrk || (apt-get update -qq && apt-get install -y -qq wrk)) >/dev/null 2>&1",
  ]);
  if (install.ok) return true;
  console.error("wrk could not be installed; the closed loop uses the built-in load generator.");
  return false;
}

async function ensurePeer() {
  try {
    await Deno.stat(PEER_SERVER);
    return;
  } catch { /* not installed yet */ }
  console.error("installing the peer gateway (@portkey-ai/gateway) in bench/peer…");
  const hasLock = await Deno.stat(`${PEER_DIR}/package-lock.json`).then(() => true, () => false);
  const result = await run("npm", [
    hasLock ? "ci" : "install",
    "--no-audit",
    "--no-fund",
    "--ignore-scripts",
  ], { cwd: PEER_DIR });
  if (!result.ok) throw new Error(`npm install in bench/peer failed:\n${result.stderr}`);
}

async function rssKb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
}

/** How often each Tollbooth process logs its wallet counters (WALLET_STATS_LOG_MS). */
const STATS_EVERY_MS = 200;

type WalletStats = {
  commits: number;
  conflicts: number;
  opsCommitted: number;
  sliceFallbacks: number;
  mispredictions: number;
};

/**
 * A Tollbooth process's wallet counters as of now: the newest `wallet_stats` line of each of its
 * workers logged after this call (each logs one every STATS_EVERY_MS), summed. Not by signal: Deno
 * opens its inspector on SIGUSR1, which then taxes every request of the process being measured.
 */
async function walletStats(service: Service, workers = 1): Promise<WalletStats> {
  const offset = (await Deno.stat(service.logFile)).size;
  for (let i = 0; i < 100; i++) {
    await sleep(STATS_EVERY_MS);
    const file = await Deno.open(service.logFile);
    try {
      await file.seek(offset, Deno.SeekMode.Start);
      const text = await new Response(file.readable).text();
      const newest = new Map<number, WalletStats>();
      for (const line of text.split("\n")) {
        if (!line.includes('"wallet_stats"')) continue;
        const stats = JSON.parse(line) as WalletStats & { worker?: number };
        newest.set(stats.worker ?? 0, stats);
      }
      if (newest.size >= workers) {
        const all = [...newest.values()];
        const sum = (k: keyof WalletStats) => all.reduce((acc, s) => acc + s[k], 0);
        return {
          commits: sum("commits"),
          conflicts: sum("conflicts"),
          opsCommitted: sum("opsCommitted"),
          sliceFallbacks: sum("sliceFallbacks"),
          mispredictions: sum("mispredictions"),
        };
      }
    } catch (error) {
      file.close();
      throw error;
    }
  }
  throw new Error("no wallet_stats line from tollbooth");
}

/** Latency of a small durable commit on the disk the bench runs on: the floor of a paid call. */
async function kvCommitLatency(dir: string) {
  const kv = await Deno.openKv(`${dir}/latency.sqlite3`);
  try {
    const times: number[] = [];
    for (let i = 0; i < 120; i++) {
      const t0 = performance.now();
      await kv.atomic().set(["probe", i % 10], { i, pad: "x".repeat(200) }).commit();
      if (i >= 20) times.push(performance.now() - t0);
    }
    return { p50: percentile(times, 50), p99: percentile(times, 99) };
  } finally {
    kv.close();
  }
}

/**
 * What a wake-up costs on this machine (bench/wake_probe.ts, processes of their own): the CPU of an
 * echo per loopback message, one at a time (woken for each, as a server at a moderate pace is twice
 * per proxied request) and with 16 in flight (rarely asleep, as a saturated server).
 */
async function wakeCost() {
  const probe = await run(Deno.execPath(), ["run", "-A", `${BENCH}wake_probe.ts`]);
  if (!probe.ok) throw new Error(`wake probe failed: ${probe.stderr}`);
  return JSON.parse(probe.stdout) as { oneAtATimeMicros: number; inFlightMicros: number };
}

// ---- load generators -------------------------------------------------------------------------

function requestBody(target: Target, stream = false, model = target.model) {
  return JSON.stringify({ model, messages: MESSAGES, max_tokens: 16, stream });
}

function requestInit(target: Target, body: string): RequestInit {
  return {
    method: "POST",
    headers: { "content-type": "application/json", ...target.headers },
    body,
  };
}

interface LoopResult {
  requests: number;
  ok: number;
  seconds: number;
  rps: number;
  okRps: number;
  p50: number;
  p99: number;
  cpuMsPerRequest: number | null;
  generator: string;
}

async function closedLoop(
  target: Target,
  connections: number,
  seconds: number,
  tools: { wrk: boolean; tmp: string; ticks: number },
  body = requestBody(target),
): Promise<LoopResult> {
  const cpuBefore = await cpuMs(target.pid, tools.ticks);
  let result: Omit<LoopResult, "cpuMsPerRequest">;
  if (tools.wrk) {
    const script = `${tools.tmp}/${target.name}.lua`;
    const headers = { "Content-Type": "application/json", ...target.headers };
    await Deno.writeTextFile(
      script,
      [
        `wrk.method = "POST"`,
        `wrk.body = ${luaString(body)}`,
        ...Object.entries(headers).map(([k, v]) =>
          `wrk.headers[${luaString(k)}] = ${luaString(v)}`
        ),
      ].join("\n"),
    );
    const out = await run("wrk", [
      "-t2",
      `-c${connections}`,
      `-d${seconds}s`,
      "--timeout",
      "10s",
      "--latency",
      "-s",
      script,
      target.url,
    ]);
    if (!out.ok) throw new Error(`wrk failed: ${out.stderr}`);
    result = parseWrk(out.stdout);
  } else {
    result = await fetchClosedLoop(target, connections, seconds, body);
  }
  const cpuAfter = await cpuMs(target.pid, tools.ticks);
  return {
    ...result,
    cpuMsPerRequest: result.requests ? (cpuAfter - cpuBefore) / result.requests : null,
  };
}

function luaString(s: string) {
  return JSON.stringify(s); // JSON string escapes are valid Lua for this ASCII text
}

function parseWrk(text: string): Omit<LoopResult, "cpuMsPerRequest"> {
  const unit = (v: string, u: string) =>
    Number(v) * ({ us: 0.001, ms: 1, s: 1000, m: 60_000 }[u] ?? NaN);
  const pct = (p: string) => {
    const m = new RegExp(`^\\s*${p}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, "m").exec(text);
    return m ? unit(m[1], m[2]) : NaN;
  };
  const total = /(\d+) requests in ([\d.]+)(ms|s|m)/.exec(text);
  if (!total) throw new Error(`cannot read wrk's output:\n${text}`);
  const requests = Number(total[1]);
  const seconds = unit(total[2], total[3]) / 1000;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(text)?.[1] ?? 0);
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/
    .exec(text);
  const errors = socketErrors
    ? socketErrors.slice(1).reduce((n, v) => n + Number(v), 0) - Number(socketErrors[2])
    : 0;
  const ok = requests - non2xx - errors;
  return {
    requests,
    ok,
    seconds,
    rps: requests / seconds,
    okRps: ok / seconds,
    p50: pct("50"),
    p99: pct("99"),
    generator: "wrk",
  };
}

async function fetchClosedLoop(
  target: Target,
  connections: number,
  seconds: number,
  body: string,
) {
  const latencies: number[] = [];
  let ok = 0;
  const end = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      try {
        const res = await fetch(target.url, requestInit(target, body));
        await res.arrayBuffer();
        if (res.ok) ok++;
      } catch { /* counted as not ok */ }
      latencies.push(performance.now() - t0);
    }
  }));
  const elapsed = (performance.now() - started) / 1000;
  return {
    requests: latencies.length,
    ok,
    seconds: elapsed,
    rps: latencies.length / elapsed,
    okRps: ok / elapsed,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    generator: "fetch",
  };
}

/** The target's open loop: its model's request at `rate` for `seconds`. */
function openLoop(target: Target, rate: number, seconds: number) {
  return openLoopAt(target.url, requestInit(target, requestBody(target)), rate, seconds);
}

/** How many windows each target gets at each open-loop rate, taken in turn with the others'. */
const OPEN_ROUNDS = QUICK ? 2 : 3;

type OpenLoopResult = {
  rate: number;
  requests: number;
  failed: number;
  p50: number;
  p99: number;
  cpuMsPerRequest: number;
  /** CPU per request of each window, in order: how much this machine's pace drifted. */
  windowCpuMs: number[];
  /**
   * Per window, the busiest worker's share of the workers' CPU: near 1 when the load's
   * connections landed on one worker, near 1/N when they split (a request then costs more).
   */
  windowBusiestWorkerShare: (number | null)[];
  /** CPU per request by the kind of thread that spent it; they add up to about cpuMsPerRequest. */
  cpuMsPerRequestByThread: Record<ThreadKind, number>;
};

/**
 * Every target at one rate in OPEN_ROUNDS short windows, in turn (direct, tollbooth, …, floor, then
 * again), each after a second at the rate; latencies, requests and CPU pooled over its windows.
 * This machine's pace drifts over seconds: one build measured 0.52 and then 0.81 ms of CPU per
 * request in two windows back to back. A target measured in one window of its own was compared
 * with the others under another load of the host; in turn, each meets the same drift.
 */
async function openLoopsInTurn(
  targets: Target[],
  rate: number,
  seconds: number,
  ticks: number,
  log: (s: string) => void,
): Promise<Record<string, OpenLoopResult>> {
  const { only } = await openLoopsInSettings(targets, rate, seconds, ticks, log, [
    { name: "only", arrange: () => Promise.resolve() },
  ]);
  return only;
}

/** A way the processes are laid out on the CPUs for a window, made so by `arrange`. */
interface Setting {
  name: string;
  arrange(): Promise<void>;
}

/**
 * openLoopsInTurn under several settings: each target's window is taken once in each setting,
 * one right after the other, so that the settings meet the same drift of the host.
 */
async function openLoopsInSettings(
  targets: Target[],
  rate: number,
  seconds: number,
  ticks: number,
  log: (s: string) => void,
  settings: Setting[],
): Promise<Record<string, Record<string, OpenLoopResult>>> {
  const pooledOf = () =>
    new Map(targets.map((t) => [t.name, {
      requests: 0,
      failed: 0,
      cpuMs: 0,
      latencies: [] as number[],
      windowCpuMs: [] as number[],
      windowBusiestWorkerShare: [] as (number | null)[],
      threadCpuMs: { js: 0, v8: 0, kv: 0, other: 0 },
    }]));
  const pooledBySetting = new Map(settings.map((setting) => [setting.name, pooledOf()]));
  const windowSeconds = seconds / OPEN_ROUNDS;
  for (let round = 1; round <= OPEN_ROUNDS; round++) {
    for (const t of targets) {
      for (const setting of settings) {
        log(
          `open loop ${rate} req/s${
            settings.length > 1 ? `, ${setting.name}` : ""
          }, window ${round} of ${OPEN_ROUNDS} (${windowSeconds}s): ${t.name}`,
        );
        await setting.arrange();
        await openLoop(t, rate, 1); // settle at the rate first
        const cpuBefore = await cpuMs(t.pid, ticks);
        const threadsBefore = await threadCpuMs(t.pid, ticks);
        const window = await openLoop(t, rate, windowSeconds);
        const cpu = await cpuMs(t.pid, ticks) - cpuBefore;
        const threadsAfter = await threadCpuMs(t.pid, ticks);
        const p = pooledBySetting.get(setting.name)!.get(t.name)!;
        p.windowBusiestWorkerShare.push(busiestShare(workerSpent(threadsBefore, threadsAfter)));
        const byKind = kindSpent(threadsBefore, threadsAfter);
        for (const kind of THREAD_KINDS) p.threadCpuMs[kind] += byKind[kind];
        p.requests += window.requests;
        p.failed += window.failed;
        p.cpuMs += cpu;
        p.latencies.push(...window.latencies);
        p.windowCpuMs.push(cpu / window.requests);
      }
    }
  }
  return Object.fromEntries(
    [...pooledBySetting].map(([setting, pooled]) => [
      setting,
      Object.fromEntries(
        [...pooled].map(([name, p]) => [name, {
          rate,
          requests: p.requests,
          failed: p.failed,
          p50: percentile(p.latencies, 50),
          p99: percentile(p.latencies, 99),
          cpuMsPerRequest: p.cpuMs / p.requests,
          windowCpuMs: p.windowCpuMs,
          windowBusiestWorkerShare: p.windowBusiestWorkerShare,
          cpuMsPerRequestByThread: Object.fromEntries(
            THREAD_KINDS.map((kind) => [kind, p.threadCpuMs[kind] / p.requests]),
          ) as Record<ThreadKind, number>,
        }]),
      ),
    ]),
  );
}

/** One stream at a time: time to the first body byte and to the end. */
async function sequentialStreams(target: Target, count: number) {
  const body = requestBody(target, true);
  const ttfb: number[] = [];
  const totals: number[] = [];
  let failed = 0;
  for (let i = 0; i < count + 20; i++) {
    const t0 = performance.now();
    const res = await fetch(target.url, requestInit(target, body));
    const reader = res.body!.getReader();
    const first = await reader.read();
    const t1 = performance.now();
    let text = first.value ? new TextDecoder().decode(first.value) : "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const t2 = performance.now();
    if (!res.ok || !text.includes("data: [DONE]")) failed++;
    if (i < 20) continue; // warm-up
    ttfb.push(t1 - t0);
    totals.push(t2 - t0);
  }
  return {
    streams: count,
    failed,
    ttfbP50: percentile(ttfb, 50),
    ttfbP99: percentile(ttfb, 99),
    totalP50: percentile(totals, 50),
    totalP99: percentile(totals, 99),
  };
}

/** Opens many streams that the upstream holds after their first chunk; RSS of the gateway then. */
async function openStreamsMemory(target: Target, upstreamUrl: string, count: number) {
  await sleep(500);
  const before = await rssKb(target.pid);
  const body = requestBody(target, true, target.holdModel);
  let firstChunks = 0;
  let resolveAll!: () => void;
  const allOpen = new Promise<void>((r) => (resolveAll = r));
  const streams = Array.from({ length: count }, async () => {
    const res = await fetch(target.url, requestInit(target, body));
    const reader = res.body!.getReader();
    await reader.read();
    if (++firstChunks === count) resolveAll();
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    return res.ok && text.includes("data: [DONE]");
  });
  await Promise.race([allOpen, sleep(60_000)]);
  await sleep(300);
  const during = await rssKb(target.pid);
  const opened = firstChunks;
  await fetch(`${upstreamUrl}/release`, { method: "POST" }).then((r) => r.arrayBuffer());
  const completed = (await Promise.all(streams)).filter(Boolean).length;
  return {
    streams: count,
    opened,
    completed,
    rssBeforeMb: before / 1024,
    rssDuringMb: during / 1024,
    kbPerStream: (during - before) / opened,
    mbPer1000: ((during - before) / opened) * 1000 / 1024,
  };
}

// ---- the run ---------------------------------------------------------------------------------

async function main() {
  const wrk = await ensureWrk();
  await ensurePeer();
  const ticks = Number((await run("getconf", ["CLK_TCK"])).stdout.trim()) || 100;
  const tmp = await Deno.makeTempDir({ prefix: "tollbooth-bench-" });
  const startedAt = new Date().toISOString();
  const loadBefore = (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
  try {
    // The fast fake upstream, in its own process.
    const { url: upstreamUrl, env: upstreamEnv, pid: upstreamPid } = await startUpstream(tmp);

    // Tollbooth, as it runs in production: a real process on a KV file, app made by the admin task.
    const kvPath = `${tmp}/tollbooth.sqlite3`;
    const baseEnv = { ...upstreamEnv, WALLET_STATS_LOG_MS: String(STATS_EVERY_MS) };
    /**
     * Tollbooth as it runs in production: a real process on its own KV file, its app made by the
     * admin task; `env` is what this one changes from the default.
     */
    const tollboothProcess = await tollboothCommand(ROOT);
    const startTollbooth = async (name: string, kvFile: string, env: Record<string, string>) => {
      const port = freePort();
      const fullEnv: Record<string, string> = {
        ...baseEnv,
        PORT: String(port),
        KV_PATH: kvFile,
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        ...env,
      };
      const created = await run(Deno.execPath(), [
        "task",
        "-q",
        "admin",
        "create-app",
        "--name",
        name,
      ], {
        cwd: ROOT,
        env: fullEnv,
      });
      if (!created.ok) throw new Error(`create-app failed: ${created.stderr}`);
      const apiKey = (JSON.parse(created.stdout) as { api_key: string }).api_key;
      const service = start(name, tollboothProcess, {
        env: fullEnv,
        logDir: tmp,
      });
      await waitForHttp(`http://127.0.0.1:${port}/docs/errors`, service);
      return { service, env: fullEnv, port, apiKey, workers: await workersOf(service) };
    };
    const tb = await startTollbooth("tollbooth", kvPath, {});
    const tollbooth = tb.service;
    // The baseline in the same run: the same service with a durable commit per reserve and settle.
    const tbCommits = await startTollbooth("commits", `${tmp}/commits.sqlite3`, {
      WALLET_SLICES: "off",
    });
    const commits = tbCommits.service;
    // The default on one JavaScript thread, beside Portkey's one Node process.
    const tbOneWorker = await startTollbooth("one-worker", `${tmp}/one-worker.sqlite3`, {
      SERVE_WORKERS: "1",
    });
    const oneWorker = tbOneWorker.service;

    const peerPort = freePort();
    const peer = start("portkey", ["node", PEER_SERVER, `--port=${peerPort}`, "--headless"], {
      cwd: PEER_DIR,
      logDir: tmp,
    });
    await waitForHttp(`http://127.0.0.1:${peerPort}/`, peer);
    // The floor: what Deno.serve and our upstream client cost with nothing of a gateway between.
    const { service: floor, url: floorUrl } = await serveScript("floor", "floor.ts", [
      `--upstream=${upstreamUrl}`,
    ], tmp);

    const targets: Target[] = [
      {
        name: "direct",
        url: `${upstreamUrl}/v1/chat/completions`,
        headers: { authorization: "Bearer sk-bench" },
        model: "fast",
        holdModel: "hold",
        longModel: "long",
        pid: upstreamPid,
      },
      {
        name: "tollbooth",
        url: `http://127.0.0.1:${tb.port}/v1/chat/completions`,
        headers: { authorization: `Bearer ${tb.apiKey}` },
        model: "bench/fast",
        holdModel: "bench/hold",
        longModel: "bench/long",
        pid: tollbooth.pid,
      },
      {
        name: "oneWorker",
        url: `http://127.0.0.1:${tbOneWorker.port}/v1/chat/completions`,
        headers: { authorization: `Bearer ${tbOneWorker.apiKey}` },
        model: "bench/fast",
        holdModel: "bench/hold",
        longModel: "bench/long",
        pid: oneWorker.pid,
      },
      {
        name: "commits",
        url: `http://127.0.0.1:${tbCommits.port}/v1/chat/completions`,
        headers: { authorization: `Bearer ${tbCommits.apiKey}` },
        model: "bench/fast",
        holdModel: "bench/hold",
        longModel: "bench/long",
        pid: commits.pid,
      },
      {
        name: "portkey",
        url: `http://127.0.0.1:${peerPort}/v1/chat/completions`,
        headers: {
          authorization: "Bearer sk-bench",
          "x-portkey-provider": "openai",
          "x-portkey-custom-host": `${upstreamUrl}/v1`,
        },
        model: "fast",
        holdModel: "hold",
        longModel: "long",
        pid: peer.pid,
      },
      {
        name: "floor",
        url: `${floorUrl}/v1/chat/completions`,
        headers: {},
        model: "fast",
        holdModel: "hold",
        longModel: "long",
        pid: floor.pid,
      },
    ];
    const tools = { wrk, tmp, ticks };
    const kvCommit = await kvCommitLatency(tmp);
    const wake = await wakeCost();
    const log = (s: string) => console.error(`[bench] ${s}`);

    // Warm every path (JIT, connection pools, caches) before measuring anything.
    for (const t of targets) await closedLoop(t, 10, 2, tools);

    const closed: Record<string, LoopResult> = {};
    for (const t of targets) {
      log(`closed loop, 50 connections, ${SECONDS}s: ${t.name}`);
      closed[t.name] = await closedLoop(t, 50, SECONDS, tools);
    }
    const open: Record<number, Record<string, OpenLoopResult>> = {};
    for (const rate of [200, 500]) {
      open[rate] = await openLoopsInTurn(targets, rate, OPEN_SECONDS, ticks, log);
    }
    // 500 req/s again, each window taken twice in a row: sharing the cores as above, and with
    // the rig on cores of its own. What the host's sharing costs each target, both settings
    // meeting the same drift.
    const cores = await rigApartCores();
    let openRigApart: Record<string, OpenLoopResult> | null = null;
    let openRigShared: Record<string, OpenLoopResult> | null = null;
    if (cores) {
      const rig = [Deno.pid, upstreamPid];
      const served = targets.filter((t) => !rig.includes(t.pid));
      const layout = async (rigCpus: string, servedCpus: string) => {
        for (const pid of rig) await pinProcess(pid, rigCpus);
        for (const t of served) await pinProcess(t.pid, servedCpus);
      };
      try {
        const paired = await openLoopsInSettings(targets, 500, OPEN_SECONDS, ticks, log, [
          { name: "sharing the cores", arrange: () => layout(cores.all, cores.all) },
          { name: "the rig apart", arrange: () => layout(cores.rig, cores.targets) },
        ]);
        openRigShared = paired["sharing the cores"];
        openRigApart = paired["the rig apart"];
      } finally {
        await layout(cores.all, cores.all);
      }
    } else log("no taskset or one core: the windows with the rig apart are skipped");
    const streaming: Record<string, Awaited<ReturnType<typeof sequentialStreams>>> = {};
    for (const t of targets) {
      log(`streaming, ${STREAMS_SEQUENTIAL} one after another: ${t.name}`);
      streaming[t.name] = await sequentialStreams(t, STREAMS_SEQUENTIAL);
    }

    // A long answer: what relaying each of its 200 chunks costs (parsing, counting, re-encoding).
    const longStreams: Record<string, LoopResult> = {};
    for (const t of targets) {
      log(`200-chunk streams, closed loop, 10 connections, ${OPEN_SECONDS}s: ${t.name}`);
      // Room for the answer's 200 tokens, and usage asked for as a billing client asks for it (so
      // every target's upstream sends the same chunks, with OpenAI's `usage: null` on each).
      const body = JSON.stringify({
        ...JSON.parse(requestBody(t, true, t.longModel)),
        max_tokens: 256,
        stream_options: { include_usage: true },
      });
      await closedLoop(t, 10, 1, tools, body);
      longStreams[t.name] = await closedLoop(t, 10, OPEN_SECONDS, tools, body);
    }

    const hotWalletOf = async (target: Target, service: Service, workers: number) => {
      log(`hot wallet: one app, 200 connections, ${SECONDS}s: ${target.name}`);
      // Steady state, not the ramp: 200 new connections, heaps and slices grown to this pace.
      await closedLoop(target, 200, 2, tools);
      const statsBefore = await walletStats(service, workers);
      const hot = await closedLoop(target, 200, SECONDS, tools);
      const statsAfter = await walletStats(service, workers);
      return {
        ...hot,
        settledPerSecond: hot.okRps,
        commits: statsAfter.commits - statsBefore.commits,
        conflicts: statsAfter.conflicts - statsBefore.conflicts,
        conflictsPerRequest: (statsAfter.conflicts - statsBefore.conflicts) / Math.max(1, hot.ok),
        sliceFallbacks: statsAfter.sliceFallbacks - statsBefore.sliceFallbacks,
        mispredictions: statsAfter.mispredictions - statsBefore.mispredictions,
        opsPerCommit: (statsAfter.opsCommitted - statsBefore.opsCommitted) /
          Math.max(1, statsAfter.commits - statsBefore.commits),
      };
    };
    const hotWallet = await hotWalletOf(targets[1], tollbooth, tb.workers);
    const hotWalletOneWorker = await hotWalletOf(targets[2], oneWorker, 1);
    const hotWalletCommits = await hotWalletOf(targets[3], commits, tbCommits.workers);

    const memory: Record<string, Awaited<ReturnType<typeof openStreamsMemory>>> = {};
    const memoryTargets = ["direct", "tollbooth", "portkey"];
    for (const t of targets.filter((t) => memoryTargets.includes(t.name))) {
      log(`memory, ${OPEN_STREAMS} streams open at once: ${t.name}`);
      // A first round grows the heaps and pools once; the second one is measured.
      await openStreamsMemory(t, upstreamUrl, OPEN_STREAMS);
      memory[t.name] = await openStreamsMemory(t, upstreamUrl, OPEN_STREAMS);
    }

    // Stop Tollbooth (it drains its wallet queues and gives its slices back).
    await tollbooth.stop();
    await commits.stop();
    await oneWorker.stop();

    // One hot wallet served by 1, 2 and 4 processes on the same KV file and port (SO_REUSEPORT).
    const processes: Record<string, Awaited<ReturnType<typeof hotWalletOf>>> = {};
    for (const n of [1, 2, 4]) {
      const port = freePort();
      const env = {
        ...tb.env,
        PORT: String(port),
        PUBLIC_URL: `http://127.0.0.1:${port}`,
        REUSE_PORT: "on",
        // Processes, each on its one thread: what several instances on one KV do.
        SERVE_WORKERS: "1",
      };
      const group = Array.from(
        { length: n },
        (_, i) =>
          start(`tollbooth-${n}-${i}`, tollboothProcess, {
            env,
            logDir: tmp,
          }),
      );
      for (const s of group) await waitForLog(s, '"listening"');
      const target = {
        ...targets[1],
        url: `http://127.0.0.1:${port}/v1/chat/completions`,
        pid: group[0].pid,
      };
      // Every process takes its slice and grows it to the pace, as above.
      await closedLoop(target, 200, 2, tools);
      const before = await Promise.all(group.map((s) => walletStats(s)));
      log(`hot wallet from ${n} process(es): 200 connections, ${SECONDS}s`);
      const hot = await closedLoop(target, 200, SECONDS, tools);
      const after = await Promise.all(group.map((s) => walletStats(s)));
      const sum = (
        list: typeof before,
        k: "commits" | "conflicts" | "sliceFallbacks" | "mispredictions",
      ) => list.reduce((acc, x) => acc + x[k], 0);
      processes[n] = {
        ...hot,
        settledPerSecond: hot.okRps,
        commits: sum(after, "commits") - sum(before, "commits"),
        conflicts: sum(after, "conflicts") - sum(before, "conflicts"),
        conflictsPerRequest: (sum(after, "conflicts") - sum(before, "conflicts")) /
          Math.max(1, hot.ok),
        opsPerCommit: 0,
        sliceFallbacks: sum(after, "sliceFallbacks") - sum(before, "sliceFallbacks"),
        mispredictions: sum(after, "mispredictions") - sum(before, "mispredictions"),
      };
      for (const s of group) {
        await s.stop();
      }
    }

    // Audit the KV file every process left.
    const audit = await run(Deno.execPath(), ["task", "-q", "admin", "audit"], {
      cwd: ROOT,
      env: tb.env,
    });
    const auditReport = JSON.parse(audit.stdout.trim() || "{}");
    const auditCommits = await run(Deno.execPath(), ["task", "-q", "admin", "audit"], {
      cwd: ROOT,
      env: tbCommits.env,
    });
    const auditOneWorker = await run(Deno.execPath(), ["task", "-q", "admin", "audit"], {
      cwd: ROOT,
      env: tbOneWorker.env,
    });
    const auditOk = audit.ok && auditReport.ok === true && auditCommits.ok &&
      JSON.parse(auditCommits.stdout.trim() || "{}").ok === true && auditOneWorker.ok &&
      JSON.parse(auditOneWorker.stdout.trim() || "{}").ok === true;

    const results = {
      startedAt,
      quick: QUICK,
      machine: {
        cpus: navigator.hardwareConcurrency,
        loadAverageBefore: loadBefore,
        loadAverageAfter: (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(
          " ",
        ),
        deno: Deno.version.deno,
        node: (await run("node", ["--version"])).stdout.trim(),
      },
      kvCommit,
      wake,
      closedLoop50: closed,
      openLoop: open,
      openLoopRigApart: openRigApart,
      openLoopRigShared: openRigShared,
      rigApartCores: cores,
      streaming,
      longStreams,
      workers: { tollbooth: tb.workers, commits: tbCommits.workers },
      hotWallet,
      hotWalletOneWorker,
      hotWalletCommits,
      processes,
      memory,
      audit: { ok: auditOk, apps: auditReport.apps, problems: auditReport.problems },
    };
    const { text, rows } = report(results);
    console.log(text);
    await Deno.mkdir(`${BENCH}results`, { recursive: true });
    const file = `${BENCH}results/bench-${startedAt.replace(/[:.]/g, "-")}.json`;
    await Deno.writeTextFile(file, JSON.stringify({ ...results, table: rows }, null, 2) + "\n");
    console.log(`\nwritten to ${file.replace(ROOT, "")}`);
    if (!auditOk) {
      console.error(`audit FAILED:\n${audit.stdout}${audit.stderr}`);
      Deno.exitCode = 1;
    }
  } finally {
    await stopAll();
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

await runStoppingAll(main);
