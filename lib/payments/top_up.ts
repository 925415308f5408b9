/**
 * The hosted top-up page's domain: the four amounts, the page address, the owner's settings, and the
 * one way a purchase reaches a wallet (a `top_up` credit guarded by a marker per payment).
 */
import { type Config, formatUsd, type Micros, newId, NotFoundError } from "@/lib/core/mod.ts";
import {
  type AppRecord,
  type CreditMarkerRecord,
  type DevPurchaseRecord,
  keys,
  type LedgerEntry,
  type WalletRecord,
} from "@/lib/db.ts";
import { countAttempt } from "@/lib/accounts/mod.ts";
import {
  creditedOf,
  type CreditResult,
  MAX_WALLET_CREDITS,
  type Wallets,
} from "@/lib/billing/mod.ts";

/** SPEC: the amounts offered, in whole USD. */
export const TOP_UP_AMOUNTS_USD = [5, 10, 25, 50] as const;
const MICROS_PER_USD = 1_000_000;
const MICROS_PER_CENT = 10_000;

/** The amount of a form choice ("5", "10", "25", "50"), or null for anything else. */
export function topUpAmountOfChoice(choice: unknown): Micros | null {
  if (typeof choice !== "string" || !/^[1-9][0-9]?$/.test(choice)) return null;
  const usd = Number(choice);
  return (TOP_UP_AMOUNTS_USD as readonly number[]).includes(usd) ? usd * MICROS_PER_USD : null;
}

export function isTopUpAmount(amount: Micros): boolean {
  return TOP_UP_AMOUNTS_USD.some((usd) => usd * MICROS_PER_USD === amount);
}

export function microsToCents(amount: Micros): number {
  return amount / MICROS_PER_CENT;
}

export function centsToMicros(cents: number): Micros {
  return cents * MICROS_PER_CENT;
}

/** How purchases are paid on this server. */
export type PaymentMode = "stripe" | "dev" | "unavailable";

/**
 * Stripe when its keys are set; the test checkout only when asked for (`PAYMENTS=dev`) or under
 * `deno task dev` without Stripe keys; otherwise purchases are unavailable, never silently fake.
 */
export function paymentMode(config: Config, devServer: boolean): PaymentMode {
  if (config.payments === "dev") return "dev";
  if (config.stripeSecretKey) return "stripe";
  return devServer ? "dev" : "unavailable";
}

const TOKEN_SHAPE = /^[0-9a-z]{20,64}$/;

/** The app whose current top-up page address this is; null for unknown or rotated addresses. */
export async function findAppByTopUpToken(kv: Deno.Kv, token: string): Promise<AppRecord | null> {
  if (!TOKEN_SHAPE.test(token)) return null;
  const index = await kv.get<string>(keys.appByTopUpToken(token));
  if (!index.value) return null;
  const app = await kv.get<AppRecord>(keys.app(index.value));
  return app.value?.topUpToken === token ? app.value : null;
}

/**
 * The app a top-up page address is or was given to, and whether it is still its current one: a
 * receipt link stays valid for payments made before the owner replaced the address.
 */
export async function findAppOfAnyTopUpToken(
  kv: Deno.Kv,
  token: string,
): Promise<{ app: AppRecord; current: boolean } | null> {
  const app = await findAppByTopUpToken(kv, token);
  if (app) return { app, current: true };
  if (!TOKEN_SHAPE.test(token)) return null;
  const retired = await kv.get<string>(keys.appByRetiredTopUpToken(token));
  if (!retired.value) return null;
  const owner = await kv.get<AppRecord>(keys.app(retired.value));
  return owner.value ? { app: owner.value, current: false } : null;
}

/**
 * The owner's return URL, checked: absolute https, or http on localhost for development; no
 * credentials. The page only ever links to the stored value, so this is the whole open-redirect
 * defence.
 */
export function validateReturnUrl(raw: string): string {
  const text = raw.trim();
  if (text.length > 2000) throw new RangeError("the return URL is longer than 2000 characters");
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new RangeError("the return URL must be an absolute URL such as https://example.com/app");
  }
  const local = ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && local)) {
    throw new RangeError("the return URL must use https (http is allowed only for localhost)");
  }
  if (url.username || url.password) {
    throw new RangeError("the return URL must not contain a user name or password");
  }
  return url.href;
}

export interface TopUpSettings {
  /** A URL to link back to, or null to remove the link. */
  returnUrl?: string | null;
  showBalance?: boolean;
}

/** Changes the owner's top-up page settings; the return URL is validated first. */
export async function updateTopUpSettings(
  kv: Deno.Kv,
  appId: string,
  settings: TopUpSettings,
): Promise<AppRecord> {
  const returnUrl = settings.returnUrl == null ? settings.returnUrl : validateReturnUrl(
    settings.returnUrl,
  );
  for (let attempt = 0; attempt < 5; attempt++) {
    const entry = await kv.get<AppRecord>(keys.app(appId));
    if (!entry.value) throw new NotFoundError(`no app ${appId}`);
    const app: AppRecord = { ...entry.value };
    if (returnUrl !== undefined) app.topUpReturnUrl = returnUrl;
    if (settings.showBalance !== undefined) app.topUpShowBalance = settings.showBalance;
    const result = await kv.atomic().check(entry).set(keys.app(appId), app).commit();
    if (result.ok) return app;
  }
  throw new Error("the app changed concurrently; try again");
}

