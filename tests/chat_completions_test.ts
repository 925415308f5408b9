import assert from "node:assert/strict";
import zlib from "node:zlib";
import { formatUsd, parseUsd } from "@/lib/core/mod.ts";
import { countPromptTokens } from "@/lib/gateway/tokens.ts";
import { revokeKey } from "@/lib/billing/mod.ts";
import {
  PUBLIC_URL,
  readSse,
  spendDownTo,
  startService,
  userMessage,
  withService,
} from "./helpers.ts";

const ECHO = "tollbooth/echo";

function assertCommonHeaders(res: Response) {
  assert.match(res.headers.get("tollbooth-request-id") ?? "", /^req_[0-9a-z]{26}$/);
  assert.equal(res.headers.get("tollbooth-version"), "2026-07-29");
}

async function assertError(res: Response, status: number, code: string, param?: string) {
  assert.equal(res.status, status);
  assertCommonHeaders(res);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  const body = await res.json();
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.type, "string");
  assert.equal(typeof body.error.message, "string");
  assert.ok(body.error.message.length > 0);
  assert.equal(body.error.doc_url, `${PUBLIC_URL}/docs/errors#${code}`);
  if (param !== undefined) assert.equal(body.error.param, param);
  else assert.equal("param" in body.error, false);
  return body.error;
}

Deno.test("a new app starts with 5.000000 USD of starter credits", () =>
  withService(async (s) => {
    const { appId } = await s.newApp();
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000);
    assert.equal(wallet.starter, 5_000_000);
  }));

Deno.test("non-streaming 200 is a chat completion with balance, cost and request id headers", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: ECHO,
      messages: userMessage("Hello there"),
      max_tokens: 50,
    });
    assert.equal(res.status, 200);
    assertCommonHeaders(res);
    const body = await res.json();
    assert.equal(body.object, "chat.completion");
    assert.equal(body.model, ECHO);
    assert.equal(body.choices[0].message.role, "assistant");
    assert.equal(body.choices[0].message.content, "Hello there");
    assert.equal(body.choices[0].finish_reason, "stop");
    assert.equal(body.usage.prompt_tokens, countPromptTokens([{ content: "Hello there" }]));
    assert.equal(body.usage.completion_tokens, 2);

    // 0.50 and 1.50 USD per million tokens, rounded up once to the micro-dollar.
    const expected = Math.ceil((body.usage.prompt_tokens * 0.5 + 2 * 1.5) - 1e-9);
    const cost = parseUsd(res.headers.get("tollbooth-request-cost")!);
    assert.equal(cost, expected);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000 - cost);
    assert.equal(wallet.reserved, 0);
    assert.equal(res.headers.get("tollbooth-balance"), formatUsd(wallet.available));
  }));

Deno.test("money headers are decimal strings with six fractional digits", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, { model: ECHO, messages: userMessage("Hi") });
    assert.match(res.headers.get("tollbooth-balance")!, /^\d+\.\d{6}$/);
    assert.match(res.headers.get("tollbooth-request-cost")!, /^\d+\.\d{6}$/);
    await res.body?.cancel();
  }));

Deno.test("max_tokens caps the output and ends with finish_reason length", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "tollbooth/lorem",
      messages: userMessage("go"),
      max_tokens: 7,
    });
    const body = await res.json();
    assert.equal(body.usage.completion_tokens, 7);
    assert.equal(body.choices[0].finish_reason, "length");
  }));

Deno.test("max_completion_tokens is accepted as an alias of max_tokens", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: "tollbooth/lorem",
      messages: userMessage("go"),
      max_completion_tokens: 3,
    });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).usage.completion_tokens, 3);
  }));

