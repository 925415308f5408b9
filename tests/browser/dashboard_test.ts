import assert from "node:assert/strict";
import type { Browser, Page } from "playwright-core";
import { createApp } from "@/app.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig } from "@/lib/core/mod.ts";
import { assertAuditClean, testCatalogFile } from "@/tests/helpers.ts";
import { launchBrowser, SCREENSHOT_DIR } from "./browser.ts";

const PASSWORD = "correct horse battery";

/**
 * The whole service on a loopback port, its public URL being that port's address (by `host`, a
 * name the browser maps to loopback, or 127.0.0.1).
 */
async function serveTollbooth(host = "127.0.0.1") {
  const kv = await Deno.openKv(":memory:");
  let handle: (request: Request, info: Deno.ServeHandlerInfo) => Response | Promise<Response> =
    () => new Response("starting", { status: 503 });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (request, info) => handle(request, info),
  );
  const base = `http://${host}:${(server.addr as Deno.NetAddr).port}`;
  // Webhook endpoints on loopback (the test's receiver) are allowed, as under `deno task dev`.
  const env = { PUBLIC_URL: base, WEBHOOK_ALLOW_LOOPBACK: "1" };
  const { app, wallets, webhooks } = createApp({
    kv,
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(), env),
    log: () => {},
  });
  handle = app.fetch;
  return {
    base,
    kv,
    async close() {
      await server.shutdown();
      await wallets.drain();
      await webhooks.watcher.idle();
      kv.close();
    },
  };
}

async function withBrowser(
  fn: (browser: Browser, base: string) => Promise<void>,
  { host }: { host?: string } = {},
) {
  await Deno.mkdir(SCREENSHOT_DIR, { recursive: true });
  const service = await serveTollbooth(host);
  const browser = await launchBrowser({ hostAliases: host ? [host] : [] });
  try {
    await fn(browser, service.base);
    await assertAuditClean(service.kv);
  } finally {
    await browser.close();
    await service.close();
  }
}

async function signUp(page: Page, base: string, email: string) {
  await page.goto(`${base}/signup`);
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Create account" }).click();
  await page.waitForURL(`${base}/dashboard`);
}

async function createAppNamed(page: Page, name: string) {
  await page.getByLabel("App name").fill(name);
  await page.getByRole("button", { name: "Create app" }).click();
  await page.getByRole("heading", { name: `App “${name}” is ready` }).waitFor();
}

function chat(base: string, apiKey: string) {
  return fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "Hello from the browser test" }],
    }),
  });
}

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `${SCREENSHOT_DIR}${name}.png`, fullPage: true });

