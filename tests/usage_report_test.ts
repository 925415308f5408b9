import assert from "node:assert/strict";
import { keys, type UsageRecord, type UsageRollupChunk, type WalletRecord } from "@/lib/db.ts";
import { Wallets } from "@/lib/billing/mod.ts";
import { type ReportGrouping, type UsageFilter, usageReport } from "@/lib/management/mod.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { newId } from "@/lib/core/mod.ts";
import { assertAuditClean, settleInput, usageRecords } from "./helpers.ts";

const DAY_MS = 86_400_000;
const FIRST_DAY = Date.parse("2024-03-01T00:00:00Z");
const at = (day: number, hour = 12) => FIRST_DAY + day * DAY_MS + hour * 3_600_000;
const RANGE = { from: "2024-03-01", to: "2024-03-05" };

/**
 * Counts the range reads (`list`), the entries they gave (`listed`) and key reads (`get`,
 * `getMany`) made through it.
 */
function countingKv(kv: Deno.Kv) {
  const calls = { list: 0, listed: 0, get: 0 };
  const counted = new Proxy(kv, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      if (prop === "list") {
        return async function* (...args: Parameters<Deno.Kv["list"]>) {
          calls.list++;
          for await (const entry of target.list(...args)) {
            calls.listed++;
            yield entry;
          }
        };
      }
      if (prop === "get" || prop === "getMany") calls.get++;
      return value.bind(target);
    },
  });
  return { kv: counted, calls };
}

/** A usage record of the app created at `createdAt`, as a settle would write it. */
function usageRecordAt(appId: string, createdAt: number, user?: string): UsageRecord {
  const id = newId("use", createdAt);
  return {
    ...settleInput(7),
    id,
    appId,
    uncharged: 0,
    reserved: 7,
    ...(user === undefined ? {} : { user }),
    createdAt,
  };
}

/**
 * Lands records in one commit as a build does: since 2026-11-28 raising the day's version and its
 * record count by their number; before, (`olderBuild`) its version by one.
 */
async function land(
  kv: Deno.Kv,
  appId: string,
  records: UsageRecord[],
  { olderBuild = false } = {},
) {
  const atomic = kv.atomic();
  for (const r of records) atomic.set(keys.usage(appId, r.id), r);
  const day = new Date(records[0].createdAt).toISOString().slice(0, 10);
  if (olderBuild) atomic.sum(keys.usageDayVersion(appId, day), 1n);
  else {
    atomic.sum(keys.usageDayVersion(appId, day), BigInt(records.length))
      .sum(keys.usageDayRecords(appId, day), BigInt(records.length));
  }
  assert.ok((await atomic.commit()).ok);
}

async function withWallet(
  options: { slices?: true },
  fn: (ctx: {
    kv: Deno.Kv;
    appId: string;
    spend: (when: number, input: Partial<ReturnType<typeof settleInput>>) => Promise<void>;
  }) => Promise<void>,
) {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "reports" });
    let clock = Date.now();
    // With slices, charges reach KV in a slice's post (`writeCharges`), not in the settle's batch.
    const wallets = new Wallets(kv, {
      leaseMs: 60_000,
      now: () => clock,
      ...options.slices ? { slices: { postEveryMs: 5 } } : {},
    });
    let n = 0;
    /** A request settled at `when`: its usage record is created on that day, whenever it lands. */
    const spend = async (when: number, input: Partial<ReturnType<typeof settleInput>>) => {
      clock = when;
      const requestId = `req_${n++}`;
      const hold = await wallets.reserve(app.id, {
        amount: 10_000,
        keyId: input.keyId ?? "key_test",
        requestId,
        model: input.model ?? "tollbooth/echo",
      });
      assert.ok(hold.ok);
      const settled = await wallets.settle(app.id, hold.reservation.id, {
        ...settleInput(100),
        requestId,
        ...input,
      });
      assert.ok(settled.settled);
      if (options.slices) await wallets.drain();
    };
    await fn({ kv, appId: app.id, spend });
    await wallets.drain();
    await assertAuditClean(kv);
  } finally {
    kv.close();
  }
}

