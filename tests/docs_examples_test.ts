/**
 * Runs the examples shown on /docs, file for file, against a running service: with a funded app
 * they print the answer, the cost and the balance; with a wallet that cannot cover the request
 * they print the app's top-up page.
 */
import assert from "node:assert/strict";
import { formatUsd } from "@/lib/core/mod.ts";
import { issueManagementKey } from "@/lib/management/mod.ts";
import { setSpendCaps } from "@/lib/billing/mod.ts";
import { signatureHeader } from "@/lib/webhooks/mod.ts";
import { SIMULATED_PDF_PAGE_TOKENS } from "@/lib/gateway/providers/simulator/simulator.ts";
import { samplePdfBase64 } from "./fakes/common.ts";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  serveLoopback,
  startService,
  type TestService,
  usageRecords,
} from "./helpers.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const EXAMPLES = `${ROOT}docs/examples/`;
/** The Python example runs when an interpreter with the `openai` package is given or on PATH. */
const PYTHON = Deno.env.get("TOLLBOOTH_TEST_PYTHON") ?? "python3";

interface Ctx {
  s: TestService;
  url: string;
  appId: string;
  apiKey: string;
  topUpToken: string;
}

async function withRunningService(fn: (ctx: Ctx) => Promise<void>) {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey, topUpToken } = await s.newApp();
    await fn({ s, url: server.url, appId, apiKey, topUpToken });
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
  }
}

