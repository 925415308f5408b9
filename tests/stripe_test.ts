import assert from "node:assert/strict";
import { loadConfig } from "@/lib/core/mod.ts";
import { createStripeClient, MAX_CHECKOUTS_PER_ADDRESS } from "@/lib/payments/mod.ts";
import { rotateTopUpToken } from "@/lib/tenants/mod.ts";
import { MAX_WALLET_CREDITS } from "@/lib/billing/mod.ts";
import { ledgerOf, moneyState, page, postForm, topUpFormToken } from "./forms.ts";
import { assertAuditClean, PUBLIC_URL, startService, type TestService } from "./helpers.ts";
import type { LedgerEntry } from "@/lib/db.ts";
import { runAdmin } from "@/scripts/admin.ts";
import {
  checkoutSessionObject,
  disputeObject,
  eventPayload,
  refundObject,
  signPayload,
  startFakeStripe,
  STRIPE_ENV,
  webhookRequest,
} from "./stripe_fake.ts";

type Fake = ReturnType<typeof startFakeStripe>;

async function withStripe(fn: (s: TestService, fake: Fake) => Promise<void>) {
  const fake = startFakeStripe();
  const service = await startService({ env: STRIPE_ENV, payments: { stripe: fake.stripe } });
  try {
    await fn(service, fake);
    await assertAuditClean(service.kv);
  } finally {
    await service.close();
    await fake.close();
  }
}

async function deliver(s: TestService, payload: string, signature?: string) {
  const res = await s.handle(await webhookRequest(payload, signature));
  return { status: res.status, body: await res.json() };
}

function paidSession(appId: string, amountMicros = 10_000_000, extra = {}) {
  return checkoutSessionObject({ appId, amountMicros, paid: true, ...extra });
}

Deno.test("one address opens a bounded number of Checkout Sessions per window: past it the page says so and Stripe is not called", () =>
  withStripe(async (s, fake) => {
    const { topUpToken } = await s.newApp("Story Forge");
    const buy = async () =>
      await postForm(s, `/top-up/${topUpToken}`, {
        amount: "10",
        form_token: await topUpFormToken(s, topUpToken),
      });
    for (let i = 0; i < MAX_CHECKOUTS_PER_ADDRESS; i++) {
      const res = await buy();
      assert.equal(res.status, 303);
      await res.body?.cancel();
    }
    assert.equal(fake.sessions.size, MAX_CHECKOUTS_PER_ADDRESS);
    const held = await buy();
    assert.equal(held.status, 429);
    assert.ok(Number(held.headers.get("retry-after")) > 0);
    assert.match(await held.text(), /Too many checkouts were opened from your network/);
    assert.equal(fake.sessions.size, MAX_CHECKOUTS_PER_ADDRESS, "no session was opened for it");
  }));

Deno.test("choosing an amount opens a one-time Checkout Session priced on the server", () =>
  withStripe(async (s, fake) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    const res = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "25",
      form_token: await topUpFormToken(s, topUpToken),
      // A client cannot set the price: only the choice is read.
      unit_amount: "1",
      price: "0.01",
    });
    assert.equal(res.status, 303);
    const [request] = fake.requests;
    assert.equal(request.method, "POST");
    assert.equal(request.path, "/v1/checkout/sessions");
    assert.ok(request.headers.get("idempotency-key"));
    const f = request.form;
    assert.equal(f.get("mode"), "payment");
    assert.equal(f.get("line_items[0][quantity]"), "1");
    assert.equal(f.get("line_items[0][price_data][currency]"), "usd");
    assert.equal(f.get("line_items[0][price_data][unit_amount]"), "2500");
    assert.equal(
      f.get("line_items[0][price_data][product_data][name]"),
      "Story Forge credits — 25 USD",
    );
    assert.equal(f.get("metadata[app_id]"), appId);
    assert.equal(f.get("metadata[amount_micros]"), "25000000");
    assert.equal(f.get("metadata[top_up_token]"), topUpToken);
    assert.equal(f.get("client_reference_id"), appId);
    const pageUrl = `${PUBLIC_URL}/top-up/${topUpToken}`;
    assert.equal(f.get("success_url"), `${pageUrl}/receipt?session_id={CHECKOUT_SESSION_ID}`);
    assert.equal(f.get("cancel_url"), pageUrl);
    const [session] = fake.sessions.values();
    assert.equal(res.headers.get("location"), session.url);
    assert.match(session.url as string, /^https:\/\/checkout\.stripe\.com\/c\/pay\/cs_test_/);
    // Opening a checkout is not paying: nothing is credited yet.
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

/** A service whose Stripe client the fake refuses (a wrong key: 401, as Stripe answers it). */
async function withFailingStripe(fn: (s: TestService) => Promise<void>) {
  const fake = startFakeStripe();
  const broken = createStripeClient("sk_test_wrong", {
    host: "127.0.0.1",
    port: fake.port,
    protocol: "http",
  });
  const s = await startService({ env: STRIPE_ENV, payments: { stripe: broken } });
  try {
    await fn(s);
  } finally {
    await s.close();
    await fake.close();
  }
}

Deno.test("a failing Stripe API gets a clear 502 page and changes nothing", () =>
  withFailingStripe(async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const before = await moneyState(s, appId);
    const res = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: await topUpFormToken(s, topUpToken),
    });
    assert.equal(res.status, 502);
    assert.match(await res.text(), /Nothing was charged/);
    assert.deepEqual(await moneyState(s, appId), before);
    assert.ok(s.logs.some((l) => l.event === "checkout_create_failed"));
  }));

Deno.test("checkout.session.completed for a paid session credits the amount once", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const session = paidSession(appId, 10_000_000);
    const { status, body } = await deliver(s, eventPayload("checkout.session.completed", session));
    assert.equal(status, 200);
    assert.equal(body.outcome, "credited");
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 15_000_000);
    assert.equal(wallet.topUps, 10_000_000);
    const { ledger } = await moneyState(s, appId);
    const topUp = ledger.find((e) => e.kind === "top_up")!;
    assert.equal(topUp.amount, 10_000_000);
    assert.equal(topUp.reference, session.id);
  }));

Deno.test("100 concurrent deliveries of the same event credit once", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const payload = eventPayload("checkout.session.completed", paidSession(appId, 50_000_000));
    const signature = await signPayload(payload);
    const results = await Promise.all(
      Array.from({ length: 100 }, () => deliver(s, payload, signature)),
    );
    assert.ok(results.every((r) => r.status === 200));
    const outcomes = results.map((r) => r.body.outcome);
    assert.equal(outcomes.filter((o) => o === "credited").length, 1);
    assert.equal(outcomes.filter((o) => o === "already_credited").length, 99);
    assert.equal((await s.wallet(appId)).available, 55_000_000);
    const { ledger } = await moneyState(s, appId);
    assert.equal(ledger.filter((e) => e.kind === "top_up").length, 1);
  }));

Deno.test("replays and other events for the same session, in any order, change nothing", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paid = paidSession(appId, 25_000_000);
    const unpaid = { ...paid, payment_status: "unpaid", status: "complete" };
    // Delayed payment methods: completed arrives unpaid, the money later.
    const first = await deliver(s, eventPayload("checkout.session.completed", unpaid));
    assert.equal(first.body.outcome, "not_paid");
    assert.equal((await s.wallet(appId)).available, 5_000_000);
    const succeeded = eventPayload("checkout.session.async_payment_succeeded", paid);
    assert.equal((await deliver(s, succeeded)).body.outcome, "credited");
    const after = await moneyState(s, appId);
    assert.equal(after.wallet.available, 30_000_000);
    // Late and replayed deliveries: the same event again, a paid completed, the unpaid one.
    for (
      const payload of [
        succeeded,
        eventPayload("checkout.session.completed", paid),
        eventPayload("checkout.session.completed", unpaid),
        eventPayload("checkout.session.async_payment_failed", unpaid),
        eventPayload("checkout.session.expired", { ...unpaid, status: "expired" }),
      ]
    ) {
      assert.equal((await deliver(s, payload)).status, 200);
    }
    assert.deepEqual(await moneyState(s, appId), after);
  }));

