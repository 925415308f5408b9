/**
 * Owner accounts: email + password, the password kept only as a salted scrypt hash.
 */
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { keys, type OwnerRecord } from "@/lib/db.ts";
import { newId } from "@/lib/core/mod.ts";

/** scrypt cost: N=2^15, r=8 (32 MiB, tens of ms per guess); stored with each hash so it can grow. */
const SCRYPT = { N: 32768, r: 8, p: 1 };
const HASH_BYTES = 32;
const SALT_BYTES = 16;
export const PASSWORD_MIN = 10;
const PASSWORD_MAX = 200;
const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** A refused sign-up, naming the field it concerns so the form can mark and focus it. */
export class AccountError extends Error {
  constructor(message: string, readonly field: "email" | "password") {
    super(message);
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

function validateCredentials(email: string, password: string): AccountError | null {
  if (!EMAIL_PATTERN.test(email) || email.length > MAX_EMAIL_CHARS) {
    return new AccountError("Enter a valid email address.", "email");
  }
  if (password.length < PASSWORD_MIN) {
    return new AccountError(
      `Choose a password of at least ${PASSWORD_MIN} characters.`,
      "password",
    );
  }
  if (password.length > PASSWORD_MAX) {
    return new AccountError(`A password has at most ${PASSWORD_MAX} characters.`, "password");
  }
  return null;
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
    throw new AccountError("An account with this email already exists. Sign in.", "email");
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
