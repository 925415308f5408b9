import assert from "node:assert/strict";
import { ManagementRequestLimit } from "./request_limit.ts";

Deno.test("a burst of one key's requests at once is counted in one commit, exactly up to the limit", async () => {
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
    const answers = await Promise.all(Array.from({ length: 200 }, () => limit.admit("mk_1")));
    assert.equal(answers.filter((a) => a.ok).length, 150);
    assert.deepEqual(answers.at(-1), { ok: false, retryAfter: 45 });
    assert.equal(commits, 1);
  } finally {
    kv.close();
  }
});
