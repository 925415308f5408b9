/**
 * Slows password guessing: failed sign-ins are counted per email and per client address in fixed
 * time windows; past the limit, sign-in for that email or address is refused until the window
 * ends, whether or not the password is right. Each failure is its own entry (no read-modify-write,
 * so concurrent guesses all count) and expires on its own once its window is over.
 */
import { keys } from "./db.ts";
import { randomToken } from "./ids.ts";

export const THROTTLE_WINDOW_MS = 15 * 60 * 1000;
export const MAX_FAILURES_PER_EMAIL = 5;
export const MAX_FAILURES_PER_IP = 30;

function subjects(email: string, ip: string) {
  return [
    { scope: "email" as const, subject: email, max: MAX_FAILURES_PER_EMAIL },
    { scope: "ip" as const, subject: ip, max: MAX_FAILURES_PER_IP },
  ];
}

const windowOf = (now: number) => Math.floor(now / THROTTLE_WINDOW_MS);

async function countUpTo(kv: Deno.Kv, prefix: Deno.KvKey, max: number): Promise<number> {
  let n = 0;
  for await (const _ of kv.list({ prefix }, { limit: max })) n++;
  return n;
}

/** Seconds until sign-in may be tried again, or 0 when it may be tried now. */
export async function signInRetryAfter(
  kv: Deno.Kv,
  email: string,
  ip: string,
  now = Date.now(),
): Promise<number> {
  const window = windowOf(now);
  const counts = await Promise.all(
    subjects(email, ip).map(async (s) =>
      await countUpTo(kv, keys.signInFailures(s.scope, s.subject, window), s.max) >= s.max
    ),
  );
  if (!counts.some(Boolean)) return 0;
  return Math.ceil(((window + 1) * THROTTLE_WINDOW_MS - now) / 1000);
}

export async function recordSignInFailure(
  kv: Deno.Kv,
  email: string,
  ip: string,
  now = Date.now(),
): Promise<void> {
  const window = windowOf(now);
  const atomic = kv.atomic();
  for (const s of subjects(email, ip)) {
    atomic.set(keys.signInFailure(s.scope, s.subject, window, randomToken(64)), now, {
      expireIn: (window + 1) * THROTTLE_WINDOW_MS - now,
    });
  }
  await atomic.commit();
}

/** A right password clears the email's count; the address's count stays. */
export async function clearEmailFailures(kv: Deno.Kv, email: string, now = Date.now()) {
  const prefix = keys.signInFailures("email", email, windowOf(now));
  for await (const entry of kv.list({ prefix })) await kv.delete(entry.key);
}
