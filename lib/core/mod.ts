/** Core: money, ids, errors, secrets, the KV handle, config, logging and the shared timer sweep; depends on nothing of ours. */
export { concatBytes, utf8Length } from "./bytes.ts";
export { ipv4Octets, ipv6Groups, mappedIpv4 } from "./ip.ts";
export {
  CONFIG_DEFAULTS,
  CONFIG_RANGES,
  ConfigError,
  loadConfig,
  MAX_SERVE_WORKERS,
  MAX_TIMER_MS,
} from "./config.ts";
export type { Config } from "./config.ts";
export { ApiError, ERROR_CODES, errorBody, NotFoundError } from "./errors.ts";
export type { ErrorCode } from "./errors.ts";
export { isPlausibleId, newId, newRequestId, randomToken } from "./ids.ts";
export { isRecord } from "./json.ts";
export {
  causedByBusyKv,
  countLiveIndexed,
  getManyChunked,
  KV_VALUE_CHUNK_BYTES,
  KvBusyError,
  KvOpenError,
  openKv,
} from "./kv.ts";
export { flushLogs, jsonLogger, logSoon, REQUEST_LOG_FIELDS, requestLogLine } from "./log.ts";
export type { LoggedUpstreamError, Logger, RequestLogLine, TraceFields } from "./log.ts";
export {
  componentsCost,
  formatPricePerMTok,
  formatUsd,
  parsePricePerMTok,
  parseUsd,
  tokensCost,
} from "./money.ts";
export type { Micros, PicosPerToken } from "./money.ts";
export { sha256Hex, timingSafeEqualStrings } from "./secrets.ts";
export { within } from "./async.ts";
export { proxyConfigured } from "./proxy.ts";
export { Sweep } from "./sweep.ts";
