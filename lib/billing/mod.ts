/**
 * Billing: the wallet (reserve, settle, release, credit, debit), rate limits, usage records, the
 * sweeper and the audit.
 */
export { auditWallets } from "./audit.ts";
export { creditedOf, givesBack, takesBack, walletFigures } from "./ledger.ts";
export {
  getRateLimits,
  LimitAboveCeilingError,
  MAX_LIMIT,
  rateLimitHeaders,
  rateLimitRefusal,
  readRateLimitStatus,
  requestRateLimitHeaders,
  retryAfterHeaders,
  retryAfterSeconds,
  setRateLimits,
  validLimit,
} from "./ratelimit.ts";
export type { CountedTokens, LimitSetter, RateLimitStatus } from "./ratelimit.ts";
export { releaseExpiredReservations, sweepExpiredReservations } from "./sweeper.ts";
export { dailySpend, mergedActivity, spendByModel, unchargedOf } from "./usage.ts";
export type { DaySpend, ModelSpend, UsagePage, WalletActivity } from "./usage.ts";
export { CommitLocks } from "./commit_locks.ts";
export { issueKeyWithCaps, KeyCapNotStoredError, revokeKey } from "./key_limits.ts";
export { rotateKey } from "./key_rotation.ts";
export { Wallets } from "./wallet.ts";
export {
  KeyRevokedError,
  MAX_WALLET_CREDITS,
  WalletCreditLimitError,
  WalletNotFoundError,
} from "./wallet_types.ts";
export type {
  CreditResult,
  DebitResult,
  DebitReversalResult,
  ReserveInput,
  WalletStats,
} from "./wallet_types.ts";
export {
  cappedKeyIds,
  currentCounter,
  getSpendCaps,
  getSpendCounter,
  keySpendCounters,
  setSpendCaps,
  spendCapRefusal,
  validCaps,
} from "./spend_caps.ts";
export type { CapBreach, CapName } from "./spend_caps.ts";
