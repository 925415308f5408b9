import {
  type AppRecord,
  emptyWallet,
  keys,
  type LedgerEntry,
  type OwnerAppCountRecord,
  utcDay,
  type WalletRecord,
} from "@/lib/db.ts";
import {
  getManyChunked,
  isPlausibleId,
  type Micros,
  newId,
  NotFoundError,
  randomToken,
} from "@/lib/core/mod.ts";
import { type IssuedKey, prepareKey } from "./keys.ts";

const STARTER_CREDITS: Micros = 5_000_000;

export interface CreatedApp {
  app: AppRecord;
  wallet: WalletRecord;
  key: IssuedKey;
}

/** How many apps (each with starter credits) an owner may make: in all, and per UTC day. */
export interface AppCreationBound {
  maxAppsPerOwner: number;
  maxAppCreationsPerDay: number;
}

/**
 * Who makes an app for an owner: the owner, held to the bound, or the operator, who is not (the
 * app is counted all the same). An app without an owner is the operator's alone.
 */
export type AppInput =
  | { name: string; ownerId?: null }
  | { name: string; ownerId: string; bound: AppCreationBound | "operator" };

/** An owner at the bound of apps; `perDay` when it is today's bound, which lifts tomorrow. */
export class AppLimitError extends Error {
  /** For the day's bound: seconds until the next UTC day. */
  readonly retryAfterSeconds: number | null;

