import { createApp as createAppRecord, rotateTopUpToken } from "@/lib/tenants/mod.ts";
import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import { NotFoundError } from "@/lib/core/mod.ts";
import { MAX_WALLET_CREDITS } from "@/lib/billing/mod.ts";
import { updateTopUpSettings } from "@/lib/payments/top_up.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { formTokenIn, ledgerOf, moneyState, page, postForm, topUpFormToken } from "./forms.ts";
import { assertAuditClean, PUBLIC_URL, startService, type TestService } from "./helpers.ts";

type Options = Parameters<typeof startService>[0];

async function withService(options: Options, fn: (s: TestService) => Promise<void>) {
  const service = await startService(options);
  try {
    await fn(service);
    await assertAuditClean(service.kv);
  } finally {
    await service.close();
  }
}

const DEV = { payments: { devServer: true } };
const PRODUCTION_WITHOUT_STRIPE = {};

/** Runs the whole development purchase: form, test checkout, confirmation; returns the receipt. */
async function buyInDevMode(s: TestService, topUpToken: string, amount: string) {
  const chosen = await postForm(s, `/top-up/${topUpToken}`, {
    amount,
    form_token: await topUpFormToken(s, topUpToken),
  });
  assert.equal(chosen.status, 303);
  const checkoutPath = chosen.headers.get("location")!;
  assert.match(checkoutPath, new RegExp(`^/top-up/${topUpToken}/dev-checkout/devp_[0-9a-z]{26}$`));
  const checkout = await page(s, checkoutPath);
  assert.equal(checkout.status, 200);
  const checkoutHtml = await checkout.text();
  const paid = await postForm(s, checkoutPath, { form_token: formTokenIn(checkoutHtml) });
  assert.equal(paid.status, 303);
  return { checkoutPath, checkoutHtml, receiptPath: paid.headers.get("location")! };
}

Deno.test("the top-up page names the app and offers 5, 10, 25 and 50 USD", () =>
  withService(DEV, async (s) => {
    const { topUpToken } = await s.newApp("Story Forge");
    const res = await page(s, `/top-up/${topUpToken}`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("cache-control"), "no-store");
    const html = await res.text();
    assert.match(html, /Add credits to Story Forge/);
    const values = [...html.matchAll(/name="amount" value="(\d+)"/g)].map((m) => m[1]);
    assert.deepEqual(values, ["5", "10", "25", "50"]);
    assert.match(html, /One-time purchase/);
    assert.match(html, /data-island="TopUpForm"/);
    assert.match(html, /<script type="module" src="\/static\/build\/islands.js">/);
    assert.doesNotMatch(html, /<script>|onclick=|onsubmit=/i, "no inline script");
  }));

