/**
 * The app's spend-caps record is one KV value (64 KiB at most): what keeps it to the app's live
 * keys, and the dashboard pages that name keys reading only the keys they show.
 */
import assert from "node:assert/strict";
import {
  getSpendCaps,
  issueKeyWithCaps,
  KeyCapNotStoredError,
  revokeKey,
  rotateKey,
  setRateLimits,
  setSpendCaps,
} from "@/lib/billing/mod.ts";
import { countLiveKeys, createApp as createAppRecord, issueKey } from "@/lib/tenants/mod.ts";
import {
  issueManagementKey,
  listManagementKeys,
  REVOKED_KEYS_SHOWN,
  revokeManagementKey,
  TooManyManagementKeysError,
} from "@/lib/management/mod.ts";
import { newId } from "@/lib/core/mod.ts";
import {
  type ApiKeyRecord,
  keys,
  type RateLimitOverrides,
  type SpendCapsRecord,
} from "@/lib/db.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { OwnerSession } from "./owner_session.ts";
import { PUBLIC_URL, type TestService, userMessage, withService } from "./helpers.ts";

const CAP = { total: 2_000_000, daily: null, monthly: null };

async function capsRecord(kv: Deno.Kv, appId: string): Promise<SpendCapsRecord | null> {
  return (await kv.get<SpendCapsRecord>(keys.spendCaps(appId))).value;
}

