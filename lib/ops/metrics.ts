/**
 * A minimal Prometheus registry: counters, gauges and histograms with labels, rendered in the text
 * exposition format (version 0.0.4). Values live in this thread. Workers sharing one port (any of
 * them may answer a scrape) add each other's counts with `snapshot()` and `render(others)`; separate
 * instances are scraped one by one and summed in Prometheus, as with any multi-instance service.
 */
export type Labels = Record<string, string>;

/** One labelled series: a value, or a histogram's bucket counts. */
type Series =
  | { labels: Labels; value: number }
  | { labels: Labels; counts: number[]; sum: number; count: number };

/** What a thread counted, family by family: only what adds up across workers. */
export type MetricsSnapshot = Record<string, Series[]>;

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  /** Counted by this thread, so the workers' values are summed (not read from shared state). */
  summed: boolean;
  buckets?: readonly number[];
  series(): Series[];
}

/** Label values are escaped as the format requires: backslash, double quote and newline. */
function labelText(labels: Labels, extra?: Labels): string {
  const all = { ...labels, ...extra };
  const parts = Object.entries(all).map(([k, v]) =>
    `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`
  );
  return parts.length ? `{${parts.join(",")}}` : "";
}

/**
 * One series' identity whatever the order its labels were given in. Names are identifiers and
 * values are quoted, so no two label sets share a key. Built by hand: a request counts seven
 * series, and entries, a sort callback and JSON of the pairs were a tenth of the request's metrics.
 */
function seriesKey(labels: Labels): string {
  const names = Object.keys(labels);
  if (names.length > 1) names.sort();
  let key = "";
  for (const name of names) key += `${name}=${JSON.stringify(labels[name])},`;
  return key;
}

function numberText(value: number): string {
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return Number.isNaN(value) ? "NaN" : String(value);
}

/** One counter series, found once: what a hot path counts into. */
export interface CounterSeries {
  inc(by?: number): void;
}

/** One histogram series, found once. */
export interface HistogramSeries {
  observe(value: number): void;
}

export class Counter {
  readonly #series = new Map<string, { labels: Labels; value: number }>();
  constructor(readonly name: string, readonly help: string) {}

  inc(labels: Labels = {}, by = 1) {
    this.child(labels).inc(by);
  }

  /** The series of `labels`, made (at 0) when it is not there yet: call it when counting into it. */
  child(labels: Labels = {}): CounterSeries {
    const key = seriesKey(labels);
    let series = this.#series.get(key);
    if (!series) {
      series = { labels, value: 0 };
      this.#series.set(key, series);
    }
    const found = series;
    return { inc: (by = 1) => void (found.value += by) };
  }

  series(): Series[] {
    return [...this.#series.values()].map((s) => ({ ...s }));
  }
}

/** A gauge whose samples are computed at scrape time. */
export class Gauge {
  #samples: { labels: Labels; value: number }[] = [];
  constructor(readonly name: string, readonly help: string) {}

  set(value: number, labels: Labels = {}) {
    const key = seriesKey(labels);
    this.#samples = this.#samples.filter((s) => seriesKey(s.labels) !== key);
    this.#samples.push({ labels, value });
  }

  series(): Series[] {
    return this.#samples.map((s) => ({ ...s }));
  }
}

export class Histogram {
  readonly #series = new Map<
    string,
    { labels: Labels; counts: number[]; sum: number; count: number }
  >();
  constructor(readonly name: string, readonly help: string, readonly buckets: readonly number[]) {}

  observe(value: number, labels: Labels = {}) {
    this.child(labels).observe(value);
  }

  /** The series of `labels`, made (empty) when it is not there yet: call it when observing into it. */
  child(labels: Labels = {}): HistogramSeries {
    const key = seriesKey(labels);
    let series = this.#series.get(key);
    if (!series) {
      series = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.#series.set(key, series);
    }
    const found = series;
    const buckets = this.buckets;
    return {
      observe: (value) => {
        for (let i = 0; i < buckets.length; i++) {
          if (value <= buckets[i]) found.counts[i]++;
        }
        found.sum += value;
        found.count++;
      },
    };
  }