export type PaymentSource = "stripe" | "dev";

/** The exactly-once marker of a payment: one per Checkout Session or test purchase. */
export function paymentMarker(source: PaymentSource, reference: string): string {
  return `${source}:${reference}`;
}

const REFERENCE_SHAPES: Record<PaymentSource, RegExp> = {
  stripe: /^cs_(test|live)_[A-Za-z0-9]{1,250}$/,
  dev: /^devp_[0-9a-z]{26}$/,
};

/** Which payment a receipt reference names, or null for text that is no reference of ours. */
export function paymentSourceOf(reference: string): PaymentSource | null {
  for (const [source, shape] of Object.entries(REFERENCE_SHAPES)) {
    if (shape.test(reference)) return source as PaymentSource;
  }
  return null;
}

/** How a payment was made, in the owner's words. */
export function paymentMethodName(source: PaymentSource): string {
  return source === "stripe" ? "Stripe Checkout" : "test checkout (development)";
}

/** Credits a paid purchase once: a second call with the same payment changes nothing. */
export function creditTopUp(
  wallets: Wallets,
  appId: string,
  payment: { source: PaymentSource; reference: string; amount: Micros },
): Promise<CreditResult> {
  if (!isTopUpAmount(payment.amount)) {
    throw new RangeError(`${payment.amount} micro-USD is not a top-up amount`);
  }
  return wallets.credit(appId, {
    amount: payment.amount,
    kind: "top_up",
    reason: `Top-up of ${formatUsd(payment.amount)} USD via ${paymentMethodName(payment.source)}`,
    reference: payment.reference,
    marker: paymentMarker(payment.source, payment.reference),
  });
}

/**
 * Whether the app's wallet can still be credited `amount`: a wallet holds at most
 * MAX_WALLET_CREDITS in all, and a payment taken beyond it could not be credited.
 */
export async function hasRoomForTopUp(kv: Deno.Kv, appId: string, amount: Micros) {
  const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value;
  return !wallet || creditedOf(wallet) + amount <= MAX_WALLET_CREDITS;
}

/** The ledger entry a payment credited to this app, or null while it is not credited. */
export async function findTopUpEntry(
  kv: Deno.Kv,
  appId: string,
  source: PaymentSource,
  reference: string,
): Promise<LedgerEntry | null> {
  // Only a reference of the source's shape can have a marker (and fits a storage key).
  if (paymentSourceOf(reference) !== source) return null;
  const marker = await kv.get<CreditMarkerRecord>(
    keys.creditMarker(paymentMarker(source, reference)),
  );
  if (!marker.value || marker.value.appId !== appId) return null;
  const entry = await kv.get<LedgerEntry>(keys.ledgerEntry(appId, marker.value.entryId));
  return entry.value;
}

/** How long a test purchase waits for its confirmation. */
const DEV_PURCHASE_TTL_MS = 60 * 60 * 1000;

export async function createDevPurchase(
  kv: Deno.Kv,
  appId: string,
  amount: Micros,
  now = Date.now(),
): Promise<DevPurchaseRecord> {
  if (!isTopUpAmount(amount)) throw new RangeError(`${amount} micro-USD is not a top-up amount`);
  const purchase: DevPurchaseRecord = { id: newId("devp", now), appId, amount, createdAt: now };
  await kv.set(keys.devPurchase(purchase.id), purchase, { expireIn: DEV_PURCHASE_TTL_MS });
  return purchase;
}

/** The app's pending or paid test purchase, or null (unknown, expired, or another app's). */
export async function findDevPurchase(
  kv: Deno.Kv,
  appId: string,
  purchaseId: string,
  now = Date.now(),
): Promise<DevPurchaseRecord | null> {
  if (paymentSourceOf(purchaseId) !== "dev") return null;
  const entry = await kv.get<DevPurchaseRecord>(keys.devPurchase(purchaseId));
  const purchase = entry.value;
  if (!purchase || purchase.appId !== appId) return null;
  // KV expiry is lazy; the deadline is ours to enforce.
  return now - purchase.createdAt <= DEV_PURCHASE_TTL_MS ? purchase : null;
}

/**
 * Checkout Sessions one client address may open per 15 minutes. Each is a call to Stripe, whose
 * rate limit every buyer, receipt and refund of the service shares, and the page is public: without
 * a bound one address could open them as fast as it could post, at no cost.
 */
export const MAX_CHECKOUTS_PER_ADDRESS = 30;

/** Counts a Checkout Session the address asks for: 0 when it may open it, else seconds to wait. */
export function beginCheckout(kv: Deno.Kv, address: string, now = Date.now()): Promise<number> {
  return countAttempt(kv, "checkout_ip", address, MAX_CHECKOUTS_PER_ADDRESS, now);
}