Deno.test({
  name: "an owner signs up, creates an app and a key, sees the request and its cost, revokes it",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    withBrowser(async (browser, base) => {
      const context = await browser.newContext({ baseURL: base });
      await context.grantPermissions(["clipboard-read", "clipboard-write"]);
      const page = await context.newPage();

      await signUp(page, base, "ada@example.com");
      assert.equal(await page.getByText("You have no apps yet").isVisible(), true);
      await createAppNamed(page, "Recipe bot");
      await shot(page, "app-created");
      await page.getByRole("link", { name: /go to the keys/ }).click();

      await page.getByLabel("Key name").fill("ci server");
      await page.getByRole("button", { name: "Create key" }).click();
      const revealed = page.getByLabel("New API key");
      await revealed.waitFor();
      const apiKey = await revealed.inputValue();
      assert.match(apiKey, /^tb_[0-9a-z]{36}$/);
      assert.equal(await page.getByText("shown only this once").isVisible(), true);
      await page.getByRole("button", { name: "Copy key" }).click();
      await page.getByRole("button", { name: "Copied" }).waitFor();
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), apiKey);
      await shot(page, "key-created");

      await page.getByRole("button", { name: "I have saved it" }).click();
      await page.getByRole("cell", { name: "ci server", exact: true }).waitFor();
      assert.equal(await page.getByText(apiKey).count(), 0, "the key is never shown again");
      assert.ok((await page.content()).includes(apiKey.slice(0, 8)));
      assert.equal((await page.content()).includes(apiKey), false);
      await shot(page, "keys");

      const response = await chat(base, apiKey);
      assert.equal(response.status, 200);
      const cost = response.headers.get("tollbooth-request-cost")!;
      const requestId = response.headers.get("tollbooth-request-id")!;
      await response.body?.cancel();

      await page.getByRole("link", { name: "Usage" }).click();
      const row = page.getByRole("row").filter({ hasText: requestId });
      await row.waitFor();
      const rowText = await row.innerText();
      assert.ok(rowText.includes(`$${cost}`), rowText);
      assert.ok(rowText.includes("ci server") && rowText.includes("tollbooth/echo"), rowText);
      await shot(page, "usage");

      await page.getByRole("link", { name: "Overview" }).click();
      const balance = (5_000_000 - Math.round(Number(cost) * 1e6)) / 1e6;
      assert.equal(await page.getByTestId("available").innerText(), `$${balance.toFixed(6)}`);
      await page.getByRole("img", { name: /Daily spend/ }).waitFor();
      await shot(page, "overview");
      await page.setViewportSize({ width: 390, height: 800 });
      await shot(page, "overview-phone");
      await page.setViewportSize({ width: 1280, height: 720 });

      await page.getByRole("link", { name: "Wallet" }).click();
      await page.getByText("Starter credits").waitFor();
      await shot(page, "wallet");

      await page.getByRole("link", { name: "API keys" }).click();
      page.once("dialog", (dialog) => dialog.accept());
      await page.getByRole("button", { name: "Rotate key default" }).click();
      const rotated = await page.getByLabel("New API key").inputValue();
      assert.match(rotated, /^tb_[0-9a-z]{36}$/);
      assert.equal(await page.getByText("The old key no longer works").isVisible(), true);
      await shot(page, "key-rotated");
      await page.getByRole("button", { name: "I have saved it" }).click();
      await page.getByRole("heading", { name: "Revoked keys" }).waitFor();
      const fresh = await chat(base, rotated);
      assert.equal(fresh.status, 200);
      const balanceAfter = fresh.headers.get("tollbooth-balance")!;
      await fresh.body?.cancel();

      // Revoking asks first; the question names the key.
      let asked = "";
      page.once("dialog", (dialog) => {
        asked = dialog.message();
        dialog.accept();
      });
      await page.getByRole("button", { name: "Revoke key ci server" }).click();
      await page.getByRole("button", { name: "Revoke key ci server" }).waitFor({
        state: "detached",
      });
      assert.match(asked, /Revoke "ci server"\?/);
      const revokedRow = page.getByRole("row").filter({ hasText: "ci server" });
      assert.equal(await revokedRow.count(), 1, "listed once, among the revoked keys");
      const refused = await chat(base, apiKey);
      assert.equal(refused.status, 401);
      assert.equal((await refused.json()).error.code, "invalid_api_key");

      await page.getByRole("link", { name: "Apps" }).click();
      const appRow = page.getByRole("row").filter({ hasText: "Recipe bot" });
      assert.ok((await appRow.innerText()).includes(`$${balanceAfter}`));
      await shot(page, "apps");

      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByRole("heading", { name: "Sign in" }).waitFor();
      await shot(page, "signin");
      assert.equal(await page.getByRole("button", { name: "Sign out" }).count(), 0);
      await page.goto(`${base}/dashboard`);
      await page.getByRole("heading", { name: "Sign in" }).waitFor();

      await page.setViewportSize({ width: 390, height: 800 });
      await page.goto(`${base}/models`);
      await shot(page, "models-phone");
      await context.close();
    }),
});

Deno.test({
  name: "another owner opening the first owner's app by URL sees page not found",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    withBrowser(async (browser, base) => {
      const ada = await browser.newPage();
      await signUp(ada, base, "ada@example.com");
      await createAppNamed(ada, "Ada's secret app");
      await ada.getByRole("link", { name: /go to the keys/ }).click();
      const appUrl = ada.url().replace(/\/keys$/, "");

      const bob = await browser.newPage();
      await signUp(bob, base, "bob@example.com");
      const response = await bob.goto(appUrl);
      assert.equal(response?.status(), 404);
      assert.equal(await bob.getByRole("heading", { name: "Page not found" }).isVisible(), true);
      assert.equal(await bob.getByText("Ada's secret app").count(), 0);
      await shot(bob, "not-found");
      await ada.close();
      await bob.close();
    }),
});