Deno.test("unknown event types get 200 and are ignored", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const before = await moneyState(s, appId);
    for (const type of ["payment_intent.succeeded", "charge.refunded", "customer.created"]) {
      const { status, body } = await deliver(s, eventPayload(type, paidSession(appId)));
      assert.equal(status, 200);
      assert.equal(body.outcome, "ignored");
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("a signed event with no object to act on gets 200 and is ignored", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const before = await moneyState(s, appId);
    const bare = { id: "evt_bare", object: "event", type: "refund.created" };
    for (
      const payload of [
        JSON.stringify({ ...bare, data: { object: null } }),
        JSON.stringify(bare),
        JSON.stringify({ ...bare, type: "checkout.session.completed", data: { object: [] } }),
        "{}",
        "null",
      ]
    ) {
      const { status, body } = await deliver(s, payload);
      assert.equal(status, 200, payload);
      assert.equal(body.outcome, "ignored", payload);
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("an unexpected failure behind the webhook is a 500 in the API's JSON error shape, for Stripe to retry", () =>
  // A refund of a payment not seen here is looked up at Stripe, which fails.
  withFailingStripe(async (s) => {
    const refund = refundObject({ paymentIntent: "pi_unseen", amount: 500 });
    const res = await s.handle(await webhookRequest(eventPayload("refund.created", refund)));
    assert.equal(res.status, 500);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const body = await res.json();
    assert.equal(body.error.code, "internal_error");
    const requestId = res.headers.get("tollbooth-request-id")!;
    assert.match(body.error.message, new RegExp(requestId));
    assert.ok(s.logs.some((l) => l.event === "unhandled_error" && l.requestId === requestId));
  }));

Deno.test("a webhook with a bad or missing signature gets 400 and changes nothing", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const before = await moneyState(s, appId);
    const payload = eventPayload("checkout.session.completed", paidSession(appId));
    const good = await signPayload(payload);
    const wrongSecret = await signPayload(payload, "whsec_someone_else");
    const tamperedBody = payload.replace("10000000", "50000000");
    const stale = good.replace(/^t=\d+/, `t=${Math.floor(Date.now() / 1000) - 3600}`);
    for (
      const [body, signature] of [
        [payload, wrongSecret],
        [tamperedBody, good],
        [payload, "t=1,v1=deadbeef"],
        [payload, stale],
        [payload, ""],
      ]
    ) {
      const res = await s.handle(
        new Request(`${PUBLIC_URL}/webhooks/stripe`, {
          method: "POST",
          headers: signature ? { "stripe-signature": signature } : {},
          body,
        }),
      );
      assert.equal(res.status, 400);
      assert.match((await res.json()).error.message, /Stripe-Signature|Invalid Stripe signature/);
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("a paid session whose amounts disagree or are not offered is refused and logged", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const other = await s.newApp("other");
    const before = await moneyState(s, appId);
    const base = paidSession(appId, 10_000_000);
    const tampered = [
      { ...base, id: "cs_test_total", amount_total: 5000 },
      { ...base, id: "cs_test_meta", metadata: { ...base.metadata, amount_micros: "50000000" } },
      {
        ...base,
        id: "cs_test_odd",
        amount_total: 700,
        metadata: { ...base.metadata, amount_micros: "7000000" },
      },
      { ...base, id: "cs_test_frac", metadata: { ...base.metadata, amount_micros: "10000000.5" } },
      { ...base, id: "cs_test_eur", currency: "eur" },
      { ...base, id: "cs_test_client", client_reference_id: other.appId },
      { ...base, id: "cs_test_noamount", metadata: { app_id: appId } },
      { ...base, id: "cs_test_sub", mode: "subscription" },
      {
        ...base,
        id: "cs_test_noapp",
        client_reference_id: "app_gone",
        metadata: { ...base.metadata, app_id: "app_gone" },
      },
    ];
    for (const session of tampered) {
      const { status, body } = await deliver(
        s,
        eventPayload("checkout.session.completed", session),
      );
      assert.equal(status, 200, session.id);
      assert.equal(body.outcome, "refused", session.id);
    }
    // A session this service did not open (no metadata of ours) is acknowledged and left alone.
    const foreign = await deliver(
      s,
      eventPayload("checkout.session.completed", { ...base, id: "cs_test_foreign", metadata: {} }),
    );
    assert.equal(foreign.body.outcome, "not_ours");
    const refusals = s.logs.filter((l) => l.event === "top_up_refused");
    assert.equal(refusals.length, tampered.length);
    assert.ok(refusals.every((l) => l.level === "error"));
    assert.deepEqual(await moneyState(s, appId), before);
    assert.equal((await s.wallet(other.appId)).available, 5_000_000);
  }));

/**
 * A $10 checkout opened for a new app, whose wallet is then credited to its limit by the operator
 * before the payment is made: its completion event cannot credit it.
 */
async function paidPastTheLimit(s: TestService, fake: Fake) {
  const { appId, topUpToken } = await s.newApp();
  await postForm(s, `/top-up/${topUpToken}`, {
    amount: "10",
    form_token: await topUpFormToken(s, topUpToken),
  });
  const [session] = fake.sessions.values();
  // Filled to the last dollar between the checkout's opening and its payment.
  await s.wallets.credit(appId, {
    amount: MAX_WALLET_CREDITS - 5_000_000 - 1_000_000,
    kind: "operator_credit",
    reason: "to the limit",
  });
  const before = await moneyState(s, appId);
  fake.markPaid(session.id);
  return {
    appId,
    topUpToken,
    session,
    before,
    payload: eventPayload("checkout.session.completed", session),
    receiptPath: `/top-up/${topUpToken}/receipt?session_id=${session.id}`,
  };
}

/** The wallet and its ledger as they were, and no top-up among the credits: nothing credited. */
async function assertNothingCredited(
  s: TestService,
  appId: string,
  before: Awaited<ReturnType<typeof moneyState>>,
) {
  const after = await moneyState(s, appId);
  assert.deepEqual(after, before);
  assert.equal(sumOf(after.ledger, "top_up"), 0);
  assert.equal(after.wallet.topUps, 0);
  const credits = after.ledger.filter((e) => e.amount > 0).reduce((n, e) => n + e.amount, 0);
  assert.equal(credits, MAX_WALLET_CREDITS - 1_000_000, "the starter and operator credits only");
}

const refundRequests = (fake: Fake) =>
  fake.requests.filter((r) => r.method === "POST" && r.path === "/v1/refunds");

Deno.test("a payment refused at the wallet limit is refunded once", () =>
  withStripe(async (s, fake) => {
    const { appId, topUpToken, session, before, payload, receiptPath } = await paidPastTheLimit(
      s,
      fake,
    );
    const { status, body } = await deliver(s, payload);
    assert.equal(status, 200);
    assert.equal(body.outcome, "refunded");

    const [request] = refundRequests(fake);
    assert.equal(request.headers.get("authorization"), `Bearer ${STRIPE_ENV.STRIPE_SECRET_KEY}`);
    assert.equal(request.headers.get("content-type"), "application/x-www-form-urlencoded");
    assert.equal(request.headers.get("idempotency-key"), `top-up-refund:${session.id}`);
    assert.equal(request.form.get("payment_intent"), session.payment_intent);
    assert.equal(request.form.has("amount"), false, "the whole payment");
    assert.equal(request.form.get("metadata[checkout_session]"), session.id);
    assert.equal(request.form.get("metadata[app_id]"), appId);
    assert.equal(fake.refunds.length, 1);
    const [refund] = fake.refunds;
    assert.equal(refund.amount, 1_000);
    assert.equal(refund.payment_intent, session.payment_intent);
    assert.equal(refund.status, "succeeded");

    const refunded = s.logs.filter((l) => l.event === "top_up_refunded");
    assert.equal(refunded.length, 1);
    assert.equal(refunded[0].level ?? "info", "info");
    assert.equal(refunded[0].refund, refund.id);
    assert.match(String(refunded[0].reason), /the most a wallet holds/);
    assert.equal(s.logs.filter((l) => l.event === "top_up_refused").length, 0);

    const receipt = await page(s, receiptPath);
    assert.equal(receipt.status, 409);
    const html = await receipt.text();
    assert.match(html, /Payment refunded/);
    assert.doesNotMatch(html, /will refund it/);

    // Stripe then announces the refund it made: there is no credit to take it back from.
    const announced = await deliver(s, eventPayload("refund.created", refund));
    assert.equal(announced.status, 200);
    assert.equal(announced.body.outcome, "never_credited");
    assert.equal(s.logs.filter((l) => l.event === "stripe_reversal_unmatched").length, 0);
    assert.equal(s.logs.filter((l) => l.event === "top_up_refund_failed").length, 0);

    assert.equal(fake.refunds.length, 1);
    await assertNothingCredited(s, appId, before);
    // And no new checkout opens for it.
    const refused = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "5",
      form_token: await topUpFormToken(s, topUpToken),
    });
    assert.equal(refused.status, 409);
    assert.match(await refused.text(), /This app cannot take more credits/);
    assert.equal(fake.sessions.size, 1);
  }));

Deno.test("a redelivered event does not refund twice", () =>
  withTwoProcesses(async (one, two, fake) => {
    const { appId, session, before, payload, receiptPath } = await paidPastTheLimit(one, fake);
    const signature = await signPayload(payload);
    // Two processes racing over the same event, then Stripe's later redeliveries.
    const racing = await Promise.all(
      Array.from({ length: 20 }, (_, i) => deliver(i % 2 ? one : two, payload, signature)),
    );
    assert.ok(racing.every((r) => r.status === 200 && r.body.outcome === "refunded"));
    const asked = refundRequests(fake).length;
    for (const s of [one, two]) {
      assert.equal((await deliver(s, payload)).body.outcome, "refunded");
      assert.equal((await page(s, receiptPath)).status, 409);
    }
    assert.equal(refundRequests(fake).length, asked, "a refund made is not asked for again");
    assert.ok(
      refundRequests(fake).every((r) =>
        r.headers.get("idempotency-key") === `top-up-refund:${session.id}`
      ),
      "racing deliveries share one key, so Stripe makes one refund",
    );
    assert.equal(fake.refunds.length, 1);
    const logs = [...one.logs, ...two.logs];
    assert.equal(logs.filter((l) => l.event === "top_up_refunded").length, 1);
    assert.equal(logs.filter((l) => l.event === "top_up_refund_failed").length, 0);
    await assertNothingCredited(one, appId, before);
  }));

Deno.test("a refund Stripe refuses is retried on the next delivery", () =>
  withStripe(async (s, fake) => {
    const { appId, session, before, payload, receiptPath } = await paidPastTheLimit(s, fake);
    // Refused twice: by the first delivery, then by the receipt page's own attempt.
    fake.refuseRefunds(2);
    const first = await deliver(s, payload);
    assert.equal(first.status, 502, "not 2xx: Stripe delivers the event again");
    assert.equal(first.body.error.code, "refund_failed");
    assert.equal(first.body.error.type, "api_error");
    const failed = s.logs.filter((l) => l.event === "top_up_refund_failed");
    assert.equal(failed.length, 1);
    assert.equal(failed[0].level, "error");
    assert.match(String(failed[0].error), /insufficient funds/);
    assert.equal(fake.refunds.length, 0);

    const pending = await page(s, receiptPath);
    assert.equal(pending.status, 409);
    assert.match(await pending.text(), /refund pending/);
    await assertNothingCredited(s, appId, before);

    const second = await deliver(s, payload);
    assert.equal(second.status, 200);
    assert.equal(second.body.outcome, "refunded");
    assert.equal(fake.refunds.length, 1);
    // Stripe keeps a key's refusal for a day: each retry asks under a key of its own.
    assert.deepEqual(refundRequests(fake).map((r) => r.headers.get("idempotency-key")), [
      `top-up-refund:${session.id}`,
      `top-up-refund:${session.id}:retry-1`,
      `top-up-refund:${session.id}:retry-2`,
    ]);
    assert.equal((await deliver(s, payload)).body.outcome, "refunded");
    assert.equal(refundRequests(fake).length, 3, "made once, never asked for again");
    assert.match(await (await page(s, receiptPath)).text(), /Payment refunded/);
    assert.equal(s.logs.filter((l) => l.event === "top_up_refunded").length, 1);
    await assertNothingCredited(s, appId, before);
  }));

/** A refused payment refunded by its completion event: the refund Stripe made, and its key. */
async function refusedAndRefunded(s: TestService, fake: Fake) {
  const refused = await paidPastTheLimit(s, fake);
  assert.equal((await deliver(s, refused.payload)).body.outcome, "refunded");
  assert.equal(fake.refunds.length, 1);
  return { ...refused, refund: fake.refunds[0] };
}

Deno.test("a refund Stripe later reports failed is owed again and made once more", () =>
  withStripe(async (s, fake) => {
    const { appId, session, before, refund, payload, receiptPath } = await refusedAndRefunded(
      s,
      fake,
    );
    const reported = fake.failRefund(refund.id as string);
    // The new refund is refused at first, by the event's delivery (answered 5xx, so Stripe
    // delivers it again) and by the receipt page's own attempt.
    fake.refuseRefunds(2);
    const first = await deliver(s, reported.failed!);
    assert.equal(first.status, 502);
    assert.equal(first.body.error.code, "refund_failed");
    assert.equal(fake.refunds.length, 1);
    const owed = await page(s, receiptPath);
    assert.equal(owed.status, 409);
    const owedHtml = await owed.text();
    assert.match(owedHtml, /refund pending/);
    assert.doesNotMatch(owedHtml, /Payment refunded/);

    // Redelivered: the refund still owed is made (as for any event of a refused payment).
    const again = await deliver(s, reported.failed!);
    assert.equal(again.status, 200);
    assert.equal(again.body.outcome, "never_credited");
    assert.equal(fake.refunds.length, 2);
    const [, made] = fake.refunds;
    assert.equal(made.status, "succeeded");
    assert.equal(made.amount, 1_000, "the whole payment, again");
    assert.equal(made.payment_intent, session.payment_intent);
    // Each attempt after the first refund under a key of its own (the receipt's view was one).
    assert.deepEqual(refundRequests(fake).map((r) => r.headers.get("idempotency-key")), [
      `top-up-refund:${session.id}`,
      `top-up-refund:${session.id}:retry-1`,
      `top-up-refund:${session.id}:retry-2`,
      `top-up-refund:${session.id}:retry-3`,
    ]);
    assert.match(await (await page(s, receiptPath)).text(), /Payment refunded/);

    // The operator hears of the failure, of the new refund's, and of the new refund.
    const reports = s.logs.filter((l) => l.event === "top_up_refund_failed" && l.reference);
    assert.equal(reports[0].level, "error");
    assert.equal(reports[0].reference, refund.id);
    assert.equal(reports[0].retry, "refund_failed");
    assert.ok(reports.slice(1).every((l) => l.level === "info"), "the rest are of the old refund");
    assert.equal(
      s.logs.filter((l) => l.event === "top_up_refunded").map((l) => l.refund).join(),
      [refund.id, made.id].join(),
    );

    // Stripe's other event about the failed refund, the completion again: nothing more.
    assert.equal((await deliver(s, reported.updated)).body.outcome, "never_credited");
    assert.equal((await deliver(s, payload)).body.outcome, "refunded");
    assert.equal(refundRequests(fake).length, 4);
    assert.equal(fake.refunds.length, 2);
    await assertNothingCredited(s, appId, before);
  }));

Deno.test("a redelivered refund.failed does not refund twice", () =>
  withTwoProcesses(async (one, two, fake) => {
    const { appId, session, before, refund, receiptPath } = await refusedAndRefunded(one, fake);
    const { failed } = fake.failRefund(refund.id as string);
    const signature = await signPayload(failed!);
    // Two processes racing over the event, then Stripe's later redeliveries.
    const racing = await Promise.all(
      Array.from({ length: 20 }, (_, i) => deliver(i % 2 ? one : two, failed!, signature)),
    );
    assert.ok(racing.every((r) => r.status === 200), JSON.stringify(racing));
    for (const s of [one, two]) {
      assert.equal((await deliver(s, failed!)).body.outcome, "never_credited");
      assert.match(await (await page(s, receiptPath)).text(), /Payment refunded/);
    }
    assert.equal(fake.refunds.length, 2, "made once more, once");
    assert.ok(
      refundRequests(fake).slice(1).every((r) =>
        r.headers.get("idempotency-key") === `top-up-refund:${session.id}:retry-1`
      ),
      "racing deliveries share the retry's key, so Stripe makes one refund",
    );
    const logs = [...one.logs, ...two.logs];
    assert.equal(logs.filter((l) => l.event === "top_up_refunded").length, 2);
    const reopened = logs.filter((l) => l.event === "top_up_refund_failed" && l.level === "error");
    assert.ok(reopened.length >= 1);
    assert.ok(reopened.every((l) => l.retry === "refunded"));
    await assertNothingCredited(one, appId, before);
  }));

Deno.test("refund.updated canceled is handled the same", () =>
  withStripe(async (s, fake) => {
    const { appId, session, before, refund, receiptPath } = await refusedAndRefunded(s, fake);
    const { updated, failed } = fake.failRefund(refund.id as string, "canceled");
    assert.equal(failed, null, "a canceled refund is announced by refund.updated alone");
    const again = await deliver(s, updated);
    assert.equal(again.status, 200);
    assert.equal(again.body.outcome, "refunded_again");
    assert.equal(fake.refunds.length, 2);
    assert.equal(
      refundRequests(fake)[1].headers.get("idempotency-key"),
      `top-up-refund:${session.id}:retry-1`,
    );
    assert.equal((await deliver(s, updated)).body.outcome, "never_credited");
    assert.equal(fake.refunds.length, 2);
    assert.match(await (await page(s, receiptPath)).text(), /Payment refunded/);
    // A failure of the earlier refund, reported late, does not undo the newer one.
    const late = eventPayload("refund.failed", { ...refund, status: "failed" });
    assert.equal((await deliver(s, late)).body.outcome, "never_credited");
    assert.equal(refundRequests(fake).length, 2);
    assert.match(await (await page(s, receiptPath)).text(), /Payment refunded/);
    await assertNothingCredited(s, appId, before);
  }));

Deno.test("the receipt shows the credited payment, crediting it if the webhook is late", () =>
  withStripe(async (s, fake) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: await topUpFormToken(s, topUpToken),
    });
    const [session] = fake.sessions.values();
    const receiptPath = `/top-up/${topUpToken}/receipt?session_id=${session.id}`;

    // Back from Stripe before paying (or unpaid): no receipt, no credit.
    const open = await page(s, receiptPath);
    assert.equal(open.status, 402);
    assert.equal((await s.wallet(appId)).available, 5_000_000);

    // Paid with a payment still settling: the page says so and refreshes itself.
    fake.markPaid(session.id);
    session.payment_status = "unpaid";
    const processing = await page(s, receiptPath);
    assert.equal(processing.status, 200);
    assert.equal(processing.headers.get("refresh"), "3");
    assert.match(await processing.text(), /Payment received, crediting…/);

    // Paid: the receipt credits through the same exactly-once path, then the webhook adds nothing.
    session.payment_status = "paid";
    const receipt = await page(s, receiptPath);
    assert.equal(receipt.status, 200);
    const html = await receipt.text();
    assert.match(html, /10\.00 USD/);
    assert.match(html, new RegExp(session.id));
    assert.equal((await s.wallet(appId)).available, 15_000_000);
    const late = await deliver(s, eventPayload("checkout.session.completed", session));
    assert.equal(late.body.outcome, "already_credited");
    assert.equal((await page(s, receiptPath)).status, 200);
    assert.equal((await s.wallet(appId)).available, 15_000_000);

    // Another app's page, or a session Stripe does not know, shows no receipt.
    const other = await s.newApp("other");
    const foreign = await page(s, `/top-up/${other.topUpToken}/receipt?session_id=${session.id}`);
    assert.equal(foreign.status, 404);
    const unknown = await page(s, `/top-up/${topUpToken}/receipt?session_id=cs_test_unknown1`);
    assert.equal(unknown.status, 404);
  }));

