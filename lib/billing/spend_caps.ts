/**
 * Spend caps per API key and per end user: the arithmetic of the counters the wallet batch keeps
 * (pure), and the owner's writes of the caps themselves.
 *
 * A counter holds what its scope's requests in flight have reserved (`held`) and what they spent,
 * in total and in the current UTC day and month. A reserve must fit under every cap with the holds
 * counted, in the same commit as the wallet's reservation; settle moves its hold to spent. So no
 * burst of concurrent requests can pass a cap. Counters count from when a scope first had a cap.
 */
import {
  type ApiKeyRecord,
  keys,
  type KeySpendCaps,
  type ReservationRecord,
  type SpendCaps,
  type SpendCapsRecord,
  type SpendCounter,
  type SpendScope,
  utcDay,
} from "@/lib/db.ts";
import { ApiError, formatUsd, getManyChunked, type Micros, NotFoundError } from "@/lib/core/mod.ts";

export type CapName = "total" | "daily" | "monthly";

export interface CapBreach {
  scope: SpendScope;
  cap: CapName;
  limit: Micros;
  /** What the scope may still reserve under this cap. */
  remaining: Micros;
}

/** The counter key of a scope inside one batch: `key:<keyId>` or `user:<end user>`. */
export function counterId(scope: SpendScope, id: string): string {
  return `${scope}:${id}`;
}

/**
 * The capped scopes a request of this key and end user falls under; `id` is the counter's (for a
 * key, the one its caps name, which is a predecessor's after a rotation).
 */
export function cappedScopes(
  caps: SpendCapsRecord | null,
  keyId: string,
  user: string | undefined,
): { scope: SpendScope; id: string; caps: SpendCaps }[] {
  const out: { scope: SpendScope; id: string; caps: SpendCaps }[] = [];
  const keyCaps = caps?.keys[keyId];
  if (keyCaps && hasCap(keyCaps)) {
    out.push({ scope: "key", id: keyCaps.counter ?? keyId, caps: keyCaps });
  }
  if (user !== undefined && caps?.endUser && hasCap(caps.endUser)) {
    out.push({ scope: "user", id: user, caps: caps.endUser });
  }
  return out;
}

/**
 * The capped scopes a reservation's settle charges under: its end user's, and the key caps that
 * count on its key's counter, whichever key holds them now. A key's requests in flight outlive its
 * revocation (its entry stays while they hold, see `withoutRevokedKeys`) and its rotation (its
 * entry moves to the replacement, naming the counter): looking under the reservation's own key id
 * alone would settle them as if uncapped.
 */
export function reservationCappedScopes(
  caps: SpendCapsRecord | null,
  r: Pick<ReservationRecord, "keyId" | "keyCounter" | "user">,
): { scope: SpendScope; id: string; caps: SpendCaps }[] {
  const counter = heldCounterId(r, "key");
  const own = caps?.keys[r.keyId];
  const keyCaps = own && (own.counter ?? r.keyId) === counter
    ? own
    : Object.values(caps?.keys ?? {}).find((c) => c.counter === counter);
  const out: { scope: SpendScope; id: string; caps: SpendCaps }[] = [];
  if (keyCaps && hasCap(keyCaps)) out.push({ scope: "key", id: counter, caps: keyCaps });
  if (r.user !== undefined && caps?.endUser && hasCap(caps.endUser)) {
    out.push({ scope: "user", id: r.user, caps: caps.endUser });
  }
  return out;
}

/** The counter a reservation's hold sits on, in one of the scopes it was capped in. */
export function heldCounterId(
  r: Pick<ReservationRecord, "keyId" | "keyCounter" | "user">,
  scope: SpendScope,
): string {
  return scope === "key" ? r.keyCounter ?? r.keyId : r.user!;
}

export function hasCap(caps: SpendCaps): boolean {
  return caps.total !== null || caps.daily !== null || caps.monthly !== null;
}