Deno.test("browser: an owner makes a management key, caps a key, sets a webhook and sends a test event", () =>
  withBrowser(async (browser, base) => {
    const received: string[] = [];
    const receiver = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      async (r) => {
        received.push((await r.json()).type);
        return new Response("ok");
      },
    );
    try {
      const page = await browser.newPage();
      await signUp(page, base, "reseller@example.com");
      await createAppNamed(page, "Resold");
      const apiKey = await page.getByLabel("New API key").inputValue();
      await page.getByRole("link", { name: "I have saved it: go to the keys" }).click();

      // A key capped at one micro-dollar a day is refused with its own 402.
      await page.getByLabel(/^Key default \(tb_[0-9a-z]+…\): per utc day cap in USD$/).fill(
        "0.000001",
      );
      await page.getByRole("button", { name: "Save caps of default" }).click();
      await page.waitForURL(/\/keys#caps-key_[0-9a-z]+$/);
      assert.equal(await page.getByRole("status").textContent(), "Spend caps saved.");
      assert.equal(
        await page.getByLabel(/^Key default \(tb_[0-9a-z]+…\): per utc day cap in USD$/)
          .inputValue(),
        "0.000001",
      );
      const capped = await chat(base, apiKey);
      assert.equal(capped.status, 402);
      assert.equal((await capped.json()).error.code, "key_spend_cap_exceeded");

      await page.getByRole("link", { name: "Webhooks" }).click();
      const port = (receiver.addr as Deno.NetAddr).port;
      await page.getByLabel("Endpoint (https)").fill(`http://127.0.0.1:${port}/hook`);
      await page.getByLabel("Low-balance threshold in USD (optional)").fill("4.00");
      await page.getByRole("button", { name: "Save webhook" }).click();
      const secret = await page.getByLabel("Signing secret").inputValue();
      assert.match(secret, /^whsec_/);
      await page.getByRole("button", { name: "Send test event" }).click();
      await page.locator("table.deliveries").getByText("delivered").waitFor();
      assert.deepEqual(received, ["webhook.test"]);
      await shot(page, "dashboard-webhooks");

      await page.getByRole("link", { name: "Management keys" }).click();
      await page.getByLabel("Key name").fill("billing backend");
      await page.getByRole("button", { name: "Create management key" }).click();
      const managementKey = await page.getByLabel("New management key").inputValue();
      const apps = await fetch(`${base}/v1/management/apps`, {
        headers: { authorization: `Bearer ${managementKey}` },
      });
      assert.equal(apps.status, 200);
      assert.deepEqual((await apps.json()).data.map((a: { name: string }) => a.name), ["Resold"]);
      await page.getByRole("link", { name: "I have saved it: back to management keys" }).click();
      page.once("dialog", (dialog) => dialog.accept());
      await page.getByRole("button", { name: "Revoke management key billing backend" }).click();
      await page.getByRole("heading", { name: "Revoked management keys" }).waitFor();
      const after = await fetch(`${base}/v1/management/apps`, {
        headers: { authorization: `Bearer ${managementKey}` },
      });
      assert.equal(after.status, 401);
      await after.body?.cancel();
    } finally {
      await receiver.shutdown();
    }
  }));

Deno.test("browser: the rotated-key dialog keeps the focus inside it, closes on Escape and gives the focus back to its button", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage();
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Rotating");
    await page.getByRole("link", { name: "I have saved it: go to the keys" }).click();
    page.once("dialog", (dialog) => dialog.accept());
    await page.getByRole("button", { name: "Rotate key default" }).click();
    const dialog = page.getByRole("dialog", { name: "Rotated key" });
    await dialog.waitFor();
    const rotated = await dialog.getByLabel("New API key").inputValue();
    const focusInDialog = () =>
      page.evaluate(() => document.activeElement?.closest("dialog[open]") != null);
    for (let i = 0; i < 8; i++) {
      await page.keyboard.press("Tab");
      assert.equal(await focusInDialog(), true, `focus after ${i + 1} Tab presses`);
    }
    await page.keyboard.press("Shift+Tab");
    assert.equal(await focusInDialog(), true, "focus after Shift+Tab");

    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "hidden" });
    const opener = page.getByRole("button", { name: "Show the new key of default" });
    // The focus moves once the render that closed the dialog has committed.
    const focused = () => opener.evaluate((el) => el === document.activeElement);
    for (let i = 0; i < 40 && !(await focused()); i++) await page.waitForTimeout(50);
    assert.equal(await focused(), true);
    await opener.click();
    assert.equal(await dialog.getByLabel("New API key").inputValue(), rotated);
  }));

