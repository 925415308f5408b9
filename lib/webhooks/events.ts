/**
 * Webhook events: detected off the request path, written to an outbox, delivered by a background
 * deliverer in each process, signed, retried with exponential backoff, at least once.
 *
 * Detection (`WebhookWatcher`) never runs inside a paid request: the wallet only nudges it after a
 * commit, and it reads the wallet afresh, so it decides on the newest balance whatever order the
 * nudges come in. Its decisions are one atomic commit guarded by the app's watch record, so any
 * number of processes fire one `balance.low` per crossing, and one event per ledger entry that
 * owners hear of (a top-up, a refund or chargeback taken back, or given back again), whose
 * event id is derived from the entry's. A periodic sweep catches what a crashed
 * process nudged but never observed.
 *
 * Delivery (`WebhookDeliverer`): an outbox entry is keyed by the time it is due. A deliverer takes
 * one by moving it, in one checked commit, to the end of a lease; if the process dies mid-delivery
 * the entry is due again when the lease ends, and another deliverer sends it (at least once, never
 * two deliverers at a time). Every event carries an id for receivers to de-duplicate.
 */
import {
  keys,
  type LedgerEntry,
  type WalletRecord,
  type WebhookAttempt,
  type WebhookEventRecord,
  type WebhookEventType,
  type WebhookOutboxEntry,
  type WebhookSettingsRecord,
  type WebhookWatchRecord,
} from "@/lib/db.ts";
import { formatUsd, getManyChunked, ipv4Octets, type Logger, newId } from "@/lib/core/mod.ts";
import { SIGNATURE_HEADER, signatureHeader } from "./signing.ts";
import { privateIp } from "./settings.ts";

/** The ledger entries owners hear of, and the event each is announced as. */
const LEDGER_EVENTS = {
  top_up: "balance.topped_up",
  refund: "balance.taken_back",
  chargeback: "balance.taken_back",
  refund_reversed: "balance.given_back",
  chargeback_reversed: "balance.given_back",
} as const satisfies Partial<Record<LedgerEntry["kind"], WebhookEventType>>;

/**
 * How long an app found without webhooks is not looked at after a commit. Settings saved in this
 * process take effect at once (`forget`); saved by another process, within this long, and the
 * periodic sweep catches up on anything missed meanwhile.
 */
const QUIET_MS = 10_000;

/** How far before the newest ledger entry seen the next scan for announced entries starts. */
const LEDGER_MARGIN_MS = 60_000;

/** The time in an id made by `newId` (prefix, `_`, ten base-36 digits of milliseconds, …). */
function timeOfId(id: string): number {
  const start = id.indexOf("_") + 1;
  return parseInt(id.slice(start, start + 10), 36);
}

/** The smallest id `newId(prefix, ms)` can make. */
function idAt(prefix: string, ms: number): string {
  return `${prefix}_${Math.max(0, ms).toString(36).padStart(10, "0")}`;
}

/** A prepared event: its record, and the writes that store it with its outbox entry. */
export function prepareEvent(
  appId: string,
  type: WebhookEventType,
  data: Record<string, unknown>,
  now: number,
  id = newId("evt", now),
) {
  const payload = JSON.stringify({
    id,
    object: "event",
    type,
    created: Math.floor(now / 1000),
    app_id: appId,
    data,
  });
  const record: WebhookEventRecord = {
    id,
    appId,
    type,
    payload,
    createdAt: now,
    state: "pending",
    attempts: [],
    nextAttemptAt: now,
  };
  const write = (atomic: Deno.AtomicOperation) =>
    atomic
      .check({ key: keys.webhookEvent(appId, id), versionstamp: null })
      .set(keys.webhookEvent(appId, id), record)
      .set(keys.webhookOutbox(now, id), { appId } satisfies WebhookOutboxEntry);
  return { record, write };
}

/** Queues a `webhook.test` event, delivered like any other. */
export async function sendTestEvent(kv: Deno.Kv, appId: string, now = Date.now()) {
  const { record, write } = prepareEvent(appId, "webhook.test", {
    message: "A test event from the Tollbooth dashboard.",
  }, now);
  const result = await write(kv.atomic()).commit();
  if (!result.ok) throw new Error("test event conflicted; try again");
  return record;
}

/** An app's events, newest first, with their delivery attempts. */
export async function listWebhookEvents(
  kv: Deno.Kv,
  appId: string,
  limit = 50,
): Promise<WebhookEventRecord[]> {
  const out: WebhookEventRecord[] = [];
  for await (
    const e of kv.list<WebhookEventRecord>({ prefix: keys.appWebhookEvents(appId) }, {
      reverse: true,
      limit,
    })
  ) out.push(e.value);
  return out;
}

