import {
  type AppRecord,
  emptyWallet,
  keys,
  type LedgerEntry,
  type WalletRecord,
} from "@/lib/db.ts";
import { type Micros, newId, NotFoundError, randomToken } from "@/lib/core/mod.ts";
import { type IssuedKey, prepareKey } from "./keys.ts";

export const STARTER_CREDITS: Micros = 5_000_000;

export interface CreatedApp {
  app: AppRecord;
  wallet: WalletRecord;
  key: IssuedKey;
}

/**
 * Creates an app with its wallet (funded with the starter credits, recorded in the ledger), its
 * top-up page address and a first API key, all in one commit.
 */
export async function createApp(
  kv: Deno.Kv,
  input: { name: string; ownerId?: string | null },
  now = Date.now(),
): Promise<CreatedApp> {
  const name = input.name.trim();
  if (name.length === 0 || name.length > 100) {
    throw new RangeError("an app name has 1 to 100 characters");
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
    .set(keys.ledgerEntry(app.id, starter.id), starter);
  if (app.ownerId) atomic.set(keys.appsByOwner(app.ownerId, app.id), true);
  const result = await write(atomic).commit();
  if (!result.ok) throw new Error("app creation conflicted; try again");
  return { app, wallet, key: issued };
}

export async function getApp(kv: Deno.Kv, appId: string): Promise<AppRecord> {
  const entry = await kv.get<AppRecord>(keys.app(appId));
  if (!entry.value) throw new NotFoundError(`no app ${appId}`);
  return entry.value;
}

export async function getWallet(kv: Deno.Kv, appId: string): Promise<WalletRecord> {
  const entry = await kv.get<WalletRecord>(keys.wallet(appId));
  if (!entry.value) throw new NotFoundError(`no wallet for app ${appId}`);
  return entry.value;
}

export function topUpUrl(publicUrl: string, app: AppRecord): string {
  return `${publicUrl}/top-up/${app.topUpToken}`;
}

function validName(name: string): string {
  const trimmed = name.trim();
  if (trimmed.length === 0 || trimmed.length > 100) {
    throw new RangeError("an app name has 1 to 100 characters");
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
 * old address leaked.
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