Deno.test("browser: rotating a key another tab already rotated says so in the form's alert", () =>
  withBrowser(async (browser, base) => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Two tabs");
    await page.getByRole("link", { name: "I have saved it: go to the keys" }).click();
    const other = await context.newPage();
    await other.goto(page.url());
    other.once("dialog", (dialog) => dialog.accept());
    await other.getByRole("button", { name: "Rotate key default" }).click();
    await other.getByRole("dialog", { name: "Rotated key" }).waitFor();

    page.once("dialog", (dialog) => dialog.accept());
    await page.getByRole("button", { name: "Rotate key default" }).click();
    const alert = page.getByRole("alert");
    await alert.waitFor();
    assert.equal(await alert.innerText(), "This key is already revoked; create a new one instead.");
  }));

Deno.test("browser: a 100-character app name wraps at 375 px, on the hosted top-up page and the dashboard", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage();
    await signUp(page, base, "ada@example.com");
    const name = "Namewithoutanyspace".repeat(6).slice(0, 100);
    await createAppNamed(page, name);
    await page.setViewportSize({ width: 375, height: 800 });
    const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.equal(await overflow(), 0, "the new app's page");
    const appUrl = page.url().replace(/\/issued\/.*$/, "");
    for (const tab of ["", "/keys", "/usage", "/wallet", "/webhooks"]) {
      await page.goto(`${appUrl}${tab}`);
      assert.equal(await overflow(), 0, `the tab ${tab || "/"}`);
    }
    await page.goto(`${base}/dashboard`);
    assert.equal(await overflow(), 0, "the apps");
    await page.goto(appUrl);
    await page.goto(await page.getByLabel("Top-up page address").inputValue());
    await page.getByRole("heading", { name: `Add credits to ${name}` }).waitFor();
    assert.equal(await overflow(), 0, "the top-up page");
    await shot(page, "top-up-long-name-phone");
  }));

Deno.test("browser: on a plain-http host the Copy button copies by selection, else selects the text and asks for the shortcut", () =>
  withBrowser(async (browser, base) => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${base}/docs`);
    assert.deepEqual(
      await page.evaluate(() => [isSecureContext, "clipboard" in navigator]),
      [false, false],
      "plain http on a name that is not localhost is no secure context",
    );
    const figure = page.locator("figure.code-block").first();
    const code = await figure.locator("pre").innerText();
    await figure.getByRole("button", { name: "Copy" }).click();
    await figure.getByRole("button", { name: "Copied" }).waitFor({ timeout: 5000 });
    // Only a secure page may read the clipboard: the service's own loopback address is one.
    const port = new URL(base).port;
    const reader = await context.newPage();
    await context.grantPermissions(["clipboard-read"], { origin: `http://127.0.0.1:${port}` });
    await reader.goto(`http://127.0.0.1:${port}/docs`);
    assert.equal(await reader.evaluate(() => navigator.clipboard.readText()), code);

    // A browser that lets no page copy at all.
    await page.evaluate(() => {
      document.execCommand = () => false;
    });
    const second = page.locator("figure.code-block").nth(1);
    const secondCode = await second.locator("pre").innerText();
    await second.getByRole("button", { name: "Copy" }).click();
    await second.getByText("press Ctrl+C to copy it").waitFor({ timeout: 5000 });
    // The field is focused and selected once it is on the page, a frame after the message.
    const selected = await page.waitForFunction(() => {
      const field = document.activeElement;
      if (!(field instanceof HTMLTextAreaElement) || field.selectionEnd === 0) return null;
      return field.value.slice(field.selectionStart, field.selectionEnd);
    });
    assert.equal(await selected.jsonValue(), secondCode);
  }, { host: "tollbooth.test" }));

