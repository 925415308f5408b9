/**
 * metric, direct, tollbooth (the default: slices for hot apps, a worker per core), the same on one
 * worker (beside Portkey's one process), tollbooth with a commit per reserve and settle (the old
 * protocol, the baseline), portkey, the floor (bench/floor.ts), target, ratio, met (null: no
 * target)
 */
export type Row = [
  string,
  number | string | null,
  number | string | null,
  number | string | null,
  number | string | null,
  number | string | null,
  number | string | null,
  string,
  string,
  boolean | null,
];

const HEADER = [
  "metric",
  "direct",
  "tollbooth",
  "tb 1 worker",
  "tb commits",
  "portkey",
  "deno floor",
  "target",
  "ratio",
  "met",
];

function cell(v: number | string | boolean | null): string {
  if (v === null) return "–";
  if (typeof v === "boolean") return v ? "yes" : "NO";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return "n/a";
    return Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2);
  }
  return v;
}

/** A plain-text table, numbers right-aligned. */
export function formatTable(rows: Row[]): string {
  const cells = [HEADER, ...rows.map((r) => r.map(cell))];
  const widths = HEADER.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i === 0 || i === 7 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  return [line(cells[0]), widths.map((w) => "-".repeat(w)).join("  "), ...cells.slice(1).map(line)]
    .join("\n");
}

/** A row with a figure for the default build only. */
function tollboothOnly(metric: string, value: number | string | null): Row {
  return [metric, null, value, null, null, null, null, "", "", null];
}

/** Per-window shares as "0.98 / 0.55 / 0.61"; null for results written before they were kept. */
function shares(values: (number | null)[] | undefined): string | null {
  if (!values || values.every((v) => v === null)) return null;
  return values.map((v) => (v === null ? "–" : v.toFixed(2))).join(" / ");
}

type Cpu = { cpuMsPerRequest: number };

type ByThread = { cpuMsPerRequestByThread?: Record<"js" | "v8" | "kv" | "other", number> };

/**
 * One target's CPU per request by kind of thread, as "JavaScript / V8 helpers / KV / other"; null
 * for results written before it was kept. A Node process names every thread alike: its V8 helpers
 * are in "other".
 */
function byThread(x: ByThread | undefined): string | null {
  const t = x?.cpuMsPerRequestByThread;
  return t ? [t.js, t.v8, t.kv, t.other].map((v) => v.toFixed(2)).join(" / ") : null;
}

/** Every target's CPU per request in one measurement, with Tollbooth's ratio to Portkey's. */
function cpuRow(
  metric: string,
  t: Record<"direct" | "tollbooth" | "oneWorker" | "commits" | "portkey", Cpu> & { floor?: Cpu },
): Row {
  const cpu = (x: Cpu) => x.cpuMsPerRequest;
  return [
    metric,
    cpu(t.direct),
    cpu(t.tollbooth),
    cpu(t.oneWorker),
    cpu(t.commits),
    cpu(t.portkey),
    t.floor ? cpu(t.floor) : null,
    "",
    ratio(cpu(t.tollbooth), cpu(t.portkey)),
    null,
  ];
}

