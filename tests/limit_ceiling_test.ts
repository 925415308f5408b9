/**
 * The operator's limits are a ceiling: an owner sets an app's or a key's limits at or below them;
 * only the operator (`admin set-limits`) raises an app above the defaults.
 */
import assert from "node:assert/strict";
import { LimitAboveCeilingError, setRateLimits } from "@/lib/billing/mod.ts";
import { keys, type RateLimitOverrides } from "@/lib/db.ts";
import { runAdmin } from "@/scripts/admin.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  startService,
  type TestService,
  userMessage,
} from "./helpers.ts";
import { OwnerSession } from "./owner_session.ts";

const RPM = 10;
const DEFAULTS = { rpm: RPM, tpm: 2_000_000 };

/** RATE_LIMIT_RPM=10, and a clock that stands still: a burst drains nothing. */
async function withService(fn: (s: TestService) => Promise<void>) {
  const now = Date.now();
  const s = await startService({ env: { RATE_LIMIT_RPM: String(RPM) }, now: () => now });
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

/** Sends `n` requests at once; how many were served and how many refused with 429. */
async function burst(s: TestService, apiKey: string, n: number) {
  const statuses = await Promise.all(
    Array.from({ length: n }, async () => {
      const res = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
      await res.body?.cancel();
      return res.status;
    }),
  );
  return {
    served: statuses.filter((status) => status === 200).length,
    limited: statuses.filter((status) => status === 429).length,
  };
}

Deno.test("an owner asking the dashboard for 1e9 requests per minute is refused, and 40 burst requests at RPM=10 see 429s", () =>
  withService(async (s) => {
    const owner = await new OwnerSession(s).signUp("lifter@example.com");
    const { appId, apiKey } = await owner.createApp("Lifted");
    const refused = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: await owner.csrf(),
      rpm: "1000000000",
      tpm: "",
    });
    assert.equal(refused.status, 400);
    assert.match(
      await refused.text(),
      /Requests per minute can be at most 10 for this app \(the operator(&#39;|')s limit\)/,
    );
    assert.match(await owner.page(`/dashboard/apps/${appId}`), /In force: 10 requests/);
    const { served, limited } = await burst(s, apiKey, 40);
    assert.equal(served, RPM);
    assert.equal(limited, 40 - RPM);
  }));

Deno.test("an owner may set an app's and a key's limits at or below the operator's, never above", () =>
  withService(async (s) => {
    const { appId, keyId } = await s.newApp();
    const owner = { by: "owner" as const, defaults: DEFAULTS };
    await setRateLimits(s.kv, appId, { rpm: RPM, tpm: 1000 }, owner);
    await setRateLimits(s.kv, appId, { rpm: 3 }, owner, keyId);
    for (
      const [change, keyIdOrNot] of [[{ rpm: RPM + 1 }, undefined], [{ rpm: 1e9 }, keyId], [
        { tpm: 2_000_001 },
        undefined,
      ]] as const
    ) {
      await assert.rejects(
        setRateLimits(s.kv, appId, change, owner, keyIdOrNot),
        LimitAboveCeilingError,
      );
    }
    const stored = (await s.kv.get<RateLimitOverrides>(keys.rateLimitOverrides(appId))).value;
    assert.deepEqual(stored, { app: { rpm: RPM, tpm: 1000 }, keys: { [keyId]: { rpm: 3 } } });
  }));

Deno.test("only admin set-limits raises an app above the defaults; the owner may then set up to it", () =>
  withService(async (s) => {
    const owner = await new OwnerSession(s).signUp("raised@example.com");
    const { appId, apiKey } = await owner.createApp("Raised");
    const admin = (...args: string[]) =>
      runAdmin(["set-limits", "--app", appId, ...args], s.kv, PUBLIC_URL, DEFAULTS);
    assert.deepEqual((await admin("--rpm", "50")).output, {
      app_id: appId,
      rpm: 50,
      tpm: 2_000_000,
    });
    const form = async (rpm: string) =>
      await owner.post(`/dashboard/apps/${appId}/limits`, {
        _csrf: await owner.csrf(),
        rpm,
        tpm: "",
      });
    assert.equal((await form("51")).status, 400);
    assert.equal((await form("50")).status, 303);
    assert.match(await owner.page(`/dashboard/apps/${appId}`), /In force: 50 requests/);
    // The operator takes the raise back: the owner's 50 is held to the defaults again.
    await admin("--rpm", "default");
    assert.match(await owner.page(`/dashboard/apps/${appId}`), /In force: 10 requests/);
    const { served } = await burst(s, apiKey, 20);
    assert.equal(served, RPM);
  }));

Deno.test("limits stored above the ceiling before it was enforced are held to it", () =>
  withService(async (s) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const lifted: RateLimitOverrides = {
      app: { rpm: 1e9, tpm: 1e9 },
      keys: { [keyId]: { rpm: 1e9 } },
    };
    await s.kv.set(keys.rateLimitOverrides(appId), lifted);
    const { served, limited } = await burst(s, apiKey, 40);
    assert.equal(served, RPM);
    assert.equal(limited, 40 - RPM);
  }));