/** The keys tab of the app whose page (any of its tabs, or its new key's page) is open. */
async function openKeysTab(page: Page) {
  const appUrl = new URL(page.url()).pathname.replace(/^(\/dashboard\/apps\/[^/]+).*$/, "$1");
  await page.goto(`${appUrl}/keys`);
  return appUrl;
}

const focusedField = (page: Page) =>
  page.evaluate(() => {
    const field = document.activeElement as HTMLInputElement;
    return `${field.tagName} ${field.getAttribute("aria-label") ?? field.name}`;
  });

const inView = (page: Page, selector: string) =>
  page.locator(selector).evaluate((el) => {
    const box = el.getBoundingClientRect();
    return box.top >= 0 && box.bottom <= innerHeight;
  });

Deno.test("browser: a refused form's page opens with the field the refusal concerns focused, its alert in view", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base, viewport: { width: 1280, height: 720 } });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Refused");
    const appUrl = await openKeysTab(page);

    await page.goto(appUrl);
    await page.locator("#rate-limits input[name=rpm]").fill("16");
    // Above the largest limit there is: the browser lets it through, the service refuses it.
    await page.locator("#rate-limits input[name=tpm]").fill("9999999999");
    await page.getByRole("button", { name: "Save limits" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT tpm");
    assert.equal(await inView(page, "#rate-limits-error"), true);

    await page.goto(`${appUrl}/keys`);
    await page.getByLabel("Each end user: per utc month cap in USD").fill("-1");
    await page.getByRole("button", { name: "Save end-user caps" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT Each end user: per utc month cap in USD");
    assert.equal(await inView(page, "#caps-end-user-error"), true);

    await page.goto(`${appUrl}/webhooks`);
    await page.getByLabel("Endpoint (https)").fill("https://hooks.example.com/in");
    await page.getByLabel("Low-balance threshold in USD (optional)").fill("1.1234567");
    await page.getByRole("button", { name: "Save webhook" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT threshold");
  }));

Deno.test("browser: a refused sign-up or sign-in opens with the field concerned focused and marked invalid", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base, viewport: { width: 1280, height: 720 } });
    const invalid = () =>
      page.evaluate(() =>
        [...document.querySelectorAll("[aria-invalid=true]")].map((el) =>
          `${el.getAttribute("name")} ${el.getAttribute("aria-describedby")}`
        )
      );
    await signUp(page, base, "ada@example.com");
    await page.getByRole("button", { name: "Sign out" }).click();

    await page.goto(`${base}/signup`);
    await page.getByLabel("Email").fill("ada@example.com");
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT email");
    assert.deepEqual(await invalid(), ["email account-error"]);

    await page.goto(`${base}/signin`);
    await page.getByLabel("Email").fill("ada@example.com");
    await page.getByLabel("Password").fill("not the password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT password");
    assert.deepEqual(await invalid(), ["password account-error"]);
  }));

Deno.test("browser: the Account page's refused password change opens with its field focused and marked invalid; a change says so and keeps the owner signed in", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base, viewport: { width: 375, height: 800 } });
    await signUp(page, base, "ada@example.com");
    await page.getByRole("link", { name: "Account" }).click();
    assert.equal(
      await page.evaluate(() => document.documentElement.scrollWidth - innerWidth),
      0,
      "the header and the page fit the phone",
    );
    const changeWith = async (current: string, confirmation: string) => {
      await page.getByLabel("Current password").fill(current);
      await page.getByLabel(/^New password/).fill("a brand new passphrase");
      await page.getByLabel("Confirm the new password").fill(confirmation);
      await page.getByRole("button", { name: "Change password" }).click();
    };
    await changeWith("not the password", "a brand new passphrase");
    await page.getByRole("alert").waitFor();
    assert.equal(await focusedField(page), "INPUT current_password");
    assert.equal(
      await page.locator("[aria-invalid=true]").getAttribute("aria-describedby"),
      "password-error",
    );

    await changeWith(PASSWORD, "a brand new passphrase");
    await page.getByRole("status").waitFor();
    assert.match(await page.getByRole("status").innerText(), /Password changed/);
    assert.equal(new URL(page.url()).pathname, "/dashboard/account");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.goto(`${base}/signin`);
    await page.getByLabel("Email").fill("ada@example.com");
    await page.getByLabel("Password").fill("a brand new passphrase");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL(`${base}/dashboard`);
  }));

