import assert from "node:assert/strict";
import { keys, type WebhookEventRecord } from "@/lib/db.ts";
import { within } from "@/lib/core/mod.ts";
import {
  listWebhookEvents,
  prepareEvent,
  retrySpanMs,
  retrySpanText,
  saveWebhookSettings,
  sendTestEvent,
  WEBHOOK_DEFAULTS,
  WebhookDeliverer,
  WebhookWatcher,
} from "@/lib/webhooks/mod.ts";
import {
  PUBLIC_URL,
  serveLoopback,
  spendDownTo,
  type TestService,
  withService,
} from "./helpers.ts";
import { OwnerSession } from "./owner_session.ts";
import { TEST_EVENT_WAIT_MS, TEST_EVENTS_PER_MINUTE } from "@/routes/dashboard/webhooks.ts";

/**
 * A receiver written from Stripe's documented verification steps, not from our signing code:
 * split the header on `,` into `key=value` pairs, take `t` and every `v1`, compute HMAC-SHA256
 * with the endpoint secret over `t + "." + raw body`, compare with each `v1` in constant time,
 * and refuse a timestamp more than 5 minutes from now.
 */
function stripeStyleReceiver(secret: string, answers: number[] = []) {
  const received: { id: string; type: string; verified: boolean; body: Record<string, unknown> }[] =
    [];
  const verify = async (header: string | null, raw: string, nowSeconds: number) => {
    if (!header) return false;
    const pairs = header.split(",").map((item) => {
      const i = item.indexOf("=");
      return [item.slice(0, i), item.slice(i + 1)] as const;
    });
    const t = pairs.find(([k]) => k === "t")?.[1];
    const v1s = pairs.filter(([k]) => k === "v1").map(([, v]) => v);
    if (!t || v1s.length === 0 || Math.abs(nowSeconds - Number(t)) > 300) return false;
    const key = await crypto.subtle.importKey(
      "raw",
      new TextEncoder().encode(secret),
      { name: "HMAC", hash: "SHA-256" },
      false,
      ["sign"],
    );
    const mac = new Uint8Array(
      await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${t}.${raw}`)),
    );
    const expected = Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
    return v1s.some((v) => {
      if (v.length !== expected.length) return false;
      let diff = 0;
      for (let i = 0; i < v.length; i++) diff |= v.charCodeAt(i) ^ expected.charCodeAt(i);
      return diff === 0;
    });
  };
  const server = serveLoopback(async (request) => {
    const raw = await request.text();
    const body = JSON.parse(raw);
    const verified = await verify(
      request.headers.get("tollbooth-signature"),
      raw,
      Math.floor(Date.now() / 1000),
    );
    received.push({ id: body.id, type: body.type, verified, body });
    const status = answers.shift() ?? 200;
    return new Response(status === 200 ? "ok" : "nope", { status });
  });
  return { url: `${server.url}/hooks`, received, close: server.close };
}

async function events(s: TestService, appId: string): Promise<WebhookEventRecord[]> {
  return await listWebhookEvents(s.kv, appId);
}

Deno.test("a webhook is signed so that a receiver following Stripe's scheme verifies it", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const settings = await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/unused",
      lowBalanceThreshold: null,
    });
    assert.match(settings.newSecret!, /^whsec_[0-9a-z]{38}$/);
    const receiver = stripeStyleReceiver(settings.newSecret!);
    try {
      await saveWebhookSettings(s.kv, appId, { url: receiver.url, lowBalanceThreshold: null });
      const event = await sendTestEvent(s.kv, appId);
      const deliverer = new WebhookDeliverer(s.kv);
      assert.equal(await deliverer.deliverDue(), 1);
      assert.equal(receiver.received.length, 1);
      assert.deepEqual(receiver.received[0].verified, true);
      assert.equal(receiver.received[0].id, event.id);
      assert.equal(receiver.received[0].type, "webhook.test");
      assert.equal(receiver.received[0].body.app_id, appId);
      const [stored] = await events(s, appId);
      assert.equal(stored.state, "delivered");
      assert.equal(stored.attempts[0].status, 200);

      // A receiver with another secret refuses it.
      const impostor = stripeStyleReceiver("whsec_wrong");
      try {
        await saveWebhookSettings(s.kv, appId, { url: impostor.url, lowBalanceThreshold: null });
        await sendTestEvent(s.kv, appId);
        await deliverer.deliverDue();
        assert.equal(impostor.received[0].verified, false);
      } finally {
        await impostor.close();
      }
    } finally {
      await receiver.close();
    }
  }));

Deno.test("an event the receiver answers 500 is retried with backoff until it is accepted, same id", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    let clock = Date.now();
    const { newSecret } = await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const receiver = stripeStyleReceiver(newSecret!, [500, 503]);
    try {
      await saveWebhookSettings(s.kv, appId, { url: receiver.url, lowBalanceThreshold: null });
      await sendTestEvent(s.kv, appId, clock);
      const deliverer = new WebhookDeliverer(s.kv, { now: () => clock, retryBaseMs: 10_000 });

      assert.equal(await deliverer.deliverDue(), 1);
      let [event] = await events(s, appId);
      assert.equal(event.state, "pending");
      assert.equal(event.attempts[0].status, 500);
      assert.equal(event.nextAttemptAt, clock + 10_000);

      clock += 9_999;
      assert.equal(await deliverer.deliverDue(), 0, "not before the backoff");
      clock += 1;
      assert.equal(await deliverer.deliverDue(), 1);
      [event] = await events(s, appId);
      assert.equal(event.attempts[1].status, 503);
      assert.equal(event.nextAttemptAt, clock + 20_000, "the wait doubles");

      clock += 20_000;
      assert.equal(await deliverer.deliverDue(), 1);
      [event] = await events(s, appId);
      assert.equal(event.state, "delivered");
      assert.equal(event.nextAttemptAt, null);
      assert.deepEqual(event.attempts.map((a) => a.status), [500, 503, 200]);
      assert.equal(new Set(receiver.received.map((r) => r.id)).size, 1, "one event id throughout");
      assert.ok(receiver.received.every((r) => r.verified));
      assert.equal(await deliverer.deliverDue(), 0);
    } finally {
      await receiver.close();
    }
  }));

Deno.test("an event is given up after its last attempt, and the dashboard's record says failed", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    let clock = Date.now();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/refused",
      lowBalanceThreshold: null,
    });
    await sendTestEvent(s.kv, appId, clock);
    const deliverer = new WebhookDeliverer(s.kv, {
      now: () => clock,
      retryBaseMs: 1_000,
      maxAttempts: 3,
    });
    for (let i = 0; i < 3; i++) {
      assert.equal(await deliverer.deliverDue(), 1);
      clock += 10_000;
    }
    const [event] = await events(s, appId);
    assert.equal(event.state, "failed");
    assert.equal(event.attempts.length, 3);
    assert.equal(event.attempts[0].status, null);
    assert.ok(event.attempts[0].error);
    assert.equal(await deliverer.deliverDue(), 0);
  }));

Deno.test("a failing event is retried for the span the dashboard and /docs/webhooks state", () =>
  withService(async (s) => {
    const owner = await new OwnerSession(s).signUp("span@example.com");
    const { appId } = await owner.createApp("spanned");
    let clock = Date.now();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/refused",
      lowBalanceThreshold: null,
    });
    await sendTestEvent(s.kv, appId, clock);
    // The deliverer's defaults, the ones the pages describe.
    const deliverer = new WebhookDeliverer(s.kv, { now: () => clock });
    for (;;) {
      assert.equal(await deliverer.deliverDue(), 1);
      const [event] = await events(s, appId);
      if (event.nextAttemptAt === null) break;
      clock = event.nextAttemptAt;
    }
    const [event] = await events(s, appId);
    assert.equal(event.state, "failed");
    assert.equal(event.attempts.length, WEBHOOK_DEFAULTS.maxAttempts);
    const span = event.attempts.at(-1)!.at - event.attempts[0].at;
    assert.equal(span, retrySpanMs());
    // 12 attempts from 10 s doubling, an hour at most: 5,110 s of doubling and two hours capped.
    assert.equal(span, 12_310_000);
    assert.equal(retrySpanText(), "about 3.5 hours");

    const dashboard = await owner.page(`/dashboard/apps/${appId}/webhooks`);
    assert.match(dashboard, /12 attempts in all over about 3\.5 hours/);
    const docs = await (await s.handle(new Request(`${PUBLIC_URL}/docs/webhooks`))).text();
    assert.match(docs, /12 attempts in all \(about 3\.5 hours\)/);
  }));

Deno.test("two deliverers racing for the same events send each exactly once", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const { newSecret } = await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const receiver = stripeStyleReceiver(newSecret!);
    try {
      await saveWebhookSettings(s.kv, appId, { url: receiver.url, lowBalanceThreshold: null });
      for (let i = 0; i < 5; i++) await sendTestEvent(s.kv, appId);
      const a = new WebhookDeliverer(s.kv);
      const b = new WebhookDeliverer(s.kv);
      // Rounds take at most two events of one app: race round after round until none is left.
      let sent = 0;
      for (;;) {
        const [sentA, sentB] = await Promise.all([a.deliverDue(), b.deliverDue()]);
        if (sentA + sentB === 0) break;
        sent += sentA + sentB;
      }
      assert.equal(sent, 5);
      assert.equal(receiver.received.length, 5);
      assert.equal(new Set(receiver.received.map((r) => r.id)).size, 5);
    } finally {
      await receiver.close();
    }
  }));

Deno.test("an event whose deliverer died mid-delivery is sent by another once the lease ends", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    let clock = Date.now();
    const { newSecret } = await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const receiver = stripeStyleReceiver(newSecret!);
    try {
      await saveWebhookSettings(s.kv, appId, { url: receiver.url, lowBalanceThreshold: null });
      const event = await sendTestEvent(s.kv, appId, clock);
      // The dead deliverer's lease: the outbox entry moved to the end of its lease, never finished.
      const due = await s.kv.get(keys.webhookOutbox(appId, clock, event.id));
      assert.ok(due.versionstamp);
      await s.kv.atomic().check(due).delete(due.key)
        .set(keys.webhookOutbox(appId, clock + 60_000, event.id), { appId }).commit();

      const other = new WebhookDeliverer(s.kv, { now: () => clock });
      assert.equal(await other.deliverDue(), 0, "leased: not sent twice at once");
      clock += 60_000;
      assert.equal(await other.deliverDue(), 1);
      assert.equal(receiver.received.length, 1);
    } finally {
      await receiver.close();
    }
  }));

Deno.test("balance.low fires once per crossing below the threshold and re-arms when the balance rises", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const watcher = new WebhookWatcher(s.kv);
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: 2_000_000,
    });
    await watcher.observe(appId);
    assert.equal((await events(s, appId)).length, 0, "5.00 is above 2.00");

    await spendDownTo(s.kv, appId, 1_500_000);
    await Promise.all([watcher.observe(appId), watcher.observe(appId), watcher.observe(appId)]);
    await spendDownTo(s.kv, appId, 1_000_000);
    await watcher.observe(appId);
    let low = (await events(s, appId)).filter((e) => e.type === "balance.low");
    assert.equal(low.length, 1, "one event for one crossing");
    const data = JSON.parse(low[0].payload).data;
    assert.deepEqual(data, { balance: "1.500000", reserved: "0.000000", threshold: "2.000000" });

    await s.wallets.credit(appId, {
      amount: 5_000_000,
      kind: "operator_credit",
      reason: "back up",
    });
    await watcher.observe(appId);
    await spendDownTo(s.kv, appId, 500_000);
    await watcher.observe(appId);
    low = (await events(s, appId)).filter((e) => e.type === "balance.low");
    assert.equal(low.length, 2, "a second crossing after rising above");
  }));

Deno.test("balance.topped_up fires once per credited top-up, not for top-ups before the endpoint existed", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await s.wallets.credit(appId, { amount: 1_000_000, kind: "top_up", reason: "before" });
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const a = new WebhookWatcher(s.kv);
    const b = new WebhookWatcher(s.kv);
    const credit = await s.wallets.credit(appId, {
      amount: 10_000_000,
      kind: "top_up",
      reason: "Top-up",
      reference: "cs_test_123",
    });
    assert.ok(credit.credited);
    await Promise.all([a.observe(appId), b.observe(appId), a.observe(appId)]);
    const topUps = (await events(s, appId)).filter((e) => e.type === "balance.topped_up");
    assert.equal(topUps.length, 1);
    const body = JSON.parse(topUps[0].payload);
    assert.equal(body.data.amount, "10.000000");
    assert.equal(body.data.reference, "cs_test_123");
    assert.equal(body.data.ledger_entry_id, credit.entry.id);
    assert.equal(body.data.balance, "16.000000");
    // A clock that ticks on every reading: ledger entries a millisecond apart, as top-ups are.
  }, { now: ticking() }));

Deno.test("each top-up and refund the watcher finds together is announced with the balance and owed just after it", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const topUp = (i: number) =>
      s.wallets.credit(appId, {
        amount: 10_000_000,
        kind: "top_up",
        reason: "Top-up",
        reference: `cs_${i}`,
        marker: `cs_${i}`,
      });
    // Credited at once, in one batch or several: each entry knows the balance it left.
    await Promise.all([0, 1, 2, 3].map(topUp));
    await s.wallets.debit(appId, {
      amount: 50_000_000,
      kind: "refund",
      reason: "Refund",
      reference: "pi_1",
      marker: "r1",
    });
    await new WebhookWatcher(s.kv).observe(appId);
    const data = (await events(s, appId)).map((e) => JSON.parse(e.payload).data);
    // Four different balances, one per top-up, whichever order they were credited in.
    assert.deepEqual(
      data.filter((d) => d.kind === undefined).map((d) => d.balance).sort(),
      ["15.000000", "25.000000", "35.000000", "45.000000"],
    );
    const refund = data.find((d) => d.kind === "refund");
    assert.deepEqual([refund.balance, refund.owed], ["0.000000", "5.000000"]);
  }, { now: ticking() }));

Deno.test("a burst of hundreds of ledger entries within a minute holds up no top-up's event, then or later", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const watcher = new WebhookWatcher(s.kv);
    const credit = (kind: "top_up" | "operator_credit", i: number) =>
      s.wallets.credit(appId, { amount: 1_000_000, kind, reason: `${kind} ${i}` });
    // More entries than one scan reads, all within the scan's margin of each other.
    for (let i = 0; i < 250; i++) await credit("operator_credit", i);
    await watcher.observe(appId);
    for (let i = 0; i < 230; i++) await credit("top_up", i);
    await watcher.observe(appId);
    const topUps = () =>
      listWebhookEvents(s.kv, appId, 1_000).then((all) =>
        all.filter((e) => e.type === "balance.topped_up").length
      );
    assert.equal(await topUps(), 230);
    await credit("top_up", 230);
    await watcher.observe(appId);
    assert.equal(await topUps(), 231);
  }, { now: ticking() }));

Deno.test("balance.taken_back fires once per refund or chargeback, with what is owed; balance.given_back once per dispute won", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: null,
    });
    const a = new WebhookWatcher(s.kv);
    const b = new WebhookWatcher(s.kv);
    const refund = await s.wallets.debit(appId, {
      amount: 7_000_000,
      kind: "refund",
      reason: "Refund",
      reference: "pi_1",
      marker: "r1",
    });
    assert.ok(refund.debited);
    const dispute = { reason: "Dispute", reference: "dp_1" };
    await s.wallets.debit(appId, {
      ...dispute,
      kind: "chargeback",
      amount: 1_000_000,
      marker: "d1",
    });
    await s.wallets.reverseDebit(appId, {
      ...dispute,
      kind: "chargeback_reversed",
      amount: 1_000_000,
      marker: "d1_won",
    });
    await Promise.all([a.observe(appId), b.observe(appId), a.observe(appId)]);
    const all = await events(s, appId);
    const takenBack = all.filter((e) => e.type === "balance.taken_back");
    assert.equal(takenBack.length, 2);
    const refunded = takenBack.map((e) => JSON.parse(e.payload).data)
      .find((d) => d.kind === "refund");
    assert.deepEqual(
      { ...refunded, balance: undefined, owed: undefined },
      {
        kind: "refund",
        amount: "7.000000",
        ledger_entry_id: refund.entry.id,
        reference: "pi_1",
        balance: undefined,
        owed: undefined,
      },
    );
    const wallet = await s.wallet(appId);
    assert.equal(refunded.owed, "2.000000", "the starter $5 could give only 5 of the 7");
    assert.equal(wallet.owed, 2_000_000);
    const givenBack = all.filter((e) => e.type === "balance.given_back");
    assert.equal(givenBack.length, 1);
    assert.equal(JSON.parse(givenBack[0].payload).data.kind, "chargeback_reversed");
  }, { now: ticking() }));

/** Starts after the app's creation (which reads the real clock), then ticks a millisecond a read. */
function ticking() {
  let t = Date.now() + 60_000;
  return () => t++;
}

Deno.test("paid requests that take the balance below the threshold queue one balance.low, off the request path", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await spendDownTo(s.kv, appId, 1_004_000);
    await saveWebhookSettings(s.kv, appId, {
      url: "http://127.0.0.1:9/x",
      lowBalanceThreshold: 1_000_000,
    });
    s.webhooks.watcher.forget(appId);
    // Each request costs a few hundred micro-USD: the balance crosses 1.00 on one of them.
    const statuses = [];
    for (let i = 0; i < 60; i++) {
      const res = await s.chat(apiKey, {
        model: "tollbooth/lorem",
        messages: [{ role: "user", content: `request ${i}` }],
        max_tokens: 200,
      });
      statuses.push(res.status);
      await res.body?.cancel();
    }
    assert.ok(statuses.every((st) => st === 200));
    await s.wallets.drain();
    await s.webhooks.watcher.idle();
    const wallet = await s.wallet(appId);
    assert.ok(wallet.available < 1_000_000, `spent below the threshold: ${wallet.available}`);
    const low = (await events(s, appId)).filter((e) => e.type === "balance.low");
    assert.equal(low.length, 1);

    // A top-up through the wallet is announced the same way, and re-arms the alert.
    await s.wallets.credit(appId, { amount: 5_000_000, kind: "top_up", reason: "Top-up" });
    await s.webhooks.watcher.idle();
    const all = await events(s, appId);
    assert.equal(all.filter((e) => e.type === "balance.topped_up").length, 1);
    const watch = await s.kv.get<{ below: boolean }>(keys.webhookWatch(appId));
    assert.equal(watch.value!.below, false);
  }));

Deno.test("an endpoint whose name resolves inside the network is not sent to: the attempt says why", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "https://hooks.example.com/tollbooth",
      lowBalanceThreshold: null,
    });
    const sent: string[] = [];
    const fetchSpy = (input: string | URL | Request) => {
      sent.push(String(input));
      return Promise.resolve(new Response("ok"));
    };
    const resolving =
      (addresses: Record<string, string[]>) => (_host: string, type: "A" | "AAAA") =>
        Promise.resolve(addresses[type] ?? []);
    for (const inside of [["169.254.169.254"], ["10.0.0.5"], ["127.0.0.1"]]) {
      await sendTestEvent(s.kv, appId);
      const deliverer = new WebhookDeliverer(s.kv, {
        fetch: fetchSpy as typeof fetch,
        resolve: resolving({ A: ["93.184.216.34"], AAAA: inside.map((a) => `::ffff:${a}`) }),
      });
      assert.equal(await deliverer.deliverDue(), 1);
    }
    assert.deepEqual(sent, [], "nothing left for an address inside the network");
    const attempts = (await events(s, appId)).flatMap((e) => e.attempts);
    assert.equal(attempts.length, 3);
    for (const attempt of attempts) assert.match(attempt.error!, /resolves to a private/);

    await sendTestEvent(s.kv, appId);
    const outside = new WebhookDeliverer(s.kv, {
      fetch: fetchSpy as typeof fetch,
      resolve: resolving({ A: ["93.184.216.34"] }),
      now: () => Date.now() + 24 * 60 * 60 * 1000,
    });
    assert.ok(await outside.deliverDue() >= 1);
    assert.ok(sent.length >= 1, "a public address is sent to");
  }));

Deno.test("an endpoint whose name does not resolve is not sent to: the attempt says why", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "https://gone.example.com/tollbooth",
      lowBalanceThreshold: null,
    });
    await sendTestEvent(s.kv, appId);
    const sent: string[] = [];
    const deliverer = new WebhookDeliverer(s.kv, {
      fetch: ((input: string | URL | Request) => {
        sent.push(String(input));
        return Promise.resolve(new Response("ok"));
      }) as typeof fetch,
      resolve: () => Promise.reject(new Error("NXDOMAIN")),
    });
    assert.equal(await deliverer.deliverDue(), 1);
    // Sent by name, the name could resolve inside the network by the time it is looked up again.
    assert.deepEqual(sent, []);
    const [event] = await events(s, appId);
    assert.equal(event.attempts[0].error, "the endpoint's name does not resolve");
  }));

Deno.test("an app with a backlog takes at most two places in a delivery round: another app's event is not kept waiting", () =>
  withService(async (s) => {
    const busy = await s.newApp("busy");
    const quiet = await s.newApp("quiet");
    await saveWebhookSettings(s.kv, busy.appId, {
      url: "https://busy.example.com/hooks",
      lowBalanceThreshold: null,
    });
    await saveWebhookSettings(s.kv, quiet.appId, {
      url: "https://quiet.example.com/hooks",
      lowBalanceThreshold: null,
    });
    const clock = Date.now();
    for (let i = 0; i < 30; i++) await sendTestEvent(s.kv, busy.appId, clock);
    await sendTestEvent(s.kv, quiet.appId, clock + 1);
    const sent: string[] = [];
    const deliverer = new WebhookDeliverer(s.kv, {
      now: () => clock + 1_000,
      resolve: () => Promise.resolve(["93.184.216.34"]),
      fetch: ((input: string | URL | Request) => {
        sent.push(new URL(String(input)).hostname);
        return Promise.resolve(new Response("ok"));
      }) as typeof fetch,
    });
    assert.equal(await deliverer.deliverDue(), 3);
    assert.deepEqual(sent.sort(), ["busy.example.com", "busy.example.com", "quiet.example.com"]);
  }));

Deno.test("an app with 800 events queued ahead does not delay another app's event past the first round", () =>
  withService(async (s) => {
    const busy = await s.newApp("busy");
    const quiet = await s.newApp("quiet");
    for (const [app, host] of [[busy, "busy"], [quiet, "quiet"]] as const) {
      await saveWebhookSettings(s.kv, app.appId, {
        url: `https://${host}.example.com/hooks`,
        lowBalanceThreshold: null,
      });
    }
    const clock = Date.now();
    for (let i = 0; i < 800; i += 50) {
      const atomic = s.kv.atomic();
      for (let j = 0; j < 50; j++) {
        prepareEvent(busy.appId, "webhook.test", {}, clock - 10_000 + i + j).write(atomic);
      }
      assert.ok((await atomic.commit()).ok);
    }
    await sendTestEvent(s.kv, quiet.appId, clock);
    const sent: string[] = [];
    const deliverer = new WebhookDeliverer(s.kv, {
      now: () => clock + 1_000,
      resolve: () => Promise.resolve(["93.184.216.34"]),
      fetch: ((input: string | URL | Request) => {
        sent.push(new URL(String(input)).hostname);
        return Promise.resolve(new Response("nope", { status: 500 }));
      }) as typeof fetch,
    });
    await deliverer.deliverDue();
    assert.ok(sent.includes("quiet.example.com"), "the quiet app's event went in the first round");
    assert.equal(sent.filter((h) => h === "busy.example.com").length, 2);
  }));

