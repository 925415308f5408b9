/**
 * Graceful shutdown of a real process on a real signal: it stops accepting connections, lets the
 * streams in flight finish and settle within SHUTDOWN_GRACE_MS, and exits 0; a stream still running
 * at the deadline is cut and its reservation is left, with its lease, to the sweeper.
 */
import assert from "node:assert/strict";
import { createApp as createAppRecord } from "@/lib/tenants/mod.ts";
import { auditWallets, sweepExpiredReservations, Wallets } from "@/lib/billing/mod.ts";
import { keys, type ReservationRecord, type WalletRecord } from "@/lib/db.ts";
import { chat, instanceFiles, startInstance } from "./instances.ts";

async function withFiles(fn: (files: Awaited<ReturnType<typeof instanceFiles>>) => Promise<void>) {
  // 20 ms a token: a stream of 60 tokens takes over a second.
  const files = await instanceFiles({ tokenDelayMs: 20 });
  try {
    await fn(files);
  } finally {
    await files.remove();
  }
}

async function refusesConnections(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return false;
  } catch (error) {
    return error instanceof Deno.errors.ConnectionRefused;
  }
}

const streamBody = (maxTokens: number) => ({
  model: "tollbooth/lorem",
  messages: [{ role: "user", content: "go" }],
  max_tokens: maxTokens,
  stream: true,
});

Deno.test("SIGTERM: the stream in flight completes and is settled, new connections are refused, exit 0", () =>
  withFiles(async (files) => {
    const instance = await startInstance({
      KV_PATH: files.kvPath,
      MODELS_FILE: files.modelsFile,
      SHUTDOWN_GRACE_MS: "10000",
    });
    const kv = await Deno.openKv(files.kvPath);
    try {
      const { app, key } = await createAppRecord(kv, { name: "shutdown" });
      const res = await chat(instance, key.apiKey, streamBody(60));
      assert.equal(res.status, 200);
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = (await reader.read()).value ?? "";

      instance.signal("SIGTERM");
      let refused = false;
      for (let i = 0; i < 50 && !refused; i++) {
        await new Promise((r) => setTimeout(r, 20));
        refused = await refusesConnections(instance.port);
      }
      assert.ok(refused, "new connections are refused once shutdown begins");

      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      assert.ok(text.trimEnd().endsWith("data: [DONE]"), "the stream ran to its end");
      const status = await instance.status;
      assert.equal(status.code, 0);

      const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
      assert.equal(wallet.reserved, 0, "the stream was settled before the exit");
      assert.ok(wallet.spent > 0);
      assert.ok(instance.lines.some((l) => l.event === "shut_down" && l.inFlightFinished === true));
      const streamLine = instance.lines.findIndex((l) =>
        l.event === "request" && l.path === "/v1/chat/completions"
      );
      assert.ok(streamLine >= 0, "the stream's request line was written");
      assert.ok(
        streamLine < instance.lines.findIndex((l) => l.event === "shut_down"),
        "before the last words",
      );
      assert.ok((await auditWallets(kv)).ok);
    } finally {
      kv.close();
      await instance.stop();
    }
  }));

Deno.test("SIGTERM: a stream still running at the deadline is cut, its reservation left to the sweeper", () =>
  withFiles(async (files) => {
    const instance = await startInstance({
      KV_PATH: files.kvPath,
      MODELS_FILE: files.modelsFile,
      SHUTDOWN_GRACE_MS: "300",
    });
    const kv = await Deno.openKv(files.kvPath);
    try {
      const { app, key } = await createAppRecord(kv, { name: "cut" });
      // 400 tokens at 20 ms: eight seconds, far beyond the grace.
      const res = await chat(instance, key.apiKey, streamBody(400));
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      await reader.read();
      const signalled = performance.now();
      instance.signal("SIGTERM");
      const status = await instance.status;
      const tookMs = performance.now() - signalled;
      assert.equal(status.code, 0);
      assert.ok(
        tookMs < 5_000,
        `exit at the deadline, not at the end of the stream (${tookMs} ms)`,
      );
      await reader.read().then(() => reader.cancel()).catch(() => {});
      assert.ok(
        instance.lines.some((l) => l.event === "shut_down" && l.inFlightFinished === false),
      );

      const wallet = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
      assert.ok(wallet.reserved > 0, "the cut request's reservation is still there");
      const reservations = await Array.fromAsync(
        kv.list<ReservationRecord>({ prefix: keys.appReservations(app.id) }),
      );
      assert.equal(reservations.length, 1);
      assert.ok((await auditWallets(kv)).ok, "a live reservation keeps the books balanced");

      // Once its lease runs out, any instance's sweeper gives the whole reservation back.
      const wallets = new Wallets(kv, { leaseMs: 600_000 });
      const released = await sweepExpiredReservations(
        kv,
        wallets,
        reservations[0].value.leaseUntil + 1,
      );
      assert.equal(released, 1);
      const after = (await kv.get<WalletRecord>(keys.wallet(app.id))).value!;
      assert.equal(after.reserved, 0);
      assert.equal(after.available, 5_000_000, "a request cut by shutdown is not charged");
      assert.ok((await auditWallets(kv)).ok);
    } finally {
      kv.close();
      await instance.stop();
    }
  }));