Deno.test("browser: in the rotated-key dialog, Copy copies by selection when the Clipboard API refuses, and says Copied only when it did", () =>
  withBrowser(async (browser, base) => {
    const context = await browser.newContext({ baseURL: base });
    await context.grantPermissions(["clipboard-read", "clipboard-write"]);
    const page = await context.newPage();
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Copying");
    await openKeysTab(page);
    // As when the page has no permission to write: the older way, by selection, is left.
    await page.evaluate(() => {
      navigator.clipboard.writeText = () => Promise.reject(new DOMException("", "NotAllowedError"));
    });
    page.once("dialog", (dialog) => dialog.accept());
    await page.getByRole("button", { name: "Rotate key default" }).click();
    const dialog = page.getByRole("dialog", { name: "Rotated key" });
    const rotated = await dialog.getByLabel("New API key").inputValue();
    await dialog.getByRole("button", { name: "Copy key" }).click();
    await dialog.getByRole("button", { name: "Copied" }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), rotated);

    // A selection that comes out empty copies nothing, whatever execCommand answers.
    await page.evaluate(() => {
      HTMLTextAreaElement.prototype.select = () => {};
    });
    await dialog.getByRole("button", { name: "Copy key" }).click();
    await dialog.getByText("press Ctrl+C to copy it").waitFor({ timeout: 5000 });
    assert.equal(await dialog.getByRole("button", { name: "Copied" }).count(), 0);
    await context.close();
  }));

Deno.test("browser: at 375 px a 60-character key name, a long end-user id and the docs' code wrap: no page is wider than the phone", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Phone");
    const appUrl = await openKeysTab(page);
    const keyName = "K".repeat(60);
    await page.getByLabel("Key name").fill(keyName);
    await page.getByRole("button", { name: "Create key" }).click();
    await page.getByRole("button", { name: "I have saved it" }).click();
    await page.getByRole("button", { name: `Save caps of ${keyName}` }).waitFor();

    await page.setViewportSize({ width: 375, height: 800 });
    const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - innerWidth);
    assert.equal(await overflow(), 0, "the keys tab");
    // Nothing the owner acts on hides in a strip that scrolls sideways.
    const tabs = page.locator(".tabs");
    for (
      const control of [
        page.getByRole("button", { name: `Rotate key ${keyName}` }),
        page.getByRole("button", { name: `Revoke key ${keyName}` }),
        ...["Overview", "API keys", "Usage", "Wallet", "Webhooks"].map((name) =>
          tabs.getByRole("link", { name, exact: true })
        ),
      ]
    ) {
      const box = (await control.boundingBox())!;
      assert.ok(box.x >= 0 && box.x + box.width <= 375, `${control}: ${JSON.stringify(box)}`);
    }
    await shot(page, "keys-long-name-phone");
    page.once("dialog", (dialog) => dialog.accept());
    await page.getByRole("button", { name: `Rotate key ${keyName}` }).click();
    const dialog = page.getByRole("dialog", { name: "Rotated key" });
    const box = (await dialog.boundingBox())!;
    assert.ok(
      box.x >= 0 && box.x + box.width <= 375,
      `the dialog is on screen: ${JSON.stringify(box)}`,
    );
    await page.keyboard.press("Escape");

    const user = `user-${"u".repeat(200)}`;
    for (const width of [375, 1280]) {
      await page.setViewportSize({ width, height: 800 });
      await page.goto(`${appUrl}/usage?user=${encodeURIComponent(user)}`);
      await page.getByText(user).waitFor();
      assert.equal(await overflow(), 0, `the usage of one end user at ${width} px`);
      await shot(page, `usage-long-user-${width}`);
    }
    await page.setViewportSize({ width: 375, height: 800 });
    await page.goto(`${base}/docs`);
    assert.equal(await overflow(), 0, "the docs");
    await shot(page, "docs-phone");
  }));