Deno.test("events queued in the outbox of an earlier version are still delivered", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    await saveWebhookSettings(s.kv, appId, {
      url: "https://legacy.example.com/hooks",
      lowBalanceThreshold: null,
    });
    const clock = Date.now();
    const { record } = prepareEvent(appId, "webhook.test", {}, clock);
    // As an earlier version queued it: one outbox for all apps, keyed by due time.
    await s.kv.atomic()
      .set(keys.webhookEvent(appId, record.id), record)
      .set([...keys.legacyWebhookOutbox(), clock, record.id], { appId })
      .commit();
    const sent: string[] = [];
    const deliverer = new WebhookDeliverer(s.kv, {
      now: () => clock + 1_000,
      resolve: () => Promise.resolve(["93.184.216.34"]),
      fetch: ((input: string | URL | Request) => {
        sent.push(String(input));
        return Promise.resolve(new Response("ok"));
      }) as typeof fetch,
    });
    assert.equal(await deliverer.deliverDue(), 1);
    assert.deepEqual(sent, ["https://legacy.example.com/hooks"]);
    assert.equal((await events(s, appId))[0].state, "delivered");
    assert.equal(
      (await Array.fromAsync(s.kv.list({ prefix: keys.legacyWebhookOutbox() }))).length,
      0,
    );
    // Nothing left for the app: its mark among the apps with queued events goes.
    assert.equal(await deliverer.deliverDue(), 0);
    assert.equal((await s.kv.get(keys.webhookOutboxApp(appId))).versionstamp, null);
  }));

