/**
 * Usage that neither its reservation nor the wallet's balance can cover is never charged (a wallet
 * never goes below zero): it is `uncharged`, the operator's loss, and it is never silent. Per
 * request in the log line and the usage record, per app in `show-app` and the dashboard, service-wide
 * in `audit` and `/metrics`.
 *
 * An uncharged amount is produced deterministically: a strict OpenAI fake bills far more than any
 * reservation could cover (1,000 prompt and 100,000 completion tokens for a request of a few tokens
 * with max_tokens 10), on an app whose balance was spent down to almost nothing.
 */
import assert from "node:assert/strict";
import { keys } from "@/lib/db.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { runAdmin } from "@/scripts/admin.ts";
import { startOpenAiUpstream } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  readSse,
  spendDownTo,
  startService,
  type TestService,
  until,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import { OwnerSession } from "./owner_session.ts";
import { parsePrometheus } from "./prometheus.ts";

const METRICS_TOKEN = "uncharged-metrics-token";
const MODEL = "fake/gpt";
/** What the fake bills every request: far beyond max_tokens 10. */
const BILLED = { promptTokens: 1_000, completionTokens: 100_000 };
/** fake/gpt costs 2.00 USD per million input tokens, 8.00 per million output: 2 and 8 micro-USD. */
const PROVIDER_COST = BILLED.promptTokens * 2 + BILLED.completionTokens * 8;
/** What is left in the wallet before the request: a little more than a reservation. */
const NEARLY_EMPTY = 500;
const REQUEST = { model: MODEL, messages: userMessage("Say hi."), max_tokens: 10 };

interface Setup {
  s: TestService;
  upstream: ReturnType<typeof startOpenAiUpstream>;
}

