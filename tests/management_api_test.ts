import assert from "node:assert/strict";
import { getSpendCaps, rotateKey, Wallets } from "@/lib/billing/mod.ts";
import {
  issueManagementKey,
  listManagementKeys,
  MAX_MANAGEMENT_KEYS,
  revokeManagementKey,
  TooManyManagementKeysError,
  usageReport,
} from "@/lib/management/mod.ts";
import {
  countLiveKeys,
  createApp as createAppRecord,
  issueKey,
  KeyLimitError,
} from "@/lib/tenants/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { assertMatchesOpenApi } from "./openapi_check.ts";
import { PUBLIC_URL, startService, type TestService, userMessage, withService } from "./helpers.ts";

const ECHO = "tollbooth/echo";

/** Calls the management API and holds the answer to the documented operation. */
async function call(
  s: TestService,
  key: string | null,
  method: "GET" | "POST",
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...options.headers };
  if (key) headers.authorization = `Bearer ${key}`;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await s.handle(
    new Request(`${PUBLIC_URL}/v1/management${path}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    }),
  );
  const template = "/management" + path.split("?")[0]
    .replace(/\/apps\/[^/]+/, "/apps/{app_id}")
    .replace(/\/keys\/[^/]+\/(revoke|spend_cap)$/, "/keys/{key_id}/$1");
  await assertMatchesOpenApi(res, template, method.toLowerCase());
  return { status: res.status, headers: res.headers, body: await res.json() };
}

async function owner(s: TestService, ownerId = "own_test") {
  const { managementKey } = await issueManagementKey(s.kv, ownerId, "tests");
  const apps = [];
  const createdAt = Date.now();
  for (const [i, name] of ["first", "second"].entries()) {
    // A millisecond apart, so "newest first" is one order.
    const created = await createAppRecord(
      s.kv,
      { name, ownerId, bound: "operator" },
      createdAt + i,
    );
    apps.push({ appId: created.app.id, apiKey: created.key.apiKey, keyId: created.key.record.id });
  }
  return { ownerId, managementKey, apps };
}

const chat = (s: TestService, apiKey: string, content = "hello there") =>
  s.chat(apiKey, { model: ECHO, messages: userMessage(content), max_tokens: 16 });

Deno.test("management API: no key, an app's API key or a revoked management key is 401 invalid_management_key", () =>
  withService(async (s) => {
    const o = await owner(s);
    for (const key of [null, o.apps[0].apiKey, "tbm_" + "0".repeat(40)]) {
      const res = await call(s, key, "GET", "/apps");
      assert.equal(res.status, 401);
      assert.equal(res.body.error.code, "invalid_management_key");
      assert.equal(res.body.error.type, "authentication_error");
    }
    const { record, managementKey } = await issueManagementKey(s.kv, o.ownerId, "short-lived");
    assert.equal((await call(s, managementKey, "GET", "/apps")).status, 200);
    await revokeManagementKey(s.kv, o.ownerId, record.id);
    assert.equal((await call(s, managementKey, "GET", "/apps")).status, 401);
  }));

Deno.test("management API lists the owner's apps, newest first, with balance and reserved", () =>
  withService(async (s) => {
    const o = await owner(s);
    await createAppRecord(s.kv, {
      name: "someone else's",
      ownerId: "own_other",
      bound: "operator",
    });
    await chat(s, o.apps[0].apiKey);
    const res = await call(s, o.managementKey, "GET", "/apps");
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.data.map((a: { name: string }) => a.name), ["second", "first"]);
    assert.equal(res.body.has_more, false);
    const first = res.body.data[1];
    const wallet = await s.wallet(o.apps[0].appId);
    assert.equal(first.balance, (wallet.available / 1e6).toFixed(6));
    assert.equal(first.reserved, "0.000000");
    assert.equal(first.credited, "5.000000");
    assert.equal(first.uncharged, "0.000000");

    const one = await call(s, o.managementKey, "GET", `/apps/${o.apps[0].appId}`);
    assert.deepEqual(one.body, first);

    const paged = await call(s, o.managementKey, "GET", "/apps?limit=1");
    assert.equal(paged.body.data.length, 1);
    assert.equal(paged.body.has_more, true);
    const rest = await call(
      s,
      o.managementKey,
      "GET",
      `/apps?limit=1&starting_after=${paged.body.next_cursor}`,
    );
    assert.equal(rest.body.data[0].name, "first");
    assert.equal(rest.body.has_more, false);
    assert.equal(rest.body.next_cursor, null);
  }));

Deno.test("management API: another owner's app is 404 resource_not_found, like no app", () =>
  withService(async (s) => {
    const o = await owner(s);
    const other = await createAppRecord(s.kv, {
      name: "theirs",
      ownerId: "own_other",
      bound: "operator",
    });
    for (const id of [other.app.id, "app_nope"]) {
      const res = await call(s, o.managementKey, "GET", `/apps/${id}/usage`);
      assert.equal(res.status, 404);
      assert.equal(res.body.error.code, "resource_not_found");
      assert.equal(res.body.error.param, "app_id");
    }
  }));

Deno.test("management API creates, lists and revokes API keys; a created key works at once, a revoked one fails", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const created = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "reseller backend" },
    });
    assert.equal(created.status, 201);
    assert.match(created.body.api_key, /^tb_[0-9a-z]{36}$/);
    assert.equal(created.body.name, "reseller backend");
    assert.equal((await chat(s, created.body.api_key)).status, 200);

    const listed = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    assert.deepEqual(
      listed.body.data.map((k: { id: string }) => k.id).sort(),
      [
        app.keyId,
        created.body.id,
      ].sort(),
    );
    assert.ok(listed.body.data.every((k: Record<string, unknown>) => !("api_key" in k)));

    const revoked = await call(
      s,
      o.managementKey,
      "POST",
      `/apps/${app.appId}/keys/${created.body.id}/revoke`,
    );
    assert.equal(revoked.status, 200);
    assert.equal(typeof revoked.body.revoked, "number");
    assert.equal((await chat(s, created.body.api_key)).status, 401);

    const bad = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "" },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "name");
    const unknown = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys/key_x/revoke`);
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.param, "key_id");
  }));

