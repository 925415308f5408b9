import { type AppRecord, emptyWallet, keys, type LedgerEntry, type WalletRecord } from "./db.ts";
import { newId, randomToken } from "./ids.ts";
import { type IssuedKey, NotFoundError, prepareKey } from "./keys.ts";
import type { Micros } from "./money.ts";

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
  const { issued, write } = await prepareKey(app.id, "default", now);
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
