/** metric, direct, tollbooth, portkey, target, ratio, met (null: no target) */
export type Row = [
  string,
  number | string | null,
  number | string | null,
  number | string | null,
  string,
  string,
  boolean | null,
];

const HEADER = ["metric", "direct", "tollbooth", "portkey", "target", "ratio", "met"];

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
    r.map((c, i) => (i === 0 || i === 4 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  return [line(cells[0]), widths.map((w) => "-".repeat(w)).join("  "), ...cells.slice(1).map(line)]
    .join("\n");
}

/** The one table of a run, from its results (as written to bench/results/). */
// deno-lint-ignore no-explicit-any
export function report(r: any): { text: string; rows: Row[] } {
  const c = r.closedLoop50;
  const o5 = r.openLoop[500];
  const o2 = r.openLoop[200];
  const s = r.streaming;
  const m = r.memory;
  const over = (x: number, base: number) => x - base;
  const tbOver500 = over(o5.tollbooth.p50, o5.direct.p50);
  const pkOver500 = over(o5.portkey.p50, o5.direct.p50);
  const tbTtfbOver = over(s.tollbooth.ttfbP50, s.direct.ttfbP50);
  const rows: Row[] = [
    [
      "closed loop 50 conn: req/s",
      c.direct.rps,
      c.tollbooth.rps,
      c.portkey.rps,
      "tb ≥ 2× pk",
      ratio(c.tollbooth.rps, c.portkey.rps),
      c.tollbooth.rps >= 2 * c.portkey.rps,
    ],
    [
      "closed loop: non-2xx or errors",
      c.direct.requests - c.direct.ok,
      c.tollbooth.requests - c.tollbooth.ok,
      c.portkey.requests - c.portkey.ok,
      "0",
      "",
      c.tollbooth.requests === c.tollbooth.ok,
    ],
    ["closed loop: p50 ms", c.direct.p50, c.tollbooth.p50, c.portkey.p50, "", "", null],
    ["closed loop: p99 ms", c.direct.p99, c.tollbooth.p99, c.portkey.p99, "", "", null],
    [
      "closed loop: CPU ms/request",
      c.direct.cpuMsPerRequest,
      c.tollbooth.cpuMsPerRequest,
      c.portkey.cpuMsPerRequest,
      "",
      ratio(c.tollbooth.cpuMsPerRequest, c.portkey.cpuMsPerRequest),
      null,
    ],
    ["200 req/s: p50 ms", o2.direct.p50, o2.tollbooth.p50, o2.portkey.p50, "", "", null],
    [
      "200 req/s: p50 overhead ms",
      0,
      over(o2.tollbooth.p50, o2.direct.p50),
      over(o2.portkey.p50, o2.direct.p50),
      "",
      "",
      null,
    ],
    [
      "200 req/s: p99 overhead ms",
      0,
      over(o2.tollbooth.p99, o2.direct.p99),
      over(o2.portkey.p99, o2.direct.p99),
      "",
      "",
      null,
    ],
    ["500 req/s: p50 ms", o5.direct.p50, o5.tollbooth.p50, o5.portkey.p50, "", "", null],
    [
      "500 req/s: p50 overhead ms",
      0,
      tbOver500,
      pkOver500,
      "tb < 1, ≤ ½ pk",
      ratio(tbOver500, pkOver500),
      tbOver500 < 1 && tbOver500 <= pkOver500 / 2,
    ],
    [
      "500 req/s: p99 overhead ms",
      0,
      over(o5.tollbooth.p99, o5.direct.p99),
      over(o5.portkey.p99, o5.direct.p99),
      "",
      "",
      null,
    ],
    [
      "open loop: failed requests",
      o2.direct.failed + o5.direct.failed,
      o2.tollbooth.failed + o5.tollbooth.failed,
      o2.portkey.failed + o5.portkey.failed,
      "0",
      "",
      o2.tollbooth.failed + o5.tollbooth.failed === 0,
    ],
    [
      "stream: first byte p50 ms",
      s.direct.ttfbP50,
      s.tollbooth.ttfbP50,
      s.portkey.ttfbP50,
      "",
      "",
      null,
    ],
    [
      "stream: first byte overhead ms",
      0,
      tbTtfbOver,
      over(s.portkey.ttfbP50, s.direct.ttfbP50),
      "tb < 2",
      ratio(tbTtfbOver, over(s.portkey.ttfbP50, s.direct.ttfbP50)),
      tbTtfbOver < 2,
    ],
    [
      "stream: total p50 ms",
      s.direct.totalP50,
      s.tollbooth.totalP50,
      s.portkey.totalP50,
      "",
      "",
      null,
    ],
    [
      "stream: total overhead ms",
      0,
      over(s.tollbooth.totalP50, s.direct.totalP50),
      over(s.portkey.totalP50, s.direct.totalP50),
      "",
      "",
      null,
    ],
    [
      "hot wallet 200 conn: settled/s",
      null,
      r.hotWallet.settledPerSecond,
      null,
      "≥ 2000",
      ratio(r.hotWallet.settledPerSecond, 2000),
      r.hotWallet.settledPerSecond >= 2000,
    ],
    [
      "hot wallet: p50 / p99 ms",
      null,
      `${fmt(r.hotWallet.p50)} / ${fmt(r.hotWallet.p99)}`,
      null,
      "",
      "",
      null,
    ],
    ["hot wallet: conflicts/request", null, r.hotWallet.conflictsPerRequest, null, "", "", null],
    ["hot wallet: ops per commit", null, r.hotWallet.opsPerCommit, null, "", "", null],
    [
      "1000 open streams: MB RSS",
      m.direct.mbPer1000,
      m.tollbooth.mbPer1000,
      m.portkey.mbPer1000,
      "",
      ratio(m.tollbooth.mbPer1000, m.portkey.mbPer1000),
      m.tollbooth.completed === m.tollbooth.streams,
    ],
    [
      "KV commit on this disk: p50 / p99 ms",
      null,
      `${fmt(r.kvCommit.p50)} / ${fmt(r.kvCommit.p99)}`,
      null,
      "",
      "",
      null,
    ],
    [
      "audit (deno task admin audit)",
      null,
      r.audit.ok ? "clean" : "FAILED",
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
    "direct = the fake upstream itself; overheads are against direct in this run; CPU and RSS are the serving process's",
    formatTable(rows),
  ].join("\n");
  return { text, rows };
}

function ratio(a: number | null, b: number | null): string {
  if (a === null || b === null || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return "";
  return `${(a / b).toFixed(2)}×`;
}

function fmt(n: number) {
  return n.toFixed(2);
}
