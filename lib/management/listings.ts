/**
 * What the management API lists, a page at a time, newest first.
 *
 * Cursors are record ids. Every listed record's id begins with its creation time (`newId`), and a
 * page is the KV range strictly older than the cursor, so a walk to the end never shows a record
 * twice and misses none that existed when it began, however many records land meanwhile. Records
 * do not always land in the order of their ids: a usage record is stamped when its request
 * settled, and a hot app's are written by its slice's next post (a moment later, or after KV
 * answers again, or by another instance's clock), so one may land behind the newest already
 * listed. Clients that sync by walking back to the last id they saw are told to overlap (README).
 */
import {
  type ApiKeyRecord,
  type AppRecord,
  keys,
  type LedgerEntry,
  type UsageRecord,
  type WalletRecord,
} from "@/lib/db.ts";
import { getManyChunked } from "@/lib/core/mod.ts";

export const MAX_PAGE_LIMIT = 100;
/** Records looked at for one filtered page before it is returned short (with `hasMore`). */
const SCAN_BUDGET = 5_000;

/** A page of a listing walked one way: its newest records, or those older than a cursor. */
export interface PageRequest {
  limit: number;
  /** The id of the last record of the previous page: the page holds the records older than it. */
  startingAfter?: string;
  /** Only a listing that takes a `TwoWayPageRequest` walks back: elsewhere it would be ignored. */
  endingBefore?: never;
}

/** A page of a listing that a pager walks both ways: on to older records, or back to newer ones. */
export interface TwoWayPageRequest extends Omit<PageRequest, "endingBefore"> {
  /**
   * The id of the first record of the page after this one: the page holds the records newer than
   * it (the nearest `limit` of them, still newest first), for a pager's way back.
   */
  endingBefore?: string;
}

export interface Page<T> {
  data: T[];
  /** More records lie beyond this page in the direction it was asked for. */
  hasMore: boolean;
  /**
   * Pass as `starting_after` for the next page (as `endingBefore` for a page asked with it); null
   * on the last one.
   */
  nextCursor: string | null;
}

/**
 * A `startingAfter` that names no record of the list. Records are never deleted, so every cursor a
 * page handed out stays valid; any other string would silently page from an arbitrary point (a
 * mistyped cursor got the first page again), so it is refused.
 */
export class UnknownCursorError extends Error {
  /** A page with a cursor per list tells by it which list to start again. */
  constructor(readonly cursor: string) {
    super("unknown cursor");
  }
}

/** One page of the records under `prefix` whose last key part is their id, newest first. */
async function pageOf<T>(
  kv: Deno.Kv,
  prefix: Deno.KvKey,
  request: TwoWayPageRequest,
  options: { filter?: (value: T) => boolean; cursorChecked?: boolean } = {},
): Promise<Page<{ id: string; value: T }>> {
  const newer = request.endingBefore !== undefined;
  const cursor = request.endingBefore ?? request.startingAfter;
  if (cursor && !options.cursorChecked) {
    const entry = await kv.get([...prefix, cursor]);
    if (entry.versionstamp === null) throw new UnknownCursorError(cursor);
  }
  // A range's start is inclusive, its end exclusive: the way back skips the cursor itself below.
  const selector = !cursor
    ? { prefix }
    : newer
    ? { prefix, start: [...prefix, cursor] }
    : { prefix, end: [...prefix, cursor] };
  // Newest first is the order of every page; the way back walks oldest first and turns round.
  const page = (data: { id: string; value: T }[], hasMore: boolean, nextCursor: string | null) => ({
    data: newer ? data.reverse() : data,
    hasMore,
    nextCursor,
  });
  const data: { id: string; value: T }[] = [];
  let scanned = 0;
  let lastId: string | null = null;
  for await (const entry of kv.list<T>(selector, { reverse: !newer, batchSize: 200 })) {
    const id = String(entry.key[entry.key.length - 1]);
    if (newer && id === cursor) continue;
    if (data.length === request.limit) return page(data, true, lastId);
    lastId = id;
    if (!options.filter || options.filter(entry.value)) data.push({ id, value: entry.value });
    if (++scanned >= SCAN_BUDGET && data.length < request.limit) {
      // A sparse filter: return what was found; the cursor goes on from where the scan stopped.
      return page(data, true, id);
    }
  }
  return page(data, false, null);
}

export interface AppWithWallet {
  app: AppRecord;
  wallet: WalletRecord;
}

/** The owner's apps with their wallets, newest first. */
export async function pageOwnerApps(
  kv: Deno.Kv,
  ownerId: string,
  request: PageRequest,
): Promise<Page<AppWithWallet>> {
  const page = await pageOf<true>(kv, keys.ownerApps(ownerId), request);
  const pairs = await readPairs<AppRecord, WalletRecord>(kv, page.data, keys.app, keys.wallet);
  const data = pairs.flatMap(([app, wallet]) => app && wallet ? [{ app, wallet }] : []);
  return { ...page, data };
}