Deno.test("the hosted top-up pages show buyers no developer navigation (models, docs, dashboard)", () =>
  withService(DEV, async (s) => {
    const { topUpToken } = await s.newApp("Story Forge");
    const { checkoutHtml, receiptPath } = await buyInDevMode(s, topUpToken, "5");
    const pages: [string, string][] = [["test checkout", checkoutHtml]];
    for (const path of [`/top-up/${topUpToken}`, receiptPath, "/top-up/nope"]) {
      pages.push([path, await (await page(s, path)).text()]);
    }
    for (const [path, html] of pages) {
      assert.match(html, /<header class="site-header">/, path);
      assert.doesNotMatch(html, /aria-label="Main"|href="\/(models|docs|dashboard)/, path);
      assert.doesNotMatch(html, /LLM gateway|API version/, path);
    }
  }));

Deno.test("an unknown or malformed top-up address is a 404 page that changes nothing", () =>
  withService(DEV, async (s) => {
    const { appId } = await s.newApp();
    const before = await moneyState(s, appId);
    for (const token of ["a".repeat(31), "not-a-token", appId, "%00"]) {
      const res = await page(s, `/top-up/${token}`);
      assert.equal(res.status, 404);
      assert.match(await res.text(), /This top-up link does not work/);
      const post = await postForm(s, `/top-up/${token}`, { amount: "10", form_token: "x" });
      assert.equal(post.status, 404);
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("a rotated top-up address stops working at once, forms from it included", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const formToken = await topUpFormToken(s, topUpToken);
    const before = await moneyState(s, appId);
    const rotated = await rotateTopUpToken(s.kv, appId);
    assert.notEqual(rotated.topUpToken, topUpToken);
    assert.equal((await page(s, `/top-up/${topUpToken}`)).status, 404);
    const post = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: formToken,
    });
    assert.equal(post.status, 404);
    assert.equal((await page(s, `/top-up/${rotated.topUpToken}`)).status, 200);
    // The old form token was bound to the old address and is refused on the new one too.
    const moved = await postForm(s, `/top-up/${rotated.topUpToken}`, {
      amount: "10",
      form_token: formToken,
    });
    assert.equal(moved.status, 403);
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("a receipt link still shows the payment after the owner replaces the top-up address", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    const other = await s.newApp("other");
    await updateTopUpSettings(s.kv, appId, { showBalance: true });
    const { receiptPath } = await buyInDevMode(s, topUpToken, "25");
    assert.match(await (await page(s, receiptPath)).text(), /Balance now/);
    const otherPaid = await buyInDevMode(s, other.topUpToken, "5");
    const rotated = await rotateTopUpToken(s.kv, appId);

    const receipt = await page(s, receiptPath);
    assert.equal(receipt.status, 200);
    const html = await receipt.text();
    assert.match(html, /Thank you: 25\.00 USD added to Story Forge/);
    assert.doesNotMatch(html, /Nothing was charged/);
    // Nor does it show the wallet now, which the owner shows on the page only to its buyers.
    assert.doesNotMatch(html, /Balance now/);
    // The replaced address may have leaked: its receipt does not lead to the new one.
    assert.doesNotMatch(html, new RegExp(rotated.topUpToken));
    assert.doesNotMatch(html, /Buy more credits/);
    // The old address shows only its own app's payments, and still sells nothing.
    const foreign = await page(s, otherPaid.receiptPath.replace(other.topUpToken, topUpToken));
    assert.equal(foreign.status, 404);
    assert.doesNotMatch(await foreign.text(), /5\.00 USD/);
    assert.equal((await page(s, `/top-up/${topUpToken}`)).status, 404);
  }));

Deno.test("the development checkout credits the chosen amount once and shows a receipt", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    const { checkoutPath, checkoutHtml, receiptPath } = await buyInDevMode(s, topUpToken, "10");
    assert.match(checkoutHtml, /TEST CHECKOUT/);
    assert.match(checkoutHtml, /no real money/);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 15_000_000);
    assert.equal(wallet.topUps, 10_000_000);

    const purchaseId = checkoutPath.split("/").pop()!;
    assert.equal(receiptPath, `/top-up/${topUpToken}/receipt?session_id=${purchaseId}`);
    const receipt = await page(s, receiptPath);
    assert.equal(receipt.status, 200);
    const html = await receipt.text();
    assert.match(html, /10\.00 USD/);
    assert.match(html, new RegExp(purchaseId));
    assert.match(html, /\d{4}-\d\d-\d\d \d\d:\d\d UTC/);

    const ledger = await ledgerOf(s, appId);
    const topUps = ledger.filter((e) => e.kind === "top_up");
    assert.equal(topUps.length, 1);
    assert.equal(topUps[0].amount, 10_000_000);
    assert.equal(topUps[0].reference, purchaseId);

    // Confirming the same test checkout again (a double click, a replayed form) adds nothing.
    const again = await postForm(s, checkoutPath, { form_token: formTokenIn(checkoutHtml) });
    assert.equal(again.status, 303);
    assert.equal((await page(s, checkoutPath)).status, 303);
    assert.equal((await s.wallet(appId)).available, 15_000_000);
    assert.equal((await ledgerOf(s, appId)).length, 2);
  }));

