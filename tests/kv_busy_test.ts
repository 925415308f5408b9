import assert from "node:assert/strict";
import { KvBusyError, openKv, retryWhileBusy } from "@/lib/core/kv.ts";

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
