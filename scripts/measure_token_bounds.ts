/**
 * Measures the Claude token bound (lib/gateway/claude_tokens.ts) on the multilingual corpus
 * against Claude's legacy tokenizer, OpenAI's o200k tokenizer and UTF-8 bytes, and its speed.
 *
 *   deno run -A scripts/measure_token_bounds.ts              table per sample, per script, speed
 *   deno run -A scripts/measure_token_bounds.ts --markdown   the same as Markdown (docs/token-bounds.md)
 *   deno run -A scripts/measure_token_bounds.ts --rare-pairs the RARE_PAIRS table, from the legacy vocabulary
 */
import { countTokens as o200kTokens } from "gpt-tokenizer/encoding/o200k_base";
import { claudeTokenBound } from "../lib/gateway/claude_tokens.ts";
import {
  byteCeiling,
  type CorpusSample,
  headroomOf,
  legacyClaudeTokens,
  legacyVocabulary,
  loadCorpus,
  requiredBound,
  utf8Bytes,
} from "../tests/claude_token_reference.ts";

const markdown = Deno.args.includes("--markdown");

if (Deno.args.includes("--rare-pairs")) {
  printRarePairs();
  Deno.exit(0);
}

interface Row {
  sample: CorpusSample;
  chars: number;
  bytes: number;
  ceiling: number;
  o200k: number;
  legacy: number;
  bound: number;
  headroom: number;
  required: number;
}

const rows: Row[] = loadCorpus().map((sample) => {
  const legacy = legacyClaudeTokens(sample.text);
  return {
    sample,
    chars: [...sample.text].length,
    bytes: utf8Bytes(sample.text),
    ceiling: byteCeiling(sample.text),
    o200k: o200kTokens(sample.text, { disallowedSpecial: new Set() }),
    legacy,
    bound: claudeTokenBound(sample.text),
    headroom: headroomOf(sample, legacy),
    required: requiredBound(sample, legacy),
  };
});

const ratio = (a: number, b: number) => (a / b).toFixed(2);
const header = [
  "sample",
  "script",
  "kind",
  "chars",
  "bytes",
  "o200k",
  "legacy",
  "bound",
  "bound/legacy",
  "bound/o200k",
  "needed",
  "ok",
];
printTable(
  header,
  rows.map((r) => [
    r.sample.id,
    r.sample.script,
    r.sample.kind,
    r.chars,
    r.bytes,
    r.o200k,
    r.legacy,
    r.bound,
    ratio(r.bound, r.legacy),
    ratio(r.bound, r.o200k),
    `${r.required} (${r.headroom.toFixed(2)}×)`,
    r.bound >= r.required ? "yes" : "NO",
  ]),
);

// Per script: the spread of bound/legacy, and how far legacy is from bytes and from o200k.
const byScript = new Map<string, Row[]>();
for (const r of rows) byScript.set(r.sample.script, [...byScript.get(r.sample.script) ?? [], r]);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
console.log();
printTable(
  [
    "script",
    "samples",
    "bound/legacy min",
    "median",
    "max",
    "legacy/o200k (written)",
    "ceiling/legacy min",
  ],
  [...byScript].map(([script, rs]) => {
    const br = rs.map((r) => r.bound / r.legacy);
    const written = rs.filter((r) => r.sample.note === undefined);
    return [
      script,
      rs.length,
      Math.min(...br).toFixed(2),
      median(br).toFixed(2),
      Math.max(...br).toFixed(2),
      written.length ? ratio(sum(written, "legacy"), sum(written, "o200k")) : "-",
      Math.min(...rs.map((r) => r.ceiling / r.legacy)).toFixed(2),
    ];
  }),
);

const english = rows.filter((r) => r.sample.id.startsWith("en-"));
const failures = rows.filter((r) => r.bound < r.required);
console.log();
console.log(
  `English prose: bound/legacy ${ratio(sum(english, "bound"), sum(english, "legacy"))}, ` +
    `bound/o200k ${ratio(sum(english, "bound"), sum(english, "o200k"))}, ` +
    `bytes/legacy ${ratio(sum(english, "bytes"), sum(english, "legacy"))}`,
);
console.log(`samples short of their headroom: ${failures.length} of ${rows.length}`);

