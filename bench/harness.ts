/**
 * What the bench scripts share: the processes they start (each with its output in a log file, all
 * stopped by `stopAll`), their CPU time from /proc, and an open-loop load.
 */

export const ROOT = new URL("..", import.meta.url).pathname;
export const BENCH = new URL(".", import.meta.url).pathname;

export interface Service {
  name: string;
  pid: number;
  logFile: string;
  stop(): Promise<void>;
}

const services: Service[] = [];

export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** Starts a process with its output in a log file (so reading it costs the bench nothing). */
export function start(
  name: string,
  command: string[],
  options: { env?: Record<string, string>; cwd?: string; logDir: string },
): Service {
  const logFile = `${options.logDir}/${name}.log`;
  const child = new Deno.Command("sh", {
    args: ["-c", 'exec "$@" >"$LOG_FILE" 2>&1', "sh", ...command],
    env: { ...options.env, LOG_FILE: logFile },
    cwd: options.cwd ?? ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const service: Service = {
    name,
    pid: child.pid,
    logFile,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      const killer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
      }, 12_000);
      await child.status;
      clearTimeout(killer);
      // Stopped on its own: `stopAll` has nothing left to stop of it.
      const index = services.indexOf(service);
      if (index >= 0) services.splice(index, 1);
    },
  };
  services.push(service);
  return service;
}

export async function waitForHttp(url: string, service: Service) {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url);
      await res.body?.cancel();
      return;
    } catch {
      await sleep(100);
    }
  }
  const log = await Deno.readTextFile(service.logFile).catch(() => "");
  throw new Error(`${service.name} did not start:\n${log.slice(-2000)}`);
}

export async function stopAll() {
  await Promise.all(services.splice(0).reverse().map((s) => s.stop()));
}