Deno.test("management API: a key name with a lone surrogate is 400 with param name, and no key is made", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const bad = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "reseller \ud800" },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "name");
    assert.match(bad.body.error.message, /lone surrogate/);
    const listed = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    assert.deepEqual(listed.body.data.map((k: { id: string }) => k.id), [app.keyId]);
  }));

Deno.test("management API: an unknown field inside spend_cap is named by its path, spend_cap.foo", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const bad = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "capped", spend_cap: { foo: "1.00" } },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "spend_cap.foo");
    assert.equal(bad.body.error.message, "Unknown field 'spend_cap.foo'.");
  }));

Deno.test("management API: a repeated key creation with an Idempotency-Key makes one key, and the replay never shows the secret", () =>
  withService(async (s) => {
    const o = await owner(s);
    const path = `/apps/${o.apps[0].appId}/keys`;
    const headers = { "idempotency-key": "create-once" };
    const first = await call(s, o.managementKey, "POST", path, { body: { name: "k" }, headers });
    const again = await call(s, o.managementKey, "POST", path, { body: { name: "k" }, headers });
    assert.equal(first.status, 201);
    assert.equal(again.status, 201);
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal(again.body.id, first.body.id);
    assert.equal(again.body.api_key, null);
    const listed = await call(s, o.managementKey, "GET", path);
    assert.equal(listed.body.data.length, 2);
    const other = await call(s, o.managementKey, "POST", path, { body: { name: "j" }, headers });
    assert.equal(other.status, 422);
    assert.equal(other.body.error.code, "idempotency_key_reused");
  }));

Deno.test("usage pages walked to the end while requests keep landing: no record twice, none missing", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    for (let i = 0; i < 23; i++) {
      assert.equal((await chat(s, app.apiKey, `before ${i}`)).status, 200);
    }
    const before = (await Array.fromAsync(s.kv.list({ prefix: ["usage", app.appId] })))
      .map((e) => String(e.key[2]));

    let landing = true;
    const writer = (async () => {
      let n = 0;
      while (landing) await chat(s, app.apiKey, `during ${n++}`);
      return n;
    })();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = cursor ? `&starting_after=${cursor}` : "";
      const page = await call(
        s,
        o.managementKey,
        "GET",
        `/apps/${app.appId}/usage?limit=4${query}`,
      );
      assert.equal(page.status, 200);
      seen.push(...page.body.data.map((u: { id: string }) => u.id));
      cursor = page.body.has_more ? page.body.next_cursor : null;
      pages++;
      // Let requests land between pages.
      await new Promise((r) => setTimeout(r, 5));
    } while (cursor);
    landing = false;
    const landed = await writer;

    assert.equal(new Set(seen).size, seen.length, "no record twice");
    for (const id of before) assert.ok(seen.includes(id), `${id} listed`);
    assert.ok(pages >= 6);
    assert.ok(landed > 0, "requests landed during the walk");
  }));

Deno.test("usage report groups by day, model, key and end user, and filters by end user", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    await chat(s, app.apiKey, "no user here");
    // Settled usage attributed to end users, as the gateway records a request's `user`.
    const wallets = new Wallets(s.kv, { leaseMs: 60_000 });
    for (const [user, cost] of [["alice", 100], ["bob", 200], ["alice", 300]] as const) {
      const hold = await wallets.reserve(app.appId, {
        amount: 1000,
        keyId: app.keyId,
        requestId: `req_${user}`,
        model: "tollbooth/lorem",
      });
      assert.ok(hold.ok);
      await wallets.settle(app.appId, hold.reservation.id, {
        requestId: `req_${user}`,
        keyId: app.keyId,
        model: "tollbooth/lorem",
        provider: "tollbooth",
        promptTokens: 10,
        completionTokens: 5,
        cost,
        streamed: false,
        outcome: "completed",
        countedLocally: false,
        user,
      });
    }
    await wallets.drain();
    const report = (groupBy: string, extra = "") =>
      call(
        s,
        o.managementKey,
        "GET",
        `/apps/${app.appId}/usage/report?group_by=${groupBy}${extra}`,
      );

    const byUser = await report("user");
    assert.equal(byUser.status, 200);
    assert.deepEqual(
      byUser.body.data.map((
        r: { group: string | null; requests: number },
      ) => [r.group, r.requests]),
      [[null, 1], ["alice", 2], ["bob", 1]],
    );
    assert.equal(byUser.body.data[1].cost, "0.000400");

    const byModel = await report("model");
    assert.deepEqual(byModel.body.data.map((r: { group: string }) => r.group), [
      ECHO,
      "tollbooth/lorem",
    ]);
    const byKey = await report("key");
    assert.deepEqual(byKey.body.data.map((r: { group: string }) => r.group), [app.keyId]);
    const byDay = await report("day");
    assert.equal(byDay.body.data.length, 1);
    assert.equal(byDay.body.data[0].requests, 4);

    const alice = await report("model", "&user=alice");
    assert.deepEqual(alice.body.data.map((r: { requests: number }) => r.requests), [2]);
    const aliceRecords = await call(
      s,
      o.managementKey,
      "GET",
      `/apps/${app.appId}/usage?user=alice`,
    );
    assert.equal(aliceRecords.body.data.length, 2);
    assert.ok(aliceRecords.body.data.every((u: { user: string }) => u.user === "alice"));

    const firstPage = await report("user", "&limit=2");
    assert.equal(firstPage.body.has_more, true);
    const secondPage = await report(
      "user",
      `&limit=2&starting_after=${firstPage.body.next_cursor}`,
    );
    assert.deepEqual(secondPage.body.data.map((r: { group: string }) => r.group), ["bob"]);
    assert.equal(secondPage.body.has_more, false);

    const bad = await report("colour");
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "group_by");
  }));

