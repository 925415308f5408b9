export type Logger = (fields: Record<string, unknown>) => void;

/**
 * How long a log line may wait to share its write with the next ones. At 500 req/s the flush timer
 * was a turn of the event loop of its own 47 times a second at 20 ms; at 100 ms, 10 times.
 */
const LOG_FLUSH_MS = 100;
/** Past this many buffered bytes the lines are written at once. */
const LOG_FLUSH_BYTES = 64 * 1024;

let pendingLines: string[] = [];
let pendingBytes = 0;
let flushTimer: ReturnType<typeof setTimeout> | null = null;

/**
 * One JSON object per line on stdout: what log shippers and `jq` read. Lines are written together
 * at most 100 ms after the first of them (one write instead of one per line: a request's log line
 * was 3% of a request's CPU); a SIGKILL may lose those last 100 ms of lines, never a half line.
 */
export const jsonLogger: Logger = (fields) => {
  const time = new Date().toISOString();
  // The fields' own JSON after the time and level, rather than a copy of them (a request's line has
  // two dozen); fields that name either win, as they would in a spread.
  const own = "time" in fields || "level" in fields ? null : JSON.stringify(fields);
  const line = own === null
    ? JSON.stringify({ time, level: "info", ...fields })
    : `{"time":"${time}","level":"info"${own === "{}" ? "}" : `,${own.slice(1)}`}`;
  pendingLines.push(line);
  pendingBytes += line.length + 1;
  if (pendingBytes >= LOG_FLUSH_BYTES) flushLogs();
  else scheduleFlush();
};

function scheduleFlush() {
  flushTimer ??= setTimeout(flushLogs, LOG_FLUSH_MS);
}

let deferred: (() => void)[] = [];

/**
 * Runs `write` (redacting and logging a line) with the next write of the buffered lines, at most
 * LOG_FLUSH_MS later: a request's log line then costs it no latency, and at a moderate pace no
 * turn of the event loop of its own (a timer per answer was about a tenth of a request's CPU at
 * 500 req/s). `flushLogs` runs what is still waiting.
 */
export function logSoon(write: () => void): void {
  deferred.push(write);
  scheduleFlush();
}

function writeDeferred() {
  const writes = deferred;
  deferred = [];
  for (const write of writes) {
    try {
      write();
    } catch (error) {
      // A timer's exception would end the process; one bad line must not cost the others.
      console.error("a deferred log line failed", error);
    }
  }
}

/** Writes the buffered log lines now (before an exit, and from the timer). */
export function flushLogs(): void {
  // The timer goes first: a line deferred while the waiting ones are written gets a timer of its own.
  if (flushTimer !== null) clearTimeout(flushTimer);
  flushTimer = null;
  writeDeferred();
  if (pendingLines.length === 0) return;
  const text = pendingLines.join("\n");
  pendingLines = [];
  pendingBytes = 0;
  console.log(text);
}

globalThis.addEventListener("unload", flushLogs);

/**
 * The one line written per request (`event: "request"`), with the same fields every time (null when
 * they do not apply), so that log queries and the metrics read one stable shape. Amounts are micro-USD.
 * Never carries the API key, only its id. Fields other modules add to the trace are kept as well.
 */
export type RequestLogLine = {
  event: "request";
  requestId: string;
  method: string;
  path: string;
  status: number;
  errorCode: string | null;
  appId: string | null;
  keyId: string | null;
  model: string | null;
  provider: string | null;
  streamed: boolean | null;
  promptTokens: number | null;
  completionTokens: number | null;
  reserved: number | null;
  cost: number | null;
  /** Usage cost the reservation and the balance could not cover (never charged); 0 when covered. */
  uncharged: number | null;
  outcome: string | null;
  upstreamFailure: string | null;
  /**
   * What the upstream said of its failure, as a log may carry it: never a quote of the request or
   * the answer (see lib/gateway/upstream_log.ts).
   */
  upstreamError: LoggedUpstreamError | null;
  totalMs: number;
  upstreamMs: number | null;
};

/** An upstream's error in a log line: its status (null without one), fields, and bounded message. */
export interface LoggedUpstreamError {
  status: number | null;
  type: string | null;
  code: string | null;
  param: string | null;
  message: string;
}

/** What a request's handlers learned about it, for its log line (the gateway fills in most). */
export interface TraceFields {
  appId?: string;
  keyId?: string;
  model?: string;
  provider?: string;
  streamed?: boolean;
  promptTokens?: number;
  completionTokens?: number;
  cost?: number;
  uncharged?: number;
  reserved?: number;
  upstreamMs?: number;
  outcome?: string;
  upstreamFailure?: string;
  upstreamError?: LoggedUpstreamError;
  errorCode?: string;
}

const tenths = (ms: number) => Math.round(ms * 10) / 10;

/**
 * A secret pasted into a URL's path (an API or management key, a provider's `sk-` key): the log
 * keeps its prefix, enough to tell what was sent, and never the secret.
 */
const SECRET_IN_PATH = /(tbm?_|sk-)[A-Za-z0-9_-]{16,}/g;

/** The path as a log line may carry it: any secret in it masked. */
export function loggedPath(path: string): string {
  return path.replace(SECRET_IN_PATH, "$1[redacted]");
}

export function requestLogLine(
  request: { requestId: string; method: string; path: string; status: number; totalMs: number },
  trace: TraceFields,
): RequestLogLine {
  return {
    ...trace,
    event: "request",
    requestId: request.requestId,
    method: request.method,
    path: loggedPath(request.path),
    status: request.status,
    errorCode: trace.errorCode ?? null,
    appId: trace.appId ?? null,
    keyId: trace.keyId ?? null,
    model: trace.model ?? null,
    provider: trace.provider ?? null,
    streamed: trace.streamed ?? null,
    promptTokens: trace.promptTokens ?? null,
    completionTokens: trace.completionTokens ?? null,
    reserved: trace.reserved ?? null,
    cost: trace.cost ?? null,
    uncharged: trace.uncharged ?? null,
    outcome: trace.outcome ?? null,
    upstreamFailure: trace.upstreamFailure ?? null,
    upstreamError: trace.upstreamError ?? null,
    totalMs: tenths(request.totalMs),
    upstreamMs: trace.upstreamMs === undefined ? null : tenths(trace.upstreamMs),
  };
}

/**
 * The fields of every request line, in the order it writes them: what /docs/operations lists, taken
 * from the line itself so the list cannot leave a field out.
 */
export const REQUEST_LOG_FIELDS = Object.keys(
  requestLogLine({ requestId: "", method: "", path: "", status: 0, totalMs: 0 }, {}),
) as (keyof RequestLogLine)[];