Deno.test("browser: at 1280 px a 60-character key name wraps, its Rotate and Revoke stay in the card, and the spend-caps fields line up from key to key", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base, viewport: { width: 1280, height: 900 } });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Desk");
    await openKeysTab(page);
    const keyName = "K".repeat(60);
    await page.getByLabel("Key name").fill(keyName);
    await page.getByRole("button", { name: "Create key" }).click();
    await page.getByRole("button", { name: "I have saved it" }).click();
    await page.getByRole("button", { name: `Save caps of ${keyName}` }).waitFor();

    const card = (await page.locator(".card", { has: page.locator("table") }).first()
      .boundingBox())!;
    for (const action of ["Rotate", "Revoke"]) {
      const box = (await page.getByRole("button", { name: `${action} key ${keyName}` })
        .boundingBox())!;
      assert.ok(
        box.x >= card.x && box.x + box.width <= card.x + card.width,
        `${action} inside the keys card: ${JSON.stringify({ box, card })}`,
      );
    }
    const forms = page.locator("form.caps-form");
    assert.equal(await forms.count(), 3, "two keys and the end users");
    const columns = (form: number) =>
      forms.nth(form).locator("input[inputmode], button").evaluateAll((els) =>
        els.map((el) => Math.round(el.getBoundingClientRect().x))
      );
    const first = await columns(0);
    assert.equal(first.length, 4);
    for (const form of [1, 2]) assert.deepEqual(await columns(form), first, `form ${form}`);
    await shot(page, "keys-long-name-desktop");
  }));

Deno.test("browser: every usage column is on screen at 1280 px, and each request's cost and id at 390 px, in the usage table and the wallet ledger", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base, viewport: { width: 1280, height: 900 } });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Wide");
    const apiKey = await page.getByLabel("New API key").inputValue();
    const appUrl = await openKeysTab(page);
    const answer = await chat(base, apiKey);
    assert.equal(answer.status, 200);
    await answer.body?.cancel();
    // Whether each element is wholly inside the viewport and its scrolling box, if it has one.
    const onScreen = (selector: string) =>
      page.locator(selector).evaluateAll((els) =>
        els.map((el) => {
          const box = el.getBoundingClientRect();
          const scroller = el.closest(".table-scroll")?.getBoundingClientRect();
          const right = Math.min(innerWidth, scroller?.right ?? innerWidth);
          return `${el.textContent?.trim().slice(0, 12)}: ${
            box.left >= 0 && box.right <= right + 1
          }`;
        })
      );
    const all = (results: string[]) => results.every((r) => r.endsWith("true"));

    await page.goto(`${appUrl}/usage`);
    const columns = await onScreen("table.usage tbody tr:first-child td");
    assert.equal(columns.length, 9);
    assert.ok(all(columns), `at 1280 px: ${columns}`);
    await shot(page, "usage-desktop");

    await page.setViewportSize({ width: 390, height: 800 });
    for (const selector of ['table.usage td[data-label="Cost"]', "table.usage td code.small"]) {
      const cells = await onScreen(selector);
      assert.ok(cells.length > 0 && all(cells), `at 390 px: ${cells}`);
    }
    await shot(page, "usage-phone");
    await page.goto(`${appUrl}/wallet`);
    const ids = await onScreen('td[data-label="What"] code');
    assert.ok(ids.length > 0 && all(ids), `the wallet at 390 px: ${ids}`);
    await shot(page, "wallet-phone");
  }));

