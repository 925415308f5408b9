/**
 * Kill-and-restart with requests in flight: a real `deno run main.ts` child process on a KV file, a
 * real SIGKILL, then a restart; the reservations of the killed requests are released by the sweeper.
 */
import assert from "node:assert/strict";
import { createApp } from "@/lib/tenants/mod.ts";
import { auditWallets } from "@/lib/billing/mod.ts";
import { keys, type UsageRecord, type WalletRecord } from "@/lib/db.ts";
import { parseUsd } from "@/lib/core/mod.ts";
import { startFakeOpenAi } from "./fake_openai.ts";
import { startAnthropicUpstream } from "./fakes/anthropic_upstream.ts";
import { assertAuditClean } from "./helpers.ts";

const TTL_SECONDS = 2;
/** main.ts sweeps every max(1 s, TTL/4). */
const SWEEP_EVERY_MS = 1_000;
const ROOT = new URL("..", import.meta.url).pathname;

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

interface Child {
  process: Deno.ChildProcess;
  url: string;
  /** When the server printed its listening line. */
  listeningAt: number;
  lines: string[];
}

async function startChild(env: Record<string, string>): Promise<Child> {
  const port = freePort();
  const process = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "main.ts"],
    cwd: ROOT,
    env: { ...env, PORT: String(port), PUBLIC_URL: `http://127.0.0.1:${port}` },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines: string[] = [];
  const reader = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  const deadline = Date.now() + 30_000;
  for (;;) {
    assert.ok(Date.now() < deadline, "child did not start listening");
    const { value, done } = await reader.read();
    assert.ok(!done, `child exited before listening: ${lines.join("\n")}`);
    buffer += value;
    const parts = buffer.split("\n");
    buffer = parts.pop()!;
    lines.push(...parts);
    if (parts.some((l) => l.includes('"listening"'))) break;
  }
  const listeningAt = Date.now();
  // Keep draining stdout so the child never blocks on a full pipe.
  (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        lines.push(...value.split("\n").filter(Boolean));
      }
    } catch { /* the child was killed */ }
  })();
  return { process, url: `http://127.0.0.1:${port}`, listeningAt, lines };
}

/**
 * A directory with a KV file and the catalog given, and the environment a child serves them with:
 * one worker, as tests/instances.ts starts them (the timings below do not grow with the cores).
 */
