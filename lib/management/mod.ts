/** Management: owners' management keys, and the pages and reports the management API lists. */
export {
  authenticateManagementKey,
  issueManagementKey,
  listManagementKeys,
  MAX_MANAGEMENT_KEYS,
  revokeManagementKey,
  TooManyManagementKeysError,
} from "./management_keys.ts";
export { type ManagementAdmission, ManagementRequestLimit } from "./request_limit.ts";
export {
  FIRST_REPORT_DAY,
  MAX_PAGE_LIMIT,
  MAX_REPORT_DAYS,
  pageAppKeys,
  pageLedger,
  pageOwnerApps,
  pageUsage,
  UnknownCursorError,
  usageReport,
} from "./listings.ts";
export type {
  AppWithWallet,
  LedgerItem,
  Page,
  PageRequest,
  ReportGrouping,
  ReportRow,
  TwoWayPageRequest,
  UsageFilter,
} from "./listings.ts";