Deno.test("a Stripe success URL still shows the payment after the owner replaces the top-up address", () =>
  withStripe(async (s, fake) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: await topUpFormToken(s, topUpToken),
    });
    const [session] = fake.sessions.values();
    fake.markPaid(session.id);
    await rotateTopUpToken(s.kv, appId);
    // Stripe sends the buyer to the success URL fixed when the session was opened.
    const successPath = new URL(
      String(session.success_url).replace("{CHECKOUT_SESSION_ID}", session.id),
    );
    const receipt = await page(s, successPath.pathname + successPath.search);
    assert.equal(receipt.status, 200);
    assert.match(await receipt.text(), /Thank you: 10\.00 USD added to Story Forge/);
    assert.equal((await s.wallet(appId)).available, 15_000_000);
  }));

Deno.test("a receipt address with a session this service did not open is answered without asking Stripe", () =>
  withStripe(async (s, fake) => {
    const { topUpToken } = await s.newApp("Story Forge");
    const before = fake.requests.length;
    for (let i = 0; i < 20; i++) {
      const guessed = await page(s, `/top-up/${topUpToken}/receipt?session_id=cs_live_guess${i}`);
      assert.equal(guessed.status, 404);
    }
    assert.equal(fake.requests.length, before, "no call spent the account's Stripe rate limit");
  }));

