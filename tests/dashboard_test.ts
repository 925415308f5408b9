import assert from "node:assert/strict";
import { createApp } from "@/app.ts";
import { issueKey, listAppKeys } from "@/lib/tenants/mod.ts";
import { setRateLimits } from "@/lib/billing/mod.ts";
import { buildCatalog } from "@/lib/catalog/catalog.ts";
import { loadConfig, newId } from "@/lib/core/mod.ts";
import { keys } from "@/lib/db.ts";
import {
  MAX_FAILURES_PER_EMAIL,
  MAX_SIGNUPS_PER_IP,
  THROTTLE_WINDOW_MS,
} from "@/lib/accounts/sign_in_throttle.ts";
import { getWebhookSettings } from "@/lib/webhooks/mod.ts";
import { createDevPurchase, creditTopUp } from "@/lib/payments/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { TEST_EVENTS_PER_MINUTE } from "@/routes/dashboard/webhooks.ts";
import { OWNER_PASSWORD, OwnerSession } from "./owner_session.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  serveLoopback,
  startService,
  testCatalogFile,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";

const PASSWORD = OWNER_PASSWORD;

async function withService(
  fn: (s: TestService) => Promise<void>,
  env: Record<string, string> = {},
  now?: () => number,
) {
  const s = await startService({ env, now });
  try {
    await fn(s);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

async function countApps(kv: Deno.Kv) {
  let n = 0;
  for await (const _ of kv.list({ prefix: keys.allApps() })) n++;
  return n;
}

Deno.test("the session cookie is HttpOnly, Secure, SameSite=Lax, Path=/ outside localhost", () =>
  withService(async (s) => {
    const res = await new OwnerSession(s).post("/signup", {
      email: "ada@example.com",
      password: PASSWORD,
    });
    const cookie = res.headers.get("set-cookie") ?? "";
    assert.match(cookie, /^__Host-tb_session=[0-9a-z]{30,};/);
    for (const flag of ["HttpOnly", "Secure", "SameSite=Lax", "Path=/"]) {
      assert.ok(cookie.split("; ").includes(flag), `${flag} in ${cookie}`);
    }
  }));

Deno.test("a sign-up for an email that has an account is refused at the email, with a link to sign in", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const res = await new OwnerSession(s).post("/signup", {
      email: "Ada@Example.com",
      password: PASSWORD,
    });
    assert.equal(res.status, 400);
    assert.match(
      await res.text(),
      /role="alert" id="account-error">An account with this email already exists\. <a href="\/signin">Sign in<\/a> instead\.<\/p>/,
    );
  }));

Deno.test("on plain-http localhost the cookie drops Secure so local development works", async () => {
  const env = { PUBLIC_URL: "http://localhost:8000" };
  const kv = await Deno.openKv(":memory:");
  const { app, wallets } = createApp({
    kv,
    config: loadConfig(env),
    catalog: buildCatalog(testCatalogFile(), env),
    log: () => {},
  });
  try {
    const res = await app.fetch(
      new Request("http://localhost:8000/signup", {
        method: "POST",
        body: new URLSearchParams({ email: "ada@example.com", password: PASSWORD }),
      }),
    );
    const cookie = res.headers.get("set-cookie") ?? "";
    assert.match(cookie, /^tb_session=/);
    assert.ok(!cookie.includes("Secure"));
    assert.ok(cookie.includes("HttpOnly") && cookie.includes("SameSite=Lax"));
  } finally {
    await wallets.drain();
    kv.close();
  }
});

Deno.test("the dashboard sends signed-out visitors to sign in", () =>
  withService(async (s) => {
    const res = await new OwnerSession(s).request("/dashboard/apps/app_x/keys");
    assert.equal(res.status, 303);
    assert.equal(res.headers.get("location"), "/signin?next=%2Fdashboard%2Fapps%2Fapp_x%2Fkeys");
  }));

Deno.test("a visitor sent to sign in comes back to the page as it was, its filter or list page included", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const page = "/dashboard/apps/app_x/usage?user=alice%40example.com&starting_after=req_1";
    const sent = await new OwnerSession(s).request(page);
    assert.equal(sent.headers.get("location"), `/signin?next=${encodeURIComponent(page)}`);
    const signedIn = await new OwnerSession(s).post(`/signin?next=${encodeURIComponent(page)}`, {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(signedIn.status, 303);
    assert.equal(signedIn.headers.get("location"), page);
  }));

Deno.test("a form sent after the session ended saves nothing, and sign-in says so and leads back to its page", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const page = "/dashboard/apps/app_x/keys";
    const sent = await new OwnerSession(s).request(page, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        referer: `${PUBLIC_URL}${page}`,
      },
      body: "name=ci",
    });
    assert.equal(sent.status, 303);
    const signIn = sent.headers.get("location")!;
    assert.equal(signIn, `/signin?next=${encodeURIComponent(page)}&unsent=1`);
    assert.match(await new OwnerSession(s).page(signIn), /the form you sent was not saved/);
    const signedIn = await new OwnerSession(s).post(`/signin?next=${encodeURIComponent(page)}`, {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(signedIn.headers.get("location"), page);
    // Another site's page is not where a visitor is sent back to.
    const foreign = await new OwnerSession(s).request(page, {
      method: "POST",
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        referer: `https://elsewhere.example${page}`,
      },
      body: "name=ci",
    });
    assert.equal(foreign.headers.get("location"), "/signin?next=%2Fdashboard&unsent=1");
  }));

Deno.test("sign-in with the right password opens the dashboard; a wrong one says so", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const wrong = await new OwnerSession(s).post("/signin", {
      email: "ada@example.com",
      password: "nope nope nope",
    });
    assert.equal(wrong.status, 401);
    assert.match(await wrong.text(), /Wrong email or password/);
    const v = new OwnerSession(s);
    const ok = await v.post("/signin?next=/dashboard", {
      email: "ADA@example.com",
      password: PASSWORD,
    });
    assert.equal(ok.status, 303);
    assert.match(await v.page("/dashboard"), /Signed in as ada@example\.com/);
  }));

Deno.test("sign-in with an address longer than any email is a wrong sign-in, not a 500", () =>
  withService(async (s) => {
    for (const email of [`${"a".repeat(3_000)}@example.com`, `${"b".repeat(250)}@x.co`]) {
      const res = await new OwnerSession(s).post("/signin", { email, password: "whatever it is" });
      assert.equal(res.status, 401, `${email.length} characters`);
      assert.match(await res.text(), /Wrong email or password/);
    }
  }));

Deno.test("sign-in never redirects to another site", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const res = await new OwnerSession(s).post("/signin?next=//evil.example/x", {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(res.headers.get("location"), "/dashboard");
    for (
      const next of [
        "/\\evil.example",
        "/x?a=<b>",
        "/x?u=https://evil.example",
        "https://evil.example",
      ]
    ) {
      const other = await new OwnerSession(s).post(`/signin?next=${encodeURIComponent(next)}`, {
        email: "ada@example.com",
        password: PASSWORD,
      });
      assert.equal(other.headers.get("location"), "/dashboard", next);
    }
  }));

Deno.test("repeated wrong passwords lock sign-in for that email, even with the right one", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    for (let i = 0; i < MAX_FAILURES_PER_EMAIL; i++) {
      const res = await new OwnerSession(s).post("/signin", {
        email: "ada@example.com",
        password: `guess ${i} guess`,
      });
      assert.equal(res.status, 401);
    }
    const locked = await new OwnerSession(s).post("/signin", {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(locked.status, 429);
    assert.ok(Number(locked.headers.get("retry-after")) > 0);
    assert.match(await locked.text(), /Too many failed sign-ins/);
    assert.equal(locked.headers.get("set-cookie"), null);
  }));

Deno.test("failed sign-ins at an owner's email from other addresses do not lock the owner out of signing in from theirs", () =>
  withService(async (s) => {
    const from = (address: string) => new OwnerSession(s, { "x-forwarded-for": address });
    await from("198.51.100.7").signUp("ada@example.com");
    for (const address of ["203.0.113.1", "203.0.113.2"]) {
      for (let i = 0; i <= MAX_FAILURES_PER_EMAIL; i++) {
        await from(address).post("/signin", { email: "ada@example.com", password: `guess ${i}` });
      }
      const locked = await from(address).post("/signin", {
        email: "ada@example.com",
        password: PASSWORD,
      });
      assert.equal(locked.status, 429, "the guessing address is locked");
    }
    const owner = await from("198.51.100.7").post("/signin", {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(owner.status, 303);
    assert.equal(owner.headers.get("location"), "/dashboard");
  }, { TRUSTED_PROXY_HEADER: "x-forwarded-for" }));

Deno.test("a sign-in or sign-up form sent from a tab opened before the browser signed in leads to where signing in would, and switches no account", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("bob@example.com");
    const v = await new OwnerSession(s).signUp("ada@example.com");
    const signIn = await v.post("/signin?next=/dashboard/account", {
      email: "bob@example.com",
      password: PASSWORD,
    });
    assert.equal(signIn.status, 303);
    assert.equal(signIn.headers.get("location"), "/dashboard/account");
    const signUp = await v.post("/signup", { email: "cy@example.com", password: PASSWORD });
    assert.equal(signUp.status, 303);
    assert.equal(signUp.headers.get("location"), "/dashboard");
    const account = await v.request("/dashboard/account");
    assert.equal(account.status, 200);
    const page = await account.text();
    assert.match(page, /ada@example\.com/, "still signed in as the same owner");
    assert.doesNotMatch(page, /bob@example\.com/);
    assert.equal(await s.kv.get(keys.ownerByEmail("cy@example.com")).then((e) => e.value), null);
  }));

