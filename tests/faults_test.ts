import assert from "node:assert/strict";
import { createApp } from "@/app.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { auditWallets, sweepExpiredReservations, Wallets } from "@/lib/billing/mod.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig, parseUsd } from "@/lib/core/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { startFakeOpenAi } from "./fake_openai.ts";
import { faultyKv } from "./faulty_kv.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  readSse,
  serveLoopback,
  startService,
  testCatalogFile,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";

async function waitForNoReservations(s: TestService, appIds: string[], timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await s.wallets.drain();
    let reserved = 0;
    for (const appId of appIds) reserved += (await s.wallet(appId)).reserved;
    if (reserved === 0) return;
    assert.ok(Date.now() < deadline, `${reserved} micro-USD still reserved`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

Deno.test("an upstream killed mid-stream: the client gets the chunks then an error event, and pays exactly what was produced", async () => {
  const upstream = startFakeOpenAi();
  const s = await startService({ openaiBaseUrl: upstream.url });
  try {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage("cut:3 alpha beta gamma delta epsilon"),
      stream: true,
    });
    assert.equal(res.status, 200);
    const events = await readSse(res);
    assert.notEqual(events.at(-1), "[DONE]");
    const error = JSON.parse(events.at(-1)!);
    assert.equal(error.error.code, "stream_interrupted");
    const text = events.slice(0, -1).map((e) => JSON.parse(e).choices[0]?.delta?.content ?? "")
      .join("");
    assert.equal(text, "cut:3 alpha beta");
    assert.equal(upstream.counts.cut, 1);

    await s.wallets.drain();
    const [usage] = await usageRecords(s.kv, appId);
    assert.equal(usage.outcome, "upstream_cut");
    assert.equal(usage.countedLocally, true);
    assert.ok(usage.completionTokens > 0);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.spent, usage.cost);
    assert.equal(wallet.available, 5_000_000 - usage.cost);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("upstream failures before any output charge nothing, streaming or not", async () => {
  const upstream = startFakeOpenAi();
  const s = await startService({ openaiBaseUrl: upstream.url });
  try {
    const { appId, apiKey } = await s.newApp();
    for (const content of ["status:500", "status:503", "status:400 bad"]) {
      for (const stream of [false, true]) {
        const res = await s.chat(apiKey, {
          model: "fake/gpt",
          messages: userMessage(content),
          stream,
        });
        assert.ok(res.status >= 400 && res.status !== 500, `${content}: ${res.status}`);
        await res.body?.cancel();
      }
    }
    const wallet = await s.wallet(appId);
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [5_000_000, 0, 0]);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});

Deno.test("a storm of 300 streams aborted by their clients at random moments leaves nothing reserved and every usage billed once", async () => {
  const upstream = startFakeOpenAi();
  const s = await startService({ openaiBaseUrl: upstream.url });
  const server = serveLoopback(s.handle);
  try {
    const apps = [await s.newApp("storm a"), await s.newApp("storm b")];
    const words = Array.from({ length: 40 }, (_, i) => `w${i}`).join(" ");
    let started = 0;
    let aborted = 0;
    const one = async (i: number) => {
      const controller = new AbortController();
      const app = apps[i % 2];
      // Some abort before the answer, some mid-stream, a few read to the end.
      const abortAfterMs = i % 10 === 9 ? null : (i * 37) % 400;
      const timer = abortAfterMs === null
        ? undefined
        : setTimeout(() => controller.abort(), abortAfterMs);
      try {
        const res = await fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${app.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({
            model: "fake/gpt",
            messages: userMessage(`slow:5 ${words}`),
            stream: true,
            max_tokens: 200,
          }),
          signal: controller.signal,
        });
        started++;
        await res.text();
      } catch {
        aborted++;
      } finally {
        clearTimeout(timer);
      }
    };
    for (let wave = 0; wave < 3; wave++) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => one(wave * 100 + i)));
    }
    assert.ok(aborted >= 200, `aborted ${aborted}`);

    await waitForNoReservations(s, apps.map((a) => a.appId));
    const usage = (await Promise.all(apps.map((a) => usageRecords(s.kv, a.appId)))).flat();
    for (const app of apps) {
      const wallet = await s.wallet(app.appId);
      const own = usage.filter((u) => u.appId === app.appId);
      assert.equal(wallet.spent, own.reduce((n, u) => n + u.cost, 0));
    }
    const outcomes: Record<string, number> = {};
    for (const u of usage) outcomes[u.outcome] = (outcomes[u.outcome] ?? 0) + 1;
    assert.deepEqual(
      Object.keys(outcomes).filter((o) => o !== "client_closed" && o !== "completed"),
      [],
    );
    assert.ok((outcomes.client_closed ?? 0) > 0, "some streams were cut by their clients");
    // Billed once: one usage record per request, and every answered stream is billed.
    assert.equal(new Set(usage.map((u) => u.requestId)).size, usage.length);
    assert.ok(usage.length >= started && usage.length <= 300, `${usage.length} vs ${started}`);
    console.log(JSON.stringify({ started, aborted, outcomes }));
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
    await upstream.close();
  }
});

