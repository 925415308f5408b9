import assert from "node:assert/strict";
import { z } from "zod";
import { ERROR_CODES, formatUsd, parsePricePerMTok, tokensCost } from "@/lib/core/mod.ts";
import { RATE_LIMIT_HEADERS } from "@/lib/ops/mod.ts";
import { ChatRequestSchema, FIELD_SUPPORT } from "@/lib/gateway/mod.ts";
import { DOCS_PAGES } from "@/components/DocsLayout.tsx";
import { EXAMPLE_FILES } from "@/routes/docs/examples.ts";
import { PUBLIC_URL, startService, type TestService } from "./helpers.ts";

async function withService(fn: (s: TestService) => Promise<void>) {
  const s = await startService({ env: { RATE_LIMIT_RPM: "321", RATE_LIMIT_TPM: "54321" } });
  try {
    await fn(s);
  } finally {
    await s.close();
  }
}

async function page(s: TestService, path: string) {
  const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
  assert.equal(res.status, 200, path);
  assert.match(res.headers.get("content-type")!, /^text\/html/);
  return await res.text();
}

const unescape = (html: string) =>
  html.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'")
    .replace(/&amp;/g, "&");

const codeBlocks = (html: string) =>
  [...html.matchAll(/<pre><code>([\s\S]*?)<\/code><\/pre>/g)].map((m) => unescape(m[1]));

Deno.test("every docs page is served in the site's layout with the docs navigation", () =>
  withService(async (s) => {
    for (
      const { href } of DOCS_PAGES.filter((p) => p.href.startsWith("/docs/") || p.href === "/docs")
    ) {
      const html = await page(s, href);
      assert.match(html, /class="site-header"/, href);
      assert.match(html, /href="\/static\/styles.css"/, href);
      if (href !== "/docs/errors") {
        assert.match(html, new RegExp(`href="${href}" aria-current="page"`), href);
        for (const other of DOCS_PAGES) assert.ok(html.includes(`href="${other.href}"`), href);
      }
    }
  }));

Deno.test("every page links the site's icon, which is also served at /favicon.ico", () =>
  withService(async (s) => {
    for (const path of ["/", "/models", "/docs", "/docs/errors", "/signin"]) {
      assert.match(await page(s, path), /<link rel="icon" href="\/static\/favicon.svg"/, path);
    }
    for (const path of ["/static/favicon.svg", "/favicon.ico"]) {
      const res = await s.handle(new Request(`${PUBLIC_URL}${path}`));
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get("content-type"), "image/svg+xml", path);
      assert.match(await res.text(), /^<svg /, path);
    }
  }));

Deno.test("the quick start and the management page show each example file exactly as the tests run it", () =>
  withService(async (s) => {
    const blocks = [
      ...codeBlocks(await page(s, "/docs")),
      ...codeBlocks(await page(s, "/docs/management")),
      ...codeBlocks(await page(s, "/docs/webhooks")),
    ];
    // The examples read this service's address from the environment; the page says what to set.
    assert.ok(blocks.some((b) => b.startsWith(`export TOLLBOOTH_URL=${PUBLIC_URL}\n`)));
    for (const file of Object.values(EXAMPLE_FILES)) {
      const source = await Deno.readTextFile(new URL(`../docs/examples/${file}`, import.meta.url));
      assert.ok(blocks.includes(source), `${file} is on the page verbatim`);
      if (file === EXAMPLE_FILES.management || file === EXAMPLE_FILES.webhookVerify) continue;
      // Every chat example shows what a request cost and where to top up.
      assert.match(source, /tollbooth-balance|Tollbooth-Balance|-i /, `${file} shows the balance`);
      assert.match(source, /top_up_url|-i /, `${file} handles 402`);
    }
  }));

Deno.test("every link of the docs leads to a page or a section that exists", () =>
  withService(async (s) => {
    const errorsHtml = await page(s, "/docs/errors");
    const pages = [
      "/docs",
      "/docs/endpoints",
      "/docs/billing",
      "/docs/rate-limits",
      "/docs/management",
      "/docs/webhooks",
      "/docs/versioning",
      "/docs/operations",
    ];
    for (const path of pages) {
      const html = await page(s, path);
      for (const [, href] of html.matchAll(/href="(\/[^"]*)"/g)) {
        const [target, anchor] = href.split("#");
        let res = await s.handle(new Request(`${PUBLIC_URL}${target}`));
        // Pages behind sign-in send a signed-out reader to the sign-in page, which must exist.
        if (res.status === 303) {
          await res.body?.cancel();
          res = await s.handle(new Request(new URL(res.headers.get("location")!, PUBLIC_URL)));
        }
        assert.equal(res.status, 200, `${path} links to ${href}`);
        const text = await res.text();
        if (anchor) {
          const source = target === "/docs/errors" ? errorsHtml : text;
          assert.ok(source.includes(`id="${anchor}"`), `${path} links to ${href}`);
        }
      }
    }
  }));

