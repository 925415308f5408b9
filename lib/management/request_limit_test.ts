import assert from "node:assert/strict";
import { ManagementRequestLimit } from "./request_limit.ts";

Deno.test("a burst of one owner's requests at once is counted in one commit, exactly up to the limit, each told the room left after it", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    let commits = 0;
    const counting = new Proxy(kv, {
      get(target, prop) {
        const value = Reflect.get(target, prop);
        if (prop === "atomic") commits++;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const limit = new ManagementRequestLimit(counting, 150, () => 15_000);
    const answers = await Promise.all(Array.from({ length: 200 }, () => limit.admit("own_1")));
    assert.equal(answers.filter((a) => a.ok).length, 150);
    assert.deepEqual(
      answers.slice(0, 150).map((a) => a.status.remaining),
      Array.from({ length: 150 }, (_, i) => 149 - i),
    );
    assert.deepEqual(answers.at(-1), {
      ok: false,
      retryAfter: 45,
      status: { limit: 150, remaining: 0, resetMs: 45_000 },
    });
    assert.equal(commits, 1);
  } finally {
    kv.close();
  }
});

Deno.test("two management limits on one KV (two processes) count one owner's requests at once in one window, exactly up to the limit", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const a = new ManagementRequestLimit(kv, 10, () => 15_000);
    const b = new ManagementRequestLimit(kv, 10, () => 15_000);
    const answers = await Promise.all(
      Array.from({ length: 11 }, (_, i) => (i % 2 ? a : b).admit("own_1")),
    );
    assert.equal(answers.filter((x) => x.ok).length, 10);
    assert.deepEqual(
      answers.filter((x) => x.ok).map((x) => x.status.remaining).sort((x, y) => x - y),
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    );
  } finally {
    kv.close();
  }
});

Deno.test("another owner's requests have their own window", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const limit = new ManagementRequestLimit(kv, 2, () => 15_000);
    const [first, second, over] = await Promise.all([
      limit.admit("own_1"),
      limit.admit("own_1"),
      limit.admit("own_1"),
    ]);
    assert.deepEqual([first.ok, second.ok, over.ok], [true, true, false]);
    const other = await limit.admit("own_2");
    assert.deepEqual(other, { ok: true, status: { limit: 2, remaining: 1, resetMs: 45_000 } });
  } finally {
    kv.close();
  }
});