Deno.test("each of the four amounts credits exactly that amount", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    let expected = 5_000_000;
    for (const usd of [5, 10, 25, 50]) {
      await buyInDevMode(s, topUpToken, String(usd));
      expected += usd * 1_000_000;
      assert.equal((await s.wallet(appId)).available, expected);
    }
  }));

Deno.test("a wallet at its credit limit gets no test checkout, and one opened before is refused at payment", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const chosen = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: await topUpFormToken(s, topUpToken),
    });
    const checkoutPath = chosen.headers.get("location")!;
    const checkoutHtml = await (await page(s, checkoutPath)).text();
    await s.wallets.credit(appId, {
      amount: MAX_WALLET_CREDITS - 5_000_000 - 1_000_000,
      kind: "operator_credit",
      reason: "to the limit",
    });
    const before = await moneyState(s, appId);
    const paid = await postForm(s, checkoutPath, { form_token: formTokenIn(checkoutHtml) });
    assert.equal(paid.status, 409);
    assert.match(await paid.text(), /This app cannot take more credits/);
    const again = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "5",
      form_token: await topUpFormToken(s, topUpToken),
    });
    assert.equal(again.status, 409);
    await again.body?.cancel();
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("amounts other than 5, 10, 25 and 50 are refused and change nothing", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const formToken = await topUpFormToken(s, topUpToken);
    const before = await moneyState(s, appId);
    for (const amount of ["1", "100", "10.00", "9.99", "-5", "0", "05", "1e1", "", "10 "]) {
      const res = await postForm(s, `/top-up/${topUpToken}`, { amount, form_token: formToken });
      assert.equal(res.status, 400, `amount ${JSON.stringify(amount)}`);
      assert.match(await res.text(), /5, 10, 25 or 50 USD/);
    }
    const missing = await postForm(s, `/top-up/${topUpToken}`, { form_token: formToken });
    assert.equal(missing.status, 400);
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("tampered, foreign or cross-site forms are refused and change nothing", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const other = await s.newApp("other");
    const formToken = await topUpFormToken(s, topUpToken);
    const foreignToken = await topUpFormToken(s, other.topUpToken);
    const before = await moneyState(s, appId);
    const tampered = formToken.slice(0, -1) + (formToken.endsWith("0") ? "1" : "0");
    for (const token of [tampered, foreignToken, "", "1.2.3"]) {
      const res = await postForm(s, `/top-up/${topUpToken}`, { amount: "10", form_token: token });
      assert.equal(res.status, 403);
      assert.match(await res.text(), /nothing was charged/);
    }
    const crossSite = await postForm(
      s,
      `/top-up/${topUpToken}`,
      { amount: "10", form_token: formToken },
      { "sec-fetch-site": "cross-site", origin: "https://evil.example" },
    );
    assert.equal(crossSite.status, 403);
    const foreignOrigin = await postForm(
      s,
      `/top-up/${topUpToken}`,
      { amount: "10", form_token: formToken },
      { origin: "https://evil.example" },
    );
    assert.equal(foreignOrigin.status, 403);

    // A test checkout is confirmed only with the form of that very purchase.
    const chosen = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: formToken,
    });
    const checkoutPath = chosen.headers.get("location")!;
    const forged = await postForm(s, checkoutPath, { form_token: formToken });
    assert.equal(forged.status, 403);
    const otherApps = await postForm(
      s,
      checkoutPath.replace(topUpToken, other.topUpToken),
      { form_token: formToken },
    );
    assert.equal(otherApps.status, 404);
    assert.deepEqual(await moneyState(s, appId), before);
    assert.deepEqual((await s.wallet(other.appId)).available, 5_000_000);
  }));

