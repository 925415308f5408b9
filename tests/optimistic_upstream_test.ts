/**
 * OPTIMISTIC_UPSTREAM=on: a non-streamed call's upstream starts while its reservation commits when
 * the wallet as this process last committed it says the reservation fits. When another process has
 * spent the money meanwhile, the commit refuses: the upstream is aborted, the client gets 402, and
 * nothing is charged.
 */
import assert from "node:assert/strict";
import { Wallets } from "@/lib/billing/mod.ts";
import { keys, type UsageRecord, type WalletRecord } from "@/lib/db.ts";
import { serveOnLoopback } from "./fakes/common.ts";
import { assertAuditClean, holdInput, startService, usageInput } from "./helpers.ts";
import { completionStream } from "./upstreams.ts";

const BODY = { model: "fake/gpt", messages: [{ role: "user", content: "hi" }], max_tokens: 50 };

function completion() {
  return {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1_800_000_000,
    model: "gpt-test",
    choices: [{
      index: 0,
      message: { role: "assistant", content: "Hello!" },
      finish_reason: "stop",
    }],
    usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
  };
}

/** An upstream that answers at once, or holds its answer until the caller aborts. */
function upstream() {
  const seen = { calls: 0, aborted: 0 };
  let hold = false;
  let called: () => void = () => {};
  let aborted: () => void = () => {};
  const server = serveOnLoopback(async (request) => {
    await request.text();
    seen.calls++;
    called();
    if (hold) {
      await new Promise<void>((done) => {
        if (request.signal.aborted) return done();
        request.signal.addEventListener("abort", () => done(), { once: true });
      });
      seen.aborted++;
      aborted();
    }
    // Every upstream call is streamed (non-streamed requests are assembled from it).
    return completionStream(completion());
  });
  return {
    server,
    seen,
    /** Holds the next answers; resolves when a call arrives and when it is aborted. */
    holdNext() {
      hold = true;
      return {
        called: new Promise<void>((r) => called = r),
        aborted: new Promise<void>((r) => aborted = r),
      };
    },
  };
}

/** A guard against hanging (a missing early start never calls the upstream), not a timing check. */
function within<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 30_000);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

async function list<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<T[]> {
  const out: T[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry.value);
  return out;
}

