/**
 * Wallet slices (lib/billing/slices.ts) in real processes on one KV file: several processes
 * serving one hot wallet charge exactly what they announced, and a SIGKILL with reservations
 * admitted against a slice and charges not yet posted loses at most those charges, overcharges
 * nothing, overdraws nothing, and leaves an audit that is clean once the slice's lease ran out.
 */
import assert from "node:assert/strict";
import { createApp as createAppRecord, issueKey } from "@/lib/tenants/mod.ts";
import { setRateLimits } from "@/lib/billing/ratelimit.ts";
import { keys, type UsageRecord, type WalletRecord, type WalletSliceRecord } from "@/lib/db.ts";
import { parseUsd } from "@/lib/core/mod.ts";
import { chat, instanceFiles, PRICEY, startInstance } from "./instances.ts";
import { assertAuditClean, startService, userMessage } from "./helpers.ts";

async function waitFor(what: string, check: () => Promise<boolean>) {
  // A guard against hanging, not a timing assertion: the slice's lease is 2 s, the sweep 1 s.
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const SLOW = { ...PRICEY, id: "tollbooth/slow", provider: "slow" };

/** PRICEY, and SLOW from a simulator that streams a token every 200 ms: its requests stay in flight. */
async function filesWithSlowModel() {
  const files = await instanceFiles({ models: [PRICEY, SLOW] });
  const catalog = JSON.parse(await Deno.readTextFile(files.modelsFile));
  catalog.providers.slow = { kind: "simulator", token_delay_ms: 200 };
  await Deno.writeTextFile(files.modelsFile, JSON.stringify(catalog));
  return files;
}

async function list<T>(kv: Deno.Kv, prefix: Deno.KvKey): Promise<T[]> {
  const out: T[] = [];
  for await (const entry of kv.list<T>({ prefix })) out.push(entry.value);
  return out;
}

interface Answer {
  status: number;
  requestId: string | null;
  cost: number | null;
}

async function answer(res: Response): Promise<Answer> {
  await res.body?.cancel();
  const cost = res.headers.get("tollbooth-request-cost");
  return {
    status: res.status,
    requestId: res.headers.get("tollbooth-request-id"),
    cost: cost === null ? null : parseUsd(cost),
  };
}

Deno.test("three processes on one KV serving one hot wallet from slices: what left the wallet is exactly the sum of the answered Tollbooth-Request-Cost, never below zero, audit clean", async () => {
  const files = await instanceFiles({ models: [PRICEY] });
  const env = {
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    WALLET_SLICES: "on",
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
  };
  const instances = await Promise.all([0, 1, 2].map(() => startInstance(env)));
  const kv = await Deno.openKv(files.kvPath);
  try {
    const { app, key } = await createAppRecord(kv, { name: "hot" });
    // About 0.05 USD reserved and charged per request: the 5.00 USD starter covers about 100 of
    // the 300 sent, so slices are taken, grown, exhausted and the rest refused with 402.
    const body = { model: PRICEY.id, messages: [{ role: "user", content: "go" }], max_tokens: 50 };
    const answers: Answer[] = [];
    for (let wave = 0; wave < 3; wave++) {
      answers.push(
        ...await Promise.all(
          Array.from(
            { length: 100 },
            (_, i) => chat(instances[i % 3], key.apiKey, body).then(answer),
          ),
        ),
      );
    }
    const paid = answers.filter((a) => a.status === 200);
    assert.deepEqual(
      [...new Set(answers.map((a) => a.status))].sort(),
      [200, 402],
      "some paid, the rest refused for credits",
    );
    for (const instance of instances) assert.equal((await instance.stop()).code, 0);

    const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    const announced = paid.reduce((n, a) => n + a.cost!, 0);
    assert.equal(wallet.spent, announced, "charged = sum of the answered Tollbooth-Request-Cost");
    assert.ok(wallet.available >= 0);
    assert.equal(wallet.reserved, 0, "every slice was given back at shutdown");
    assert.deepEqual(await list(kv, keys.appWalletSlices(app.id)), []);
    const usage = await list<UsageRecord>(kv, keys.appUsage(app.id));
    const costOf = new Map(paid.map((a) => [a.requestId, a.cost]));
    assert.equal(usage.length, paid.length);
    for (const u of usage) assert.equal(u.cost, costOf.get(u.requestId), u.requestId);
    await assertAuditClean(kv);
    const stats = instances.flatMap((i) => i.lines.filter((l) => l.event === "wallet_stats"));
    const admitted = stats.reduce((n, s) => n + Number(s.sliceAdmitted), 0);
    assert.ok(admitted > paid.length / 2, `most requests admitted in a slice (${admitted})`);
  } finally {
    kv.close();
    await Promise.all(instances.map((i) => i.stop()));
    await files.remove();
  }
});

Deno.test("SIGKILL with reservations admitted against a slice and charges not yet posted: after restart the sweeper gives the slice back, nothing overcharged or overdrawn, only unposted charges lost, audit clean", async () => {
  const files = await filesWithSlowModel();
  const env = {
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    WALLET_SLICES: "on",
    // Posts wait a minute (only the slice's lease renewal posts sooner), so the kill lands with
    // settled charges unposted; the 2 s TTL makes the slice's lease 2 s.
    WALLET_SLICE_POST_MS: "60000",
    RESERVATION_TTL_SECONDS: "2",
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
  };
  const kv = await Deno.openKv(files.kvPath);
  let child = await startInstance(env);
  try {
    const { app, key } = await createAppRecord(kv, { name: "crash" });
    const before = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    const quick = { model: PRICEY.id, messages: [{ role: "user", content: "go" }], max_tokens: 20 };
    const answered: Answer[] = [];
    for (let i = 0; i < 10; i++) answered.push(await answer(await chat(child, key.apiKey, quick)));
    assert.ok(answered.every((a) => a.status === 200 && a.cost! > 0));
    // Streams admitted against the slice and still running at the kill.
    const streams = await Promise.all(Array.from({ length: 3 }, () =>
      chat(child, key.apiKey, {
        model: SLOW.id,
        messages: [{ role: "user", content: "write" }],
        // 20 tokens at 200 ms each: still streaming at the kill, and small enough for the slice.
        max_tokens: 20,
        stream: true,
      })));
    for (const res of streams) {
      assert.equal(res.status, 200);
      await res.body!.getReader().read();
    }
    const slices = await list<WalletSliceRecord>(kv, keys.appWalletSlices(app.id));
    assert.equal(slices.length, 1, "the process holds one slice of the wallet");
    assert.deepEqual(
      await list(kv, keys.appReservations(app.id)),
      [],
      "every reservation was admitted in the slice, none stored on its own",
    );
    child.signal("SIGKILL");
    assert.equal((await child.status).signal, "SIGKILL");

    // Right after the kill: the slice is still out, the money in it neither spent nor available.
    const during = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    assert.ok(during.reserved > 0);
    assert.ok(during.available >= 0);

    child = await startInstance(env);
    await waitFor(
      "the sweeper to give the expired slice back",
      async () =>
        (await list(kv, keys.appWalletSlices(app.id))).length === 0 &&
        (await kv.get<WalletRecord>(keys.wallet(app.id))).value!.reserved === 0,
    );
    const after = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    const usage = await list<UsageRecord>(kv, keys.appUsage(app.id));
    const costOf = new Map(answered.map((a) => [a.requestId, a.cost!]));
    for (const u of usage) {
      assert.equal(u.cost, costOf.get(u.requestId), "a posted charge is what was announced");
    }
    const announced = answered.reduce((n, a) => n + a.cost!, 0);
    const charged = usage.reduce((n, u) => n + u.cost, 0);
    assert.equal(after.spent, charged);
    assert.equal(after.reserved, 0, "nothing is left reserved: the streams in flight are free");
    assert.equal(after.available, before.available - charged, "the unspent slice came back");
    assert.ok(charged <= announced, "never more than announced");
    // The loss bound: only charges settled since the slice's last post (its lease renewal or,
    // here, none) are lost; posts are the only way usage gets written, so each lost request is
    // one with no usage record, and each of those was answered.
    const lost = answered.filter((a) => !usage.some((u) => u.requestId === a.requestId));
    assert.equal(announced - charged, lost.reduce((n, a) => n + a.cost!, 0));
    await assertAuditClean(kv);
  } finally {
    kv.close();
    await child.stop();
    await files.remove();
  }
});

Deno.test("by default (WALLET_SLICES=auto) a quiet app takes a commit per request and an app hot in the process is served from a slice; what left the wallet is the sum of the answered costs", async () => {
  const s = await startService();
  try {
    const quiet = await s.newApp("quiet");
    for (let i = 0; i < 5; i++) {
      const res = await s.chat(quiet.apiKey, {
        model: "tollbooth/echo",
        messages: userMessage(`quiet ${i}`),
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    assert.equal(s.wallets.stats.sliceAdmitted, 0, "a quiet app is served without a slice");

    const hot = await s.newApp("hot");
    const before = await s.wallet(hot.appId);
    const answers = await Promise.all(Array.from({ length: 120 }, async (_, i) => {
      const res = await s.chat(hot.apiKey, {
        model: "tollbooth/echo",
        messages: userMessage(`hot ${i}`),
      });
      await res.body?.cancel();
      return { status: res.status, cost: parseUsd(res.headers.get("tollbooth-request-cost")!) };
    }));
    assert.ok(answers.every((a) => a.status === 200));
    assert.ok(s.wallets.stats.sliceAdmitted > 0, "a hot app is served from a slice");
    await s.wallets.drain();
    const after = await s.wallet(hot.appId);
    assert.equal(after.spent - before.spent, answers.reduce((n, a) => n + a.cost, 0));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("two processes on one KV: a request the balance covers only with the other process's slice money is answered, not refused with 402, and what left the wallet is the sum of the answered costs", async () => {
  const files = await filesWithSlowModel();
  const env = {
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    WALLET_SLICES: "on",
    WALLET_STATS_LOG_MS: "100",
    METRICS_TOKEN: "metrics-token",
    RATE_LIMIT_RPM: "1000000",
    RATE_LIMIT_TPM: "1000000000",
  };
  const [holder, asker] = await Promise.all([startInstance(env), startInstance(env)]);
  const kv = await Deno.openKv(files.kvPath);
  try {
    const { app, key } = await createAppRecord(kv, { name: "recall" });
    // A stream in flight keeps the holder's slice in use (not idle) while the large request comes.
    const stream = await chat(holder, key.apiKey, {
      model: SLOW.id,
      messages: [{ role: "user", content: "write" }],
      max_tokens: 10,
      stream: true,
    });
    assert.equal(stream.status, 200);
    const [slice] = await list<WalletSliceRecord>(kv, keys.appWalletSlices(app.id));
    assert.ok(slice, "the holder took a slice of the wallet");
    const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    // 1,000 USD per million output tokens: max_tokens alone holds this much, more than the
    // balance outside the slice and less than the whole balance with the slice's free money.
    const maxTokens = Math.floor((wallet.available + slice.granted) / 1_000) - 150;
    assert.ok(maxTokens * 1_000 > wallet.available, "the slice holds money the request needs");
    const large = await answer(
      await chat(asker, key.apiKey, {
        model: PRICEY.id,
        messages: [{ role: "user", content: "go" }],
        max_tokens: maxTokens,
      }),
    );
    assert.equal(large.status, 200);
    assert.ok(large.cost! > 0);
    const metricsOf = async (instance: typeof holder) =>
      await (await fetch(`${instance.url}/metrics`, {
        headers: { authorization: "Bearer metrics-token" },
      })).text();
    assert.match(await metricsOf(asker), /^tollbooth_wallet_slice_recalls_total 1$/m);
    // The holder counts its give-back once its commit answers, which may be a moment after the
    // asker saw the money in KV.
    await waitFor(
      "the holder's give-back on /metrics",
      async () => /^tollbooth_wallet_slice_give_backs_total 1$/m.test(await metricsOf(holder)),
    );
    assert.match(await stream.text(), /\[DONE\]/);
    for (const instance of [holder, asker]) assert.equal((await instance.stop()).code, 0);

    const after = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    const usage = await list<UsageRecord>(kv, keys.appUsage(app.id));
    assert.equal(usage.length, 2);
    assert.equal(after.spent, usage.reduce((n, u) => n + u.cost, 0));
    assert.equal(usage.find((u) => u.requestId === large.requestId)?.cost, large.cost);
    assert.equal(after.reserved, 0);
    await assertAuditClean(kv);
    const recalls = asker.lines.filter((l) => l.event === "wallet_stats")
      .reduce((n, s) => Math.max(n, Number(s.sliceRecalls)), 0);
    assert.equal(recalls, 1, "the asking process recalled the holder's slice once");
  } finally {
    kv.close();
    await Promise.all([holder.stop(), asker.stop()]);
    await files.remove();
  }
});

Deno.test("a slice's answers show the balance after holds that ended in the wallet: a hold made before the slice, given back, is in the next Tollbooth-Balance", async () => {
  const s = await startService({ env: { WALLET_SLICES: "on" } });
  try {
    const { appId, apiKey } = await s.newApp();
    const limited = await issueKey(s.kv, appId, "own limits", "operator");
    await setRateLimits(s.kv, appId, { rpm: 1000 }, { by: "operator" }, limited.record.id);
    // A key with limits of its own is served by the wallet, never a slice: its hold stays there.
    const hold = 1_000_000;
    const held = await s.wallets.reserve(appId, {
      amount: hold,
      keyId: limited.record.id,
      requestId: "req_wallet_hold",
      model: "tollbooth/echo",
    });
    assert.ok(held.ok);
    const before = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("Hi") });
    assert.equal(before.status, 200);
    await before.body?.cancel();
    await s.wallets.release(appId, held.reservation.id);
    const after = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("Hi") });
    assert.equal(after.status, 200);
    await after.body?.cancel();
    const balance = (res: Response) => parseUsd(res.headers.get("tollbooth-balance")!);
    const cost = parseUsd(after.headers.get("tollbooth-request-cost")!);
    assert.equal(balance(after), balance(before) + hold - cost);
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});
