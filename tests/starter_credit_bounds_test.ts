/**
 * Starter credits are bounded by configuration: apps per owner, app creations per owner per day,
 * accounts per client address per day. Every app that can be created starts with 5.00 USD, and the
 * total granted is on /metrics, read from KV.
 */
import assert from "node:assert/strict";
import { AppLimitError, createApp } from "@/lib/tenants/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { openKv } from "@/lib/core/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { assertAuditClean, PUBLIC_URL, startService, type TestService } from "./helpers.ts";
import { OWNER_PASSWORD, OwnerSession } from "./owner_session.ts";
import { parsePrometheus } from "./prometheus.ts";

const METRICS_TOKEN = "starter-metrics-token";
const DAY_MS = 24 * 60 * 60 * 1000;
/** Accounts are counted per UTC day: a stopped clock keeps a run from straddling midnight. */
const midDay = () => Date.UTC(2026, 6, 29, 12, 7, 30);

async function withService(
  env: Record<string, string>,
  fn: (s: TestService) => Promise<void>,
  now?: () => number,
) {
  const s = await startService({ env: { METRICS_TOKEN, ...env }, now });
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

async function ownerApps(s: TestService, ownerId: string): Promise<WalletRecord[]> {
  const wallets: WalletRecord[] = [];
  for await (const entry of s.kv.list({ prefix: keys.ownerApps(ownerId) })) {
    wallets.push(await s.wallet(String(entry.key[2])));
  }
  return wallets;
}

async function ownerIdOf(s: TestService, email: string): Promise<string> {
  return (await s.kv.get<string>(keys.ownerByEmail(email))).value!;
}

async function metrics(s: TestService) {
  const res = await s.handle(
    new Request(`${PUBLIC_URL}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }),
  );
  assert.equal(res.status, 200);
  return parsePrometheus(await res.text());
}

Deno.test("with the defaults one owner creates 2 apps a day and 3 in all, each with 5.00 USD", () =>
  withService({}, async (s) => {
    const owner = await new OwnerSession(s).signUp("defaults@example.com");
    const ownerId = await ownerIdOf(s, "defaults@example.com");
    const bound = { maxAppsPerOwner: 3, maxAppCreationsPerDay: 2 };
    assert.deepEqual(
      {
        maxAppsPerOwner: s.config.maxAppsPerOwner,
        maxAppCreationsPerDay: s.config.maxAppCreationsPerDay,
      },
      bound,
    );
    const day1 = Date.UTC(2026, 6, 29, 9);
    const make = (now: number) => createApp(s.kv, { name: "app", ownerId, bound }, now);
    await make(day1);
    await make(day1 + 1000);
    await assert.rejects(make(day1 + 2000), (e) => e instanceof AppLimitError && e.perDay);
    await make(day1 + DAY_MS);
    await assert.rejects(make(day1 + DAY_MS + 1), (e) => e instanceof AppLimitError && !e.perDay);
    await assert.rejects(make(day1 + 30 * DAY_MS), (e) => e instanceof AppLimitError && !e.perDay);
    const wallets = await ownerApps(s, ownerId);
    assert.equal(wallets.length, 3);
    for (const wallet of wallets) assert.equal(wallet.available, 5_000_000);
    // The dashboard holds the owner to the same bound.
    const refused = await owner.postNewApp("fourth");
    assert.equal(refused.status, 403);
    assert.match(await refused.text(), /You have 3 apps, the most an account may have/);
  }));

Deno.test("one owner creating apps past the bound one after another gets exactly the bound, each with 5.00 USD", () =>
  withService({ MAX_APPS_PER_OWNER: "3", MAX_APP_CREATIONS_PER_DAY: "5" }, async (s) => {
    const owner = await new OwnerSession(s).signUp("serial@example.com");
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await owner.postNewApp(`app ${i}`);
      statuses.push(res.status);
      const html = await res.text();
      if (res.status !== 303) assert.match(html, /You have 3 apps/);
    }
    assert.deepEqual(statuses, [303, 303, 303, 403, 403, 403]);
    const wallets = await ownerApps(s, await ownerIdOf(s, "serial@example.com"));
    assert.deepEqual(wallets.map((w) => w.available), [5_000_000, 5_000_000, 5_000_000]);
    const scraped = await metrics(s);
    assert.equal(scraped.value("tollbooth_starter_credits_granted_micro_usd_total"), 15_000_000);
    assert.equal(scraped.value("tollbooth_apps_created_total"), 3);
  }));

Deno.test("one owner creating 40 apps at once gets exactly the bound", () =>
  withService({ MAX_APPS_PER_OWNER: "3", MAX_APP_CREATIONS_PER_DAY: "5" }, async (s) => {
    const owner = await new OwnerSession(s).signUp("burst@example.com");
    const csrf = await owner.csrf();
    const statuses = await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const res = await owner.postNewApp(`burst ${i}`, csrf);
        await res.body?.cancel();
        return res.status;
      }),
    );
    assert.equal(statuses.filter((status) => status === 303).length, 3);
    assert.equal(statuses.filter((status) => status === 403).length, 37);
    const ownerId = await ownerIdOf(s, "burst@example.com");
    assert.equal((await ownerApps(s, ownerId)).length, 3);
    assert.equal(
      (await metrics(s)).value("tollbooth_starter_credits_granted_micro_usd_total"),
      15_000_000,
    );
  }));

Deno.test("two processes creating apps for one owner at once do not pass the bound together", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tollbooth-bound-" });
  const s = await startService({ kvPath: `${dir}/kv.sqlite3` });
  // A second handle on the file, as a second instance has (with its retries of a busy file).
  const other = await openKv(`${dir}/kv.sqlite3`);
  try {
    await new OwnerSession(s).signUp("two@example.com");
    const ownerId = await ownerIdOf(s, "two@example.com");
    const bound = { maxAppsPerOwner: 5, maxAppCreationsPerDay: 5 };
    const results = await Promise.allSettled(
      Array.from(
        { length: 60 },
        (_, i) => createApp(i % 2 ? s.kv : other, { name: `p${i}`, ownerId, bound }),
      ),
    );
    assert.equal(results.filter((r) => r.status === "fulfilled").length, 5);
    for (const r of results) {
      if (r.status === "rejected") assert.ok(r.reason instanceof AppLimitError, String(r.reason));
    }
    assert.equal((await ownerApps(s, ownerId)).length, 5);
    await assertAuditClean(s.kv);
  } finally {
    other.close();
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the operator's create-app is exempt from the owner's bound but counted, and granted credits are on /metrics", () =>
  withService({ MAX_APPS_PER_OWNER: "1" }, async (s) => {
    const owner = await new OwnerSession(s).signUp("operated@example.com");
    await owner.createApp("mine");
    assert.equal((await owner.postNewApp("second")).status, 403);
    const created = await runAdmin(
      ["create-app", "--name", "given", "--owner", "operated@example.com"],
      s.kv,
      PUBLIC_URL,
    );
    assert.equal(created.exitCode, 0);
    assert.equal((created.output as { balance: string }).balance, "5.000000");
    const ownerId = await ownerIdOf(s, "operated@example.com");
    assert.equal((await s.kv.get<{ total: number }>(keys.ownerAppCount(ownerId))).value?.total, 2);
    assert.equal((await owner.postNewApp("third")).status, 403);
    const scraped = await metrics(s);
    assert.equal(scraped.types.get("tollbooth_starter_credits_granted_micro_usd_total"), "counter");
    assert.equal(scraped.value("tollbooth_starter_credits_granted_micro_usd_total"), 10_000_000);
  }));

Deno.test("the total of starter credits on /metrics is read from KV: every instance shows the same", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tollbooth-granted-" });
  const env = { METRICS_TOKEN };
  const a = await startService({ kvPath: `${dir}/kv.sqlite3`, env });
  const b = await startService({ kvPath: `${dir}/kv.sqlite3`, env });
  try {
    await a.newApp("on a");
    await b.newApp("on b");
    for (const s of [a, b]) {
      assert.equal(
        (await metrics(s)).value("tollbooth_starter_credits_granted_micro_usd_total"),
        10_000_000,
      );
    }
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** Posts the sign-up form as a new visitor; `forwardedFor` as a proxy in front would add it. */
function signUp(s: TestService, email: string, forwardedFor?: string, password = OWNER_PASSWORD) {
  return new OwnerSession(s, forwardedFor ? { "x-forwarded-for": forwardedFor } : {})
    .post("/signup", { email, password });
}

Deno.test("one address creates 2 accounts a day; a failed sign-up does not use one", () =>
  withService({}, async (s) => {
    assert.equal((await signUp(s, "short@example.com", undefined, "short")).status, 400);
    assert.equal((await signUp(s, "first@example.com")).status, 303);
    assert.equal((await signUp(s, "second@example.com")).status, 303);
    const refused = await signUp(s, "third@example.com");
    assert.equal(refused.status, 429);
    assert.equal(
      Number(refused.headers.get("retry-after")),
      (DAY_MS - midDay() % DAY_MS) / 1000,
      "until the UTC day ends",
    );
    assert.match(await refused.text(), /Too many accounts were created from your network today/);
    assert.equal((await s.kv.get(keys.ownerByEmail("third@example.com"))).value, null);
    // An X-Forwarded-For header is not believed unless the operator trusts one.
    assert.equal((await signUp(s, "spoofed@example.com", "198.51.100.9")).status, 429);
  }, midDay));

Deno.test("behind a trusted proxy, accounts are counted per client address, the right-most untrusted hop", () =>
  withService({ TRUSTED_PROXY_HEADER: "x-forwarded-for" }, async (s) => {
    for (const email of ["a1@example.com", "a2@example.com"]) {
      assert.equal((await signUp(s, email, "203.0.113.5")).status, 303);
    }
    // What a client writes to the left of the proxy's entry changes nothing.
    assert.equal((await signUp(s, "a3@example.com", "10.9.9.9, 203.0.113.5")).status, 429);
    assert.equal((await signUp(s, "b1@example.com", "203.0.113.6")).status, 303);
  }, midDay));

Deno.test("behind a trusted proxy, the addresses of one IPv6 /64 are one client's", () =>
  withService({ TRUSTED_PROXY_HEADER: "x-forwarded-for" }, async (s) => {
    assert.equal((await signUp(s, "v1@example.com", "2001:db8:7:1::1")).status, 303);
    assert.equal((await signUp(s, "v2@example.com", "2001:db8:7:1::2")).status, 303);
    assert.equal((await signUp(s, "v3@example.com", "2001:db8:7:1:abcd::9")).status, 429);
    assert.equal((await signUp(s, "w1@example.com", "2001:db8:7:2::1")).status, 303);
  }, midDay));
