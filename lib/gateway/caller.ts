/** Who a paid request is for, and what it did: shared by the gateway and its wallet desk. */
import type { UsageOutcome } from "@/lib/db.ts";
import type { TraceFields } from "@/lib/core/mod.ts";
import type { RateLimitStatus } from "@/lib/billing/mod.ts";
import type { KeyGuard } from "@/lib/tenants/mod.ts";

export interface Caller {
  appId: string;
  keyId: string;
  /** Checked by the reserve's commit: a key revoked since it was looked up is refused there. */
  keyGuard?: KeyGuard;
  /** The app's end user (the request's `user` field): recorded on the usage, capped per app. */
  user?: string;
  /** Sent with an Idempotency-Key: its charge is indexed by request id (see UsageRecord). */
  idempotent?: true;
}

/** What a request did, for its log line; filled in as the request goes. */
export interface RequestTrace extends TraceFields {
  outcome?: UsageOutcome | "released" | "idempotent_replay";
  /** Whether the input was counted exactly by the provider (count_tokens), and how that went. */
  inputCount?: "counted" | "failed";
  /** The caller's rate-limit status after this request was counted (for the x-ratelimit headers). */
  rateLimit?: RateLimitStatus;
}