const month = (ms: number) => utcDay(ms).slice(0, 7);

function emptyCounter(now: number): SpendCounter {
  return { held: 0, total: 0, day: utcDay(now), daySpent: 0, month: month(now), monthSpent: 0 };
}

/**
 * The counter with its day and month windows moved forward to `now`, never back: an instance whose
 * clock is behind another's, at midnight, would otherwise reset the window the other had opened,
 * and the two, taking turns, reset each other's spending for as long as their clocks straddle it
 * (a $1 daily cap let $11.70 through). Behind, it counts into the later window the counter is in.
 */
export function currentCounter(counter: SpendCounter | null, now: number): SpendCounter {
  const c = counter ? { ...counter } : emptyCounter(now);
  // ISO days and months sort as they run.
  if (c.day < utcDay(now)) {
    c.day = utcDay(now);
    c.daySpent = 0;
  }
  if (c.month < month(now)) {
    c.month = month(now);
    c.monthSpent = 0;
  }
  return c;
}

/** Each cap with its limit and what its window has spent. */
function capWindows(caps: SpendCaps, counter: SpendCounter): [CapName, Micros | null, Micros][] {
  return [
    ["total", caps.total, counter.total],
    ["daily", caps.daily, counter.daySpent],
    ["monthly", caps.monthly, counter.monthSpent],
  ];
}

/** The first cap that `amount` more would pass, with what remains under it; null when it fits. */
export function capBreach(
  scope: SpendScope,
  caps: SpendCaps,
  counter: SpendCounter,
  amount: Micros,
): CapBreach | null {
  for (const [cap, limit, spent] of capWindows(caps, counter)) {
    if (limit === null) continue;
    const remaining = Math.max(0, limit - spent - counter.held);
    if (amount > remaining) return { scope, cap, limit, remaining };
  }
  return null;
}

/** What may still be spent under `caps` with `held` held by other requests (a large number when uncapped). */
export function capRoom(caps: SpendCaps, counter: SpendCounter, held: Micros): Micros {
  let room = Number.MAX_SAFE_INTEGER;
  for (const [, limit, spent] of capWindows(caps, counter)) {
    if (limit !== null) room = Math.min(room, Math.max(0, limit - spent - held));
  }
  return room;
}

export function holdOn(counter: SpendCounter, amount: Micros): SpendCounter {
  return { ...counter, held: counter.held + amount };
}

/** A settle: the hold (if this counter held it) goes, and the charge is spent in every window. */
export function spendOn(counter: SpendCounter, held: Micros, charged: Micros): SpendCounter {
  return {
    ...counter,
    held: Math.max(0, counter.held - held),
    total: counter.total + charged,
    daySpent: counter.daySpent + charged,
    monthSpent: counter.monthSpent + charged,
  };
}

export function releaseOn(counter: SpendCounter, held: Micros): SpendCounter {
  return { ...counter, held: Math.max(0, counter.held - held) };
}

const NO_CAPS: SpendCaps = { total: null, daily: null, monthly: null };

export async function getSpendCaps(kv: Deno.Kv, appId: string): Promise<SpendCapsRecord> {
  return (await kv.get<SpendCapsRecord>(keys.spendCaps(appId))).value ??
    { keys: {}, endUser: null };
}

/** The keys with a cap set: an entry may hold only the counter a cap set again counts on. */
export function cappedKeyIds(record: SpendCapsRecord): string[] {
  return Object.entries(record.keys).flatMap(([keyId, caps]) => hasCap(caps) ? [keyId] : []);
}

export function validCaps(caps: Partial<SpendCaps>): SpendCaps {
  const out = { ...NO_CAPS, ...caps };
  for (const v of Object.values(out)) {
    if (v !== null && (!Number.isSafeInteger(v) || v <= 0)) {
      throw new RangeError("a spend cap is a positive amount of micro-USD, or none");
    }
  }
  return out;
}

