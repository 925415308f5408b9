/**
 * A hold is an upper bound of what the provider bills: a request on an app that holds exactly its
 * hold is charged in full, nothing left `uncharged` for the operator.
 */
import assert from "node:assert/strict";
import { formatUsd } from "@/lib/core/mod.ts";
import { startOpenAiUpstream } from "./fakes/openai_upstream.ts";
import {
  assertAuditClean,
  spendDownTo,
  startService,
  usageRecords,
  userMessage,
} from "./helpers.ts";

// A run of letters on which counting in 128-character pieces came out two tokens short per cut.
const BLOCK =
  "rxgpurqwthzdkjdntpzomdhhdfqvhnkbuqykpifasepuktobcteefvtgfuecolddxaheyghcrcrlvdmlrzoukuttgedcrwbxctricbvzvgkzrvzyptnuwxoyjfrmvvvv";

Deno.test("a long run of letters is held at no less than OpenAI bills: an app holding exactly the hold is charged in full", async () => {
  const upstream = startOpenAiUpstream();
  upstream.setDefault({ content: "Hi." });
  const s = await startService({
    openaiBaseUrl: upstream.baseUrl,
    env: { FAKE_OPENAI_KEY: upstream.apiKey },
  });
  try {
    const request = {
      model: "fake/gpt",
      messages: userMessage(BLOCK.repeat(128)),
      max_tokens: 16,
    };
    // The hold, learned on an app with room to spare.
    const rich = await s.newApp("rich");
    const first = await s.chat(rich.apiKey, request);
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const [learned] = await usageRecords(s.kv, rich.appId);
    // The strict fake bills the exact o200k count of the text, with OpenAI's chat framing.
    const billed = upstream.chats.at(-1)!.promptTokens;
    assert.ok(learned.promptTokens === billed && learned.uncharged === 0);

    const exact = await s.newApp("exact");
    await spendDownTo(s.kv, exact.appId, learned.reserved);
    const res = await s.chat(exact.apiKey, request);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const record = (await usageRecords(s.kv, exact.appId)).find((u) => u.model === "fake/gpt")!;
    assert.equal(record.reserved, learned.reserved);
    assert.equal(
      record.uncharged,
      0,
      `held ${record.reserved}, billed ${record.cost + record.uncharged}`,
    );
    assert.equal(res.headers.get("tollbooth-request-cost"), formatUsd(record.cost));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
});