export async function run(command: string, args: string[], options: Deno.CommandOptions = {}) {
  const out = await new Deno.Command(command, {
    args,
    stdout: "piped",
    stderr: "piped",
    ...options,
  }).output();
  return {
    ok: out.success,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

/** CPU time (user + system) of a process so far, in ms. */
export function cpuMs(pid: number, ticksPerSecond: number): Promise<number> {
  return cpuMsOf(`/proc/${pid}/stat`, ticksPerSecond);
}

/** CPU time of a `stat` file: a process's, or one thread's (`/proc/<pid>/task/<tid>/stat`). */
export async function cpuMsOf(statPath: string, ticksPerSecond: number): Promise<number> {
  const stat = await Deno.readTextFile(statPath);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

/** Requests sent on a fixed schedule whatever the answers; latency counted from the scheduled time. */
export async function openLoop(url: string, init: RequestInit, rate: number, seconds: number) {
  const latencies: number[] = [];
  let failed = 0;
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const pending: Promise<void>[] = [];
  const started = performance.now();
  let sent = 0;
  while (sent < total) {
    const now = performance.now();
    while (sent < total && started + sent * interval <= now) {
      const due = started + sent * interval;
      pending.push(
        fetch(url, init).then(async (res) => {
          await res.arrayBuffer();
          if (!res.ok) failed++;
          latencies.push(performance.now() - due);
        }, () => {
          failed++;
        }),
      );
      sent++;
    }
    await sleep(Math.max(0, started + sent * interval - performance.now()));
  }
  await Promise.all(pending);
  return { requests: total, failed, latencies };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

export function sleep(ms: number) {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Tollbooth's process as `deno task start` runs it in production (its V8 flags included), without
 * the task's islands build: the command after the task's last `&&` in `root`'s deno.json, with
 * this Deno.
 */
export async function tollboothCommand(root: string): Promise<string[]> {
  const config = JSON.parse(await Deno.readTextFile(`${root}/deno.json`));
  const words = String(config.tasks?.start ?? "").split("&&").at(-1)!.trim().split(/\s+/);
  if (words[0] !== "deno" || words.at(-1) !== "main.ts") {
    throw new Error(
      `deno.json's start task no longer ends in "deno … main.ts": ${config.tasks?.start}`,
    );
  }
  return [Deno.execPath(), ...words.slice(1)];
}

/** The bench's catalog: its models, all served by the fake upstream at `upstreamUrl`. */
export function benchCatalog(upstreamUrl: string) {
  const benchModel = (id: string, upstreamModel: string) => ({
    id,
    provider: "bench",
    upstream_model: upstreamModel,
    input_usd_per_mtok: "0.10",
    output_usd_per_mtok: "0.40",
    context_tokens: 128000,
    max_output_tokens: 4096,
  });
  return {
    providers: {
      bench: { kind: "openai", base_url: `${upstreamUrl}/v1`, api_key_env: "BENCH_UPSTREAM_KEY" },
    },
    models: [
      benchModel("bench/fast", "fast"),
      benchModel("bench/hold", "hold"),
      benchModel("bench/long", "long"),
    ],
  };
}

/**
 * One of the bench's own servers (`script` in bench/) in a process of its own on a free port, once
 * it answers: its process, port and URL.
 */
export async function serveScript(name: string, script: string, args: string[], logDir: string) {
  const port = freePort();
  const service = start(name, [
    Deno.execPath(),
    "run",
    "-A",
    `${BENCH}${script}`,
    `--port=${port}`,
    ...args,
  ], { logDir });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/`, service);
  return { service, port, url };
}

/**
 * The fast fake upstream in a process of its own, and the bench catalog pointing at it (written in
 * `dir`): its URL and process, and the environment every Tollbooth the bench starts shares.
 */
export async function startUpstream(dir: string) {
  const { service: upstream, url } = await serveScript("upstream", "upstream.ts", [], dir);
  const modelsFile = `${dir}/models.json`;
  await Deno.writeTextFile(modelsFile, JSON.stringify(benchCatalog(url)));
  const env: Record<string, string> = {
    MODELS_FILE: modelsFile,
    BENCH_UPSTREAM_KEY: "sk-bench",
    // The bench measures the gateway, not its rate limits.
    RATE_LIMIT_RPM: "1000000000",
    RATE_LIMIT_TPM: "1000000000",
    // WALLET_SLICES is left at its default (auto): a hot app is served from a slice.
    OPTIMISTIC_UPSTREAM: "on",
  };
  return { url, env, pid: upstream.pid };
}

/** Runs a bench script's `main`, stopping every process it started however it ends. */
export async function runStoppingAll(main: () => Promise<void>) {
  const onSignal = async () => {
    await stopAll();
    Deno.exit(130);
  };
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    await main();
  } finally {
    await stopAll();
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}

/**
 * What a thread of a serving process does: runs JavaScript (the main thread, or a SERVE_WORKERS
 * worker, which Deno names `worker-N`), helps V8 (GC and compiler threads, `V8 DefaultWorker`),
 * runs Deno KV's SQLite (`sw-N`: its fsyncs and reads), or anything else (the runtime's I/O
 * threads; a Node process names every thread `node`, so its V8 helpers count here too).
 */
export type ThreadKind = "js" | "v8" | "kv" | "other";
export const THREAD_KINDS: ThreadKind[] = ["js", "v8", "kv", "other"];

function threadKind(pid: number, tid: string, name: string): ThreadKind {
  if (tid === String(pid) || name.startsWith("worker-")) return "js";
  if (name.startsWith("V8 ")) return "v8";
  if (/^sw-\d+$/.test(name)) return "kv";
  return "other";
}

/** CPU time so far of each thread of a process, by thread id, in ms. */
export async function threadCpuMs(
  pid: number,
  ticksPerSecond: number,
): Promise<Map<string, { name: string; kind: ThreadKind; ms: number }>> {
  const cpu = new Map<string, { name: string; kind: ThreadKind; ms: number }>();
  for await (const task of Deno.readDir(`/proc/${pid}/task`)) {
    try {
      const name = (await Deno.readTextFile(`/proc/${pid}/task/${task.name}/comm`)).trim();
      // Not /proc/<tid>/stat: that one counts the whole process.
      const ms = await cpuMsOf(`/proc/${pid}/task/${task.name}/stat`, ticksPerSecond);
      cpu.set(task.name, { name, kind: threadKind(pid, task.name, name), ms });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return cpu;
}

/** What each worker thread (SERVE_WORKERS) spent between two readings, by name. */
export function workerSpent(
  before: Awaited<ReturnType<typeof threadCpuMs>>,
  after: Awaited<ReturnType<typeof threadCpuMs>>,
): Map<string, number> {
  const spent = new Map<string, number>();
  for (const [tid, { name, ms }] of after) {
    if (name.startsWith("worker-")) spent.set(name, ms - (before.get(tid)?.ms ?? 0));
  }
  return spent;
}

/** What each kind of thread spent between two readings (a thread that ended is not counted). */
export function kindSpent(
  before: Awaited<ReturnType<typeof threadCpuMs>>,
  after: Awaited<ReturnType<typeof threadCpuMs>>,
): Record<ThreadKind, number> {
  const spent = { js: 0, v8: 0, kv: 0, other: 0 };
  for (const [tid, { kind, ms }] of after) spent[kind] += ms - (before.get(tid)?.ms ?? 0);
  return spent;
}

/** The busiest worker's share of what the workers spent (null: none). */
export function busiestShare(spentByWorker: Map<string, number>): number | null {
  const spent = [...spentByWorker.values()];
  const total = spent.reduce((a, b) => a + b, 0);
  return total > 0 ? Math.max(...spent) / total : null;
}