Deno.test("the ledger shows refunds and chargebacks negative and a won dispute's reversal positive; the app shows refunded and owed", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    await s.wallets.credit(app.appId, { amount: 2_000_000, kind: "top_up", reason: "Top-up" });
    const refund = { kind: "refund", reason: "Refund", reference: "pi_1" } as const;
    await s.wallets.debit(app.appId, { ...refund, amount: 500_000, marker: "r1" });
    const dispute = { reason: "Dispute", reference: "dp_1" };
    await s.wallets.debit(app.appId, {
      ...dispute,
      kind: "chargeback",
      amount: 1_500_000,
      marker: "d1",
    });
    await s.wallets.reverseDebit(app.appId, {
      ...dispute,
      kind: "chargeback_reversed",
      amount: 1_500_000,
      marker: "d1_won",
    });
    const page = await call(s, o.managementKey, "GET", `/apps/${app.appId}/ledger?limit=10`);
    assert.equal(page.status, 200);
    const amounts = Object.fromEntries(
      page.body.data.map((e: { type: string; amount: string }) => [e.type, e.amount]),
    );
    assert.deepEqual(amounts, {
      starter: "5.000000",
      top_up: "2.000000",
      refund: "-0.500000",
      chargeback: "-1.500000",
      chargeback_reversed: "1.500000",
    });
    const total = Object.values(amounts).reduce((n, a) => n + Math.round(Number(a) * 1e6), 0);
    assert.equal(total, (await s.wallet(app.appId)).available);
    const shown = await call(s, o.managementKey, "GET", `/apps/${app.appId}`);
    assert.equal(shown.body.refunded, "0.500000");
    assert.equal(shown.body.owed, "0.000000");
    assert.equal(shown.body.balance, "6.500000");
  }));

Deno.test("the ledger lists credits and charges newest first, across pages", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    await s.wallets.credit(app.appId, { amount: 2_000_000, kind: "top_up", reason: "Top-up" });
    for (let i = 0; i < 3; i++) await chat(s, app.apiKey, `charge ${i}`);
    const entries: { type: string; amount: string; id: string }[] = [];
    let cursor: string | null = null;
    do {
      const query: string = cursor ? `&starting_after=${cursor}` : "";
      const page = await call(
        s,
        o.managementKey,
        "GET",
        `/apps/${app.appId}/ledger?limit=2${query}`,
      );
      assert.equal(page.status, 200);
      entries.push(...page.body.data);
      cursor = page.body.has_more ? page.body.next_cursor : null;
    } while (cursor);
    // Entries of the same millisecond have no order between them; across milliseconds, newest first.
    assert.deepEqual(entries.map((e) => e.type).sort(), [
      "charge",
      "charge",
      "charge",
      "starter",
      "top_up",
    ]);
    const times = entries.map((e) => e.id.slice(4, 14));
    assert.deepEqual(times, [...times].sort().reverse());
    assert.equal(new Set(entries.map((e) => e.id)).size, 5);
    assert.equal(entries.find((e) => e.type === "top_up")!.amount, "2.000000");
    assert.match(entries.find((e) => e.type === "charge")!.amount, /^-0\.\d{6}$/);
    const wallet = await s.wallet(app.appId);
    const total = entries.reduce((sum, e) => sum + Math.round(Number(e.amount) * 1e6), 0);
    assert.equal(total, wallet.available);
  }));