/** The one table of a run, from its results (as written to bench/results/). */
// deno-lint-ignore no-explicit-any
export function report(r: any): { text: string; rows: Row[] } {
  const c = r.closedLoop50;
  const o5 = r.openLoop[500];
  const o2 = r.openLoop[200];
  const s = r.streaming;
  /** Results written before the 200-chunk scenario have none. */
  const ls = r.longStreams ?? null;
  const m = r.memory;
  const over = (x: number, base: number) => x - base;
  const tbOver500 = over(o5.tollbooth.p50, o5.direct.p50);
  const pkOver500 = over(o5.portkey.p50, o5.direct.p50);
  const tbTtfbOver = over(s.tollbooth.ttfbP50, s.direct.ttfbP50);
  const tbCpu500 = o5.tollbooth.cpuMsPerRequest;
  const pkTtfbOver = over(s.portkey.ttfbP50, s.direct.ttfbP50);
  const h = r.hotWallet;
  const hc = r.hotWalletCommits;
  const h1 = r.hotWalletOneWorker;
  const oneOver500 = over(o5.oneWorker.p50, o5.direct.p50);
  const oneTtfbOver = over(s.oneWorker.ttfbP50, s.direct.ttfbP50);
  const p = r.processes;
  /** Null when skipped (one core, no taskset); runs written before it have none. */
  const ra = r.openLoopRigApart ?? null;
  const rows: Row[] = [
    [
      "closed loop 50 conn: req/s",
      c.direct.rps,
      c.tollbooth.rps,
      c.oneWorker.rps,
      c.commits.rps,
      c.portkey.rps,
      c.floor?.rps ?? null,
      "tb ≥ 4× pk",
      ratio(c.tollbooth.rps, c.portkey.rps),
      c.tollbooth.rps >= 4 * c.portkey.rps,
    ],
    [
      "closed loop: non-2xx or errors",
      c.direct.requests - c.direct.ok,
      c.tollbooth.requests - c.tollbooth.ok,
      c.oneWorker.requests - c.oneWorker.ok,
      c.commits.requests - c.commits.ok,
      c.portkey.requests - c.portkey.ok,
      c.floor ? c.floor.requests - c.floor.ok : null,
      "0",
      "",
      c.tollbooth.requests === c.tollbooth.ok,
    ],
    [
      "closed loop: p50 ms",
      c.direct.p50,
      c.tollbooth.p50,
      c.oneWorker.p50,
      c.commits.p50,
      c.portkey.p50,
      c.floor?.p50 ?? null,
      "",
      "",
      null,
    ],
    [
      "closed loop: p99 ms",
      c.direct.p99,
      c.tollbooth.p99,
      c.oneWorker.p99,
      c.commits.p99,
      c.portkey.p99,
      c.floor?.p99 ?? null,
      "",
      "",
      null,
    ],
    cpuRow("closed loop: CPU ms/request", c),
    [
      "200 req/s: p50 overhead ms",
      0,
      over(o2.tollbooth.p50, o2.direct.p50),
      over(o2.oneWorker.p50, o2.direct.p50),
      over(o2.commits.p50, o2.direct.p50),
      over(o2.portkey.p50, o2.direct.p50),
      o2.floor ? over(o2.floor.p50, o2.direct.p50) : null,
      "",
      "",
      null,
    ],
    // With the 500 req/s and closed-loop rows: how much a request costs as the pace falls.
    cpuRow("200 req/s: CPU ms/request", o2),
    [
      "500 req/s: p50 ms",
      o5.direct.p50,
      o5.tollbooth.p50,
      o5.oneWorker.p50,
      o5.commits.p50,
      o5.portkey.p50,
      o5.floor?.p50 ?? null,
      "",
      "",
      null,
    ],
    [
      "500 req/s: p50 overhead ms",
      0,
      tbOver500,
      oneOver500,
      over(o5.commits.p50, o5.direct.p50),
      pkOver500,
      o5.floor ? over(o5.floor.p50, o5.direct.p50) : null,
      "tb < 1",
      ratio(tbOver500, pkOver500),
      tbOver500 < 1,
    ],
    [
      "500 req/s: p99 overhead ms",
      0,
      over(o5.tollbooth.p99, o5.direct.p99),
      over(o5.oneWorker.p99, o5.direct.p99),
      over(o5.commits.p99, o5.direct.p99),
      over(o5.portkey.p99, o5.direct.p99),
      o5.floor ? over(o5.floor.p99, o5.direct.p99) : null,
      "",
      "",
      null,
    ],
    [
      "500 req/s: CPU ms/request",
      o5.direct.cpuMsPerRequest,
      tbCpu500,
      o5.oneWorker.cpuMsPerRequest,
      o5.commits.cpuMsPerRequest,
      o5.portkey.cpuMsPerRequest,
      o5.floor?.cpuMsPerRequest ?? null,
      "tb ≤ 0.5",
      ratio(tbCpu500, o5.commits.cpuMsPerRequest),
      tbCpu500 <= 0.5,
    ],
    [
      "500 req/s: CPU ms/request by thread: JS / V8 helpers / KV / other",
      byThread(o5.direct),
      byThread(o5.tollbooth),
      byThread(o5.oneWorker),
      byThread(o5.commits),
      byThread(o5.portkey),
      byThread(o5.floor),
      "",
      "",
      null,
    ],
    // How the load's connections fell on the default's workers: its CPU figure depends on it.
    tollboothOnly(
      "500 req/s: busiest worker's share of CPU",
      shares(o5.tollbooth.windowBusiestWorkerShare),
    ),
    ...(ra ? rigApartRows(ra, r.rigApartCores, r.openLoopRigShared ?? null) : []),
    [
      "open loop: failed requests",
      o2.direct.failed + o5.direct.failed,
      o2.tollbooth.failed + o5.tollbooth.failed,
      o2.oneWorker.failed + o5.oneWorker.failed,
      o2.commits.failed + o5.commits.failed,
      o2.portkey.failed + o5.portkey.failed,
      o2.floor && o5.floor ? o2.floor.failed + o5.floor.failed : null,
      "0",
      "",
      o2.tollbooth.failed + o5.tollbooth.failed === 0,
    ],
    [
      "stream: first byte p50 ms",
      s.direct.ttfbP50,
      s.tollbooth.ttfbP50,
      s.oneWorker.ttfbP50,
      s.commits.ttfbP50,
      s.portkey.ttfbP50,
      s.floor?.ttfbP50 ?? null,
      "",
      "",
      null,
    ],
    [
      "stream: first byte overhead ms",
      0,
      tbTtfbOver,
      oneTtfbOver,
      over(s.commits.ttfbP50, s.direct.ttfbP50),
      pkTtfbOver,
      s.floor ? over(s.floor.ttfbP50, s.direct.ttfbP50) : null,
      "tb < 1.5",
      ratio(tbTtfbOver, pkTtfbOver),
      tbTtfbOver < 1.5,
    ],
    [
      "stream: total overhead ms",
      0,
      over(s.tollbooth.totalP50, s.direct.totalP50),
      over(s.oneWorker.totalP50, s.direct.totalP50),
      over(s.commits.totalP50, s.direct.totalP50),
      over(s.portkey.totalP50, s.direct.totalP50),
      s.floor ? over(s.floor.totalP50, s.direct.totalP50) : null,
      "",
      "",
      null,
    ],
    ...(ls
      ? [
        [
          "200-chunk streams, 10 conn: req/s",
          ls.direct.rps,
          ls.tollbooth.rps,
          ls.oneWorker.rps,
          ls.commits.rps,
          ls.portkey.rps,
          ls.floor.rps,
          "",
          ratio(ls.tollbooth.rps, ls.portkey.rps),
          null,
        ] as Row,
        [
          "200-chunk streams: CPU ms/request",
          ls.direct.cpuMsPerRequest,
          ls.tollbooth.cpuMsPerRequest,
          ls.oneWorker.cpuMsPerRequest,
          ls.commits.cpuMsPerRequest,
          ls.portkey.cpuMsPerRequest,
          ls.floor.cpuMsPerRequest,
          "",
          ratio(ls.tollbooth.cpuMsPerRequest, ls.portkey.cpuMsPerRequest),
          null,
        ] as Row,
      ]
      : []),
    [
      "hot wallet 200 conn: settled/s",
      null,
      h.settledPerSecond,
      h1.settledPerSecond,
      hc.settledPerSecond,
      null,
      null,
      "≥ 3000",
      ratio(h.settledPerSecond, hc.settledPerSecond),
      h.settledPerSecond >= 3000,
    ],
    [
      "hot wallet: p50 / p99 ms",
      null,
      `${fmt(h.p50)} / ${fmt(h.p99)}`,
      `${fmt(h1.p50)} / ${fmt(h1.p99)}`,
      `${fmt(hc.p50)} / ${fmt(hc.p99)}`,
      null,
      null,
      "",
      "",
      null,
    ],
    [
      "hot wallet: conflicts (retried commits) / settled",
      null,
      `${h.conflicts} / ${h.ok}`,
      `${h1.conflicts} / ${h1.ok}`,
      `${hc.conflicts} / ${hc.ok}`,
      null,
      null,
      "0",
      "",
      h.conflicts === 0,
    ],
    [
      "hot wallet: slice fallbacks (per-request path)",
      null,
      h.sliceFallbacks ?? null,
      null,
      null,
      null,
      null,
      "0",
      "",
      h.sliceFallbacks === undefined ? null : h.sliceFallbacks === 0,
    ],
    [
      "hot wallet: commits/request",
      null,
      h.commits / Math.max(1, h.ok),
      h1.commits / Math.max(1, h1.ok),
      hc.commits / Math.max(1, hc.ok),
      null,
      null,
      "",
      "",
      null,
    ],
    ...[1, 2, 4].map((n): Row => [
      `hot wallet, ${n} process(es) on one KV: settled/s`,
      null,
      p[n].settledPerSecond,
      null,
      null,
      null,
      null,
      n === 1 ? "" : "scales",
      ratio(p[n].settledPerSecond, p[1].settledPerSecond),
      n === 1 ? null : p[n].settledPerSecond >= p[1].settledPerSecond,
    ]),
    ...[1, 2, 4].map((n) =>
      tollboothOnly(
        `  ${n} process(es): conflicts, non-2xx, slice fallbacks, mispredictions`,
        `${p[n].conflicts}, ${p[n].requests - p[n].ok}, ${p[n].sliceFallbacks ?? "-"}, ${
          p[n].mispredictions ?? "-"
        }`,
      )
    ),
    [
      "1000 open streams: MB RSS",
      m.direct.mbPer1000,
      m.tollbooth.mbPer1000,
      null,
      null,
      m.portkey.mbPer1000,
      null,
      "",
      ratio(m.tollbooth.mbPer1000, m.portkey.mbPer1000),
      m.tollbooth.completed === m.tollbooth.streams,
    ],
    tollboothOnly(
      "KV commit on this disk: p50 / p99 ms",
      `${fmt(r.kvCommit.p50)} / ${fmt(r.kvCommit.p99)}`,
    ),
    // Runs written before the echo probe have no such figure.
    ...(r.wake?.oneAtATimeMicros
      ? [tollboothOnly(
        "loopback echo here, CPU per message: one at a time / 16 in flight, ms",
        `${(r.wake.oneAtATimeMicros / 1000).toFixed(3)} / ${
          (r.wake.inFlightMicros / 1000).toFixed(3)
        }`,
      )]
      : []),
    [
      "audit (deno task admin audit)",
      null,
      r.audit.ok ? "clean" : "FAILED",
      null,
      null,
      null,
      null,
      "clean",
      "",
      r.audit.ok,
    ],
  ];
  const text = [
    `Tollbooth bench ${r.startedAt}${
      r.quick ? " (quick)" : ""
    } · ${r.machine.cpus} CPUs · load ${r.machine.loadAverageBefore} → ${r.machine.loadAverageAfter} · closed loop by ${c.tollbooth.generator}`,
    "direct = the fake upstream itself; tollbooth = the default build (SERVE_WORKERS=auto: one worker per core; WALLET_SLICES=auto: an app hot in a worker is served from a wallet slice) with OPTIMISTIC_UPSTREAM=on; tb 1 worker = the same with SERVE_WORKERS=1 (one JavaScript thread, like Portkey's one Node process); tb commits = the default with WALLET_SLICES=off, a durable commit per reserve and settle; deno floor = bench/floor.ts, one thread of Deno.serve passing each request through Tollbooth's own upstream client and nothing else (what any Deno gateway with this client costs here); overheads are against direct in this run; CPU and RSS are the serving process's (all its threads)",
    formatTable(rows),
  ].join("\n");
  return { text, rows };
}

