/**
 * `deno task bench:pair <old> <new>`: two builds of Tollbooth side by side under the same load at
 * the same time, for a change smaller than this machine's drift. Alternated runs of one build vary
 * by more than such a change (0.55–0.76 ms of CPU per request per 4 s window at 500 req/s within
 * minutes, here): side by side, a drift of the host meets both builds in the same window.
 *
 * Each build serves on one worker (as the bench's "tb 1 worker"; `--workers` for more), on its own
 * port and KV file, behind one fake upstream. Both are loaded at `--rate` req/s at once; each
 * window's CPU per request (the serving process, all its threads) is compared within its pair. A
 * second round starts both afresh, the new build first, so that neither order nor one JIT's luck
 * decides. One build against itself measured 0.95–1.04 per window and 0.98–1.00 per round. With
 * several workers each window also prints each build's busiest worker's share of its workers' CPU
 * (near 1: the load's connections were on one worker).
 *
 *   deno task bench:pair a5c8bd5 HEAD
 *   deno task bench:pair ../old-checkout . --rate=200 --windows=6
 *   deno task bench:pair a5c8bd5 HEAD --workers=2
 *
 * `<old>` and `<new>` are directories holding a checkout, or git revisions of this repository
 * (checked out into temporary worktrees, which are removed afterwards).
 */
import {
  BENCH,
  busiestShare,
  cpuMs,
  freePort,
  openLoop,
  percentile,
  ROOT,
  run,
  runStoppingAll,
  type Service,
  start,
  startUpstream,
  stopAll,
  threadCpuMs,
  tollboothCommand,
  waitForHttp,
  workerSpent,
} from "./harness.ts";

const positional = Deno.args.filter((a) => !a.startsWith("--"));
const option = (name: string, fallback: number) => {
  const given = Deno.args.find((a) => a.startsWith(`--${name}=`))?.split("=")[1];
  const value = given === undefined ? fallback : Number(given);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
  return value;
};
const RATE = option("rate", 500);
const WINDOWS = option("windows", 4);
const SECONDS = option("seconds", 4);
/** Workers per build (SERVE_WORKERS): 1 as the bench's "tb 1 worker", 2 as its default here. */
const WORKERS = option("workers", 1);
const ROUNDS = 2;
const BODY = JSON.stringify({
  model: "bench/fast",
  messages: [{ role: "user", content: "Say hello to the benchmark." }],
  max_tokens: 16,
});

interface Build {
  label: "old" | "new";
  /** What was asked for: a directory or a revision. */
  given: string;
  dir: string;
}

interface Serving {
  build: Build;
  service: Service;
  url: string;
  init: RequestInit;
}

/** A checkout directory as given, or a temporary worktree of the revision. */
async function checkout(label: Build["label"], given: string, tmp: string): Promise<Build> {
  const asDir = await Deno.stat(`${given}/main.ts`).then(() => true, () => false);
  if (asDir) return { label, given, dir: await Deno.realPath(given) };
  const dir = `${tmp}/${label}`;
  const added = await run("git", ["-C", ROOT, "worktree", "add", "--detach", dir, given]);
  if (!added.ok) throw new Error(`${given} is neither a checkout nor a revision: ${added.stderr}`);
  // The same npm packages as this checkout: a revision's own would need the network.
  await Deno.symlink(`${ROOT}node_modules`, `${dir}/node_modules`);
  return { label, given, dir };
}

async function serve(build: Build, env: Record<string, string>, tmp: string, round: number) {
  const port = freePort();
  const fullEnv = {
    ...env,
    PORT: String(port),
    KV_PATH: `${tmp}/${build.label}-${round}.sqlite3`,
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    SERVE_WORKERS: String(WORKERS),
  };
  const created = await run(Deno.execPath(), [
    "task",
    "-q",
    "admin",
    "create-app",
    "--name",
    "pair",
  ], {
    cwd: build.dir,
    env: fullEnv,
  });
  if (!created.ok) throw new Error(`create-app failed in ${build.dir}: ${created.stderr}`);
  const apiKey = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  const service = start(`${build.label}-${round}`, await tollboothCommand(build.dir), {
    env: fullEnv,
    cwd: build.dir,
    logDir: tmp,
  });
  await waitForHttp(`http://127.0.0.1:${port}/docs/errors`, service);
  return {
    build,
    service,
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    init: {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
      body: BODY,
    },
  };
}

/** Back to back on ten connections for a few seconds: both builds' code optimised, heaps grown. */
async function warmUp(target: Serving) {
  const until = performance.now() + 3_000;
  await Promise.all(Array.from({ length: 10 }, async () => {
    while (performance.now() < until) await (await fetch(target.url, target.init)).arrayBuffer();
  }));
}