Deno.test("management API: a starting_after that is no cursor of the list is 400 invalid_parameter, on every paged list", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    await chat(s, app.apiKey);
    const usage = await call(s, o.managementKey, "GET", `/apps/${app.appId}/usage`);
    const usageId = usage.body.data[0].id;
    const other = await call(s, o.managementKey, "GET", `/apps/${o.apps[1].appId}/usage`);
    assert.deepEqual(other.body.data, []);
    for (
      const path of [
        `/apps/${app.appId}/usage?starting_after=zzz`,
        `/apps/${app.appId}/usage?user=alice&starting_after=zzz`,
        // A real record of another app's list is no cursor of this one.
        `/apps/${o.apps[1].appId}/usage?starting_after=${usageId}`,
        `/apps/${app.appId}/ledger?starting_after=zzz`,
        `/apps/${o.apps[1].appId}/ledger?starting_after=${usageId}`,
        `/apps?starting_after=zzz`,
        `/apps/${app.appId}/usage/report?group_by=model&starting_after=zzz`,
      ]
    ) {
      const res = await call(s, o.managementKey, "GET", path);
      assert.equal(res.status, 400, path);
      assert.equal(res.body.error.code, "invalid_parameter", path);
      assert.equal(res.body.error.param, "starting_after", path);
    }
    // The cursors a page hands out are accepted, of either kind on the ledger.
    const ledger = await call(s, o.managementKey, "GET", `/apps/${app.appId}/ledger`);
    assert.deepEqual(ledger.body.data.map((e: { type: string }) => e.type), ["charge", "starter"]);
    for (const entry of ledger.body.data) {
      const after = await call(
        s,
        o.managementKey,
        "GET",
        `/apps/${app.appId}/ledger?starting_after=${entry.id}`,
      );
      assert.equal(after.status, 200);
    }
    const afterUsage = await call(
      s,
      o.managementKey,
      "GET",
      `/apps/${app.appId}/usage?starting_after=${usageId}`,
    );
    assert.equal(afterUsage.status, 200);
    assert.deepEqual(afterUsage.body.data, []);
  }));

Deno.test("management API: the keys list pages newest first, live and revoked, every key once", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const made: string[] = [];
    for (const name of ["second", "third", "fourth"]) {
      const key = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
        body: { name },
      });
      made.push(key.body.id);
    }
    await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys/${made[0]}/revoke`);
    const seen: { id: string; revoked_at: number | null }[] = [];
    let cursor: string | null = null;
    do {
      const after: string = cursor ? `&starting_after=${cursor}` : "";
      const page = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys?limit=2${after}`);
      assert.equal(page.status, 200);
      assert.ok(page.body.data.length <= 2);
      seen.push(...page.body.data);
      cursor = page.body.has_more ? page.body.next_cursor : null;
    } while (cursor);
    assert.equal(seen.length, 4, "the app's first key and the three made here");
    assert.deepEqual(seen.slice(0, 3).map((k) => k.id), [...made].reverse());
    assert.notEqual(seen.find((k) => k.id === made[0])?.revoked_at, null);
    const unknown = await call(
      s,
      o.managementKey,
      "GET",
      `/apps/${app.appId}/keys?starting_after=key_nope`,
    );
    assert.equal(unknown.status, 400);
    assert.equal(unknown.body.error.param, "starting_after");
  }));

Deno.test("management API: a bad limit is 400 invalid_parameter naming it", () =>
  withService(async (s) => {
    const o = await owner(s);
    for (const limit of ["0", "101", "x", "1e1", "0x10", "%205", "2.0", ""]) {
      const res = await call(s, o.managementKey, "GET", `/apps?limit=${limit}`);
      assert.equal(res.status, 400);
      assert.equal(res.body.error.code, "invalid_parameter");
      assert.equal(res.body.error.param, "limit");
    }
  }));

Deno.test("the chat request's user field is recorded on its usage record and reported per end user", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    for (const user of ["customer-7", "customer-7", "customer-9", undefined]) {
      const res = await s.chat(app.apiKey, {
        model: ECHO,
        messages: userMessage("hi"),
        max_tokens: 8,
        ...(user ? { user } : {}),
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    const records = await call(s, o.managementKey, "GET", `/apps/${app.appId}/usage`);
    assert.deepEqual(
      records.body.data.map((u: { user: string | null }) => u.user).sort(),
      ["customer-7", "customer-7", "customer-9", null].sort(),
    );
    const report = await call(
      s,
      o.managementKey,
      "GET",
      `/apps/${app.appId}/usage/report?group_by=user`,
    );
    assert.deepEqual(
      report.body.data.map((
        r: { group: string | null; requests: number },
      ) => [r.group, r.requests]),
      [[null, 1], ["customer-7", 2], ["customer-9", 1]],
    );
  }));

Deno.test("usage report: the next_cursor after an end user of the longest name pages on, as every report cursor", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    // `user` takes up to 256 characters; its group's cursor is longer than a record id.
    const users = ["a".repeat(256), "b".repeat(256), "c"];
    for (const user of users) {
      const res = await s.chat(app.apiKey, {
        model: ECHO,
        messages: userMessage("hi"),
        max_tokens: 8,
        user,
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    const walked: string[] = [];
    let cursor: string | null = null;
    do {
      const after: string = cursor === null ? "" : `&starting_after=${encodeURIComponent(cursor)}`;
      const page = await call(
        s,
        o.managementKey,
        "GET",
        `/apps/${app.appId}/usage/report?group_by=user&limit=1${after}`,
      );
      assert.equal(page.status, 200, JSON.stringify(page.body));
      walked.push(...page.body.data.map((r: { group: string }) => r.group));
      cursor = page.body.next_cursor;
    } while (cursor !== null);
    assert.deepEqual(walked, users);
  }));

Deno.test("management API sets a key's spend cap at creation and later, and an end-user cap; requests over them get 402", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const created = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "capped", spend_cap: { daily: "0.000001" } },
    });
    assert.equal(created.status, 201);
    assert.deepEqual(created.body.spend_cap, { total: null, daily: "0.000001", monthly: null });
    const refused = await chat(s, created.body.api_key);
    assert.equal(refused.status, 402);
    const error = (await refused.json()).error;
    assert.equal(error.code, "key_spend_cap_exceeded");
    assert.equal(error.cap, "daily");

    const raised = await call(
      s,
      o.managementKey,
      "POST",
      `/apps/${app.appId}/keys/${created.body.id}/spend_cap`,
      { body: { total: "1.50" } },
    );
    assert.equal(raised.status, 200);
    assert.deepEqual(raised.body.spend_cap, { total: "1.500000", daily: null, monthly: null });
    assert.equal((await chat(s, created.body.api_key)).status, 200);
    const listed = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    const row = listed.body.data.find((k: { id: string }) => k.id === created.body.id);
    assert.equal(row.spend_cap.total, "1.500000");

    const bad = await call(
      s,
      o.managementKey,
      "POST",
      `/apps/${app.appId}/keys/${created.body.id}/spend_cap`,
      { body: { weekly: "1.00" } },
    );
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, "weekly");

    const endUser = await call(
      s,
      o.managementKey,
      "POST",
      `/apps/${app.appId}/end_user_spend_cap`,
      {
        body: { monthly: "0.000001" },
      },
    );
    assert.equal(endUser.status, 200);
    assert.equal(endUser.body.spend_cap.monthly, "0.000001");
    const read = await call(s, o.managementKey, "GET", `/apps/${app.appId}/end_user_spend_cap`);
    assert.deepEqual(read.body, endUser.body);
    const userRefused = await s.chat(app.apiKey, {
      model: ECHO,
      messages: userMessage("hi"),
      user: "someone",
    });
    assert.equal(userRefused.status, 402);
    assert.equal((await userRefused.json()).error.code, "user_spend_cap_exceeded");
  }));