/** The report as it was computed before rollups: every record of the range, summed. */
function reportOf(
  records: UsageRecord[],
  groupBy: ReportGrouping,
  filter: UsageFilter = {},
) {
  const groups = new Map<string | null, {
    group: string | null;
    requests: number;
    promptTokens: number;
    completionTokens: number;
    cost: number;
  }>();
  for (const r of records) {
    if (
      (filter.user !== undefined && r.user !== filter.user) ||
      (filter.keyId !== undefined && r.keyId !== filter.keyId) ||
      (filter.model !== undefined && r.model !== filter.model)
    ) continue;
    const group = groupBy === "day"
      ? new Date(r.createdAt).toISOString().slice(0, 10)
      : groupBy === "model"
      ? r.model
      : groupBy === "key"
      ? r.keyId
      : r.user ?? null;
    const row = groups.get(group) ??
      { group, requests: 0, promptTokens: 0, completionTokens: 0, cost: 0 };
    row.requests++;
    row.promptTokens += r.promptTokens;
    row.completionTokens += r.completionTokens;
    row.cost += r.cost;
    groups.set(group, row);
  }
  return [...groups.values()].sort((a, b) =>
    a.group === b.group
      ? 0
      : a.group === null
      ? -1
      : b.group === null
      ? 1
      : a.group < b.group
      ? -1
      : 1
  );
}

Deno.test("a report's second call reads the cached days and scans only days that changed", () =>
  withWallet({}, async ({ kv, appId, spend }) => {
    for (const day of [0, 1, 2, 3]) await spend(at(day), { user: `user_${day}` });
    const { kv: counted, calls } = countingKv(kv);

    const first = await usageReport(counted, appId, { groupBy: "user", ...RANGE });
    assert.equal(calls.list, 5, "each of the five days summed from its records once");
    assert.deepEqual(first.map((r) => r.group), ["user_0", "user_1", "user_2", "user_3"]);

    calls.list = calls.get = 0;
    const second = await usageReport(counted, appId, { groupBy: "user", ...RANGE });
    assert.deepEqual(second, first);
    assert.equal(calls.list, 0, "no day changed: no record read");
    assert.equal(calls.get, 2, "five versions and five rollups, ten keys to a read");

    await spend(at(4), { user: "user_4" });
    calls.list = 0;
    const third = await usageReport(counted, appId, { groupBy: "user", ...RANGE });
    assert.equal(calls.list, 1, "only the day that changed is summed again");
    assert.deepEqual(third.map((r) => r.group), ["user_0", "user_1", "user_2", "user_3", "user_4"]);
  }));

for (const via of ["settle batch", "slice post"] as const) {
  Deno.test(`a usage record landing late in a closed day invalidates that day's rollup and the report includes it (${via})`, () =>
    withWallet({ slices: via === "slice post" || undefined }, async ({ kv, appId, spend }) => {
      await spend(at(0), { model: "m/one" });
      await spend(at(1), { model: "m/one" });
      await spend(at(4), { model: "m/one" });
      const { kv: counted, calls } = countingKv(kv);
      const before = await usageReport(counted, appId, { groupBy: "day", ...RANGE });
      assert.deepEqual(before.map((r) => [r.group, r.requests]), [
        ["2024-03-01", 1],
        ["2024-03-02", 1],
        ["2024-03-05", 1],
      ]);
      // Settled late on the second day (a slice's next post, a retry): it lands after that day closed
      // and after its rollup was cached.
      await spend(at(1, 23), { model: "m/two" });
      calls.list = 0;
      const after = await usageReport(counted, appId, { groupBy: "day", ...RANGE });
      assert.equal(calls.list, 1);
      assert.deepEqual(after.map((r) => [r.group, r.requests]), [
        ["2024-03-01", 1],
        ["2024-03-02", 2],
        ["2024-03-05", 1],
      ]);
      const filtered = await usageReport(counted, appId, {
        groupBy: "day",
        ...RANGE,
        filter: { model: "m/two" },
      });
      assert.deepEqual(filtered.map((r) => [r.group, r.requests]), [["2024-03-02", 1]]);
    }));
}

