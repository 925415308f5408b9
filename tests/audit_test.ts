/**
 * `deno task admin audit` beside a running service: it sums an app's records as it reads them (an
 * app's usage grows without bound), and proves one consistent moment of a wallet that keeps
 * changing by re-reading only its recent records with the wallet, not all of them.
 */
import assert from "node:assert/strict";
import { auditWallets } from "@/lib/billing/mod.ts";
import { newId, parseUsd } from "@/lib/core/mod.ts";
import { keys, type UsageRecord, type WalletRecord } from "@/lib/db.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { PUBLIC_URL, startService, type TestService, userMessage, withService } from "./helpers.ts";

/** Room for the traffic below (two clients at up to 100 requests a second each) for 20 s. */
const UNLIMITED = { env: { RATE_LIMIT_RPM: "1000000" } };
/** Enough usage that reading it all takes far longer than the wallet holds still under traffic. */
const SEEDED = 60_000;
const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Writes `count` usage records of 1 micro-USD dated a day ago, and moves their cost from the
 * wallet's available to its spent: books that add up. Returns the ids.
 */
async function seedOldUsage(kv: Deno.Kv, appId: string, count: number): Promise<string[]> {
  const at = Date.now() - DAY_MS;
  const ids: string[] = [];
  for (let i = 0; i < count; i += 500) {
    const atomic = kv.atomic();
    for (let j = i; j < Math.min(count, i + 500); j++) {
      const usage = usageRecord(appId, newId("use", at + j % 1000), 1);
      ids.push(usage.id);
      atomic.set(keys.usage(appId, usage.id), usage);
    }
    assert.ok((await atomic.commit()).ok);
  }
  const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
  await kv.set(keys.wallet(appId), {
    ...wallet,
    available: wallet.available - count,
    spent: wallet.spent + count,
  });
  return ids;
}

function usageRecord(appId: string, id: string, cost: number): UsageRecord {
  return {
    id,
    requestId: `req_${id}`,
    appId,
    keyId: "key_seeded",
    model: "tollbooth/echo",
    provider: "tollbooth",
    promptTokens: 1,
    completionTokens: 1,
    cost,
    uncharged: 0,
    reserved: cost,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
    createdAt: Date.now() - DAY_MS,
  };
}

/**
 * Runs `work` while paid requests keep coming (two clients, one request each every 10 ms), and
 * tells how many were answered while it ran and whether it outlasted the traffic's 20 s.
 */
