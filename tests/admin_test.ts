import assert from "node:assert/strict";
import { signUp } from "@/lib/accounts/mod.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { keys, type LedgerEntry, type WalletRecord, type WalletSliceRecord } from "@/lib/db.ts";
import { formatUsd, openKv, parseUsd } from "@/lib/core/mod.ts";
import { ADMIN_COMMANDS } from "@/lib/ops/mod.ts";
import { givesBack, MAX_WALLET_CREDITS, takesBack } from "@/lib/billing/mod.ts";
import { listWebhookEvents, saveWebhookSettings, WebhookWatcher } from "@/lib/webhooks/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import {
  assertAuditClean,
  holdInput,
  PUBLIC_URL,
  startService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import { OWNER_PASSWORD, OwnerSession } from "./owner_session.ts";
import { startFakeOpenAi } from "./fake_openai.ts";
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
  env: Record<string, string> = {},
) {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const s = await startService({ kvPath, env });
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

/**
 * The app's ledger and usage records summed against its wallet: what came in less what was taken
 * back is what the wallet holds, has spent and still owes; and the audit finds nothing wrong.
 */
async function assertLedgerSums(kv: Deno.Kv, appId: string) {
  let credited = 0;
  let takenBack = 0;
  for await (const { value } of kv.list<LedgerEntry>({ prefix: keys.ledger(appId) })) {
    if (takesBack(value.kind)) takenBack += value.amount;
    else if (givesBack(value.kind)) takenBack -= value.amount;
    else credited += value.amount;
  }
  const spent = (await usageRecords(kv, appId)).reduce((n, u) => n + u.cost, 0);
  const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
  assert.ok(wallet.available >= 0, "the wallet is never overdrawn");
  assert.equal(wallet.spent, spent, "what was spent is the sum of the usage records");
  assert.equal(takenBack, (wallet.refunded ?? 0) + (wallet.owed ?? 0));
  assert.equal(
    wallet.available + wallet.reserved + wallet.spent,
    credited - (wallet.refunded ?? 0),
  );
  await assertAuditClean(kv);
  return wallet;
}

const debitArgs = (appId: string, amount: string, reason: string, ...more: string[]) => [
  "debit",
  "--app",
  appId,
  "--amount",
  amount,
  "--reason",
  reason,
  ...more,
];

Deno.test("admin debit takes the amount back as a refund the owner sees with its reason, on the dashboard and in the management API's ledger", () =>
  withFileService(async (s, kvPath) => {
    const owner = new OwnerSession(s);
    await owner.signUp("ada@example.com");
    const { appId } = await owner.createApp("Refunded by hand");
    const reason = "Refund re_3KRW of a Stripe top-up, paid in KRW";
    const debit = await admin(
      kvPath,
      ...debitArgs(appId, "1.25", reason, "--reference", "re_3KRW"),
    );
    assert.equal(debit.code, 0, debit.stderr);
    assert.deepEqual({ ...debit.json, entry_id: undefined }, {
      app_id: appId,
      kind: "refund",
      reference: "re_3KRW",
      debited: "1.250000",
      taken_now: "1.250000",
      owed_of_it: "0.000000",
      balance: "3.750000",
      owed: "0.000000",
      entry_id: undefined,
    });
    const page = await owner.page(`/dashboard/apps/${appId}/wallet`);
    assert.match(page, /Top-up refunded/);
    assert.match(page, /−\$1\.250000/);
    assert.ok(page.includes("Refund re_3KRW of a Stripe top-up, paid in KRW"), "the reason shows");
    const ownerId = (await s.kv.get<{ ownerId: string }>(keys.app(appId))).value!.ownerId;
    const { managementKey } = await issueManagementKey(s.kv, ownerId, "books");
    const ledger = await s.handle(
      new Request(`${PUBLIC_URL}/v1/management/apps/${appId}/ledger`, {
        headers: { authorization: `Bearer ${managementKey}` },
      }),
    );
    const entry = (await ledger.json()).data.find((e: { type: string }) => e.type === "refund");
    assert.equal(entry.id, debit.json.entry_id);
    assert.equal(entry.amount, "-1.250000");
    assert.equal(entry.reason, reason);
    assert.equal(entry.reference, "re_3KRW");
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.refunded, 1_250_000);
  }));