async function childSetup(catalog: unknown, env: Record<string, string>) {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/tollbooth.sqlite3`;
  const modelsFile = `${dir}/models.json`;
  await Deno.writeTextFile(modelsFile, JSON.stringify(catalog));
  return {
    dir,
    kvPath,
    env: {
      KV_PATH: kvPath,
      MODELS_FILE: modelsFile,
      RESERVATION_TTL_SECONDS: String(TTL_SECONDS),
      NO_COLOR: "1",
      SERVE_WORKERS: "1",
      ...env,
    },
  };
}

/** Kills what is left of the children a test started. */
async function killAll(children: Child[]) {
  for (const c of children) {
    try {
      c.process.kill("SIGKILL");
    } catch { /* already gone */ }
    await c.process.status;
  }
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

Deno.test("SIGKILL with streaming and non-streaming requests in flight: after restart the sweeper releases every reservation within the TTL, audit clean", async () => {
  const upstream = startFakeOpenAi();
  const { dir, kvPath, env } = await childSetup(
    {
      providers: {
        slow: { kind: "simulator", token_delay_ms: 100 },
        fast: { kind: "simulator" },
        fake: { kind: "openai", base_url: upstream.url, api_key_env: "FAKE_OPENAI_KEY" },
      },
      models: [
        {
          id: "slow/lorem",
          provider: "slow",
          upstream_model: "lorem",
          input_usd_per_mtok: "0.50",
          output_usd_per_mtok: "1.50",
          context_tokens: 32768,
          max_output_tokens: 8192,
        },
        {
          id: "fast/echo",
          provider: "fast",
          upstream_model: "echo",
          input_usd_per_mtok: "0.50",
          output_usd_per_mtok: "1.50",
          context_tokens: 32768,
          max_output_tokens: 8192,
        },
        {
          id: "fake/gpt",
          provider: "fake",
          upstream_model: "gpt-test",
          input_usd_per_mtok: "2.00",
          output_usd_per_mtok: "8.00",
          context_tokens: 32768,
          max_output_tokens: 8192,
        },
      ],
    },
    { FAKE_OPENAI_KEY: "sk-fake-upstream" },
  );
  const kv = await Deno.openKv(kvPath);
  const children: Child[] = [];
  try {
    const a = await createApp(kv, { name: "crash a" });
    const b = await createApp(kv, { name: "crash b" });
    const child = await startChild(env);
    children.push(child);

    const clients = new AbortController();
    const send = (apiKey: string, body: unknown) =>
      fetch(`${child.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
        signal: clients.signal,
      });
    const streams = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        send(i % 2 ? a.key.apiKey : b.key.apiKey, {
          model: "slow/lorem",
          messages: [{ role: "user", content: "write" }],
          stream: true,
          max_tokens: 200,
        })),
    );
    for (const res of streams) {
      assert.equal(res.status, 200);
      const first = await res.body!.getReader().read();
      assert.ok(first.value && first.value.length > 0, "a streamed chunk arrived before the kill");
    }
    const pending = Array.from({ length: 4 }, (_, i) =>
      send(i % 2 ? a.key.apiKey : b.key.apiKey, {
        model: "fake/gpt",
        messages: [{ role: "user", content: "slow:30000 never answered" }],
        max_tokens: 100,
      }).catch((error) => error));
    const reservedNow = async () => {
      let total = 0;
      for (const appId of [a.app.id, b.app.id]) {
        total += (await kv.get<WalletRecord>(keys.wallet(appId))).value!.reserved;
      }
      return total;
    };
    let reservations = 0;
    await waitFor("ten reservations", async () => {
      let n = 0;
      for await (const _ of kv.list({ prefix: keys.allReservations() })) n++;
      reservations = n;
      return n === 10;
    }, 10_000);
    // The reservations are taken before the upstream call: wait for the calls to be in flight too.
    await waitFor(
      "the non-streamed requests at the upstream",
      () => Promise.resolve(upstream.received.length === 4),
      10_000,
    );

    // A burst of quick requests, reserving and settling, so the kill lands among wallet commits.
    let answered = 0;
    const tenAnswered = Promise.withResolvers<void>();
    const burst = Array.from({ length: 40 }, (_, i) =>
      send(i % 2 ? a.key.apiKey : b.key.apiKey, {
        model: "fast/echo",
        messages: [{ role: "user", content: "quick answer please" }],
        max_tokens: 20,
      }).then((r) => r.text()).then(() => {
        if (++answered === 10) tenAnswered.resolve();
      }).catch((error) => error));
    // Kill once a quarter of them are answered: the others are mid-flight.
    await tenAnswered.promise;
    child.process.kill("SIGKILL");
    const status = await child.process.status;
    assert.equal(status.signal, "SIGKILL");
    clients.abort();
    for (const r of await Promise.all(pending)) assert.ok(r instanceof Error, "no answer came");
    await Promise.all(burst);
    const leftBehind = await reservedNow();
    assert.ok(leftBehind > 0, "the killed process left reservations");
    assert.equal(reservations, 10);
    // Whatever the kill interrupted, each wallet commit is whole: the audit adds up already.
    const before = await auditWallets(kv);
    assert.equal(before.ok, true);

    const restarted = await startChild(env);
    children.push(restarted);
    await waitFor("every reservation released", async () => (await reservedNow()) === 0, 15_000);
    const releasedAfterMs = Date.now() - restarted.listeningAt;
    console.log(`reservations released ${releasedAfterMs} ms after the restarted process listened`);
    assert.ok(
      releasedAfterMs <= TTL_SECONDS * 1000 + SWEEP_EVERY_MS + 1_000,
      `released ${releasedAfterMs} ms after the restart`,
    );
    let burstSpent = 0;
    for (const app of [a, b]) {
      const w = (await kv.get<WalletRecord>(keys.wallet(app.app.id))).value!;
      // The killed requests are not charged; only the burst's settled ones are.
      assert.equal(w.reserved, 0);
      assert.equal(w.available + w.spent, 5_000_000);
      burstSpent += w.spent;
    }
    let settledUsage = 0;
    let settledCount = 0;
    for (const app of [a, b]) {
      for await (const e of kv.list<UsageRecord>({ prefix: keys.appUsage(app.app.id) })) {
        assert.equal(e.value.model, "fast/echo", "only burst requests were settled");
        assert.equal(e.value.outcome, "completed");
        settledUsage += e.value.cost;
        settledCount++;
      }
    }
    assert.equal(settledUsage, burstSpent);
    assert.ok(settledCount >= 10, "the answered ones were charged");
    console.log(`${settledCount} of the 40 burst requests settled before the kill`);
    // Log lines are written in batches (at most 20 ms after they are logged): wait for it.
    await waitFor(
      "the sweep's log line",
      () => Promise.resolve(restarted.lines.some((l) => l.includes('"reservations_swept"'))),
      10_000,
    );

    // The restarted service serves and bills normally.
    const ok = await fetch(`${restarted.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${a.key.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "slow/lorem",
        messages: [{ role: "user", content: "x" }],
        max_tokens: 3,
      }),
    });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
    await assertAuditClean(kv);

    const audit = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "scripts/admin.ts", "audit"],
      cwd: ROOT,
      env: { KV_PATH: kvPath, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(audit.code, 0, new TextDecoder().decode(audit.stderr));
    const report = JSON.parse(new TextDecoder().decode(audit.stdout));
    assert.equal(report.ok, true);
    assert.equal(report.apps, 2);
  } finally {
    await killAll(children);
    kv.close();
    await upstream.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SIGKILL after a budget Claude's signed thinking is kept and before its answer settles: the reservation is released uncharged, and the restarted process gives the thinking back to the turn that answers the calls", async () => {
  const claude = startAnthropicUpstream();
  const { dir, kvPath, env } = await childSetup(
    {
      providers: {
        ant: { kind: "anthropic", base_url: claude.url, api_key_env: "ANT_KEY" },
      },
      models: [{
        id: "ant/claude-sonnet",
        provider: "ant",
        upstream_model: "claude-sonnet-4-5",
        input_usd_per_mtok: "3.00",
        output_usd_per_mtok: "15.00",
        context_tokens: 200_000,
        max_output_tokens: 32_000,
      }],
    },
    { ANT_KEY: claude.apiKey },
  );
  const kv = await Deno.openKv(kvPath);
  const children: Child[] = [];
  try {
    const { app, key } = await createApp(kv, { name: "crash thinking" });
    // Each event a while after the one before: the kill lands after the chunk that ends the tool
    // calls (sent once the thinking is kept) and before message_stop, which settles.
    claude.script(
      {
        content: [
          { type: "thinking", thinking: "Paris first." },
          { type: "tool_use", id: "toolu_crash", name: "weather", input: { city: "Paris" } },
        ],
        chunkDelayMs: 400,
      },
      { text: "Sunny in Paris." },
    );
    const tools = [{
      type: "function",
      function: {
        name: "weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    }];
    const ask = (url: string, body: Record<string, unknown>) =>
      fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "ant/claude-sonnet",
          reasoning_effort: "low",
          max_tokens: 4000,
          tools,
          ...body,
        }),
      });
    const question = { role: "user", content: "Weather in Paris?" };

    const child = await startChild(env);
    children.push(child);
    const first = await ask(child.url, { messages: [question], stream: true });
    assert.equal(first.status, 200);
    const reader = first.body!.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    while (!seen.includes('"finish_reason":"tool_calls"')) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended before its tool calls did: ${seen}`);
      seen += value;
    }
    assert.ok(!seen.includes("[DONE]"), "the answer had not ended");
    child.process.kill("SIGKILL");
    assert.equal((await child.process.status).signal, "SIGKILL");
    await reader.cancel().catch(() => {});

    const kept = await kv.get(keys.signedThinkingChunk(app.id, "toolu_crash", 0));
    assert.ok(kept.value, "the thinking was kept before the chunk that ended the calls");
    const wallet = async () => (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
    assert.ok((await wallet()).reserved > 0, "the killed request left its reservation");

    const restarted = await startChild(env);
    children.push(restarted);
    await waitFor("the reservation released", async () => (await wallet()).reserved === 0, 15_000);
    const released = await wallet();
    assert.equal(released.spent, 0, "the killed answer was not charged");
    assert.equal(released.available, 5_000_000);

    const second = await ask(restarted.url, {
      messages: [
        question,
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "toolu_crash",
            type: "function",
            function: { name: "weather", arguments: '{"city":"Paris"}' },
          }],
        },
        { role: "tool", tool_call_id: "toolu_crash", content: "sunny" },
      ],
    });
    assert.equal(second.status, 200);
    const answer = await second.json();
    assert.equal(answer.choices[0].message.content, "Sunny in Paris.");
    const sent = claude.messages().at(-1)!;
    assert.equal(sent.body.thinking?.type, "enabled", "the turn thought");
    const assistant = (sent.body.messages as { role: string; content: { type: string }[] }[])
      .find((m) => m.role === "assistant")!;
    assert.deepEqual(assistant.content.map((b) => b.type), ["thinking", "tool_use"]);
    const cost = parseUsd(second.headers.get("tollbooth-request-cost")!);
    const after = await wallet();
    let charged = 0;
    for await (const e of kv.list<UsageRecord>({ prefix: keys.appUsage(app.id) })) {
      charged += e.value.cost;
    }
    assert.equal(after.spent, charged, "the ledger holds the one answered turn");
    assert.equal(after.spent, cost, "the cost header is the wallet's debit");
    assert.ok(charged > 0);
    await assertAuditClean(kv);
  } finally {
    await killAll(children);
    kv.close();
    await claude.close();
    await Deno.remove(dir, { recursive: true });
  }
});
