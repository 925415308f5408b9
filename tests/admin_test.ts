import assert from "node:assert/strict";
import { signUp } from "@/lib/accounts/mod.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { ADMIN_COMMANDS } from "@/lib/ops/mod.ts";
import { MAX_WALLET_CREDITS } from "@/lib/billing/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { PUBLIC_URL, startService, userMessage } from "./helpers.ts";
import { OWNER_PASSWORD, OwnerSession } from "./owner_session.ts";
import { MAX_FAILURES_PER_EMAIL } from "@/lib/accounts/sign_in_throttle.ts";
import { issueManagementKey } from "@/lib/management/mod.ts";

const ADMIN = new URL("../scripts/admin.ts", import.meta.url).pathname;

function admin(kvPath: string, ...args: string[]) {
  return adminWith({ KV_PATH: kvPath }, ...args);
}

async function adminWith(env: Record<string, string>, ...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ADMIN, ...args],
    env: { PUBLIC_URL, ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  return {
    code: out.code,
    json: out.code === 0 || stdout.startsWith("{") ? JSON.parse(stdout) : null,
    stderr: new TextDecoder().decode(out.stderr),
  };
}

async function withFileService(
  fn: (s: Awaited<ReturnType<typeof startService>>, kvPath: string) => Promise<void>,
) {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const s = await startService({ kvPath });
  try {
    await fn(s, kvPath);
  } finally {
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("admin create-app prints the app, a working key, its top-up url and 5.000000", () =>
  withFileService(async (s, kvPath) => {
    const unknownOwner = await admin(
      kvPath,
      "create-app",
      "--name",
      "demo",
      "--owner",
      "dev@example.com",
    );
    assert.notEqual(unknownOwner.code, 0, "an owner must have an account");
    const owner = await signUp(s.kv, {
      email: "dev@example.com",
      password: "a long enough password",
    });
    const { code, json } = await admin(
      kvPath,
      "create-app",
      "--name",
      "demo",
      "--owner",
      "dev@example.com",
    );
    assert.equal(code, 0);
    const shown = await admin(kvPath, "show-app", "--app", json.app_id);
    assert.equal(shown.json.owner, owner.id);
    assert.match(json.app_id, /^app_/);
    assert.match(json.api_key, /^tb_[0-9a-z]{36}$/);
    assert.match(json.top_up_url, new RegExp(`^${PUBLIC_URL}/top-up/[0-9a-z]{31,}$`));
    assert.equal(json.balance, "5.000000");
    const res = await s.chat(json.api_key, {
      model: "tollbooth/echo",
      messages: userMessage("hi"),
    });
    assert.equal(res.status, 200, "the running service sees the new app at once");
    await res.body?.cancel();
  }));

Deno.test("a key revoked by the admin command is refused by the running service on its next request", () =>
  withFileService(async (s, kvPath) => {
    const app = (await admin(kvPath, "create-app", "--name", "demo")).json;
    const second = await admin(kvPath, "create-key", "--app", app.app_id);
    assert.equal(second.code, 0);
    assert.match(second.json.key_id, /^key_/);
    const body = { model: "tollbooth/echo", messages: userMessage("hi") };
    assert.equal((await s.chat(second.json.api_key, body)).status, 200);
    const revoked = await admin(kvPath, "revoke-key", "--key", second.json.key_id);
    assert.equal(revoked.code, 0);
    assert.equal((await s.chat(second.json.api_key, body)).status, 401);
    const first = await s.chat(app.api_key, body);
    assert.equal(first.status, 200, "the other key of the app still works");
    await first.body?.cancel();
  }));

Deno.test("a credit added by the admin command shows in the running service's next balance", () =>
  withFileService(async (s, kvPath) => {
    const app = (await admin(kvPath, "create-app", "--name", "demo")).json;
    const body = { model: "tollbooth/echo", messages: userMessage("hi") };
    const before = await s.chat(app.api_key, body);
    const balanceBefore = parseUsd(before.headers.get("tollbooth-balance")!);
    await before.body?.cancel();
    const credit = await admin(
      kvPath,
      "credit",
      "--app",
      app.app_id,
      "--amount",
      "10.00",
      "--reason",
      "goodwill",
    );
    assert.equal(credit.code, 0);
    assert.equal(credit.json.credited, "10.000000");
    assert.equal(credit.json.balance, formatUsd(balanceBefore + 10_000_000));
    const after = await s.chat(app.api_key, body);
    const cost = parseUsd(after.headers.get("tollbooth-request-cost")!);
    assert.equal(
      parseUsd(after.headers.get("tollbooth-balance")!),
      balanceBefore + 10_000_000 - cost,
    );
    await after.body?.cancel();
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(app.app_id))).value!;
    assert.equal(wallet.operatorCredits, 10_000_000);
  }));