/** One window at RATE on both at once: each one's CPU per request and p50 latency. */
async function window(pair: Serving[], ticks: number) {
  await Promise.all(pair.map((t) => openLoop(t.url, t.init, RATE, 1)));
  const threadsBefore = await Promise.all(pair.map((t) => threadCpuMs(t.service.pid, ticks)));
  const before = await Promise.all(pair.map((t) => cpuMs(t.service.pid, ticks)));
  const loads = await Promise.all(pair.map((t) => openLoop(t.url, t.init, RATE, SECONDS)));
  const after = await Promise.all(pair.map((t) => cpuMs(t.service.pid, ticks)));
  const threadsAfter = await Promise.all(pair.map((t) => threadCpuMs(t.service.pid, ticks)));
  return pair.map((t, i) => ({
    label: t.build.label,
    cpuMsPerRequest: (after[i] - before[i]) / loads[i].requests,
    busiestWorkerShare: busiestShare(workerSpent(threadsBefore[i], threadsAfter[i])),
    p50: percentile(loads[i].latencies, 50),
    failed: loads[i].failed,
  }));
}

async function main() {
  if (positional.length !== 2) {
    console.error(
      "usage: deno task bench:pair <old> <new> [--rate=500] [--windows=4] [--seconds=4] [--workers=1]",
    );
    Deno.exit(2);
  }
  const tmp = await Deno.makeTempDir({ prefix: "tollbooth-pair-" });
  const builds: Build[] = [];
  try {
    builds.push(await checkout("old", positional[0], tmp));
    builds.push(await checkout("new", positional[1], tmp));
    const ticks = Number((await run("getconf", ["CLK_TCK"])).stdout.trim()) || 100;
    const { env } = await startUpstream(tmp);
    console.log(
      `old = ${builds[0].given}, new = ${
        builds[1].given
      }: ${WORKERS} worker(s) each, ${RATE} req/s on both ` +
        `at once, ${ROUNDS} rounds of ${WINDOWS} windows of ${SECONDS} s`,
    );
    const windows: {
      round: number;
      old: number;
      new: number;
      ratio: number;
      /** The busiest worker's share of the workers' CPU, with several workers. */
      oldBusiestShare: number | null;
      newBusiestShare: number | null;
    }[] = [];
    let failed = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      const order = round % 2 === 1 ? builds : [...builds].reverse();
      const pair: Serving[] = [];
      for (const build of order) pair.push(await serve(build, env, tmp, round));
      await Promise.all(pair.map(warmUp));
      for (let w = 1; w <= WINDOWS; w++) {
        const measured = await window(pair, ticks);
        const old = measured.find((m) => m.label === "old")!;
        const neu = measured.find((m) => m.label === "new")!;
        failed += old.failed + neu.failed;
        const ratio = neu.cpuMsPerRequest / old.cpuMsPerRequest;
        windows.push({
          round,
          old: old.cpuMsPerRequest,
          new: neu.cpuMsPerRequest,
          ratio,
          oldBusiestShare: old.busiestWorkerShare,
          newBusiestShare: neu.busiestWorkerShare,
        });
        console.log(
          `round ${round}, window ${w}: CPU ms/request old ${old.cpuMsPerRequest.toFixed(3)}, ` +
            `new ${neu.cpuMsPerRequest.toFixed(3)}, new/old ${ratio.toFixed(3)}; ` +
            `p50 ms old ${old.p50.toFixed(2)}, new ${neu.p50.toFixed(2)}` +
            (WORKERS > 1
              ? `; busiest worker's share old ${old.busiestWorkerShare?.toFixed(2)}, ` +
                `new ${neu.busiestWorkerShare?.toFixed(2)}`
              : ""),
        );
      }
      for (const serving of pair) await serving.service.stop();
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const byRound = Array.from(
      { length: ROUNDS },
      (_, i) => mean(windows.filter((w) => w.round === i + 1).map((w) => w.ratio)).toFixed(3),
    );
    console.log(
      `new/old CPU per request: ${mean(windows.map((w) => w.ratio)).toFixed(3)} ` +
        `(rounds ${byRound.join(", ")}; windows ${
          Math.min(...windows.map((w) => w.ratio)).toFixed(3)
        }–${Math.max(...windows.map((w) => w.ratio)).toFixed(3)}); failed requests ${failed}`,
    );
    const file = `${BENCH}results/pair-${new Date().toISOString().replaceAll(":", "-")}.json`;
    await Deno.mkdir(`${BENCH}results`, { recursive: true });
    await Deno.writeTextFile(
      file,
      JSON.stringify(
        {
          old: builds[0].given,
          new: builds[1].given,
          rate: RATE,
          workers: WORKERS,
          windows,
          failed,
        },
        null,
        2,
      ) +
        "\n",
    );
    console.log(`written to ${file.replace(ROOT, "")}`);
  } finally {
    await stopAll();
    for (const build of builds) {
      if (build.dir.startsWith(tmp)) {
        await run("git", ["-C", ROOT, "worktree", "remove", "--force", build.dir]);
      }
    }
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

await runStoppingAll(main);