Deno.test("without Stripe configured the webhook answers 503 and changes nothing", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    const before = await moneyState(s, appId);
    const res = await s.handle(
      await webhookRequest(eventPayload("checkout.session.completed", paidSession(appId))),
    );
    assert.equal(res.status, 503);
    assert.deepEqual(await moneyState(s, appId), before);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("a Stripe key without the webhook secret stops the start with a clear message", () => {
  assert.throws(
    () => loadConfig({ STRIPE_SECRET_KEY: "sk_test_x" }),
    /STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET: set both or neither/,
  );
  assert.throws(() => loadConfig({ PAYMENTS: "real" }), /PAYMENTS/);
  assert.equal(loadConfig({ PAYMENTS: "dev" }).payments, "dev");
});

Deno.test("the free test checkout cannot be switched on where Stripe is configured", () => {
  assert.throws(
    () =>
      loadConfig({
        PAYMENTS: "dev",
        STRIPE_SECRET_KEY: "sk_test_x",
        STRIPE_WEBHOOK_SECRET: "whsec_x",
      }),
    /PAYMENTS=dev .* cannot be set with STRIPE_SECRET_KEY/,
  );
});

/** Two services on one KV database, as two processes of one deployment; the audit after. */
async function withTwoProcesses(
  fn: (one: TestService, two: TestService, fake: Fake) => Promise<void>,
) {
  const dir = await Deno.makeTempDir();
  const fake = startFakeStripe();
  const options = {
    env: STRIPE_ENV,
    payments: { stripe: fake.stripe },
    kvPath: `${dir}/kv.sqlite3`,
  };
  const one = await startService(options);
  const two = await startService(options);
  try {
    await fn(one, two, fake);
    await assertAuditClean(one.kv);
  } finally {
    await one.close();
    await two.close();
    await fake.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("two processes on one database receiving the same event concurrently credit once", () =>
  withTwoProcesses(async (one, two) => {
    const { appId } = await one.newApp();
    const payload = eventPayload("checkout.session.completed", paidSession(appId, 5_000_000));
    const signature = await signPayload(payload);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => deliver(i % 2 ? one : two, payload, signature)),
    );
    assert.ok(results.every((r) => r.status === 200));
    assert.equal(results.filter((r) => r.body.outcome === "credited").length, 1);
    assert.equal((await one.wallet(appId)).available, 10_000_000);
  }));

/** A paid top-up delivered by its webhook; its PaymentIntent, which refunds and disputes name. */
async function topUp(s: TestService, appId: string, amountMicros: number): Promise<string> {
  const session = paidSession(appId, amountMicros);
  const { body } = await deliver(s, eventPayload("checkout.session.completed", session));
  assert.equal(body.outcome, "credited");
  return session.payment_intent as string;
}

/** A refund event; `id` names the refund (one per refund, as Stripe's). */
const refunded = (
  paymentIntent: string,
  cents: number,
  options: { id?: string; type?: string; status?: string } = {},
) =>
  eventPayload(
    options.type ?? "refund.created",
    refundObject({ id: options.id, paymentIntent, amount: cents, status: options.status }),
  );

/** A request in flight elsewhere holding `amount` of the wallet. */
async function hold(s: TestService, appId: string, amount: number) {
  const held = await s.wallets.reserve(appId, {
    amount,
    keyId: "key_elsewhere",
    requestId: "req_held",
    model: "fake/gpt",
  });
  assert.ok(held.ok);
  return held;
}

async function assertMoneyLeft(
  s: TestService,
  appId: string,
  expected: { available: number; refunded: number; owed: number },
) {
  const { available, refunded, owed } = await s.wallet(appId);
  assert.deepEqual({ available, refunded, owed }, expected);
}

/** A new app's $10 top-up refunded while `holding` of its $15 is held by a request in flight. */
async function refundWhileHeld(s: TestService, holding: number) {
  const { appId, apiKey } = await s.newApp();
  const paymentIntent = await topUp(s, appId, 10_000_000);
  const held = await hold(s, appId, holding);
  const { body } = await deliver(s, refunded(paymentIntent, 1_000));
  assert.equal(body.outcome, "taken_back");
  return { appId, apiKey, held };
}

/** What was taken back was all given back: the $15 as before, both sides in the ledger. */
async function assertAllGivenBack(
  s: TestService,
  appId: string,
  kind: "refund" | "chargeback",
  amount: number,
) {
  const { wallet, ledger } = await moneyState(s, appId);
  assert.equal(wallet.available, 15_000_000);
  assert.equal(wallet.refunded, 0);
  assert.equal(sumOf(ledger, kind), amount);
  assert.equal(sumOf(ledger, `${kind}_reversed`), amount);
}

const sumOf = (ledger: LedgerEntry[], kind: LedgerEntry["kind"]) =>
  ledger.filter((e) => e.kind === kind).reduce((n, e) => n + e.amount, 0);

Deno.test("a refunded top-up is taken back from the balance once, however often and concurrently Stripe delivers it", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    assert.equal((await s.wallet(appId)).available, 15_000_000);
    const payload = refunded(paymentIntent, 1_000);
    const signature = await signPayload(payload);
    const results = await Promise.all(
      Array.from({ length: 30 }, () => deliver(s, payload, signature)),
    );
    assert.ok(results.every((r) => r.status === 200));
    const outcomes = results.map((r) => r.body.outcome);
    assert.equal(outcomes.filter((o) => o === "taken_back").length, 1);
    assert.equal(outcomes.filter((o) => o === "already_taken_back").length, 29);
    assert.equal((await deliver(s, payload)).body.outcome, "already_taken_back");
    const { wallet, ledger } = await moneyState(s, appId);
    assert.equal(wallet.available, 5_000_000, "the starter credit is what is left");
    assert.equal(wallet.refunded, 10_000_000);
    assert.equal(wallet.owed, 0);
    assert.equal(wallet.topUps, 10_000_000, "the top-up stays credited: the refund is beside it");
    assert.equal(sumOf(ledger, "refund"), 10_000_000);
    assert.equal(ledger.filter((e) => e.kind === "refund").length, 1);
  }));

