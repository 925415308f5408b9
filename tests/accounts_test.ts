import assert from "node:assert/strict";
import {
  AccountError,
  checkCredentials,
  hashPassword,
  signUp,
  verifyPassword,
} from "@/lib/accounts/accounts.ts";
import { keys } from "@/lib/db.ts";
import { sha256Hex } from "@/lib/core/mod.ts";
import { createSession, endSession, findSession, SESSION_TTL_MS } from "@/lib/accounts/mod.ts";
import {
  beginSignIn,
  beginSignUp,
  MAX_FAILURES_PER_EMAIL,
  MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES,
  MAX_FAILURES_PER_IP,
  MAX_SIGNUPS_PER_IP,
  signInSucceeded,
  THROTTLE_WINDOW_MS,
} from "@/lib/accounts/sign_in_throttle.ts";

async function withKv(fn: (kv: Deno.Kv) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  try {
    await fn(kv);
  } finally {
    kv.close();
  }
}

const PASSWORD = "correct horse battery";

Deno.test("a password hash is salted scrypt and verifies only the same password", async () => {
  const a = await hashPassword(PASSWORD);
  const b = await hashPassword(PASSWORD);
  assert.match(a, /^scrypt\$32768\$8\$1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
  assert.notEqual(a, b, "each hash has its own salt");
  assert.equal(await verifyPassword(PASSWORD, a), true);
  assert.equal(await verifyPassword(PASSWORD + "!", a), false);
  assert.equal(await verifyPassword(PASSWORD, "md5$abc"), false);
});

Deno.test("sign-up stores the email normalised and never the password", () =>
  withKv(async (kv) => {
    const owner = await signUp(kv, { email: "  Ada@Example.COM ", password: PASSWORD });
    assert.equal(owner.email, "ada@example.com");
    const stored = await kv.get(keys.owner(owner.id));
    assert.ok(!JSON.stringify(stored.value).includes(PASSWORD));
    assert.equal((await kv.get(keys.ownerByEmail("ada@example.com"))).value, owner.id);
  }));

Deno.test("an email can own one account only, whatever its case", () =>
  withKv(async (kv) => {
    await signUp(kv, { email: "ada@example.com", password: PASSWORD });
    await assert.rejects(
      () => signUp(kv, { email: "ADA@example.com", password: "another password" }),
      AccountError,
    );
  }));

Deno.test("sign-up refuses a short password and a malformed email", () =>
  withKv(async (kv) => {
    await assert.rejects(() => signUp(kv, { email: "a@b.co", password: "short" }), AccountError);
    await assert.rejects(() => signUp(kv, { email: "not-an-email", password: PASSWORD }), {
      message: /valid email/,
    });
  }));

Deno.test("credentials check: right password, wrong password, unknown email", () =>
  withKv(async (kv) => {
    const owner = await signUp(kv, { email: "ada@example.com", password: PASSWORD });
    assert.equal(
      (await checkCredentials(kv, { email: "Ada@example.com", password: PASSWORD }))
        ?.id,
      owner.id,
    );
    assert.equal(
      await checkCredentials(kv, { email: "ada@example.com", password: "wrong!" }),
      null,
    );
    assert.equal(
      await checkCredentials(kv, { email: "bob@example.com", password: PASSWORD }),
      null,
    );
  }));

Deno.test("a session id has at least 128 bits and KV holds only its SHA-256", () =>
  withKv(async (kv) => {
    const { sessionId } = await createSession(kv, { id: "own_1" });
    assert.ok(sessionId.length * Math.log2(36) >= 128);
    for await (const entry of kv.list({ prefix: ["sessions"] })) {
      assert.equal(entry.key[1], sha256Hex(sessionId));
      assert.ok(!JSON.stringify(entry.value).includes(sessionId));
    }
    assert.equal((await findSession(kv, sessionId))?.ownerId, "own_1");
  }));

Deno.test("a session expires, and ends at sign-out", () =>
  withKv(async (kv) => {
    const now = Date.now();
    const { sessionId } = await createSession(kv, { id: "own_1" }, now);
    assert.ok(await findSession(kv, sessionId, now + SESSION_TTL_MS - 1));
    assert.equal(await findSession(kv, sessionId, now + SESSION_TTL_MS), null);
    await endSession(kv, sessionId, "own_1");
    assert.equal(await findSession(kv, sessionId, now), null);
    assert.equal(await findSession(kv, "not a session id"), null);
  }));

Deno.test("sign-in is throttled per email and address after repeated failures, until the window ends; the owner's own address is not held back by them", () =>
  withKv(async (kv) => {
    const now = Math.floor(Date.now() / THROTTLE_WINDOW_MS) * THROTTLE_WINDOW_MS;
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL; i++) {
      assert.equal((await beginSignIn(kv, "ada@example.com", "10.0.0.1", now)).retryAfter, 0);
    }
    const blocked = await beginSignIn(kv, "ada@example.com", "10.0.0.1", now);
    assert.equal(blocked.retryAfter, THROTTLE_WINDOW_MS / 1000);
    assert.equal((await beginSignIn(kv, "ada@example.com", "10.0.0.2", now)).retryAfter, 0);
    assert.equal((await beginSignIn(kv, "bob@example.com", "10.0.0.1", now)).retryAfter, 0);
    const later = now + THROTTLE_WINDOW_MS;
    assert.equal((await beginSignIn(kv, "ada@example.com", "10.0.0.1", later)).retryAfter, 0);
  }));

