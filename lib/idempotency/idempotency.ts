/**
 * Idempotency keys: a request sent again with the same key gets the first one's recorded answer
 * instead of running (and being charged) twice.
 *
 * A key is claimed with one atomic check (`versionstamp: null`), so among any number of concurrent
 * repeats exactly one runs. The claim is a lease: a process that dies mid-request leaves a claim
 * that others may take over once the lease has passed. Records hold no money, so KV's `expireIn`
 * removes them; reads also ignore records older than the retention, since expiry is lazy.
 */
import { type ChargedRequest, type IdempotencyRecord, keys } from "@/lib/db.ts";
import { ApiError, concatBytes, CONFIG_DEFAULTS, newId, sha256Hex } from "@/lib/core/mod.ts";

/** How long a recorded result is replayed. */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;
/** Bytes of body per KV value (KV allows 64 KiB a value). */
const BODY_PART_BYTES = 60_000;
/** Body parts written per commit (KV allows 800 KiB of mutations a commit). */
const PARTS_PER_COMMIT = 10;

export interface RecordedResponse {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

export type Claim =
  /**
   * This request runs; it must end with `complete` or `abandon`, and `renew` its lease while it
   * runs. `versionstamp` follows each renewal.
   */
  | { kind: "claimed"; claimId: string; versionstamp: string; record: IdempotencyRecord }
  /** A finished request with the same key and body: answer with its response. */
  | { kind: "replay"; requestId: string; response: RecordedResponse }
  /** Same key, sent to another endpoint (`endpoint` names the first one's) or with another body. */
  | { kind: "reused"; differs: "endpoint"; endpoint: string }
  | { kind: "reused"; differs: "body" }
  /** Same key and body, and the first request is still running. */
  | { kind: "in_use" }
  /** Same key and body; the first one's answer was charged but too large to be kept for replays. */
  | { kind: "too_large"; requestId: string; bytes: number; limit: number }
  /** The first run was charged, and its process died before recording the answer. */
  | { kind: "answer_lost"; requestId: string; cost: number };

export interface IdempotencyOptions {
  /** How long a claim may run before another request may take the key over. */
  leaseMs: number;
  /**
   * The largest body recorded for replays. A larger one is not kept: its record says so, and a
   * repeat is refused rather than run (and charged) again. Defaults to the service's default
   * (IDEMPOTENCY_REPLAY_MAX_BYTES).
   */
  maxBodyBytes?: number;
  now?: () => number;
}

export class IdempotencyStore {
  readonly #kv: Deno.Kv;
  readonly #leaseMs: number;
  readonly #maxBodyBytes: number;
  readonly #now: () => number;
  /** The last renewal of each running claim of this process. */
  readonly #renewals = new WeakMap<object, Promise<boolean>>();

  constructor(kv: Deno.Kv, options: IdempotencyOptions) {
    this.#kv = kv;
    this.#leaseMs = options.leaseMs;
    this.#maxBodyBytes = options.maxBodyBytes ?? CONFIG_DEFAULTS.IDEMPOTENCY_REPLAY_MAX_BYTES;
    this.#now = options.now ?? Date.now;
  }

  /**
   * `endpoint` is the request's method and path: a key is one request, so one sent to another
   * endpoint is refused like one sent with another body, never answered with the other's record.
   */
  async claim(
    scope: string,
    key: string,
    bodyHash: string,
    requestId: string,
    endpoint: string,
  ): Promise<Claim> {
    const recordKey = keys.idempotency(scope, key);
    for (let attempt = 0; attempt < 10; attempt++) {
      const now = this.#now();
      const entry = await this.#kv.get<IdempotencyRecord>(recordKey);
      const current = entry.value;
      if (current && this.#live(current, now)) {
        if (current.endpoint !== undefined && current.endpoint !== endpoint) {
          return { kind: "reused", differs: "endpoint", endpoint: current.endpoint };
        }
        if (current.bodyHash !== bodyHash) return { kind: "reused", differs: "body" };
      }
      if (current?.state === "running" && current.leaseUntil > now) return { kind: "in_use" };
      if (current?.state === "done" && this.#live(current, now)) {
        if (current.omittedBytes !== undefined) {
          return {
            kind: "too_large",
            requestId: current.requestId,
            bytes: current.omittedBytes,
            limit: current.omittedOver ?? this.#maxBodyBytes,
          };
        }
        const body = await this.#readBody(scope, key, current);
        if (body) {
          return {
            kind: "replay",
            requestId: current.requestId,
            response: { status: current.status, headers: current.headers, body },
          };
        }
        // Its body parts have already expired: the record is as good as gone.
      }
      if (current?.state === "running" && this.#live(current, now)) {
        // Its process died (its lease ran out). If its request was charged (the charge commits
        // before the answer is recorded), running it again would charge it twice.
        const charged = await this.#kv.get<ChargedRequest>(keys.chargedRequest(current.requestId));
        if (charged.value) {
          return { kind: "answer_lost", requestId: current.requestId, cost: charged.value.cost };
        }
      }
      const running: IdempotencyRecord = {
        state: "running",
        claimId: newId("idem", now),
        bodyHash,
        endpoint,
        requestId,
        leaseUntil: now + this.#leaseMs,
      };
      // Absent, expired, or abandoned by a dead process: take it, unless someone else is faster.
      const result = await this.#kv.atomic()
        .check(entry)
        .set(recordKey, running, { expireIn: IDEMPOTENCY_RETENTION_MS })
        .commit();
      if (result.ok) {
        return {
          kind: "claimed",
          claimId: running.claimId,
          versionstamp: result.versionstamp,
          record: running,
        };
      }
    }
    // Ten lost races in a row: someone else holds it now.
    return { kind: "in_use" };
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }

  /**
   * Extends a running claim's lease, so that a request longer than one lease (a long answer, read
   * while the upstream keeps talking) is not taken over and run a second time. False when the
   * claim is no longer ours.
   */
  renew(scope: string, key: string, claim: Extract<Claim, { kind: "claimed" }>) {
    const renewing = this.#renewOnce(scope, key, claim);
    this.#renewals.set(claim, renewing);
    return renewing;
  }

  /**
   * Waits for a renewal in flight: complete and abandon check the claim's versionstamp, which a
   * renewal committing after they read it would leave stale (the answer then never recorded).
   */
  async #renewed(claim: Extract<Claim, { kind: "claimed" }>) {
    await this.#renewals.get(claim)?.catch(() => {});
  }

  async #renewOnce(scope: string, key: string, claim: Extract<Claim, { kind: "claimed" }>) {
    const recordKey = keys.idempotency(scope, key);
    const record = { ...claim.record, leaseUntil: this.#now() + this.#leaseMs };
    const result = await this.#kv.atomic()
      .check({ key: recordKey, versionstamp: claim.versionstamp })
      .set(recordKey, record, { expireIn: IDEMPOTENCY_RETENTION_MS })
      .commit();
    if (!result.ok) return false;
    claim.versionstamp = result.versionstamp;
    claim.record = record;
    return true;
  }

  /**
   * Records the claimed request's answer for replays, checked against our claim (a claim taken
   * over after its lease is left to its new holder). The record and the last body parts it points
   * at go in one commit, which for all but the largest answers is the only one. An answer over
   * the replay limit is recorded without its body, as its size only.
   */
  async complete(
    scope: string,
    key: string,
    claim: Extract<Claim, { kind: "claimed" }>,
    requestId: string,
    bodyHash: string,
    response: RecordedResponse,
  ): Promise<boolean> {
    await this.#renewed(claim);
    const omitted = response.body.byteLength > this.#maxBodyBytes;
    const parts: Uint8Array[] = [];
    for (let i = 0; !omitted && i < response.body.byteLength; i += BODY_PART_BYTES) {
      parts.push(response.body.subarray(i, i + BODY_PART_BYTES));
    }
    const options = { expireIn: IDEMPOTENCY_RETENTION_MS };
    const setParts = (atomic: Deno.AtomicOperation, from: number, to: number) =>
      parts.slice(from, to).forEach((part, j) =>
        atomic.set(keys.idempotencyBodyPart(scope, key, claim.claimId, from + j), part, options)
      );
    const last = Math.max(0, parts.length - PARTS_PER_COMMIT);
    for (let i = 0; i < last; i += PARTS_PER_COMMIT) {
      const atomic = this.#kv.atomic();
      setParts(atomic, i, Math.min(i + PARTS_PER_COMMIT, last));
      await atomic.commit();
    }
    const done: IdempotencyRecord = {
      state: "done",
      claimId: claim.claimId,
      bodyHash,
      ...(claim.record.endpoint === undefined ? {} : { endpoint: claim.record.endpoint }),
      requestId,
      status: response.status,
      headers: response.headers,
      bodyParts: parts.length,
      ...(omitted
        ? { omittedBytes: response.body.byteLength, omittedOver: this.#maxBodyBytes }
        : {}),
      storedAt: this.#now(),
    };
    const recordKey = keys.idempotency(scope, key);
    const atomic = this.#kv.atomic().check({ key: recordKey, versionstamp: claim.versionstamp });
    setParts(atomic, last, parts.length);
    const result = await atomic.set(recordKey, done, options).commit();
    return result.ok;
  }

  /** Gives the key back: the request failed without a charge, so a retry may run it afresh. */
  async abandon(scope: string, key: string, claim: Extract<Claim, { kind: "claimed" }>) {
    await this.#renewed(claim);
    const recordKey = keys.idempotency(scope, key);
    await this.#kv.atomic()
      .check({ key: recordKey, versionstamp: claim.versionstamp })
      .delete(recordKey)
      .commit();
  }

  #live(record: IdempotencyRecord, now: number): boolean {
    if (record.state === "running") return true;
    return record.storedAt + IDEMPOTENCY_RETENTION_MS > now;
  }

  async #readBody(
    scope: string,
    key: string,
    record: Extract<IdempotencyRecord, { state: "done" }>,
  ): Promise<Uint8Array | null> {
    const parts: Uint8Array[] = [];
    for (let i = 0; i < record.bodyParts; i += 10) {
      const chunk = Array.from(
        { length: Math.min(10, record.bodyParts - i) },
        (_, j) => keys.idempotencyBodyPart(scope, key, record.claimId, i + j),
      );
      for (const entry of await this.#kv.getMany<Uint8Array[]>(chunk)) {
        if (!entry.value) return null;
        parts.push(entry.value);
      }
    }
    return concatBytes(parts);
  }
}

/**
 * The request's identity for comparing repeats: SHA-256 of its JSON with object keys sorted, so
 * that the same request serialised in another key order or spacing is the same request.
 */
export function canonicalBodyHash(body: unknown): string {
  let json: string;
  try {
    json = canonicalJson(body);
  } catch (error) {
    // Valid JSON nested deeper than this walk's stack: the same 400 the body's parser gives it.
    if (error instanceof RangeError) {
      throw new ApiError("invalid_json", "The request body is nested too deeply.");
    }
    throw error;
  }
  return sha256Hex(json);
}

export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** What a valid key looks like: 1 to 255 visible ASCII characters (as Stripe allows). */
export function validIdempotencyKey(key: string): boolean {
  return /^[\x21-\x7e]{1,255}$/.test(key);
}