Deno.test("a form post without the CSRF token is refused and changes nothing", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey } = await v.createApp("first");
    const before = await countApps(s.kv);
    const attempts: Record<string, string>[] = [{ name: "sneaky" }, {
      name: "sneaky",
      _csrf: "0".repeat(25),
    }];
    for (const fields of attempts) {
      const res = await v.post("/dashboard/apps", fields);
      assert.equal(res.status, 403);
      assert.match(await res.text(), /Nothing was changed/);
    }
    assert.equal(await countApps(s.kv), before);
    const keysPage = await v.page(`/dashboard/apps/${appId}/keys`);
    const keyId = /\/keys\/(key_[0-9a-z]+)\/revoke/.exec(keysPage)![1];
    assert.equal((await v.post(`/dashboard/apps/${appId}/keys/${keyId}/revoke`, {})).status, 403);
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200, "the key still works");
    await chat.body?.cancel();
  }));

Deno.test("a sign-in posted from another site is refused", () =>
  withService(async (s) => {
    await new OwnerSession(s).signUp("ada@example.com");
    const res = await new OwnerSession(s).post(
      "/signin",
      { email: "ada@example.com", password: PASSWORD },
      { origin: "https://evil.example" },
    );
    assert.equal(res.status, 403);
    assert.equal(res.headers.get("set-cookie"), null);
  }));

Deno.test("a new app shows 5.000000 USD and its first key once", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey, html } = await v.createApp("Recipe bot");
    assert.match(html, /shown only this once/);
    assert.match(await v.page("/dashboard"), /Recipe bot[\s\S]*\$5\.000000/);
    const keysPage = await v.page(`/dashboard/apps/${appId}/keys`);
    assert.ok(!keysPage.includes(apiKey), "the raw key is never shown again");
    assert.ok(keysPage.includes(apiKey.slice(0, 8)), "its first characters identify it");
  }));

Deno.test("an app name with <script> is shown as text", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("<script>alert(1)</script>");
    for (const path of ["/dashboard", `/dashboard/apps/${appId}`]) {
      const html = await v.page(path);
      assert.ok(!html.includes("<script>alert(1)"), path);
      assert.ok(html.includes("&lt;script>alert(1)&lt;/script>"), path);
    }
  }));

Deno.test("another owner cannot open or change the first owner's app by URL", () =>
  withService(async (s) => {
    const ada = new OwnerSession(s);
    await ada.signUp("ada@example.com");
    const { appId, apiKey } = await ada.createApp("Ada's app");
    const keyId = /\/keys\/(key_[0-9a-z]+)\/revoke/.exec(
      await ada.page(`/dashboard/apps/${appId}/keys`),
    )![1];
    const bob = new OwnerSession(s);
    await bob.signUp("bob@example.com");
    for (const tab of ["", "/keys", "/usage", "/wallet"]) {
      const res = await bob.request(`/dashboard/apps/${appId}${tab}`);
      assert.equal(res.status, 404, tab);
      assert.ok(!(await res.text()).includes("Ada's app"));
    }
    const csrf = await bob.csrf();
    const revoke = await bob.post(`/dashboard/apps/${appId}/keys/${keyId}/revoke`, { _csrf: csrf });
    assert.equal(revoke.status, 404);
    const rename = await bob.post(`/dashboard/apps/${appId}/rename`, { _csrf: csrf, name: "mine" });
    assert.equal(rename.status, 404);
    assert.ok(!(await bob.page("/dashboard")).includes("Ada's app"));
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200);
    await chat.body?.cancel();
  }));

