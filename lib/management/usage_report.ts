/**
 * The usage report: an app's usage summed per UTC day, model, key or end user over up to 93 days.
 *
 * A report's cost follows the days it shows and the records added since the last, not the records
 * the days hold. Each day's usage is summed once into a rollup, cached in KV beside the day's
 * version (`keys.usageDayVersion`), which every commit writing usage records created on that day
 * raises by their number in the same commit. A rollup made at the version the day still has is
 * exact. When the day has changed (today, as traffic runs; or a record that lands late: a slice's
 * next post, a retry after KV answers again), the records after the rollup's last are added to it,
 * and the sum is taken for the whole day when it sums as many records as the day has: both of its
 * counts (`usageDayRecords` counts only what builds since 2026-11-28 wrote) agree with it. A late
 * record, which sorts before the rollup's last, leaves the sum short, and the day is summed whole.
 * So a report reads each day's version and rollup (ten keys to a call) and walks the records added
 * since the last report, in practice today's few.
 */
import {
  keys,
  type UsageRecord,
  type UsageRollupChunk,
  type UsageRollupGrouping,
  type UsageRollupRow,
  utcDay,
} from "@/lib/db.ts";
import { getManyChunked, KV_VALUE_CHUNK_BYTES, type Micros } from "@/lib/core/mod.ts";
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
const CHUNK_BYTES = KV_VALUE_CHUNK_BYTES;
/** Parts written in one commit: ten full parts stay under KV's 800 KiB per commit. */
const CHUNKS_PER_COMMIT = 10;
/**
 * Walks of the records after a changed day's rollup before it is summed whole: a record landing
 * between a walk and the count that follows it leaves them apart, a late record every time.
 */
const INCREMENT_ATTEMPTS = 3;
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

/** A day's groups as summed from its records: how many, and the last record's id in key order. */
interface DaySum {
  rows: UsageRollupRow[];
  records: number;
  lastId: string | null;
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
  const whole = (head: UsageRollupChunk, chunk: UsageRollupChunk | null) =>
    chunk !== null && chunk.version === head.version && chunk.chunks === head.chunks;
  // A rollup is read whole when it is current, or when a changed day can be summed on from it.
  const read = heads.map((head, i) =>
    head.value !== null && (head.value.version === versionOf(i) || head.value.lastId !== undefined)
  );
  const rest = days.flatMap((day, i) =>
    read[i]
      ? Array.from(
        { length: heads[i].value!.chunks - 1 },
        (_, n) => ({ i, key: keys.usageRollupChunk(appId, day, grouping, n + 1) }),
      )
      : []
  );
  const restEntries = await getManyChunked<UsageRollupChunk>(kv, rest.map((r) => r.key));
  const rollups: (UsageRollupChunk | null)[] = heads.map((head, i) =>
    read[i] ? { ...head.value!, rows: [...head.value!.rows] } : null
  );
  rest.forEach(({ i }, n) => {
    const chunk = restEntries[n].value;
    // A part missing, or left from another version: the day is summed again.
    if (!whole(heads[i].value!, chunk)) rollups[i] = null;
    else rollups[i]?.rows.push(...chunk!.rows);
  });

