import {
  ProviderError,
  type UpstreamErrorFields,
  upstreamErrorFields,
  upstreamErrorMessage,
} from "./types.ts";
import { type BodyReader, createHttp1Fetch, type Http1Answer } from "./http1.ts";
import { concatBytes, Sweep } from "@/lib/core/mod.ts";

/** One client, so one pool of upstream connections, per process (or worker). */
const upstreamFetch = createHttp1Fetch();

export interface UpstreamCall {
  url: string;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
  /** No answer (headers) within this time, or a stream silent this long, is a timeout. */
  timeoutMs: number;
  fetch?: typeof fetch;
}

/** Where and how a provider that authenticates with a bearer key (OpenAI's kinds) is called. */
export interface BearerUpstream {
  baseUrl: string;
  apiKey: string | undefined;
  apiKeyEnv: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}

/** A JSON POST to `{baseUrl}{path}` with the provider's key as a bearer token (callUpstream). */
export function postWithBearer(
  upstream: BearerUpstream,
  path: string,
  body: unknown,
  signal: AbortSignal,
) {
  if (!upstream.apiKey) {
    throw new ProviderError("not_configured", `provider key ${upstream.apiKeyEnv} is not set`);
  }
  return callUpstream({
    url: `${upstream.baseUrl}${path}`,
    headers: { authorization: `Bearer ${upstream.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
    timeoutMs: upstream.timeoutMs,
    fetch: upstream.fetch,
  });
}

/**
 * POSTs to an upstream and maps every transport failure and non-2xx status to a ProviderError.
 * The returned idle guard keeps aborting the body if it stalls for longer than the timeout.
 */
export async function callUpstream(call: UpstreamCall) {
  const controller = new AbortController();
  // The closures below outlive the call's start (a stream's whole answer): they keep the signal,
  // not `call`, whose body may be megabytes.
  const clientSignal = call.signal;
  const onClientAbort = () => controller.abort(clientSignal.reason);
  clientSignal.addEventListener("abort", onClientAbort, { once: true });
  const idle = upstreamIdleGuard(
    controller,
    call.timeoutMs,
    () => clientSignal.removeEventListener("abort", onClientAbort),
  );
  let response: Http1Answer;
  try {
    const init = {
      method: "POST",
      headers: call.headers,
      body: call.body,
      signal: controller.signal,
    };
    // Without a Response and its web streams: the stream parsers read the body themselves.
    response = call.fetch
      ? await call.fetch(call.url, init)
      : await upstreamFetch.answer(call.url, init);
  } catch (error) {
    idle.stop();
    throw idle.translate(error, "connect");
  }
  if (!response.ok) {
    // The guard stays armed while the error body is read: an upstream gone silent inside it, or a
    // client gone away, must end the read rather than hold the request forever.
    idle.touch();
    const error = await statusError(response);
    idle.stop();
    throw error;
  }
  idle.touch();
  return { response, idle, signal: controller.signal };
}

/** An upstream call's silence watch: when its current wait began (null: not waiting), its cut. */
interface IdleWatch {
  waitingSince: number | null;
  timeoutMs: number;
  cut(): void;
}

/** Every guarded call in flight, checked by one sweep rather than a timer per call. */
const watched = new Sweep<IdleWatch>((watch, now) => {
  if (watch.waitingSince === null || now - watch.waitingSince < watch.timeoutMs) return false;
  watch.cut();
  return true;
});

/** A cut comes at most a tenth of the timeout late (at most 250 ms, at least 5 ms between checks). */
const sweepPeriod = (timeoutMs: number) => Math.min(250, Math.max(5, Math.floor(timeoutMs / 10)));

function watchIdle(watch: IdleWatch) {
  watched.watch(watch, sweepPeriod(watch.timeoutMs));
}

/** How many upstream calls the sweep watches now: calls waiting on the upstream, not paused ones. */
export function watchedCalls(): number {
  return watched.size;
}

function upstreamIdleGuard(
  controller: AbortController,
  timeoutMs: number,
  cleanup: () => void,
) {
  let timedOut = false;
  // A setTimeout per call (set, then cleared when the call ended) was 5% of a request's CPU.
  const watch: IdleWatch = {
    waitingSince: Date.now(),
    timeoutMs,
    cut() {
      timedOut = true;
      controller.abort(new DOMException("upstream timed out", "TimeoutError"));
    },
  };
  watchIdle(watch);
  let stopped = false;
  return {
    touch() {
      if (stopped || timedOut) return;
      watch.waitingSince = Date.now();
      // Called on every read of a stream: only a paused call needs to rejoin the sweep.
      if (!watched.has(watch)) watchIdle(watch);
    },
    /**
     * No timeout while the reader does not ask for more: silence is measured on our reads only.
     * A paused call leaves the watch, so that a stream abandoned between two reads is not kept.
     */
    pause() {
      watch.waitingSince = null;
      watched.forget(watch);
    },
    stop() {
      stopped = true;
      watch.waitingSince = null;
      watched.forget(watch);
      cleanup();
    },
    /**
     * Turns whatever a fetch or a body read threw into the failure it stands for. A connection
     * that fails inside the body reached the provider, which then broke off mid-answer: that is a
     * `stream_cut` (what /metrics and the log line count), not an unreachable provider.
     */
    translate(error: unknown, during: "connect" | "body"): unknown {
      if (error instanceof ProviderError) return error;
      if (timedOut) {
        return new ProviderError("timeout", `no data from upstream for ${timeoutMs} ms`, {
          cause: error,
        });
      }
      if (controller.signal.aborted) return error; // the client went away; the caller knows
      const reason = (error as Error)?.message ?? error;
      return during === "body"
        ? new ProviderError("stream_cut", `upstream broke off mid-answer: ${reason}`, {
          cause: error,
        })
        : new ProviderError("unreachable", `upstream unreachable: ${reason}`, { cause: error });
    },
  };
}

/** An upstream's error answer is read this far: its reason is in the first bytes, if anywhere. */
const ERROR_BODY_BYTES = 64 * 1024;

/** Reads of a body this size at a time, where the body takes the reader's buffer. */
const BODY_READ_BYTES = 16 * 1024;

/** The start of a body, at most `max` bytes; the rest is not read. `onRead` hears of each read. */
async function bytesUpTo(
  body: BodyReader | ReadableStream<Uint8Array> | null,
  max: number,
  onRead: () => void = () => {},
): Promise<Uint8Array> {
  if (!body) return new Uint8Array(0);
  const reader = body instanceof ReadableStream ? body.getReader() : body;
  const read = body instanceof ReadableStream
    ? () => (reader as ReadableStreamDefaultReader<Uint8Array>).read()
    : () => (reader as BodyReader).read(new Uint8Array(BODY_READ_BYTES));
  const parts: Uint8Array[] = [];
  let length = 0;
  let ended = false;
  try {
    while (length < max) {
      const { value, done } = await read();
      if (done) {
        ended = true;
        break;
      }
      onRead();
      parts.push(value);
      length += value.byteLength;
    }
  } finally {
    if (!ended) await reader.cancel().catch(() => {});
  }
  const bytes = concatBytes(parts);
  return length > max ? bytes.subarray(0, max) : bytes;
}

/**
 * The failure an error status says. Its reason is kept as the upstream wrote it, our key too if
 * quoted: logs redact it, and what a client is shown is made safe without looking at our keys
 * (clientSafe), which replacing the key here would undo.
 */
async function statusError(response: Http1Answer): Promise<ProviderError> {
  const status = response.status;
  const text = await bytesUpTo(response.body, ERROR_BODY_BYTES).then(
    (bytes) => new TextDecoder().decode(bytes),
    () => "",
  );
  const answer = upstreamReason(text);
  const reason = answer.reason ?? `status ${status}`;
  const upstream = { upstreamStatus: status, upstreamError: answer.fields };
  // Our account out of credit (OpenAI's 429 insufficient_quota, Anthropic's 400 "credit balance
  // is too low"): the operator's to fix, and no client's retry a second later helps.
  if (outOfCredit(status, answer.fields, reason)) {
    return new ProviderError(
      "upstream_auth",
      `upstream account out of credit: ${reason}`,
      upstream,
    );
  }
  if (status === 429) {
    return new ProviderError("rate_limited", `upstream rate limited: ${reason}`, {
      ...upstream,
      retryAfterMs: retryAfterMs(response.headers),
    });
  }
  // Our key, our account's billing or permissions: the operator's problem, never the client's.
  if (status === 401 || status === 402 || status === 403) {
    return new ProviderError(
      "upstream_auth",
      `upstream refused our credentials: ${reason}`,
      upstream,
    );
  }
  // A 404 means the catalog names a model or path the upstream does not have: also ours to fix.
  if (status >= 400 && status < 500 && status !== 408 && status !== 404) {
    return new ProviderError("bad_request", reason, upstream);
  }
  return new ProviderError("upstream_error", `upstream failed: ${reason}`, upstream);
}

const OUT_OF_CREDIT_CODE = /^(insufficient_quota|billing_hard_limit_reached)$/;

function outOfCredit(
  status: number,
  fields: UpstreamErrorFields | undefined,
  reason: string,
): boolean {
  if (status === 429) {
    return OUT_OF_CREDIT_CODE.test(fields?.code ?? "") ||
      OUT_OF_CREDIT_CODE.test(fields?.type ?? "");
  }
  return status === 400 && /credit balance is too low/i.test(reason);
}

/** The human-readable reason out of an upstream error body, in any shape it comes in, and its fields. */
function upstreamReason(text: string): { reason: string | null; fields?: UpstreamErrorFields } {
  try {
    const json = JSON.parse(text);
    return { reason: upstreamErrorMessage(json), fields: upstreamErrorFields(json) };
  } catch {
    return { reason: text ? text.slice(0, 200) : null };
  }
}

/**
 * The most of an upstream's `Retry-After` relayed: OpenAI's and Anthropic's limits are mostly per
 * minute, the OpenAI clients wait no longer than this (past it they back off by themselves), and
 * a longer one (2300000000, or a date years ahead) would only tell a client to stop for good; a
 * retry that comes too soon is refused again, charged nothing.
 */
const MAX_RETRY_AFTER_MS = 60_000;

/**
 * The upstream's wait in milliseconds, within the cap; 1 s when it names none. OpenAI's
 * `retry-after-ms` is the precise one (its `Retry-After` the same wait in whole seconds): it is
 * taken unless `Retry-After` asks for longer than its rounding, so that neither header relayed
 * says less than the upstream asked for.
 */
function retryAfterMs(headers: Http1Answer["headers"]): number {
  // Number("") is 0: a blank header would read as a wait of none rather than as no wait named.
  const precise = Number(headers.get("retry-after-ms")?.trim() || NaN);
  const ms = Number.isFinite(precise) && precise >= 0 ? precise : null;
  const coarse = retryAfterHeaderMs(headers.get("retry-after"));
  let wait = ms ?? coarse ?? 1000;
  if (ms !== null && coarse !== null && Math.ceil(ms / 1000) * 1000 < coarse) wait = coarse;
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, Math.ceil(wait)));
}

/** `Retry-After` (seconds, or a date) in milliseconds; null when absent or unreadable. */
function retryAfterHeaderMs(raw: string | null): number | null {
  if (!raw) return null;
  const seconds = Number(raw);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(raw);
  return Number.isNaN(date) ? null : date - Date.now();
}

/**
 * The parts of an upstream stream, its idle timeout running only while the reader waits on the
 * upstream: a client that stops reading (the gateway then reads on for hidden work, or ends the
 * stream itself) does not make the upstream look silent. A wait is also ended by the call's
 * abort (the client left, or the timeout), whether or not the body read notices it.
 */
export async function* guardedParts<T>(
  parts: AsyncIterable<T>,
  call: Awaited<ReturnType<typeof callUpstream>>,
): AsyncGenerator<T> {
  const { idle, signal } = call;
  const iterator = parts[Symbol.asyncIterator]();
  // One waiter per read, ended by the read or by the abort; a Promise.race against one shared
  // abort promise would leave a reaction on it for every event of a long stream.
  let endWait: ((reason: unknown) => void) | null = null;
  const onAbort = () => endWait?.(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  let finished = false;
  try {
    while (true) {
      if (signal.aborted) throw signal.reason;
      const next = await new Promise<IteratorResult<T>>((resolve, reject) => {
        endWait = reject;
        iterator.next().then(resolve, reject);
      });
      endWait = null;
      if (next.done) {
        finished = true;
        return;
      }
      idle.pause();
      yield next.value;
      idle.touch();
    }
  } catch (error) {
    throw idle.translate(error, "body");
  } finally {
    signal.removeEventListener("abort", onAbort);
    idle.stop();
    // Not awaited: a body read the abort did not end must not hold the caller.
    if (!finished) iterator.return?.().catch(() => {});
  }
}

/**
 * The most a whole (non-streamed) chat answer of `maxTokens` may take as JSON: a token's text,
 * escaped, with its logprobs and twenty alternatives is under 2 KiB; 64 MiB at most whatever the
 * cap, so that an upstream that answers without end cannot fill our memory.
 */
export function wholeAnswerBytes(maxTokens: number, sent: unknown): number {
  // A whole Response repeats the request's tools, schema and metadata: the body sent (as UTF-16
  // units, each at most 3 bytes of UTF-8) bounds that echo.
  const echo = JSON.stringify(sent).length * 3;
  return Math.min(64 * 1024 * 1024, 256 * 1024 + maxTokens * 2048) + echo;
}

/**
 * Whether OpenAI refused to stream the model: to an organization it has not verified (o3, GPT-5:
 * "Your organization must be verified to stream this model"), or a model it never streams. Its
 * 400 names `stream` with code `unsupported_value`; a whole answer is then what may be asked.
 */
export function refusedToStream(error: unknown): boolean {
  return error instanceof ProviderError && error.kind === "bad_request" &&
    error.upstreamError?.param === "stream" && error.upstreamError.code === "unsupported_value";
}

/**
 * An OpenAI kind's choice between a streamed call and a whole answer, per model: whole where the
 * catalog says the provider may not be streamed to, or once OpenAI refused to stream the model
 * (refusedToStream; not billed), when the same request is sent again whole.
 */
export function streamedOrWhole(streaming: boolean | undefined) {
  /** Models OpenAI refused to stream to this organization: asked for whole answers from then on. */
  const unstreamed = new Set<string>();
  return async <T>(model: string, streamed: () => Promise<T>, whole: () => Promise<T>) => {
    if (streaming === false || unstreamed.has(model)) return await whole();
    try {
      return await streamed();
    } catch (error) {
      if (!refusedToStream(error)) throw error;
      unstreamed.add(model);
      return await whole();
    }
  };
}

/**
 * `application/json`, with or without parameters, as a whole answer is labelled: a server that
 * ignores `stream` answers a streamed call so.
 */
function isJson(contentType: string | null): boolean {
  return /^application\/json\s*(;|$)/i.test(contentType ?? "");
}

/** `{`, which a whole answer (a JSON object) starts with past any white space; events never do. */
const JSON_START = 0x7b;

/**
 * Whether a streamed call labelled `application/json` (isJson) was answered with a whole JSON
 * body rather than events: some OpenAI-compatible proxies label their event streams so, and read
 * as JSON such a stream was a 502 that charged nothing, though the upstream billed it. Its first
 * bytes decide, and are put back in front of the rest of the body, which is read as before.
 */
async function answeredWhole(
  call: Awaited<ReturnType<typeof callUpstream>>,
): Promise<boolean> {
  const body = call.response.body;
  if (!body) return true;
  const reader = body instanceof ReadableStream ? body.getReader() : body;
  const readNext = (view: Uint8Array) =>
    reader instanceof ReadableStreamDefaultReader ? reader.read() : reader.read(view);
  let first: ReadableStreamReadResult<Uint8Array>;
  try {
    first = await readNext(new Uint8Array(BODY_READ_BYTES));
  } catch (error) {
    const failure = call.idle.translate(error, "body");
    call.idle.stop();
    throw failure;
  }
  if (!first.done) call.idle.touch();
  let held = first.done ? null : first.value;
  const rest: BodyReader = {
    read(view) {
      if (held === null) return first.done ? Promise.resolve(first) : readNext(view);
      const value = held;
      held = null;
      return Promise.resolve({ done: false, value });
    },
    cancel: (reason) => reader.cancel(reason),
  };
  call.response = { ...call.response, body: rest };
  const start = held?.find((byte) =>
    byte !== 0x20 && byte !== 0x09 && byte !== 0x0a && byte !== 0x0d
  );
  return start === undefined || start === JSON_START;
}

/**
 * The whole JSON answer a server that ignores `stream` sent to a streamed call (which it bills, and
 * which read as an event stream would end before its first event: a 502 that charges nothing), or
 * null when the call answered with events. `sent` is the body it repeats (wholeAnswerBytes).
 */
export async function ignoredStream(
  call: Awaited<ReturnType<typeof callUpstream>>,
  maxTokens: number,
  sent: unknown,
): Promise<unknown | null> {
  if (!isJson(call.response.headers.get("content-type")) || !await answeredWhole(call)) {
    return null;
  }
  return await readAnswerJson(call, wholeAnswerBytes(maxTokens, sent));
}

/**
 * A whole (non-streamed) answer's JSON: asked with the time a whole answer of the request's cap may
 * take, read within the size it and the request it repeats may have.
 */
export async function wholeAnswer(
  upstream: BearerUpstream,
  path: string,
  sent: Record<string, unknown>,
  request: { maxTokens: number; signal: AbortSignal },
): Promise<unknown> {
  const timeoutMs = wholeAnswerTimeoutMs(upstream.timeoutMs, request.maxTokens);
  const answer = await postWithBearer({ ...upstream, timeoutMs }, path, sent, request.signal);
  return readAnswerJson(answer, wholeAnswerBytes(request.maxTokens, sent));
}

/**
 * How long a whole (non-streamed) answer may take: its headers come only once it is written, so
 * the provider's timeout, meant for a silence, must also cover the writing: a minute and 20 ms a
 * token of the cap (50 tokens a second, slower than OpenAI's reasoning models write), at most an
 * hour. A call abandoned for its time may still be billed by the provider: it is not charged, and
 * its hold is reported as the operator's exposure (Gateway, `upstream_abandoned`).
 */
export function wholeAnswerTimeoutMs(timeoutMs: number, maxTokens: number): number {
  return Math.max(timeoutMs, Math.min(60 * 60 * 1000, 60_000 + maxTokens * 20));
}

/**
 * Reads a non-streamed answer's JSON body under the same idle guard as its headers. A body longer
 * than `maxBytes` is not read on: an upstream that answers without end must not fill our memory.
 */
export async function readAnswerJson(
  { response, idle }: Awaited<ReturnType<typeof callUpstream>>,
  maxBytes: number,
): Promise<unknown> {
  try {
    // Each read is a sign of life: a long answer that keeps coming is not silence.
    return await readJson(response, maxBytes, idle.touch);
  } catch (error) {
    throw idle.translate(error, "body");
  } finally {
    idle.stop();
  }
}

/** One streamed event's JSON object; null for JSON that is not an object (skipped by readers). */
export function eventJson(data: string): Record<string, unknown> | null {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch (cause) {
    throw new ProviderError("malformed_response", "upstream sent an event that is not JSON", {
      cause,
    });
  }
  return json && typeof json === "object" ? json as Record<string, unknown> : null;
}

async function readJson(
  response: Http1Answer,
  maxBytes: number,
  onRead: () => void,
): Promise<unknown> {
  const bytes = await bytesUpTo(response.body, maxBytes + 1, onRead);
  if (bytes.byteLength > maxBytes) {
    throw new ProviderError(
      "malformed_response",
      `upstream answered with a body larger than ${maxBytes} bytes`,
    );
  }
  const text = new TextDecoder().decode(bytes);
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ProviderError("malformed_response", "upstream answered with malformed JSON", {
      cause,
    });
  }
}