async function manage(s: TestService, key: string, path: string, body?: unknown) {
  const res = await s.handle(
    new Request(`${PUBLIC_URL}/v1/management${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  );
  return { status: res.status, body: await res.json() };
}

/**
 * Writes `count` revoked keys of the app and a caps record holding an entry for each, as records
 * written before revocations dropped their entries hold them; as many as fit in one KV value.
 */
async function seedRevokedCappedKeys(kv: Deno.Kv, appId: string, count: number) {
  const record: SpendCapsRecord = (await capsRecord(kv, appId)) ?? { keys: {}, endUser: null };
  const now = Date.now();
  for (let i = 0; i < count; i++) {
    const id = newId("key", now);
    const key: ApiKeyRecord = {
      id,
      appId,
      name: `old ${i}`,
      prefix: "tb_00000",
      hash: `revoked-${id}`,
      createdAt: now,
      revokedAt: now,
    };
    await kv.atomic().set(keys.apiKey(id), key).set(keys.appApiKey(appId, id), true).commit();
    record.keys[id] = { ...CAP };
  }
  const ids = Object.keys(record.keys);
  for (;;) {
    try {
      await kv.set(keys.spendCaps(appId), record);
      return Object.keys(record.keys).length;
    } catch (error) {
      if (!String(error).includes("too large")) throw error;
      delete record.keys[ids.pop()!];
    }
  }
}

Deno.test("revoking a capped key removes its cap entry and its rate-limit override, in the revocation's commit", () =>
  withService(async (s) => {
    const { appId, keyId } = await s.newApp();
    const other = await issueKey(s.kv, appId, "other", "operator");
    await setSpendCaps(s.kv, appId, { keyId }, CAP);
    await setSpendCaps(s.kv, appId, { keyId: other.record.id }, CAP);
    await setRateLimits(s.kv, appId, { rpm: 7 }, { by: "operator" }, keyId);
    const walletBefore = await s.wallet(appId);

    const revoked = await revokeKey(s.kv, keyId);
    assert.notEqual(revoked.revokedAt, null);
    const caps = await getSpendCaps(s.kv, appId);
    assert.deepEqual(Object.keys(caps.keys), [other.record.id], "the other key keeps its cap");
    const overrides = await s.kv.get<RateLimitOverrides>(keys.rateLimitOverrides(appId));
    assert.deepEqual(overrides.value?.keys, {});
    assert.deepEqual(await s.wallet(appId), walletBefore);
  }));

Deno.test("revoking a capped key removes its cap entry: management API, dashboard and admin CLI", () =>
  withService(async (s) => {
    // Management API: issued with a cap, then revoked.
    const ownerId = "own_caps";
    const { managementKey } = await issueManagementKey(s.kv, ownerId, "tests");
    const app = (await createAppRecord(s.kv, { name: "m", ownerId, bound: "operator" })).app;
    const created = await manage(s, managementKey, `/apps/${app.id}/keys`, {
      name: "capped",
      spend_cap: { total: "2.00" },
    });
    assert.equal(created.status, 201);
    const managed = created.body.id as string;
    assert.ok(managed in (await getSpendCaps(s.kv, app.id)).keys);
    const revoked = await manage(s, managementKey, `/apps/${app.id}/keys/${managed}/revoke`);
    assert.equal(revoked.status, 200);
    assert.equal(managed in (await getSpendCaps(s.kv, app.id)).keys, false);

    // Dashboard.
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("dashboard app");
    const keysPage = await v.page(`/dashboard/apps/${appId}/keys`);
    const dashboardKey = /\/keys\/(key_[0-9a-z]+)\/revoke/.exec(keysPage)![1];
    await setSpendCaps(s.kv, appId, { keyId: dashboardKey }, CAP);
    const res = await v.post(`/dashboard/apps/${appId}/keys/${dashboardKey}/revoke`, {
      _csrf: await v.csrf(),
    });
    assert.equal(res.status, 303);
    assert.equal(dashboardKey in (await getSpendCaps(s.kv, appId)).keys, false);

    // Admin CLI.
    const cli = await s.newApp();
    await setSpendCaps(s.kv, cli.appId, { keyId: cli.keyId }, CAP);
    const { exitCode } = await runAdmin(["revoke-key", "--key", cli.keyId], s.kv, PUBLIC_URL);
    assert.equal(exitCode, 0);
    assert.equal(cli.keyId in (await getSpendCaps(s.kv, cli.appId)).keys, false);
  }));

/** `kv` whose commits writing the spend-caps record fail, as one past KV's value limit did. */
function capsWriteFails(kv: Deno.Kv): Deno.Kv {
  const failing = (atomic: Deno.AtomicOperation): Deno.AtomicOperation => {
    let writesCaps = false;
    const proxy: Deno.AtomicOperation = new Proxy(atomic, {
      get(target, name) {
        if (name === "commit") {
          return () =>
            writesCaps ? Promise.reject(new TypeError("Value too large")) : target.commit();
        }
        const value = Reflect.get(target, name, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (name === "set" && (args[0] as Deno.KvKey)[0] === keys.spendCaps("")[0]) {
            writesCaps = true;
          }
          const out = value.apply(target, args);
          return out === target ? proxy : out;
        };
      },
    });
    return proxy;
  };
  return new Proxy(kv, {
    get(target, name) {
      if (name === "atomic") return () => failing(target.atomic());
      const value = Reflect.get(target, name, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

Deno.test("a key asked for with a cap that cannot be written is not issued", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const before = await capsRecord(s.kv, appId);
    const liveBefore = await countLiveKeys(s.kv, appId);
    const failing = capsWriteFails(s.kv);
    await assert.rejects(
      issueKeyWithCaps(failing, appId, "capped", { maxLiveKeys: 100 }, CAP),
      KeyCapNotStoredError,
    );
    assert.equal(await countLiveKeys(s.kv, appId), liveBefore, "no live uncapped key");
    assert.deepEqual(await capsRecord(s.kv, appId), before);

    const { issued, caps } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    assert.deepEqual(caps.keys[issued.record.id], CAP);
    assert.deepEqual((await getSpendCaps(s.kv, appId)).keys[issued.record.id], CAP);
  }));

Deno.test("a caps record holding revoked keys' entries is pruned at its next write", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const seeded = await seedRevokedCappedKeys(s.kv, appId, 1_000);
    assert.ok(seeded > 800, `${seeded} entries fill the value`);
    const walletBefore = await s.wallet(appId);

    const caps = await setSpendCaps(s.kv, appId, { keyId }, CAP);
    assert.deepEqual(Object.keys(caps.keys), [keyId]);
    assert.deepEqual(await capsRecord(s.kv, appId), caps, "the record shrank to the live key's");
    assert.deepEqual(await s.wallet(appId), walletBefore);
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200, "the capped key still serves");
    await chat.body?.cancel();
  }));

Deno.test("management API: a key with a cap is issued and capped on an app whose caps record was full of revoked keys", () =>
  withService(async (s) => {
    const ownerId = "own_full";
    const { managementKey } = await issueManagementKey(s.kv, ownerId, "tests");
    const app = (await createAppRecord(s.kv, { name: "full", ownerId, bound: "operator" })).app;
    await seedRevokedCappedKeys(s.kv, app.id, 1_000);
    const liveBefore = await countLiveKeys(s.kv, app.id);

    const created = await manage(s, managementKey, `/apps/${app.id}/keys`, {
      name: "capped",
      spend_cap: { total: "2.00" },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.body.spend_cap.total, "2.000000");
    assert.equal(await countLiveKeys(s.kv, app.id), liveBefore + 1);
    assert.deepEqual(Object.keys((await getSpendCaps(s.kv, app.id)).keys), [created.body.id]);
  }));

/** The KV keys read by `get` and `getMany` while `fn` runs. */
async function keysRead(fn: () => Promise<unknown>): Promise<number> {
  const proto = Deno.Kv.prototype;
  const { get, getMany } = proto;
  let read = 0;
  proto.get = function (this: Deno.Kv, ...args: Parameters<typeof get>) {
    read++;
    return get.apply(this, args);
  } as typeof get;
  proto.getMany = function (this: Deno.Kv, ...args: Parameters<typeof getMany>) {
    read += args[0].length;
    return getMany.apply(this, args);
  } as typeof getMany;
  try {
    await fn();
  } finally {
    proto.get = get;
    proto.getMany = getMany;
  }
  return read;
}

Deno.test("a usage or wallet page view's reads do not grow with the number of revoked keys", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey } = await v.createApp("app");
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    await chat.body?.cancel();
    await s.wallets.drain();
    const views = async () => {
      const pages = [];
      for (const tab of ["usage", "wallet"]) {
        pages.push(await v.page(`/dashboard/apps/${appId}/${tab}`));
      }
      return pages;
    };
    await views();
    const before = await keysRead(views);
    for (let i = 0; i < 200; i++) {
      await revokeKey(s.kv, (await issueKey(s.kv, appId, `old ${i}`, "operator")).record.id);
    }
    let pages: string[] = [];
    const after = await keysRead(async () => pages = await views());
    assert.equal(after, before, `${before} reads before 200 revoked keys, ${after} after`);
    const keyName = `${apiKey.slice(0, 8)}…`;
    for (const html of pages) assert.ok(html.includes(keyName), "the request's key is named");
  }));

Deno.test("counting an app's live keys reads the records of keys not marked revoked only; keys revoked before the mark are marked by the count", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    for (let i = 0; i < 150; i++) {
      await revokeKey(s.kv, (await issueKey(s.kv, appId, `old ${i}`, "operator")).record.id);
    }
    // Revoked before revocations marked the index: its entry still reads true.
    const legacy = (await issueKey(s.kv, appId, "legacy", "operator")).record.id;
    await revokeKey(s.kv, legacy);
    await s.kv.set(keys.appApiKey(appId, legacy), true);
    const rotated = (await issueKey(s.kv, appId, "live", "operator")).record.id;
    await rotateKey(s.kv, rotated);
    assert.equal((await s.kv.get(keys.appApiKey(appId, rotated))).value, false, "rotated: marked");

    let live = 0;
    const first = await keysRead(async () => live = await countLiveKeys(s.kv, appId));
    assert.equal(live, 2, "the app's default key and the new one");
    assert.equal(first, 3, "the two live keys' records and the legacy one's");
    assert.equal((await s.kv.get(keys.appApiKey(appId, legacy))).value, false, "marked");
    const second = await keysRead(async () => live = await countLiveKeys(s.kv, appId));
    assert.equal(live, 2);
    assert.equal(second, 2, "the live keys' records only");
  }));

Deno.test("issuing a management key reads the records of the owner's keys not marked revoked only", () =>
  withService(async (s) => {
    const ownerId = "owner_many_keys";
    for (let i = 0; i < 60; i++) {
      const { record } = await issueManagementKey(s.kv, ownerId, `old ${i}`);
      await revokeManagementKey(s.kv, ownerId, record.id);
    }
    const reads = await keysRead(() => issueManagementKey(s.kv, ownerId, "new"));
    assert.ok(reads <= 3, `${reads} keys read to issue one among 60 revoked`);
    for (let i = 0; i < 19; i++) await issueManagementKey(s.kv, ownerId, `live ${i}`);
    await assert.rejects(
      () => issueManagementKey(s.kv, ownerId, "one too many"),
      TooManyManagementKeysError,
    );
  }));

Deno.test("the management keys page shows every live key and the newest 20 revoked, counts the older ones, and reads no older one's record", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const ownerId = (await s.kv.get<{ ownerId: string }>(keys.app(appId))).value!.ownerId;
    // A millisecond apart, so that creation order is the ids' order.
    const start = Date.now() - 60_000;
    for (let i = 0; i < 25; i++) {
      const { record } = await issueManagementKey(s.kv, ownerId, `old ${i}`, start + i);
      await revokeManagementKey(s.kv, ownerId, record.id);
    }
    for (let i = 0; i < 3; i++) {
      await issueManagementKey(s.kv, ownerId, `live ${i}`, start + 25 + i);
    }
    let listed: Awaited<ReturnType<typeof listManagementKeys>> | undefined;
    const reads = await keysRead(async () => listed = await listManagementKeys(s.kv, ownerId));
    assert.equal(reads, 3 + REVOKED_KEYS_SHOWN, "the live keys' records and the shown revoked");
    assert.equal(listed!.olderRevoked, 5);
    assert.deepEqual(
      listed!.keys.filter((k) => k.revokedAt !== null).map((k) => k.name),
      Array.from({ length: 20 }, (_, i) => `old ${24 - i}`),
      "the newest revoked, newest first",
    );
    const page = await v.page("/dashboard/management-keys");
    assert.match(page, /live 2/);
    assert.match(page, /old 24/);
    assert.doesNotMatch(page, /old 4\b/);
    assert.match(page, /And 5 older revoked keys, not shown\./);
  }));
