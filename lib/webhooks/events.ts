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
 * Delivery (`WebhookDeliverer`): an outbox entry is keyed by its app and the time it is due. A
 * deliverer takes one by moving it, in one checked commit, to the end of a lease; if the process
 * dies mid-delivery the entry is due again when the lease ends, and another deliverer sends it (at
 * least once, never two deliverers at a time). Every event carries an id for receivers to
 * de-duplicate. Each round goes round the apps with outbox entries and takes a few of each, so no
 * app's backlog, however long, holds up another app's events.
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
import {
  formatUsd,
  getManyChunked,
  ipv4Octets,
  type Logger,
  newId,
  proxyConfigured,
} from "@/lib/core/mod.ts";
import { SIGNATURE_HEADER, signatureHeader } from "./signing.ts";
import { privateIp } from "./settings.ts";
import { postPinned } from "./pinned_post.ts";

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
/** Ledger entries past the newest seen that one observation takes in (one commit's events). */
const NEW_ENTRIES_PER_OBSERVE = 100;

/** The time in an id made by `newId` (prefix, `_`, ten base-36 digits of milliseconds, …). */
function timeOfId(id: string): number {
  const start = id.indexOf("_") + 1;
  return parseInt(id.slice(start, start + 10), 36);
}

/** The smallest id `newId(prefix, ms)` can make. */
function idAt(prefix: string, ms: number): string {
  return `${prefix}_${Math.max(0, ms).toString(36).padStart(10, "0")}`;
}

/**
 * How long a delivered or given-up event stays listed. Its record is also what makes a ledger
 * entry's announcement happen once, so entries are announced only well within this (see
 * `ANNOUNCE_WITHIN_MS`).
 */
export const WEBHOOK_EVENT_RETENTION_MS = 30 * 24 * 60 * 60 * 1000;

/**
 * A ledger entry older than this is never announced: its event, if it had one, may have expired.
 * The watcher announces within seconds of the commit, its sweep within minutes.
 */
const ANNOUNCE_WITHIN_MS = 7 * 24 * 60 * 60 * 1000;

/** An outbox entry's writes: the entry, and the app's mark among those a deliverer goes round. */
function queue(atomic: Deno.AtomicOperation, appId: string, dueAt: number, eventId: string) {
  return atomic
    .set(keys.webhookOutbox(appId, dueAt, eventId), { appId } satisfies WebhookOutboxEntry)
    .set(keys.webhookOutboxApp(appId), true);
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
    queue(
      atomic
        .check({ key: keys.webhookEvent(appId, id), versionstamp: null })
        .set(keys.webhookEvent(appId, id), record),
      appId,
      now,
      id,
    );
  return { record, write };
}

/** More test events in the last minute than the app may send; `retryAfterSeconds` until one fits. */
export class TestEventLimitError extends Error {
  constructor(readonly perMinute: number, readonly retryAfterSeconds: number) {
    super(`at most ${perMinute} test events a minute`);
  }
}

/**
 * Queues a `webhook.test` event, delivered like any other. With `perMinute`, at most that many are
 * queued per app in any minute (the dashboard's button: each event is up to 12 attempts at the
 * owner's endpoint); the count and the event are one commit, so concurrent clicks cannot pass it.
 */
export async function sendTestEvent(
  kv: Deno.Kv,
  appId: string,
  now = Date.now(),
  options: { perMinute?: number } = {},
) {
  for (let attempt = 0; attempt < 10; attempt++) {
    const { record, write } = prepareEvent(appId, "webhook.test", {
      message: "A test event from the Tollbooth dashboard.",
    }, now);
    const atomic = kv.atomic();
    if (options.perMinute !== undefined) {
      const sends = await kv.get<number[]>(keys.webhookTestSends(appId));
      const recent = (sends.value ?? []).filter((at) => at > now - 60_000).sort((a, b) => a - b);
      if (recent.length >= options.perMinute) {
        const fits = recent[recent.length - options.perMinute] + 60_000;
        throw new TestEventLimitError(
          options.perMinute,
          Math.max(1, Math.ceil((fits - now) / 1000)),
        );
      }
      atomic.check(sends).set(keys.webhookTestSends(appId), [...recent, now], { expireIn: 60_000 });
    }
    if ((await write(atomic).commit()).ok) return record;
  }
  throw new Error("test event conflicted; try again");
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
      // The margin's entries are read whole (a burst may hold hundreds), and the new ones at most
      // NEW_ENTRIES_PER_OBSERVE at a time, so that the scan always moves past what it has seen
      // and one commit's events stay within KV's limits; the rest are observed next.
      let newEntries = 0;
      let more = false;
      for await (const e of this.#kv.list<LedgerEntry>(selector, { batchSize: 200 })) {
        if (watch.value.ledgerSeen === null || e.value.id > watch.value.ledgerSeen) {
          if (newEntries === NEW_ENTRIES_PER_OBSERVE) {
            more = true;
            break;
          }
          newEntries++;
        }
        if (ledgerSeen === null || e.value.id > ledgerSeen) ledgerSeen = e.value.id;
        const announced = watch.value.announceAfter;
        const announces = Object.hasOwn(LEDGER_EVENTS, e.value.kind) &&
          e.value.createdAt > now - ANNOUNCE_WITHIN_MS;
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
            balance: formatUsd(entry.balanceAfter ?? wallet.value!.available),
            ...(topUp ? {} : { owed: formatUsd(entry.owedAfter ?? wallet.value!.owed ?? 0) }),
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
      if ((await atomic.commit()).ok) {
        if (more) await this.observe(appId);
        return;
      }
    }
    throw new Error(`webhook watch of ${appId} kept conflicting`);
  }
}