Deno.test("an unknown field's refusal names a docs section that exists and lists the fields", () =>
  withService(async (s) => {
    const app = await s.newApp();
    for (
      const [path, body] of [
        ["/chat/completions", { model: "tollbooth/echo", messages: [], bogus: 1 }],
        ["/responses", { model: "tollbooth/echo", input: "x", bogus: 1 }],
      ] as const
    ) {
      const res = await s.post(app.apiKey, path, body);
      assert.equal(res.status, 400, path);
      const { message } = (await res.json()).error;
      const [, target, anchor] = /listed at (\/docs[a-z/-]*)#([a-z-]+)/.exec(message) ?? [];
      assert.ok(target, `${path}: ${message}`);
      const html = await page(s, target);
      const section = html.split(`id="${anchor}"`)[1];
      assert.ok(section, `${path} refers to ${target}#${anchor}`);
      assert.ok(section.includes("max_tokens") || section.includes("max_output_tokens"), path);
    }
  }));

Deno.test("the endpoints page says a Responses input takes a PDF as input_file, as the request parser does", () =>
  withService(async (s) => {
    const app = await s.newApp();
    const pdf = "%PDF-1.1\n1 0 obj<</Type/Page>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF";
    const res = await s.post(app.apiKey, "/responses", {
      model: "tollbooth/echo",
      input: [{
        role: "user",
        content: [
          { type: "input_text", text: "read" },
          {
            type: "input_file",
            filename: "a.pdf",
            file_data: `data:application/pdf;base64,${btoa(pdf)}`,
          },
        ],
      }],
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const html = await page(s, "/docs/endpoints");
    const input = html.split('id="responses"')[1].split("<strong>Fields:</strong>")[0];
    assert.match(input, /<code>input_file<\/code>/);
    assert.doesNotMatch(input, /Files and the other item types/);
  }));

Deno.test("the billing page's worked example is computed by the rounding rule itself", () =>
  withService(async (s) => {
    const html = await page(s, "/docs/billing");
    const input = parsePricePerMTok("0.15");
    const output = parsePricePerMTok("0.60");
    const cost = tokensCost(1234, 567, input, output);
    assert.equal(formatUsd(cost), "0.000526", "525.3 µUSD rounds up once to 526");
    assert.ok(html.includes(`<code>${formatUsd(cost)}</code>`));
    assert.ok(html.includes(`<code>${formatUsd(tokensCost(1234, 1000, input, output))}</code>`));
    assert.match(html, /rounded\s+<strong>up, once<\/strong>/);
  }));

Deno.test("the quick start's dialect table lists every accepted field with what each provider kind does", () =>
  withService(async (s) => {
    const html = await page(s, "/docs");
    const rows = [
      ...html.matchAll(
        /<tr><td><code>([a-z_]+)<\/code><\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><td>([^<]+)<\/td>/g,
      ),
    ];
    assert.deepEqual(rows.map((r) => r[1]).sort(), Object.keys(FIELD_SUPPORT).sort());
    // OpenAI, OpenAI Responses, Anthropic, simulator.
    const logprobs = rows.find((r) => r[1] === "logprobs")!;
    assert.deepEqual(logprobs.slice(2), [
      "passed on",
      "translated",
      "refused (400)",
      "refused (400)",
    ]);
    const verbosity = rows.find((r) => r[1] === "verbosity")!;
    assert.deepEqual(verbosity.slice(2), ["passed on", "translated", "ignored", "ignored"]);
    // The error that refuses an unknown field points here.
    assert.match(html, /<h2 id="dialect">/);
  }));

Deno.test("the rate-limit page names every x-ratelimit header and this deployment's limits", () =>
  withService(async (s) => {
    const html = await page(s, "/docs/rate-limits");
    for (const name of Object.keys(RATE_LIMIT_HEADERS)) assert.ok(html.includes(name), name);
    assert.ok(html.includes("321 requests") && html.includes("54,321 tokens"));
    assert.ok(html.includes("Retry-After"));
  }));

Deno.test("the versioning page states the current version and the header", () =>
  withService(async (s) => {
    const html = await page(s, "/docs/versioning");
    assert.ok(html.includes("2026-07-29"));
    assert.ok(html.includes("Tollbooth-Version"));
  }));

Deno.test("the errors page's invalid_parameter names every message role the validator accepts", () => {
  type Messages = { items: { oneOf: { properties: { role: { const: string } } }[] } };
  const schema = z.toJSONSchema(ChatRequestSchema, { io: "input", unrepresentable: "any" });
  const messages = (schema.properties as Record<string, unknown>).messages as Messages;
  const roles = messages.items.oneOf.map((m) => m.properties.role.const);
  assert.ok(roles.length >= 5, `roles: ${roles}`);
  const cause = ERROR_CODES.invalid_parameter.cause;
  const named = /a message role other than ([a-z, ]+?), empty `messages`/.exec(cause);
  assert.ok(named, cause);
  const listed = named[1].split(/, | or /);
  assert.deepEqual(listed.sort(), [...roles].sort());
});
