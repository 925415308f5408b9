import assert from "node:assert/strict";
import { createApp } from "@/app.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig, parseUsd } from "@/lib/core/mod.ts";
import { assertAuditClean, testCatalogFile, userMessage } from "@/tests/helpers.ts";
import { launchBrowser, SCREENSHOT_DIR } from "./browser.ts";

/** A simulator model dear enough that a large max_tokens cannot be reserved from 15 USD. */
function catalogWithDearModel() {
  const file = testCatalogFile();
  file.models.push({
    id: "tollbooth/dear",
    provider: "tollbooth",
    upstream_model: "echo",
    input_usd_per_mtok: "1.00",
    output_usd_per_mtok: "2000.00",
    context_tokens: 32768,
    max_output_tokens: 16384,
  });
  return buildCatalog(file, {});
}

Deno.test("browser: a 402's top_up_url, choose 10, pay in development mode, balance +10.000000", async () => {
  let handler: (request: Request) => Response | Promise<Response> = () => new Response(null);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (request) => handler(request),
  );
  const origin = `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}`;
  const kv = await Deno.openKv(":memory:");
  const { app, wallets } = createApp({
    kv,
    config: loadConfig({ PUBLIC_URL: origin }),
    catalog: catalogWithDearModel(),
    log: () => {},
    devServer: true,
  });
  handler = app.fetch;
  const browser = await launchBrowser();
  try {
    const created = await createAppRecord(kv, { name: "Story Forge" });
    const chat = (model: string, maxTokens: number) =>
      fetch(`${origin}/v1/chat/completions`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${created.key.apiKey}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ model, messages: userMessage("Hello"), max_tokens: maxTokens }),
      });

    const before = await chat("tollbooth/echo", 16);
    assert.equal(before.status, 200);
    await before.body?.cancel();
    const balanceBefore = parseUsd(before.headers.get("tollbooth-balance")!);

    const refused = await chat("tollbooth/dear", 16000);
    assert.equal(refused.status, 402);
    const { error } = await refused.json();
    assert.equal(error.code, "insufficient_credits");
    assert.equal(error.top_up_url, `${origin}/top-up/${created.app.topUpToken}`);

    const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
    const consoleErrors: string[] = [];
    page.on("console", (m) => {
      // Resource failures are checked by URL below.
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
        consoleErrors.push(m.text());
      }
    });
    page.on("response", (r) => {
      if (r.status() >= 400) {
        consoleErrors.push(`${r.status()} ${r.url()}`);
      }
    });
    page.on("pageerror", (e) => consoleErrors.push(e.message));

    await page.goto(error.top_up_url);
    await page.getByRole("heading", { name: "Add credits to Story Forge" }).waitFor();
    await page.locator("label.amount-choice", { hasText: "25 USD" }).click();
    const pay = page.locator("button.pay");
    await page.waitForFunction(() =>
      document.querySelector("button.pay")?.textContent === "Pay 25.00 USD"
    );
    await page.locator("label.amount-choice", { hasText: "10 USD" }).click();
    await page.waitForFunction(() =>
      document.querySelector("button.pay")?.textContent === "Pay 10.00 USD"
    );
    await page.screenshot({ path: `${SCREENSHOT_DIR}topup_page_phone.png`, fullPage: true });
    await pay.click();

    await page.waitForURL(/\/dev-checkout\/devp_/);
    await page.getByText("TEST CHECKOUT").waitFor();
    await page.screenshot({ path: `${SCREENSHOT_DIR}topup_dev_checkout.png`, fullPage: true });
    await page.getByRole("button", { name: "Pay 10.00 USD (test)" }).click();

    await page.waitForURL(/\/receipt\?session_id=devp_/);
    const receipt = await page.locator(".receipt").innerText();
    assert.match(receipt, /Amount\s+10\.00 USD/);
    assert.match(receipt, /Reference\s+devp_[0-9a-z]{26}/);
    assert.match(receipt, /Date\s+\d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    await page.screenshot({ path: `${SCREENSHOT_DIR}topup_receipt.png`, fullPage: true });
    assert.deepEqual(consoleErrors, []);

    const after = await chat("tollbooth/echo", 16);
    assert.equal(after.status, 200);
    await after.body?.cancel();
    const balanceAfter = parseUsd(after.headers.get("tollbooth-balance")!);
    const cost = parseUsd(after.headers.get("tollbooth-request-cost")!);
    // The header is the balance after this request's own charge; before it, exactly +10.000000.
    assert.equal(balanceAfter + cost - balanceBefore, 10_000_000);
    assert.equal(cost, parseUsd(before.headers.get("tollbooth-request-cost")!));
    await assertAuditClean(kv);
  } finally {
    await browser.close();
    await server.shutdown();
    await wallets.drain();
    kv.close();
  }
});
