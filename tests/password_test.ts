import assert from "node:assert/strict";
import { keys, type OwnerRecord, type SessionRecord } from "@/lib/db.ts";
import { randomToken, sha256Hex } from "@/lib/core/mod.ts";
import {
  createSession,
  endOwnerSessions,
  findSession,
  resetPassword,
  SESSION_TTL_MS,
} from "@/lib/accounts/mod.ts";
import { MAX_FAILURES_PER_EMAIL } from "@/lib/accounts/sign_in_throttle.ts";
import { issueManagementKey } from "@/lib/management/mod.ts";
import { sessionCookie } from "@/routes/session.ts";
import { OWNER_PASSWORD, OwnerSession } from "./owner_session.ts";
import { assertAuditClean, PUBLIC_URL, startService, type TestService } from "./helpers.ts";

const NEW_PASSWORD = "a brand new passphrase";
const CHANGE = "/dashboard/account/password";

async function withService(fn: (s: TestService) => Promise<void>) {
  const s = await startService();
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

async function signIn(s: TestService, email: string, password: string) {
  const v = new OwnerSession(s);
  const res = await v.post("/signin", { email, password });
  await res.body?.cancel();
  return { v, status: res.status };
}

/** Whether the session's cookie still opens the dashboard. */
async function isSignedIn(v: OwnerSession): Promise<boolean> {
  const res = await v.request("/dashboard");
  await res.body?.cancel();
  return res.status === 200;
}

async function ownerOf(s: TestService, email: string): Promise<OwnerRecord> {
  const id = (await s.kv.get<string>(keys.ownerByEmail(email))).value!;
  return (await s.kv.get<OwnerRecord>(keys.owner(id))).value!;
}

/** The refused form's alert, and the one field it marks invalid, describes and focuses. */
function assertRefusedAt(html: string, field: string, message: RegExp) {
  const alert = /<p class="alert" role="alert" id="password-error">([^<]*)<\/p>/.exec(html);
  assert.ok(alert, "the password card has the alert");
  assert.match(alert[1], message);
  const described = [
    ...html.matchAll(/<input[^>]*aria-describedby="password-error[^"]*"[^>]*>/g),
  ];
  assert.equal(described.length, 1, "one field is described by the alert");
  assert.match(described[0][0], new RegExp(`name="${field}"`));
  assert.match(described[0][0], /autofocus/);
  assert.match(described[0][0], /aria-invalid/);
  assert.equal([...html.matchAll(/aria-invalid/g)].length, 1, "no other field is marked invalid");
  assert.doesNotMatch(html, /value="(correct horse|a brand new)/, "no password is sent back");
}

Deno.test("changing the password keeps this session, ends the owner's other sessions, and only the new password signs in", () =>
  withService(async (s) => {
    const here = await new OwnerSession(s).signUp("ada@example.com");
    const elsewhere = (await signIn(s, "ada@example.com", OWNER_PASSWORD)).v;
    const otherOwner = await new OwnerSession(s).signUp("bob@example.com");
    assert.match(await here.page("/dashboard"), /href="\/dashboard\/account"/);
    assert.match(await here.page("/dashboard/account"), /Signed in as <strong>ada@example\.com/);

    const res = await here.post(CHANGE, {
      _csrf: await here.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    });
    assert.equal(res.headers.get("location"), "/dashboard/account#password");
    assert.match(
      await here.followRedirect(res),
      /role="status">Password changed\. Every other session of this account was signed out\./,
    );

    assert.ok(await isSignedIn(here), "the session that changed it stays");
    assert.equal(await isSignedIn(elsewhere), false, "another session of the owner ends");
    assert.ok(await isSignedIn(otherOwner), "another owner's session is left alone");
    assert.equal((await signIn(s, "ada@example.com", OWNER_PASSWORD)).status, 401);
    assert.equal((await signIn(s, "ada@example.com", NEW_PASSWORD)).status, 303);
    const ada = await ownerOf(s, "ada@example.com");
    let indexed = 0;
    for await (const _ of s.kv.list({ prefix: keys.ownerSessions(ada.id) })) indexed++;
    assert.equal(indexed, 2, "this session and the new sign-in's; the ended one is gone from KV");
  }));

/** The status of a management API call with the key. */
async function managementStatus(s: TestService, managementKey: string): Promise<number> {
  const res = await s.handle(
    new Request(`${PUBLIC_URL}/v1/management/apps`, {
      headers: { authorization: `Bearer ${managementKey}` },
    }),
  );
  await res.body?.cancel();
  return res.status;
}

Deno.test("a password change leaves management keys working, the Account page says how many, and one form revokes them all", () =>
  withService(async (s) => {
    const here = await new OwnerSession(s).signUp("ada@example.com");
    const ada = await ownerOf(s, "ada@example.com");
    const mine = [
      (await issueManagementKey(s.kv, ada.id, "billing")).managementKey,
      (await issueManagementKey(s.kv, ada.id, "reports")).managementKey,
    ];
    await new OwnerSession(s).signUp("bob@example.com");
    const bobs = (await issueManagementKey(s.kv, (await ownerOf(s, "bob@example.com")).id, "b"))
      .managementKey;

    const res = await here.post(CHANGE, {
      _csrf: await here.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    });
    const account = await here.followRedirect(res);
    assert.match(account, /Management keys still work: see below\./);
    assert.match(account, /this account has\s+2 live management keys/);
    for (const key of mine) assert.equal(await managementStatus(s, key), 200);

    // Without the session's CSRF token nothing is revoked.
    const forged = await here.post("/dashboard/management-keys/revoke-all", {});
    assert.equal(forged.status, 403);
    await forged.body?.cancel();
    for (const key of mine) assert.equal(await managementStatus(s, key), 200);

    const csrf =
      /action="\/dashboard\/management-keys\/revoke-all"[^]*?name="_csrf" value="([0-9a-z]+)"/
        .exec(account)![1];
    const revoked = await here.post("/dashboard/management-keys/revoke-all", { _csrf: csrf });
    assert.equal(revoked.headers.get("location"), "/dashboard/management-keys");
    assert.match(await here.followRedirect(revoked), /Every management key was revoked/);
    for (const key of mine) assert.equal(await managementStatus(s, key), 401);
    assert.equal(await managementStatus(s, bobs), 200, "another owner's key is left alone");
    assert.match(
      await here.page("/dashboard/account"),
      /This account has no live management keys\./,
    );
  }));

Deno.test("the session that changes the password is replaced: a copy of its cookie (a stolen one) is signed out, and its CSRF token is new", () =>
  withService(async (s) => {
    const here = await new OwnerSession(s).signUp("ada@example.com");
    const copy = new OwnerSession(s);
    copy.cookie = here.cookie;
    const before = await here.csrf();
    assert.ok(await isSignedIn(copy));
    const res = await here.post(CHANGE, {
      _csrf: before,
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    });
    assert.equal(res.status, 303);
    await res.body?.cancel();
    assert.ok(await isSignedIn(here), "the browser that changed it has the new session");
    assert.notEqual(here.cookie, copy.cookie);
    assert.equal(await isSignedIn(copy), false, "the copied cookie no longer opens the dashboard");
    assert.notEqual(await here.csrf(), before);
  }));

Deno.test("a session the per-owner index never held ends too when the password changes", () =>
  withService(async (s) => {
    const here = await new OwnerSession(s).signUp("ada@example.com");
    const ada = await ownerOf(s, "ada@example.com");
    // As a session stored before the index existed: only its own entry.
    const legacyId = randomToken(192);
    const now = Date.now();
    const record: SessionRecord = {
      ownerId: ada.id,
      csrfToken: randomToken(128),
      createdAt: now,
      expiresAt: now + SESSION_TTL_MS,
    };
    await s.kv.set(keys.session(sha256Hex(legacyId)), record);
    const legacy = new OwnerSession(s);
    legacy.cookie = `${sessionCookie(PUBLIC_URL).name}=${legacyId}`;
    assert.ok(await isSignedIn(legacy), "it opened the dashboard before the change");
    const res = await here.post(CHANGE, {
      _csrf: await here.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    });
    assert.equal(res.status, 303);
    assert.equal(await isSignedIn(legacy), false);
    assert.ok(await isSignedIn(here));
  }));

Deno.test("a wrong current password is refused at its field; the session's own guesses hold its change back and count with failed sign-ins", () =>
  withService(async (s) => {
    const v = await new OwnerSession(s).signUp("ada@example.com");
    const before = (await ownerOf(s, "ada@example.com")).passwordHash;
    const change = async (current: string) =>
      await v.post(CHANGE, {
        _csrf: await v.csrf(),
        current_password: current,
        new_password: NEW_PASSWORD,
        confirmation: NEW_PASSWORD,
      });
    const wrong = await change("not my password");
    assert.equal(wrong.status, 400);
    assertRefusedAt(await wrong.text(), "current_password", /current password is wrong/);
    for (let i = 1; i < MAX_FAILURES_PER_EMAIL; i++) {
      await (await change(`wrong guess ${i}`)).body?.cancel();
    }
    const held = await change(OWNER_PASSWORD);
    assert.equal(held.status, 429, "the right password is held back too, as at sign-in");
    assert.ok(Number(held.headers.get("retry-after")) > 0);
    assertRefusedAt(await held.text(), "current_password", /Too many wrong passwords/);
    assert.equal(
      (await signIn(s, "ada@example.com", OWNER_PASSWORD)).status,
      429,
      "the guesses made here count against the email at sign-in",
    );
    assert.equal((await ownerOf(s, "ada@example.com")).passwordHash, before);
    assert.ok(await isSignedIn(v));
  }));

Deno.test("failed sign-ins at the owner's email, by anyone, do not keep a signed-in owner from changing the password", () =>
  withService(async (s) => {
    const v = await new OwnerSession(s).signUp("ada@example.com");
    for (let i = 0; i <= MAX_FAILURES_PER_EMAIL; i++) {
      await signIn(s, "ada@example.com", `someone else's guess ${i}`);
    }
    assert.equal((await signIn(s, "ada@example.com", OWNER_PASSWORD)).status, 429);

    const res = await v.post(CHANGE, {
      _csrf: await v.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    });
    assert.equal(res.status, 303);
    assert.match(await v.followRedirect(res), /Password changed\./);
    assert.equal(
      (await signIn(s, "ada@example.com", NEW_PASSWORD)).status,
      303,
      "the change proved the password: the email's failed sign-ins are forgotten",
    );
  }));

Deno.test("a new password too short, or a confirmation that differs, is refused at its field and changes nothing", () =>
  withService(async (s) => {
    const v = await new OwnerSession(s).signUp("ada@example.com");
    const elsewhere = (await signIn(s, "ada@example.com", OWNER_PASSWORD)).v;
    const before = await ownerOf(s, "ada@example.com");
    const short = await v.post(CHANGE, {
      _csrf: await v.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: "short",
      confirmation: "short",
    });
    assert.equal(short.status, 400);
    assertRefusedAt(await short.text(), "new_password", /at least 10 characters/);
    const differs = await v.post(CHANGE, {
      _csrf: await v.csrf(),
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: `${NEW_PASSWORD}!`,
    });
    assert.equal(differs.status, 400);
    assertRefusedAt(await differs.text(), "confirmation", /confirmation differs/);
    assert.deepEqual(await ownerOf(s, "ada@example.com"), before);
    assert.ok(await isSignedIn(elsewhere), "no session ended");
  }));

Deno.test("a password change without the session's CSRF token, or from another site, is refused and changes nothing", () =>
  withService(async (s) => {
    const v = await new OwnerSession(s).signUp("ada@example.com");
    const elsewhere = (await signIn(s, "ada@example.com", OWNER_PASSWORD)).v;
    const fields = {
      current_password: OWNER_PASSWORD,
      new_password: NEW_PASSWORD,
      confirmation: NEW_PASSWORD,
    };
    const csrf = await v.csrf();
    const attempts: [Record<string, string>, Record<string, string>][] = [
      [fields, {}],
      [{ ...fields, _csrf: "0".repeat(25) }, {}],
      [{ ...fields, _csrf: csrf }, { origin: "https://evil.example" }],
      [{ ...fields, _csrf: csrf }, { "sec-fetch-site": "cross-site" }],
    ];
    for (const [body, headers] of attempts) {
      const res = await v.post(CHANGE, body, headers);
      assert.equal(res.status, 403);
      assert.match(await res.text(), /Nothing was changed/);
    }
    assert.equal((await signIn(s, "ada@example.com", OWNER_PASSWORD)).status, 303);
    assert.ok(await isSignedIn(elsewhere));
  }));

Deno.test("the sign-in page tells an owner who forgot the password to ask the operator for a reset", () =>
  withService(async (s) => {
    const html = await (await s.handle(new Request(`${PUBLIC_URL}/signin`))).text();
    const form = html.indexOf("</form>");
    const hint = html.indexOf("Forgot your password?");
    assert.ok(form > 0 && hint > form, "just after the form");
    assert.match(html.slice(hint), /ask its operator to reset it/);
  }));

Deno.test("ending an owner's old sessions leaves one begun with the new password meanwhile", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const { owner } = await resetPassword(s.kv, "ada@example.com");
    // A sign-in with the new password, while the sessions of the old one were still being ended.
    const fresh = await createSession(s.kv, owner);
    const stale = await createSession(s.kv, { id: owner.id, passwordChangedAt: undefined });
    const ended = await endOwnerSessions(s.kv, owner.id, {
      passwordChangedAt: owner.passwordChangedAt,
    });
    assert.equal(ended, 1);
    assert.ok(await findSession(s.kv, fresh.sessionId), "the new password's session stays");
    assert.equal(await findSession(s.kv, stale.sessionId), null);
  }));