  constructor(readonly perDay: boolean, readonly max: number, now: number) {
    super(
      perDay
        ? `You have created ${max} app${
          max === 1 ? "" : "s"
        } today, the most an account may create in a day. Try again tomorrow (UTC).`
        : `You have ${max} app${
          max === 1 ? "" : "s"
        }, the most an account may have. Each app starts with 5.00 USD of credits; top up an existing app instead.`,
    );
    this.retryAfterSeconds = perDay ? Math.ceil((DAY_MS - (now % DAY_MS)) / 1000) : null;
  }
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Creates an app with its wallet (funded with the starter credits, recorded in the ledger), its
 * top-up page address and a first API key, all in one commit. For an owner, the same commit
 * counts the app against the owner's bound and checks the count it read, so apps created at
 * the same time cannot pass the bound together: a conflict reads the count again.
 */
export async function createApp(
  kv: Deno.Kv,
  input: AppInput,
  now = Date.now(),
): Promise<CreatedApp> {
  for (;;) {
    const created = await tryCreateApp(kv, input, now);
    if (created) return created;
  }
}

/** An app's name has 1 to this many characters once trimmed. */
export const MAX_APP_NAME_CHARS = 100;

async function tryCreateApp(
  kv: Deno.Kv,
  input: AppInput,
  now: number,
): Promise<CreatedApp | null> {
  const name = input.name.trim();
  if (name.length === 0 || name.length > MAX_APP_NAME_CHARS) {
    throw new RangeError(`an app name has 1 to ${MAX_APP_NAME_CHARS} characters`);
  }
  const ownerCount = input.ownerId ? await countOwnerApps(kv, input.ownerId, now) : null;
  if (ownerCount && input.ownerId && input.bound !== "operator") {
    const { record } = ownerCount;
    if (record.total >= input.bound.maxAppsPerOwner) {
      throw new AppLimitError(false, input.bound.maxAppsPerOwner, now);
    }
    if (record.day === utcDay(now) && record.onDay >= input.bound.maxAppCreationsPerDay) {
      throw new AppLimitError(true, input.bound.maxAppCreationsPerDay, now);
    }
  }
  const app: AppRecord = {
    id: newId("app", now),
    name,
    ownerId: input.ownerId ?? null,
    createdAt: now,
    topUpToken: randomToken(160),
  };
  const wallet: WalletRecord = {
    ...emptyWallet(),
    available: STARTER_CREDITS,
    starter: STARTER_CREDITS,
  };
  const starter: LedgerEntry = {
    id: newId("led", now),
    kind: "starter",
    amount: STARTER_CREDITS,
    reason: "Starter credits",
    reference: null,
    createdAt: now,
  };
  const { issued, write } = prepareKey(app.id, "default", now);
  const atomic = kv.atomic()
    .check({ key: keys.app(app.id), versionstamp: null })
    .check({ key: keys.appByTopUpToken(app.topUpToken), versionstamp: null })
    .set(keys.app(app.id), app)
    .set(keys.appByTopUpToken(app.topUpToken), app.id)
    .set(keys.wallet(app.id), wallet)
    .set(keys.ledgerEntry(app.id, starter.id), starter)
    .sum(keys.serviceTotal("starter_credits_granted"), BigInt(STARTER_CREDITS))
    .sum(keys.serviceTotal("apps_created"), 1n);
  if (app.ownerId && ownerCount) {
    const { entry, record } = ownerCount;
    const today = utcDay(now);
    const counted: OwnerAppCountRecord = {
      total: record.total + 1,
      day: today,
      onDay: (record.day === today ? record.onDay : 0) + 1,
    };
    atomic.set(keys.appsByOwner(app.ownerId, app.id), true)
      .check({ key: entry.key, versionstamp: entry.versionstamp })
      .set(keys.ownerAppCount(app.ownerId), counted);
  }
  const result = await write(atomic).commit();
  // Another app of the owner (or a clashing id or token) was committed first: try again.
  if (!result.ok) return null;
  return { app, wallet, key: issued };
}

/**
 * The owner's app count as stored, with its entry for the commit's check. An owner from before
 * the count was kept is counted from their apps, once: the first commit writes the count.
 */
async function countOwnerApps(kv: Deno.Kv, ownerId: string, now: number) {
  const entry = await kv.get<OwnerAppCountRecord>(keys.ownerAppCount(ownerId));
  if (entry.value) return { entry, record: entry.value };
  const ids: Deno.KvKey[] = [];
  for await (const app of kv.list({ prefix: keys.ownerApps(ownerId) })) {
    ids.push(keys.app(String(app.key[2])));
  }
  const today = utcDay(now);
  const apps = await getManyChunked<AppRecord>(kv, ids);
  const onDay = apps.filter((app) => app.value && utcDay(app.value.createdAt) === today).length;
  return { entry, record: { total: ids.length, day: today, onDay } };
}

export async function getApp(kv: Deno.Kv, appId: string): Promise<AppRecord> {
  if (!isPlausibleId(appId)) throw new NotFoundError(`no app ${appId.slice(0, 64)}`);
  const entry = await kv.get<AppRecord>(keys.app(appId));
  if (!entry.value) throw new NotFoundError(`no app ${appId}`);
  return entry.value;
}

export async function getWallet(kv: Deno.Kv, appId: string): Promise<WalletRecord> {
  if (!isPlausibleId(appId)) throw new NotFoundError(`no wallet for app ${appId.slice(0, 64)}`);
  const entry = await kv.get<WalletRecord>(keys.wallet(appId));
  if (!entry.value) throw new NotFoundError(`no wallet for app ${appId}`);
  return entry.value;
}

export function topUpUrl(publicUrl: string, app: AppRecord): string {
  return `${publicUrl}/top-up/${app.topUpToken}`;
}

function validName(name: string): string {
  const trimmed = name.trim();
  if (trimmed.length === 0 || trimmed.length > MAX_APP_NAME_CHARS) {
    throw new RangeError(`an app name has 1 to ${MAX_APP_NAME_CHARS} characters`);
  }
  return trimmed;
}

export async function renameApp(kv: Deno.Kv, appId: string, name: string): Promise<AppRecord> {
  const newName = validName(name);
  for (;;) {
    const entry = await kv.get<AppRecord>(keys.app(appId));
    if (!entry.value) throw new NotFoundError(`no app ${appId}`);
    const app = { ...entry.value, name: newName };
    if ((await kv.atomic().check(entry).set(keys.app(appId), app).commit()).ok) return app;
  }
}

/**
 * Gives the app a new top-up page address and retires the old one in the same commit, for when the
 * old address leaked. The retired address is remembered for its app: buyers who paid through it
 * hold receipt links under it.
 */
export async function rotateTopUpToken(kv: Deno.Kv, appId: string): Promise<AppRecord> {
  for (;;) {
    const entry = await kv.get<AppRecord>(keys.app(appId));
    if (!entry.value) throw new NotFoundError(`no app ${appId}`);
    const app = { ...entry.value, topUpToken: randomToken(160) };
    const result = await kv.atomic()
      .check(entry)
      .check({ key: keys.appByTopUpToken(app.topUpToken), versionstamp: null })
      .delete(keys.appByTopUpToken(entry.value.topUpToken))
      .set(keys.appByRetiredTopUpToken(entry.value.topUpToken), appId)
      .set(keys.appByTopUpToken(app.topUpToken), app.id)
      .set(keys.app(appId), app)
      .commit();
    if (result.ok) return app;
  }
}

/** An owner's apps with their wallets, newest first. */
export async function listOwnerApps(
  kv: Deno.Kv,
  ownerId: string,
): Promise<{ app: AppRecord; wallet: WalletRecord }[]> {
  const ids: string[] = [];
  for await (const entry of kv.list({ prefix: keys.ownerApps(ownerId) })) {
    ids.push(String(entry.key[2]));
  }
  ids.reverse();
  const out: { app: AppRecord; wallet: WalletRecord }[] = [];
  for (let i = 0; i < ids.length; i += 5) {
    const chunk = ids.slice(i, i + 5);
    const entries = await kv.getMany<unknown[]>(
      chunk.flatMap((id) => [keys.app(id), keys.wallet(id)]),
    );
    chunk.forEach((_, j) => {
      const app = entries[2 * j].value as AppRecord | null;
      const wallet = entries[2 * j + 1].value as WalletRecord | null;
      if (app && wallet) out.push({ app, wallet });
    });
  }
  return out;
}