async function withUpstream(
  fn: (setup: Setup) => Promise<void>,
  options: { kvPath?: string } = {},
) {
  const upstream = startOpenAiUpstream();
  upstream.setDefault({ content: "Hi.", ...BILLED });
  const s = await startService({
    openaiBaseUrl: upstream.baseUrl,
    kvPath: options.kvPath,
    env: { FAKE_OPENAI_KEY: upstream.apiKey, METRICS_TOKEN },
  });
  try {
    await fn({ s, upstream });
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
}

/** An app with NEARLY_EMPTY micro-USD left. */
async function nearlyEmptyApp(s: TestService) {
  const app = await s.newApp("nearly empty");
  await spendDownTo(s.kv, app.appId, NEARLY_EMPTY);
  return app;
}

async function metrics(s: TestService) {
  const res = await s.handle(
    new Request(`${PUBLIC_URL}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }),
  );
  assert.equal(res.status, 200);
  return parsePrometheus(await res.text());
}

const requestLines = (s: TestService) => s.logs.filter((l) => l.event === "request");

async function admin(s: TestService, ...args: string[]) {
  // deno-lint-ignore no-explicit-any
  const { output, exitCode } = await runAdmin(args, s.kv, PUBLIC_URL) as any;
  return { json: output, exitCode };
}

Deno.test("usage beyond the reservation and the whole balance is uncharged in the usage record and the log line", () =>
  withUpstream(async ({ s }) => {
    const { appId, apiKey } = await nearlyEmptyApp(s);
    const res = await s.chat(apiKey, REQUEST);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(NEARLY_EMPTY));
    assert.equal(res.headers.get("tollbooth-balance"), "0.000000");
    assert.equal((await s.wallet(appId)).available, 0, "never below zero");

    const record = (await usageRecords(s.kv, appId)).find((u) => u.model === MODEL)!;
    assert.equal(record.promptTokens, BILLED.promptTokens);
    assert.equal(record.completionTokens, BILLED.completionTokens);
    assert.equal(record.cost, NEARLY_EMPTY, "what left the wallet");
    assert.equal(record.uncharged, PROVIDER_COST - NEARLY_EMPTY);
    assert.ok(record.reserved > 0 && record.reserved < NEARLY_EMPTY);

    const [line] = requestLines(s);
    assert.equal(line.requestId, record.requestId);
    assert.equal(line.reserved, record.reserved);
    assert.equal(line.cost, NEARLY_EMPTY);
    assert.equal(line.uncharged, PROVIDER_COST - NEARLY_EMPTY);
  }));

Deno.test("a stream billed beyond its reservation and the balance logs and records its uncharged usage when settled", () =>
  withUpstream(async ({ s }) => {
    const { appId, apiKey } = await nearlyEmptyApp(s);
    const res = await s.chat(apiKey, { ...REQUEST, stream: true });
    assert.equal(res.status, 200);
    const events = await readSse(res);
    assert.equal(events.at(-1), "[DONE]");
    await until(() => requestLines(s).length === 1, "the stream's log line");
    const [line] = requestLines(s);
    assert.equal(line.streamed, true);
    assert.equal(line.cost, NEARLY_EMPTY);
    assert.equal(line.uncharged, PROVIDER_COST - NEARLY_EMPTY);
    const record = (await usageRecords(s.kv, appId)).find((u) => u.model === MODEL)!;
    assert.equal(record.streamed, true);
    assert.equal(record.cost + record.uncharged, PROVIDER_COST);
    assert.equal(record.uncharged, PROVIDER_COST - NEARLY_EMPTY);
  }));

Deno.test("a count past what any model can bill is no bill: the answer is counted by us, streamed or not; a believed count past the balance is charged down to it", async () => {
  const cases = [
    // Not believed: the usage's completion count is a fault, so the answer is counted by us.
    { billed: { completionTokens: 2e15 }, countedLocally: true },
    // The reasoning count alone is a fault: the completion count stands.
    { billed: { completionTokens: 5, reasoningTokens: 6e15 }, countedLocally: false },
    // Believed (below 100M tokens), far past the hold and the balance.
    { billed: { completionTokens: 50_000_000 }, countedLocally: false },
  ];
  for (const { billed, countedLocally } of cases) {
    for (const stream of [false, true]) {
      const upstream = startOpenAiUpstream();
      upstream.setDefault({ content: "Hi.", promptTokens: 10, ...billed });
      const s = await startService({
        openaiBaseUrl: upstream.baseUrl,
        env: { FAKE_OPENAI_KEY: upstream.apiKey },
      });
      try {
        const { appId, apiKey } = await nearlyEmptyApp(s);
        const res = await s.chat(apiKey, { ...REQUEST, stream });
        assert.equal(res.status, 200);
        const body = await res.text();
        assert.ok(!body.includes("internal_error"), body.slice(-300));
        const what = `${JSON.stringify(billed)}, stream: ${stream}`;
        const charged = async () =>
          (await usageRecords(s.kv, appId)).find((u) => u.model === MODEL);
        await until(async () => (await charged()) !== undefined, what);
        const record = (await charged())!;
        assert.equal(record.countedLocally, countedLocally, what);
        const bill = record.cost + record.uncharged;
        if (billed.completionTokens === 50_000_000) {
          assert.equal(bill, 10 * 2 + 50_000_000 * 8, what);
          assert.equal(record.cost, NEARLY_EMPTY, what);
        } else {
          assert.ok(bill < NEARLY_EMPTY && record.uncharged === 0, what);
        }
        assert.equal((await s.wallet(appId)).available, NEARLY_EMPTY - record.cost, what);
        await assertAuditClean(s.kv);
      } finally {
        await s.close();
        await upstream.close();
      }
    }
  }
});

Deno.test("a request the balance covers logs uncharged 0; one released unsettled logs null", () =>
  withUpstream(async ({ s, upstream }) => {
    upstream.setDefault({ content: "Hi.", promptTokens: 10, completionTokens: 5 });
    const { appId, apiKey } = await s.newApp();
    const covered = await s.chat(apiKey, REQUEST);
    assert.equal(covered.status, 200);
    await covered.body?.cancel();
    upstream.script({ status: 500 });
    const failed = await s.chat(apiKey, REQUEST);
    assert.equal(failed.status, 502);
    await failed.body?.cancel();
    const refused = await s.chat(apiKey, { ...REQUEST, model: "no/such-model" });
    assert.equal(refused.status, 400);
    await refused.body?.cancel();
    const [settled, released, invalid] = requestLines(s);
    assert.equal(settled.uncharged, 0);
    assert.equal(settled.cost, 10 * 2 + 5 * 8);
    assert.equal(released.outcome, "released");
    assert.equal(released.uncharged, null);
    assert.equal(invalid.uncharged, null);
    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.uncharged, 0);
    const shown = await admin(s, "show-app", "--app", appId);
    assert.equal(shown.json.uncharged, "0.000000");
  }));

Deno.test("admin show-app reports the app's uncharged total", () =>
  withUpstream(async ({ s }) => {
    const { appId, apiKey } = await nearlyEmptyApp(s);
    const before = await admin(s, "show-app", "--app", appId);
    assert.equal(before.json.uncharged, "0.000000");
    (await s.chat(apiKey, REQUEST)).body?.cancel();
    const after = await admin(s, "show-app", "--app", appId);
    assert.equal(after.exitCode, 0);
    assert.equal(after.json.uncharged, formatUsd(PROVIDER_COST - NEARLY_EMPTY));
    assert.equal(after.json.balance, "0.000000");
    assert.equal(after.json.spent, "5.000000", "uncharged is not spent: it left no wallet");
  }));

Deno.test("admin audit reports the total uncharged and each app that has any, and stays clean", () =>
  withUpstream(async ({ s, upstream }) => {
    const first = await nearlyEmptyApp(s);
    const second = await nearlyEmptyApp(s);
    const untouched = await s.newApp("covered");
    for (const app of [first, first, second]) {
      // The first app's second request finds an empty wallet: refused, nothing runs.
      const res = await s.chat(app.apiKey, REQUEST);
      await res.body?.cancel();
    }
    upstream.setDefault({ content: "Hi.", promptTokens: 10, completionTokens: 5 });
    (await s.chat(untouched.apiKey, REQUEST)).body?.cancel();

    const { json, exitCode } = await admin(s, "audit");
    assert.equal(exitCode, 0);
    assert.equal(json.ok, true);
    const each = PROVIDER_COST - NEARLY_EMPTY;
    assert.equal(json.totals.uncharged, formatUsd(2 * each));
    assert.deepEqual(
      json.unchargedApps,
      [first.appId, second.appId].sort().map((appId) => ({ appId, uncharged: formatUsd(each) })),
    );
    const byApp = new Map(json.wallets.map((w: { appId: string }) => [w.appId, w]));
    // deno-lint-ignore no-explicit-any
    assert.equal((byApp.get(untouched.appId) as any).uncharged, "0.000000");
    // The invariant holds without it: available + reserved + spent = credits.
    // deno-lint-ignore no-explicit-any
    const w = byApp.get(first.appId) as any;
    assert.deepEqual([w.available, w.spent, w.credited], ["0.000000", "5.000000", "5.000000"]);
  }));

Deno.test("admin audit fails when an app's uncharged counter disagrees with its usage records", () =>
  withUpstream(async ({ s }) => {
    const { appId, apiKey } = await nearlyEmptyApp(s);
    (await s.chat(apiKey, REQUEST)).body?.cancel();
    assert.equal((await admin(s, "audit")).exitCode, 0);
    await s.kv.atomic().sum(keys.appUncharged(appId), 1n).commit();
    const { json, exitCode } = await admin(s, "audit");
    assert.equal(exitCode, 1);
    assert.deepEqual(json.wallets[0].problems, [
      `sum of usage uncharged vs the app's uncharged counter: ${
        formatUsd(PROVIDER_COST - NEARLY_EMPTY)
      } != ${formatUsd(PROVIDER_COST - NEARLY_EMPTY + 1)}`,
    ]);
    // Put back, so that the suite's closing audit checks the rest.
    await s.kv.set(keys.appUncharged(appId), new Deno.KvU64(BigInt(PROVIDER_COST - NEARLY_EMPTY)));
  }));

Deno.test("/metrics exposes the service's uncharged total as a counter read from KV", () =>
  withUpstream(async ({ s }) => {
    const before = await metrics(s);
    assert.equal(before.types.get("tollbooth_uncharged_micro_usd_total"), "counter");
    assert.equal(before.value("tollbooth_uncharged_micro_usd_total"), 0);
    for (let i = 0; i < 2; i++) {
      const { apiKey } = await nearlyEmptyApp(s);
      (await s.chat(apiKey, REQUEST)).body?.cancel();
    }
    assert.equal(
      (await metrics(s)).value("tollbooth_uncharged_micro_usd_total"),
      2 * (PROVIDER_COST - NEARLY_EMPTY),
    );
  }));

Deno.test("the uncharged total on /metrics is the same on every instance", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tollbooth-uncharged-" });
  const kvPath = `${dir}/kv.sqlite3`;
  try {
    await withUpstream(async ({ s: a }) => {
      const other = await startService({ kvPath, env: { METRICS_TOKEN } });
      try {
        const { apiKey } = await nearlyEmptyApp(a);
        (await a.chat(apiKey, REQUEST)).body?.cancel();
        for (const s of [a, other]) {
          assert.equal(
            (await metrics(s)).value("tollbooth_uncharged_micro_usd_total"),
            PROVIDER_COST - NEARLY_EMPTY,
          );
        }
      } finally {
        await other.close();
      }
    }, { kvPath });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("concurrent requests billed beyond what a wallet holds: the uncharged parts add up everywhere", () =>
  withUpstream(async ({ s }) => {
    const { appId, apiKey } = await s.newApp();
    // Room for a few dozen small reservations, and a remainder for whichever settle comes first.
    await spendDownTo(s.kv, appId, 3_050);
    const statuses = await Promise.all(
      Array.from({ length: 30 }, async () => {
        const res = await s.chat(apiKey, REQUEST);
        await res.body?.cancel();
        return res.status;
      }),
    );
    const ran = statuses.filter((status) => status === 200).length;
    assert.ok(ran >= 2, `at least two reservations fit (${ran})`);
    assert.ok(statuses.every((status) => status === 200 || status === 402), String(statuses));

    const records = (await usageRecords(s.kv, appId)).filter((u) => u.model === MODEL);
    assert.equal(records.length, ran);
    for (const u of records) assert.equal(u.cost + u.uncharged, PROVIDER_COST);
    const charged = records.reduce((n, u) => n + u.cost, 0);
    assert.equal(charged, 3_050, "the whole balance was taken, and no more");
    const uncharged = ran * PROVIDER_COST - charged;
    assert.equal(records.reduce((n, u) => n + u.uncharged, 0), uncharged);
    const logged = requestLines(s).filter((l) => l.status === 200);
    assert.equal(logged.reduce((n, l) => n + (l.uncharged as number), 0), uncharged);
    assert.equal((await admin(s, "show-app", "--app", appId)).json.uncharged, formatUsd(uncharged));
    assert.equal((await admin(s, "audit")).json.totals.uncharged, formatUsd(uncharged));
    assert.equal((await metrics(s)).value("tollbooth_uncharged_micro_usd_total"), uncharged);
    assert.equal((await s.wallet(appId)).available, 0);
  }));

Deno.test("the dashboard shows an app's uncharged usage on its wallet page and as a usage column", () =>
  withUpstream(async ({ s }) => {
    const owner = await new OwnerSession(s).signUp("owner@example.com");
    const covered = await owner.createApp("covered");
    const app = await owner.createApp("overrun");
    await spendDownTo(s.kv, app.appId, NEARLY_EMPTY);

    // Nothing uncharged yet: nothing said about it.
    const quietWallet = await owner.page(`/dashboard/apps/${app.appId}/wallet`);
    assert.doesNotMatch(quietWallet, /Not charged/);
    const quietUsage = await owner.page(`/dashboard/apps/${app.appId}/usage`);
    assert.doesNotMatch(quietUsage, /Not charged/);

    (await s.chat(app.apiKey, REQUEST)).body?.cancel();
    const uncharged = `$${formatUsd(PROVIDER_COST - NEARLY_EMPTY)}`;
    const wallet = await owner.page(`/dashboard/apps/${app.appId}/wallet`);
    const said = /data-testid="uncharged">([\s\S]*?)<\/p>/.exec(wallet)?.[1] ?? "";
    assert.match(said, /Not charged/);
    assert.ok(said.includes(uncharged), said);
    assert.ok(wallet.includes(`(${uncharged} not charged)`), "the request's row says it too");

    const usage = await owner.page(`/dashboard/apps/${app.appId}/usage`);
    const headers = [...usage.matchAll(/<th scope="col"[^>]*>([^<]*)<\/th>/g)].map((m) => m[1]);
    const column = headers.indexOf("Not charged");
    assert.ok(column > headers.indexOf("Cost"), headers.join(", "));
    const rows = [...usage.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].slice(1).map((row) =>
      [...row[1].matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((cell) => cell[1])
    );
    const overrun = rows.find((cells) => cells.some((c) => c.includes(MODEL)))!;
    assert.equal(overrun[column], uncharged);
    const spendDown = rows.find((cells) => !cells.some((c) => c.includes(MODEL)))!;
    assert.equal(spendDown[column], "$0.000000");

    // An app whose every request was covered keeps its pages as they were.
    (await s.chat(covered.apiKey, { ...REQUEST, model: "tollbooth/echo" })).body?.cancel();
    assert.doesNotMatch(await owner.page(`/dashboard/apps/${covered.appId}/usage`), /Not charged/);
    assert.doesNotMatch(await owner.page(`/dashboard/apps/${covered.appId}/wallet`), /Not charged/);
  }));