  const now = Date.now();
  const out: UsageRollupRow[][] = [];
  for (const [i, day] of days.entries()) {
    const rollup = rollups[i];
    if (rollup !== null && rollup.version === versionOf(i)) {
      out[i] = rollup.rows;
      continue;
    }
    let version = versions[i];
    // The records after the rollup's last, added to it: the whole day when the day counts as
    // many records as the sum has, and no older build wrote to it (then its two counts agree).
    // Summed on only from a rollup whose version counts its records (one made at a version that
    // counted them), so that no record the counts never saw hides in it. A record landing between
    // the walk and the count leaves them apart: walked again, as briefly; a sum short of what was
    // counted before its walk missed a late record, and the day is summed whole at once.
    let added: DaySum | null = null;
    const base = rollup?.lastId !== undefined && rollup.records !== undefined &&
        rollup.version === BigInt(rollup.records)
      ? { rows: rollup.rows, records: rollup.records, lastId: rollup.lastId }
      : null;
    let before = base && await dayCounts(kv, appId, day);
    for (let attempt = 0; base && before && attempt < INCREMENT_ATTEMPTS; attempt++) {
      const summed = await sumDay(kv, appId, day, grouping, base);
      const counts = await dayCounts(kv, appId, day);
      version = counts.version;
      if (counts.whole(summed.records)) {
        added = summed;
        break;
      }
      if (summed.records < before.records) break;
      before = counts;
    }
    if (added) {
      out[i] = added.rows;
      await cacheRollup(kv, appId, day, grouping, added, version);
      continue;
    }
    const summed = await sumDay(kv, appId, day, grouping);
    out[i] = summed.rows;
    const counts = await dayCounts(kv, appId, day);
    if (counts.whole(summed.records)) version = counts.version;
    else {
      const dayEnd = Date.parse(`${day}T00:00:00Z`) + DAY_MS;
      if (version.versionstamp === null && dayEnd > now - UNVERSIONED_SETTLE_MS) continue;
    }
    await cacheRollup(kv, appId, day, grouping, summed, version);
  }
  return out;
}

/**
 * The day's version and its count of records, read at one moment after its records were: a sum of
 * as many records is the whole day at that version, since a record is counted in the commit that
 * writes it, is never written twice, and every record summed was already there.
 */
async function dayCounts(kv: Deno.Kv, appId: string, day: string) {
  const [version, records] = await kv.getMany<[Deno.KvU64, Deno.KvU64]>([
    keys.usageDayVersion(appId, day),
    keys.usageDayRecords(appId, day),
  ]);
  const whole = (summed: number) =>
    version.value !== null && records.value !== null &&
    version.value.value === records.value.value && records.value.value === BigInt(summed);
  return { version, records: Number(records.value?.value ?? 0n), whole };
}

/**
 * The day's usage records summed per group, in the order of their first record; with `from`, the
 * records after its last added to its groups.
 */
async function sumDay(
  kv: Deno.Kv,
  appId: string,
  day: string,
  grouping: UsageRollupGrouping,
  from?: { rows: UsageRollupRow[]; records: number; lastId: string | null },
): Promise<DaySum> {
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
  for (const row of from?.rows ?? []) {
    groups.set(JSON.stringify(row.slice(0, -4)), [...row] as UsageRollupRow);
  }
  let records = from?.records ?? 0;
  let lastId = from?.lastId ?? null;
  const selector = {
    start: [...keys.appUsage(appId), lastId ?? usageIdAt(start)],
    end: [...keys.appUsage(appId), usageIdAt(start + DAY_MS)],
  };
  for await (const entry of kv.list<UsageRecord>(selector, { batchSize: 500 })) {
    const id = entry.key[entry.key.length - 1] as string;
    if (id === from?.lastId) continue;
    const r = entry.value;
    const parts = partsOf(r);
    const key = JSON.stringify(parts);
    let row = groups.get(key);
    if (!row) groups.set(key, row = [...parts, 0, 0, 0, 0]);
    const n = row.length;
    (row[n - 4] as number)++;
    (row[n - 3] as number) += r.promptTokens;
    (row[n - 2] as number) += r.completionTokens;
    (row[n - 1] as number) += r.cost;
    records++;
    lastId = id;
  }
  return { rows: [...groups.values()], records, lastId };
}

/**
 * Caches a day's groups as summed at `version`, in parts of at most CHUNK_BYTES. Each commit checks
 * the day's version is still the one read before the records were (or after them, for a sum proved
 * whole): a record landing meanwhile leaves the rollup unwritten (or its parts mismatched, which a
 * reader takes for none). A cache: the report has its answer either way.
 */
async function cacheRollup(
  kv: Deno.Kv,
  appId: string,
  day: string,
  grouping: UsageRollupGrouping,
  summed: DaySum,
  version: Deno.KvEntryMaybe<Deno.KvU64>,
): Promise<void> {
  const parts = chunkRows(summed.rows);
  const value = (n: number): UsageRollupChunk => ({
    version: version.value?.value ?? 0n,
    chunks: parts.length,
    rows: parts[n],
    records: summed.records,
    lastId: summed.lastId,
  });
  try {
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
  } catch {
    // The next report sums the day again.
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
