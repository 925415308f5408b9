import assert from "node:assert/strict";
import { revokeKey } from "@/lib/billing/mod.ts";
import { flushLogs, jsonLogger, randomToken, timingSafeEqualStrings } from "@/lib/core/mod.ts";
import { CONTENT_SECURITY_POLICY } from "@/routes/security_headers.ts";
import { startFakeOpenAi } from "./fake_openai.ts";
import { assertAuditClean, PUBLIC_URL, startService, userMessage } from "./helpers.ts";

Deno.test("raw API keys (and our provider key) never appear in logs, console output, error bodies, KV records or upstream calls", async () => {
  const upstream = startFakeOpenAi();
  const console_: string[] = [];
  const original = { log: console.log, error: console.error, warn: console.warn };
  for (const name of ["log", "error", "warn"] as const) {
    // The logger writes its lines in batches: one console call may carry several.
    console[name] = (...args: unknown[]) =>
      console_.push(...args.map(String).join(" ").split("\n"));
  }
  // The real JSON logger, writing to the captured console: what production log shippers would see.
  const s = await startService({ openaiBaseUrl: upstream.url, log: jsonLogger });
  const issued: string[] = [];
  const seen: string[] = [];
  const record = async (res: Response) => {
    seen.push(JSON.stringify([...res.headers]));
    seen.push(await res.text());
  };
  try {
    const a = await s.newApp("leak check a");
    const b = await s.newApp("leak check b");
    issued.push(a.apiKey, b.apiKey);
    for (const model of ["tollbooth/echo", "fake/gpt"]) {
      for (const stream of [false, true]) {
        await record(await s.chat(a.apiKey, { model, messages: userMessage("hello"), stream }));
        await record(
          await s.chat(a.apiKey, { model, messages: userMessage("cut:1 two three"), stream }),
        );
        await record(
          await s.chat(b.apiKey, { model, messages: userMessage("status:500"), stream }),
        );
      }
    }
    for (const status of [400, 401, 403, 422, 429, 500]) {
      for (const stream of [false, true]) {
        await record(
          await s.chat(a.apiKey, {
            model: "fake/gpt",
            messages: userMessage(`quote-key:${status}`),
            stream,
          }),
        );
      }
    }
    // Bad requests made with a valid key, and near-miss keys that are one character off.
    await record(await s.chat(a.apiKey, "{not json"));
    await record(await s.chat(a.apiKey, { model: "nope/x", messages: userMessage("x") }));
    await record(await s.chat(a.apiKey, { model: "tollbooth/echo", messages: "x" }));
    await record(
      await s.chat(a.apiKey, { model: "tollbooth/echo", messages: userMessage("x") }, {
        headers: { "tollbooth-version": a.apiKey },
      }),
    );
    const nearMiss = a.apiKey.slice(0, -1) + (a.apiKey.endsWith("a") ? "b" : "a");
    await record(await s.chat(nearMiss, { model: "tollbooth/echo", messages: userMessage("x") }));
    await record(
      await s.chat(null, { model: "tollbooth/echo", messages: userMessage("x") }, {
        headers: { authorization: `Basic ${a.apiKey}` },
      }),
    );
    await revokeKey(s.kv, a.keyId);
    await record(
      await s.chat(a.apiKey, { model: "tollbooth/echo", messages: userMessage("x") }),
    );
    await s.wallets.drain();
    flushLogs();

    const kvDump: string[] = [];
    for await (const entry of s.kv.list({ prefix: [] })) {
      kvDump.push(JSON.stringify(entry.key) + JSON.stringify(entry.value, bigints));
    }
    const usage = kvDump.filter((line) => line.startsWith('["usage"'));
    assert.ok(usage.length >= 6, `usage records written (${usage.length})`);
    assert.ok(console_.length >= 15, `log lines collected (${console_.length})`);
    assert.ok(
      console_.some((l) => l.includes('"event":"request"') && l.includes('"streamed":true')),
    );
    const haystacks = {
      logs: console_,
      responses: seen,
      kv: kvDump,
      upstream: upstream.received.map((r) => `${r.authorization} ${r.body}`),
    };
    for (const key of [...issued, nearMiss]) {
      const body = key.slice(3);
      for (const [where, lines] of Object.entries(haystacks)) {
        const hit = lines.find((line) => line.includes(body));
        assert.equal(hit, undefined, `a raw key leaked into ${where}`);
      }
    }
    assert.ok(upstream.received.every((r) => r.authorization === "Bearer sk-fake-upstream"));
    // Nor does our provider key, even when an upstream quotes it back in an error.
    for (const [where, lines] of Object.entries({ ...haystacks, upstream: [] })) {
      const hit = lines.find((line) => line.includes("sk-fake-upstream"));
      assert.equal(hit, undefined, `the provider key leaked into ${where}`);
    }
    assert.ok(seen.some((line) => line.includes("Incorrect API key provided: Bearer [redacted]")));
    await assertAuditClean(s.kv);
  } finally {
    Object.assign(console, original);
    await s.close();
    await upstream.close();
  }
});