measureSpeed();

function sum(rs: Row[], key: "legacy" | "o200k" | "bound" | "bytes") {
  return rs.reduce((n, r) => n + r[key], 0);
}

function printTable(head: string[], body: (string | number)[][]) {
  if (markdown) {
    console.log(`| ${head.join(" | ")} |`);
    console.log(
      `|${
        head.map((_, i) => (i < 3 && head[0] === "sample") || i === 0 ? "---" : "---:").join("|")
      }|`,
    );
    for (const row of body) console.log(`| ${row.join(" | ")} |`);
    return;
  }
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => String(r[i]).length)));
  const line = (cells: (string | number)[]) =>
    cells.map((c, i) =>
      typeof c === "number" || i > 2 ? String(c).padStart(widths[i]) : String(c).padEnd(widths[i])
    )
      .join("  ");
  console.log(line(head));
  for (const row of body) console.log(line(row));
}

/** Throughput on a prompt-sized text and on a large one, both mixing every corpus sample. */
function measureSpeed() {
  const all = loadCorpus().map((s) => s.text).join("\n");
  for (const targetBytes of [40_000, 8_000_000]) {
    let text = all;
    while (utf8Bytes(text) < targetBytes) text += all;
    text = text.slice(0, Math.floor(text.length * targetBytes / utf8Bytes(text)));
    const bytes = utf8Bytes(text);
    for (let i = 0; i < 5; i++) claudeTokenBound(text); // warm up, fill the normalization cache
    const runs = Math.max(5, Math.round(200_000_000 / bytes));
    const start = performance.now();
    for (let i = 0; i < runs; i++) claudeTokenBound(text);
    const ms = (performance.now() - start) / runs;
    const o200kStart = performance.now();
    const o200kRuns = Math.max(1, Math.round(runs / 50));
    for (let i = 0; i < o200kRuns; i++) o200kTokens(text, { disallowedSpecial: new Set() });
    const o200kMs = (performance.now() - o200kStart) / o200kRuns;
    console.log(
      `speed on ${(bytes / 1e3).toFixed(0)} kB of mixed corpus text: ${ms.toFixed(3)} ms a call, ` +
        `${(bytes / 1e3 / ms).toFixed(0)} MB/s (o200k count on the same text: ${
          (bytes / 1e3 / o200kMs).toFixed(1)
        } MB/s)`,
    );
  }
  const ascii = "The quick brown fox jumps over the lazy dog; return x + 1; ".repeat(700);
  for (let i = 0; i < 5; i++) claudeTokenBound(ascii);
  const start = performance.now();
  for (let i = 0; i < 2000; i++) claudeTokenBound(ascii);
  const ms = (performance.now() - start) / 2000;
  console.log(
    `speed on ${(ascii.length / 1e3).toFixed(0)} kB of ASCII: ${
      (ascii.length / 1e3 / ms).toFixed(0)
    } MB/s`,
  );
}

/**
 * The rare letter pairs of lib/gateway/claude_tokens.ts: for each pair of lower-case letters, how
 * many of the legacy vocabulary's letter-only tokens (a leading space dropped, lower-cased, two
 * letters or more) contain it; a pair in at most 100 of them is rare.
 */
function printRarePairs() {
  const counts = new Map<string, number>();
  const decoder = new TextDecoder("utf-8", { fatal: true });
  for (const bytes of legacyVocabulary()) {
    let word: string;
    try {
      word = decoder.decode(new Uint8Array(bytes)).replace(/^ /, "");
    } catch {
      continue;
    }
    if (word.length < 2 || !/^[A-Za-z]+$/.test(word)) continue;
    word = word.toLowerCase();
    for (let i = 0; i + 1 < word.length; i++) {
      counts.set(word.slice(i, i + 2), (counts.get(word.slice(i, i + 2)) ?? 0) + 1);
    }
  }
  const letters = "abcdefghijklmnopqrstuvwxyz";
  const masks = [...letters].map((a) =>
    [...letters].reduce((m, b, j) => (counts.get(a + b) ?? 0) <= 100 ? m | (1 << j) : m, 0)
  );
  console.log(`const RARE_PAIRS = [${masks.join(", ")}];`);
}
