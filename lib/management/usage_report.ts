/**
 * The usage report: an app's usage summed per UTC day, model, key or end user over up to 93 days.
 *
 * A report's cost follows the days it shows, not the records they hold. Each day's usage is summed
 * once into a rollup, cached in KV beside the day's version (`keys.usageDayVersion`), which every
 * commit writing usage records created on that day raises in the same commit. A rollup made at the
 * version the day still has is exact: a record that lands late (a slice's next post, a retry after
 * KV answers again) raises it, and the day is summed again. So a report reads each day's version
 * and rollup (ten keys to a call) and walks the records of the days that changed only, in
 * practice today.
 */
import {
  keys,
  type UsageRecord,
  type UsageRollupChunk,
  type UsageRollupGrouping,
  type UsageRollupRow,
  utcDay,
} from "@/lib/db.ts";
import { getManyChunked, type Micros } from "@/lib/core/mod.ts";
import type { UsageFilter } from "./listings.ts";

export type ReportGrouping = "day" | "model" | "key" | "user";

export interface ReportRow {
  group: string | null;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cost: Micros;
}

/** The widest span one report covers. */
export const MAX_REPORT_DAYS = 93;
/** The earliest day a report may begin; the last is 9999-12-31 (four-digit years). */
export const FIRST_REPORT_DAY = "2000-01-01";
const DAY_MS = 24 * 60 * 60 * 1000;
/** Kept past the longest report's reach; a day read after that is summed again. */
const ROLLUP_RETENTION_MS = 100 * DAY_MS;
/**
 * The estimated bytes of one rollup part, under KV's 64 KiB per value (the estimate counts every
 * character as two bytes, as V8 stores text that is not Latin-1).
 */
const CHUNK_BYTES = 60_000;
/** Parts written in one commit: ten full parts stay under KV's 800 KiB per commit. */
const CHUNKS_PER_COMMIT = 10;
/**
 * A day whose version was never raised may still be receiving records from an instance that does
 * not raise it (one not yet upgraded): such a day is cached only once it is this far in the past.
 */
const UNVERSIONED_SETTLE_MS = 2 * DAY_MS;

/** The first id a record created at `ms` may have (ids begin with their time in base 36). */
function usageIdAt(ms: number): string {
  return `use_${ms.toString(36).padStart(10, "0")}`;
}

/**
 * Usage summed per UTC day, model, key or end user over the days `from` to `to` (inclusive,
 * YYYY-MM-DD), sorted by group (requests without an end user form the group `null`, first).
 */
export async function usageReport(
  kv: Deno.Kv,
  appId: string,
  options: { groupBy: ReportGrouping; from: string; to: string; filter?: UsageFilter },
): Promise<ReportRow[]> {
  const start = Date.parse(`${options.from}T00:00:00Z`);
  const end = Date.parse(`${options.to}T00:00:00Z`) + DAY_MS;
  // No day between them, or a day before the ids' clock starts: a negative time has no id.
  if (!(start >= 0 && start < end)) return [];
  const days: string[] = [];
  for (let ms = start; ms < end; ms += DAY_MS) days.push(utcDay(ms));
  const filter = options.filter ?? {};
  const filtering = Object.values(filter).some((v) => v !== undefined);
  // A filter on any field needs the day's groups by all three; unfiltered, the report's own do.
  const grouping: UsageRollupGrouping = filtering ? "detail" : options.groupBy;
  const rollups = await dayRollups(kv, appId, days, grouping);

  const groups = new Map<string | null, ReportRow>();
  rollups.forEach((rows, i) => {
    for (const row of rows) {
      const parts = row.slice(0, -4) as (string | null)[];
      const [requests, promptTokens, completionTokens, cost] = row.slice(-4) as number[];
      let group: string | null;
      if (grouping === "detail") {
        const [model, keyId, user] = parts as [string, string, string | null];
        if (
          (filter.user !== undefined && user !== filter.user) ||
          (filter.keyId !== undefined && keyId !== filter.keyId) ||
          (filter.model !== undefined && model !== filter.model)
        ) continue;
        group = options.groupBy === "day"
          ? days[i]
          : options.groupBy === "model"
          ? model
          : options.groupBy === "key"
          ? keyId
          : user;
      } else {
        group = parts[0];
      }
      const sum = groups.get(group) ??
        { group, requests: 0, promptTokens: 0, completionTokens: 0, cost: 0 };
      sum.requests += requests;
      sum.promptTokens += promptTokens;
      sum.completionTokens += completionTokens;
      sum.cost += cost;
      groups.set(group, sum);
    }
  });
  return [...groups.values()].sort((a, b) =>
    a.group === b.group
      ? 0
      : a.group === null
      ? -1
      : b.group === null
      ? 1
      : a.group < b.group
      ? -1
      : 1
  );
}

