import assert from "node:assert/strict";
import { createApp } from "@/app.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { KvBusyError, openKv, retryWhileBusy } from "@/lib/core/kv.ts";
import { loadConfig, parseUsd } from "@/lib/core/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { releaseExpiredReservations } from "@/lib/billing/mod.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { faultyKv, type Step } from "./faulty_kv.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  testCatalogFile,
  usageRecords,
  userMessage,
} from "./helpers.ts";

/** A real in-memory KV whose get and commit fail as SQLite does while another process writes. */
async function lockedFor(times: number, stallMs = 0) {
  const kv = await Deno.openKv(":memory:");
  let busy = { get: times, commit: times };
  const attempts = { get: 0, commit: 0 };
  const flaky = new Proxy(kv, {
    get(target, prop) {
      if (prop === "get") {
        return (key: Deno.KvKey) => {
          attempts.get++;
          if (busy.get-- > 0) return Promise.reject(new TypeError("database is locked"));
          return target.get(key);
        };
      }
      if (prop === "atomic") {
        return () => {
          const op = target.atomic();
          const commit = op.commit.bind(op);
          op.commit = () => {
            attempts.commit++;
            if (busy.commit-- > 0) {
              // The process itself stalls meanwhile (a loaded machine, a long task on its loop).
              const until = Date.now() + stallMs;
              while (Date.now() < until) { /* blocked */ }
              return Promise.reject(new TypeError("database is locked"));
            }
            return commit();
          };
          return op;
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return {
    kv: retryWhileBusy(flaky),
    attempts,
    reset(n: number) {
      busy = { get: n, commit: n };
    },
    close: () => kv.close(),
  };
}

Deno.test("reads and commits that meet a locked database are retried until it frees", async () => {
  const store = await lockedFor(3);
  try {
    const result = await store.kv.atomic().check({ key: ["k"], versionstamp: null }).set(["k"], 1)
      .commit();
    assert.ok(result.ok);
    assert.equal(store.attempts.commit, 4);
    assert.equal((await store.kv.get(["k"])).value, 1);
    assert.equal(store.attempts.get, 4);
  } finally {
    store.close();
  }
});

/**
 * A real in-memory KV whose sets, deletes and listings meet a locked database `times` times each; a
 * listing meets it between entries (after `after` of them), as a list reading its next batch does.
 */
async function writesAndListsLockedFor(times: number, after = 0) {
  const kv = await Deno.openKv(":memory:");
  const busy = { set: times, delete: times, list: times };
  const attempts = { set: 0, delete: 0, list: 0 };
  const flaky = new Proxy(kv, {
    get(target, prop) {
      if (prop === "set" || prop === "delete") {
        return (...args: unknown[]) => {
          attempts[prop]++;
          if (busy[prop]-- > 0) return Promise.reject(new TypeError("database is locked"));
          return (target[prop] as (...a: unknown[]) => unknown)(...args);
        };
      }
      if (prop === "list") {
        return (selector: Deno.KvListSelector, options?: Deno.KvListOptions) => {
          attempts.list++;
          const listing = target.list(selector, options);
          let given = 0;
          const next = listing.next.bind(listing);
          listing.next = () => {
            if (given >= after && busy.list-- > 0) {
              return Promise.reject(new TypeError("database is locked"));
            }
            given++;
            return next();
          };
          return listing;
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { kv: retryWhileBusy(flaky), real: kv, attempts, close: () => kv.close() };
}

Deno.test("sets and deletes that meet a locked database are retried until it frees", async () => {
  const store = await writesAndListsLockedFor(3);
  try {
    assert.ok((await store.kv.set(["k"], 1)).ok);
    assert.equal(store.attempts.set, 4);
    assert.equal((await store.real.get(["k"])).value, 1);
    await store.kv.delete(["k"]);
    assert.equal(store.attempts.delete, 4);
    assert.equal((await store.real.get(["k"])).value, null);
  } finally {
    store.close();
  }
});

Deno.test("a listing that meets a locked database part-way goes on where it stopped, each entry once, within its limit", async () => {
  const store = await writesAndListsLockedFor(3, 2);
  try {
    for (let i = 0; i < 6; i++) await store.real.set(["l", i], i);
    const all = await Array.fromAsync(store.kv.list<number>({ prefix: ["l"] }));
    assert.deepEqual(all.map((e) => e.value), [0, 1, 2, 3, 4, 5]);
    const busy = await writesAndListsLockedFor(2, 2);
    try {
      for (let i = 0; i < 6; i++) await busy.real.set(["l", i], i);
      const listing = busy.kv.list<number>({ prefix: ["l"] }, { limit: 4, reverse: true });
      const limited = await Array.fromAsync(listing);
      assert.deepEqual(limited.map((e) => e.value), [5, 4, 3, 2]);
      // The cursor is the last entry's, as a listing's own: the next page starts after it.
      const rest = await Array.fromAsync(
        busy.real.list<number>({ prefix: ["l"] }, { reverse: true, cursor: listing.cursor }),
      );
      assert.deepEqual(rest.map((e) => e.value), [1, 0]);
    } finally {
      busy.close();
    }
  } finally {
    store.close();
  }
});

Deno.test("a lock taken by turns many times over is waited out, up to two seconds", async () => {
  const store = await lockedFor(30);
  try {
    assert.equal((await store.kv.get(["k"])).value, null);
    assert.equal(store.attempts.get, 31);
  } finally {
    store.close();
  }
});

Deno.test("a busy commit is tried again even when the process's own stalls spent the two seconds", async () => {
  // Three turns of the lock lost, each while the process stood still for 1.1 s: only the process
  // was slow, and the fourth try finds the lock free.
  const store = await lockedFor(3, 1_100);
  try {
    const result = await store.kv.atomic().set(["k"], 1).commit();
    assert.ok(result.ok);
    assert.equal(store.attempts.commit, 4);
  } finally {
    store.close();
  }
});

Deno.test("a database locked for too long, or any other error, is not hidden", async () => {
  const store = await lockedFor(1_000_000);
  try {
    await assert.rejects(
      store.kv.get(["k"]),
      (e: Error) => e instanceof KvBusyError && /database is locked/.test(e.message),
    );
    store.reset(0);
    await assert.rejects(
      store.kv.atomic().set(["k"], 1).sum(["k"], 1n).commit(),
      (e: Error) => !/database is locked/.test(e.message),
    );
  } finally {
    store.close();
  }
});

Deno.test("two processes' worth of handles on one file keep plain writes working while handles open", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/kv.sqlite3`;
  const main = retryWhileBusy(await Deno.openKv(path));
  try {
    // Handles opening and closing beside a writer: each open does housekeeping under the lock.
    const churn = (async () => {
      for (let i = 0; i < 20; i++) (await Deno.openKv(path)).close();
    })();
    const writes = Array.from(
      { length: 200 },
      (_, i) =>
        main.atomic().check({ key: ["w", i], versionstamp: null }).set(["w", i], i).commit(),
    );
    const results = await Promise.all(writes);
    await churn;
    assert.ok(results.every((r) => r.ok));
  } finally {
    main.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a KV file another process holds locked past SQLite's own five-second wait is opened once it lets go", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/kv.sqlite3`;
  // A new file locked whole, as a second instance found it while the first set the file up.
  const holder = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `import { DatabaseSync } from "node:sqlite";
       const db = new DatabaseSync(${JSON.stringify(path)});
       db.exec("BEGIN EXCLUSIVE");
       console.log("locked");
       await new Promise((r) => setTimeout(r, 6_000));
       db.exec("COMMIT");`,
    ],
    stdout: "piped",
  }).spawn();
  const reader = holder.stdout.getReader();
  await reader.read();
  reader.releaseLock();
  try {
    const started = Date.now();
    const kv = await openKv(path);
    assert.ok(Date.now() - started >= 5_000, "it waited for the lock");
    await kv.set(["opened"], true);
    assert.equal((await kv.get(["opened"])).value, true);
    kv.close();
  } finally {
    await holder.stdout.cancel();
    await holder.status;
    await Deno.remove(dir, { recursive: true });
  }
});

/** The whole app on a KV whose commits meet a held lock while `busy()` says so. */
async function appOnBusyKv(
  busy: (step: Step) => boolean,
  options: { walletMaxAttempts?: number } = {},
) {
  const real = await Deno.openKv(":memory:");
  const faulty = faultyKv(real, (step) => busy(step) ? "busy" : "ok");
  const env = { PUBLIC_URL, RATE_LIMIT_RPM: "1000000", METRICS_TOKEN: "metrics-token" };
  const logged: Record<string, unknown>[] = [];
  const { app, wallets } = createApp({
    kv: retryWhileBusy(faulty.kv),
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(), env),
    log: (f) => {
      logged.push(f);
      if (f.event === "unhandled_error") console.error(f.error, f.stack);
    },
    walletMaxAttempts: options.walletMaxAttempts,
  });
  const { app: record, key } = await createAppRecord(real, { name: "busy" });
  const post = (path: string, body: unknown) =>
    app.fetch(
      new Request(`${PUBLIC_URL}/v1${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }),
    );
  const metrics = async () =>
    await (await app.fetch(
      new Request(`${PUBLIC_URL}/metrics`, {
        headers: { authorization: "Bearer metrics-token" },
      }),
    )).text();
  const close = async () => {
    await wallets.drain();
    real.close();
  };
  return { real, appId: record.id, post, metrics, logged, wallets, close };
}

/** A metric's value in /metrics' text (0 when absent). */
function metricValue(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}

/**
 * The app on a KV that locks once the first request's hold is committed, past the settle's tries
 * (two of them here, 2 s each, rather than 40: the wallet gives up the same way), until `unlock()`.
 */
async function appWhoseSettleMeetsALock() {
  let commits = 0;
  let locked = true;
  const s = await appOnBusyKv((step) => step === "commit" && ++commits > 1 && locked, {
    walletMaxAttempts: 2,
  });
  return { ...s, unlock: () => locked = false };
}

/** What the loss's log line says was not charged, once it is logged. */
function notChargedOf(logged: Record<string, unknown>[], event: string): number {
  const line = logged.find((f) => f.event === event);
  assert.ok(line, `a ${event} line: ${JSON.stringify(logged.map((f) => f.event))}`);
  assert.ok(typeof line.notCharged === "number" && line.notCharged > 0, JSON.stringify(line));
  assert.ok(typeof line.promptTokens === "number" && line.promptTokens > 0, JSON.stringify(line));
  assert.ok(typeof line.completionTokens === "number", JSON.stringify(line));
  return line.notCharged;
}

Deno.test("a non-streamed request whose settle meets a lock held past all its tries answers 503 service_unavailable with Retry-After, not 500", async () => {
  const s = await appWhoseSettleMeetsALock();
  try {
    const res = await s.post("/chat/completions", CHAT);
    const { error } = await res.json();
    assert.equal(res.status, 503, JSON.stringify(error));
    assert.equal(error.code, "service_unavailable");
    assert.equal(error.type, "api_error");
    assert.match(error.message, /nothing was charged/);
    assert.equal(res.headers.get("retry-after"), "1");
    assert.equal(res.headers.get("tollbooth-request-cost"), null);
  } finally {
    s.unlock();
    await s.close();
  }
});

/** A chat request whose settle meets the lock: answered 503, and what its log line lost. */
async function chatNotBilled(s: Awaited<ReturnType<typeof appWhoseSettleMeetsALock>>) {
  const res = await s.post("/chat/completions", CHAT);
  await res.body?.cancel();
  assert.equal(res.status, 503);
  return notChargedOf(s.logged, "stream_settle_failed");
}

Deno.test("the usage a settle could not bill is logged with its cost and recorded once as the app's uncharged when KV frees: the ledger sums to the credits", async () => {
  const s = await appWhoseSettleMeetsALock();
  try {
    const lost = await chatNotBilled(s);
    assert.equal(s.wallets.stats.unbilledMicros, lost);
    s.unlock();
    // The hold ends recording the usage, a second after the failure, before its lease runs out.
    await new Promise((r) => setTimeout(r, 1_200));
    await s.wallets.drain();
    const usage = await usageRecords(s.real, s.appId);
    assert.deepEqual(usage.map((u) => [u.cost, u.uncharged]), [[0, lost]]);
    const wallet = (await s.real.get<WalletRecord>(keys.wallet(s.appId))).value!;
    assert.equal(wallet.spent, usage.reduce((sum, u) => sum + u.cost, 0));
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.available + wallet.reserved + wallet.spent, 5_000_000);
    const counted = await s.real.get<Deno.KvU64>(keys.appUncharged(s.appId));
    assert.equal(Number(counted.value?.value), lost);
    const metrics = await s.metrics();
    assert.equal(metricValue(metrics, "tollbooth_uncharged_micro_usd_total"), lost);
    assert.equal(metricValue(metrics, "tollbooth_wallet_unbilled_micros_total"), lost);
    assert.equal(metricValue(metrics, "tollbooth_wallet_unbilled_recorded_micros_total"), lost);
    await assertAuditClean(s.real);
  } finally {
    s.unlock();
    await s.close();
  }
});

Deno.test("a hold the sweeper released before the loss could be recorded is not counted as uncharged a second way", async () => {
  const s = await appWhoseSettleMeetsALock();
  try {
    const lost = await chatNotBilled(s);
    s.unlock();
    const later = Date.now() + 24 * 3600_000;
    assert.equal(await releaseExpiredReservations(s.real, s.wallets, s.appId, later), 1);
    await new Promise((r) => setTimeout(r, 1_200));
    await s.wallets.drain();
    assert.deepEqual(await usageRecords(s.real, s.appId), []);
    const wallet = (await s.real.get<WalletRecord>(keys.wallet(s.appId))).value!;
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [5_000_000, 0, 0]);
    assert.equal((await s.real.get(keys.appUncharged(s.appId))).value, null);
    const metrics = await s.metrics();
    assert.equal(metricValue(metrics, "tollbooth_uncharged_micro_usd_total"), 0);
    assert.equal(metricValue(metrics, "tollbooth_wallet_unbilled_micros_total"), lost);
    assert.equal(metricValue(metrics, "tollbooth_wallet_unbilled_recorded_micros_total"), 0);
    await assertAuditClean(s.real);
  } finally {
    s.unlock();
    await s.close();
  }
});

Deno.test("a stream whose settle meets a lock held past all its tries ends with a service_unavailable error event and logs the usage and cost it could not bill", async () => {
  const s = await appWhoseSettleMeetsALock();
  try {
    const res = await s.post("/chat/completions", { ...CHAT, stream: true });
    assert.equal(res.status, 200);
    const text = await res.text();
    const last = text.trim().split("\n\n").at(-1)!;
    const { error } = JSON.parse(last.replace(/^data: /, ""));
    assert.equal(error.code, "service_unavailable", last);
    assert.match(error.message, /nothing was charged/);
    assert.doesNotMatch(text, /\[DONE\]/);
    notChargedOf(s.logged, "stream_settle_failed");
  } finally {
    s.unlock();
    await s.close();
  }
});

Deno.test("embeddings whose settle meets a lock held past all its tries answer 503 and log the cost they could not bill", async () => {
  const s = await appWhoseSettleMeetsALock();
  try {
    const res = await s.post("/embeddings", EMBED);
    const { error } = await res.json();
    assert.equal(res.status, 503, JSON.stringify(error));
    assert.equal(res.headers.get("retry-after"), "1");
    const line = s.logged.find((f) => f.event === "settle_failed");
    assert.ok(line && typeof line.notCharged === "number" && line.notCharged > 0);
  } finally {
    s.unlock();
    await s.close();
  }
});

const CHAT = { model: "tollbooth/echo", messages: userMessage("one two three") };
const EMBED = { model: "tollbooth/embed", input: "one two three" };
const RESPONSE = { model: "tollbooth/echo", input: "one two three", max_output_tokens: 16 };

Deno.test("a KV whose lock stays held past every retry answers 503 service_unavailable with Retry-After, never a 500, and reserves nothing", async () => {
  const s = await appOnBusyKv((step) => step === "commit");
  try {
    for (const [path, body] of [["/chat/completions", CHAT], ["/embeddings", EMBED]] as const) {
      const started = Date.now();
      const res = await s.post(path, body);
      const { error } = await res.json();
      assert.equal(res.status, 503, `${path}: ${JSON.stringify(error)}`);
      assert.equal(error.code, "service_unavailable", path);
      assert.equal(error.type, "api_error", path);
      assert.equal(res.headers.get("retry-after"), "1", path);
      // The wait is the KV's own bound (2 s, 20 tries), not the wallet's 40 tries of it.
      assert.ok(Date.now() - started < 6_000, `${path} answered in ${Date.now() - started} ms`);
    }
    const wallet = (await s.real.get<WalletRecord>(keys.wallet(s.appId))).value!;
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [5_000_000, 0, 0]);
    await assertAuditClean(s.real);
  } finally {
    await s.close();
  }
});

Deno.test("requests that meet a lock held by turns for a second are answered and charged exactly once: spent equals the usage records and the costs the clients saw", async () => {
  const busyUntil = Date.now() + 1_000;
  const s = await appOnBusyKv((step) => step === "commit" && Date.now() < busyUntil);
  try {
    const bodies = [["/chat/completions", CHAT], ["/embeddings", EMBED], ["/responses", RESPONSE]];
    const answers = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const [path, body] = bodies[i % bodies.length];
        const res = await s.post(path as string, body);
        await res.body?.cancel();
        return { status: res.status, cost: res.headers.get("tollbooth-request-cost") };
      }),
    );
    assert.deepEqual(answers.map((a) => a.status), answers.map(() => 200), JSON.stringify(answers));
    const seen = answers.reduce((sum, a) => sum + parseUsd(a.cost!), 0);
    await new Promise((r) => setTimeout(r, 100));
    const usage = await usageRecords(s.real, s.appId);
    assert.equal(usage.length, 12);
    const wallet = (await s.real.get<WalletRecord>(keys.wallet(s.appId))).value!;
    assert.equal(wallet.spent, usage.reduce((sum, u) => sum + u.cost, 0));
    assert.equal(wallet.spent, seen);
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.available, 5_000_000 - wallet.spent);
    await assertAuditClean(s.real);
  } finally {
    await s.close();
  }
});