export interface WatcherOptions {
  now?: () => number;
  log?: Logger;
}

/** Detects low-balance crossings and credited top-ups, and queues their events. */
export class WebhookWatcher {
  readonly #kv: Deno.Kv;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #running = new Map<string, Promise<void>>();
  readonly #again = new Set<string>();
  /** Apps found without webhooks, not looked at again until then (most apps have none). */
  readonly #quietUntil = new Map<string, number>();

  constructor(kv: Deno.Kv, options: WatcherOptions = {}) {
    this.#kv = kv;
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? (() => {});
  }

  /** Called after a wallet commit: looks at the app soon, never in the caller's way. */
  nudge(appId: string): void {
    if ((this.#quietUntil.get(appId) ?? 0) > this.#now()) return;
    if (this.#running.has(appId)) {
      this.#again.add(appId);
      return;
    }
    const run = (async () => {
      do {
        this.#again.delete(appId);
        try {
          await this.observe(appId);
        } catch (error) {
          this.#log({
            level: "error",
            event: "webhook_watch_failed",
            appId,
            error: (error as Error)?.message,
          });
        }
      } while (this.#again.has(appId));
      this.#running.delete(appId);
    })();
    this.#running.set(appId, run);
  }

  /** The app's settings changed in this process: look at it on the next nudge. */
  forget(appId: string): void {
    this.#quietUntil.delete(appId);
  }

  /** Resolves once every nudge so far has been observed. */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.all([...this.#running.values()]);
  }

  /** Observes every app that has webhooks (the periodic safety net). */
  async sweep(): Promise<void> {
    for await (const e of this.#kv.list({ prefix: keys.allWebhookSettings() })) {
      await this.observe(String(e.key[1]));
    }
  }

  /** Decides on the app's current wallet and ledger; idempotent. */
  async observe(appId: string): Promise<void> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const [settings, watch, wallet] = await this.#kv.getMany<
        [WebhookSettingsRecord, WebhookWatchRecord, WalletRecord]
      >([keys.webhookSettings(appId), keys.webhookWatch(appId), keys.wallet(appId)]);
      const now = this.#now();
      if (!settings.value || !watch.value || !wallet.value) {
        if (this.#quietUntil.size >= 10_000) this.#quietUntil.clear();
        this.#quietUntil.set(appId, now + QUIET_MS);
        return;
      }
      const events: ReturnType<typeof prepareEvent>[] = [];

      const threshold = settings.value.lowBalanceThreshold;
      const funds = wallet.value.available + wallet.value.reserved;
      const below = threshold !== null && funds < threshold;
      if (below && !watch.value.below) {
        events.push(prepareEvent(appId, "balance.low", {
          balance: formatUsd(wallet.value.available),
          reserved: formatUsd(wallet.value.reserved),
          threshold: formatUsd(threshold),
        }, now));
      }

      // Ledger ids sort by time only to the millisecond (and another process's clock may lag a
      // little), so the scan starts a margin before the newest entry seen, and entries already
      // announced are recognised by their event id, which is derived from the entry's.
      let ledgerSeen = watch.value.ledgerSeen;
      const selector = ledgerSeen
        ? {
          prefix: keys.ledger(appId),
          start: keys.ledgerEntry(appId, idAt("led", timeOfId(ledgerSeen) - LEDGER_MARGIN_MS)),
        }
        : { prefix: keys.ledger(appId) };
      const announcing: LedgerEntry[] = [];
      for await (const e of this.#kv.list<LedgerEntry>(selector, { limit: 200 })) {
        if (ledgerSeen === null || e.value.id > ledgerSeen) ledgerSeen = e.value.id;
        const announced = watch.value.announceAfter;
        const announces = Object.hasOwn(LEDGER_EVENTS, e.value.kind);
        if (announces && (announced === null || e.value.id > announced)) {
          announcing.push(e.value);
        }
      }
      const eventIdOf = (entry: LedgerEntry) => `evt_${entry.id.slice(entry.id.indexOf("_") + 1)}`;
      const existing = await getManyChunked(
        this.#kv,
        announcing.map((entry) => keys.webhookEvent(appId, eventIdOf(entry))),
      );
      announcing.forEach((entry, j) => {
        if (existing[j].versionstamp !== null) return;
        const type = LEDGER_EVENTS[entry.kind as keyof typeof LEDGER_EVENTS];
        const topUp = type === "balance.topped_up";
        events.push(prepareEvent(
          appId,
          type,
          {
            ...(topUp ? {} : { kind: entry.kind }),
            amount: formatUsd(entry.amount),
            ledger_entry_id: entry.id,
            reference: entry.reference,
            balance: formatUsd(wallet.value!.available),
            ...(topUp ? {} : { owed: formatUsd(wallet.value!.owed ?? 0) }),
          },
          now,
          eventIdOf(entry),
        ));
      });

      if (!events.length && below === watch.value.below && ledgerSeen === watch.value.ledgerSeen) {
        return;
      }
      const atomic = this.#kv.atomic()
        .check(watch)
        .set(
          keys.webhookWatch(appId),
          { ...watch.value, below, ledgerSeen } satisfies WebhookWatchRecord,
        );
      for (const event of events) event.write(atomic);
      if ((await atomic.commit()).ok) return;
    }
    throw new Error(`webhook watch of ${appId} kept conflicting`);
  }
}

export interface DelivererOptions {
  fetch?: typeof fetch;
  now?: () => number;
  log?: Logger;
  /** How long a deliverer holds an event it is sending. */
  leaseMs?: number;
  /** The first retry waits this long, each next one twice as long, up to `maxBackoffMs`. */
  retryBaseMs?: number;
  maxBackoffMs?: number;
  maxAttempts?: number;
  /** How long a receiver may take to answer one attempt. */
  timeoutMs?: number;
  /** Resolves a host name, to refuse one that points inside the network (Deno.resolveDns). */
  resolve?: (hostname: string, type: "A" | "AAAA") => Promise<string[]>;
}

export const WEBHOOK_DEFAULTS = {
  leaseMs: 60_000,
  retryBaseMs: 10_000,
  maxBackoffMs: 60 * 60 * 1000,
  maxAttempts: 12,
  timeoutMs: 10_000,
};

/** A delivery round sends this many events, at most ROUND_PER_APP of one app, of the first ROUND_SCAN due. */
const ROUND_SIZE = 20;
const ROUND_PER_APP = 2;
const ROUND_SCAN = 500;

/** The wait after the `attempts`-th failed attempt. */
export function backoffMs(attempts: number, base: number, max: number): number {
  return Math.min(max, base * 2 ** (attempts - 1));
}

/** Sends due events; one per process, started by main.ts (tests call `deliverDue`). */
export class WebhookDeliverer {
  readonly #kv: Deno.Kv;
  readonly #fetch: typeof fetch;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #o: typeof WEBHOOK_DEFAULTS;
  readonly #resolve: NonNullable<DelivererOptions["resolve"]>;
  #timer: ReturnType<typeof setInterval> | undefined;
  #busy: Promise<number> | null = null;

