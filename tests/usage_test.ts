import assert from "node:assert/strict";
import { rotateTopUpToken } from "@/lib/tenants/mod.ts";
import { keys, utcDay } from "@/lib/db.ts";
import { authenticateKey } from "@/lib/tenants/keys.ts";
import { rotateKey } from "@/lib/billing/mod.ts";
import { dailySpend, mergedActivity, spendByModel } from "@/lib/billing/mod.ts";
import { pageCredits, pageUsage } from "@/lib/management/mod.ts";
import { startService, userMessage, withService } from "./helpers.ts";

async function spend(s: Awaited<ReturnType<typeof startService>>, apiKey: string, model: string) {
  const res = await s.chat(apiKey, { model, messages: userMessage("hi"), max_tokens: 20 });
  assert.equal(res.status, 200);
  await res.body?.cancel();
  return res.headers.get("tollbooth-request-id")!;
}

Deno.test("daily and per-model spend add up to what the wallet spent", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await spend(s, apiKey, "tollbooth/echo");
    await spend(s, apiKey, "tollbooth/lorem");
    await spend(s, apiKey, "tollbooth/lorem");
    const wallet = await s.wallet(appId);
    const days = await dailySpend(s.kv, appId);
    assert.equal(days.length, 30);
    assert.equal(days[29].day, utcDay(Date.now()));
    assert.equal(days.reduce((sum, d) => sum + d.micros, 0), wallet.spent);
    const models = await spendByModel(s.kv, appId);
    assert.deepEqual(models.map((m) => m.model).toSorted(), ["tollbooth/echo", "tollbooth/lorem"]);
    assert.equal(models.reduce((sum, m) => sum + m.micros, 0), wallet.spent);
  }));

Deno.test("wallet activity lists the starter credit and each charge, newest first", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const requestId = await spend(s, apiKey, "tollbooth/echo");
    const activity = mergedActivity(
      (await pageCredits(s.kv, appId, { limit: 30 })).data,
      (await pageUsage(s.kv, appId, { limit: 30 })).data,
    );
    assert.equal(activity.length, 2);
    assert.equal(activity[0].kind === "spend" && activity[0].usage.requestId, requestId);
    assert.equal(activity[1].kind === "credit" && activity[1].entry.kind, "starter");
  }));

Deno.test("rotating a key revokes the old one and issues a working new one in one step", () =>
  withService(async (s) => {
    const { apiKey, keyId } = await s.newApp();
    const { issued, revoked } = await rotateKey(s.kv, keyId);
    assert.notEqual(revoked.revokedAt, null);
    assert.equal(issued.record.name, revoked.name);
    assert.equal(await authenticateKey(s.kv, apiKey), null);
    assert.equal((await s.chat(apiKey, { model: "tollbooth/echo", messages: [] })).status, 401);
    await spend(s, issued.apiKey, "tollbooth/echo");
    await assert.rejects(() => rotateKey(s.kv, keyId), "a revoked key cannot be rotated again");
  }));

Deno.test("replacing the top-up address retires the old one", () =>
  withService(async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const app = await rotateTopUpToken(s.kv, appId);
    assert.notEqual(app.topUpToken, topUpToken);
    assert.equal((await s.kv.get(keys.appByTopUpToken(topUpToken))).value, null);
    assert.equal((await s.kv.get(keys.appByTopUpToken(app.topUpToken))).value, appId);
  }));
