import assert from "node:assert/strict";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { usageCost } from "@/lib/catalog/mod.ts";
import { Wallets } from "@/lib/billing/mod.ts";
import {
  assertAuditClean,
  serveLoopback,
  spendDownTo,
  startService,
  userMessage,
} from "./helpers.ts";

Deno.test("200 concurrent requests that would overdraw one wallet: never below zero, every 200 charged exactly", async () => {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    // Leave 0.3 USD: each request reserves ~12,300 µUSD (max_tokens 8000 at 1.50/M), 200 of them ~2.5 USD.
    await spendDownTo(s.kv, appId, 300_000);
    const start = await s.wallet(appId);

    let sampling = true;
    const samples: number[] = [];
    const sampler = (async () => {
      while (sampling) {
        const w = await s.wallet(appId);
        samples.push(w.available, w.reserved);
        await new Promise((r) => setTimeout(r, 1));
      }
    })();

    const model = s.catalog.get("tollbooth/lorem")!;
    const responses = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: model.id,
          messages: userMessage(`request ${i}`),
          max_tokens: 8000,
        }),
      });
      return { status: res.status, headers: res.headers, body: await res.json() };
    }));
    sampling = false;
    await sampler;

    const ok = responses.filter((r) => r.status === 200);
    const refused = responses.filter((r) => r.status === 402);
    assert.equal(ok.length + refused.length, 200, "only 200s and 402s");
    assert.ok(ok.length > 0, "some requests fit");
    assert.ok(refused.length > 0, "the wallet could not cover them all at once");
    for (const r of refused) assert.equal(r.body.error.code, "insufficient_credits");

    let charged = 0;
    for (const r of ok) {
      const cost = parseUsd(r.headers.get("tollbooth-request-cost")!);
      const expected = usageCost(model, {
        promptTokens: r.body.usage.prompt_tokens,
        completionTokens: r.body.usage.completion_tokens,
      });
      assert.equal(cost, expected, "each 200 is charged exactly its usage");
      assert.ok(parseUsd(r.headers.get("tollbooth-balance")!) >= 0);
      charged += cost;
    }
    assert.ok(samples.every((v) => v >= 0), "no balance or reservation was ever negative");
    const end = await s.wallet(appId);
    assert.equal(end.reserved, 0);
    assert.equal(end.spent - start.spent, charged);
    assert.equal(formatUsd(end.available), formatUsd(start.available - charged));
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
  }
});

Deno.test("concurrent reserves on one wallet never reserve more than it has", async () => {
  const s = await startService();
  try {
    const { appId } = await s.newApp();
    const wallets = new Wallets(s.kv, { leaseMs: 60_000 });
    const reservations = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        wallets.reserve(appId, {
          amount: 12_345,
          keyId: "k",
          requestId: `r${i}`,
          model: "tollbooth/echo",
        })),
    );
    const granted = reservations.filter((h) => h.ok).length;
    assert.equal(granted, Math.floor(5_000_000 / 12_345));
    const w = await s.wallet(appId);
    assert.equal(w.reserved, granted * 12_345);
    assert.equal(w.available, 5_000_000 - granted * 12_345);
    await Promise.all(
      reservations.flatMap((h) => h.ok ? [wallets.release(appId, h.reservation.id)] : []),
    );
    assert.equal((await s.wallet(appId)).available, 5_000_000);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});
