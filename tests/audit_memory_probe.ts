/**
 * Run by audit_test.ts in a process with a small heap: audits one app whose usage is a stream of
 * synthetic records, far more than that heap could hold at once, generated as KV lists them. Exits
 * 0 with the report on stdout when the audit summed them without keeping them.
 */
import { auditWallets } from "@/lib/billing/mod.ts";
import { newId } from "@/lib/core/mod.ts";
import { emptyWallet, keys, type UsageRecord } from "@/lib/db.ts";

const count = Number(Deno.args[0]);
const appId = "app_streamed";
const kv = await Deno.openKv(":memory:");
await kv.set(keys.wallet(appId), {
  ...emptyWallet(),
  operatorCredits: count,
  spent: count,
});
await kv.set(keys.ledgerEntry(appId, newId("led", 0)), {
  id: newId("led", 0),
  kind: "operator_credit",
  amount: count,
  reason: "probe",
  reference: null,
  createdAt: 0,
});
const dayAgo = Date.now() - 24 * 60 * 60 * 1000;

async function* syntheticUsage(selector: Deno.KvListSelector) {
  const start = "start" in selector ? String(selector.start!.at(-1)) : "";
  const end = "end" in selector ? String(selector.end!.at(-1)) : "\uffff";
  for (let i = 0; i < count; i++) {
    const id = `use_${dayAgo.toString(36).padStart(10, "0")}${i.toString(36).padStart(16, "0")}`;
    if (id < start || id >= end) continue;
    const value: UsageRecord = {
      id,
      requestId: `req_${i}`,
      appId,
      keyId: "key_probe",
      model: "tollbooth/echo",
      provider: "tollbooth",
      promptTokens: 10,
      completionTokens: 10,
      cost: 1,
      uncharged: 0,
      reserved: 1,
      streamed: false,
      outcome: "completed",
      countedLocally: false,
      createdAt: dayAgo,
    };
    yield { key: keys.usage(appId, id), value, versionstamp: "00000000000000000001" };
  }
}

const streamed = new Proxy(kv, {
  get(target, name) {
    if (name === "list") {
      return (selector: Deno.KvListSelector, options?: Deno.KvListOptions) =>
        "prefix" in selector && selector.prefix[0] === "usage"
          ? syntheticUsage(selector)
          : target.list(selector, options);
    }
    const value = Reflect.get(target, name);
    return typeof value === "function" ? value.bind(target) : value;
  },
});
const report = await auditWallets(streamed);
console.log(JSON.stringify({ ok: report.ok, usageRecords: report.wallets[0].usageRecords }));
kv.close();
