/**
 * `deno task soak`: a bounded load-and-faults run on loopback only. Concurrent clients send paid
 * requests (streamed or not) to a served Tollbooth; some disconnect at random moments, some send
 * malformed bodies, some exhaust their wallets; the fake upstream fails a share of calls and cuts
 * a share of streams; an operator tops wallets up meanwhile, and the sweeper runs as in main.ts.
 * It ends by waiting for every reservation to settle, runs the audit, prints a summary, and exits non-zero
 * when any micro-dollar is unaccounted for or any request got a 500 (seen by a client or logged).
 *
 * SOAK_SECONDS (default 45), SOAK_CLIENTS (default 24). `deno task soak` then runs soak_paths.ts.
 */
import { auditWallets, creditedOf, sweepExpiredReservations } from "@/lib/billing/mod.ts";
import { keys, type WalletRecord } from "@/lib/db.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { startFakeOpenAi } from "@/tests/fake_openai.ts";
import { serveLoopback, startService } from "@/tests/helpers.ts";

const SECONDS = Number(Deno.env.get("SOAK_SECONDS") ?? 45);
const CLIENTS = Number(Deno.env.get("SOAK_CLIENTS") ?? 24);
const APPS = 8;

const dir = await Deno.makeTempDir({ prefix: "tollbooth-soak-" });
const upstream = startFakeOpenAi({ chaos: { failShare: 0.15, cutShare: 0.15 }, keepBodies: false });
const logEvents: Record<string, number> = {};
const unhandled: Record<string, number> = {};
// Two instances on one KV file, as two processes behind a load balancer: their wallet batches
// conflict on the same wallets and must retry.
const instances = await Promise.all([0, 1].map(() =>
  startService({
    openaiBaseUrl: upstream.url,
    kvPath: `${dir}/soak.sqlite3`,
    env: { RESERVATION_TTL_SECONDS: "3" },
    log: (fields) => {
      const event = String(fields.event ?? fields.errorCode ?? "request");
      logEvents[event] = (logEvents[event] ?? 0) + 1;
      if (fields.event === "unhandled_error") {
        const message = String(fields.error).slice(0, 120);
        unhandled[message] = (unhandled[message] ?? 0) + 1;
      }
    },
  })
));
const service = instances[0];
const servers = instances.map((s) => serveLoopback(s.handle));

const apps = await Promise.all(
  Array.from({ length: APPS }, (_, i) => service.newApp(`soak ${i}`)),
);
// Three apps start nearly empty, so 402s happen until the operator tops them up.
for (const app of apps.slice(0, 3)) {
  const spend = 5_000_000 - 20_000;
  const reserved = await service.wallets.reserve(app.appId, {
    amount: spend,
    keyId: app.keyId,
    requestId: "req_soak_drain",
    model: "fake/gpt",
  });
  if (!reserved.ok) throw new Error("could not drain a soak app");
  await service.wallets.settle(app.appId, reserved.reservation.id, {
    requestId: "req_soak_drain",
    keyId: app.keyId,
    model: "fake/gpt",
    provider: "fake",
    promptTokens: 0,
    completionTokens: 0,
    cost: spend,
    streamed: false,
    outcome: "completed",
    countedLocally: false,
  });
}

const results: Record<string, number> = {};
const tally = (kind: string) => (results[kind] = (results[kind] ?? 0) + 1);
let requests = 0;
let toppedUp = 0;
const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)];

const BAD_BODIES = [
  "{",
  "[]",
  '{"model":"tollbooth/echo"}',
  '{"model":"nope/x","messages":[{"role":"user","content":"x"}]}',
  '{"model":"tollbooth/echo","messages":[{"role":"robot","content":"x"}]}',
  '{"model":"tollbooth/echo","messages":[{"role":"user","content":"x"}],"max_tokens":-1}',
];