Deno.test("management API: spend caps set on 30 keys of one app at once are all stored, none is a 500", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const keyIds = [];
    for (let i = 0; i < 30; i++) {
      keyIds.push((await issueKey(s.kv, app.appId, `customer ${i}`, "operator")).record.id);
    }
    // Every write of one app's caps rewrites its one record: all but one of those at once conflict.
    const answers = await Promise.all(
      keyIds.map((keyId) =>
        call(s, o.managementKey, "POST", `/apps/${app.appId}/keys/${keyId}/spend_cap`, {
          body: { daily: "1.00" },
        })
      ),
    );
    assert.deepEqual(answers.map((a) => a.status), keyIds.map(() => 200));
    const caps = await getSpendCaps(s.kv, app.appId);
    assert.deepEqual(Object.keys(caps.keys).sort(), [...keyIds].sort());
  }));

Deno.test("management API: a body over 16 KiB is refused before it is read, and nothing is made", () =>
  withService(async (s) => {
    const o = await owner(s);
    const path = `/apps/${o.apps[0].appId}/keys`;
    const res = await call(s, o.managementKey, "POST", path, {
      body: { name: "x".repeat(20_000) },
    });
    assert.equal(res.status, 400);
    assert.equal(res.body.error.code, "request_too_large");
    assert.equal((await call(s, o.managementKey, "GET", path)).body.data.length, 1);
  }));

Deno.test("management API: a revoked key's spend cap cannot be set, as on the dashboard", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const path = `/apps/${app.appId}/keys/${app.keyId}`;
    assert.equal((await call(s, o.managementKey, "POST", `${path}/revoke`)).status, 200);
    const res = await call(s, o.managementKey, "POST", `${path}/spend_cap`, {
      body: { total: "1.00" },
    });
    assert.equal(res.status, 404);
    assert.equal(res.body.error.code, "resource_not_found");
    assert.equal(res.body.error.param, "key_id");
    const listed = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    assert.equal(listed.body.data[0].spend_cap, null);
  }));

Deno.test("management API: one Idempotency-Key on two keys' revoke gets 422 for the second, which stays live", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const second = await call(s, o.managementKey, "POST", `/apps/${app.appId}/keys`, {
      body: { name: "second" },
    });
    const headers = { "idempotency-key": "revoke-once" };
    const revoke = (keyId: string) =>
      call(s, o.managementKey, "POST", `/apps/${app.appId}/keys/${keyId}/revoke`, {
        body: {},
        headers,
      });
    assert.equal((await revoke(app.keyId)).status, 200);
    const other = await revoke(second.body.id);
    assert.equal(other.status, 422);
    assert.equal(other.body.error.code, "idempotency_key_reused");
    assert.equal(other.headers.get("idempotent-replayed"), null);
    assert.equal((await chat(s, second.body.api_key)).status, 200, "the second key is live");
  }));

Deno.test("management API: a revoke with no body works with and without an Idempotency-Key, and its retry replays", () =>
  withService(async (s) => {
    const o = await owner(s);
    const [first, second] = o.apps;
    const bare = await call(
      s,
      o.managementKey,
      "POST",
      `/apps/${first.appId}/keys/${first.keyId}/revoke`,
    );
    assert.equal(bare.status, 200);
    const path = `/apps/${second.appId}/keys/${second.keyId}/revoke`;
    const headers = { "idempotency-key": "revoke-no-body" };
    const keyed = await call(s, o.managementKey, "POST", path, { headers });
    assert.equal(keyed.status, 200);
    assert.equal(typeof keyed.body.revoked, "number");
    // A retry that now sends `{}` is the same request: the body of a body-less route is not read.
    const retry = await call(s, o.managementKey, "POST", path, { headers, body: {} });
    assert.equal(retry.status, 200);
    assert.equal(retry.headers.get("idempotent-replayed"), "true");
    assert.deepEqual(retry.body, keyed.body);
  }));