Deno.test("each partial refund is taken back once, and never more than the payment credited", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const first = refunded(paymentIntent, 300, { id: "re_first" });
    assert.equal((await deliver(s, first)).body.outcome, "taken_back");
    const second = refunded(paymentIntent, 700, { id: "re_second", status: "pending" });
    assert.equal((await deliver(s, second)).body.outcome, "taken_back");
    // Its later updates and replays take nothing more.
    for (
      const payload of [
        first,
        refunded(paymentIntent, 700, { id: "re_second", type: "refund.updated" }),
      ]
    ) {
      assert.equal((await deliver(s, payload)).body.outcome, "already_taken_back");
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
    // A refund claiming more than its payment is held to what that payment credited.
    const other = await topUp(s, appId, 10_000_000);
    const large = refunded(other, 5_000, { id: "re_large" });
    assert.equal((await deliver(s, large)).body.outcome, "taken_back");
    const { wallet, ledger } = await moneyState(s, appId);
    assert.equal(wallet.available, 5_000_000);
    assert.equal(wallet.refunded, 20_000_000);
    assert.equal(wallet.owed, 0);
    assert.deepEqual(
      ledger.filter((e) => e.kind === "refund").map((e) => e.amount).sort((a, b) => a - b),
      [3_000_000, 7_000_000, 10_000_000],
    );
  }));