Deno.test("a revoked key is refused on the very next API request", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey } = await v.createApp("app");
    const keyId = /\/keys\/(key_[0-9a-z]+)\/revoke/.exec(
      await v.page(`/dashboard/apps/${appId}/keys`),
    )![1];
    const res = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/revoke`, {
      _csrf: await v.csrf(),
    });
    assert.equal(res.status, 303);
    assert.match(await v.page(`/dashboard/apps/${appId}/keys`), /Revoked keys/);
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 401);
  }));

Deno.test("revoking a key from a later page of keys goes back to that page; from elsewhere, to the first", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("pages@example.com");
    const { appId } = await v.createApp("app");
    const keysPath = `/dashboard/apps/${appId}/keys`;
    const keyId = /\/keys\/(key_[0-9a-z]+)\/revoke/.exec(await v.page(keysPath))![1];
    const later = `${keysPath}?starting_after=${keyId}`;
    const fromLater = await v.post(`${keysPath}/${keyId}/revoke`, { _csrf: await v.csrf() }, {
      referer: `${PUBLIC_URL}${later}`,
    });
    assert.equal(fromLater.headers.get("location"), later);
    for (const referer of ["https://elsewhere.example/x", `${PUBLIC_URL}/dashboard`, "nonsense"]) {
      const res = await v.post(`${keysPath}/${keyId}/revoke`, { _csrf: await v.csrf() }, {
        referer,
      });
      assert.equal(res.headers.get("location"), keysPath, referer);
    }
  }));

Deno.test("each dashboard save says so, role=status, on the tab its form was on", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("saves@example.com");
    const { appId } = await v.createApp("app");
    const app = `/dashboard/apps/${appId}`;
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(await v.page(`${app}/keys`))![1];
    const saves: [string, Record<string, string>, string, RegExp][] = [
      [`${app}/keys/${keyId}/spend-cap`, { total: "5" }, `${app}/keys`, /Spend caps saved\./],
      [`${app}/end-user-spend-cap`, { daily: "1" }, `${app}/keys`, /Spend caps saved\./],
      [`${app}/top-up-settings`, { from: "overview" }, app, /Top-up page settings saved\./],
      [`${app}/top-up-settings`, { from: "wallet" }, `${app}/wallet`, /Top-up page settings saved/],
      [`${app}/top-up-link`, { from: "overview" }, app, /The top-up page has a new address/],
      [`${app}/top-up-link`, { from: "wallet" }, `${app}/wallet`, /The top-up page has a new/],
      [`${app}/limits`, { rpm: "10" }, app, /Rate limits saved\./],
      [`${app}/rename`, { name: "renamed" }, app, /App renamed\./],
      [
        `${app}/webhooks`,
        { url: HOOK_URL, threshold: "2" },
        `${app}/webhooks`,
        /Webhook settings saved\./,
      ],
      [`${app}/webhooks/delete`, {}, `${app}/webhooks`, /Webhook endpoint removed\./],
      [`${app}/keys/${keyId}/revoke`, {}, `${app}/keys`, /Key revoked/],
    ];
    // The first endpoint saved makes a signing secret, shown on its own page: saves after it do not.
    const first = await v.post(`${app}/webhooks`, { _csrf: await v.csrf(), url: HOOK_URL });
    await first.body?.cancel();
    for (const [path, fields, tab, message] of saves) {
      const res = await v.post(path, { _csrf: await v.csrf(), ...fields });
      assert.equal(res.status, 303, path);
      await res.body?.cancel();
      const location = res.headers.get("location")!;
      assert.equal(new URL(location, PUBLIC_URL).pathname, tab, path);
      const html = await v.page(location);
      assert.match(html, new RegExp(`<p class="saved" role="status">${message.source}`), path);
      // Said once: the same page reloaded says nothing.
      assert.doesNotMatch(await v.page(location), /class="saved"/, path);
    }
  }));

Deno.test("a refused top-up page setting comes back on the tab it was sent from", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("saves@example.com");
    const { appId } = await v.createApp("app");
    const res = await v.post(`/dashboard/apps/${appId}/top-up-settings`, {
      _csrf: await v.csrf(),
      from: "overview",
      return_url: "ftp://nope",
    });
    assert.equal(res.status, 400);
    const html = await res.text();
    assert.match(html, /aria-current="page">Overview</);
    assert.match(html, /role="alert"/);
  }));

Deno.test("without JavaScript, creating a key shows it once on its own page", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const res = await v.post(`/dashboard/apps/${appId}/keys`, {
      _csrf: await v.csrf(),
      name: "backend",
    });
    assert.equal(res.status, 303);
    await res.body?.cancel();
    const shown = await v.request(res.headers.get("location")!);
    assert.equal(shown.headers.get("cache-control"), "no-store");
    const html = await shown.text();
    assert.match(html, /Key “backend” created/);
    assert.match(html, /shown only this once/);
    const apiKey = /value="(tb_[0-9a-z]{36})"/.exec(html)![1];
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200);
    await chat.body?.cancel();
  }));

Deno.test("key creation and rotation answer JSON for the island, the key once", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey: first } = await v.createApp("app");
    const csrf = await v.csrf();
    const json = { accept: "application/json" };
    const created = await v.post(
      `/dashboard/apps/${appId}/keys`,
      { _csrf: csrf, name: "ci" },
      json,
    );
    assert.equal(created.status, 200);
    const body = await created.json();
    assert.equal(body.name, "ci");
    const ok = await s.chat(body.api_key, { model: "tollbooth/echo", messages: userMessage("a") });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();

    const defaultKey = (await listAppKeys(s.kv, appId)).find((k) => k.name === "default")!;
    const rotated = await v.post(
      `/dashboard/apps/${appId}/keys/${defaultKey.id}/rotate`,
      { _csrf: csrf },
      json,
    );
    const next = await rotated.json();
    assert.equal(next.name, "default");
    assert.equal(
      (await s.chat(first, { model: "tollbooth/echo", messages: userMessage("a") })).status,
      401,
    );
    const fresh = await s.chat(next.api_key, { model: "tollbooth/echo", messages: [] });
    assert.notEqual(fresh.status, 401);
    await fresh.body?.cancel();
  }));

Deno.test("at the app's bound of live keys the new-key form says so, with and without JavaScript, and rotation still works", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    const json = { accept: "application/json" };
    const second = await v.post(`/dashboard/apps/${appId}/keys`, { _csrf: csrf, name: "ci" }, json);
    assert.equal(second.status, 200);
    await second.body?.cancel();

    const page = await v.post(`/dashboard/apps/${appId}/keys`, { _csrf: csrf, name: "third" });
    assert.equal(page.status, 403);
    assert.match(await page.text(), /This app has 2 live API keys, the most an app may have/);
    const island = await v.post(
      `/dashboard/apps/${appId}/keys`,
      { _csrf: csrf, name: "third" },
      json,
    );
    assert.equal(island.status, 403);
    const refusal = (await island.json()).error;
    assert.equal(refusal.code, "api_key_limit_reached");
    assert.equal(refusal.type, "invalid_request_error");
    assert.match(refusal.message, /Revoke a key it no longer uses first/);

    const ci = (await listAppKeys(s.kv, appId)).find((k) => k.name === "ci")!;
    const rotated = await v.post(
      `/dashboard/apps/${appId}/keys/${ci.id}/rotate`,
      { _csrf: csrf },
      json,
    );
    assert.equal(rotated.status, 200);
    assert.equal((await rotated.json()).name, "ci");
    const live = (await listAppKeys(s.kv, appId)).filter((k) => k.revokedAt === null);
    assert.equal(live.length, 2);
  }, { MAX_LIVE_KEYS_PER_APP: "2" }));

Deno.test("the keys island's refusals are in the API's error shape", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    const json = { accept: "application/json" };
    const unnamed = await v.post(`/dashboard/apps/${appId}/keys`, { _csrf: csrf, name: "" }, json);
    assert.equal(unnamed.status, 400);
    const { error } = await unnamed.json();
    assert.equal(error.code, "invalid_parameter");
    assert.equal(error.param, "name");
    assert.match(error.message, /A key name has 1 to 60 characters/);
    assert.match(error.doc_url, /\/docs\/errors#invalid_parameter$/);
  }));

Deno.test("concurrent rotations of one key issue one new key; the others are told it is revoked", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    const key = (await listAppKeys(s.kv, appId)).find((k) => k.name === "default")!;
    const rotate = (json: boolean) =>
      v.post(
        `/dashboard/apps/${appId}/keys/${key.id}/rotate`,
        { _csrf: csrf },
        json ? { accept: "application/json" } : {},
      );
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => rotate(i % 2 === 0)));
    const statuses = answers.map((answer) => answer.status);
    const bodies = await Promise.all(answers.map((answer) => answer.text()));
    assert.equal(statuses.filter((status) => status === 500).length, 0, statuses.join(","));
    const issued = statuses.filter((status, i) =>
      status === 200 || (status === 303 && answers[i].headers.get("location")!.includes("/issued/"))
    );
    assert.equal(issued.length, 1, statuses.join(","));
    for (const [i, status] of statuses.entries()) {
      if (status === 404) assert.equal(JSON.parse(bodies[i]).error.code, "resource_not_found");
    }
    const live = (await listAppKeys(s.kv, appId)).filter((k) => k.revokedAt === null);
    assert.equal(live.length, 1);
  }));

Deno.test("replacing the top-up address shows a new one and retires the old", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const urlOf = (html: string) => new RegExp(`${PUBLIC_URL}/top-up/([0-9a-z]+)`).exec(html)![1];
    const before = urlOf(await v.page(`/dashboard/apps/${appId}/wallet`));
    const res = await v.post(`/dashboard/apps/${appId}/top-up-link`, { _csrf: await v.csrf() });
    assert.equal(res.status, 303);
    const after = urlOf(await v.page(`/dashboard/apps/${appId}/wallet`));
    assert.notEqual(after, before);
    assert.equal((await s.kv.get(keys.appByTopUpToken(before))).value, null);
  }));

Deno.test("usage and wallet pages show a request with its exact cost", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId, apiKey } = await v.createApp("app");
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hello") });
    const cost = chat.headers.get("tollbooth-request-cost")!;
    const requestId = chat.headers.get("tollbooth-request-id")!;
    await chat.body?.cancel();
    const usage = await v.page(`/dashboard/apps/${appId}/usage`);
    assert.ok(usage.includes(requestId));
    assert.ok(usage.includes(`$${cost}`));
    await s.wallets.credit(appId, {
      amount: 1_000_000,
      kind: "top_up",
      reason: "Top-up of 1.000000 USD via test checkout (development)",
      reference: "cs_test_1",
      marker: "t1",
    });
    const wallet = await v.page(`/dashboard/apps/${appId}/wallet`);
    assert.ok(wallet.includes(`−$${cost}`) && wallet.includes("+$5.000000"));
    // A credit's reason stands apart from its kind.
    assert.match(wallet, /Top-up<span class="muted"> — via Stripe Checkout/);
    const overview = await v.page(`/dashboard/apps/${appId}`);
    assert.ok(overview.includes("tollbooth/echo") && overview.includes(`$${cost}`));
  }));

Deno.test("the wallet ledger names a top-up once, with the payment reference its buyer's receipt shows", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const purchase = await createDevPurchase(s.kv, appId, 25_000_000);
    await creditTopUp(s.wallets, appId, {
      source: "dev",
      reference: purchase.id,
      amount: purchase.amount,
    });
    const wallet = await v.page(`/dashboard/apps/${appId}/wallet`);
    assert.match(wallet, /Top-up<span class="muted"> — via test checkout \(development\)<\/span>/);
    assert.doesNotMatch(wallet, /Top-up of 25/);
    assert.ok(wallet.includes(`Reference <code>${purchase.id}</code>`));
  }));

Deno.test("the usage page shows cached, cache-write and reasoning tokens under the counts", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const hold = await s.wallets.reserve(appId, {
      amount: 100,
      keyId: "key_x",
      requestId: "req_details",
      model: "tollbooth/echo",
    });
    assert.ok(hold.ok);
    await s.wallets.settle(appId, hold.reservation.id, {
      requestId: "req_details",
      keyId: "key_x",
      model: "tollbooth/echo",
      provider: "tollbooth",
      promptTokens: 1150,
      completionTokens: 80,
      cachedTokens: 1000,
      cacheWriteTokens: 50,
      reasoningTokens: 64,
      cost: 10,
      streamed: false,
      outcome: "completed",
      countedLocally: false,
    });
    const usage = await v.page(`/dashboard/apps/${appId}/usage`);
    assert.ok(usage.includes("1,000 cached · 50 cache write"), usage);
    assert.ok(usage.includes("64 reasoning"));
    await assertAuditClean(s.kv);
  }));

Deno.test("sign-out ends the session: the old cookie no longer opens the dashboard", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const oldCookie = v.cookie;
    const res = await v.post("/signout", { _csrf: await v.csrf() });
    assert.equal(res.status, 303);
    assert.equal(v.cookie, "");
    v.cookie = oldCookie;
    const again = await v.request("/dashboard");
    assert.equal(again.status, 303);
    assert.match(again.headers.get("location")!, /^\/signin/);
  }));

Deno.test("an error in a page gives the HTML 500 page without a stack trace", async () => {
  const s = await startService();
  const v = new OwnerSession(s);
  await v.signUp("ada@example.com");
  s.kv.close();
  const res = await v.request("/dashboard");
  assert.equal(res.status, 500);
  assert.match(res.headers.get("content-type") ?? "", /text\/html/);
  const html = await res.text();
  assert.match(html, /Something went wrong/);
  assert.ok(html.includes(res.headers.get("tollbooth-request-id")!));
  assert.ok(!/at .*\.ts:\d+/.test(html) && !html.includes("Error:"));
  await s.wallets.drain();
});

Deno.test("account pages are never cached nor framed; the API is left alone", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    for (const path of ["/signin", "/dashboard"]) {
      const res = await v.request(path);
      await res.body?.cancel();
      assert.equal(res.headers.get("cache-control"), "no-store", path);
      assert.equal(res.headers.get("x-frame-options"), "DENY", path);
    }
    const api = await s.chat(null, {});
    await api.body?.cancel();
    assert.equal(api.headers.get("x-frame-options"), null);
  }));

Deno.test("renaming an app shows the new name; an empty name is refused with a message", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("old name");
    const csrf = await v.csrf();
    const ok = await v.post(`/dashboard/apps/${appId}/rename`, { _csrf: csrf, name: "New name" });
    assert.equal(ok.status, 303);
    assert.match(await v.page("/dashboard"), /New name/);
    const bad = await v.post(`/dashboard/apps/${appId}/rename`, { _csrf: csrf, name: "   " });
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /1 to 100 characters/);
    assert.match(await v.page(`/dashboard/apps/${appId}`), /New name/);
  }));

Deno.test("a usage cursor that is not ours, or not one of the app's records, starts again from the newest page", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const res = await v.request(`/dashboard/apps/${appId}/usage?cursor=garbage!`);
    assert.equal(res.status, 303);
    assert.equal(res.headers.get("location"), `/dashboard/apps/${appId}/usage`);
    // Shaped like a record id, but no record of this app's.
    const unknown = await v.request(
      `/dashboard/apps/${appId}/usage?cursor=use_abc&user=${encodeURIComponent("ada 1")}`,
    );
    assert.equal(unknown.status, 303);
    assert.equal(
      unknown.headers.get("location"),
      `/dashboard/apps/${appId}/usage?user=ada%201`,
    );
  }));

Deno.test("an app created by an operator for an owner's email shows on that owner's dashboard", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { output } = await runAdmin(
      ["create-app", "--name", "made by ops", "--owner", "ADA@example.com"],
      s.kv,
      PUBLIC_URL,
    );
    assert.match(await v.page("/dashboard"), /made by ops/);
    const appId = (output as { app_id: string }).app_id;
    assert.match(await v.page(`/dashboard/apps/${appId}`), /made by ops/);
    await assert.rejects(
      () => runAdmin(["create-app", "--name", "x", "--owner", "nobody@example.com"], s.kv, ""),
      /no account with email nobody@example\.com/,
    );
  }));

Deno.test("the owner sets the top-up page's return link and balance display from the wallet page", () =>
  withService(async (s) => {
    const owner = new OwnerSession(s);
    await owner.signUp("settings@example.com");
    const { appId } = await owner.createApp("Settings app");
    const csrf = await owner.csrf();
    const saved = await owner.post(`/dashboard/apps/${appId}/top-up-settings`, {
      _csrf: csrf,
      return_url: "https://app.example/credits",
      show_balance: "on",
    });
    assert.equal(saved.status, 303);
    const app =
      (await s.kv.get<{ topUpReturnUrl?: string; topUpShowBalance?: boolean }>(keys.app(appId)))
        .value!;
    assert.equal(app.topUpReturnUrl, "https://app.example/credits");
    assert.equal(app.topUpShowBalance, true);
    const wallet = await owner.page(`/dashboard/apps/${appId}/wallet`);
    assert.ok(wallet.includes('value="https://app.example/credits"'));

    const refused = await owner.post(`/dashboard/apps/${appId}/top-up-settings`, {
      _csrf: csrf,
      return_url: "javascript:alert(1)",
    });
    assert.equal(refused.status, 400);
    assert.match(
      await refused.text(),
      /class="alert"[^>]*>The return URL must use https \(http is allowed only for localhost\)\./,
    );
    const unchanged = (await s.kv.get<{ topUpReturnUrl?: string }>(keys.app(appId))).value!;
    assert.equal(
      unchanged.topUpReturnUrl,
      "https://app.example/credits",
      "a refused form changes nothing",
    );

    await owner.post(`/dashboard/apps/${appId}/top-up-settings`, { _csrf: csrf, return_url: "" });
    const cleared = (await s.kv.get<{ topUpReturnUrl?: string | null; topUpShowBalance?: boolean }>(
      keys.app(appId),
    )).value!;
    assert.equal(cleared.topUpReturnUrl, null);
    assert.equal(cleared.topUpShowBalance, false, "an unticked box turns the balance off");
  }));

Deno.test("the wallet page shows a refunded top-up taken back and what is still owed", () =>
  withService(async (s) => {
    const owner = new OwnerSession(s);
    await owner.signUp("refunds@example.com");
    const { appId } = await owner.createApp("Refunded app");
    const held = await s.wallets.reserve(appId, {
      amount: 4_000_000,
      keyId: "key_elsewhere",
      requestId: "req_held",
      model: "tollbooth/echo",
    });
    assert.ok(held.ok);
    await s.wallets.debit(appId, {
      amount: 3_000_000,
      kind: "refund",
      reason: "Refund of 3.000000 USD of a Stripe top-up",
      reference: "pi_1",
      marker: "r1",
    });
    const page = await owner.page(`/dashboard/apps/${appId}/wallet`);
    assert.match(page, /Top-up refunded/);
    assert.match(page, /−\$3\.000000/);
    assert.match(page, /took back \$1\.000000/);
    assert.match(page, /data-testid="owed"[^]*Owed: <strong>\$2\.000000<\/strong>/);
    await s.wallets.release(appId, held.reservation.id);
  }));

Deno.test("the owner sets the app's rate limits from the dashboard and the API enforces them", () =>
  withService(async (s) => {
    const owner = new OwnerSession(s);
    await owner.signUp("limits@example.com");
    const { appId, apiKey } = await owner.createApp("Limited app");
    const csrf = await owner.csrf();
    const bad = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: csrf,
      rpm: "-4",
      tpm: "",
    });
    assert.equal(bad.status, 400);
    const saved = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: csrf,
      rpm: "1",
      tpm: "",
    });
    assert.equal(saved.status, 303);
    assert.match(await owner.page(`/dashboard/apps/${appId}`), /In force: 1 requests/);
    const body = { model: "tollbooth/echo", messages: userMessage("hi") };
    const first = await s.chat(apiKey, body);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get("x-ratelimit-limit-requests"), "1");
    await first.body?.cancel();
    const second = await s.chat(apiKey, body);
    assert.equal(second.status, 429);
    await second.body?.cancel();
  }));

Deno.test("an address past the sign-up limit is refused with 429 and no account is made", () =>
  withService(
    async (s) => {
      for (let i = 0; i < MAX_SIGNUPS_PER_IP; i++) {
        await new OwnerSession(s).signUp(`user${i}@example.com`);
      }
      const refused = await new OwnerSession(s).post("/signup", {
        email: "one-too-many@example.com",
        password: PASSWORD,
      });
      assert.equal(refused.status, 429);
      const wait = Number(refused.headers.get("retry-after"));
      assert.equal(wait, THROTTLE_WINDOW_MS / 2 / 1000, "refused until the window ends");
      assert.match(await refused.text(), /Too many sign-ups/);
      assert.equal((await s.kv.get(keys.ownerByEmail("one-too-many@example.com"))).value, null);
    },
    { MAX_SIGNUPS_PER_ADDRESS_PER_DAY: "100" },
    midWindowClock(),
  ));

/**
 * A clock stopped in the middle of a sign-up window (and of a UTC day): the throttle counts in
 * fixed windows, so on the wall clock a run that crosses a window's end starts counting afresh.
 */
function midWindowClock(): () => number {
  const at = Date.UTC(2026, 0, 15, 12, 7, 30);
  assert.equal(at % THROTTLE_WINDOW_MS, THROTTLE_WINDOW_MS / 2);
  return () => at;
}

Deno.test("an owner creates a management key (shown once) that lists their apps, and revokes it", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("reseller@example.com");
    const { appId } = await v.createApp("resold");
    assert.match(await v.page("/dashboard"), /href="\/dashboard\/management-keys"/);
    const res = await v.post("/dashboard/management-keys", {
      _csrf: await v.csrf(),
      name: "billing backend",
    });
    assert.equal(res.status, 303);
    await res.body?.cancel();
    const shown = await v.request(res.headers.get("location")!);
    assert.equal(shown.headers.get("cache-control"), "no-store");
    const html = await shown.text();
    assert.match(html, /shown only this once/);
    const managementKey = /value="(tbm_[0-9a-z]{40})"/.exec(html)![1];

    const api = (key: string) =>
      s.handle(
        new Request(`${PUBLIC_URL}/v1/management/apps`, {
          headers: { authorization: `Bearer ${key}` },
        }),
      );
    const listed = await api(managementKey);
    assert.equal(listed.status, 200);
    assert.deepEqual((await listed.json()).data.map((a: { id: string }) => a.id), [appId]);

    const keysPage = await v.page("/dashboard/management-keys");
    assert.match(keysPage, /billing backend/);
    assertAsksFirst(keysPage);
    assert.ok(!keysPage.includes(managementKey), "the raw key is never shown again");
    const keyId = /management-keys\/(mk_[0-9a-z]+)\/revoke/.exec(keysPage)![1];

    // Another owner cannot revoke it.
    const other = new OwnerSession(s);
    await other.signUp("other@example.com");
    const foreign = await other.post(`/dashboard/management-keys/${keyId}/revoke`, {
      _csrf: await other.csrf(),
    });
    assert.equal(foreign.status, 404);
    assert.equal((await api(managementKey)).status, 200);

    const revoked = await v.post(`/dashboard/management-keys/${keyId}/revoke`, {
      _csrf: await v.csrf(),
    });
    assert.equal(revoked.status, 303);
    assert.equal((await api(managementKey)).status, 401);
    assert.match(await v.page("/dashboard/management-keys"), /Revoked management keys/);
  }));

Deno.test("an owner sets a webhook (secret shown once), sends a test event and sees its delivery", () =>
  withService(async (s) => {
    const received: { signature: string | null; type: string }[] = [];
    const receiver = serveLoopback(async (request) => {
      const body = await request.json();
      received.push({ signature: request.headers.get("tollbooth-signature"), type: body.type });
      return new Response("ok");
    });
    try {
      const v = new OwnerSession(s);
      await v.signUp("hooks@example.com");
      const { appId } = await v.createApp("hooked");
      const base = `/dashboard/apps/${appId}/webhooks`;
      assert.match(await v.page(`/dashboard/apps/${appId}`), new RegExp(`href="${base}"`));

      const plain = await v.post(base, {
        _csrf: await v.csrf(),
        url: "http://example.com/hook",
        threshold: "2.00",
      });
      assert.equal(plain.status, 400);
      assert.match(await plain.text(), /https:\/\//);
      const badAmount = await v.post(base, {
        _csrf: await v.csrf(),
        url: `${receiver.url}/hook`,
        threshold: "two dollars",
      });
      assert.equal(badAmount.status, 400);
      const dollarSignAlone = await v.post(base, {
        _csrf: await v.csrf(),
        url: `${receiver.url}/hook`,
        threshold: "$",
      });
      assert.equal(dollarSignAlone.status, 400, "a $ alone is not an empty threshold");

      const saved = await v.post(base, {
        _csrf: await v.csrf(),
        url: `${receiver.url}/hook`,
        threshold: "2.50",
      });
      const html = await v.followRedirect(saved);
      const secret = /value="(whsec_[0-9a-z]+)"/.exec(html)![1];
      assert.match(html, /shown only this once/);
      const again = await v.page(base);
      assert.ok(!again.includes(secret), "the secret is never shown again");
      assert.match(again, /value="2.500000"/);
      assertAsksFirst(again);

      const test = await v.post(`${base}/test`, { _csrf: await v.csrf() });
      assert.equal(test.status, 303);
      assert.equal(received.length, 1);
      assert.equal(received[0].type, "webhook.test");
      assert.match(received[0].signature!, /^t=\d+,v1=[0-9a-f]{64}$/);
      const deliveries = await v.page(base);
      assert.match(deliveries, /webhook\.test/);
      assert.match(deliveries, /delivered/);
      assert.match(deliveries, /HTTP 200/);
    } finally {
      await receiver.close();
    }
  }, { WEBHOOK_ALLOW_LOOPBACK: "1" }));

Deno.test("the usage page groups spend by end user and filters the requests by one", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("per-user@example.com");
    const { appId, apiKey } = await v.createApp("per user");
    for (const user of ["ann", "ann", "bo"]) {
      const res = await s.chat(apiKey, {
        model: "tollbooth/echo",
        messages: userMessage("hi"),
        user,
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    const all = await v.page(`/dashboard/apps/${appId}/usage`);
    assert.match(all, /Spend by end user/);
    assert.match(all, new RegExp(`href="/dashboard/apps/${appId}/usage\\?user=ann">ann</a>`));
    const annRow = /<a [^>]*>ann<\/a><\/td><td class="num">(\d+)<\/td>/.exec(all);
    assert.equal(annRow?.[1], "2");
    const ann = await v.page(`/dashboard/apps/${appId}/usage?user=ann`);
    assert.match(ann, /Requests of end user <strong>ann<\/strong> only/);
    const rows = ann.slice(ann.indexOf('<table class="usage stacked">'));
    assert.equal(
      (rows.match(/<td data-label="End user" class="wraps">ann<\/td>/g) ?? []).length,
      2,
    );
    assert.ok(!rows.includes(">bo</td>"));
  }));

Deno.test("the usage page lists an end user stored with a lone surrogate in its name, instead of failing with a 500", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("lone-surrogate@example.com");
    const { appId, apiKey } = await v.createApp("lone surrogate");
    const res = await s.chat(apiKey, {
      model: "tollbooth/echo",
      messages: userMessage("hi"),
      user: "ann",
    });
    await res.body?.cancel();
    // As recorded before such names were refused.
    const [record] = await usageRecords(s.kv, appId);
    await s.kv.set(keys.usage(appId, record.id), { ...record, user: "ann\ud800" });
    const page = await v.page(`/dashboard/apps/${appId}/usage`);
    assert.match(page, new RegExp(`href="/dashboard/apps/${appId}/usage\\?user=ann%EF%BF%BD"`));
  }));

Deno.test("an end user's one request behind thousands of others is found on the usage page's first view", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("rare-user@example.com");
    const { appId, apiKey } = await v.createApp("busy");
    const res = await s.chat(apiKey, {
      model: "tollbooth/echo",
      messages: userMessage("hi"),
      user: "rare",
    });
    await res.body?.cancel();
    const [rare] = await usageRecords(s.kv, appId);
    // More newer records of another end user than one filtered page looks at.
    const later = Date.now() + 1_000;
    for (let batch = 0; batch < 12; batch++) {
      const atomic = s.kv.atomic();
      for (let i = 0; i < 500; i++) {
        const id = newId("use", later + batch * 500 + i);
        atomic.set(keys.usage(appId, id), { ...rare, id, user: "many", cost: 0 });
      }
      await atomic.commit();
    }
    const page = await v.page(`/dashboard/apps/${appId}/usage?user=rare`);
    const rows = page.slice(page.indexOf("Requests of end user"));
    assert.equal(
      (rows.match(/<td data-label="End user" class="wraps">rare<\/td>/g) ?? []).length,
      1,
    );
    assert.ok(!page.includes("No requests yet."));
  }));

Deno.test("an owner caps a key's and each end user's spend from the keys tab, and the API enforces them", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("caps@example.com");
    const { appId, apiKey } = await v.createApp("capped");
    const keysHtml = await v.page(`/dashboard/apps/${appId}/keys`);
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(keysHtml)![1];
    const ask = (user?: string) =>
      s.chat(apiKey, {
        model: "tollbooth/echo",
        messages: userMessage("hi"),
        ...(user ? { user } : {}),
      });

    const bad = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, {
      _csrf: await v.csrf(),
      total: "lots",
    });
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /A cap is an amount in USD/);

    const saved = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, {
      _csrf: await v.csrf(),
      total: "",
      daily: "0.000001",
      monthly: "",
    });
    assert.equal(saved.status, 303);
    assert.match(await v.page(`/dashboard/apps/${appId}/keys`), /value="0\.000001"/);
    const refused = await ask();
    assert.equal(refused.status, 402);
    assert.equal((await refused.json()).error.code, "key_spend_cap_exceeded");

    await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, { _csrf: await v.csrf() });
    assert.equal((await ask()).status, 200);
    const endUser = await v.post(`/dashboard/apps/${appId}/end-user-spend-cap`, {
      _csrf: await v.csrf(),
      monthly: "0.000001",
    });
    assert.equal(endUser.status, 303);
    const userRefused = await ask("someone");
    assert.equal(userRefused.status, 402);
    assert.equal((await userRefused.json()).error.code, "user_spend_cap_exceeded");
    assert.equal((await ask()).status, 200);
  }));

Deno.test("a refused key name's page shows the stored caps, so saving caps from it erases none", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("caps@example.com");
    const { appId } = await v.createApp("app");
    const set = await v.post(`/dashboard/apps/${appId}/end-user-spend-cap`, {
      _csrf: await v.csrf(),
      daily: "1.000000",
    });
    assert.equal(set.status, 303);
    const refused = await v.post(`/dashboard/apps/${appId}/keys`, {
      _csrf: await v.csrf(),
      name: "   ",
    });
    assert.equal(refused.status, 400);
    assert.match(await refused.text(), /Each end user: per utc day cap in USD" value="1\.000000"/);
  }));

Deno.test("an over-long app, key or management-key id in a dashboard path is the 404 page, not a 500", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("long@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    // Over the path bound, and under it but longer than any id (held by the lookups themselves).
    for (const long of ["a".repeat(5000), "a".repeat(400)]) {
      const answers = [
        await v.request(`/dashboard/apps/${long}`),
        await v.request(`/dashboard/apps/${long}/keys`),
        await v.post(`/dashboard/apps/${appId}/keys/${long}/revoke`, { _csrf: csrf }),
        await v.post(`/dashboard/apps/${appId}/keys/${long}/rotate`, { _csrf: csrf }),
        await v.post(`/dashboard/management-keys/${long}/revoke`, { _csrf: csrf }),
      ];
      for (const res of answers) {
        assert.equal(res.status, 404, res.url);
        assert.match(await res.text(), /Page not found/);
      }
    }
    const cursor = await v.request(`/dashboard/apps/${appId}/usage?cursor=use_${"a".repeat(5000)}`);
    assert.equal(cursor.status, 303, "an over-long cursor is not ours: back to the newest");
  }));

/** A POST whose body stops short of its declared Content-Length, as a dropped upload does. */
function cutOffBody(text: string, declared: number): RequestInit {
  const bytes = new TextEncoder().encode(text);
  return {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      "content-length": String(declared),
    },
    body: new ReadableStream({
      start(controller) {
        controller.enqueue(bytes);
        controller.error(new Error("connection reset"));
      },
    }),
  };
}

const BROKEN_MULTIPART: RequestInit = {
  method: "POST",
  headers: { "content-type": "multipart/form-data; boundary=xyz" },
  body: "garbage{{",
};

Deno.test("a broken multipart or cut-off form on sign-up and sign-in is a 400 page, and no account is made", () =>
  withService(async (s) => {
    for (const path of ["/signup", "/signin"]) {
      for (const init of [BROKEN_MULTIPART, cutOffBody("email=x%40example.com&pass", 400)]) {
        const res = await s.handle(new Request(`${PUBLIC_URL}${path}`, init));
        assert.equal(res.status, 400, path);
        const html = await res.text();
        assert.match(html, /Form not received/);
        assert.match(html, /nothing was changed/i);
      }
    }
    const owners = [];
    for await (const o of s.kv.list({ prefix: ["owners"] })) owners.push(o);
    assert.equal(owners.length, 0);
  }));

Deno.test("a signed-in dashboard POST with a broken multipart body is a 400 page and changes nothing", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("broken@example.com");
    const { appId, apiKey } = await v.createApp("first");
    const before = await countApps(s.kv);
    const keyId = (await listAppKeys(s.kv, appId))[0].id;
    const paths = [
      "/dashboard/apps",
      `/dashboard/apps/${appId}/rename`,
      `/dashboard/apps/${appId}/limits`,
      `/dashboard/apps/${appId}/keys/${keyId}/revoke`,
      "/dashboard/management-keys",
      "/signout",
    ];
    for (const path of paths) {
      for (const init of [BROKEN_MULTIPART, cutOffBody("name=x&_csrf=", 300)]) {
        const res = await v.request(path, init);
        assert.equal(res.status, 400, path);
        assert.match(await res.text(), /Form not received/);
      }
    }
    assert.equal(await countApps(s.kv), before);
    assert.ok(v.cookie, "still signed in");
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200, "the key was not revoked");
    await chat.body?.cancel();
  }));

Deno.test("the rate-limit form takes digits only: 0x10, 1e3, 16.0 and +16 are refused, not read as numbers", () =>
  withService(async (s) => {
    const owner = new OwnerSession(s);
    await owner.signUp("digits@example.com");
    const { appId } = await owner.createApp("app");
    const csrf = await owner.csrf();
    for (const rpm of ["0x10", "1e3", "16.0", "+16", "0b11", "1_000", "٣"]) {
      const res = await owner.post(`/dashboard/apps/${appId}/limits`, {
        _csrf: csrf,
        rpm,
        tpm: "",
      });
      assert.equal(res.status, 400, rpm);
      const page = await res.text();
      assert.match(page, /whole numbers of at least 1/);
      // Not a range the app cannot use: its ceiling is far below the largest number taken.
      assert.doesNotMatch(page, /from 1 to/);
    }
    const huge = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: csrf,
      rpm: "5000000000",
      tpm: "",
    });
    assert.equal(huge.status, 400);
    assert.match(
      await huge.text(),
      /Requests per minute can be at most 600 for this app \(the operator(&#39;|')s limit\), not 5000000000\./,
    );
    const saved = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: csrf,
      rpm: " 16 ",
      tpm: "",
    });
    assert.equal(saved.status, 303);
    assert.match(await owner.page(`/dashboard/apps/${appId}`), /In force: 16 requests/);
  }));

Deno.test("a tokens-per-minute value too large to store names the app's ceiling in its refusal", () =>
  withService(async (s) => {
    const owner = new OwnerSession(s);
    await owner.signUp("ceiling@example.com");
    const { appId } = await owner.createApp("app");
    const res = await owner.post(`/dashboard/apps/${appId}/limits`, {
      _csrf: await owner.csrf(),
      rpm: "",
      tpm: "99999999999",
    });
    assert.equal(res.status, 400);
    const page = await res.text();
    assert.match(page, /Tokens per minute can be at most 2000000 for this app/);
    assert.doesNotMatch(page, /this app(&#39;|')s ceiling/);
  }));

Deno.test("creating an app redirects to the page of its key: reloading that page shows the key no more and makes no second app", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const created = await v.postNewApp("Reloaded");
    assert.equal(created.status, 303);
    await created.body?.cancel();
    const location = created.headers.get("location")!;
    assert.match(location, /^\/dashboard\/apps\/app_[0-9a-z]+\/issued\/rev_[0-9a-z]+#secret$/);
    const first = await v.page(location);
    assert.match(first, /App “Reloaded” is ready/);
    const apiKey = /value="(tb_[0-9a-z]{36})"/.exec(first)![1];
    assert.ok(!location.includes(apiKey));

    const again = await v.page(location);
    assert.ok(!again.includes(apiKey), "the key is shown once");
    assert.match(again, /This key was already shown/);
    assert.equal(await countApps(s.kv), 1);
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    assert.equal(chat.status, 200);
    await chat.body?.cancel();
  }));

Deno.test("a new key's page opens only in the session that made it", () =>
  withService(async (s) => {
    const ada = new OwnerSession(s);
    await ada.signUp("ada@example.com");
    const created = await ada.postNewApp("Mine");
    await created.body?.cancel();
    const location = created.headers.get("location")!;
    const otherSession = new OwnerSession(s);
    const signIn = await otherSession.post("/signin", {
      email: "ada@example.com",
      password: PASSWORD,
    });
    assert.equal(signIn.status, 303);
    const elsewhere = await otherSession.page(location);
    assert.doesNotMatch(elsewhere, /tb_[0-9a-z]{36}/);
    assert.match(await ada.page(location), /value="tb_[0-9a-z]{36}"/);
  }));

Deno.test("creating a management key redirects to the page of the key: reloading that page shows it no more and makes no second key", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const created = await v.post("/dashboard/management-keys", {
      _csrf: await v.csrf(),
      name: "billing",
    });
    assert.equal(created.status, 303);
    await created.body?.cancel();
    const location = created.headers.get("location")!;
    assert.match(location, /^\/dashboard\/management-keys\/issued\/rev_[0-9a-z]+#secret$/);
    const first = await v.page(location);
    assert.match(first, /Management key “billing” created/);
    const managementKey = /value="(tbm_[0-9a-z]{40})"/.exec(first)![1];

    const again = await v.page(location);
    assert.ok(!again.includes(managementKey), "the key is shown once");
    assert.match(again, /This management key was already shown/);
    const listed = await v.page("/dashboard/management-keys");
    assert.equal([...listed.matchAll(/management-keys\/mk_[0-9a-z]+\/revoke/g)].length, 1);
  }));

/**
 * A webhook form's redirect to the page of the signing secret it made: the webhooks page with the
 * secret once, and without it when opened again.
 */
async function webhookSecretShownOnce(v: OwnerSession, posted: Response): Promise<string> {
  assert.equal(posted.status, 303);
  await posted.body?.cancel();
  const location = posted.headers.get("location")!;
  assert.match(
    location,
    /^\/dashboard\/apps\/app_[0-9a-z]+\/webhooks\/secret\/rev_[0-9a-z]+#secret$/,
  );
  const first = await v.page(location);
  assert.match(first, /shown only this once/);
  const secret = /value="(whsec_[0-9a-z]+)"/.exec(first)![1];
  assert.ok(!location.includes(secret));
  const again = await v.page(location);
  assert.ok(!again.includes(secret), "the secret is shown once");
  assert.match(again, /This signing secret was already shown/);
  return secret;
}

const HOOK_URL = "https://hooks.example.com/tollbooth";

Deno.test("saving a first webhook redirects to the page of its signing secret: reloading that page shows it no more and makes no other", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("hooked");
    const saved = await v.post(`/dashboard/apps/${appId}/webhooks`, {
      _csrf: await v.csrf(),
      url: HOOK_URL,
    });
    const secret = await webhookSecretShownOnce(v, saved);
    assert.equal((await getWebhookSettings(s.kv, appId))?.secret, secret);
  }));

Deno.test("replacing the webhook signing secret redirects to the page of the new one: reloading that page shows it no more and replaces it no second time", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("hooked");
    const csrf = await v.csrf();
    const base = `/dashboard/apps/${appId}/webhooks`;
    const first = await webhookSecretShownOnce(
      v,
      await v.post(base, { _csrf: csrf, url: HOOK_URL }),
    );
    const replaced = await v.post(`${base}/rotate-secret`, { _csrf: csrf });
    const secret = await webhookSecretShownOnce(v, replaced);
    assert.notEqual(secret, first);
    assert.equal((await getWebhookSettings(s.kv, appId))?.secret, secret);
  }));

/**
 * A refused form's page: the alert stands at the top of the form's card, the field it concerns is
 * marked invalid, described by the alert and focused, and every value is as it was typed. The form
 * posts to an address without a fragment: a browser ignores `autofocus` on a page whose URL has one.
 */
function assertRefusedAt(html: string, anchor: string, field: string, typed: string[]) {
  const card = html.indexOf(`id="${anchor}"`);
  assert.ok(card >= 0, `the card #${anchor}`);
  assert.doesNotMatch(html, /<form[^>]* action="[^"]*#/, "no form posts to a fragment");
  const alert = html.indexOf(`role="alert" id="${anchor}-error"`);
  assert.ok(alert > card, `the alert of #${anchor} is inside its card`);
  const described = [
    ...html.matchAll(new RegExp(`<input[^>]*aria-describedby="${anchor}-error"`, "g")),
  ];
  assert.equal(described.length, 1, "one field is described by the alert");
  const [invalid] = described;
  assert.ok(invalid.index! > alert, "the field the alert describes follows it");
  assert.match(
    invalid[0],
    new RegExp(`name="${field}"`),
    `the alert of #${anchor} is about ${field}`,
  );
  assert.match(invalid[0], /autofocus/);
  assert.match(invalid[0], /aria-invalid/);
  assert.equal([...html.matchAll(/aria-invalid/g)].length, 1, "no other field is marked invalid");
  for (const value of typed) {
    assert.ok(html.indexOf(`value="${value}"`, alert) > alert, `${value} is kept`);
  }
}