Deno.test("the reservation uses max_tokens 2048 when it is omitted", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    // Leave exactly less than a default reservation: prompt + 2048 output tokens at 1.50/M.
    const prompt = countPromptTokens([{ content: "Hi" }]);
    const defaultHold = Math.ceil(prompt * 0.5 + 2048 * 1.5);
    await spendDownTo(s.kv, appId, defaultHold - 1);
    const refused = await s.chat(apiKey, { model: ECHO, messages: userMessage("Hi") });
    await assertError(refused, 402, "insufficient_credits");
    const fits = await s.chat(apiKey, {
      model: ECHO,
      messages: userMessage("Hi"),
      max_tokens: 2047,
    });
    assert.equal(fits.status, 200);
    await fits.body?.cancel();
  }));

Deno.test("compatible fields clients commonly send are accepted", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: ECHO,
      messages: [{ role: "system", content: "Be brief" }, { role: "user", content: "Hi" }, {
        role: "assistant",
        content: "Hello",
      }, { role: "user", content: [{ type: "text", text: "Again" }] }],
      temperature: 0.2,
      top_p: 0.9,
      stop: ["\n"],
      seed: 7,
      user: "end-user-1",
      presence_penalty: 0,
      stream_options: { include_usage: true },
      n: 1,
    });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).choices[0].message.content, "Again");
  }));

Deno.test("streaming returns chat.completion.chunk events ending in [DONE], with the balance after the reservation", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: ECHO,
      messages: userMessage("one two three"),
      stream: true,
      max_tokens: 100,
    });
    assert.equal(res.status, 200);
    assertCommonHeaders(res);
    assert.match(res.headers.get("content-type")!, /^text\/event-stream/);
    assert.equal(res.headers.get("tollbooth-request-cost"), null);
    const prompt = countPromptTokens([{ content: "one two three" }]);
    const reservation = Math.ceil(prompt * 0.5 + 100 * 1.5);
    assert.equal(res.headers.get("tollbooth-balance"), formatUsd(5_000_000 - reservation));
    const events = await readSse(res);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.ok(chunks.every((c) => c.object === "chat.completion.chunk" && c.model === ECHO));
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""), "one two three");
    assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
    assert.ok(chunks.every((c) => c.usage === undefined), "no usage chunk unless asked for");
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
    assert.equal(wallet.spent, Math.ceil(prompt * 0.5 + 3 * 1.5));
  }));

Deno.test("a streaming client that asks for usage gets a final usage chunk with the exact cost", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, {
      model: ECHO,
      messages: userMessage("count me"),
      stream: true,
      stream_options: { include_usage: true },
    });
    const events = await readSse(res);
    const usageChunk = JSON.parse(events.at(-2)!);
    assert.deepEqual(usageChunk.choices, []);
    assert.equal(usageChunk.usage.completion_tokens, 2);
    const wallet = await s.wallet(appId);
    assert.equal(usageChunk.usage.cost, formatUsd(wallet.spent));
    assert.equal(wallet.available, 5_000_000 - wallet.spent);
  }));

Deno.test("401 invalid_api_key for a missing, malformed, unknown or revoked key", () =>
  withService(async (s) => {
    const { apiKey, keyId } = await s.newApp();
    const body = { model: ECHO, messages: userMessage("hi") };
    await assertError(await s.chat(null, body), 401, "invalid_api_key");
    const basic = await s.chat(null, body, { headers: { authorization: "Basic abc" } });
    await assertError(basic, 401, "invalid_api_key");
    await assertError(await s.chat("tb_short", body), 401, "invalid_api_key");
    await assertError(await s.chat("tb_" + "a".repeat(36), body), 401, "invalid_api_key");
    const ok = await s.chat(apiKey, body);
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
    await revokeKey(s.kv, keyId);
    const err = await assertError(await s.chat(apiKey, body), 401, "invalid_api_key");
    assert.equal(err.type, "authentication_error");
    assert.ok(!err.message.includes(apiKey), "the key is never echoed");
  }));

