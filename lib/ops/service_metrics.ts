/**
 * Tollbooth's Prometheus metrics. Request metrics are fed by the per-request log line, so the logs
 * and the metrics cannot disagree; the reservation gauges are read from KV at scrape time, so they
 * are the same on every instance; the wallet group-commit counters are this thread's own.
 */
import { keys, type ReservationRecord, type ServiceTotal } from "@/lib/db.ts";
import type { RequestLogLine } from "@/lib/core/mod.ts";
import { PROVIDER_FAILURES } from "@/lib/gateway/mod.ts";
import {
  type CounterSeries,
  type HistogramSeries,
  type MetricsSnapshot,
  Registry,
} from "./metrics.ts";
import type { WalletStats } from "@/lib/billing/mod.ts";

const LATENCY_BUCKETS_S = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** An operator endpoint must stay cheap: past this many reservations the scan stops and says so. */
const RESERVATION_SCAN_LIMIT = 10_000;
/** Kinds of request remembered with their series; past this many (odd model names) they start over. */
const MAX_REQUEST_KINDS = 1_000;

/**
 * The series one kind of request (status, model, streaming, provider, failure) counts into, each
 * found the first time it is needed: a request counts into seven, and finding each by its labels
 * (building the label set and its key) was most of what counting a request cost.
 */
interface RequestKind {
  http: CounterSeries;
  chat?: CounterSeries;
  duration?: HistogramSeries;
  upstream?: HistogramSeries;
  upstreamFailures?: CounterSeries;
  promptTokens?: CounterSeries;
  completionTokens?: CounterSeries;
  charged?: CounterSeries;
}

/** A nullable label's part of a kind's key: null apart from any name, "null" included. */
const known = (value: string | null) => value === null ? "-" : `=${value}`;