Deno.test("without Stripe keys or the dev flag, amounts show but purchases are unavailable", () =>
  withService(PRODUCTION_WITHOUT_STRIPE, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const res = await page(s, `/top-up/${topUpToken}`);
    assert.equal(res.status, 200);
    const html = await res.text();
    assert.match(html, /Purchases are unavailable right now/);
    assert.match(html, /<fieldset disabled>/);
    assert.match(html, /<button type="submit" class="button pay" disabled/);
    assert.equal([...html.matchAll(/name="amount" value="\d+"/g)].length, 4);
    const before = await moneyState(s, appId);
    const post = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "10",
      form_token: formTokenIn(html),
    });
    assert.equal(post.status, 503);
    // The test checkout does not exist outside development.
    const devPath = `/top-up/${topUpToken}/dev-checkout/devp_0000000000aaaaaaaaaaaaaaaa`;
    assert.equal((await page(s, devPath)).status, 404);
    assert.equal((await postForm(s, devPath, { form_token: "x" })).status, 404);
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("PAYMENTS=dev opts a production start into the test checkout", () =>
  withService({ env: { PAYMENTS: "dev" } }, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    await buyInDevMode(s, topUpToken, "5");
    assert.equal((await s.wallet(appId)).available, 10_000_000);
  }));

Deno.test("the balance shows on the page only when the owner allows it", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const hidden = await (await page(s, `/top-up/${topUpToken}`)).text();
    assert.doesNotMatch(hidden, /Current balance/);
    await updateTopUpSettings(s.kv, appId, { showBalance: true });
    const shown = await (await page(s, `/top-up/${topUpToken}`)).text();
    assert.match(shown, /Current balance of test app: <strong>5\.00 USD<\/strong>/);
  }));

Deno.test("the way back links only to the stored, validated return URL", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp("Story Forge");
    const plain = await (await page(s, `/top-up/${topUpToken}`)).text();
    assert.doesNotMatch(plain, /Back to Story Forge/);
    await updateTopUpSettings(s.kv, appId, { returnUrl: "https://storyforge.example/app?x=1" });
    // A return address in the request is ignored: no open redirect.
    const res = await page(
      s,
      `/top-up/${topUpToken}?return_url=https://evil.example&next=https://evil.example`,
    );
    const html = await res.text();
    assert.match(html, /href="https:\/\/storyforge\.example\/app\?x=1"/);
    assert.doesNotMatch(html, /evil\.example/);
    const { receiptPath } = await buyInDevMode(s, topUpToken, "10");
    const receipt = await (await page(s, `${receiptPath}&return_url=https://evil.example`)).text();
    assert.match(receipt, /Back to Story Forge/);
    assert.doesNotMatch(receipt, /evil\.example/);
    await updateTopUpSettings(s.kv, appId, { returnUrl: null });
    assert.doesNotMatch(await (await page(s, `/top-up/${topUpToken}`)).text(), /Back to/);
  }));

Deno.test("a receipt for an unknown or unpaid reference says so and shows no credit", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const other = await s.newApp("other");
    const before = await moneyState(s, appId);
    for (const ref of ["", "devp_0000000000aaaaaaaaaaaaaaaa", "cs_test_nothing", "<script>"]) {
      const res = await page(
        s,
        `/top-up/${topUpToken}/receipt?session_id=${encodeURIComponent(ref)}`,
      );
      assert.equal(res.status, 404);
      assert.match(await res.text(), /No payment found/);
    }
    const chosen = await postForm(s, `/top-up/${topUpToken}`, {
      amount: "25",
      form_token: await topUpFormToken(s, topUpToken),
    });
    const purchaseId = chosen.headers.get("location")!.split("/").pop();
    const unpaid = await page(s, `/top-up/${topUpToken}/receipt?session_id=${purchaseId}`);
    assert.equal(unpaid.status, 402);
    assert.match(await unpaid.text(), /Payment not completed/);
    // Another app's page does not show this app's purchase.
    const { receiptPath } = await buyInDevMode(s, topUpToken, "5");
    const elsewhere = await page(s, receiptPath.replace(topUpToken, other.topUpToken));
    assert.equal(elsewhere.status, 404);
    assert.equal((await s.wallet(appId)).available, before.wallet.available + 5_000_000);
  }));