Deno.test("401 for an Authorization header that is not one bearer token says it is malformed, not missing", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const body = { model: ECHO, messages: userMessage("hi") };
    const missing = await assertError(await s.chat(null, body), 401, "invalid_api_key");
    assert.match(missing.message, /^Missing API key/);
    // Sent twice, the header arrives as its two values joined by a comma.
    const twice = new Headers([["authorization", `Bearer ${apiKey}`]]);
    twice.append("authorization", `Bearer ${apiKey}`);
    const sent = ["Basic abc", `Token ${apiKey}`, "Bearer", twice.get("authorization")!];
    for (const authorization of sent) {
      const res = await s.chat(null, body, { headers: { authorization } });
      const err = await assertError(res, 401, "invalid_api_key");
      assert.match(err.message, /^Malformed Authorization header/);
      assert.ok(!err.message.includes(apiKey), "the key is never echoed");
    }
  }));

Deno.test("400 invalid_json for a body that is not JSON, not an object, or not UTF-8", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await assertError(await s.chat(apiKey, "{not json"), 400, "invalid_json");
    await assertError(await s.chat(apiKey, "[1,2]"), 400, "invalid_json");
    await assertError(await s.chat(apiKey, "null"), 400, "invalid_json");
    await assertError(await s.chat(apiKey, ""), 400, "invalid_json");
    const badUtf8 = await s.handle(
      new Request(`${PUBLIC_URL}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
      }),
    );
    await assertError(badUtf8, 400, "invalid_json");
    const wrongType = await s.chat(
      apiKey,
      JSON.stringify({ model: ECHO, messages: userMessage("x") }),
      {
        headers: { "content-type": "text/plain" },
      },
    );
    await assertError(wrongType, 400, "invalid_json");
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("400 missing_parameter names model or messages", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    await assertError(
      await s.chat(apiKey, { messages: userMessage("x") }),
      400,
      "missing_parameter",
      "model",
    );
    await assertError(await s.chat(apiKey, { model: ECHO }), 400, "missing_parameter", "messages");
    await assertError(
      await s.chat(apiKey, { model: null, messages: [] }),
      400,
      "missing_parameter",
      "model",
    );
  }));

Deno.test("400 invalid_parameter gives the path of the bad field", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const cases: [unknown, string][] = [
      [{ model: 42, messages: userMessage("x") }, "model"],
      [{ model: ECHO, messages: "hi" }, "messages"],
      [{ model: ECHO, messages: [] }, "messages"],
      [{
        model: ECHO,
        messages: [{ role: "user", content: "a" }, { role: "wizard", content: "b" }],
      }, "messages[1].role"],
      [{ model: ECHO, messages: [{ role: "tool", content: "b" }] }, "messages[0].tool_call_id"],
      [{ model: ECHO, messages: [{ role: "user" }] }, "messages[0].content"],
      [{ model: ECHO, messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
      [{ model: ECHO, messages: ["x"] }, "messages[0]"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: "10" }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: 1.5 }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: 0 }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: -3 }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: 1e300 }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), max_tokens: 9000 }, "max_tokens"],
      [{ model: ECHO, messages: userMessage("x"), stream: "yes" }, "stream"],
      [{ model: ECHO, messages: userMessage("x"), n: 2 }, "n"],
      [
        { model: ECHO, messages: userMessage("x"), stream_options: { include_usage: "y" } },
        "stream_options.include_usage",
      ],
    ];
    for (const [body, param] of cases) {
      await assertError(await s.chat(apiKey, body), 400, "invalid_parameter", param);
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("400 before any reservation for what OpenAI refuses: parallel_tool_calls without tools, metadata past its limits", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const pairs = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]));
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [
        { parallel_tool_calls: false },
        "parallel_tool_calls",
        /'parallel_tool_calls' is only allowed when 'tools' are specified/,
      ],
      [{ metadata: pairs(17) }, "metadata", /at most 16 key-value pairs/],
      [{ metadata: { ["k".repeat(65)]: "v" } }, "metadata", /at most 64 characters/],
      [{ metadata: { k: "v".repeat(513) } }, "metadata.k", /at most 512 characters/],
    ];
    for (const [extra, param, message] of cases) {
      const res = await s.chat(apiKey, { model: ECHO, messages: userMessage("x"), ...extra });
      const error = await assertError(res, 400, "invalid_parameter", param);
      assert.match(error.message, message);
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("400 model_not_found for a model off the curated list, with param model", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const err = await assertError(
      await s.chat(apiKey, { model: "openai/gpt-9", messages: userMessage("x") }),
      400,
      "model_not_found",
      "model",
    );
    assert.equal(err.type, "invalid_request_error");
  }));

Deno.test("400 context_length_exceeded when the prompt and max_tokens cannot fit the model", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await assertError(
      await s.chat(apiKey, { model: "tollbooth/tiny", messages: userMessage("word ".repeat(60)) }),
      400,
      "context_length_exceeded",
      "messages",
    );
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("a prompt far past the context is refused on a count stopped past the room, naming it, nothing charged", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    // 4 MB of words no tokenizer cache knows: counted whole, seconds for a 400.
    const words = Array.from({ length: 60_000 }, (_, i) => `q${i.toString(36)}z`.repeat(8))
      .join(" ");
    for (const model of ["fake/gpt", ECHO]) {
      const res = await s.chat(apiKey, { model, messages: userMessage(words), max_tokens: 768 });
      assert.equal(res.status, 400);
      const { error } = await res.json();
      assert.equal(error.code, "context_length_exceeded");
      assert.match(error.message, /more than 32000 tokens as counted/);
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("400 unsupported_version for a Tollbooth-Version we do not serve; the current one passes, sent twice too, and an empty one pins nothing", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const body = { model: ECHO, messages: userMessage("x") };
    await assertError(
      await s.chat(apiKey, body, { headers: { "tollbooth-version": "2025-01-01" } }),
      400,
      "unsupported_version",
    );
    await assertError(
      await s.chat(apiKey, body, { headers: { "tollbooth-version": "2026-07-29, 2025-01-01" } }),
      400,
      "unsupported_version",
    );
    // The current version, sent once, twice (joined by a proxy) or empty: served.
    for (const version of ["2026-07-29", "2026-07-29, 2026-07-29", ""]) {
      const ok = await s.chat(apiKey, body, { headers: { "tollbooth-version": version } });
      assert.equal(ok.status, 200, version);
      await ok.body?.cancel();
    }
  }));

Deno.test("400 request_too_large for a body over the limit, refused before parsing", async () => {
  const service = await startService({ env: { MAX_BODY_BYTES: "1000" } });
  try {
    const { appId, apiKey } = await service.newApp();
    const big = { model: ECHO, messages: userMessage("x".repeat(2000)) };
    await assertError(await service.chat(apiKey, big), 400, "request_too_large");
    // Without a declared length the limit still holds while reading.
    const streamed = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(JSON.stringify(big)));
        c.close();
      },
    });
    const res = await service.handle(
      new Request(`${PUBLIC_URL}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: streamed,
      }),
    );
    await assertError(res, 400, "request_too_large");
    assert.equal((await service.wallet(appId)).available, 5_000_000);
  } finally {
    await service.close();
  }
});