Deno.test("sign-in at one email is throttled after MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES failures from every address together", () =>
  withKv(async (kv) => {
    const now = Math.floor(Date.now() / THROTTLE_WINDOW_MS) * THROTTLE_WINDOW_MS;
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES; i++) {
      const attempt = await beginSignIn(kv, "ada@example.com", `10.3.${i >> 8}.${i & 255}`, now);
      assert.equal(attempt.retryAfter, 0, `guess ${i + 1}`);
    }
    assert.ok((await beginSignIn(kv, "ada@example.com", "10.4.0.1", now)).retryAfter > 0);
    assert.equal((await beginSignIn(kv, "bob@example.com", "10.4.0.1", now)).retryAfter, 0);
  }));

Deno.test("a successful sign-in clears the email's counts, from every address", () =>
  withKv(async (kv) => {
    const now = Date.now();
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL; i++) {
      await beginSignIn(kv, "ada@example.com", "10.0.0.7", now);
    }
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL - 1; i++) {
      await beginSignIn(kv, "ada@example.com", "10.0.0.1", now);
    }
    const ok = await beginSignIn(kv, "ada@example.com", "10.0.0.1", now);
    await signInSucceeded(kv, "ada@example.com", ok, now);
    for (const address of ["10.0.0.1", "10.0.0.7"]) {
      for (let i = 0; i < MAX_FAILURES_PER_EMAIL; i++) {
        assert.equal((await beginSignIn(kv, "ada@example.com", address, now)).retryAfter, 0);
      }
    }
  }));

Deno.test("parallel guesses at one email get at most the limits through: per address and in all", () =>
  withKv(async (kv) => {
    const now = Date.now();
    const fromOne = await Promise.all(
      Array.from({ length: 25 }, () => beginSignIn(kv, "ada@example.com", "10.1.0.1", now)),
    );
    const throughOne = fromOne.filter((a) => a.retryAfter === 0).length;
    assert.ok(throughOne <= MAX_FAILURES_PER_EMAIL, `${throughOne} got through from one address`);
    const fromMany = await Promise.all(
      Array.from(
        { length: MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES + 50 },
        (_, i) => beginSignIn(kv, "ada@example.com", `10.5.${i >> 8}.${i & 255}`, now),
      ),
    );
    const through = fromMany.filter((a) => a.retryAfter === 0).length;
    assert.ok(through <= MAX_FAILURES_PER_EMAIL_ALL_ADDRESSES, `${through} got through`);
    assert.ok((await beginSignIn(kv, "ada@example.com", "10.2.0.1", now)).retryAfter > 0);
  }));

Deno.test("sign-in is throttled per address across many emails", () =>
  withKv(async (kv) => {
    const now = Date.now();
    await Promise.all(
      Array.from(
        { length: MAX_FAILURES_PER_IP },
        (_, i) => beginSignIn(kv, `user${i}@example.com`, "10.0.0.9", now),
      ),
    );
    assert.ok((await beginSignIn(kv, "fresh@example.com", "10.0.0.9", now)).retryAfter > 0);
    assert.equal((await beginSignIn(kv, "fresh@example.com", "10.0.0.8", now)).retryAfter, 0);
  }));

Deno.test("sign-ups from one address are limited per window, counted before any password is hashed", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const now = Date.UTC(2026, 10, 22, 12, 0, 0);
    for (let i = 0; i < MAX_SIGNUPS_PER_IP; i++) {
      assert.equal(await beginSignUp(kv, "203.0.113.7", now + i), 0, `sign-up ${i + 1} passes`);
    }
    const wait = await beginSignUp(kv, "203.0.113.7", now + 20);
    assert.ok(wait > 0 && wait <= THROTTLE_WINDOW_MS / 1000, "the next one waits for the window");
    assert.equal(
      await beginSignUp(kv, "198.51.100.1", now + 21),
      0,
      "another address is not affected",
    );
    assert.equal(await beginSignUp(kv, "203.0.113.7", now + THROTTLE_WINDOW_MS), 0, "a new window");
  } finally {
    kv.close();
  }
});
