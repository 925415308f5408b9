/** Idempotency keys: claim a key once, replay its recorded answer to repeats. */
export {
  canonicalBodyHash,
  canonicalJson,
  IDEMPOTENCY_RETENTION_MS,
  IdempotencyStore,
  validIdempotencyKey,
} from "./idempotency.ts";
export type { Claim, RecordedResponse } from "./idempotency.ts";