/** Deno's node:zlib has zstd (Node 22.15's), which its bundled Node types do not declare yet. */
const { zstdCompressSync } = zlib as unknown as {
  zstdCompressSync(bytes: Uint8Array): Uint8Array;
};

/** A chat completion whose body is sent as `body`, with its Content-Encoding. */
function encodedChat(
  service: { handle(request: Request): Promise<Response> },
  apiKey: string,
  body: Uint8Array,
  contentEncoding: string,
) {
  return service.handle(
    new Request(`${PUBLIC_URL}/v1/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${apiKey}`,
        "content-type": "application/json",
        "content-encoding": contentEncoding,
      },
      body: new Uint8Array(body),
    }),
  );
}

Deno.test("a body sent with Content-Encoding gzip, deflate, br or zstd is decoded and served, deflate with or without its zlib wrapper", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const json = new TextEncoder().encode(
      JSON.stringify({ model: ECHO, messages: userMessage("Hello, compressed") }),
    );
    const encoders: Record<string, (bytes: Uint8Array) => Uint8Array> = {
      gzip: zlib.gzipSync,
      deflate: zlib.deflateSync,
      br: zlib.brotliCompressSync,
      zstd: zstdCompressSync,
      // RFC 9110 says deflate is zlib's format; some clients send the bare deflate stream.
      "deflate (raw)": zlib.deflateRawSync,
      identity: (bytes) => bytes,
    };
    for (const [name, encode] of Object.entries(encoders)) {
      const coding = name.split(" ")[0];
      const res = await encodedChat(s, apiKey, encode(json), coding.toUpperCase());
      assert.equal(res.status, 200, `${coding}: ${await res.clone().text()}`);
      assert.match((await res.json()).choices[0].message.content, /Hello, compressed/);
    }
  }));