Deno.test("admin debit with a --reference takes it once however often it runs, even at once; without one each run is a new debit", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    const named = debitArgs(appId, "1.00", "Refund settled by hand", "--reference", "re_twice");
    const [a, b] = await Promise.all([admin(kvPath, ...named), admin(kvPath, ...named)]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const runs = [a.json, b.json];
    assert.equal(runs.filter((r) => r.already_taken).length, 1, "one of the two took it");
    const again = await admin(kvPath, ...named);
    assert.equal(again.code, 0);
    assert.equal(again.json.already_taken, true);
    assert.equal(again.json.debited, "1.000000");
    assert.equal(again.json.entry_id, runs.find((r) => !r.already_taken).entry_id);
    assert.equal((await s.wallet(appId)).refunded, 1_000_000);

    const unnamed = debitArgs(appId, "0.50", "Correction");
    for (let i = 0; i < 2; i++) assert.equal((await admin(kvPath, ...unnamed)).code, 0);
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.refunded, 2_000_000, "1.00 once, 0.50 twice");
    assert.equal(wallet.available, 3_000_000);
  }));

Deno.test("admin debit names a Stripe dispute's id a chargeback, and refuses more than the wallet was credited and not yet taken back", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    const dispute = await admin(
      kvPath,
      ...debitArgs(appId, "2.00", "Dispute in EUR", "--reference", "dp_1EUR"),
    );
    assert.equal(dispute.json.kind, "chargeback");
    const tooMuch = await admin(kvPath, ...debitArgs(appId, "3.000001", "typo"));
    assert.equal(tooMuch.code, 1);
    assert.match(tooMuch.stderr, /more than the wallet was credited and not yet taken back/);
    const cases: [string[], RegExp][] = [
      [debitArgs(appId, "0", "r"), /--amount must be positive/],
      [debitArgs(appId, "ten", "r"), /--amount must be a positive USD amount/],
      [debitArgs(appId, "1", " "), /--reason must have 1 to 500/],
      [debitArgs(appId, "1", "r", "--reference", "x".repeat(65)), /--reference is not an id/],
      [["debit", "--app", appId, "--amount", "1"], /--reason is required/],
    ];
    for (const [args, message] of cases) {
      const { code, stderr } = await admin(kvPath, ...args);
      assert.equal(code, 2, stderr);
      assert.match(stderr, message);
    }
    assert.match((await admin(kvPath, ...debitArgs("app_missing", "1", "r"))).stderr, /no app/);
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.refunded, 2_000_000);
  }));

Deno.test("admin debit beyond the balance takes what is there, owes the rest, and the hold in flight pays it as it ends", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    const held = await s.wallets.reserve(appId, holdInput("req_held", 4_000_000));
    assert.ok(held.ok);
    const debit = await admin(kvPath, ...debitArgs(appId, "3.00", "Refund in KRW"));
    assert.equal(debit.code, 0, debit.stderr);
    assert.equal(debit.json.taken_now, "1.000000", "what the balance had beside the hold");
    assert.equal(debit.json.owed_of_it, "2.000000");
    assert.equal(debit.json.owed, "2.000000");
    assert.equal(debit.json.balance, "0.000000");
    await s.wallets.release(appId, held.reservation.id);
    assert.equal((await s.wallet(appId)).owed, 0, "the hold's end paid the debt");
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.available, 2_000_000);
    assert.equal(wallet.refunded, 3_000_000);
  }));

Deno.test("admin debit announces balance.taken_back and balance.low to the app's webhook at once", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/hook",
      lowBalanceThreshold: 1_000_000,
    });
    await new WebhookWatcher(s.kv).observe(appId);
    const debit = await admin(kvPath, ...debitArgs(appId, "4.50", "Refund", "--reference", "re_w"));
    assert.equal(debit.code, 0, debit.stderr);
    const events = await listWebhookEvents(s.kv, appId);
    assert.deepEqual(events.map((e) => e.type).sort(), ["balance.low", "balance.taken_back"]);
    const taken = JSON.parse(events.find((e) => e.type === "balance.taken_back")!.payload).data;
    assert.equal(taken.amount, "4.500000");
    assert.equal(taken.reference, "re_w");
    assert.equal(taken.balance, "0.500000");
    await assertLedgerSums(s.kv, appId);
  }));