export interface DelivererOptions {
  /**
   * Sends in place of the pinned POST (tests): it is given the URL, not the address checked, so
   * it stands for a receiver, not for the protection against a name that moves.
   */
  fetch?: typeof fetch;
  /** Trusted roots besides the system's, for the pinned POST (tests). */
  caCerts?: string[];
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

/**
 * A delivery round sends up to ROUND_SIZE events, at most ROUND_PER_APP of one app, looking at up
 * to ROUND_APPS apps with outbox entries, going on next round after the last one it looked at.
 */
const ROUND_SIZE = 20;
const ROUND_PER_APP = 2;
const ROUND_APPS = 200;
/** Entries of the earlier, single outbox moved to the per-app one per round. */
const LEGACY_MOVES = 100;

/** The wait after the `attempts`-th failed attempt. */
export function backoffMs(attempts: number, base: number, max: number): number {
  return Math.min(max, base * 2 ** (attempts - 1));
}

/**
 * How long a failing event is retried: the waits between its first attempt and its last (each
 * attempt's own few seconds aside). The dashboard and /docs/webhooks state it from this, so they
 * say what the deliverer does.
 */
export function retrySpanMs(
  o: Pick<typeof WEBHOOK_DEFAULTS, "retryBaseMs" | "maxBackoffMs" | "maxAttempts"> =
    WEBHOOK_DEFAULTS,
): number {
  let total = 0;
  for (let failed = 1; failed < o.maxAttempts; failed++) {
    total += backoffMs(failed, o.retryBaseMs, o.maxBackoffMs);
  }
  return total;
}

/** The retry span in words, to the half hour: "about 3.5 hours". */
export function retrySpanText(spanMs = retrySpanMs()): string {
  const hours = Math.round(spanMs / 1_800_000) / 2;
  return hours < 1
    ? `about ${Math.max(1, Math.round(spanMs / 60_000))} minutes`
    : `about ${hours} hour${hours === 1 ? "" : "s"}`;
}

/** Sends due events; one per process, started by main.ts (tests call `deliverDue`). */
export class WebhookDeliverer {
  readonly #kv: Deno.Kv;
  readonly #fetch: typeof fetch | null;
  readonly #caCerts: string[] | undefined;
  readonly #now: () => number;
  readonly #log: Logger;
  readonly #o: typeof WEBHOOK_DEFAULTS;
  readonly #resolve: NonNullable<DelivererOptions["resolve"]>;
  #timer: ReturnType<typeof setInterval> | undefined;
  #busy: Promise<number> | null = null;
  /** The last app a round looked at: the next round starts after it. */
  #lastApp: string | null = null;

  constructor(kv: Deno.Kv, options: DelivererOptions = {}) {
    this.#kv = kv;
    // Through a proxy, the proxy connects by the name: fetch honours it, the check still refuses
    // a name that resolves inside.
    this.#fetch = options.fetch ?? (proxyConfigured() ? fetch : null);
    this.#caCerts = options.caCerts;
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
   * One round: takes and sends up to 20 due events, at most 2 of any one app, going round the apps
   * with outbox entries from where the last round stopped. An app with a backlog (or an endpoint
   * that never answers) costs each round one short read and two places, however long its queue:
   * another app's event goes out in the next round that reaches it. Returns how many were
   * attempted.
   */
  async deliverDue(): Promise<number> {
    const now = this.#now();
    await this.#moveLegacyEntries();
    const due: Deno.KvEntry<WebhookOutboxEntry>[] = [];
    const apps = await this.#appsInTurn();
    for (const app of apps) {
      if (due.length >= ROUND_SIZE) break;
      this.#lastApp = String(app.key[1]);
      const taken = await Array.fromAsync(this.#kv.list<WebhookOutboxEntry>({
        start: keys.appWebhookOutbox(this.#lastApp),
        end: [...keys.appWebhookOutbox(this.#lastApp), now + 1],
      }, { limit: Math.min(ROUND_PER_APP, ROUND_SIZE - due.length) }));
      due.push(...taken);
      if (taken.length === 0) await this.#forgetIfEmpty(app);
    }
    const sent = await Promise.all(due.map((entry) => this.#deliverOne(entry)));
    return sent.filter(Boolean).length;
  }

  /** Up to ROUND_APPS apps with outbox entries, starting after the last one looked at. */
  async #appsInTurn(): Promise<Deno.KvEntry<unknown>[]> {
    const prefix = keys.webhookOutboxApps();
    // An id followed by "\0" is the first key past that id's.
    const after = this.#lastApp === null ? [] : await Array.fromAsync(this.#kv.list({
      prefix,
      start: keys.webhookOutboxApp(`${this.#lastApp}\0`),
    }, { limit: ROUND_APPS }));
    const wrapped = after.length < ROUND_APPS
      ? await Array.fromAsync(this.#kv.list({ prefix }, { limit: ROUND_APPS - after.length }))
      : [];
    const seen = new Set(after.map((e) => String(e.key[1])));
    return [...after, ...wrapped.filter((e) => !seen.has(String(e.key[1])))];
  }

  /**
   * Drops an app's mark once its outbox is empty (leases included). Checked against the mark as
   * read: an event queued since has set it again, and the mark stays.
   */
  async #forgetIfEmpty(app: Deno.KvEntry<unknown>): Promise<void> {
    const appId = String(app.key[1]);
    const [any] = await Array.fromAsync(
      this.#kv.list({ prefix: keys.appWebhookOutbox(appId) }, { limit: 1 }),
    );
    if (any) return;
    await this.#kv.atomic().check(app).delete(app.key).commit();
  }