Deno.test("a compressed body is held to the body limit once decoded: a zip bomb is 400 request_too_large, charged nothing, in every coding", async () => {
  const service = await startService({ env: { MAX_BODY_BYTES: "100000" } });
  try {
    const { appId, apiKey } = await service.newApp();
    // 64 MiB of JSON that each coding makes at most 64 KiB: under the limit as sent, far over it
    // decoded.
    const json = new TextEncoder().encode(
      JSON.stringify({ model: ECHO, messages: userMessage("a".repeat(64 * 1024 * 1024)) }),
    );
    const bombs: [string, Uint8Array][] = [
      ["gzip", zlib.gzipSync(json)],
      ["deflate", zlib.deflateRawSync(json)],
      ["zstd", zstdCompressSync(json)],
    ];
    for (const [coding, bomb] of bombs) {
      assert.ok(bomb.byteLength < 100_000, coding);
      await assertError(
        await encodedChat(service, apiKey, bomb, coding),
        400,
        "request_too_large",
      );
    }
    assert.equal((await service.wallet(appId)).available, 5_000_000);
  } finally {
    await service.close();
  }
});

Deno.test("a body in a Content-Encoding we do not decode is 415 unsupported_content_encoding naming it; one that is not what it says is 400 invalid_json", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const json = new TextEncoder().encode(
      JSON.stringify({ model: ECHO, messages: userMessage("x") }),
    );
    for (const coding of ["compress", "gzip, br"]) {
      const error = await assertError(
        await encodedChat(s, apiKey, json, coding),
        415,
        "unsupported_content_encoding",
      );
      assert.match(error.message, /Content-Encoding/);
      assert.ok(error.message.includes(JSON.stringify(coding)), error.message);
    }
    for (const coding of ["gzip", "zstd", "deflate"]) {
      const error = await assertError(
        await encodedChat(s, apiKey, json, coding),
        400,
        "invalid_json",
      );
      assert.match(error.message, new RegExp(coding));
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("a Content-Encoding named like a property of every object (constructor) is 415 unsupported_content_encoding, not served as if sent as is", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const json = new TextEncoder().encode(
      JSON.stringify({ model: ECHO, messages: userMessage("x") }),
    );
    for (const coding of ["constructor", "Constructor"]) {
      await assertError(
        await encodedChat(s, apiKey, json, coding),
        415,
        "unsupported_content_encoding",
      );
    }
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("a refused Content-Encoding is named in the error up to 100 characters, not echoed whole", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    const json = new TextEncoder().encode(
      JSON.stringify({ model: ECHO, messages: userMessage("x") }),
    );
    const err = await assertError(
      await encodedChat(s, apiKey, json, "x".repeat(60_000)),
      415,
      "unsupported_content_encoding",
    );
    assert.ok(err.message.includes(`"${"x".repeat(100)}…"`), err.message);
    assert.ok(err.message.length < 250, `${err.message.length} characters`);
  }));

Deno.test("402 insufficient_credits carries balance and top_up_url and changes nothing", () =>
  withService(async (s) => {
    const { appId, apiKey, topUpToken } = await s.newApp();
    await spendDownTo(s.kv, appId, 1000);
    const before = await s.wallet(appId);
    const err = await assertError(
      await s.chat(apiKey, { model: ECHO, messages: userMessage("x"), max_tokens: 8000 }),
      402,
      "insufficient_credits",
    );
    assert.equal(err.type, "insufficient_credits");
    assert.equal(err.balance, "0.001000");
    assert.equal(err.top_up_url, `${PUBLIC_URL}/top-up/${topUpToken}`);
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("the 402 and the context refusal name max_completion_tokens when the client capped its output with it", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    const tooLong = await assertError(
      await s.chat(apiKey, {
        model: "tollbooth/tiny",
        messages: userMessage("word ".repeat(60)),
        max_completion_tokens: 10,
      }),
      400,
      "context_length_exceeded",
      "messages",
    );
    assert.match(tooLong.message, /plus max_completion_tokens \(10\)/);
    await spendDownTo(s.kv, appId, 1000);
    const unpaid = await assertError(
      await s.chat(apiKey, {
        model: ECHO,
        messages: userMessage("x"),
        max_completion_tokens: 8000,
      }),
      402,
      "insufficient_credits",
    );
    assert.match(unpaid.message, /prompt plus max_completion_tokens 8000/);
  }));

Deno.test("a streaming request that cannot be paid gets a real 402, not a 200 stream", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    await spendDownTo(s.kv, appId, 10);
    const res = await s.chat(apiKey, { model: ECHO, messages: userMessage("x"), stream: true });
    await assertError(res, 402, "insufficient_credits");
  }));