Deno.test("reservations left by a crashed instance do not block an app: a would-be 402 sweeps them and goes through", async () => {
  const s = await startService();
  try {
    const { appId, apiKey } = await s.newApp();
    // Another instance reserved the whole balance, then died: its lease is already over.
    const dead = new Wallets(s.kv, { leaseMs: 1 });
    const reserved = await dead.reserve(appId, {
      amount: 5_000_000,
      keyId: "k",
      requestId: "req_dead",
      model: "tollbooth/echo",
    });
    assert.ok(reserved.ok);
    await new Promise((r) => setTimeout(r, 5));
    const res = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
    assert.ok(wallet.spent > 0);
    assert.ok(s.logs.length > 0);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("requests longer than the reservation TTL, streamed or not, keep their reservation against a busy sweeper and are billed", async () => {
  const upstream = startFakeOpenAi();
  const s = await startService({
    openaiBaseUrl: upstream.url,
    env: { RESERVATION_TTL_SECONDS: "1" },
  });
  let sweeping = true;
  const sweeper = (async () => {
    while (sweeping) {
      await sweepExpiredReservations(s.kv, s.wallets);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  try {
    const { appId, apiKey } = await s.newApp();
    const words = Array.from({ length: 25 }, (_, i) => `w${i}`).join(" ");
    const res = await s.chat(apiKey, {
      model: "fake/gpt",
      // The upstream thinks for 600 ms first: the lease must be renewed from the reservation on.
      messages: userMessage(`wait:600 slow:100 ${words}`),
      stream: true,
    });
    const events = await readSse(res);
    assert.equal(events.at(-1), "[DONE]");
    const plain = await s.chat(apiKey, {
      model: "fake/gpt",
      messages: userMessage(`wait:1800 ${words}`),
    });
    assert.equal(plain.status, 200);
    const cost = parseUsd(plain.headers.get("tollbooth-request-cost")!);
    assert.ok(cost > 0, "the slow non-streamed request was charged");
    await plain.body?.cancel();
    const usage = await usageRecords(s.kv, appId);
    assert.deepEqual(usage.map((u) => [u.streamed, u.outcome]).sort(), [
      [false, "completed"],
      [true, "completed"],
    ], "both were settled, not swept");
    assert.ok(usage.every((u) => u.cost > 0));
    const wallet = await s.wallet(appId);
    assert.equal(wallet.spent, usage[0].cost + usage[1].cost);
    assert.equal(wallet.reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    sweeping = false;
    await sweeper;
    await s.close();
    await upstream.close();
  }
});

Deno.test("KV commits failing while requests settle never crash the process; once KV is back their holds end, the usage recorded as uncharged, or the sweeper releases them", async () => {
  const upstream = startFakeOpenAi();
  const real = await Deno.openKv(":memory:");
  const faulty = faultyKv(real);
  const env = { FAKE_OPENAI_KEY: "sk-fake-upstream", PUBLIC_URL, RESERVATION_TTL_SECONDS: "1" };
  const logs: Record<string, unknown>[] = [];
  const { app, wallets } = createApp({
    kv: faulty.kv,
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(upstream.url), env),
    log: (f) => logs.push(f),
  });
  try {
    const { app: record, key } = await createAppRecord(real, { name: "kv outage" });
    const send = (body: unknown) =>
      app.fetch(
        new Request(`${PUBLIC_URL}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        }),
      );
    const words = Array.from({ length: 10 }, (_, i) => `w${i}`).join(" ");
    const finishing = await send({
      model: "fake/gpt",
      messages: userMessage(`slow:30 ${words}`),
      stream: true,
    });
    const cancelled = await send({
      model: "fake/gpt",
      messages: userMessage(`slow:30 ${words}`),
      stream: true,
    });
    assert.equal(finishing.status, 200);
    assert.equal(cancelled.status, 200);
    const reader = cancelled.body!.getReader();
    await reader.read();
    // KV starts refusing every commit: settles cannot land.
    faulty.plan = (step) => step === "commit" ? "throw" : "ok";
    // The client goes away; whether the cancel promise settles is the runtime's business.
    reader.cancel().catch(() => {});
    const text = await finishing.text().catch((error) => `client saw: ${error}`);
    assert.doesNotMatch(
      text,
      /data: \[DONE\]\n\n$/,
      "an unsettled stream does not end as if billed",
    );
    // A non-streamed request that can reserve (one commit goes through) but not settle: a 500.
    let commitsLeft = 1;
    faulty.plan = (step) => step !== "commit" ? "ok" : commitsLeft-- > 0 ? "ok" : "throw";
    const plain = await send({ model: "fake/gpt", messages: userMessage("one two") });
    assert.equal(plain.status, 500);
    assert.equal((await plain.json()).error.code, "internal_error");
    await wallets.drain();
    assert.ok((await auditWallets(real)).ok, "nothing half-written");

    // KV is back: each hold that could not be settled ends recording its usage as uncharged (tried
    // every second), and once the leases run out the sweeper releases any that did not.
    faulty.plan = () => "ok";
    await new Promise((r) => setTimeout(r, 1_100));
    const released = await sweepExpiredReservations(real, wallets);
    await wallets.drain();
    const usage = await usageRecords(real, record.id);
    // Both streams' settles failed; the plain request's did too, unless a retry of theirs took the
    // one commit its reserve was to have (then it was refused at its reserve: a 500 all the same).
    assert.ok(wallets.stats.unbilledSettles >= 2, JSON.stringify(wallets.stats));
    assert.equal(released + usage.length, wallets.stats.unbilledSettles);
    assert.deepEqual(usage.map((u) => u.cost), usage.map(() => 0));
    const uncharged = usage.reduce((sum, u) => sum + u.uncharged, 0);
    assert.equal(uncharged, wallets.stats.unbilledRecordedMicros);
    const wallet = (await real.get<WalletRecord>(keys.wallet(record.id))).value!;
    assert.deepEqual([wallet.available, wallet.reserved, wallet.spent], [5_000_000, 0, 0]);
    await assertAuditClean(real);
  } finally {
    await wallets.drain();
    real.close();
    await upstream.close();
  }
});