type OpenLoop = { p50: number; cpuMsPerRequest: number; failed: number };

/** One open-loop pass's results, by target. */
type ByTarget = Record<
  "direct" | "tollbooth" | "oneWorker" | "commits" | "portkey" | "floor",
  OpenLoop
>;

/**
 * The 500 req/s windows again with the targets on some cores and the rig (load generator, fake
 * upstream) on the others, as in production, where neither runs beside the gateway. `shared`: the
 * windows taken in turn with those, sharing the cores (runs before 2026-11-28 10:33 have none:
 * their apart windows came after the shared ones, a minute or more apart).
 */
function rigApartRows(
  ra: ByTarget,
  cores: { targets: string; rig: string },
  shared: ByTarget | null,
): Row[] {
  const setting = `500 req/s, targets on CPU ${cores.targets}, rig on ${cores.rig}`;
  const overhead = (x: OpenLoop) => x.p50 - ra.direct.p50;
  const cpu = (x: OpenLoop) => x.cpuMsPerRequest;
  const tbCpu = cpu(ra.tollbooth);
  return [
    [
      `${setting}: p50 overhead ms`,
      0,
      overhead(ra.tollbooth),
      overhead(ra.oneWorker),
      overhead(ra.commits),
      overhead(ra.portkey),
      overhead(ra.floor),
      "tb < 1",
      ratio(overhead(ra.tollbooth), overhead(ra.portkey)),
      overhead(ra.tollbooth) < 1,
    ],
    [
      `${setting}: CPU ms/request`,
      cpu(ra.direct),
      tbCpu,
      cpu(ra.oneWorker),
      cpu(ra.commits),
      cpu(ra.portkey),
      cpu(ra.floor),
      "tb ≤ 0.5",
      ratio(tbCpu, cpu(ra.portkey)),
      tbCpu <= 0.5,
    ],
    ...(shared
      ? [[
        "  its windows' twins sharing the cores, taken in turn: CPU ms/request (ratio: apart / shared)",
        cpu(shared.direct),
        cpu(shared.tollbooth),
        cpu(shared.oneWorker),
        cpu(shared.commits),
        cpu(shared.portkey),
        cpu(shared.floor),
        "",
        ratio(tbCpu, cpu(shared.tollbooth)),
        null,
      ] as Row]
      : []),
    [
      `${setting}: failed requests`,
      ra.direct.failed,
      ra.tollbooth.failed,
      ra.oneWorker.failed,
      ra.commits.failed,
      ra.portkey.failed,
      ra.floor.failed,
      "0",
      "",
      ra.tollbooth.failed === 0,
    ],
  ];
}

function ratio(a: number | null, b: number | null): string {
  if (a === null || b === null || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return "";
  return `${(a / b).toFixed(2)}×`;
}

function fmt(n: number) {
  return n.toFixed(2);
}