Deno.test("a streaming request with a bad body gets a real 400", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    await assertError(
      await s.chat(apiKey, { model: "nope/x", messages: userMessage("x"), stream: true }),
      400,
      "model_not_found",
      "model",
    );
  }));

Deno.test("502 provider_unreachable charges nothing, streaming or not", () =>
  withService(async (s) => {
    const { appId, apiKey } = await s.newApp();
    // The fake provider's base URL points at a closed port.
    await assertError(
      await s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x") }),
      502,
      "provider_unreachable",
    );
    await assertError(
      await s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x"), stream: true }),
      502,
      "provider_unreachable",
    );
    // A catalog model whose provider key is not set answers 502 as well.
    await assertError(
      await s.chat(apiKey, { model: "nokey/gpt", messages: userMessage("x") }),
      502,
      "provider_unreachable",
    );
    const wallet = await s.wallet(appId);
    assert.equal(wallet.available, 5_000_000);
    assert.equal(wallet.reserved, 0);
  }));

Deno.test("unknown paths give 404 with the request id and version headers", () =>
  withService(async (s) => {
    const api = await s.handle(new Request(`${PUBLIC_URL}/v1/audio/speech`, { method: "POST" }));
    await assertError(api, 404, "not_found");
    const page = await s.handle(new Request(`${PUBLIC_URL}/nothing-here`));
    assert.equal(page.status, 404);
    assertCommonHeaders(page);
    assert.match(await page.text(), /Page not found/);
  }));

Deno.test("every doc_url points at a section of the served error page", () =>
  withService(async (s) => {
    const res = await s.handle(new Request(`${PUBLIC_URL}/docs/errors`));
    assert.equal(res.status, 200);
    assertCommonHeaders(res);
    const html = await res.text();
    const { ERROR_CODES } = await import("@/lib/core/errors.ts");
    for (const code of Object.keys(ERROR_CODES)) {
      assert.ok(html.includes(`id="${code}"`), `section for ${code}`);
    }
  }));

Deno.test("an unexpected exception is a 500 in the error shape, logged with the request id", async () => {
  const service = await startService();
  try {
    const { apiKey } = await service.newApp();
    // Break the KV handle under the service: the next wallet read throws.
    service.kv.close();
    const res = await service.chat(apiKey, { model: ECHO, messages: userMessage("x") });
    const err = await assertError(res, 500, "internal_error");
    const requestId = res.headers.get("tollbooth-request-id");
    assert.ok(err.message.includes(requestId!));
    assert.ok(service.logs.some((l) => l.event === "unhandled_error" && l.requestId === requestId));
  } finally {
    await service.wallets.drain();
  }
});
