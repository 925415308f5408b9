/** Management: owners' management keys, and the pages and reports the management API lists. */
export {
  authenticateManagementKey,
  countLiveManagementKeys,
  issueManagementKey,
  listManagementKeys,
  MAX_MANAGEMENT_KEYS,
  revokeAllManagementKeys,
  REVOKED_KEYS_SHOWN,
  revokeManagementKey,
  TooManyManagementKeysError,
} from "./management_keys.ts";
export { type ManagementAdmission, ManagementRequestLimit } from "./request_limit.ts";
export {
  MAX_PAGE_LIMIT,
  pageAppKeys,
  pageCredits,
  pageLedger,
  pageOwnerApps,
  pageUsage,
  UnknownCursorError,
} from "./listings.ts";
export { FIRST_REPORT_DAY, MAX_REPORT_DAYS, usageReport } from "./usage_report.ts";
export type {
  AppWithWallet,
  LedgerItem,
  Page,
  PageRequest,
  TwoWayPageRequest,
  UsageFilter,
} from "./listings.ts";
export type { ReportGrouping, ReportRow } from "./usage_report.ts";