Deno.test("a changed day's report reads only the records added since its rollup", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "busy" });
    const day = "2024-03-02";
    const all: UsageRecord[] = [];
    for (let first = 0; first < 2_000; first += 500) {
      const batch = Array.from(
        { length: 500 },
        (_, n) => usageRecordAt(app.id, at(1, 1) + first + n),
      );
      await land(kv, app.id, batch);
      all.push(...batch);
    }
    const { kv: counted, calls } = countingKv(kv);
    const range = { groupBy: "day" as const, from: day, to: day };
    assert.deepEqual(await usageReport(counted, app.id, range), reportOf(all, "day"));
    assert.equal(calls.listed, 2_000, "the first report sums the day");

    for (let round = 1; round <= 3; round++) {
      const added = Array.from(
        { length: 10 },
        (_, n) => usageRecordAt(app.id, at(1, 2 + round) + n, `user_${n % 3}`),
      );
      await land(kv, app.id, added);
      all.push(...added);
      calls.listed = 0;
      for (const groupBy of ["day", "user"] as const) {
        assert.deepEqual(
          await usageReport(counted, app.id, { ...range, groupBy }),
          reportOf(all, groupBy),
          `${groupBy}, round ${round}`,
        );
      }
    }
    // The user grouping's first report summed the day; the day grouping's read its last rollup's
    // last record and the ten added.
    calls.listed = 0;
    await land(kv, app.id, [usageRecordAt(app.id, at(1, 9))]);
    await usageReport(counted, app.id, range);
    assert.equal(calls.listed, 2, "the rollup's last record and the one added");
  } finally {
    kv.close();
  }
});

/** A day of 20 records landed at noon and reported once (its rollup cached), for `fn` to change. */
async function withReportedDay(
  fn: (day: {
    kv: Deno.Kv;
    appId: string;
    all: UsageRecord[];
    range: { groupBy: "day"; from: string; to: string };
  }) => Promise<void>,
) {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "reported" });
    const all = Array.from({ length: 20 }, (_, n) => usageRecordAt(app.id, at(1, 12) + n));
    await land(kv, app.id, all);
    const range = { groupBy: "day" as const, from: "2024-03-02", to: "2024-03-02" };
    await usageReport(kv, app.id, range);
    await fn({ kv, appId: app.id, all, range });
  } finally {
    kv.close();
  }
}

Deno.test("a record landing late, before the rollup's last, has its day summed whole", () =>
  withReportedDay(async ({ kv, appId, all, range }) => {
    const late = usageRecordAt(appId, at(1, 3));
    await land(kv, appId, [late]);
    all.push(late);
    const { kv: counted, calls } = countingKv(kv);
    assert.deepEqual(await usageReport(counted, appId, range), reportOf(all, "day"));
    assert.equal(calls.list, 2, "summed on from the rollup, short of the day's count, then whole");
    assert.equal(calls.listed, 1 + all.length, "the rollup's last record, then the day once");
  }));

Deno.test("a day an older build wrote to (one version a commit) is never taken from a partial sum", () =>
  withReportedDay(async ({ kv, appId, all, range }) => {
    // An older build lands a late record without counting it; this build lands one after the
    // rollup's last: the sum on from the rollup then has as many records as this build counted.
    const late = usageRecordAt(appId, at(1, 3));
    await land(kv, appId, [late], { olderBuild: true });
    const next = usageRecordAt(appId, at(1, 20));
    await land(kv, appId, [next]);
    all.push(late, next);
    assert.deepEqual(await usageReport(kv, appId, range), reportOf(all, "day"));
  }));

Deno.test("a rollup of records the counts never saw is not summed on from", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "before versions" });
    // Written by a build before day versions: neither count raised, its rollup cached at version 0.
    const uncounted = usageRecordAt(app.id, at(1, 10));
    await kv.set(keys.usage(app.id, uncounted.id), uncounted);
    const range = { groupBy: "day" as const, from: "2024-03-02", to: "2024-03-02" };
    assert.deepEqual(await usageReport(kv, app.id, range), reportOf([uncounted], "day"));
    // A late record and a new one, counted: the walk after the rollup misses the late one, and
    // the uncounted record would make up for it in the counts.
    const late = usageRecordAt(app.id, at(1, 9));
    const next = usageRecordAt(app.id, at(1, 11));
    await land(kv, app.id, [late, next]);
    assert.deepEqual(
      await usageReport(kv, app.id, range),
      reportOf([uncounted, late, next], "day"),
    );
  } finally {
    kv.close();
  }
});

