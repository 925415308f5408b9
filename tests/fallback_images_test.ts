/**
 * A fallback to another model may bill images by another rule: the hold covers the dearest route,
 * so an answer from the fallback is never held at the primary's smaller image count.
 */
import assert from "node:assert/strict";
import { reservationCost } from "@/lib/catalog/mod.ts";
import { parseChatRequest } from "@/lib/gateway/chat_request.ts";
import { inputBound } from "@/lib/gateway/input_bound.ts";
import { pngBase64 } from "./fakes/common.ts";
import { assertAuditClean, spendDownTo, startService } from "./helpers.ts";

Deno.test("the hold covers the fallback's image rule: a balance that covers only the primary's is a 402", async () => {
  const model = (fallbackImages: Record<string, number>) => ({
    id: "oai/vision",
    provider: "primary",
    upstream_model: "gpt-4o",
    input_usd_per_mtok: "2.50",
    output_usd_per_mtok: "10.00",
    context_tokens: 128_000,
    max_output_tokens: 4096,
    image_base_tokens: 85,
    image_tile_tokens: 170,
    fallbacks: [{ provider: "backup", upstream_model: "gpt-4o-mini", ...fallbackImages }],
  });
  const providers = {
    primary: { kind: "openai", base_url: "http://127.0.0.1:9/v1", api_key_env: "K" },
    backup: { kind: "openai", base_url: "http://127.0.0.1:9/v1", api_key_env: "K" },
  } as const;
  const s = await startService({
    catalogFile: {
      providers,
      models: [model({ image_base_tokens: 2833, image_tile_tokens: 5667 })],
    },
    env: { K: "sk-unused-0123456789" },
  });
  try {
    const body = {
      model: "oai/vision",
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${pngBase64(512, 512)}` } },
        ],
      }],
      max_tokens: 16,
    };
    const catalogModel = s.catalog.get("oai/vision")!;
    const request = parseChatRequest(body);
    const primaryHold = reservationCost(
      catalogModel,
      inputBound({ kind: "openai" }, request, catalogModel, "o200k"),
      16,
    );
    const fallbackHold = reservationCost(
      catalogModel,
      inputBound(
        { kind: "openai" },
        request,
        { ...catalogModel, imageBaseTokens: 2833, imageTileTokens: 5667 },
        "o200k",
      ),
      16,
    );
    assert.ok(fallbackHold > primaryHold);
    const { appId, apiKey } = await s.newApp();
    await spendDownTo(s.kv, appId, primaryHold);
    const res = await s.chat(apiKey, body);
    assert.equal(res.status, 402);
    const error = (await res.json()).error;
    assert.equal(error.code, "insufficient_credits");
    assert.match(error.message, new RegExp(`needs ${(fallbackHold / 1e6).toFixed(6)} USD`));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});