  constructor(kv: Deno.Kv, options: DelivererOptions = {}) {
    this.#kv = kv;
    this.#fetch = options.fetch ?? fetch;
    this.#resolve = options.resolve ?? ((hostname, type) => Deno.resolveDns(hostname, type));
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? (() => {});
    this.#o = {
      leaseMs: options.leaseMs ?? WEBHOOK_DEFAULTS.leaseMs,
      retryBaseMs: options.retryBaseMs ?? WEBHOOK_DEFAULTS.retryBaseMs,
      maxBackoffMs: options.maxBackoffMs ?? WEBHOOK_DEFAULTS.maxBackoffMs,
      maxAttempts: options.maxAttempts ?? WEBHOOK_DEFAULTS.maxAttempts,
      timeoutMs: options.timeoutMs ?? WEBHOOK_DEFAULTS.timeoutMs,
    };
  }

  /** Polls the outbox every `pollMs` until `stop`. */
  start(pollMs = 1_000): void {
    this.#timer ??= setInterval(() => void this.kick(), pollMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#busy;
  }

  /** Delivers what is due now, unless a round is already running. */
  kick(): Promise<number> {
    this.#busy ??= this.deliverDue().catch((error) => {
      this.#log({ level: "error", event: "webhook_delivery_round_failed", error: error?.message });
      return 0;
    }).finally(() => (this.#busy = null));
    return this.#busy;
  }

  /**
   * One round: takes and sends up to 20 due events, at most 2 of any one app, so that an app with
   * a backlog (or an endpoint that never answers) cannot fill every round; returns how many were
   * attempted.
   */
  async deliverDue(): Promise<number> {
    const now = this.#now();
    const due: Deno.KvEntry<WebhookOutboxEntry>[] = [];
    const perApp = new Map<string, number>();
    for await (
      const entry of this.#kv.list<WebhookOutboxEntry>({
        start: keys.webhookOutboxAll(),
        end: [...keys.webhookOutboxAll(), now + 1],
      }, { limit: ROUND_SCAN })
    ) {
      const taken = perApp.get(entry.value.appId) ?? 0;
      if (taken >= ROUND_PER_APP) continue;
      perApp.set(entry.value.appId, taken + 1);
      due.push(entry);
      if (due.length === ROUND_SIZE) break;
    }
    const sent = await Promise.all(due.map((entry) => this.#deliverOne(entry)));
    return sent.filter(Boolean).length;
  }

  async #deliverOne(entry: Deno.KvEntry<WebhookOutboxEntry>): Promise<boolean> {
    const eventId = String(entry.key[2]);
    const { appId } = entry.value;
    const leaseKey = keys.webhookOutbox(this.#now() + this.#o.leaseMs, eventId);
    const leased = await this.#kv.atomic()
      .check(entry)
      .delete(entry.key)
      .set(leaseKey, entry.value)
      .commit();
    // Another deliverer took it first.
    if (!leased.ok) return false;
    const lease = { key: leaseKey, versionstamp: leased.versionstamp };

    const [eventEntry, settings] = await this.#kv.getMany<
      [WebhookEventRecord, WebhookSettingsRecord]
    >([keys.webhookEvent(appId, eventId), keys.webhookSettings(appId)]);
    const event = eventEntry.value;
    if (!event || event.state !== "pending") {
      await this.#kv.atomic().check(lease).delete(leaseKey).commit();
      return false;
    }
    const attempt = settings.value
      ? await this.#send(settings.value, event)
      : { at: this.#now(), status: null, error: "no endpoint configured", durationMs: 0 };
    const attempts = [...event.attempts, attempt];
    const delivered = attempt.status !== null && attempt.status >= 200 && attempt.status < 300;
    const giveUp = !delivered && (attempts.length >= this.#o.maxAttempts || !settings.value);
    const nextAttemptAt = delivered || giveUp ? null : this.#now() +
      backoffMs(attempts.length, this.#o.retryBaseMs, this.#o.maxBackoffMs);
    const updated: WebhookEventRecord = {
      ...event,
      attempts,
      state: delivered ? "delivered" : giveUp ? "failed" : "pending",
      nextAttemptAt,
    };
    const atomic = this.#kv.atomic()
      .check(lease)
      .check(eventEntry)
      .delete(leaseKey)
      .set(keys.webhookEvent(appId, eventId), updated);
    if (nextAttemptAt !== null) {
      atomic.set(
        keys.webhookOutbox(nextAttemptAt, eventId),
        { appId } satisfies WebhookOutboxEntry,
      );
    }
    const result = await atomic.commit();
    if (!result.ok) {
      // Our lease ran out and another deliverer has the event now: it sends it again.
      this.#log({ level: "warn", event: "webhook_lease_lost", appId, eventId });
    }
    return true;
  }

  /**
   * Whether the endpoint's host name resolves inside the network (a name checked when saved may
   * point anywhere since). Addresses written out were checked when the endpoint was saved; a
   * name that does not resolve is left to fail the send.
   */
  async #pointsInside(url: string): Promise<boolean> {
    const hostname = new URL(url).hostname;
    if (hostname.startsWith("[") || ipv4Octets(hostname)) return false;
    if (hostname === "localhost") return false;
    const found = await Promise.all(
      (["A", "AAAA"] as const).map((type) => this.#resolve(hostname, type).catch(() => [])),
    );
    return found.flat().some(privateIp);
  }

  async #send(settings: WebhookSettingsRecord, event: WebhookEventRecord): Promise<WebhookAttempt> {
    const at = this.#now();
    const started = performance.now();
    const timestamp = Math.floor(at / 1000);
    try {
      if (await this.#pointsInside(settings.url)) {
        return {
          at,
          status: null,
          error: "refused: the endpoint's name resolves to a private or reserved address",
          durationMs: performance.now() - started,
        };
      }
      const res = await this.#fetch(settings.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "Tollbooth-Webhooks/1",
          "tollbooth-event-id": event.id,
          [SIGNATURE_HEADER]: signatureHeader(settings.secret, timestamp, event.payload),
        },
        body: event.payload,
        redirect: "manual",
        signal: AbortSignal.timeout(this.#o.timeoutMs),
      });
      await res.body?.cancel();
      return { at, status: res.status, error: null, durationMs: performance.now() - started };
    } catch (error) {
      return {
        at,
        status: null,
        error: String((error as Error)?.message ?? error).slice(0, 200),
        durationMs: performance.now() - started,
      };
    }
  }
}