Deno.test("the test event button does not wait out an endpoint that never answers: the page shows the event queued", async () => {
  // Answers only when the test is over.
  const over = Promise.withResolvers<void>();
  const hung = serveLoopback(() => over.promise.then(() => new Response("late")));
  try {
    await withService(async (s) => {
      const owner = await new OwnerSession(s).signUp("slow@example.com");
      const { appId } = await owner.createApp("slow");
      await saveWebhookSettings(s.kv, appId, {
        url: `${hung.url}/hook`,
        lowBalanceThreshold: null,
      });
      const csrf = await owner.csrf();
      const click = owner.post(`/dashboard/apps/${appId}/webhooks/test`, { _csrf: csrf });
      // The deliverer's own timeout is 10 s: the click must answer well before it.
      assert.ok(await within(click, TEST_EVENT_WAIT_MS * 3), "answered before the endpoint did");
      assert.equal((await click).status, 303);
      await (await click).body?.cancel();
      const queued = (await events(s, appId)).filter((e) => e.type === "webhook.test");
      assert.equal(queued.length, 1);
      over.resolve();
    });
  } finally {
    over.resolve();
    await hung.close();
  }
});

Deno.test("the dashboard's test event button sends a few a minute per app, then says when the next can go", () =>
  withService(async (s) => {
    const owner = await new OwnerSession(s).signUp("hooks@example.com");
    const { appId } = await owner.createApp("hooked");
    const csrf = await owner.csrf();
    const saved = await owner.post(`/dashboard/apps/${appId}/webhooks`, {
      url: "https://hooks.example.com/in",
      threshold: "",
      _csrf: csrf,
    });
    // A first webhook's signing secret is shown on the page the form redirects to.
    assert.equal(saved.status, 303);
    await saved.body?.cancel();
    const clicks = await Promise.all(
      Array.from(
        { length: 12 },
        () => owner.post(`/dashboard/apps/${appId}/webhooks/test`, { _csrf: csrf }),
      ),
    );
    const statuses = clicks.map((r) => r.status);
    assert.equal(statuses.filter((st) => st === 303).length, TEST_EVENTS_PER_MINUTE);
    assert.equal(statuses.filter((st) => st === 429).length, 12 - TEST_EVENTS_PER_MINUTE);
    const refused = clicks.find((r) => r.status === 429)!;
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    assert.match(await refused.text(), /At most 5 test events a minute/);
    for (const r of clicks) if (r !== refused) await r.body?.cancel();
    const tests = (await events(s, appId)).filter((e) => e.type === "webhook.test");
    assert.equal(tests.length, TEST_EVENTS_PER_MINUTE);
  }));
