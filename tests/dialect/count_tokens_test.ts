/** The Anthropic adapter's exact input count (count_tokens), ready for holds near the balance. */
import assert from "node:assert/strict";
import { startAnthropicUpstream } from "../fakes/anthropic_upstream.ts";
import { createAnthropicProvider } from "@/lib/gateway/providers/anthropic/anthropic.ts";
import { testModel, upstreamRequest } from "@/lib/gateway/providers/test_support.ts";
import { anthropicInputBound } from "@/lib/gateway/input_bound.ts";

Deno.test("countInputTokens asks count_tokens about the same Messages request, and the bound is above it", async () => {
  const claude = startAnthropicUpstream();
  try {
    const provider = createAnthropicProvider({
      baseUrl: claude.url,
      apiKey: claude.apiKey,
      apiKeyEnv: "K",
      timeoutMs: 5_000,
    });
    const request = upstreamRequest(testModel("anthropic", "claude-sonnet-4-5"), {
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "user", content: "Wie spät ist es in Zürich? ગુજરાતી" },
      ],
      tools: [{
        type: "function",
        function: {
          name: "clock",
          parameters: { type: "object", properties: { tz: { type: "string" } } },
        },
      }],
      max_tokens: 100,
      stop: "END",
    }, 100);
    const exact = await provider.countInputTokens!(request);
    const [sent] = claude.counts();
    assert.equal(exact, claude.inputTokens(sent.body));
    assert.equal(sent.body.system, "Be brief.");
    assert.equal("max_tokens" in sent.body, false);
    assert.ok(anthropicInputBound(request.request) >= exact, "the bound is an upper bound");
  } finally {
    await claude.close();
  }
});