Deno.test("account pages carry the site's whole CSP, never a weaker one, and keep their same-origin referrer policy", async () => {
  const s = await startService();
  try {
    for (const path of ["/signup", "/signin", "/dashboard"]) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
      await res.body?.cancel();
      assert.equal(res.headers.get("content-security-policy"), CONTENT_SECURITY_POLICY, path);
      assert.equal(res.headers.get("referrer-policy"), "same-origin", path);
      assert.equal(res.headers.get("cache-control"), "no-store", path);
      assert.equal(res.headers.get("x-frame-options"), "DENY", path);
    }
  } finally {
    await s.close();
  }
});

function bigints(_key: string, value: unknown) {
  return typeof value === "bigint" ? value.toString() : value;
}

Deno.test("pages and static files carry a CSP without unsafe-inline, nosniff, referrer policy and frame denial", async () => {
  const s = await startService();
  try {
    for (const path of ["/", "/models", "/docs/errors", "/no-such-page", "/static/styles.css"]) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
      await res.body?.cancel();
      const csp = res.headers.get("content-security-policy") ?? "";
      assert.equal(csp, CONTENT_SECURITY_POLICY, path);
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
      assert.match(csp, /frame-ancestors 'none'/);
      // The top-up form is answered by a redirect to Stripe Checkout, which form-action governs.
      assert.match(csp, /form-action 'self' https:\/\/checkout\.stripe\.com(;|$)/);
      assert.equal(res.headers.get("x-content-type-options"), "nosniff", path);
      assert.equal(res.headers.get("referrer-policy"), "strict-origin-when-cross-origin", path);
      assert.equal(res.headers.get("x-frame-options"), "DENY", path);
    }
  } finally {
    await s.close();
  }
});