Deno.test("a credit past a wallet's one billion USD of credits is refused, writes nothing, and the app and the audit go on", () =>
  withFileService(async (s, kvPath) => {
    const app = (await admin(kvPath, "create-app", "--name", "rich")).json;
    const credit = (amount: string) =>
      admin(kvPath, "credit", "--app", app.app_id, "--amount", amount, "--reason", "test");
    // The starter's 5 USD and this make exactly the most a wallet may be credited.
    assert.equal((await credit("999999995.00")).code, 0);
    const refused = await credit("0.000001");
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /past 1000000000\.000000 USD, the most a wallet holds/);
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(app.app_id))).value!;
    assert.equal(wallet.starter + wallet.topUps + wallet.operatorCredits, MAX_WALLET_CREDITS);
    assert.equal(wallet.available, MAX_WALLET_CREDITS);
    assert.equal((await admin(kvPath, "show-app", "--app", app.app_id)).code, 0);
    assert.equal((await admin(kvPath, "audit")).code, 0);
    const served = await s.chat(app.api_key, {
      model: "tollbooth/echo",
      messages: userMessage("hi"),
    });
    assert.equal(served.status, 200);
    await served.body?.cancel();
  }));

Deno.test("admin show-app reports balance, reserved and keys without any raw key", () =>
  withFileService(async (_s, kvPath) => {
    const app = (await admin(kvPath, "create-app", "--name", "shown")).json;
    const { code, json } = await admin(kvPath, "show-app", "--app", app.app_id);
    assert.equal(code, 0);
    assert.equal(json.app_id, app.app_id);
    assert.equal(json.name, "shown");
    assert.equal(json.balance, "5.000000");
    assert.equal(json.reserved, "0.000000");
    assert.equal(json.keys.length, 1);
    assert.equal(json.keys[0].prefix, app.api_key.slice(0, 8));
    assert.ok(!JSON.stringify(json).includes(app.api_key));
  }));

Deno.test("admin audit exits 0 on clean books and non-zero when the money does not add up", () =>
  withFileService(async (s, kvPath) => {
    const app = (await admin(kvPath, "create-app", "--name", "audited")).json;
    const clean = await admin(kvPath, "audit");
    assert.equal(clean.code, 0);
    assert.equal(clean.json.ok, true);
    assert.equal(clean.json.apps, 1);
    // Forge money out of thin air: the audit must notice.
    const entry = await s.kv.get<WalletRecord>(keys.wallet(app.app_id));
    await s.kv.set(keys.wallet(app.app_id), {
      ...entry.value!,
      available: entry.value!.available + 1,
    });
    const dirty = await admin(kvPath, "audit");
    assert.equal(dirty.code, 1);
    assert.equal(dirty.json.ok, false);
    assert.match(dirty.json.wallets[0].problems[0], /available \+ reserved \+ spent/);
  }));

Deno.test("admin commands with bad arguments print a message and exit non-zero", () =>
  withFileService(async (_s, kvPath) => {
    const cases: [string[], RegExp][] = [
      [[], /no command given/],
      [["launch-rockets"], /unknown command/],
      [["create-app"], /--name is required/],
      [["create-app", "--name"], /--name needs a value/],
      [["create-app", "--colour", "red"], /unknown option --colour/],
      [["credit", "--app", "app_x", "--amount", "-5", "--reason", "r"], /--amount/],
      [["credit", "--app", "app_x", "--amount", "ten", "--reason", "r"], /--amount/],
      [["show-app", "--app", "app_missing"], /no app app_missing/],
      [["revoke-key", "--key", "key_missing"], /no key key_missing/],
    ];
    for (const [args, message] of cases) {
      const { code, stderr } = await admin(kvPath, ...args);
      assert.notEqual(code, 0, args.join(" "));
      assert.match(stderr, message, args.join(" "));
    }
  }));

