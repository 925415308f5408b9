/**
 * A minimal Prometheus registry: counters, gauges and histograms with labels, rendered in the text
 * exposition format (version 0.0.4). Values live in this process; an operator scrapes every instance
 * and sums in Prometheus, as with any multi-instance service.
 */
export type Labels = Record<string, string>;

interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  render(): string[];
}

/** Label values are escaped as the format requires: backslash, double quote and newline. */
function labelText(labels: Labels, extra?: Labels): string {
  const all = { ...labels, ...extra };
  const parts = Object.entries(all).map(([k, v]) =>
    `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`
  );
  return parts.length ? `{${parts.join(",")}}` : "";
}

function seriesKey(labels: Labels): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => a < b ? -1 : 1));
}

function numberText(value: number): string {
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return Number.isNaN(value) ? "NaN" : String(value);
}

export class Counter {
  readonly #series = new Map<string, { labels: Labels; value: number }>();
  constructor(readonly name: string, readonly help: string) {}

  inc(labels: Labels = {}, by = 1) {
    const key = seriesKey(labels);
    const series = this.#series.get(key) ?? { labels, value: 0 };
    series.value += by;
    this.#series.set(key, series);
  }

  render(): string[] {
    return [...this.#series.values()].map((s) =>
      `${this.name}${labelText(s.labels)} ${numberText(s.value)}`
    );
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

  render(): string[] {
    return this.#samples.map((s) => `${this.name}${labelText(s.labels)} ${numberText(s.value)}`);
  }
}

export class Histogram {
  readonly #series = new Map<
    string,
    { labels: Labels; counts: number[]; sum: number; count: number }
  >();
  constructor(readonly name: string, readonly help: string, readonly buckets: readonly number[]) {}

  observe(value: number, labels: Labels = {}) {
    const key = seriesKey(labels);
    let series = this.#series.get(key);
    if (!series) {
      series = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.#series.set(key, series);
    }
    this.buckets.forEach((bound, i) => {
      if (value <= bound) series.counts[i]++;
    });
    series.sum += value;
    series.count++;
  }

  render(): string[] {
    const lines: string[] = [];
    for (const s of this.#series.values()) {
      const count = s.count;
      this.buckets.forEach((bound, i) => {
        lines.push(
          `${this.name}_bucket${labelText(s.labels, { le: numberText(bound) })} ${s.counts[i]}`,
        );
      });
      lines.push(`${this.name}_bucket${labelText(s.labels, { le: "+Inf" })} ${count}`);
      lines.push(`${this.name}_sum${labelText(s.labels)} ${numberText(s.sum)}`);
      lines.push(`${this.name}_count${labelText(s.labels)} ${count}`);
    }
    return lines;
  }
}

export class Registry {
  readonly #families: Family[] = [];

  counter(name: string, help: string): Counter {
    const c = new Counter(name, help);
    this.#families.push({ name, help, type: "counter", render: () => c.render() });
    return c;
  }

  gauge(name: string, help: string): Gauge {
    const g = new Gauge(name, help);
    this.#families.push({ name, help, type: "gauge", render: () => g.render() });
    return g;
  }

  histogram(name: string, help: string, buckets: readonly number[]): Histogram {
    const h = new Histogram(name, help, [...buckets].sort((a, b) => a - b));
    this.#families.push({ name, help, type: "histogram", render: () => h.render() });
    return h;
  }

  /** A family whose samples are read from elsewhere at scrape time (a counter kept by another module). */
  sampled(
    name: string,
    help: string,
    type: "counter" | "gauge",
    samples: () => { labels?: Labels; value: number }[],
  ) {
    this.#families.push({
      name,
      help,
      type,
      render: () =>
        samples().map((s) => `${name}${labelText(s.labels ?? {})} ${numberText(s.value)}`),
    });
  }

  /** The text exposition format: HELP and TYPE for every family, then its samples. */
  render(): string {
    const lines: string[] = [];
    for (const f of this.#families) {
      lines.push(`# HELP ${f.name} ${f.help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")}`);
      lines.push(`# TYPE ${f.name} ${f.type}`);
      lines.push(...f.render());
    }
    return lines.join("\n") + "\n";
  }
}

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
