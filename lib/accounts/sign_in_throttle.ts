/**
 * Slows password guessing: sign-in attempts are counted per email and client address, per email
 * and per address in fixed time windows; past a limit, sign-in for that pair, email or address is
 * refused until the window ends, whether or not the password is right. One address gets 5 guesses
 * at an email; the email as a whole takes 100 (NIST SP 800-63B's ceiling of failed attempts on one
 * account), so that anyone who knows an owner's email cannot lock the owner out with six requests
 * every 15 minutes: it now takes a hundred, from at least four addresses (30 each).
 *
 * An attempt is recorded before its password is checked and forgotten only when it succeeds, so
 * guesses sent in parallel count too: each attempt is its own KV entry (no read-modify-write, no
 * conflicts), and the k-th recorded attempt sees at least k entries, so at most the limit gets
 * through per window. Entries expire on their own when their window is over.
 */
import { keys, type ThrottleScope } from "@/lib/db.ts";
import { randomToken } from "@/lib/core/mod.ts";

export const THROTTLE_WINDOW_MS = 15 * 60 * 1000;
/** Failed sign-ins one address may make at one email in a window. */
export const MAX_FAILURES_PER_EMAIL = 5;
/** Failed sign-ins at one email in a window, from every address together. */
export const MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES = 100;
export const MAX_FAILURES_PER_IP = 30;
/** Each sign-up costs a memory-hard hash: an address may make this many per window. */
export const MAX_SIGNUPS_PER_IP = 10;

export interface SignInAttempt {
  /** Seconds until sign-in may be tried again; 0 when this attempt may check its password. */
  retryAfter: number;
  /** The entries that count this attempt; removed when it succeeds. */
  entries: Deno.KvKey[];
}

const windowOf = (now: number) => Math.floor(now / THROTTLE_WINDOW_MS);

async function countUpTo(kv: Deno.Kv, prefix: Deno.KvKey, max: number): Promise<number> {
  let n = 0;
  for await (const _ of kv.list({ prefix }, { limit: max })) n++;
  return n;
}

export function beginSignIn(
  kv: Deno.Kv,
  email: string,
  ip: string,
  now = Date.now(),
): Promise<SignInAttempt> {
  return beginAttempt(kv, [
    { scope: "email_ip", subject: emailAtAddress(email, ip), max: MAX_FAILURES_PER_EMAIL },
    { scope: "email", subject: email, max: MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES },
    { scope: "ip", subject: ip, max: MAX_FAILURES_PER_IP },
  ], now);
}

/** One subject for an email tried from an address (neither holds a line break). */
const emailAtAddress = (email: string, ip: string) => `${email}\n${ip}`;

/**
 * A guess of the current password in a password change, from a signed-in session. It counts
 * against the email (and the email at this address) as a sign-in does, so guesses made here hold
 * back sign-in; but it is held back by this session's own guesses and the address's, not by the
 * email's counts: anyone who knows the email can fill those, and they then kept the owner from
 * changing the password, even to shut out someone who had it.
 */
export function beginPasswordChange(
  kv: Deno.Kv,
  email: string,
  sessionHash: string,
  ip: string,
  now = Date.now(),
): Promise<SignInAttempt> {
  return beginAttempt(kv, [
    { scope: "email_ip", subject: emailAtAddress(email, ip), max: null },
    { scope: "email", subject: email, max: null },
    { scope: "session", subject: sessionHash, max: MAX_FAILURES_PER_EMAIL },
    { scope: "ip", subject: ip, max: MAX_FAILURES_PER_IP },
  ], now);
}

/** Records the attempt under each subject, then refuses it past any subject's `max` (null: none). */
async function beginAttempt(
  kv: Deno.Kv,
  subjects: { scope: ThrottleScope; subject: string; max: number | null }[],
  now: number,
): Promise<SignInAttempt> {
  const window = windowOf(now);
  const id = randomToken(64);
  const expireIn = (window + 1) * THROTTLE_WINDOW_MS - now;
  const atomic = kv.atomic();
  const entries = subjects.map((s) => keys.signInFailure(s.scope, s.subject, window, id));
  for (const key of entries) atomic.set(key, now, { expireIn });
  await atomic.commit();
  const counts = await Promise.all(
    subjects.map((s) =>
      s.max === null ? 0 : countUpTo(kv, keys.signInFailures(s.scope, s.subject, window), s.max + 1)
    ),
  );
  const blocked = subjects.some((s, i) => s.max !== null && counts[i] > s.max);
  return { retryAfter: blocked ? Math.ceil(expireIn / 1000) : 0, entries };
}