Deno.test("a refused dashboard form comes back as typed, its alert at the top of the form it opens at", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("first");
    const csrf = await v.csrf();
    const app = `/dashboard/apps/${appId}`;
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(await v.page(`${app}/keys`))![1];
    const longName = "n".repeat(101);
    const refusals: [string, Record<string, string>, string, string, string[]][] = [
      ["/dashboard/apps", { name: "second app" }, "new-app", "name", ["second app"]],
      [`${app}/rename`, { name: longName }, "rename", "name", [longName]],
      [`${app}/limits`, { rpm: "-4", tpm: "77" }, "rate-limits", "rpm", ["-4", "77"]],
      [
        `${app}/top-up-settings`,
        { return_url: "javascript:alert(1)", show_balance: "on" },
        "top-up-page",
        "return_url",
        ["javascript:alert(1)"],
      ],
      [`${app}/keys`, { name: "k".repeat(61) }, "new-key", "name", ["k".repeat(61)]],
      [
        `${app}/keys/${keyId}/spend-cap`,
        { total: "lots", daily: "2.50", monthly: "" },
        `caps-${keyId}`,
        "total",
        ["lots", "2.50"],
      ],
      [`${app}/end-user-spend-cap`, { daily: "-1" }, "caps-end-user", "daily", ["-1"]],
      [`${app}/limits`, { rpm: "16", tpm: "0" }, "rate-limits", "tpm", ["16", "0"]],
      [`${app}/webhooks`, { url: "http://example.com/hook" }, "endpoint", "url", [
        "http://example.com/hook",
      ]],
      [`${app}/webhooks`, { url: HOOK_URL, threshold: "$1.1234567" }, "endpoint", "threshold", [
        HOOK_URL,
        "$1.1234567",
      ]],
      ["/dashboard/management-keys", { name: "m".repeat(61) }, "new-management-key", "name", [
        "m".repeat(61),
      ]],
    ];
    for (const [path, fields, anchor, field, typed] of refusals) {
      const res = await v.post(path, { _csrf: csrf, ...fields });
      assert.ok(res.status >= 400 && res.status < 500, `${path}: ${res.status}`);
      const html = await res.text();
      assertRefusedAt(html, anchor, field, typed);
      if (anchor === "top-up-page") assert.match(html, /name="show_balance" checked/);
    }
  }, { MAX_APPS_PER_OWNER: "1" }));