/** The most counter checks a prune adds to its commit: KV allows 10, and a key's issue makes 4. */
const PRUNE_CHECKS = 6;

/**
 * `record` without the entries of keys revoked or gone whose counter nothing holds on (mutated),
 * and the counter entries read for those, which the commit writing the record must check: a settle
 * committed meanwhile fails it, and the writer reads again. An entry stays while a request of its
 * revoked key is in flight, so that its settle is still held to the cap; a revoked key makes no
 * new reservation, so its counter's hold only goes down to 0. Records written before revocations
 * dropped their entries held them all, and one app's passed KV's 64 KiB value limit, after which
 * no cap of the app could be set: so entries without a counter (nothing ever held on it) go at
 * once, and at most `PRUNE_CHECKS` others per write, each write shrinking the record, which stays
 * bounded by the live keys (`MAX_LIVE_KEYS_PER_APP`) and the revoked ones with requests in flight.
 */
export async function withoutRevokedKeys(
  kv: Deno.Kv,
  appId: string,
  record: SpendCapsRecord,
): Promise<{ record: SpendCapsRecord; checks: Deno.AtomicCheck[] }> {
  const ids = Object.keys(record.keys);
  const records = await getManyChunked<ApiKeyRecord>(kv, ids.map(keys.apiKey));
  // Read after the keys: a hold of 0 read after its key's revocation stays 0.
  const dead = ids.filter((_, i) => !records[i].value || records[i].value!.revokedAt !== null);
  const counters = await getManyChunked<SpendCounter>(
    kv,
    dead.map((id) => keys.spendCounter(appId, "key", record.keys[id].counter ?? id)),
  );
  const checks: Deno.AtomicCheck[] = [];
  dead.forEach((id, i) => {
    const counter = counters[i];
    if (counter.versionstamp === null) {
      delete record.keys[id];
    } else if (counter.value!.held === 0 && checks.length < PRUNE_CHECKS) {
      checks.push(counter);
      delete record.keys[id];
    }
  });
  return { record, checks };
}

/**
 * Sets the caps of one key (`target.keyId`) or of each end user of the app. The wallet's commits
 * check this record, so a change applies from the next reserve on every instance. A key that is
 * not live throws NotFoundError: its record is checked in the commit, since a rotation that
 * commits between a caller's look at the key and this write moves the key's caps to its
 * replacement, and a cap written after it would sit on the revoked key while the replacement,
 * which spends, kept the old one (the caller told its cap was set).
 */
export async function setSpendCaps(
  kv: Deno.Kv,
  appId: string,
  target: { keyId: string } | { endUser: true },
  caps: Partial<SpendCaps>,
): Promise<SpendCapsRecord> {
  const valid = validCaps(caps);
  // Every cap of the app is one record, so writes at once (an owner capping many keys together)
  // all but one fail their commit. A failed commit means another write committed (the record, or
  // a revoked key's counter it checked, which nothing holds on, changed): the retries end once
  // the writers ahead have, as `issueKey`'s do. A bound of tries turned the twentieth such write
  // into a 500.
  const keyId = "keyId" in target ? target.keyId : null;
  for (;;) {
    const entry = await kv.get<SpendCapsRecord>(keys.spendCaps(appId));
    const key = keyId === null ? null : await kv.get<ApiKeyRecord>(keys.apiKey(keyId));
    if (key && (key.value?.appId !== appId || key.value.revokedAt !== null)) {
      throw new NotFoundError(`no live key ${keyId} in ${appId}`);
    }
    const record: SpendCapsRecord = structuredClone(entry.value ?? { keys: {}, endUser: null });
    if ("keyId" in target) {
      const counter = record.keys[target.keyId]?.counter;
      const next: KeySpendCaps = counter === undefined ? valid : { ...valid, counter };
      if (hasCap(valid) || counter !== undefined) record.keys[target.keyId] = next;
      else delete record.keys[target.keyId];
    } else {
      record.endUser = hasCap(valid) ? valid : null;
    }
    const { checks } = await withoutRevokedKeys(kv, appId, record);
    const result = await kv.atomic().check(entry, ...checks, ...(key ? [key] : []))
      .set(keys.spendCaps(appId), record).commit();
    if (result.ok) return record;
  }
}