/** Two records of each listed id, read ten keys to a call (KV's most). */
async function readPairs<A, B>(
  kv: Deno.Kv,
  listed: readonly { id: string }[],
  first: (id: string) => Deno.KvKey,
  second: (id: string) => Deno.KvKey,
): Promise<[A | null, B | null][]> {
  const entries = await getManyChunked<unknown>(
    kv,
    listed.flatMap(({ id }) => [first(id), second(id)]),
  );
  return listed.map((
    _,
    i,
  ) => [entries[2 * i].value as A | null, entries[2 * i + 1].value as B | null]);
}

export type KeyWithLastUse = ApiKeyRecord & { lastUsedAt: number | null };

/**
 * The app's API keys, live and revoked, newest first: a reseller's app may hold thousands. The
 * dashboard's keys tab walks them both ways.
 */
export async function pageAppKeys(
  kv: Deno.Kv,
  appId: string,
  request: TwoWayPageRequest,
): Promise<Page<KeyWithLastUse>> {
  const page = await pageOf<boolean>(kv, keys.appApiKeys(appId), request);
  const pairs = await readPairs<ApiKeyRecord, number>(
    kv,
    page.data,
    keys.apiKey,
    keys.apiKeyLastUsed,
  );
  const data = pairs.flatMap(([record, lastUsedAt]) =>
    record ? [{ ...record, lastUsedAt: lastUsedAt ?? null }] : []
  );
  return { ...page, data };
}

export interface UsageFilter {
  user?: string;
  keyId?: string;
  model?: string;
}

function matches(record: UsageRecord, filter: UsageFilter): boolean {
  return (filter.user === undefined || record.user === filter.user) &&
    (filter.keyId === undefined || record.keyId === filter.keyId) &&
    (filter.model === undefined || record.model === filter.model);
}

/** An app's usage records, newest first, optionally only one end user's, key's or model's. */
export async function pageUsage(
  kv: Deno.Kv,
  appId: string,
  request: PageRequest,
  filter: UsageFilter = {},
): Promise<Page<UsageRecord>> {
  const filtering = Object.values(filter).some((v) => v !== undefined);
  const page = await pageOf<UsageRecord>(kv, keys.appUsage(appId), request, {
    filter: filtering ? (r) => matches(r, filter) : undefined,
  });
  return { ...page, data: page.data.map((d) => d.value) };
}

/**
 * The wallet's credits alone (starter, top-ups, operator credits, and the refunds and chargebacks
 * that take them back), newest first: the dashboard's wallet page pages them apart from its
 * charges, so a busy app's charges never bury its top-ups.
 */
export async function pageCredits(
  kv: Deno.Kv,
  appId: string,
  request: PageRequest,
): Promise<Page<LedgerEntry>> {
  const page = await pageOf<LedgerEntry>(kv, keys.ledger(appId), request);
  return { ...page, data: page.data.map((d) => d.value) };
}

export type LedgerItem =
  | { kind: "credit"; id: string; at: number; entry: LedgerEntry }
  | { kind: "charge"; id: string; at: number; usage: UsageRecord };

/** Where an id sorts in time: its part after the three-letter prefix (`led_`, `use_`). */
const orderKey = (id: string) => id.slice(id.indexOf("_") + 1);

/**
 * The wallet's ledger, newest first: credits (starter, top-ups, operator credits) and charges (one
 * per settled request), merged by time. The cursor is an entry's id of either kind.
 */
export async function pageLedger(
  kv: Deno.Kv,
  appId: string,
  request: PageRequest,
): Promise<Page<LedgerItem>> {
  if (request.startingAfter) {
    const [credit, charge] = await kv.getMany([
      keys.ledgerEntry(appId, request.startingAfter),
      keys.usage(appId, request.startingAfter),
    ]);
    if (credit.versionstamp === null && charge.versionstamp === null) {
      throw new UnknownCursorError(request.startingAfter);
    }
  }
  const after = request.startingAfter ? orderKey(request.startingAfter) : undefined;
  // The cursor is an entry of one kind; the other list is cut at the same time, where it has none.
  const [credits, charges] = await Promise.all([
    pageOf<LedgerEntry>(kv, keys.ledger(appId), {
      limit: request.limit + 1,
      startingAfter: after && `led_${after}`,
    }, { cursorChecked: true }),
    pageOf<UsageRecord>(kv, keys.appUsage(appId), {
      limit: request.limit + 1,
      startingAfter: after && `use_${after}`,
    }, { cursorChecked: true }),
  ]);
  const merged: LedgerItem[] = [
    ...credits.data.map((d) => ({
      kind: "credit" as const,
      id: d.id,
      at: d.value.createdAt,
      entry: d.value,
    })),
    ...charges.data.map((d) => ({
      kind: "charge" as const,
      id: d.id,
      at: d.value.createdAt,
      usage: d.value,
    })),
  ].sort((a, b) => (orderKey(a.id) < orderKey(b.id) ? 1 : -1));
  const data = merged.slice(0, request.limit);
  const hasMore = merged.length > request.limit || credits.hasMore || charges.hasMore;
  return { data, hasMore, nextCursor: hasMore ? data[data.length - 1]?.id ?? null : null };
}