async function duringTraffic<T>(s: TestService, apiKey: string, work: () => Promise<T>) {
  let stop = false;
  let outlasted = false;
  let answered = 0;
  const deadline = setTimeout(() => {
    outlasted = true;
    stop = true;
  }, 20_000);
  const clients = [0, 1].map(async () => {
    while (!stop) {
      const res = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
      await res.body?.cancel();
      if (res.status !== 200) throw new Error(`a request failed: ${res.status}`);
      if (!(Number(res.headers.get("tollbooth-request-cost")) > 0)) throw new Error("not paid");
      answered++;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }).map((client) => client.finally(() => stop = true));
  try {
    // Traffic first, so the wallet is already changing when the audit starts.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = answered;
    const result = await work();
    return { result, answeredDuring: answered - before, outlasted };
  } finally {
    stop = true;
    clearTimeout(deadline);
    await Promise.all(clients);
  }
}

Deno.test("the audit finishes under concurrent paid traffic and is clean", () =>
  withService(async (s) => {
    const app = await s.newApp();
    await seedOldUsage(s.kv, app.appId, SEEDED);
    const spentBefore = (await s.wallet(app.appId)).spent;
    const { result: report, answeredDuring, outlasted } = await duringTraffic(
      s,
      app.apiKey,
      () => auditWallets(s.kv),
    );
    assert.equal(outlasted, false, "the audit finished while the traffic still ran");
    assert.ok(answeredDuring > 0, "requests were answered while the audit read");
    assert.deepEqual(report.wallets[0].problems, []);
    assert.equal(report.ok, true);
    assert.equal(report.wallets[0].consistent, true);
    assert.ok(report.wallets[0].usageRecords > SEEDED, "the seeded records and the traffic's");
    assert.ok((await s.wallet(app.appId)).spent > spentBefore);
  }, UNLIMITED));

Deno.test("a real discrepancy is still reported under traffic", () =>
  withService(async (s) => {
    const app = await s.newApp();
    const ids = await seedOldUsage(s.kv, app.appId, SEEDED);
    // One old usage record says it cost more than the wallet was charged for it.
    const tampered = usageRecord(app.appId, ids[123], 8);
    await s.kv.set(keys.usage(app.appId, tampered.id), tampered);
    const { result: report, outlasted } = await duringTraffic(
      s,
      app.apiKey,
      () => auditWallets(s.kv),
    );
    assert.equal(outlasted, false);
    assert.equal(report.ok, false);
    assert.equal(report.wallets[0].consistent, true, "a discrepancy, not an unreadable wallet");
    assert.equal(report.wallets[0].problems.length, 1);
    const [, counted, charged] = /^sum of usage records vs spent.*: (\S+) != (\S+)$/.exec(
      report.wallets[0].problems[0],
    )!;
    assert.equal(parseUsd(counted) - parseUsd(charged), 7, "the 7 micro-USD the record made up");
    // Put it back, for the audit every test of the suite ends with.
    await s.kv.set(keys.usage(app.appId, tampered.id), usageRecord(app.appId, ids[123], 1));
  }, UNLIMITED));

Deno.test("a usage record landing long after its date, behind the audit's scan, still leaves it clean", () =>
  withService(async (s) => {
    const app = await s.newApp();
    await seedOldUsage(s.kv, app.appId, 1_000);
    // As a charge retried after a long KV outage: dated a day ago, written with its wallet's spent,
    // once the audit has summed the old records.
    const late = usageRecord(app.appId, newId("use", Date.now() - DAY_MS), 5);
    let landed = false;
    const land = async () => {
      const entry = await s.kv.get<WalletRecord>(keys.wallet(app.appId));
      const w = entry.value!;
      const commit = await s.kv.atomic().check(entry)
        .set(keys.wallet(app.appId), { ...w, available: w.available - 5, spent: w.spent + 5 })
        .set(keys.usage(app.appId, late.id), late)
        .commit();
      assert.ok(commit.ok);
      landed = true;
    };
    const kv = new Proxy(s.kv, {
      get(target, name) {
        if (name === "list") {
          return (selector: Deno.KvListSelector, options?: Deno.KvListOptions) => {
            const listed = target.list(selector, options);
            if (landed || !("prefix" in selector) || selector.prefix[0] !== "usage") return listed;
            return (async function* () {
              yield* listed;
              await land();
            })();
          };
        }
        const value = Reflect.get(target, name);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const report = await auditWallets(kv);
    assert.equal(landed, true);
    assert.deepEqual(report.wallets[0].problems, []);
    assert.equal(report.wallets[0].usageRecords, 1_001);
  }));

Deno.test("a wallet that never holds still is reported unreadable with exit 3, not audited forever", async () => {
  const s = await startService();
  try {
    await s.newApp();
    // Every read of a wallet finds a new version, as under more traffic than the audit can outrun.
    let version = 0;
    const kv = new Proxy(s.kv, {
      get(target, name) {
        if (name === "get") {
          return async (key: Deno.KvKey) => {
            const entry = await target.get(key);
            if (key[0] !== "wallets") return entry;
            return { ...entry, versionstamp: String(++version).padStart(20, "0") };
          };
        }
        const value = Reflect.get(target, name);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const report = await auditWallets(kv, { maxTailScans: 3 });
    assert.equal(report.ok, false);
    assert.equal(report.unreadable, 1);
    assert.equal(report.wallets[0].consistent, false);
    assert.match(
      report.wallets[0].problems[0],
      /could not get a consistent view.*traffic too high/,
    );
    const admin = await runAdmin(["audit"], kv, PUBLIC_URL, { rpm: 60, tpm: 100_000 });
    assert.equal(admin.exitCode, 3);
  } finally {
    await s.close();
  }
});

Deno.test("the audit sums an app's usage records without holding them: a million in a 64 MB heap", async () => {
  const probe = new URL("./audit_memory_probe.ts", import.meta.url).pathname;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--max-old-space-size=64", probe, "1000000"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr.slice(-2000));
  const report = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.deepEqual(report, { ok: true, usageRecords: 1_000_000 });
});