Deno.test("a refund that fails or is canceled gives back what it took, whatever order its events arrive in", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    // The failure arrives first: the refund is taken and given back at once.
    const failed = refunded(paymentIntent, 400, {
      id: "re_failed",
      type: "refund.failed",
      status: "failed",
    });
    assert.equal((await deliver(s, failed)).body.outcome, "given_back");
    assert.equal(
      (await deliver(s, refunded(paymentIntent, 400, { id: "re_failed", status: "pending" })))
        .body.outcome,
      "already_taken_back",
    );
    // In order this time: created, then canceled.
    await deliver(s, refunded(paymentIntent, 600, { id: "re_canceled", status: "pending" }));
    assert.equal((await s.wallet(appId)).available, 9_000_000);
    const canceled = refunded(paymentIntent, 600, {
      id: "re_canceled",
      type: "refund.updated",
      status: "canceled",
    });
    assert.equal((await deliver(s, canceled)).body.outcome, "given_back");
    assert.equal((await deliver(s, canceled)).body.outcome, "already_given_back");
    await assertAllGivenBack(s, appId, "refund", 10_000_000);
  }));

Deno.test("a refund's failure gives back what its debit took when the operator took it by hand first, never another refund's money", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    assert.equal(
      (await deliver(s, refunded(paymentIntent, 500, { id: "re_other" }))).body.outcome,
      "taken_back",
    );
    // Taken by hand before its event, for less than Stripe says.
    await runAdmin(
      [
        "debit",
        "--app",
        appId,
        "--amount",
        "1.00",
        "--reason",
        "by hand",
        "--reference",
        "re_hand",
      ],
      s.kv,
      PUBLIC_URL,
    );
    const events = [
      refunded(paymentIntent, 300, { id: "re_hand", status: "pending" }),
      refunded(paymentIntent, 300, { id: "re_hand", type: "refund.failed", status: "failed" }),
    ];
    assert.equal((await deliver(s, events[0])).body.outcome, "already_taken_back");
    assert.equal((await deliver(s, events[1])).body.outcome, "given_back");
    const ledger = (await ledgerOf(s, appId)).filter((e) => e.reference === "re_hand");
    assert.deepEqual(ledger.map((e) => [e.kind, e.amount]), [["refund", 1_000_000], [
      "refund_reversed",
      1_000_000,
    ]]);
    await assertMoneyLeft(s, appId, { available: 10_000_000, refunded: 5_000_000, owed: 0 });
    await assertAuditClean(s.kv);
  }));

Deno.test("a refund of credits already held takes what is left, owes the rest, and takes it before anything else is reserved", () =>
  withStripe(async (s) => {
    // Requests in flight hold all but $1 of the $15.
    const { appId, apiKey, held } = await refundWhileHeld(s, 14_000_000);
    await assertMoneyLeft(s, appId, { available: 0, refunded: 1_000_000, owed: 9_000_000 });
    // Nothing can be spent while the debt is not paid.
    const refused = await s.chat(apiKey, {
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(refused.status, 402);
    await refused.body?.cancel();
    // The hold ends unspent: the debt is paid from it first.
    await s.wallets.release(appId, held.reservation.id);
    await assertMoneyLeft(s, appId, { available: 5_000_000, refunded: 10_000_000, owed: 0 });
  }));

Deno.test("money still owed is taken from the next top-up first", () =>
  withStripe(async (s) => {
    const { appId, held } = await refundWhileHeld(s, 15_000_000);
    // The hold is spent in full: the refunded credits are gone, owed in full.
    await s.wallets.settle(appId, held.reservation.id, {
      requestId: "req_held",
      keyId: "key_elsewhere",
      model: "fake/gpt",
      provider: "fake",
      promptTokens: 1,
      completionTokens: 1,
      cost: 15_000_000,
      streamed: false,
      outcome: "completed",
      countedLocally: false,
    });
    assert.equal((await s.wallet(appId)).owed, 10_000_000);
    await topUp(s, appId, 25_000_000);
    await assertMoneyLeft(s, appId, { available: 15_000_000, refunded: 10_000_000, owed: 0 });
  }));

Deno.test("a disputed top-up is charged back once, and given back once if the dispute is won, in any order", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const id = "dp_test_won";
    const dispute = (status: string) => disputeObject({ id, paymentIntent, amount: 1_000, status });
    // The win arrives before the dispute's creation: the chargeback is taken, then given back.
    const won = eventPayload("charge.dispute.closed", dispute("won"));
    assert.equal((await deliver(s, won)).body.outcome, "given_back");
    for (
      const payload of [
        eventPayload("charge.dispute.created", dispute("needs_response")),
        eventPayload("charge.dispute.funds_withdrawn", dispute("needs_response")),
      ]
    ) {
      assert.equal((await deliver(s, payload)).body.outcome, "already_taken_back");
    }
    for (const payload of [eventPayload("charge.dispute.funds_reinstated", dispute("won")), won]) {
      assert.equal((await deliver(s, payload)).body.outcome, "already_given_back");
    }
    await assertAllGivenBack(s, appId, "chargeback", 10_000_000);
  }));

Deno.test("a redelivered dispute won is acknowledged as already given back, and gives the chargeback back once however often and concurrently it comes", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const dispute = (status: string) =>
      disputeObject({ id: "dp_test_redelivered", paymentIntent, amount: 1_000, status });
    const created = eventPayload("charge.dispute.created", dispute("needs_response"));
    assert.equal((await deliver(s, created)).body.outcome, "taken_back");
    assert.equal((await s.wallet(appId)).available, 5_000_000);
    const won = eventPayload("charge.dispute.closed", dispute("won"));
    assert.equal((await deliver(s, won)).body.outcome, "given_back");
    const signature = await signPayload(won);
    const again = await Promise.all(
      Array.from({ length: 10 }, () => deliver(s, won, signature)),
    );
    assert.deepEqual(
      again.map((r) => [r.status, r.body.outcome]),
      Array.from({ length: 10 }, () => [200, "already_given_back"]),
    );
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.funds_reinstated", dispute("won")))).body
        .outcome,
      "already_given_back",
    );
    assert.equal((await deliver(s, created)).body.outcome, "already_taken_back");
    await assertAllGivenBack(s, appId, "chargeback", 10_000_000);
    const { ledger } = await moneyState(s, appId);
    assert.equal(ledger.filter((e) => e.kind === "chargeback_reversed").length, 1);
    assert.equal(s.logs.filter((l) => l.event === "top_up_dispute_won").length, 1);
  }));

Deno.test("a dispute lost keeps its chargeback; an inquiry moves no money and takes nothing", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const before = await moneyState(s, appId);
    const inquiry = disputeObject({
      paymentIntent,
      amount: 1_000,
      status: "warning_needs_response",
    });
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.created", inquiry))).body.outcome,
      "inquiry",
    );
    assert.deepEqual(await moneyState(s, appId), before);
    const lost = disputeObject({ paymentIntent, amount: 400, status: "needs_response" });
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.created", lost))).body.outcome,
      "taken_back",
    );
    const closed = { ...lost, status: "lost" };
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.closed", closed))).body.outcome,
      "already_taken_back",
    );
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 11_000_000);
    assert.equal(wallet.refunded, 4_000_000);
    assert.ok(s.logs.some((l) => l.event === "top_up_disputed" && l.appId === appId));
  }));

Deno.test("a refund or dispute of a payment that is not one of our top-ups is acknowledged and changes nothing", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    await topUp(s, appId, 10_000_000);
    const before = await moneyState(s, appId);
    for (
      const payload of [
        refunded("pi_someone_else", 1_000),
        eventPayload(
          "charge.dispute.created",
          disputeObject({
            paymentIntent: "pi_someone_else",
            amount: 1_000,
            status: "needs_response",
          }),
        ),
      ]
    ) {
      const { status, body } = await deliver(s, payload);
      assert.equal(status, 200);
      assert.equal(body.outcome, "unmatched");
    }
    assert.deepEqual(await moneyState(s, appId), before);
    assert.equal(s.logs.filter((l) => l.event === "stripe_reversal_unmatched").length, 2);
  }));

