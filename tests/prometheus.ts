/**
 * A strict reader of the Prometheus text exposition format (0.0.4), for tests: every sample must
 * belong to a family declared by HELP and TYPE before it, and every line must parse.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
  /** The value of the one sample with this name whose labels include `labels`, or undefined. */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** Every sample with this name whose labels include `labels`. */
  all(name: string, labels?: Record<string, string>): Sample[];
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)$`);
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\[\\"n])*)"(?:,|$)/;

export function parsePrometheus(text: string): Exposition {
  if (!text.endsWith("\n")) throw new Error("exposition must end with a newline");
  const types = new Map<string, string>();
  const helps = new Set<string>();
  const samples: Sample[] = [];
  for (const [i, line] of text.slice(0, -1).split("\n").entries()) {
    const where = `line ${i + 1}: ${JSON.stringify(line)}`;
    let m;
    if ((m = new RegExp(`^# HELP (${NAME}) (.*)$`).exec(line))) {
      helps.add(m[1]);
      continue;
    }
    if (
      (m = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`).exec(line))
    ) {
      if (!helps.has(m[1])) throw new Error(`TYPE before HELP, ${where}`);
      types.set(m[1], m[2]);
      continue;
    }
    if (!(m = SAMPLE.exec(line))) throw new Error(`unparsable ${where}`);
    const [, name, labelText = "", valueText] = m;
    const family = [...types.keys()].find((f) =>
      name === f ||
      (types.get(f) === "histogram" && /^_(bucket|sum|count)$/.test(name.slice(f.length)) &&
        name.startsWith(f))
    );
    if (!family) throw new Error(`sample of an undeclared family, ${where}`);
    const labels: Record<string, string> = {};
    let rest = labelText;
    while (rest.length > 0) {
      const l = LABEL.exec(rest);
      if (!l) throw new Error(`bad labels, ${where}`);
      labels[l[1]] = l[2].replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
      rest = rest.slice(l[0].length);
    }
    const value = valueText === "+Inf"
      ? Infinity
      : valueText === "-Inf"
      ? -Infinity
      : Number(valueText);
    if (Number.isNaN(value) && valueText !== "NaN") throw new Error(`bad value, ${where}`);
    samples.push({ name, labels, value });
  }
  const matches = (s: Sample, name: string, labels: Record<string, string>) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v);
  return {
    types,
    samples,
    all: (name, labels = {}) => samples.filter((s) => matches(s, name, labels)),
    value(name, labels = {}) {
      const found = samples.filter((s) => matches(s, name, labels));
      if (found.length > 1) throw new Error(`${found.length} samples of ${name} match`);
      return found[0]?.value;
    },
  };
}
