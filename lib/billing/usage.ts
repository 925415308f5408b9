/**
 * Read models of an app's spending for its owner: request history, daily and per-model sums, and
 * the wallet's activity (credits and spend together).
 */
import { keys, type LedgerEntry, type UsageRecord, utcDay } from "@/lib/db.ts";
import { getManyChunked, type Micros } from "@/lib/core/mod.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

/** A page of usage records as the dashboard shows it. */
export interface UsagePage {
  records: UsageRecord[];
  /** Pass back to get the next (older) page; null on the last page. */
  nextCursor: string | null;
}

export interface DaySpend {
  day: string;
  micros: Micros;
}

/** Spend per UTC day over the last `days` days, oldest first, zero for quiet days. */
export async function dailySpend(
  kv: Deno.Kv,
  appId: string,
  now = Date.now(),
  days = 30,
): Promise<DaySpend[]> {
  const list = Array.from({ length: days }, (_, i) => utcDay(now - (days - 1 - i) * DAY_MS));
  const entries = await getManyChunked<Deno.KvU64>(kv, list.map((d) => keys.dailySpend(appId, d)));
  return list.map((day, j) => ({ day, micros: Number(entries[j].value?.value ?? 0n) }));
}

export interface ModelSpend {
  model: string;
  micros: Micros;
}

/** Spend per model since the app was created, largest first. */
export async function spendByModel(kv: Deno.Kv, appId: string): Promise<ModelSpend[]> {
  const out: ModelSpend[] = [];
  for await (const entry of kv.list<Deno.KvU64>({ prefix: keys.appModelSpend(appId) })) {
    out.push({ model: String(entry.key[2]), micros: Number(entry.value.value) });
  }
  return out.sort((a, b) => b.micros - a.micros || a.model.localeCompare(b.model));
}

export type WalletActivity =
  | { kind: "credit"; at: number; entry: LedgerEntry }
  | { kind: "spend"; at: number; usage: UsageRecord };

/**
 * Credits and charges in one list, newest first. Each may be a page of its own kind taken at its
 * own point (the dashboard's wallet page pages the two apart).
 */
export function mergedActivity(
  credits: readonly LedgerEntry[],
  charges: readonly UsageRecord[],
): WalletActivity[] {
  return [
    ...credits.map((entry) => ({ kind: "credit" as const, at: entry.createdAt, entry })),
    ...charges.map((usage) => ({ kind: "spend" as const, at: usage.createdAt, usage })),
  ].sort((a, b) => b.at - a.at);
}

/**
 * The app's usage that neither its reservation nor the balance covered, since it was created:
 * never charged, not part of `spent`.
 */
export async function unchargedOf(kv: Deno.Kv, appId: string): Promise<Micros> {
  const entry = await kv.get<Deno.KvU64>(keys.appUncharged(appId));
  return Number(entry.value?.value ?? 0n);
}