/** Each day's groups: from its cached rollup while that is current, else summed from its records. */
async function dayRollups(
  kv: Deno.Kv,
  appId: string,
  days: string[],
  grouping: UsageRollupGrouping,
): Promise<UsageRollupRow[][]> {
  const [versions, heads] = await Promise.all([
    getManyChunked<Deno.KvU64>(kv, days.map((day) => keys.usageDayVersion(appId, day))),
    getManyChunked<UsageRollupChunk>(
      kv,
      days.map((day) => keys.usageRollupChunk(appId, day, grouping, 0)),
    ),
  ]);
  const versionOf = (i: number) => versions[i].value?.value ?? 0n;
  const current = (i: number, chunk: UsageRollupChunk | null, chunks: number) =>
    chunk !== null && chunk.version === versionOf(i) && chunk.chunks === chunks;

  const out: (UsageRollupRow[] | null)[] = heads.map((head, i) =>
    head.value && current(i, head.value, head.value.chunks) ? [...head.value.rows] : null
  );
  // The further parts of the current rollups that have them.
  const rest = days.flatMap((day, i) =>
    out[i] === null ? [] : Array.from(
      { length: heads[i].value!.chunks - 1 },
      (_, n) => ({ i, key: keys.usageRollupChunk(appId, day, grouping, n + 1) }),
    )
  );
  const restEntries = await getManyChunked<UsageRollupChunk>(kv, rest.map((r) => r.key));
  rest.forEach(({ i }, n) => {
    const chunk = restEntries[n].value;
    // A part missing, or left from another version: the day is summed again.
    if (!current(i, chunk, heads[i].value!.chunks)) out[i] = null;
    else out[i]?.push(...chunk!.rows);
  });

  const now = Date.now();
  for (const [i, day] of days.entries()) {
    if (out[i] !== null) continue;
    const rows = await sumDay(kv, appId, day, grouping);
    out[i] = rows;
    const dayEnd = Date.parse(`${day}T00:00:00Z`) + DAY_MS;
    if (versions[i].versionstamp === null && dayEnd > now - UNVERSIONED_SETTLE_MS) continue;
    try {
      await writeRollup(kv, appId, day, grouping, rows, versions[i]);
    } catch {
      // A cache: the report has its answer, and the next one sums the day again.
    }
  }
  return out as UsageRollupRow[][];
}

/** The day's usage records summed per group, in the order of their first record. */
async function sumDay(
  kv: Deno.Kv,
  appId: string,
  day: string,
  grouping: UsageRollupGrouping,
): Promise<UsageRollupRow[]> {
  const start = Date.parse(`${day}T00:00:00Z`);
  const partsOf = (r: UsageRecord): (string | null)[] =>
    grouping === "day"
      ? [utcDay(r.createdAt)]
      : grouping === "model"
      ? [r.model]
      : grouping === "key"
      ? [r.keyId]
      : grouping === "user"
      ? [r.user ?? null]
      : [r.model, r.keyId, r.user ?? null];
  const groups = new Map<string, UsageRollupRow>();
  const selector = {
    start: [...keys.appUsage(appId), usageIdAt(start)],
    end: [...keys.appUsage(appId), usageIdAt(start + DAY_MS)],
  };
  for await (const entry of kv.list<UsageRecord>(selector, { batchSize: 500 })) {
    const r = entry.value;
    const parts = partsOf(r);
    const id = JSON.stringify(parts);
    let row = groups.get(id);
    if (!row) groups.set(id, row = [...parts, 0, 0, 0, 0]);
    const n = row.length;
    (row[n - 4] as number)++;
    (row[n - 3] as number) += r.promptTokens;
    (row[n - 2] as number) += r.completionTokens;
    (row[n - 1] as number) += r.cost;
  }
  return [...groups.values()];
}

/**
 * Caches a day's groups as summed at `version`, in parts of at most CHUNK_BYTES. Each commit checks
 * the day's version is still the one read before the records were: a record landing meanwhile
 * leaves the rollup unwritten (or its parts mismatched, which a reader takes for none).
 */
async function writeRollup(
  kv: Deno.Kv,
  appId: string,
  day: string,
  grouping: UsageRollupGrouping,
  rows: UsageRollupRow[],
  version: Deno.KvEntryMaybe<Deno.KvU64>,
): Promise<void> {
  const parts = chunkRows(rows);
  const value = (n: number): UsageRollupChunk => ({
    version: version.value?.value ?? 0n,
    chunks: parts.length,
    rows: parts[n],
  });
  for (let first = 0; first < parts.length; first += CHUNKS_PER_COMMIT) {
    const atomic = kv.atomic().check({
      key: keys.usageDayVersion(appId, day),
      versionstamp: version.versionstamp,
    });
    for (let n = first; n < Math.min(parts.length, first + CHUNKS_PER_COMMIT); n++) {
      atomic.set(keys.usageRollupChunk(appId, day, grouping, n), value(n), {
        expireIn: ROLLUP_RETENTION_MS,
      });
    }
    if (!(await atomic.commit()).ok) return;
  }
}

/** Rows in parts whose estimated size stays under CHUNK_BYTES; always at least one part. */
export function chunkRows(rows: UsageRollupRow[]): UsageRollupRow[][] {
  const parts: UsageRollupRow[][] = [[]];
  let bytes = 0;
  for (const row of rows) {
    const size = rowBytes(row);
    if (bytes + size > CHUNK_BYTES && parts[parts.length - 1].length > 0) {
      parts.push([]);
      bytes = 0;
    }
    parts[parts.length - 1].push(row);
    bytes += size;
  }
  return parts;
}

/** A generous estimate of a row's serialized size: two bytes a character, ten a number. */
function rowBytes(row: UsageRollupRow): number {
  let bytes = 8;
  for (const part of row) bytes += typeof part === "string" ? 2 * part.length + 6 : 10;
  return bytes;
}