Deno.test("too many test events: the limit is said beside the Send test event button, and no field is marked invalid", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("hooked");
    const csrf = await v.csrf();
    const base = `/dashboard/apps/${appId}/webhooks`;
    await (await v.post(base, { _csrf: csrf, url: HOOK_URL })).body?.cancel();
    let refused: Response | undefined;
    for (let i = 0; i <= TEST_EVENTS_PER_MINUTE && !refused; i++) {
      const res = await v.post(`${base}/test`, { _csrf: csrf });
      if (res.status === 429) refused = res;
      else await res.body?.cancel();
    }
    assert.ok(refused, "the test event past the limit is refused");
    const html = await refused.text();
    assert.doesNotMatch(html, /aria-invalid/);
    assert.doesNotMatch(html, /id="endpoint-error"/);
    const button = /<button[^>]*>Send test event<\/button>/.exec(html)?.[0] ?? "";
    assert.match(button, /aria-describedby="test-event-error"/);
    assert.match(button, /autofocus/);
    const form = html.slice(
      html.indexOf(`action="${base}/test"`),
      html.indexOf("</form>", html.indexOf(`action="${base}/test"`)),
    );
    assert.match(form, /role="alert" id="test-event-error">At most 5 test events a minute/);
  }));

Deno.test("every redirect to a new secret's page names the card that shows it", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const csrf = await v.csrf();
    const { appId } = await v.createApp("first");
    const app = `/dashboard/apps/${appId}`;
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(await v.page(`${app}/keys`))![1];
    const posts: [string, string, Record<string, string>, RegExp][] = [
      ["new app", "/dashboard/apps", { name: "second" }, /tb_[0-9a-z]{36}/],
      ["new key", `${app}/keys`, { name: "ci" }, /tb_[0-9a-z]{36}/],
      ["rotated key", `${app}/keys/${keyId}/rotate`, {}, /tb_[0-9a-z]{36}/],
      ["management key", "/dashboard/management-keys", { name: "billing" }, /tbm_[0-9a-z]{40}/],
      ["webhook secret", `${app}/webhooks`, { url: HOOK_URL }, /whsec_[0-9a-z]+/],
      ["replaced webhook secret", `${app}/webhooks/rotate-secret`, {}, /whsec_[0-9a-z]+/],
    ];
    for (const [kind, path, fields, secret] of posts) {
      const res = await v.post(path, { _csrf: csrf, ...fields });
      assert.equal(res.status, 303, kind);
      await res.body?.cancel();
      const [page, fragment] = res.headers.get("location")!.split("#");
      assert.equal(fragment, "secret", kind);
      const html = await v.page(page);
      const card = html.slice(html.indexOf('id="secret"'));
      assert.ok(html.includes('id="secret"'), `${kind}: the page has the card`);
      assert.match(card.slice(0, card.indexOf("</section>")), secret, `${kind}: in the card`);
    }
  }));