export class ServiceMetrics {
  readonly #registry = new Registry();
  readonly #http = this.#registry.counter(
    "tollbooth_http_requests_total",
    "HTTP requests answered, by status code.",
  );
  readonly #chat = this.#registry.counter(
    "tollbooth_chat_completions_total",
    "Chat completion requests by model (none when it was not resolved), status and streaming.",
  );
  readonly #duration = this.#registry.histogram(
    "tollbooth_chat_completion_duration_seconds",
    "Total time of a chat completion request, to the end of its stream, by model and streaming.",
    LATENCY_BUCKETS_S,
  );
  readonly #upstream = this.#registry.histogram(
    "tollbooth_upstream_duration_seconds",
    "Time until the upstream provider answered (a whole completion, or a stream's first byte).",
    LATENCY_BUCKETS_S,
  );
  readonly #upstreamFailures = this.#registry.counter(
    "tollbooth_upstream_failures_total",
    `Upstream provider failures by provider and kind (${
      Object.keys(PROVIDER_FAILURES).join(", ")
    }).`,
  );
  readonly #tokens = this.#registry.counter(
    "tollbooth_tokens_total",
    "Tokens billed, by model and kind (prompt or completion).",
  );
  readonly #charged = this.#registry.counter(
    "tollbooth_charged_micro_usd_total",
    "Micro-USD taken from wallets for settled requests, by model.",
  );
  readonly #inputCounts = this.#registry.counter(
    "tollbooth_count_tokens_total",
    "Prompts counted exactly by the provider's free counting endpoint (Anthropic's count_tokens, OpenAI's Responses input token count, the simulator's own bill) before the reservation, by provider and outcome (counted, or failed: the bound stood, or a PDF was refused).",
  );
  readonly #outstanding = this.#registry.gauge(
    "tollbooth_reservations_outstanding",
    "Reservations not yet settled or released, over all instances (read from KV).",
  );
  readonly #outstandingAmount = this.#registry.gauge(
    "tollbooth_reservations_outstanding_micro_usd",
    "Micro-USD in outstanding reservations, over all instances (read from KV).",
  );
  readonly #expired = this.#registry.gauge(
    "tollbooth_reservations_expired",
    "Outstanding reservations whose lease has run out, waiting for the sweeper.",
  );
  readonly #truncated = this.#registry.gauge(
    "tollbooth_reservations_scan_truncated",
    `1 when more than ${RESERVATION_SCAN_LIMIT} reservations exist and the reservation gauges are lower bounds.`,
  );

  /** Service-wide sums kept in KV, read at each scrape: the same on every instance. */
  readonly #totals: Record<ServiceTotal, number> = {
    starter_credits_granted: 0,
    apps_created: 0,
    uncharged: 0,
  };

  /** Responses this worker marked to close their connection (connection_steering.ts). */
  #steeredConnections: () => number = () => 0;

  constructor(walletStats: WalletStats, startedAt = Date.now()) {
    const total = (name: ServiceTotal, metric: string, help: string) =>
      this.#registry.sampled(
        metric,
        help,
        "counter",
        "shared",
        () => [{ value: this.#totals[name] }],
      );
    total(
      "starter_credits_granted",
      "tollbooth_starter_credits_granted_micro_usd_total",
      "Micro-USD of starter credits granted to new apps, over all instances (read from KV).",
    );
    total(
      "apps_created",
      "tollbooth_apps_created_total",
      "Apps created, by owners and by the operator, over all instances (read from KV).",
    );
    total(
      "uncharged",
      "tollbooth_uncharged_micro_usd_total",
      "Micro-USD of usage that neither its reservation nor the wallet's balance covered, so never charged (the operator's loss), over all instances (read from KV).",
    );
    const stat = (name: keyof WalletStats, help: string) =>
      this.#registry.sampled(
        `tollbooth_wallet_${name.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase())}_total`,
        help,
        "counter",
        "thread",
        () => [{ value: walletStats[name] }],
      );
    stat("commits", "Wallet group commits that succeeded in this process.");
    stat("conflicts", "Wallet commits that failed their versionstamp check and were retried.");
    stat("unknownOutcomes", "Wallet commits whose outcome was unknown and was read back.");
    stat("opsCommitted", "Wallet operations (reserve, settle, release, renew, credit) committed.");
    stat("sliceFallbacks", "Reserves that slices were on for but that took the per-request path.");
    stat(
      "sliceRecalls",
      "Reserves refused for money other processes' slices held, which asked for it back.",
    );
    stat("sliceGiveBacks", "Slices of this process that gave their free money back to the wallet.");
    stat(
      "optimisticStarts",
      "Upstream calls started while their reservation committed (OPTIMISTIC_UPSTREAM).",
    );
    stat(
      "commitLockTakeovers",
      "Commit locks taken over from a worker that held one past its wait (hung or died).",
    );
    stat(
      "mispredictions",
      "Optimistic upstream calls whose reservation was then refused: aborted, nothing charged.",
    );
    stat(
      "mispredictionExposureMicros",
      "Micro-USD the aborted optimistic calls would have held: a bound of what providers may bill for them.",
    );
    stat(
      "abandonedCalls",
      "Upstream calls sent and given up for the provider's timeout before any answer: nothing charged.",
    );
    stat(
      "abandonedExposureMicros",
      "Micro-USD of the holds the abandoned calls were sent under: a bound of what providers may bill for them.",
    );
    stat(
      "endedEarlyCalls",
      "Paid calls that ended before their upstream finished (client gone or stalled, upstream cut), charged by our count of the output: the provider's usage never came.",
    );
    stat(
      "endedEarlyExposureMicros",
      "Micro-USD those calls' holds covered beyond their charge: a bound of what providers may bill beyond it.",
    );
    stat(
      "unbilledSettles",
      "Settles that failed for good (KV down or locked past every try): their requests were answered as not charged.",
    );
    stat(
      "unbilledMicros",
      "Micro-USD of the usage those settles could not bill: the operator's loss, counted when it happens.",
    );
    stat(
      "unbilledRecordedMicros",
      "Of that, micro-USD recorded later as the apps' uncharged usage (so also in tollbooth_uncharged_micro_usd_total); the rest was not (its hold released by the sweeper first, or the process gone).",
    );
    this.#registry.sampled(
      "tollbooth_connections_steered_total",
      "Responses a worker marked Connection: close to move their keep-alive connection: to gather a light load on the first worker, or to spread a heavy one (SERVE_WORKERS above 1). An HTTP/2 connection ignores the mark; an HTTP/1.0 one closes anyway.",
      "counter",
      "thread",
      () => [{ value: this.#steeredConnections() }],
    );
    this.#registry.sampled(
      "tollbooth_process_start_time_seconds",
      "Start time of this process since the Unix epoch.",
      "gauge",
      "thread",
      () => [{ value: Math.floor(startedAt / 1000) }],
    );
  }

  readonly #kinds = new Map<string, RequestKind>();

  /** Where the steered connections' count is read from, once this worker steers. */
  countSteeredConnections(read: () => number) {
    this.#steeredConnections = read;
  }

  /** Counts one finished request from its log line. */
  observeRequest(line: RequestLogLine) {
    const chat = line.path === "/v1/chat/completions";
    const kindKey = chat
      ? `${line.status}\0${known(line.model)}\0${line.streamed}\0${known(line.provider)}\0${
        known(line.upstreamFailure)
      }`
      : String(line.status);
    let kind = this.#kinds.get(kindKey);
    if (!kind) {
      if (this.#kinds.size >= MAX_REQUEST_KINDS) this.#kinds.clear();
      kind = { http: this.#http.child({ status: String(line.status) }) };
      this.#kinds.set(kindKey, kind);
    }
    kind.http.inc();
    if (!chat) return;
    const model = line.model ?? "none";
    const streamed = String(line.streamed ?? false);
    (kind.chat ??= this.#chat.child({ model, status: String(line.status), streamed })).inc();
    (kind.duration ??= this.#duration.child({ model, streamed })).observe(line.totalMs / 1000);
    if (line.upstreamMs !== null && line.provider !== null) {
      (kind.upstream ??= this.#upstream.child({ provider: line.provider, model }))
        .observe(line.upstreamMs / 1000);
    }
    if (line.upstreamFailure !== null) {
      (kind.upstreamFailures ??= this.#upstreamFailures.child({
        provider: line.provider ?? "none",
        kind: line.upstreamFailure,
      })).inc();
    }
    if (line.promptTokens !== null) {
      (kind.promptTokens ??= this.#tokens.child({ model, kind: "prompt" })).inc(line.promptTokens);
    }
    if (line.completionTokens !== null) {
      (kind.completionTokens ??= this.#tokens.child({ model, kind: "completion" }))
        .inc(line.completionTokens);
    }
    if (line.cost) (kind.charged ??= this.#charged.child({ model })).inc(line.cost);
    const inputCount = (line as { inputCount?: string }).inputCount;
    if (inputCount) {
      this.#inputCounts.inc({ provider: line.provider ?? "none", outcome: inputCount });
    }
  }

  /** What this thread counted, for the scrape of a worker beside it. */
  snapshot(): MetricsSnapshot {
    return this.#registry.snapshot();
  }

  /**
   * Reads the shared gauges from KV, then renders every family, with the counts of the other
   * workers on this port (`others`) added.
   */
  async scrape(kv: Deno.Kv, now = Date.now(), others: MetricsSnapshot[] = []): Promise<string> {
    const names = Object.keys(this.#totals) as ServiceTotal[];
    const sums = await kv.getMany<Deno.KvU64[]>(names.map((name) => keys.serviceTotal(name)));
    names.forEach((name, i) => this.#totals[name] = Number(sums[i].value?.value ?? 0n));
    let count = 0, amount = 0, expired = 0, truncated = 0;
    const reservations = kv.list<ReservationRecord>({ prefix: keys.allReservations() }, {
      limit: RESERVATION_SCAN_LIMIT + 1,
      batchSize: 500,
    });
    for await (const entry of reservations) {
      if (count === RESERVATION_SCAN_LIMIT) {
        truncated = 1;
        break;
      }
      count++;
      amount += entry.value.amount;
      if (entry.value.leaseUntil <= now) expired++;
    }
    this.#outstanding.set(count);
    this.#outstandingAmount.set(amount);
    this.#expired.set(expired);
    this.#truncated.set(truncated);
    return this.#registry.render(others);
  }
}
