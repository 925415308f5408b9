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
