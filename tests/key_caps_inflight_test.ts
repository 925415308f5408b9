/**
 * A capped key's requests in flight outlive its revocation and its rotation: their settles are
 * still held to the key's cap, and the revoked key's cap entry goes only once nothing holds on it.
 */
import assert from "node:assert/strict";
import {
  getSpendCaps,
  getSpendCounter,
  issueKeyWithCaps,
  revokeKey,
  rotateKey,
  setSpendCaps,
} from "@/lib/billing/mod.ts";
import { withoutRevokedKeys } from "@/lib/billing/spend_caps.ts";
import { keys, type SpendCounter } from "@/lib/db.ts";
import { createApp as createAppRecord, issueKey } from "@/lib/tenants/mod.ts";
import { issueManagementKey } from "@/lib/management/mod.ts";
import { PUBLIC_URL, settleInput, type TestService, withService } from "./helpers.ts";

const CAP = { total: 1_000_000 };

async function reserveOn(s: TestService, appId: string, keyId: string, requestId: string) {
  const reserved = await s.wallets.reserve(appId, {
    amount: 500_000,
    keyId,
    requestId,
    model: "tollbooth/echo",
  });
  assert.ok(reserved.ok, JSON.stringify(reserved));
  return reserved.reservation.id;
}

async function settleOn(
  s: TestService,
  appId: string,
  keyId: string,
  reservationId: string,
  requestId: string,
  cost: number,
) {
  const settled = await s.wallets.settle(appId, reservationId, {
    ...settleInput(cost),
    requestId,
    keyId,
  });
  assert.ok(settled.settled);
  return settled;
}

Deno.test("a request in flight on a key revoked meanwhile is charged above its hold only within the key's cap", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    const held = await reserveOn(s, appId, keyId, "req_1");
    await revokeKey(s.kv, keyId);

    const settled = await settleOn(s, appId, keyId, held, "req_1", 3_000_000);
    assert.equal(settled.charged, 1_000_000, "the key's $1 cap");
    assert.equal(settled.uncharged, 2_000_000);
    const counter = await getSpendCounter(s.kv, appId, "key", keyId);
    assert.deepEqual({ held: counter.held, total: counter.total }, { held: 0, total: 1_000_000 });
  }));

Deno.test("a request in flight on a key rotated meanwhile is charged above its hold only within the key's cap", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    const held = await reserveOn(s, appId, keyId, "req_1");
    const rotated = await rotateKey(s.kv, keyId);

    const settled = await settleOn(s, appId, keyId, held, "req_1", 3_000_000);
    assert.equal(settled.charged, 1_000_000, "the key's $1 cap, now its replacement's");
    assert.equal(settled.uncharged, 2_000_000);
    const counter = await getSpendCounter(s.kv, appId, "key", rotated.issued.record.id);
    assert.deepEqual({ held: counter.held, total: counter.total }, { held: 0, total: 1_000_000 });
  }));

Deno.test("a cap lowered below a request in flight refuses new requests; the one in flight is charged its hold, nothing above it", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    const held = await reserveOn(s, appId, keyId, "req_1");
    await setSpendCaps(s.kv, appId, { keyId }, { total: 100_000 });

    const refused = await s.wallets.reserve(appId, {
      amount: 1_000,
      keyId,
      requestId: "req_2",
      model: "tollbooth/echo",
    });
    assert.equal(refused.ok, false, "no room under the lowered cap");
    // The provider bills the work in flight: its hold is charged, and nothing above it.
    const settled = await settleOn(s, appId, keyId, held, "req_1", 700_000);
    assert.equal(settled.charged, 500_000);
    assert.equal(settled.uncharged, 200_000);
    const counter = await getSpendCounter(s.kv, appId, "key", keyId);
    assert.deepEqual({ held: counter.held, total: counter.total }, { held: 0, total: 500_000 });
  }));

Deno.test("a revoked key's cap entry is pruned once nothing holds on its counter, and not before", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    const other = (await issueKey(s.kv, appId, "other", "operator")).record.id;
    const held = await reserveOn(s, appId, keyId, "req_1");
    await revokeKey(s.kv, keyId);
    assert.ok(keyId in (await getSpendCaps(s.kv, appId)).keys, "kept by the revocation");
    await setSpendCaps(s.kv, appId, { keyId: other }, CAP);
    assert.ok(keyId in (await getSpendCaps(s.kv, appId)).keys, "kept by a write while it holds");

    await settleOn(s, appId, keyId, held, "req_1", 100_000);
    assert.ok(keyId in (await getSpendCaps(s.kv, appId)).keys, "a settle does not write the caps");
    await setSpendCaps(s.kv, appId, { keyId: other }, { total: 2_000_000 });
    assert.deepEqual(Object.keys((await getSpendCaps(s.kv, appId)).keys), [other]);
  }));