Deno.test("30 management keys issued at once for one owner: 20 live ones are made, never more", () =>
  withService(async (s) => {
    const results = await Promise.allSettled(
      Array.from({ length: 30 }, (_, i) => issueManagementKey(s.kv, "own_burst", `k${i}`)),
    );
    const made = results.filter((r) => r.status === "fulfilled").length;
    assert.equal(made, MAX_MANAGEMENT_KEYS);
    for (const r of results) {
      if (r.status === "rejected") assert.ok(r.reason instanceof TooManyManagementKeysError);
    }
    const live = (await listManagementKeys(s.kv, "own_burst")).keys.filter((k) =>
      k.revokedAt === null
    );
    assert.equal(live.length, MAX_MANAGEMENT_KEYS);
  }));

Deno.test("management API: 40 keys asked for at once of an app with room for 9 make 9, the rest are 403 api_key_limit_reached", () =>
  withService(async (s) => {
    const o = await owner(s);
    const { appId } = o.apps[0];
    const path = `/apps/${appId}/keys`;
    const answers = await Promise.all(
      Array.from(
        { length: 40 },
        (_, i) => call(s, o.managementKey, "POST", path, { body: { name: `customer ${i}` } }),
      ),
    );
    assert.equal(answers.filter((a) => a.status === 201).length, 9);
    for (const refused of answers.filter((a) => a.status !== 201)) {
      assert.equal(refused.status, 403);
      assert.equal(refused.body.error.code, "api_key_limit_reached");
      assert.equal(refused.body.error.type, "invalid_request_error");
      assert.match(refused.body.error.message, /This app has 10 live API keys/);
      assert.equal(refused.body.error.doc_url, `${PUBLIC_URL}/docs/errors#api_key_limit_reached`);
    }
    assert.equal(await countLiveKeys(s.kv, appId), 10);
    // The bound is the app's: the owner's other app still has room.
    const other = await call(s, o.managementKey, "POST", `/apps/${o.apps[1].appId}/keys`, {
      body: { name: "elsewhere" },
    });
    assert.equal(other.status, 201);
    // Revoking one makes room for exactly one.
    const revoked = answers.find((a) => a.status === 201)!.body.id;
    await call(s, o.managementKey, "POST", `/apps/${appId}/keys/${revoked}/revoke`);
    const again = await Promise.all(
      [1, 2].map((i) => call(s, o.managementKey, "POST", path, { body: { name: `again ${i}` } })),
    );
    assert.deepEqual(again.map((a) => a.status).sort(), [201, 403]);
    assert.equal(await countLiveKeys(s.kv, appId), 10);
  }, { env: { MAX_LIVE_KEYS_PER_APP: "10" } }));

Deno.test("rotations at an app's bound of live keys are never refused, and creations beside them still cannot pass it", () =>
  withService(async (s) => {
    const { appId, keyId } = await s.newApp();
    const bound = { maxLiveKeys: 10 };
    const made = [keyId];
    for (let i = 0; i < 8; i++) made.push((await issueKey(s.kv, appId, `k${i}`, bound)).record.id);
    // One place left: five rotations race twenty creations for it.
    const results = await Promise.allSettled([
      ...made.slice(0, 5).map((id) => rotateKey(s.kv, id)),
      ...Array.from({ length: 20 }, (_, i) => issueKey(s.kv, appId, `late ${i}`, bound)),
    ]);
    assert.ok(results.slice(0, 5).every((r) => r.status === "fulfilled"), "every rotation");
    const created = results.slice(5).filter((r) => r.status === "fulfilled");
    assert.equal(created.length, 1);
    for (const r of results.slice(5)) {
      if (r.status === "rejected") assert.ok(r.reason instanceof KeyLimitError);
    }
    assert.equal(await countLiveKeys(s.kv, appId), 10);
    // At the bound a rotation still replaces a key; a creation is refused.
    const { issued } = await rotateKey(s.kv, made[6]);
    assert.equal(issued.record.appId, appId);
    await assert.rejects(issueKey(s.kv, appId, "one more", bound), KeyLimitError);
    assert.equal(await countLiveKeys(s.kv, appId), 10);
    // The operator is not held to the bound.
    const { exitCode } = await runAdmin(["create-key", "--app", appId], s.kv, PUBLIC_URL);
    assert.equal(exitCode, 0);
    assert.equal(await countLiveKeys(s.kv, appId), 11);
  }));

Deno.test("management API: an over-long app or key id is 404 resource_not_found naming it, not a 500", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    // Over the path bound (answered before any route), and under it but longer than any id.
    for (const long of ["a".repeat(5000), "a".repeat(400)]) {
      for (
        const [method, path, param] of [
          ["GET", `/apps/${long}`, "app_id"],
          ["GET", `/apps/${long}/usage`, "app_id"],
          ["POST", `/apps/${app.appId}/keys/${long}/revoke`, "key_id"],
        ] as const
      ) {
        const res = await call(s, o.managementKey, method, path);
        assert.equal(res.status, 404, path.slice(0, 40));
        assert.equal(res.body.error.code, "resource_not_found");
        assert.equal(res.body.error.param, param);
        assert.ok(res.body.error.doc_url.endsWith("#resource_not_found"));
      }
    }
    const keys = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    assert.ok(keys.body.data.every((k: { revoked: number | null }) => k.revoked === null));
  }));