Deno.test("admin debit while requests are in flight in the service's slices takes the balance, recalls the slices to pay what is owed before the requests end, and never overdraws", async () => {
  const upstream = startFakeOpenAi();
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const s = await startService({
    kvPath,
    openaiBaseUrl: upstream.url,
    env: { WALLET_SLICES: "on" },
  });
  // The admin command on a KV handle of its own: another process, sharing nothing but KV.
  const adminKv = await openKv(kvPath);
  try {
    const { appId, apiKey } = await s.newApp();
    const inFlight = Array.from({ length: 4 }, async () => {
      const res = await s.chat(apiKey, {
        model: "fake/gpt",
        messages: userMessage("wait:1500 a slow answer"),
        max_tokens: 50,
      });
      await res.body?.cancel();
      return res.status;
    });
    let answered = false;
    Promise.all(inFlight).finally(() => answered = true);
    while (s.wallets.stats.sliceAdmitted < 4) await new Promise((r) => setTimeout(r, 5));
    const [slice] = await Array.fromAsync(
      s.kv.list<WalletSliceRecord>({ prefix: keys.appWalletSlices(appId) }),
    );
    const before = await s.wallet(appId);
    // More than the balance outside the slice, by half of what the slice holds.
    const owed = Math.floor(slice.value.granted / 2);
    assert.ok(before.reserved - slice.value.granted < owed, "the slice holds that much free");
    const amount = before.available + owed;
    const started = Date.now();
    const debit = await runAdmin(
      debitArgs(appId, formatUsd(amount), "Refund in KRW"),
      adminKv,
      PUBLIC_URL,
    );
    const output = debit.output as Record<string, string>;
    assert.equal(output.owed_of_it, formatUsd(owed));
    assert.equal(output.balance, "0.000000");
    let wallet = await s.wallet(appId);
    while ((wallet.owed ?? 0) > 0) {
      assert.ok(Date.now() - started < 30_000, "what is owed is paid");
      await new Promise((r) => setTimeout(r, 10));
      wallet = await s.wallet(appId);
    }
    // Without the recall, only the holds' end and the slice's return would pay it.
    assert.equal(answered, false, "the slice's free money paid the debt while requests ran");
    assert.ok(wallet.reserved > 0, "their holds are still in the slice");
    assert.deepEqual(await Promise.all(inFlight), [200, 200, 200, 200]);
    await s.wallets.drain();
    wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.owed ?? 0, 0);
    assert.equal(wallet.refunded, amount);
  } finally {
    adminKv.close();
    await s.close();
    await upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("admin debits while requests stream through the service's slices never overdraw the wallet, and the ledger sums", () =>
  withFileService(async (s, kvPath) => {
    const { appId, apiKey } = await s.newApp();
    const body = { model: "tollbooth/lorem", messages: userMessage("hi"), stream: true };
    const statuses = new Set<number>();
    let running = true;
    let lowest = Infinity;
    const traffic = Array.from({ length: 8 }, async () => {
      while (running) {
        const res = await s.chat(apiKey, body);
        statuses.add(res.status);
        await res.text();
      }
    });
    const watch = (async () => {
      while (running) {
        lowest = Math.min(lowest, (await s.wallet(appId)).available);
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    try {
      while (s.wallets.stats.sliceAdmitted < 50) await new Promise((r) => setTimeout(r, 5));
      // Two debits at once from two processes, together past the balance outside the slices.
      const half = formatUsd(Math.ceil((await s.wallet(appId)).available / 2) + 10_000);
      const [a, b] = await Promise.all([
        admin(kvPath, ...debitArgs(appId, half, "Refund in KRW", "--reference", "re_a")),
        admin(kvPath, ...debitArgs(appId, half, "Dispute in EUR", "--reference", "dp_b")),
      ]);
      assert.equal(a.code, 0, a.stderr);
      assert.equal(b.code, 0, b.stderr);
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      running = false;
      await Promise.all([...traffic, watch]);
    }
    await s.wallets.drain();
    assert.ok(lowest >= 0, "the wallet never went below zero");
    assert.deepEqual([...statuses].filter((st) => st !== 200 && st !== 402), []);
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.owed ?? 0, 0, "what the slices held came back and paid the debt");
  }, { WALLET_SLICES: "on" }));

Deno.test("admin debits run at once from many processes take back together no more than the wallet was credited", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    // Processes of their own, and calls at once on KV handles of their own: every debit reads the
    // wallet before any commits, so a guard that only read would let each of them pass.
    const handles = await Promise.all(Array.from({ length: 3 }, () => openKv(kvPath)));
    try {
      const runs = await Promise.all([
        ...Array.from(
          { length: 4 },
          (_, i) =>
            admin(kvPath, ...debitArgs(appId, "2.00", `Refund in KRW ${i}`)).then((r) => r.code),
        ),
        ...Array.from({ length: 12 }, (_, i) =>
          runAdmin(
            debitArgs(appId, "2.00", `Dispute in EUR ${i}`, "--reference", `dp_at_once_${i}`),
            handles[i % handles.length],
            PUBLIC_URL,
          ).then((r) => r.exitCode, (error: Error) => {
            assert.match(error.message, /more than the wallet was credited and not yet taken/);
            return 1;
          })),
      ]);
      assert.equal(runs.filter((code) => code === 0).length, 2, "two of 2.00 fit in 5.00");
    } finally {
      for (const kv of handles) kv.close();
    }
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal((wallet.refunded ?? 0) + (wallet.owed ?? 0), 4_000_000);
    assert.equal(wallet.available, 1_000_000);
  }));

Deno.test("admin credit --reversal-of gives back what the debit of that reference took, once, from its own app only, and nothing for a reference never taken", () =>
  withFileService(async (s, kvPath) => {
    const { appId } = await s.newApp();
    const other = await s.newApp();
    const reversal = (app: string, reference: string, ...more: string[]) => [
      "credit",
      "--app",
      app,
      "--reversal-of",
      reference,
      "--reason",
      `The refund ${reference} failed: given back`,
      ...more,
    ];
    const debit = await admin(kvPath, ...debitArgs(appId, "2.50", "Refund", "--reference", "re_x"));
    assert.equal(debit.code, 0, debit.stderr);
    const before = await s.wallet(appId);
    const refusals: [string[], number, RegExp][] = [
      [reversal(appId, "re_never"), 1, /nothing was taken back with the reference re_never/],
      [reversal(other.appId, "re_x"), 1, new RegExp(`taken back from the app ${appId}`)],
      [reversal(appId, "re_x", "--amount", "2.50"), 2, /give no --amount/],
      [["credit", "--app", appId, "--reversal-of", "re_x"], 2, /--reason is required/],
    ];
    for (const [args, code, message] of refusals) {
      const run = await admin(kvPath, ...args);
      assert.equal(run.code, code, run.stderr);
      assert.match(run.stderr, message);
    }
    assert.deepEqual(await s.wallet(appId), before, "a refusal writes nothing");
    const [a, b] = await Promise.all([
      admin(kvPath, ...reversal(appId, "re_x")),
      admin(kvPath, ...reversal(appId, "re_x")),
    ]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const given = [a.json, b.json].find((r) => !r.already_given_back);
    assert.deepEqual({ ...given, entry_id: undefined }, {
      app_id: appId,
      kind: "refund_reversed",
      reference: "re_x",
      debited: "2.500000",
      given_back: "2.500000",
      balance: "5.000000",
      owed: "0.000000",
      entry_id: undefined,
    });
    assert.equal([a.json, b.json].filter((r) => r.already_given_back).length, 1);
    // Taken again under the same reference: the debit was taken once, and stays given back.
    const retaken = await admin(
      kvPath,
      ...debitArgs(appId, "2.50", "again", "--reference", "re_x"),
    );
    assert.equal(retaken.json.already_taken, true);
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.refunded, 0);
    assert.equal(wallet.operatorCredits, 0, "given back as a reversal, not an operator credit");
    assert.equal(wallet.available, 5_000_000);
  }));

Deno.test("admin debit and credit --reversal-of take a Stripe id pasted with spaces around it as that id: taken once, given back once", () =>
  withFileService(async (s) => {
    const { appId } = await s.newApp();
    const run = (...args: string[]) => runAdmin(args, s.kv, PUBLIC_URL);
    const output = async (...args: string[]) =>
      (await run(...args)).output as Record<string, unknown>;
    assert.equal(
      (await output(...debitArgs(appId, "2.00", "r", "--reference", "re_pasted"))).reference,
      "re_pasted",
    );
    const pasted = await output(...debitArgs(appId, "2.00", "r", "--reference", " re_pasted\n"));
    assert.equal(pasted.already_taken, true);
    const reversal = ["credit", "--app", appId, "--reason", "failed", "--reversal-of"];
    assert.equal((await output(...reversal, "re_pasted ")).given_back, "2.000000");
    assert.equal((await output(...reversal, "\tre_pasted")).already_given_back, true);
    await assert.rejects(
      run(...debitArgs(appId, "1.00", "r", "--reference", "re_one re_two")),
      /--reference is not an id \(at most 64 characters, without spaces\)/,
    );
    const wallet = await assertLedgerSums(s.kv, appId);
    assert.equal(wallet.refunded, 0);
    assert.equal(wallet.available, 5_000_000);
  }));