/**
 * A right password clears the email's counts (from every address, as the owner is in) and takes
 * this attempt off the address's count.
 */
export async function signInSucceeded(
  kv: Deno.Kv,
  email: string,
  attempt: SignInAttempt,
  now = Date.now(),
): Promise<void> {
  await forgetEmailFailures(kv, email, now);
  for (const key of attempt.entries) await kv.delete(key);
}

/**
 * Clears the email's failed attempts, from every address: it may sign in again at once. An
 * email's pairs are the subjects from `email\n` up to (not with) `email\v`, whatever the address.
 */
export async function forgetEmailFailures(
  kv: Deno.Kv,
  email: string,
  now = Date.now(),
): Promise<void> {
  const emailWide = kv.list({ prefix: keys.signInFailures("email", email, windowOf(now)) });
  const pairs = kv.list({
    start: keys.signInFailuresOf("email_ip", emailAtAddress(email, "")),
    end: keys.signInFailuresOf("email_ip", `${email}\v`),
  });
  for (const entries of [emailWide, pairs]) {
    for await (const entry of entries) await kv.delete(entry.key);
  }
}

const DAY_MS = 24 * 60 * 60 * 1000;

export type AccountPermit =
  | {
    ok: true; /** Gives the slot back when no account was made after all. */
    release(): Promise<void>;
  }
  | { ok: false; retryAfter: number };

/**
 * Takes one of the address's accounts of the UTC day (each account can make apps with starter
 * credits), before the account is made. Like the attempts above, each slot is its own entry,
 * written before counting, so sign-ups at the same time cannot pass the bound together; a refused
 * or failed sign-up gives its slot back.
 */
export async function takeAccountOfAddress(
  kv: Deno.Kv,
  ip: string,
  maxPerDay: number,
  now = Date.now(),
): Promise<AccountPermit> {
  const day = Math.floor(now / DAY_MS);
  const expireIn = (day + 1) * DAY_MS - now;
  const key = keys.signInFailure("signup_ip_day", ip, day, randomToken(64));
  await kv.set(key, now, { expireIn });
  const count = await countUpTo(kv, keys.signInFailures("signup_ip_day", ip, day), maxPerDay + 1);
  const release = async () => await kv.delete(key);
  if (count <= maxPerDay) return { ok: true, release };
  await release();
  return { ok: false, retryAfter: Math.ceil(expireIn / 1000) };
}

/**
 * Counts a sign-up from an address before its password is hashed; past the limit the sign-up is
 * refused until the window ends. Successful sign-ups count too: the cost is the hashing, not a guess.
 */
export function beginSignUp(kv: Deno.Kv, ip: string, now = Date.now()): Promise<number> {
  return countAttempt(kv, "signup_ip", ip, MAX_SIGNUPS_PER_IP, now);
}

/**
 * Counts one attempt of the subject's in the current window, its own entry written before the
 * count (so attempts at the same time cannot pass the bound together): 0 when it is within `max`,
 * else the seconds until the window ends. For what costs whether it succeeds or not (a sign-up's
 * hashing, a Checkout Session at Stripe).
 */
export async function countAttempt(
  kv: Deno.Kv,
  scope: ThrottleScope,
  subject: string,
  max: number,
  now = Date.now(),
): Promise<number> {
  const window = windowOf(now);
  const expireIn = (window + 1) * THROTTLE_WINDOW_MS - now;
  await kv.set(keys.signInFailure(scope, subject, window, randomToken(64)), now, { expireIn });
  const count = await countUpTo(kv, keys.signInFailures(scope, subject, window), max + 1);
  return count > max ? Math.ceil(expireIn / 1000) : 0;
}