Deno.test("a rollup larger than one KV value is chunked", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "reseller" });
    const day = "2024-03-02";
    // 5,000 end users on one day, landed as a commit lands them: records and the day's version.
    for (let first = 0; first < 5_000; first += 100) {
      const atomic = kv.atomic();
      for (let n = first; n < first + 100; n++) {
        const createdAt = at(1) + n;
        const id = newId("use", createdAt);
        atomic.set(
          keys.usage(app.id, id),
          {
            ...settleInput(7),
            id,
            appId: app.id,
            uncharged: 0,
            reserved: 7,
            user: `end-user-with-a-long-identifier-${String(n).padStart(5, "0")}`,
            createdAt,
          } satisfies UsageRecord,
        );
      }
      atomic.sum(keys.usageDayVersion(app.id, day), 100n).sum(
        keys.usageDayRecords(app.id, day),
        100n,
      );
      assert.ok((await atomic.commit()).ok);
    }
    const { kv: counted, calls } = countingKv(kv);
    const first = await usageReport(counted, app.id, { groupBy: "user", from: day, to: day });
    assert.equal(first.length, 5_000);

    const stored = await Array.fromAsync(
      kv.list<UsageRollupChunk>({ prefix: ["usage_rollups", app.id, day, "user"] }),
    );
    assert.ok(stored.length > 10, `${stored.length} parts, more than one commit's worth`);
    assert.ok(stored.every((e) => e.value.chunks === stored.length));

    calls.list = 0;
    const second = await usageReport(counted, app.id, { groupBy: "user", from: day, to: day });
    assert.equal(calls.list, 0, "read from its parts");
    assert.deepEqual(second, first);
    assert.equal(second.reduce((sum, r) => sum + r.cost, 0), 35_000);
  } finally {
    kv.close();
  }
});

Deno.test("a report's totals equal the sum of its usage records, cached or not, for every grouping and filter", () =>
  withWallet({}, async ({ kv, appId, spend }) => {
    const users = ["alice", "bob", undefined];
    for (let n = 0; n < 30; n++) {
      await spend(at(n % 5, n % 24), {
        user: users[n % 3],
        model: n % 2 ? "m/one" : "m/two",
        keyId: n % 4 ? "key_a" : "key_b",
        cost: 100 + n * 37,
        promptTokens: n,
        completionTokens: 2 * n,
      });
    }
    const records = await usageRecords(kv, appId);
    const wallet = (await kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const filters: UsageFilter[] = [{}, { user: "alice" }, { model: "m/one" }, {
      keyId: "key_b",
      user: "bob",
    }];
    for (const groupBy of ["day", "model", "key", "user"] as const) {
      for (const filter of filters) {
        for (const pass of ["summed", "cached"]) {
          const report = await usageReport(kv, appId, { groupBy, ...RANGE, filter });
          assert.deepEqual(report, reportOf(records, groupBy, filter), `${groupBy} ${pass}`);
          if (Object.keys(filter).length === 0) {
            assert.equal(report.reduce((sum, r) => sum + r.cost, 0), wallet.spent);
          }
        }
      }
    }
  }));

for (const via of ["settle batch", "slice post"] as const) {
  Deno.test(`reports between which records land equal the sum of the records, for every grouping (${via})`, () =>
    withWallet({ slices: via === "slice post" || undefined }, async ({ kv, appId, spend }) => {
      const users = ["alice", "bob", undefined];
      let n = 0;
      for (let round = 0; round < 3; round++) {
        for (let i = 0; i < 8; i++, n++) {
          await spend(at(n % 3, (n * 7) % 24), {
            user: users[n % 3],
            model: n % 2 ? "m/one" : "m/two",
            keyId: n % 4 ? "key_a" : "key_b",
            cost: 100 + n * 37,
          });
        }
        const records = await usageRecords(kv, appId);
        for (const groupBy of ["day", "model", "key", "user"] as const) {
          for (const filter of [{}, { user: "alice" }] as UsageFilter[]) {
            const report = await usageReport(kv, appId, { groupBy, ...RANGE, filter });
            assert.deepEqual(report, reportOf(records, groupBy, filter), `${groupBy} ${round}`);
          }
        }
      }
    }));
}