Deno.test("a spend-cap refusal is shown at the form of the key it concerns, the other forms as stored", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    await v.post(`/dashboard/apps/${appId}/end-user-spend-cap`, { _csrf: csrf, daily: "1.00" });
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(
      await v.page(`/dashboard/apps/${appId}/keys`),
    )![1];
    const res = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, {
      _csrf: csrf,
      daily: "lots",
    });
    assert.equal(res.status, 400);
    const html = await res.text();
    const endUserForm = html.slice(html.indexOf('id="caps-end-user"'));
    assert.doesNotMatch(endUserForm, /role="alert"/);
    assert.match(endUserForm, /per utc day cap in USD" value="1\.000000"/);
  }));

Deno.test("the overview names the keys whose own rate limits replace the app's", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("app");
    const csrf = await v.csrf();
    const before = await v.page(`/dashboard/apps/${appId}`);
    assert.match(before, /no key has limits of its own/);
    await v.post(`/dashboard/apps/${appId}/keys`, { _csrf: csrf, name: "slow lane" });
    const slow = (await listAppKeys(s.kv, appId)).find((k) => k.name === "slow lane")!;
    await setRateLimits(s.kv, appId, { rpm: 7, tpm: 900 }, { by: "operator" }, slow.id);
    const html = await v.page(`/dashboard/apps/${appId}`);
    assert.doesNotMatch(html, /each key has the same limits|no key has limits of its own/);
    assert.match(
      html,
      /slow lane \(<code>tb_[0-9a-z]+…<\/code>\): 7 requests and 900 tokens per minute/,
    );
    assert.doesNotMatch(html, /default \(<code>/, "a key without limits of its own is not listed");
  }));