Deno.test("admin set-top-up stores the return URL and balance setting; show-app reports them", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const { app } = await createAppRecord(kv, { name: "cli app" });
    const set = await runAdmin(
      [
        "set-top-up",
        "--app",
        app.id,
        "--return-url",
        "https://example.com/back",
        "--show-balance",
        "true",
      ],
      kv,
      PUBLIC_URL,
    );
    assert.deepEqual(set.output, {
      app_id: app.id,
      top_up_url: `${PUBLIC_URL}/top-up/${app.topUpToken}`,
      return_url: "https://example.com/back",
      show_balance: true,
    });
    const shown = await runAdmin(["show-app", "--app", app.id], kv, PUBLIC_URL);
    const output = shown.output as Record<string, unknown>;
    assert.equal(output.top_up_return_url, "https://example.com/back");
    assert.equal(output.top_up_show_balance, true);
    await assert.rejects(
      runAdmin(
        ["set-top-up", "--app", app.id, "--return-url", "http://example.com"],
        kv,
        PUBLIC_URL,
      ),
      /--return-url: the return URL must use https/,
    );
    await assert.rejects(
      runAdmin(["set-top-up", "--app", app.id, "--show-balance", "yes"], kv, PUBLIC_URL),
      /--show-balance must be true or false/,
    );
    await assert.rejects(
      runAdmin(["set-top-up", "--app", "app_missing", "--show-balance", "true"], kv, PUBLIC_URL),
      NotFoundError,
    );
    await runAdmin(["set-top-up", "--app", app.id, "--return-url", "none"], kv, PUBLIC_URL);
    const stored = await kv.get<{ topUpReturnUrl?: string | null }>(keys.app(app.id));
    assert.equal(stored.value?.topUpReturnUrl, null);
  } finally {
    kv.close();
  }
});

Deno.test("a test-checkout id longer than any purchase id is the 404 page, not a 500", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const before = await moneyState(s, appId);
    for (const id of ["a".repeat(5000), "a".repeat(400), `devp_${"a".repeat(400)}`]) {
      const path = `/top-up/${topUpToken}/dev-checkout/${id}`;
      const res = await page(s, path);
      assert.equal(res.status, 404, id.slice(0, 10));
      await res.body?.cancel();
      const post = await postForm(s, path, { form_token: "x" });
      assert.equal(post.status, 404, id.slice(0, 10));
      await post.body?.cancel();
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));

Deno.test("a broken multipart or cut-off top-up form is a 400 'Form not received' page, and nothing is bought", () =>
  withService(DEV, async (s) => {
    const { appId, topUpToken } = await s.newApp();
    const before = await moneyState(s, appId);
    const token = await topUpFormToken(s, topUpToken);
    const whole = `amount=10&form_token=${token}`;
    const bodies: RequestInit[] = [
      {
        headers: { "content-type": "multipart/form-data; boundary=xyz" },
        body: "garbage{{",
      },
      {
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          "content-length": String(whole.length),
        },
        body: new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode(whole.slice(0, 12)));
            controller.error(new Error("connection reset"));
          },
        }),
      },
    ];
    for (const init of bodies) {
      const res = await s.handle(
        new Request(`${PUBLIC_URL}/top-up/${topUpToken}`, { method: "POST", ...init }),
      );
      assert.equal(res.status, 400);
      const html = await res.text();
      assert.match(html, /Form not received/);
      // The cut-off body is refused by the route's body limit, before the form is read.
      assert.match(html, /nothing was (charged|changed)/i);
    }
    assert.deepEqual(await moneyState(s, appId), before);
  }));