async function oneRequest() {
  const app = pick(apps);
  const stream = Math.random() < 0.5;
  const bad = Math.random() < 0.05;
  const disconnect = Math.random() < 0.2;
  const model = Math.random() < 0.7 ? "fake/gpt" : "tollbooth/lorem";
  const words = Array.from({ length: 5 + Math.floor(Math.random() * 40) }, (_, i) => `w${i}`);
  const body = bad ? pick(BAD_BODIES) : JSON.stringify({
    model,
    messages: [{
      role: "user",
      content: `slow:${Math.floor(Math.random() * 8)} ${words.join(" ")}`,
    }],
    stream,
    // Large caps drain wallets fast, so 402s happen and the top-ups matter.
    max_tokens: pick([50, 500, 4000, 8000]),
  });
  const controller = new AbortController();
  const timer = disconnect ? setTimeout(() => controller.abort(), Math.random() * 300) : undefined;
  requests++;
  try {
    const res = await fetch(`${pick(servers).url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${app.apiKey}`, "content-type": "application/json" },
      body,
      signal: controller.signal,
    });
    const text = await res.text();
    if (res.status !== 200) {
      const code = JSON.parse(text).error?.code ?? "unknown";
      tally(`${res.status} ${code}`);
      return;
    }
    if (stream) {
      if (text.includes('"error"')) tally("200 stream cut by upstream (error event)");
      else if (text.trimEnd().endsWith("data: [DONE]")) tally("200 stream completed");
      else tally("200 stream without end");
    } else {
      tally("200 completed");
    }
  } catch {
    tally(disconnect ? "client disconnected" : "network error");
  } finally {
    clearTimeout(timer);
  }
}

const deadline = Date.now() + SECONDS * 1000;
const sweeper = setInterval(() => {
  const s = pick(instances);
  sweepExpiredReservations(s.kv, s.wallets).catch(() => tally("sweep failed"));
}, 750);
const operator = setInterval(() => {
  // An operator top-up now and then, racing the requests on the same wallet.
  const app = pick(apps);
  pick(instances).wallets.credit(app.appId, {
    amount: pick([5, 10, 25, 50]) * 1_000_000,
    kind: "top_up",
    reason: "soak top-up",
    marker: `soak:${crypto.randomUUID()}`,
  }).then(() => toppedUp++);
}, 1_000);

const started = performance.now();
await Promise.all(Array.from({ length: CLIENTS }, async () => {
  while (Date.now() < deadline) await oneRequest();
}));
clearInterval(operator);
const elapsed = (performance.now() - started) / 1000;

// Every reservation must end settled or released without the sweeper's help.
let reserved = Infinity;
const settleDeadline = Date.now() + 10_000;
while (reserved > 0 && Date.now() < settleDeadline) {
  await Promise.all(instances.map((s) => s.wallets.drain()));
  reserved = 0;
  for (const app of apps) {
    reserved += (await service.kv.get<WalletRecord>(keys.wallet(app.appId))).value!.reserved;
  }
  if (reserved > 0) await new Promise((r) => setTimeout(r, 100));
}
clearInterval(sweeper);
await Promise.all(instances.map((s) => s.wallets.drain()));

const audit = await auditWallets(service.kv);
let difference = 0;
for (const app of apps) {
  const w = (await service.kv.get<WalletRecord>(keys.wallet(app.appId))).value!;
  difference += w.available + w.reserved + w.spent - (creditedOf(w) - (w.refunded ?? 0));
}
const summary = {
  seconds: Math.round(elapsed),
  clients: CLIENTS,
  apps: APPS,
  requests,
  requests_per_second: Math.round(requests / elapsed),
  results,
  upstream: upstream.counts,
  top_ups: toppedUp,
  reserved_left: formatUsd(reserved),
  audit: { ok: audit.ok, problems: audit.problems, totals: audit.totals },
  money_difference_micro_usd: difference,
  wallet_stats: instances.map((s) => s.wallets.stats),
  log_events: logEvents,
  unhandled_errors: unhandled,
};
console.log(JSON.stringify(summary, null, 2));

for (const server of servers) await server.close();
for (const s of instances) await s.close();
await upstream.close();
await Deno.remove(dir, { recursive: true });
const served500 = Object.keys(results).some((k) => k.startsWith("500")) ||
  Object.keys(unhandled).length > 0;
Deno.exit(audit.ok && difference === 0 && reserved === 0 && !served500 ? 0 : 1);