Deno.test("management API: a Tollbooth-Version other than the current one is 400 unsupported_version, as on the rest of /v1", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    for (const version of ["2020-01-01", "latest"]) {
      const headers = { "tollbooth-version": version };
      for (
        const [method, path] of [
          ["GET", "/apps"],
          ["GET", `/apps/${app.appId}/usage/report?group_by=day`],
          ["POST", `/apps/${app.appId}/keys/${app.keyId}/revoke`],
        ] as const
      ) {
        const res = await call(s, o.managementKey, method, path, { headers });
        assert.equal(res.status, 400, path);
        assert.equal(res.body.error.code, "unsupported_version");
      }
    }
    const current = await call(s, o.managementKey, "GET", "/apps", {
      headers: { "tollbooth-version": "2026-07-29" },
    });
    assert.equal(current.status, 200);
    const before = await call(s, o.managementKey, "GET", `/apps/${app.appId}/keys`);
    assert.equal(before.body.data[0].revoked, null, "the refused revoke changed nothing");
  }));

Deno.test("usage report: a day outside 2000-01-01..9999-12-31, or from after to, is 400 invalid_parameter naming it", () =>
  withService(async (s) => {
    const o = await owner(s);
    const app = o.apps[0];
    const report = (query: string) =>
      call(s, o.managementKey, "GET", `/apps/${app.appId}/usage/report?group_by=day&${query}`);
    for (
      const [query, param] of [
        ["from=0999-12-30&to=1000-01-02", "from"],
        ["to=0000-01-01", "to"],
        ["from=1999-12-31&to=2000-01-02", "from"],
        ["from=1969-12-31", "from"],
        ["from=2026-03-02&to=2026-03-01", "from"],
        ["from=2026-02-30", "from"],
        // Days that do not exist, in a range that would otherwise be accepted: Date.parse rolls
        // them over into the next month.
        ["from=2026-02-31&to=2026-03-05", "from"],
        ["from=2026-02-30&to=2026-03-01", "from"],
        ["from=2026-02-01&to=2026-02-29", "to"],
        ["from=2026-04-01&to=2026-04-31", "to"],
        ["from=2026-13-01&to=2026-12-31", "from"],
        ["from=2026-00-10&to=2026-01-10", "from"],
      ]
    ) {
      const res = await report(query);
      assert.equal(res.status, 400, query);
      assert.equal(res.body.error.code, "invalid_parameter", query);
      assert.equal(res.body.error.param, param, query);
      assert.match(res.body.error.message, new RegExp(`'${param}'`), query);
    }
    const leap = await report("from=2024-02-29&to=2024-03-01");
    assert.equal(leap.status, 200);
    assert.equal(leap.body.from, "2024-02-29");
    const bounds = await report("from=2000-01-01&to=2000-01-02");
    assert.equal(bounds.status, 200);
    assert.deepEqual(bounds.body.data, []);
    const last = await report("from=9999-12-01&to=9999-12-31");
    assert.equal(last.status, 200);
    // The listing itself reads no range that ends before it begins, whoever calls it.
    for (const [from, to] of [["2026-03-02", "2026-03-01"], ["0999-12-30", "1000-01-02"]]) {
      assert.deepEqual(await usageReport(s.kv, app.appId, { groupBy: "day", from, to }), []);
    }
  }));

/** A clock 15 s into a minute, moved by hand: the management rate limit counts whole minutes. */
function minuteClock() {
  const clock = { at: Math.floor(Date.now() / 60_000) * 60_000 + 15_000, now: () => clock.at };
  return clock;
}