Deno.test("admin text arguments beyond their bounds are usage errors (exit 2) before anything is written", () =>
  withFileService(async (s, kvPath) => {
    const { app } = await createAppRecord(s.kv, { name: "bounds" });
    const long = (n: number) => "x".repeat(n);
    const cases: [string[], RegExp][] = [
      [
        ["credit", "--app", app.id, "--amount", "1", "--reason", long(70_000)],
        /--reason must have 1 to 500 characters/,
      ],
      [
        ["credit", "--app", app.id, "--amount", "1", "--reason", "   "],
        /--reason must have 1 to 500/,
      ],
      [["create-key", "--app", app.id, "--name", ""], /--name must have 1 to 60 characters/],
      [["create-key", "--app", app.id, "--name", long(300)], /--name must have 1 to 60 characters/],
      [["create-app", "--name", long(101)], /--name must have 1 to 100 characters/],
      [
        ["create-app", "--name", "a", "--owner", `${long(3000)}@x.io`],
        /--owner must have 1 to 254/,
      ],
      [["revoke-key", "--key", long(3000)], /--key is not an id/],
      [["set-limits", "--app", app.id, "--key", long(3000), "--rpm", "5"], /--key is not an id/],
      [["show-app", "--app", long(3000)], /--app is not an id/],
      [
        ["set-top-up", "--app", app.id, "--return-url", "javascript:alert(1)"],
        /--return-url: the return URL must use https/,
      ],
    ];
    for (const [args, message] of cases) {
      const label = args.map((a) => a.slice(0, 20)).join(" ");
      const { code, stderr } = await admin(kvPath, ...args);
      assert.equal(code, 2, `${label}: ${stderr}`);
      assert.match(stderr.split("\n")[0], message, label);
    }
    const shown = await runAdmin(["show-app", "--app", app.id], s.kv, PUBLIC_URL);
    const output = shown.output as { balance: string; keys: unknown[]; top_up_return_url: unknown };
    assert.equal(output.balance, "5.000000");
    assert.equal(output.keys.length, 1);
    assert.equal(output.top_up_return_url, null);
    const named = await admin(kvPath, "create-key", "--app", app.id, "--name", ` ${long(60)} `);
    assert.equal(named.code, 0, named.stderr);
  }));