Deno.test("revoking a capped key with nothing in flight drops its cap entry at once", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    await settleOn(s, appId, keyId, await reserveOn(s, appId, keyId, "req_1"), "req_1", 100_000);
    await revokeKey(s.kv, keyId);
    assert.deepEqual((await getSpendCaps(s.kv, appId)).keys, {});
  }));

Deno.test("a prune of a revoked key's cap entry fails its commit when the counter it read changed", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { issued } = await issueKeyWithCaps(s.kv, appId, "capped", "operator", CAP);
    const keyId = issued.record.id;
    const held = await reserveOn(s, appId, keyId, "req_1");
    await revokeKey(s.kv, keyId);
    await settleOn(s, appId, keyId, held, "req_1", 100_000);

    const entry = await s.kv.get(keys.spendCaps(appId));
    const { record, checks } = await withoutRevokedKeys(
      s.kv,
      appId,
      await getSpendCaps(s.kv, appId),
    );
    assert.deepEqual(record.keys, {});
    assert.equal(checks.length, 1);
    const counterKey = keys.spendCounter(appId, "key", keyId);
    const counter = (await s.kv.get<SpendCounter>(counterKey)).value!;
    await s.kv.set(counterKey, { ...counter, total: counter.total + 1 });
    const commit = await s.kv.atomic().check(entry, ...checks).set(keys.spendCaps(appId), record)
      .commit();
    assert.equal(commit.ok, false, "a counter written meanwhile sends the prune back to read");
    await s.kv.set(counterKey, counter);
  }));

Deno.test("a caps write prunes the revoked keys' entries a few at a time when each needs its counter checked, the record shrinking at every write", () =>
  withService(async (s) => {
    const { appId, keyId: live } = await s.newApp();
    const held = new Map<string, string>();
    for (let i = 0; i < 10; i++) {
      const { issued } = await issueKeyWithCaps(s.kv, appId, `k${i}`, "operator", CAP);
      held.set(issued.record.id, await reserveOn(s, appId, issued.record.id, `req_${i}`));
    }
    for (const keyId of held.keys()) await revokeKey(s.kv, keyId);
    for (const [keyId, reservationId] of held) {
      await settleOn(s, appId, keyId, reservationId, "req", 1_000);
    }
    assert.equal(Object.keys((await getSpendCaps(s.kv, appId)).keys).length, 10);

    await setSpendCaps(s.kv, appId, { keyId: live }, CAP);
    assert.equal(Object.keys((await getSpendCaps(s.kv, appId)).keys).length, 10 - 6 + 1);
    await setSpendCaps(s.kv, appId, { keyId: live }, { total: 3_000_000 });
    assert.deepEqual(Object.keys((await getSpendCaps(s.kv, appId)).keys), [live]);
  }));

Deno.test("management API: a key revoked with a request in flight reads with no spend cap", () =>
  withService(async (s) => {
    const { managementKey } = await issueManagementKey(s.kv, "own_inflight", "tests");
    const app =
      (await createAppRecord(s.kv, { name: "m", ownerId: "own_inflight", bound: "operator" }))
        .app;
    const manage = async (path: string, body?: unknown) => {
      const res = await s.handle(
        new Request(`${PUBLIC_URL}/v1/management/apps/${app.id}${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${managementKey}`, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      );
      return { status: res.status, body: await res.json() };
    };
    const created = await manage("/keys", { name: "capped", spend_cap: { total: "1.00" } });
    assert.equal(created.status, 201);
    const keyId = created.body.id as string;
    const held = await reserveOn(s, app.id, keyId, "req_1");

    const revoked = await manage(`/keys/${keyId}/revoke`);
    assert.equal(revoked.status, 200);
    assert.equal(revoked.body.spend_cap, null);
    assert.ok(keyId in (await getSpendCaps(s.kv, app.id)).keys, "kept for the request in flight");
    await settleOn(s, app.id, keyId, held, "req_1", 100_000);
  }));