Deno.test("HTML pages contain no inline script, so the CSP does not break them", async () => {
  const s = await startService();
  try {
    for (const path of ["/", "/models", "/docs/errors"]) {
      const html = await (await s.handle(new Request(`${PUBLIC_URL}${path}`))).text();
      for (const tag of html.match(/<script\b[^>]*>/g) ?? []) {
        assert.match(tag, /\bsrc="\/static\//, `${path}: ${tag}`);
      }
      assert.doesNotMatch(html, /\son[a-z]+="/i, `${path}: inline event handler`);
    }
  } finally {
    await s.close();
  }
});

Deno.test("API responses, success, error and stream, carry X-Content-Type-Options: nosniff", async () => {
  const s = await startService();
  try {
    const { apiKey } = await s.newApp();
    const body = { model: "tollbooth/echo", messages: userMessage("hi") };
    const responses = [
      await s.chat(apiKey, body),
      await s.chat(apiKey, { ...body, stream: true }),
      await s.chat(null, body),
      await s.chat(apiKey, "{"),
      await s.handle(new Request(`${PUBLIC_URL}/v1/nothing`)),
    ];
    for (const res of responses) {
      await res.body?.cancel();
      assert.equal(res.headers.get("x-content-type-options"), "nosniff", String(res.status));
    }
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("no path redirects off-site: crafted paths never answer with a foreign Location", async () => {
  const s = await startService();
  try {
    const paths = [
      "//evil.example/",
      "/\\evil.example",
      "/%2F%2Fevil.example",
      "/static/..%2f..%2fetc/passwd",
      "/static//evil.example/x.css",
      "/docs/errors/",
      "/models?next=https://evil.example",
      "/?redirect=//evil.example",
      "/top-up/abc?return_to=https://evil.example",
    ];
    for (const path of paths) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`, { redirect: "manual" }));
      await res.body?.cancel();
      assert.ok(res.status < 500, `${path}: ${res.status}`);
      const location = res.headers.get("location");
      if (location !== null) {
        assert.equal(new URL(location, PUBLIC_URL).origin, PUBLIC_URL, `${path} -> ${location}`);
      }
    }
  } finally {
    await s.close();
  }
});

Deno.test("static files are served from the static folder only: an absolute path after /static/ is a 404", async () => {
  const dir = await Deno.makeTempDir({ prefix: "outside" });
  const secret = `${dir}/secret.css`;
  await Deno.writeTextFile(secret, "body { --secret: 1 }");
  const s = await startService();
  try {
    assert.match(secret, /^[a-z0-9_\-/]+\.css$/i, "a path the file pattern would let through");
    for (const path of [`/static/${secret}`, `/static/${secret.slice(1)}`]) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
      assert.equal(res.status, 404, path);
      assert.ok(!(await res.text()).includes("--secret"), path);
    }
    const ours = await s.handle(new Request(`${PUBLIC_URL}/static/styles.css`));
    assert.equal(ours.status, 200);
    await ours.body?.cancel();
  } finally {
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("randomToken draws at least the asked bits from the CSPRNG in base 36", () => {
  for (const bits of [128, 160, 186]) {
    const token = randomToken(bits);
    assert.match(token, /^[0-9a-z]+$/);
    assert.ok(token.length * Math.log2(36) >= bits, `${bits} bits: ${token.length} chars`);
  }
  const many = new Set(Array.from({ length: 2000 }, () => randomToken()));
  assert.equal(many.size, 2000);
  // Every character equally likely: 72,000 draws over 36 symbols, each within 10% of 2,000.
  const counts = new Map<string, number>();
  for (const token of Array.from({ length: 2880 }, () => randomToken(128))) {
    for (const ch of token.slice(0, 25)) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  }
  assert.equal(counts.size, 36);
  for (const [ch, n] of counts) assert.ok(n > 1800 && n < 2200, `${ch}: ${n}`);
});

Deno.test("the top-up page address carries a CSPRNG token of at least 128 bits", async () => {
  const s = await startService();
  try {
    const tokens = new Set<string>();
    for (let i = 0; i < 20; i++) tokens.add((await s.newApp()).topUpToken);
    assert.equal(tokens.size, 20);
    for (const token of tokens) {
      assert.match(token, /^[0-9a-z]+$/);
      assert.ok(token.length * Math.log2(36) >= 128, token);
    }
  } finally {
    await s.close();
  }
});

Deno.test("timingSafeEqualStrings is true only for equal strings, whatever their lengths", () => {
  assert.equal(timingSafeEqualStrings("", ""), true);
  assert.equal(timingSafeEqualStrings("secret-token", "secret-token"), true);
  assert.equal(timingSafeEqualStrings("secret-token", "secret-tokeN"), false);
  assert.equal(timingSafeEqualStrings("secret-token", "secret-toke"), false);
  assert.equal(timingSafeEqualStrings("secret", "secret\0"), false);
  assert.equal(timingSafeEqualStrings("", "x"), false);
  assert.equal(timingSafeEqualStrings("é", "e\u0301"), false);
  assert.equal(timingSafeEqualStrings("\u{1F511}", "\u{1F511}"), true);
});

Deno.test("a path segment longer than any id is the app's 404 everywhere: JSON under /v1, the not-found page elsewhere, never a 500", async () => {
  const s = await startService({ payments: { devServer: true } });
  try {
    const { appId, topUpToken } = await s.newApp();
    const long = "a".repeat(5000);
    const pages = [
      `/${long}`,
      `/docs/${long}`,
      `/dashboard/apps/${long}`,
      `/top-up/${long}`,
      `/top-up/${topUpToken}/dev-checkout/${long}`,
      `/top-up/${topUpToken}/receipt/${long}`,
      `/static/${long}`,
    ];
    for (const path of pages) {
      for (const method of ["GET", "POST"]) {
        const res = await s.handle(new Request(`${PUBLIC_URL}${path}`, { method }));
        assert.equal(res.status, 404, `${method} ${path.slice(0, 40)}`);
        assert.match(res.headers.get("content-type") ?? "", /text\/html/);
        assert.match(await res.text(), /not found|does not work/i);
      }
    }
    const api = [
      [`/v1/${long}`, "not_found"],
      [`/v1/chat/completions/${long}`, "not_found"],
      [`/v1/management/${long}`, "not_found"],
      [`/v1/management/apps/${long}`, "resource_not_found"],
      [`/v1/management/apps/${appId}/keys/${long}/revoke`, "resource_not_found"],
    ];
    for (const [path, code] of api) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
      assert.equal(res.status, 404, path.slice(0, 40));
      const { error } = await res.json();
      assert.equal(error.code, code);
      assert.ok(error.doc_url.endsWith(`#${code}`));
      assert.equal(typeof error.message, "string");
      assert.ok(res.headers.get("tollbooth-request-id"));
    }
    // A long query string is not a long segment: the app's own page still answers.
    const res = await s.handle(new Request(`${PUBLIC_URL}/models?x=${long}`));
    assert.equal(res.status, 200);
    await res.body?.cancel();
  } finally {
    await s.close();
  }
});