async function run(
  command: string,
  file: string,
  ctx: Pick<Ctx, "url" | "apiKey">,
  env: Record<string, string> = {},
  args: string[] = [],
): Promise<string> {
  const out = await new Deno.Command(command, {
    args: [`${EXAMPLES}${file}`, ...args],
    cwd: ROOT,
    env: { TOLLBOOTH_URL: ctx.url, TOLLBOOTH_API_KEY: ctx.apiKey, ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, `${command} ${file} failed:\n${stdout}\n${stderr}`);
  return stdout;
}

/** Reserves all but 10 micro-USD of the wallet, so the next request cannot be covered. */
async function withEmptyWallet(ctx: Ctx, fn: () => Promise<void>) {
  const reserved = await ctx.s.wallets.reserve(ctx.appId, {
    amount: (await ctx.s.wallet(ctx.appId)).available - 10,
    keyId: "key_docs",
    requestId: "req_docs_hold",
    model: "tollbooth/echo",
  });
  assert.ok(reserved.ok);
  try {
    await fn();
  } finally {
    await ctx.s.wallets.release(ctx.appId, reserved.reservation.id);
  }
}

async function assertPaidAnswer(ctx: Ctx, output: string, answer: string) {
  assert.match(output, new RegExp(`^answer: ${answer}$`, "m"));
  const cost = /^cost: (\d+\.\d{6}) USD$/m.exec(output);
  assert.ok(cost, `a cost line in:\n${output}`);
  assert.notEqual(cost[1], "0.000000");
  const wallet = await ctx.s.wallet(ctx.appId);
  const balance = /^balance(?: before settling)?: (\d+\.\d{6}) USD$/m.exec(output);
  assert.ok(balance, `a balance line in:\n${output}`);
  return { cost: cost[1], balance: balance[1], wallet };
}

/** Caps the app's key at one micro-USD (spending counts from then on): no request fits. */
async function withCappedKey(ctx: Ctx, fn: () => Promise<void>) {
  const { keyId } = (await usageRecords(ctx.s.kv, ctx.appId))[0];
  await setSpendCaps(ctx.s.kv, ctx.appId, { keyId }, { total: 1 });
  try {
    await fn();
  } finally {
    await setSpendCaps(ctx.s.kv, ctx.appId, { keyId }, {});
  }
}

/** A cap's 402 is told apart from an empty wallet's: no top-up page for it. */
function assertCapped(output: string) {
  assert.equal(output.trim(), "key_spend_cap_exceeded: 0.000001 USD left under the total cap");
}

function assertTopUp(ctx: Ctx, output: string) {
  assert.equal(
    output.trim(),
    `top up at: ${PUBLIC_URL}/top-up/${ctx.topUpToken} (balance 0.000010 USD)`,
  );
}

Deno.test("docs example: the openai npm package reads cost and balance, and handles 402: a top-up for an empty wallet, a cap's own words for a cap", () =>
  withRunningService(async (ctx) => {
    const output = await run("node", "openai.mjs", ctx);
    const { balance, wallet } = await assertPaidAnswer(
      ctx,
      output,
      "Hello from the openai package",
    );
    assert.equal(balance, formatUsd(wallet.available));
    await withEmptyWallet(ctx, async () => assertTopUp(ctx, await run("node", "openai.mjs", ctx)));
    await withCappedKey(ctx, async () => assertCapped(await run("node", "openai.mjs", ctx)));
  }));

Deno.test("docs example: an openai npm stream prints the cost from its usage chunk, and handles 402: a top-up for an empty wallet, a cap's own words for a cap", () =>
  withRunningService(async (ctx) => {
    const output = await run("node", "openai-stream.mjs", ctx);
    const { cost, wallet } = await assertPaidAnswer(ctx, output, "Hello from a stream");
    assert.equal(formatUsd(wallet.spent), cost);
    await withEmptyWallet(
      ctx,
      async () => assertTopUp(ctx, await run("node", "openai-stream.mjs", ctx)),
    );
    await withCappedKey(ctx, async () => assertCapped(await run("node", "openai-stream.mjs", ctx)));
  }));

Deno.test("docs example: the openai npm package sends a PDF, billed by its pages, and handles 402", () =>
  withRunningService(async (ctx) => {
    const dir = await Deno.makeTempDir({ prefix: "docs-pdf-" });
    try {
      const path = `${dir}/report.pdf`;
      await Deno.writeFile(path, Uint8Array.from(atob(samplePdfBase64(3)), (c) => c.charCodeAt(0)));
      const output = await run("node", "openai-pdf.mjs", ctx, {}, [path]);
      const { cost, balance, wallet } = await assertPaidAnswer(
        ctx,
        output,
        "Summarise this report.",
      );
      const prompt = Number(/^prompt tokens: (\d+)$/m.exec(output)?.[1]);
      assert.ok(prompt > 3 * SIMULATED_PDF_PAGE_TOKENS, `its three pages billed: ${prompt}`);
      assert.equal(formatUsd(wallet.spent), cost);
      assert.equal(balance, formatUsd(wallet.available));
      await withEmptyWallet(
        ctx,
        async () => assertTopUp(ctx, await run("node", "openai-pdf.mjs", ctx, {}, [path])),
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }));

Deno.test("docs example: the Vercel AI SDK reads cost and balance, and handles 402: a top-up for an empty wallet, a cap's own words for a cap", () =>
  withRunningService(async (ctx) => {
    const output = await run("node", "ai-sdk.mjs", ctx);
    const { balance, wallet } = await assertPaidAnswer(ctx, output, "Hello from the AI SDK");
    assert.equal(balance, formatUsd(wallet.available));
    await withEmptyWallet(ctx, async () => assertTopUp(ctx, await run("node", "ai-sdk.mjs", ctx)));
    await withCappedKey(ctx, async () => assertCapped(await run("node", "ai-sdk.mjs", ctx)));
  }));

Deno.test("docs example: curl shows the money headers, and the 402 body's top_up_url", () =>
  withRunningService(async (ctx) => {
    const output = await run("sh", "curl.sh", ctx);
    assert.match(output, /^HTTP\/1\.1 200/);
    const wallet = await ctx.s.wallet(ctx.appId);
    assert.match(output, new RegExp(`^tollbooth-balance: ${formatUsd(wallet.available)}\\r$`, "m"));
    assert.match(
      output,
      new RegExp(`^tollbooth-request-cost: ${formatUsd(wallet.spent)}\\r$`, "m"),
    );
    assert.match(output, /"content":"Hello from curl"/);
    await withEmptyWallet(ctx, async () => {
      const refused = await run("sh", "curl.sh", ctx);
      assert.match(refused, /^HTTP\/1\.1 402/);
      const body = JSON.parse(refused.slice(refused.indexOf("\r\n\r\n") + 4));
      assert.equal(body.error.top_up_url, `${PUBLIC_URL}/top-up/${ctx.topUpToken}`);
    });
  }));

const pythonHasOpenai = await new Deno.Command(PYTHON, {
  args: ["-c", "import openai"],
  stdout: "null",
  stderr: "null",
}).output().then((o) => o.success, () => false);

Deno.test({
  name:
    "docs example: the Python openai package reads cost and balance, and handles 402: a top-up for an empty wallet, a cap's own words for a cap",
  ignore: !pythonHasOpenai,
  fn: () =>
    withRunningService(async (ctx) => {
      const output = await run(PYTHON, "python-openai.py", ctx);
      const { balance, wallet } = await assertPaidAnswer(ctx, output, "Hello from Python");
      assert.equal(balance, formatUsd(wallet.available));
      await withEmptyWallet(ctx, async () =>
        assertTopUp(ctx, await run(PYTHON, "python-openai.py", ctx)));
      await withCappedKey(ctx, async () =>
        assertCapped(await run(PYTHON, "python-openai.py", ctx)));
    }),
});

Deno.test("docs example: the management API lists apps, creates a key, walks usage and reports per user", async () => {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { managementKey } = await issueManagementKey(s.kv, "own_docs", "docs");
    const created = await createAppRecord(s.kv, {
      name: "resold",
      ownerId: "own_docs",
      bound: "operator",
    });
    for (const user of ["alice", "alice", undefined]) {
      const res = await s.chat(created.key.apiKey, {
        model: "tollbooth/echo",
        messages: [{ role: "user", content: "hi" }],
        ...(user ? { user } : {}),
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
    }
    const output = await run("node", "management.mjs", {
      url: server.url,
      apiKey: created.key.apiKey,
    }, { TOLLBOOTH_MANAGEMENT_KEY: managementKey });
    const wallet = await s.wallet(created.app.id);
    assert.match(
      output,
      new RegExp(`app resold: balance ${formatUsd(wallet.available)}, held 0\\.000000`),
    );
    assert.match(output, /new key: key_[0-9a-z]+ tb_[0-9a-z]{3}…/);
    assert.match(output, /usage records: 3/);
    assert.match(output, /user \(none\): 1 requests/);
    assert.match(output, /user alice: 2 requests/);
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
  }
});

Deno.test("docs example: the webhook verifier accepts Tollbooth's signature and refuses a wrong secret, body or old timestamp", async () => {
  const body = JSON.stringify({ id: "evt_1", type: "webhook.test" });
  const now = Math.floor(Date.now() / 1000);
  const header = signatureHeader("whsec_right", now, body);
  const stale = signatureHeader("whsec_right", now - 600, body);
  const script = `
    import { verifyTollboothSignature as v } from ${
    JSON.stringify(`${EXAMPLES}webhook-verify.mjs`)
  };
    const [body, header, stale] = JSON.parse(process.argv[1]);
    console.log(JSON.stringify([
      v(body, header, "whsec_right"),
      v(body, header, "whsec_wrong"),
      v(body + " ", header, "whsec_right"),
      v(body, stale, "whsec_right"),
    ]));`;
  const out = await new Deno.Command("node", {
    args: ["--input-type=module", "-e", script, JSON.stringify([body, header, stale])],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), [true, false, false, false]);
});