Deno.test("browser: the spend chart is one named tab stop whose days are read with the arrow keys or a tap, its amounts legible at 390 px", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({
      baseURL: base,
      viewport: { width: 390, height: 800 },
      hasTouch: true,
    });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Charted");
    const apiKey = await page.getByLabel("New API key").inputValue();
    const appUrl = await openKeysTab(page);
    const answer = await chat(base, apiKey);
    await answer.body?.cancel();
    await page.goto(appUrl);
    const today = new Date().toISOString().slice(0, 10);

    const chart = page.locator("figure.chart");
    const focusable = await chart.locator("[tabindex]").count();
    assert.equal(focusable, 1, "one tab stop, not one per bar");
    const image = page.getByRole("img", {
      name: /^Daily spend from .*: 1 day with spend, highest/,
    });
    await image.focus();
    await page.keyboard.press("ArrowLeft");
    const caption = chart.locator("figcaption");
    assert.match(await caption.textContent() ?? "", new RegExp(`^${today}: \\$0\\.0000`));
    await page.keyboard.press("ArrowLeft");
    assert.doesNotMatch(await caption.textContent() ?? "", new RegExp(today));
    await page.keyboard.press("Escape");
    assert.match(await caption.textContent() ?? "", /Hover or tap a bar/);
    await chart.locator("svg g").last().tap();
    assert.match(await caption.textContent() ?? "", new RegExp(`^${today}: `));

    const fontPx = await chart.locator(".chart-peak").evaluate((el) =>
      parseFloat(getComputedStyle(el).fontSize)
    );
    assert.ok(fontPx >= 12, `the highest day's amount is ${fontPx} px tall`);
    await chart.getByText("Days with spend, as text").click();
    assert.match(await chart.locator(".chart-days li").first().textContent() ?? "", /\$0\.0000/);
    await page.getByRole("heading", { name: "Spend by model, all time" }).waitFor();
    await shot(page, "overview-chart-phone");
  }));

Deno.test("browser: I have saved it, after a key made on the answer to a refused form, fetches the keys tab with a GET", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Reposted");
    const appUrl = await openKeysTab(page);
    await page.getByLabel("Each end user: total cap in USD").fill("-1");
    await page.getByRole("button", { name: "Save end-user caps" }).click();
    await page.getByRole("alert").waitFor();

    await page.getByLabel("Key name").fill("after refusal");
    await page.getByRole("button", { name: "Create key" }).click();
    const navigations: string[] = [];
    page.on("request", (r) => {
      if (r.isNavigationRequest()) navigations.push(`${r.method()} ${new URL(r.url()).pathname}`);
    });
    page.on("dialog", (dialog) => {
      navigations.push(`dialog ${dialog.message()}`);
      dialog.dismiss();
    });
    await page.getByRole("button", { name: "I have saved it" }).click();
    await page.getByRole("cell", { name: "after refusal", exact: true }).waitFor();
    assert.deepEqual(navigations, [`GET ${appUrl}/keys`]);
    assert.equal(await page.getByRole("alert").count(), 0, "the refused form was not posted again");
  }));

Deno.test("browser: a key created with Enter takes the focus from the form it replaces", () =>
  withBrowser(async (browser, base) => {
    const page = await browser.newPage({ baseURL: base });
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Keyboard");
    await openKeysTab(page);
    await page.getByLabel("Key name").fill("from the keyboard");
    await page.keyboard.press("Enter");
    const shown = page.getByLabel("New API key");
    await shown.waitFor();
    assert.equal(await focusedField(page), "INPUT New API key");
    assert.equal(
      await shown.evaluate((field: HTMLInputElement) =>
        field.selectionEnd! - field.selectionStart!
      ),
      (await shown.inputValue()).length,
      "selected, ready to copy",
    );
  }));

Deno.test("browser: without JavaScript no Copy button shows, and the key and the top-up address are there to select", () =>
  withBrowser(async (browser, base) => {
    const context = await browser.newContext({ baseURL: base, javaScriptEnabled: false });
    const page = await context.newPage();
    await signUp(page, base, "ada@example.com");
    await createAppNamed(page, "Plain");
    assert.match(await page.getByLabel("New API key").inputValue(), /^tb_/);
    assert.equal(await page.getByRole("button", { name: "Copy key" }).count(), 0);
    await page.getByRole("link", { name: "I have saved it: go to the keys" }).click();
    await page.getByRole("link", { name: "Overview" }).click();
    assert.match(await page.getByLabel("Top-up page address").inputValue(), /^http/);
    assert.equal(await page.getByRole("button", { name: "Copy link" }).count(), 0);
    await context.close();

    const withScript = await browser.newPage({ baseURL: base });
    await signUp(withScript, base, "bob@example.com");
    await createAppNamed(withScript, "Scripted");
    await withScript.getByRole("button", { name: "Copy key" }).waitFor();
  }));