  /**
   * Moves entries of the single outbox of earlier versions into the per-app one, each in a commit
   * checked against it (a deliverer of an earlier version may take it first, and writes its
   * retry there again, to be moved next round).
   */
  async #moveLegacyEntries(): Promise<void> {
    const legacy = await Array.fromAsync(
      this.#kv.list<WebhookOutboxEntry>({ prefix: keys.legacyWebhookOutbox() }, {
        limit: LEGACY_MOVES,
      }),
    );
    await Promise.all(legacy.map((entry) => {
      const [, dueAt, eventId] = entry.key;
      return queue(
        this.#kv.atomic().check(entry).delete(entry.key),
        entry.value.appId,
        Number(dueAt),
        String(eventId),
      ).commit();
    }));
  }

  async #deliverOne(entry: Deno.KvEntry<WebhookOutboxEntry>): Promise<boolean> {
    const eventId = String(entry.key[3]);
    const { appId } = entry.value;
    const leaseKey = keys.webhookOutbox(appId, this.#now() + this.#o.leaseMs, eventId);
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
      .set(
        keys.webhookEvent(appId, eventId),
        updated,
        // Done with: listed for a while, then gone (KV deletes it; nothing else refers to it).
        nextAttemptAt === null ? { expireIn: WEBHOOK_EVENT_RETENTION_MS } : undefined,
      );
    if (nextAttemptAt !== null) queue(atomic, appId, nextAttemptAt, eventId);
    const result = await atomic.commit();
    if (!result.ok) {
      // Our lease ran out and another deliverer has the event now: it sends it again.
      this.#log({ level: "warn", event: "webhook_lease_lost", appId, eventId });
    }
    return true;
  }

  /**
   * The address to send to: the one written out in the URL (checked when the endpoint was saved),
   * or one the host name resolves to now, since a name checked when saved may point anywhere
   * since. Refused, with the attempt's reason, when the name resolves inside the network or not
   * at all.
   */
  async #addressOf(url: URL): Promise<{ address: string } | { refused: string }> {
    const hostname = url.hostname;
    if (hostname.startsWith("[")) return { address: hostname.slice(1, -1) };
    if (ipv4Octets(hostname)) return { address: hostname };
    // Saved only where loopback endpoints are allowed (`deno task dev`, tests).
    if (hostname === "localhost") return { address: "127.0.0.1" };
    const found = (await Promise.all(
      (["A", "AAAA"] as const).map((type) => this.#resolve(hostname, type).catch(() => [])),
    )).flat();
    if (found.some(privateIp)) {
      return { refused: "refused: the endpoint's name resolves to a private or reserved address" };
    }
    if (found.length === 0) return { refused: "the endpoint's name does not resolve" };
    return { address: found[0] };
  }

  /** POSTs to the checked address, the name not looked up again (see pinned_post.ts). */
  async #post(
    url: URL,
    address: string,
    headers: Record<string, string>,
    body: string,
  ): Promise<number> {
    const signal = AbortSignal.timeout(this.#o.timeoutMs);
    if (!this.#fetch) {
      return await postPinned(url, { address, headers, body, signal, caCerts: this.#caCerts });
    }
    const res = await this.#fetch(url, {
      method: "POST",
      headers,
      body,
      redirect: "manual",
      signal,
    });
    await res.body?.cancel();
    return res.status;
  }

  async #send(settings: WebhookSettingsRecord, event: WebhookEventRecord): Promise<WebhookAttempt> {
    const at = this.#now();
    const started = performance.now();
    const timestamp = Math.floor(at / 1000);
    try {
      const url = new URL(settings.url);
      const target = await this.#addressOf(url);
      if ("refused" in target) {
        return { at, status: null, error: target.refused, durationMs: performance.now() - started };
      }
      const status = await this.#post(url, target.address, {
        "content-type": "application/json",
        "user-agent": "Tollbooth-Webhooks/1",
        "tollbooth-event-id": event.id,
        [SIGNATURE_HEADER]: signatureHeader(settings.secret, timestamp, event.payload),
      }, event.payload);
      return { at, status, error: null, durationMs: performance.now() - started };
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