  series(): Series[] {
    return [...this.#series.values()].map((s) => ({ ...s, counts: [...s.counts] }));
  }
}

export class Registry {
  readonly #families: Family[] = [];

  counter(name: string, help: string): Counter {
    const c = new Counter(name, help);
    this.#families.push({ name, help, type: "counter", summed: true, series: () => c.series() });
    return c;
  }

  gauge(name: string, help: string): Gauge {
    const g = new Gauge(name, help);
    this.#families.push({ name, help, type: "gauge", summed: false, series: () => g.series() });
    return g;
  }

  histogram(name: string, help: string, buckets: readonly number[]): Histogram {
    const h = new Histogram(name, help, [...buckets].sort((a, b) => a - b));
    this.#families.push({
      name,
      help,
      type: "histogram",
      summed: true,
      buckets: h.buckets,
      series: () => h.series(),
    });
    return h;
  }

  /**
   * A family whose samples are read from elsewhere at scrape time: `"thread"` when this thread
   * counted them (summed over workers), `"shared"` when every worker reads the same (from KV).
   */
  sampled(
    name: string,
    help: string,
    type: "counter" | "gauge",
    source: "thread" | "shared",
    samples: () => { labels?: Labels; value: number }[],
  ) {
    this.#families.push({
      name,
      help,
      type,
      summed: source === "thread" && type === "counter",
      series: () => samples().map((s) => ({ labels: s.labels ?? {}, value: s.value })),
    });
  }

  /** This thread's values of every family that adds up across workers. */
  snapshot(): MetricsSnapshot {
    const snapshot: MetricsSnapshot = {};
    for (const f of this.#families) if (f.summed) snapshot[f.name] = f.series();
    return snapshot;
  }

  /**
   * The text exposition format: HELP and TYPE for every family, then its samples, with the values
   * of `others` (the other workers' snapshots) added to the families that add up.
   */
  render(others: MetricsSnapshot[] = []): string {
    const lines: string[] = [];
    for (const f of this.#families) {
      lines.push(`# HELP ${f.name} ${f.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}`);
      lines.push(`# TYPE ${f.name} ${f.type}`);
      const series = f.summed ? addUp(f.series(), others.map((o) => o[f.name] ?? [])) : f.series();
      for (const s of series) {
        if ("value" in s) {
          lines.push(`${f.name}${labelText(s.labels)} ${numberText(s.value)}`);
          continue;
        }
        (f.buckets ?? []).forEach((bound, i) => {
          lines.push(
            `${f.name}_bucket${labelText(s.labels, { le: numberText(bound) })} ${s.counts[i]}`,
          );
        });
        lines.push(`${f.name}_bucket${labelText(s.labels, { le: "+Inf" })} ${s.count}`);
        lines.push(`${f.name}_sum${labelText(s.labels)} ${numberText(s.sum)}`);
        lines.push(`${f.name}_count${labelText(s.labels)} ${s.count}`);
      }
    }
    return lines.join("\n") + "\n";
  }
}

/** Own series plus the same series (same labels) of the others; a series only others have is kept. */
function addUp(own: Series[], others: Series[][]): Series[] {
  if (others.length === 0) return own;
  const byKey = new Map(own.map((s) => [seriesKey(s.labels), s]));
  for (const list of others) {
    for (const s of list) {
      const key = seriesKey(s.labels);
      const mine = byKey.get(key);
      if (!mine) {
        byKey.set(key, "value" in s ? { ...s } : { ...s, counts: [...s.counts] });
      } else if ("value" in mine && "value" in s) {
        mine.value += s.value;
      } else if (!("value" in mine) && !("value" in s)) {
        s.counts.forEach((n, i) => mine.counts[i] = (mine.counts[i] ?? 0) + n);
        mine.sum += s.sum;
        mine.count += s.count;
      }
    }
  }
  return [...byKey.values()];
}

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
