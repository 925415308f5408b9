/** Tenants: apps, their API keys and the key cache. */
export {
  AppLimitError,
  createApp,
  getApp,
  getWallet,
  listOwnerApps,
  MAX_APP_NAME_CHARS,
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
  keyNameOf,
  listAppKeys,
  MAX_KEY_NAME_CHARS,
  prepareKey,
  revokeKeyRecord,
} from "./keys.ts";
export type { IssuedKey, KeyIssueBound, WritesWithKey } from "./keys.ts";
export type { KeyGuard } from "./keys.ts";
export type { AppCreationBound, AppInput } from "./apps.ts";