function assertRateLimited(res: Awaited<ReturnType<typeof call>>, retryAfter: string) {
  assert.equal(res.status, 429);
  assert.equal(res.body.error.code, "rate_limit_exceeded");
  assert.equal(res.body.error.type, "rate_limit_error");
  assert.match(res.body.error.message, /this account's management keys/);
  assert.equal(res.body.error.doc_url, `${PUBLIC_URL}/docs/errors#rate_limit_exceeded`);
  assert.equal(res.headers.get("retry-after"), retryAfter);
  assert.equal(res.headers.get("x-ratelimit-remaining-requests"), "0");
}

/** The three request-window headers of a management answer. */
function windowOf(res: Awaited<ReturnType<typeof call>>) {
  return {
    limit: res.headers.get("x-ratelimit-limit-requests"),
    remaining: res.headers.get("x-ratelimit-remaining-requests"),
    reset: res.headers.get("x-ratelimit-reset-requests"),
  };
}

Deno.test("management API: a request past the owner's management limit in a minute is 429 rate_limit_exceeded with Retry-After to the minute's end, and is not run", () => {
  const clock = minuteClock();
  return withService(async (s) => {
    const o = await owner(s);
    const { appId } = o.apps[0];
    for (let i = 0; i < 3; i++) {
      assert.equal((await call(s, o.managementKey, "GET", "/apps")).status, 200);
    }
    const refused = await call(s, o.managementKey, "POST", `/apps/${appId}/keys`, {
      body: { name: "one too many" },
      headers: { "idempotency-key": "over-the-limit" },
    });
    assertRateLimited(refused, "45");
    assert.equal(await countLiveKeys(s.kv, appId), 1);
    // Not recorded for its Idempotency-Key either: the retry in the next minute runs.
    clock.at += 60_000;
    const retried = await call(s, o.managementKey, "POST", `/apps/${appId}/keys`, {
      body: { name: "one too many" },
      headers: { "idempotency-key": "over-the-limit" },
    });
    assert.equal(retried.status, 201);
    assert.equal(retried.headers.get("idempotent-replayed"), null);
    assert.equal(await countLiveKeys(s.kv, appId), 2);
  }, { env: { MANAGEMENT_RATE_LIMIT_RPM: "3" }, now: clock.now });
});

Deno.test("management API: two management keys of one owner share one limit: one more than the limit at once over both keys, and exactly the limit succeed", () => {
  const clock = minuteClock();
  return withService(async (s) => {
    const o = await owner(s);
    const { managementKey: second } = await issueManagementKey(s.kv, o.ownerId, "second");
    const answers = await Promise.all(
      Array.from(
        { length: 7 },
        (_, i) => call(s, i % 2 ? second : o.managementKey, "GET", "/apps"),
      ),
    );
    assert.equal(answers.filter((r) => r.status === 200).length, 6);
    for (const refused of answers.filter((r) => r.status !== 200)) assertRateLimited(refused, "45");
    // Either key is now refused: the window is the owner's.
    assertRateLimited(await call(s, o.managementKey, "GET", "/apps"), "45");
    assertRateLimited(await call(s, second, "GET", "/apps"), "45");
  }, { env: { MANAGEMENT_RATE_LIMIT_RPM: "6" }, now: clock.now });
});

Deno.test("management API: another owner's key has its own window", () => {
  const clock = minuteClock();
  return withService(async (s) => {
    const o = await owner(s);
    const other = await owner(s, "own_other");
    for (let i = 0; i < 2; i++) {
      assert.equal((await call(s, o.managementKey, "GET", "/apps")).status, 200);
    }
    assertRateLimited(await call(s, o.managementKey, "GET", "/apps"), "45");
    const first = await call(s, other.managementKey, "GET", "/apps");
    assert.equal(first.status, 200);
    assert.equal(windowOf(first).remaining, "1");
    assert.equal((await call(s, other.managementKey, "GET", "/apps")).status, 200);
    assertRateLimited(await call(s, other.managementKey, "GET", "/apps"), "45");
  }, { env: { MANAGEMENT_RATE_LIMIT_RPM: "2" }, now: clock.now });
});

Deno.test("management API: every counted management answer carries x-ratelimit-* headers, errors included, the remaining requests decreasing; a 401 carries none", () => {
  const clock = minuteClock();
  return withService(async (s) => {
    const o = await owner(s);
    const { appId } = o.apps[0];
    const answers = [
      await call(s, o.managementKey, "GET", "/apps"),
      await call(s, o.managementKey, "POST", `/apps/${appId}/keys`, { body: { name: "one" } }),
      await call(s, o.managementKey, "GET", "/apps/app_nobody"),
      await call(s, o.managementKey, "GET", "/apps?limit=0"),
      await call(s, o.managementKey, "POST", `/apps/${appId}/keys`, { body: { name: 7 } }),
    ];
    assert.deepEqual(answers.map((r) => r.status), [200, 201, 404, 400, 400]);
    answers.forEach((res, i) => {
      assert.deepEqual(windowOf(res), { limit: "5", remaining: String(4 - i), reset: "45s" });
    });
    clock.at += 500;
    const refused = await call(s, o.managementKey, "GET", "/apps");
    assertRateLimited(refused, "45");
    assert.deepEqual(windowOf(refused), { limit: "5", remaining: "0", reset: "44.5s" });

    const unknown = await call(s, "tbm_" + "0".repeat(40), "GET", "/apps");
    assert.equal(unknown.status, 401);
    assert.deepEqual(windowOf(unknown), { limit: null, remaining: null, reset: null });
  }, { env: { MANAGEMENT_RATE_LIMIT_RPM: "5" }, now: clock.now });
});

Deno.test("management API: the next minute allows a limited owner's management key again", () => {
  const clock = minuteClock();
  return withService(async (s) => {
    const o = await owner(s);
    assert.equal((await call(s, o.managementKey, "GET", "/apps")).status, 200);
    assertRateLimited(await call(s, o.managementKey, "GET", "/apps"), "45");
    clock.at += 44_999;
    assertRateLimited(await call(s, o.managementKey, "GET", "/apps"), "1");
    clock.at += 1;
    assert.equal((await call(s, o.managementKey, "GET", "/apps")).status, 200);
    assertRateLimited(await call(s, o.managementKey, "GET", "/apps"), "60");
  }, { env: { MANAGEMENT_RATE_LIMIT_RPM: "1" }, now: clock.now });
});

Deno.test("management API: twice the limit of key creations at once, over two instances on one KV, make exactly the limit; the rest are 429", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tollbooth-management-rate-" });
  const clock = minuteClock();
  const options = {
    kvPath: `${dir}/kv.sqlite3`,
    env: { MANAGEMENT_RATE_LIMIT_RPM: "8" },
    now: clock.now,
  };
  const a = await startService(options);
  const b = await startService(options);
  try {
    const o = await owner(a);
    const { appId } = o.apps[0];
    const answers = await Promise.all(
      Array.from(
        { length: 16 },
        (_, i) =>
          call(i % 2 ? a : b, o.managementKey, "POST", `/apps/${appId}/keys`, {
            body: { name: `customer ${i}` },
          }),
      ),
    );
    assert.equal(answers.filter((r) => r.status === 201).length, 8);
    for (const refused of answers.filter((r) => r.status !== 201)) assertRateLimited(refused, "45");
    assert.equal(await countLiveKeys(a.kv, appId), 1 + 8);
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});