/**
 * The spend counters of one scope (what a key or end user has held and spent under caps); a key's
 * is the counter its caps name, a predecessor's when it replaced a rotated key.
 */
export async function getSpendCounter(
  kv: Deno.Kv,
  appId: string,
  scope: SpendScope,
  id: string,
  now = Date.now(),
): Promise<SpendCounter> {
  const counterOf = scope === "key" ? (await getSpendCaps(kv, appId)).keys[id]?.counter ?? id : id;
  const entry = await kv.get<SpendCounter>(keys.spendCounter(appId, scope, counterOf));
  return currentCounter(entry.value, now);
}

/**
 * The spend counters of these keys as of `now`, for the owner to see what each spent against its
 * caps and what is left; a key whose spending was never counted (never capped) has none.
 */
export async function keySpendCounters(
  kv: Deno.Kv,
  appId: string,
  record: SpendCapsRecord,
  keyIds: string[],
  now = Date.now(),
): Promise<Map<string, SpendCounter>> {
  const entries = await getManyChunked<SpendCounter>(
    kv,
    keyIds.map((id) => keys.spendCounter(appId, "key", record.keys[id]?.counter ?? id)),
  );
  const counters = new Map<string, SpendCounter>();
  entries.forEach((entry, i) => {
    if (entry.value) counters.set(keyIds[i], currentCounter(entry.value, now));
  });
  return counters;
}

/**
 * What a rotation does to the app's caps: the replacement takes the old key's caps and counts on
 * its counter (spend so far, and holds of the old key's requests still in flight). A key without
 * caps but with a counter (its cap was removed) passes the counter on, so a cap set again counts
 * on. Null when there is nothing to carry.
 */
export function capsAfterRotation(
  caps: SpendCapsRecord | null,
  oldKeyId: string,
  newKeyId: string,
  oldKeyHasCounter: boolean,
): SpendCapsRecord | null {
  const old = caps?.keys[oldKeyId];
  if (!old && !oldKeyHasCounter) return null;
  const next: SpendCapsRecord = structuredClone(caps ?? { keys: {}, endUser: null });
  next.keys[newKeyId] = { ...(old ?? NO_CAPS), counter: old?.counter ?? oldKeyId };
  delete next.keys[oldKeyId];
  return next;
}

const CAP_WORDS: Record<CapName, string> = { total: "total", daily: "daily", monthly: "monthly" };

/**
 * The 402 of a reserve over a cap, naming the cap and what remains under it. It carries the
 * wallet's `balance` and `top_up_url` as every 402 does (the spec's body), though a top-up does
 * not lift a cap: its code tells them apart.
 */
export function spendCapRefusal(
  breach: CapBreach,
  wallet: { balance: string; top_up_url: string },
): ApiError {
  const whose = breach.scope === "key" ? "this API key" : "this end user (`user`)";
  return new ApiError(
    breach.scope === "key" ? "key_spend_cap_exceeded" : "user_spend_cap_exceeded",
    `The ${CAP_WORDS[breach.cap]} spend cap of ${whose} is ${formatUsd(breach.limit)} USD; ${
      formatUsd(breach.remaining)
    } USD remains, counting requests in flight, which is less than this request reserves.`,
    {
      ...(breach.scope === "user" ? { param: "user" } : {}),
      extra: {
        cap: breach.cap,
        cap_amount: formatUsd(breach.limit),
        remaining: formatUsd(breach.remaining),
        ...wallet,
      },
    },
  );
}
