/** Tenants: apps, their API keys and the key cache. */
export {
  AppLimitError,
  createApp,
  getApp,
  getWallet,
  listOwnerApps,
  renameApp,
  rotateTopUpToken,
  topUpUrl,
} from "./apps.ts";
export {
  countLiveKeys,
  getAppKey,
  issueKey,
  KeyCache,
  KeyLimitError,
  listAppKeys,
  prepareKey,
  revokeKey,
} from "./keys.ts";
export type { IssuedKey, KeyIssueBound } from "./keys.ts";
export type { KeyGuard } from "./keys.ts";
export type { AppCreationBound, AppInput } from "./apps.ts";