Deno.test("optimistic upstream: a reservation refused because another process spent the money meanwhile aborts the started upstream call and answers 402, charging nothing", async () => {
  const fake = upstream();
  const dir = await Deno.makeTempDir();
  const s = await startService({
    openaiBaseUrl: fake.server.url,
    kvPath: `${dir}/kv.sqlite3`,
    // The per-request path: a slice would admit the hold from money it already holds.
    env: { OPTIMISTIC_UPSTREAM: "on", WALLET_SLICES: "off", METRICS_TOKEN: "metrics-token" },
  });
  let other: Deno.Kv | undefined;
  try {
    const { appId, apiKey } = await s.newApp();
    // The first call forms this process's memory of the wallet (no prediction before it).
    const first = await s.chat(apiKey, BODY);
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const spentBefore = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!.spent;

    // Another process takes all but a little of the wallet: this process's memory is now stale.
    other = await Deno.openKv(`${dir}/kv.sqlite3`);
    const elsewhere = new Wallets(other, { leaseMs: 60_000 });
    const wallet = (await other.get<WalletRecord>(keys.wallet(appId))).value!;
    const taken = await elsewhere.reserve(appId, {
      amount: wallet.available - 10,
      keyId: "key_elsewhere",
      requestId: "req_elsewhere",
      model: "fake/gpt",
    });
    assert.ok(taken.ok);

    const held = fake.holdNext();
    const starts = s.wallets.stats.optimisticStarts;
    const answer = s.chat(apiKey, BODY);
    await within("the early upstream call", held.called);
    await within("the upstream's abort", held.aborted);
    const res = await answer;
    assert.equal(res.status, 402);
    assert.equal((await res.json()).error.code, "insufficient_credits");
    assert.equal(s.wallets.stats.optimisticStarts, starts + 1, "the upstream was started early");
    assert.equal(s.wallets.stats.mispredictions, 1);
    assert.equal(fake.seen.aborted, 1, "the upstream call was aborted");

    const after = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(after.spent, spentBefore, "nothing charged for the refused request");
    const usage = await list<UsageRecord>(s.kv, keys.appUsage(appId));
    assert.equal(usage.length, 1);
    // The same body plans the same hold: what the aborted call could at most have cost us.
    assert.ok(usage[0].reserved > 0);
    assert.equal(s.wallets.stats.mispredictionExposureMicros, usage[0].reserved);
    const metrics = await (await s.handle(
      new Request("http://127.0.0.1/metrics", {
        headers: { authorization: "Bearer metrics-token" },
      }),
    )).text();
    assert.match(metrics, /^tollbooth_wallet_mispredictions_total 1$/m);
    assert.match(
      metrics,
      new RegExp(
        `^tollbooth_wallet_misprediction_exposure_micros_total ${usage[0].reserved}$`,
        "m",
      ),
    );

    await elsewhere.release(appId, taken.reservation.id);
    await assertAuditClean(s.kv);
  } finally {
    other?.close();
    await s.close();
    await fake.server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("optimistic upstream: when the prediction holds, the call started early is the one answered and charged", async () => {
  const fake = upstream();
  const s = await startService({
    openaiBaseUrl: fake.server.url,
    env: { OPTIMISTIC_UPSTREAM: "on" },
  });
  try {
    const { appId, apiKey } = await s.newApp();
    for (let i = 0; i < 2; i++) {
      const res = await s.chat(apiKey, BODY);
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    assert.equal(s.wallets.stats.optimisticStarts, 1, "the second call started early");
    assert.equal(s.wallets.stats.mispredictions, 0);
    assert.equal(s.wallets.stats.mispredictionExposureMicros, 0);
    assert.equal(fake.seen.calls, 2, "one upstream call per request");
    const usage = await list<UsageRecord>(s.kv, keys.appUsage(appId));
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    assert.equal(wallet.spent, usage.reduce((n, u) => n + u.cost, 0));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.server.close();
  }
});

Deno.test("optimistic upstream: a burst on one process predicts against its own reserves still being decided, so no call starts on money another request of the burst gets", async () => {
  const fake = upstream();
  const s = await startService({
    openaiBaseUrl: fake.server.url,
    env: { OPTIMISTIC_UPSTREAM: "on" },
  });
  try {
    const { appId, apiKey } = await s.newApp();
    const first = await s.chat(apiKey, BODY);
    await first.body?.cancel();
    const [{ reserved: hold }] = await list<UsageRecord>(s.kv, keys.appUsage(appId));
    // Room for five holds and a half, spent by this process, so its view of the wallet is current.
    const wallet = (await s.kv.get<WalletRecord>(keys.wallet(appId))).value!;
    const spend = wallet.available - Math.floor(5.5 * hold);
    const spent = await s.wallets.reserve(appId, holdInput("req_spend", spend));
    assert.ok(spent.ok);
    await s.wallets.settle(appId, spent.reservation.id, usageInput("req_spend", spend));
    const before = { calls: fake.seen.calls, mispredictions: s.wallets.stats.mispredictions };
    const answers = await Promise.all(
      Array.from({ length: 20 }, () =>
        s.chat(apiKey, BODY).then(async (res) => {
          await res.body?.cancel();
          return res.status;
        })),
    );
    const served = answers.filter((status) => status === 200).length;
    assert.ok(served >= 5, `served ${served}`);
    assert.equal(answers.filter((status) => status === 402).length, 20 - served);
    assert.equal(s.wallets.stats.mispredictions, before.mispredictions, "no early call aborted");
    assert.equal(fake.seen.calls - before.calls, served, "an upstream call per request served");
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.server.close();
  }
});

Deno.test("optimistic upstream: once an app is refused for rate, its requests do not start early until the wait is over", async () => {
  const fake = upstream();
  const s = await startService({
    openaiBaseUrl: fake.server.url,
    env: { OPTIMISTIC_UPSTREAM: "on", RATE_LIMIT_RPM: "3" },
  });
  try {
    const { apiKey } = await s.newApp();
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await s.chat(apiKey, BODY);
      await res.body?.cancel();
      statuses.push(res.status);
    }
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    assert.ok(s.wallets.stats.mispredictions <= 1, `${s.wallets.stats.mispredictions}`);
    assert.ok(fake.seen.calls <= 4, `upstream calls: ${fake.seen.calls}`);
  } finally {
    await s.close();
    await fake.server.close();
  }
});