Deno.test("the keys tab is paged newest first with Next and Previous links, every key once", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("many keys");
    for (let i = 1; i <= 4; i++) await issueKey(s.kv, appId, `key ${i}`, "operator");
    const newestFirst = (await listAppKeys(s.kv, appId)).map((k) => k.id).sort().reverse();
    const keysOn = (html: string) =>
      [...html.matchAll(/\/keys\/(key_[0-9a-z]+)\/revoke/g)].map((m) => m[1]);
    const link = (html: string, rel: "next" | "prev") =>
      new RegExp(`href="([^"]+)" rel="${rel}"`).exec(html)?.[1].replaceAll("&amp;", "&");

    const seen: string[] = [];
    const pages: string[] = [];
    let path: string | undefined = `/dashboard/apps/${appId}/keys?limit=2`;
    while (path) {
      const html = await v.page(path);
      pages.push(html);
      seen.push(...keysOn(html));
      path = link(html, "next");
    }
    assert.deepEqual(seen, newestFirst);
    assert.equal(pages.length, 3);
    assert.equal(link(pages[0], "prev"), undefined, "the first page has no previous one");
    const back = await v.page(link(pages[2], "prev")!);
    assert.deepEqual(keysOn(back), newestFirst.slice(2, 4));
    const first = await v.page(link(back, "prev")!);
    assert.deepEqual(keysOn(first), newestFirst.slice(0, 2));
    assert.equal(link(first, "prev"), undefined);

    for (const query of ["starting_after=key_nope", "limit=0", "limit=101", "limit=x"]) {
      const res = await v.request(`/dashboard/apps/${appId}/keys?${query}`);
      assert.equal(res.status, 303, query);
      assert.equal(res.headers.get("location"), `/dashboard/apps/${appId}/keys`);
    }
  }));

