import assert from "node:assert/strict";
import OpenAI from "openai";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { assertAuditClean, serveLoopback, spendDownTo, startService } from "./helpers.ts";

async function withSdk(
  fn: (
    ctx: { client: OpenAI; appId: string; s: Awaited<ReturnType<typeof startService>> },
  ) => Promise<void>,
) {
  const s = await startService();
  const server = serveLoopback(s.handle);
  try {
    const { appId, apiKey } = await s.newApp();
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey, maxRetries: 0 });
    await fn({ client, appId, s });
    await assertAuditClean(s.kv);
  } finally {
    await server.close();
    await s.close();
  }
}

Deno.test("the openai npm client gets a completion, and the wallet moves by exactly the reported cost", () =>
  withSdk(async ({ client, appId, s }) => {
    const { data, response } = await client.chat.completions
      .create({
        model: "tollbooth/echo",
        messages: [{ role: "user", content: "Hello from the SDK" }],
      })
      .withResponse();
    assert.equal(data.choices[0].message.content, "Hello from the SDK");
    assert.equal(data.object, "chat.completion");
    const cost = parseUsd(response.headers.get("tollbooth-request-cost")!);
    assert.ok(cost > 0);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000 - cost);
    assert.equal(response.headers.get("tollbooth-balance"), formatUsd(wallet.available));
  }));

Deno.test("the openai npm client streams a completion with a final usage chunk carrying the cost", () =>
  withSdk(async ({ client, appId, s }) => {
    const stream = await client.chat.completions.create({
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "stream these words please" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: Record<string, unknown> | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage as unknown as Record<string, unknown>;
    }
    assert.equal(text, "stream these words please");
    assert.ok(usage);
    const wallet = await s.wallet(appId);
    assert.equal(usage.cost, formatUsd(wallet.spent));
    assert.equal(wallet.reserved, 0);
  }));

Deno.test("the openai npm client surfaces our errors with status, code and param", () =>
  withSdk(async ({ client, appId, s }) => {
    await assert.rejects(
      client.chat.completions.create({
        model: "openai/gpt-9",
        messages: [{ role: "user", content: "x" }],
      }),
      (e: unknown) =>
        e instanceof OpenAI.BadRequestError && e.code === "model_not_found" && e.param === "model",
    );
    await spendDownTo(s.kv, appId, 5);
    await assert.rejects(
      client.chat.completions.create({
        model: "tollbooth/echo",
        messages: [{ role: "user", content: "x" }],
        stream: true,
      }),
      (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, 402);
        assert.equal(e.code, "insufficient_credits");
        const body = e.error as Record<string, string>;
        assert.equal(body.balance, "0.000005");
        assert.match(body.top_up_url, /\/top-up\/[0-9a-z]+$/);
        return true;
      },
    );
  }));