Deno.test("admin with a bad environment variable or a KV it cannot open says so in one line and exits 1", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const cases: [Record<string, string>, RegExp][] = [
      [
        { KV_PATH: `${dir}/kv.sqlite3`, RATE_LIMIT_RPM: "abc" },
        /^admin: environment variable RATE_LIMIT_RPM: must be an integer/,
      ],
      [{ KV_PATH: dir }, new RegExp(`^admin: KV_PATH ${dir} cannot be opened`)],
    ];
    for (const [env, message] of cases) {
      const { code, stderr } = await adminWith(env, "audit");
      assert.equal(code, 1, stderr);
      assert.equal(stderr.trimEnd().split("\n").length, 1, `one line, no stack trace: ${stderr}`);
      assert.match(stderr, message);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("every command of the admin table runs, is in the usage text and on /docs/operations", () =>
  withFileService(async (s, kvPath) => {
    for (const { name } of ADMIN_COMMANDS) {
      // Each command reads its options first: an unknown one is refused by the command itself,
      // not as an unknown command.
      await assert.rejects(
        runAdmin([name, "--bogus", "x"], s.kv, PUBLIC_URL),
        /unknown option --bogus/,
        name,
      );
    }
    const { stderr } = await admin(kvPath);
    for (const { name, options } of ADMIN_COMMANDS) {
      assert.ok(stderr.includes(`\n  ${name} ${options}`.trimEnd()), `${name} in the usage text`);
    }
    const docs = await (await s.handle(new Request(`${PUBLIC_URL}/docs/operations`))).text();
    const listed = /deno task admin ([a-z| -]+)<\/code>/.exec(docs)?.[1];
    assert.deepEqual(listed?.split(" | "), ADMIN_COMMANDS.map((c) => c.name));
  }));

Deno.test("admin reset-password prints a new password that signs in, the old one no longer, and ends every session of the owner", () =>
  withFileService(async (s, kvPath) => {
    const signIn = async (password: string) => {
      const v = new OwnerSession(s);
      const res = await v.post("/signin", { email: "ada@example.com", password });
      await res.body?.cancel();
      return { v, status: res.status };
    };
    const first = await new OwnerSession(s).signUp("ada@example.com");
    const second = (await signIn(OWNER_PASSWORD)).v;
    const bob = await new OwnerSession(s).signUp("bob@example.com");
    // The owner who forgot it has guessed until sign-in held them back.
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL; i++) await signIn(`forgotten guess ${i}`);
    assert.equal((await signIn(OWNER_PASSWORD)).status, 429);

    const reset = await admin(kvPath, "reset-password", "--email", " ADA@example.com ");
    assert.equal(reset.code, 0, reset.stderr);
    assert.equal(reset.json.email, "ada@example.com");
    assert.match(reset.json.owner_id, /^own_/);
    assert.equal(reset.json.sessions_ended, 2);
    const password: string = reset.json.password;
    assert.ok(password.length * Math.log2(36) >= 128, "at least 128 random bits");

    for (const v of [first, second]) {
      const res = await v.request("/dashboard");
      await res.body?.cancel();
      assert.equal(res.status, 303, "the owner's sessions ended");
    }
    assert.equal((await bob.request("/dashboard")).status, 200, "another owner's session stays");
    assert.equal((await signIn(OWNER_PASSWORD)).status, 401);
    const { v, status } = await signIn(password);
    assert.equal(status, 303, "the printed password signs in at once");
    assert.match(await v.page("/dashboard"), /Signed in as ada@example\.com/);
    const stored = await s.kv.get(keys.owner(reset.json.owner_id));
    assert.ok(!JSON.stringify(stored.value).includes(password), "KV keeps only its hash");
  }));

Deno.test("admin reset-password leaves the owner's management keys working, and revokes them all with --revoke-management-keys true", () =>
  withFileService(async (s, kvPath) => {
    const ownerId = (await signUp(s.kv, { email: "ada@example.com", password: OWNER_PASSWORD })).id;
    const bobId = (await signUp(s.kv, { email: "bob@example.com", password: OWNER_PASSWORD })).id;
    const [first, second, bobs] = await Promise.all([
      issueManagementKey(s.kv, ownerId, "billing"),
      issueManagementKey(s.kv, ownerId, "reports"),
      issueManagementKey(s.kv, bobId, "bob's"),
    ]);
    const status = async (key: string) => {
      const res = await s.handle(
        new Request(`${PUBLIC_URL}/v1/management/apps`, {
          headers: { authorization: `Bearer ${key}` },
        }),
      );
      await res.body?.cancel();
      return res.status;
    };

    const kept = await admin(kvPath, "reset-password", "--email", "ada@example.com");
    assert.equal(kept.code, 0, kept.stderr);
    assert.equal(kept.json.management_keys_revoked, 0);
    assert.equal(kept.json.management_keys_live, 2);
    assert.equal(await status(first.managementKey), 200);

    const revoked = await admin(
      kvPath,
      "reset-password",
      "--email",
      "ada@example.com",
      "--revoke-management-keys",
      "true",
    );
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal(revoked.json.management_keys_revoked, 2);
    assert.equal(revoked.json.management_keys_live, 0);
    assert.equal(await status(first.managementKey), 401);
    assert.equal(await status(second.managementKey), 401);
    assert.equal(await status(bobs.managementKey), 200, "another owner's key is left alone");

    const bad = await admin(
      kvPath,
      "reset-password",
      "--email",
      "bob@example.com",
      "--revoke-management-keys",
      "yes",
    );
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--revoke-management-keys must be true or false/);
  }));

Deno.test("admin reset-password of an unknown email exits 1 naming it; without --email it is a usage error", () =>
  withFileService(async (s, kvPath) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const unknown = await admin(kvPath, "reset-password", "--email", "nobody@example.com");
    assert.equal(unknown.code, 1);
    assert.equal(unknown.json, null);
    assert.match(unknown.stderr, /^admin: no account with email nobody@example\.com\n$/);
    const missing = await admin(kvPath, "reset-password");
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /--email is required/);
    assert.equal(
      (await new OwnerSession(s).post("/signin", {
        email: "ada@example.com",
        password: OWNER_PASSWORD,
      })).status,
      303,
      "the account's password is unchanged",
    );
  }));