Deno.test("the spend-caps card shows what a capped key spent in each cap's period and what is left", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("caps@example.com");
    const { appId, apiKey } = await v.createApp("capped");
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(
      await v.page(`/dashboard/apps/${appId}/keys`),
    )![1];
    const saved = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, {
      _csrf: await v.csrf(),
      total: "1",
      daily: "0.5",
      monthly: "",
    });
    assert.equal(saved.status, 303);
    const chat = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage("hi") });
    const cost = Number(chat.headers.get("tollbooth-request-cost"));
    await chat.body?.cancel();
    await s.wallets.drain();
    const usd = (n: number) => `$${n.toFixed(6)}`;
    const page = await v.page(`/dashboard/apps/${appId}/keys`);
    assert.ok(page.includes(`${usd(cost)} spent in all · ${usd(1 - cost)} left`), page);
    assert.ok(page.includes(`${usd(cost)} spent today · ${usd(0.5 - cost)} left`));
    // No monthly cap: what was spent this month, and nothing said to be left.
    assert.match(page, new RegExp(`\\${usd(cost)} spent this month</span>`));
  }));

Deno.test("a caps save is confirmed in the form that saved it, not at the top of the card", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("where@example.com");
    const { appId } = await v.createApp("where");
    await issueKey(s.kv, appId, "second", "operator");
    const page = await v.page(`/dashboard/apps/${appId}/keys`);
    const keyIds = [...page.matchAll(/\/keys\/(key_[0-9a-z]+)\/spend-cap/g)].map((m) => m[1]);
    assert.equal(keyIds.length, 2);
    const saved = keyIds[1];
    const res = await v.post(`/dashboard/apps/${appId}/keys/${saved}/spend-cap`, {
      _csrf: await v.csrf(),
      total: "2",
    });
    assert.equal(res.headers.get("location"), `/dashboard/apps/${appId}/keys#caps-${saved}`);
    const html = await v.followRedirect(res);
    const form = new RegExp(`<form[^>]*id="caps-${saved}"[^>]*>(.*?)</form>`, "s").exec(html);
    assert.ok(form, "the saved key's form");
    assert.match(form[1], /role="status">Spend caps saved\./);
    assert.equal([...html.matchAll(/Spend caps saved\./g)].length, 1, "said once");
  }));

Deno.test("a cap just set on a key that has spent nothing yet shows all of it left, and a day that has passed counts nothing today", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("fresh@example.com");
    const { appId } = await v.createApp("fresh");
    const keyId = /\/keys\/(key_[0-9a-z]+)\/spend-cap/.exec(
      await v.page(`/dashboard/apps/${appId}/keys`),
    )![1];
    const saved = await v.post(`/dashboard/apps/${appId}/keys/${keyId}/spend-cap`, {
      _csrf: await v.csrf(),
      total: "1",
      daily: "0.5",
      monthly: "",
    });
    assert.equal(saved.status, 303);
    await saved.body?.cancel();
    let page = await v.page(`/dashboard/apps/${appId}/keys`);
    assert.ok(page.includes("$0.000000 spent in all · $1.000000 left"), page);
    assert.ok(page.includes("$0.000000 spent today · $0.500000 left"));
    // Yesterday's spending, as the counter last wrote it, is not today's.
    const key = keys.spendCounter(appId, "key", keyId);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString();
    await s.kv.set(key, {
      held: 0,
      total: 300_000,
      day: yesterday.slice(0, 10),
      daySpent: 300_000,
      month: yesterday.slice(0, 7),
      monthSpent: 300_000,
    });
    page = await v.page(`/dashboard/apps/${appId}/keys`);
    assert.ok(page.includes("$0.300000 spent in all · $0.700000 left"), page);
    assert.ok(page.includes("$0.000000 spent today · $0.500000 left"));
  }));

Deno.test("keys of one name are told apart in the spend-caps card by their prefixes", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("twins");
    for (let i = 0; i < 2; i++) await issueKey(s.kv, appId, "k1", "operator");
    const prefixes = (await listAppKeys(s.kv, appId)).filter((k) => k.name === "k1")
      .map((k) => k.prefix);
    assert.equal(prefixes.length, 2);
    const page = await v.page(`/dashboard/apps/${appId}/keys`);
    for (const prefix of prefixes) {
      assert.ok(page.includes(`Save caps of k1 (${prefix}…)`), prefix);
      assert.ok(page.includes(`Key k1 (${prefix}…): total cap in USD`), prefix);
    }
  }));

Deno.test("on a page of the keys tab the spend-caps card has every live key with a cap, whatever its page, and the page's keys", () =>
  withService(async (s) => {
    const v = new OwnerSession(s);
    await v.signUp("ada@example.com");
    const { appId } = await v.createApp("many keys");
    // One page of the keys tab is 50 keys: the three oldest are on the second.
    for (let i = 1; i <= 52; i++) await issueKey(s.kv, appId, `key ${i}`, "operator");
    const newestFirst = (await listAppKeys(s.kv, appId)).map((k) => k.id).sort().reverse();
    const [key2, key1, oldest] = newestFirst.slice(50);
    const csrf = await v.csrf();
    const app = `/dashboard/apps/${appId}`;
    for (const keyId of [oldest, key2]) {
      const capped = await v.post(`${app}/keys/${keyId}/spend-cap`, { _csrf: csrf, daily: "2.50" });
      assert.equal(capped.status, 303);
    }
    await v.post(`${app}/keys/${key2}/revoke`, { _csrf: csrf });
    const capForms = (html: string) =>
      [...html.matchAll(/\/keys\/(key_[0-9a-z]+)\/spend-cap/g)].map((m) => m[1]);

    const firstPage = await v.page(`${app}/keys`);
    assert.deepEqual(capForms(firstPage), [...newestFirst.slice(0, 50), oldest]);
    assert.match(
      firstPage,
      /Key default \(tb_[0-9a-z]+…\): per utc day cap in USD" value="2\.500000"/,
    );
    assert.match(firstPage, /every key with a cap, whatever its page/);

    // A refused cap of a key of another page comes back at that key's form.
    const refused = await v.post(`${app}/keys/${key1}/spend-cap`, { _csrf: csrf, daily: "lots" });
    assert.equal(refused.status, 400);
    assertRefusedAt(await refused.text(), `caps-${key1}`, "daily", ["lots"]);
  }));

/** A page whose forms ask before they act loads the script that asks: without it they act at once. */
function assertAsksFirst(html: string) {
  assert.match(html, /data-confirm=/);
  assert.match(html, /<script[^>]*src="\/static\/build\/islands\.js"/);
}
