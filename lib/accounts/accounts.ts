/**
 * Owner accounts: email + password, the password kept only as a salted scrypt hash.
 */
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { keys, type OwnerRecord, type SessionRecord } from "@/lib/db.ts";
import { newId, randomToken, sha256Hex } from "@/lib/core/mod.ts";
import { endOwnerSessions, isOfCurrentPassword, newSession, storeSession } from "./sessions.ts";
import { forgetEmailFailures } from "./sign_in_throttle.ts";

/** scrypt cost: N=2^15, r=8 (32 MiB, tens of ms per guess); stored with each hash so it can grow. */
const SCRYPT = { N: 32768, r: 8, p: 1 };
const HASH_BYTES = 32;
const SALT_BYTES = 16;
export const PASSWORD_MIN = 10;
export const PASSWORD_MAX = 200;
const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** A refused sign-up, naming the field it concerns so the form can mark and focus it. */
export class AccountError extends Error {
  constructor(message: string, readonly field: "email" | "password") {
    super(message);
  }
}

/** A sign-up for an email that has an account: its page leads to sign-in. */
export class EmailTakenError extends AccountError {
  constructor() {
    super("An account with this email already exists.", "email");
  }
}

function scryptAsync(
  password: string,
  salt: Buffer,
  params: { N: number; r: number; p: number },
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(
      password.normalize("NFC"),
      salt,
      HASH_BYTES,
      { ...params, maxmem: 256 * params.N * params.r },
      (error, key) => error ? reject(error) : resolve(key),
    );
  });
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const hash = await scryptAsync(password, salt, SCRYPT);
  return ["scrypt", SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString("base64"), hash.toString("base64")]
    .join("$");
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split("$");
  if (scheme !== "scrypt" || !hash) return false;
  const expected = Buffer.from(hash, "base64");
  const actual = await scryptAsync(password, Buffer.from(salt, "base64"), {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/** A hash of no one's password: unknown emails cost as much time as wrong passwords. */
let decoyHash: Promise<string> | undefined;

/** The longest address there can be (RFC 5321's path limit less its brackets). */
export const MAX_EMAIL_CHARS = 254;

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** Why a new password cannot be chosen, or null: one rule for sign-up and for a change. */
function passwordLengthProblem(password: string): string | null {
  if (password.length < PASSWORD_MIN) {
    return `Choose a password of at least ${PASSWORD_MIN} characters.`;
  }
  if (password.length > PASSWORD_MAX) return `A password has at most ${PASSWORD_MAX} characters.`;
  return null;
}

function validateCredentials(email: string, password: string): AccountError | null {
  if (!EMAIL_PATTERN.test(email) || email.length > MAX_EMAIL_CHARS) {
    return new AccountError("Enter a valid email address.", "email");
  }
  const problem = passwordLengthProblem(password);
  return problem ? new AccountError(problem, "password") : null;
}

/** Creates an owner; the email index is written in the same commit, so an email is taken once. */
export async function signUp(
  kv: Deno.Kv,
  input: { email: string; password: string },
  now = Date.now(),
): Promise<OwnerRecord> {
  const email = normalizeEmail(input.email);
  const problem = validateCredentials(email, input.password);
  if (problem) throw problem;
  const owner: OwnerRecord = {
    id: newId("own", now),
    email,
    passwordHash: await hashPassword(input.password),
    createdAt: now,
  };
  const result = await kv.atomic()
    .check({ key: keys.ownerByEmail(email), versionstamp: null })
    .set(keys.owner(owner.id), owner)
    .set(keys.ownerByEmail(email), owner.id)
    .commit();
  if (!result.ok) {
    throw new EmailTakenError();
  }
  return owner;
}

/** The owner whose email and password these are, or null; the same work is done either way. */
export async function checkCredentials(
  kv: Deno.Kv,
  input: { email: string; password: string },
): Promise<OwnerRecord | null> {
  const email = normalizeEmail(input.email);
  if (input.password.length > PASSWORD_MAX) return null;
  const ownerId = (await kv.get<string>(keys.ownerByEmail(email))).value;
  const owner = ownerId ? (await kv.get<OwnerRecord>(keys.owner(ownerId))).value : null;
  if (!owner) {
    decoyHash ??= hashPassword(crypto.randomUUID());
    await verifyPassword(input.password, await decoyHash);
    return null;
  }
  return await verifyPassword(input.password, owner.passwordHash) ? owner : null;
}

export async function getOwner(kv: Deno.Kv, ownerId: string): Promise<OwnerRecord | null> {
  return (await kv.get<OwnerRecord>(keys.owner(ownerId))).value;
}

/** The id of the owner with this email, for operators assigning an app to an account. */
export async function ownerIdByEmail(kv: Deno.Kv, email: string): Promise<string> {
  const ownerId = (await kv.get<string>(keys.ownerByEmail(normalizeEmail(email)))).value;
  if (!ownerId) throw new AccountError(`no account with email ${normalizeEmail(email)}`, "email");
  return ownerId;
}

/** A refused password change, naming the field of the form it concerns. */
export class PasswordChangeError extends Error {
  constructor(
    message: string,
    readonly field: "current_password" | "new_password" | "confirmation",
  ) {
    super(message);
  }
}

/** Why the new password of a change cannot be taken, or null; checked before the current one. */
export function newPasswordProblem(
  newPassword: string,
  confirmation: string,
): PasswordChangeError | null {
  const problem = passwordLengthProblem(newPassword);
  if (problem) return new PasswordChangeError(problem, "new_password");
  if (confirmation !== newPassword) {
    return new PasswordChangeError(
      "The confirmation differs from the new password. Type the new password twice.",
      "confirmation",
    );
  }
  return null;
}

/**
 * Each change gets a later mark than the last, even within one millisecond: a session kept through
 * one change must not match the next.
 */
const nextPasswordMark = (owner: OwnerRecord, now: number) =>
  Math.max(now, (owner.passwordChangedAt ?? 0) + 1);

/**
 * Changes the password of the session's owner when `currentPassword` is theirs. One commit, made
 * only if neither the owner nor the session changed since they were read, stores the new hash and
 * keeps this session on the new password; every other session of the owner then ends. Returns how
 * many live sessions ended.
 */
export async function changePassword(
  kv: Deno.Kv,
  input: { sessionId: string; currentPassword: string; newPassword: string; confirmation: string },
  now = Date.now(),
): Promise<{ sessionId: string; sessionsEnded: number }> {
  const problem = newPasswordProblem(input.newPassword, input.confirmation);
  if (problem) throw problem;
  const sessionKey = keys.session(sha256Hex(input.sessionId));
  const session = await kv.get<SessionRecord>(sessionKey);
  // Signed out, or its password changed or reset, since the request's session was read.
  const changedMeanwhile = new PasswordChangeError(
    "Your account changed while this form was sent, so the password was not changed. Reload the page and try again.",
    "current_password",
  );
  if (!session.value) throw changedMeanwhile;
  const owner = await kv.get<OwnerRecord>(keys.owner(session.value.ownerId));
  if (!owner.value) throw new Error(`no owner ${session.value.ownerId}`);
  const wrong = new PasswordChangeError("The current password is wrong.", "current_password");
  if (input.currentPassword.length > PASSWORD_MAX) throw wrong;
  if (!await verifyPassword(input.currentPassword, owner.value.passwordHash)) throw wrong;
  if (!isOfCurrentPassword(session.value, owner.value)) throw changedMeanwhile;
  const mark = nextPasswordMark(owner.value, now);
  // The session that changes it is replaced too (a new id and CSRF token): an owner who fears a
  // stolen cookie changes the password from the browser it was stolen from.
  const next = newSession({ id: owner.value.id, passwordChangedAt: mark }, now);
  const atomic = kv.atomic()
    .check(owner)
    .check(session)
    .set(keys.owner(owner.value.id), {
      ...owner.value,
      passwordHash: await hashPassword(input.newPassword),
      passwordChangedAt: mark,
    })
    .delete(sessionKey)
    .delete(keys.ownerSession(owner.value.id, sha256Hex(input.sessionId)));
  const changed = await storeSession(atomic, next).commit();
  if (!changed.ok) throw changedMeanwhile;
  return {
    sessionId: next.sessionId,
    sessionsEnded: await endOwnerSessions(kv, owner.value.id, { passwordChangedAt: mark, now }),
  };
}

/** Bits of a password the operator resets: as strong as a session id's secret. */
const RESET_PASSWORD_BITS = 128;

/**
 * The operator's reset of a forgotten password (there is no email to send a link to): a new random
 * password, returned once and stored only hashed; every session of the owner ends, and the email's
 * failed sign-ins are forgotten so the owner can sign in with it at once.
 */
export async function resetPassword(
  kv: Deno.Kv,
  email: string,
  now = Date.now(),
): Promise<{ owner: OwnerRecord; password: string; sessionsEnded: number }> {
  const ownerId = await ownerIdByEmail(kv, email);
  const password = randomToken(RESET_PASSWORD_BITS);
  const passwordHash = await hashPassword(password);
  for (;;) {
    const entry = await kv.get<OwnerRecord>(keys.owner(ownerId));
    if (!entry.value) {
      throw new AccountError(`no account with email ${normalizeEmail(email)}`, "email");
    }
    const owner: OwnerRecord = {
      ...entry.value,
      passwordHash,
      passwordChangedAt: nextPasswordMark(entry.value, now),
    };
    // The owner may be changing the password meanwhile: the reset is made on what is stored then.
    const result = await kv.atomic().check(entry).set(keys.owner(ownerId), owner).commit();
    if (!result.ok) continue;
    await forgetEmailFailures(kv, owner.email, now);
    return {
      owner,
      password,
      sessionsEnded: await endOwnerSessions(kv, ownerId, {
        passwordChangedAt: owner.passwordChangedAt,
        now,
      }),
    };
  }
}