Deno.test("two processes on one database receiving the same refunds concurrently take each once", () =>
  withTwoProcesses(async (one, two) => {
    const { appId } = await one.newApp();
    const paymentIntent = await topUp(one, appId, 10_000_000);
    const payloads = [100, 200, 300, 400].map((cents, i) =>
      refunded(paymentIntent, cents, { id: `re_${i}` })
    );
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => deliver(i % 2 ? one : two, payloads[i % 4])),
    );
    assert.ok(results.every((r) => r.status === 200));
    const wallet = await one.wallet(appId);
    assert.equal(wallet.available, 5_000_000);
    assert.equal(wallet.refunded, 10_000_000);
    assert.equal(sumOf(await ledgerOf(one, appId), "refund"), 10_000_000);
  }));

Deno.test("a refund that arrives before its payment's checkout.session.completed credits the payment, then takes the refund back", () =>
  withStripe(async (s, fake) => {
    const { appId } = await s.newApp();
    // Stripe knows the paid session; its completion event is still on the way.
    const session = paidSession(appId, 10_000_000);
    fake.sessions.set(session.id, session);
    const paymentIntent = session.payment_intent as string;
    const refund = refunded(paymentIntent, 1_000, { id: "re_early" });
    const early = await deliver(s, refund);
    assert.equal(early.status, 200);
    assert.equal(early.body.outcome, "taken_back");
    const late = await deliver(s, eventPayload("checkout.session.completed", session));
    assert.equal(late.body.outcome, "already_credited");
    assert.equal((await deliver(s, refund)).body.outcome, "already_taken_back");
    const { wallet, ledger } = await moneyState(s, appId);
    assert.equal(wallet.available, 5_000_000);
    assert.equal(wallet.topUps, 10_000_000);
    assert.equal(wallet.refunded, 10_000_000);
    assert.equal(ledger.filter((e) => e.kind === "top_up").length, 1);
    assert.equal(sumOf(ledger, "refund"), 10_000_000);
    assert.equal(s.logs.filter((l) => l.event === "stripe_reversal_unmatched").length, 0);
  }));

Deno.test("a dispute won before its payment's completion event came ends with the payment credited and nothing taken", () =>
  withStripe(async (s, fake) => {
    const { appId } = await s.newApp();
    const session = paidSession(appId, 10_000_000);
    fake.sessions.set(session.id, session);
    const paymentIntent = session.payment_intent as string;
    const won = disputeObject({ paymentIntent, amount: 1_000, status: "won" });
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.closed", won))).body.outcome,
      "given_back",
    );
    await deliver(s, eventPayload("checkout.session.completed", session));
    await assertAllGivenBack(s, appId, "chargeback", 10_000_000);
  }));

Deno.test("a refund whose payment cannot be looked up at Stripe is answered 5xx, so Stripe delivers it again, and nothing changes", async () => {
  const fake = startFakeStripe();
  const broken = createStripeClient("sk_test_wrong", {
    host: "127.0.0.1",
    port: fake.port,
    protocol: "http",
  });
  const s = await startService({ env: STRIPE_ENV, payments: { stripe: broken } });
  try {
    const { appId } = await s.newApp();
    const session = paidSession(appId, 10_000_000);
    fake.sessions.set(session.id, session);
    const before = await moneyState(s, appId);
    const res = await s.handle(
      await webhookRequest(refunded(session.payment_intent as string, 1_000)),
    );
    await res.body?.cancel();
    assert.ok(res.status >= 500, `status ${res.status}`);
    assert.deepEqual(await moneyState(s, appId), before);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await fake.close();
  }
});

Deno.test("the webhook's refusals are in the API's error shape: code, type, message, param and doc_url", async () => {
  const refusalOf = async (s: TestService, headers: Record<string, string>) => {
    const res = await s.handle(
      new Request(`${PUBLIC_URL}/webhooks/stripe`, { method: "POST", headers, body: "{}" }),
    );
    return { status: res.status, error: (await res.json()).error };
  };
  await withStripe(async (s) => {
    const missing = await refusalOf(s, {});
    assert.equal(missing.status, 400);
    assert.equal(missing.error.code, "missing_parameter");
    assert.equal(missing.error.param, "Stripe-Signature");
    const invalid = await refusalOf(s, { "stripe-signature": "t=1,v1=deadbeef" });
    assert.equal(invalid.status, 400);
    assert.equal(invalid.error.code, "invalid_parameter");
    assert.equal(invalid.error.param, "Stripe-Signature");
    for (const { error } of [missing, invalid]) {
      assert.equal(error.type, "invalid_request_error");
      assert.equal(error.doc_url, `${PUBLIC_URL}/docs/errors#${error.code}`);
    }
  });
  const unconfigured = await startService();
  try {
    const { status, error } = await refusalOf(unconfigured, { "stripe-signature": "t=1,v1=x" });
    assert.equal(status, 503);
    assert.equal(error.code, "payments_unavailable");
    assert.equal(error.type, "api_error");
    assert.equal(error.doc_url, `${PUBLIC_URL}/docs/errors#payments_unavailable`);
    assert.match(error.message, /not configured/);
  } finally {
    await unconfigured.close();
  }
});

Deno.test("a refund or dispute in a currency other than USD takes no wrong number back: nothing is taken, and the operator is told what to settle", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const before = await moneyState(s, appId);
    // 15,000 won (about 11 USD) read as cents would be 150 USD: the whole top-up.
    const refund = refundObject({
      paymentIntent,
      amount: 15_000,
      currency: "krw",
      presentment: { amount: 15_000, currency: "krw" },
    });
    const dispute = disputeObject({
      paymentIntent,
      amount: 9_000,
      status: "needs_response",
      currency: "eur",
    });
    for (
      const payload of [
        eventPayload("refund.created", refund),
        eventPayload("charge.dispute.created", dispute),
        eventPayload("charge.dispute.closed", { ...dispute, status: "won" }),
      ]
    ) {
      const { status, body } = await deliver(s, payload);
      assert.equal(status, 200);
      assert.equal(body.outcome, "not_usd");
    }
    assert.deepEqual(await moneyState(s, appId), before);
    const told = s.logs.filter((l) => l.event === "stripe_reversal_not_usd");
    assert.deepEqual(
      told.map((l) => [l.level, l.appId, l.reference, l.currency, l.amount]),
      [
        ["error", appId, refund.id, "krw", 15_000],
        ["error", appId, dispute.id, "eur", 9_000],
        ["error", appId, dispute.id, "eur", 9_000],
      ],
    );
    assert.match(String(told[1].settle), /^deno task admin debit --app app_\w+ --amount USD /);
    // Won: what the operator may have taken by hand is theirs to give back.
    assert.match(
      String(told[2].settle),
      new RegExp(`^deno task admin credit --app app_\\w+ --reversal-of ${dispute.id} `),
    );
  }));

/** The arguments of a logged `deno task admin …` command, its `USD` amount filled in. */
function commandArgs(command: string, usd: string): string[] {
  const words = [...command.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]);
  assert.deepEqual(words.slice(0, 3), ["deno", "task", "admin"]);
  return words.slice(3).map((w, i, all) => all[i - 1] === "--amount" ? usd : w);
}

Deno.test("a refund in another currency is settled with the admin command its log names: taken once, however often it is run or the event delivered", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const refund = refundObject({ paymentIntent, amount: 15_000, currency: "krw" });
    const payload = eventPayload("refund.created", refund);
    assert.equal((await deliver(s, payload)).body.outcome, "not_usd");
    const told = s.logs.find((l) => l.event === "stripe_reversal_not_usd")!;
    assert.equal(
      told.settle,
      `deno task admin debit --app ${appId} --amount USD --reason "Refund ${refund.id} of a ` +
        `Stripe top-up, paid in KRW" --reference ${refund.id}`,
    );
    // 15,000 won, as the operator finds it in USD.
    const args = commandArgs(told.settle as string, "11.04");
    const settled = await runAdmin(args, s.kv, PUBLIC_URL);
    assert.equal((settled.output as { debited: string }).debited, "11.040000");
    const again = await runAdmin(args, s.kv, PUBLIC_URL);
    assert.equal((again.output as { already_taken: boolean }).already_taken, true);
    assert.equal((await deliver(s, payload)).body.outcome, "not_usd");
    const refunds = (await ledgerOf(s, appId)).filter((e) => e.kind === "refund");
    assert.deepEqual(refunds.map((e) => [e.amount, e.reference, e.reason]), [
      [11_040_000, refund.id, `Refund ${refund.id} of a Stripe top-up, paid in KRW`],
    ]);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.refunded, 11_040_000);
    assert.equal(wallet.available, 15_000_000 - 11_040_000);
  }));

Deno.test("a dispute in another currency won after the operator took it back is given back with the command its log names: a chargeback_reversed entry, once, and the books add up", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const dispute = disputeObject({
      paymentIntent,
      amount: 9_000,
      status: "needs_response",
      currency: "eur",
    });
    assert.equal(
      (await deliver(s, eventPayload("charge.dispute.created", dispute))).body.outcome,
      "not_usd",
    );
    const takeBack = s.logs.find((l) => l.event === "stripe_reversal_not_usd")!;
    // 90 euros, as the operator finds them in USD; run twice, taken once.
    await runAdmin(commandArgs(takeBack.settle as string, "9.75"), s.kv, PUBLIC_URL);
    await runAdmin(commandArgs(takeBack.settle as string, "9.75"), s.kv, PUBLIC_URL);
    await assertMoneyLeft(s, appId, { available: 5_250_000, refunded: 9_750_000, owed: 0 });

    const won = eventPayload("charge.dispute.closed", { ...dispute, status: "won" });
    assert.equal((await deliver(s, won)).body.outcome, "not_usd");
    const giveBack = s.logs.filter((l) => l.event === "stripe_reversal_not_usd")[1];
    assert.equal(giveBack.undone, "won");
    assert.equal(
      giveBack.settle,
      `deno task admin credit --app ${appId} --reversal-of ${dispute.id} ` +
        `--reason "The dispute ${dispute.id} won: given back"`,
    );
    const args = commandArgs(giveBack.settle as string, "unused");
    const [first, second] = await Promise.all([
      runAdmin(args, s.kv, PUBLIC_URL),
      runAdmin(args, s.kv, PUBLIC_URL),
    ]);
    const outputs = [first.output, second.output] as Record<string, unknown>[];
    assert.equal(outputs.filter((o) => o.already_given_back).length, 1, "given back once");
    for (const output of outputs) {
      assert.equal(output.kind, "chargeback_reversed");
      assert.equal(output.given_back, "9.750000");
    }
    const again = (await runAdmin(args, s.kv, PUBLIC_URL)).output as Record<string, unknown>;
    assert.equal(again.already_given_back, true);
    assert.equal((await deliver(s, won)).body.outcome, "not_usd");
    await assertMoneyLeft(s, appId, { available: 15_000_000, refunded: 0, owed: 0 });
    const ledger = await ledgerOf(s, appId);
    assert.deepEqual(
      ledger.filter((e) => e.reference === dispute.id).map((e) => [e.kind, e.amount]),
      [["chargeback", 9_750_000], ["chargeback_reversed", 9_750_000]],
    );
    assert.deepEqual(ledger.filter((e) => e.kind === "operator_credit"), []);
    await assertAuditClean(s.kv);
  }));

Deno.test("a failed refund in another currency whose debit is still partly owed is given back by the operator as the webhook would: the debt forgiven first, the rest returned", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const held = await hold(s, appId, 12_000_000);
    const refund = refundObject({ paymentIntent, amount: 15_000, currency: "krw" });
    await deliver(s, eventPayload("refund.created", refund));
    const takeBack = s.logs.find((l) => l.event === "stripe_reversal_not_usd")!;
    await runAdmin(commandArgs(takeBack.settle as string, "11.04"), s.kv, PUBLIC_URL);
    await assertMoneyLeft(s, appId, { available: 0, refunded: 3_000_000, owed: 8_040_000 });

    const failed = { ...refund, status: "failed" };
    assert.equal((await deliver(s, eventPayload("refund.failed", failed))).body.outcome, "not_usd");
    const giveBack = s.logs.filter((l) => l.event === "stripe_reversal_not_usd")[1];
    const { output } = await runAdmin(
      commandArgs(giveBack.settle as string, "unused"),
      s.kv,
      PUBLIC_URL,
    );
    assert.equal((output as Record<string, unknown>).kind, "refund_reversed");
    await assertMoneyLeft(s, appId, { available: 3_000_000, refunded: 0, owed: 0 });
    await s.wallets.release(appId, held.reservation.id);
    await assertMoneyLeft(s, appId, { available: 15_000_000, refunded: 0, owed: 0 });
    await assertAuditClean(s.kv);
  }));

Deno.test("a refund the webhook took back and the operator gave back by hand is not given back again by its failure's event", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const refund = refundObject({ paymentIntent, amount: 400, id: "re_given_by_hand" });
    assert.equal(
      (await deliver(s, eventPayload("refund.created", refund))).body.outcome,
      "taken_back",
    );
    const args = [
      "credit",
      "--app",
      appId,
      "--reversal-of",
      refund.id as string,
      "--reason",
      "failed",
    ];
    const { output } = await runAdmin(args, s.kv, PUBLIC_URL);
    assert.equal((output as Record<string, unknown>).given_back, "4.000000");
    const failed = eventPayload("refund.failed", { ...refund, status: "failed" });
    assert.equal((await deliver(s, failed)).body.outcome, "already_given_back");
    await assertMoneyLeft(s, appId, { available: 15_000_000, refunded: 0, owed: 0 });
    await assertAuditClean(s.kv);
  }));

Deno.test("an operator's debit naming a refund the webhook already took back takes nothing more", () =>
  withStripe(async (s) => {
    const { appId } = await s.newApp();
    const paymentIntent = await topUp(s, appId, 10_000_000);
    const refund = refundObject({ paymentIntent, amount: 400, id: "re_by_webhook" });
    const { body } = await deliver(s, eventPayload("refund.created", refund));
    assert.equal(body.outcome, "taken_back");
    const { output } = await runAdmin(
      [
        "debit",
        "--app",
        appId,
        "--amount",
        "4.00",
        "--reason",
        "by hand",
        "--reference",
        "re_by_webhook",
      ],
      s.kv,
      PUBLIC_URL,
    );
    assert.deepEqual(
      { ...(output as Record<string, unknown>), entry_id: undefined, balance: undefined },
      {
        app_id: appId,
        already_taken: true,
        kind: "refund",
        reference: refund.id,
        debited: "4.000000",
        owed: "0.000000",
        entry_id: undefined,
        balance: undefined,
      },
    );
    assert.equal((await s.wallet(appId)).refunded, 4_000_000);
  }));
