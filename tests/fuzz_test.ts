/**
 * Hostile and malformed input never gives a 5xx, never charges, never crashes the process: every
 * answer is an error in the spec's shape (or a 200 for a request that happens to be valid), and
 * the wallet is unchanged unless a completion was served.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { startFakeOpenAi } from "./fake_openai.ts";
import { assertAuditClean, PUBLIC_URL, startService, type TestService } from "./helpers.ts";

const URL_ = `${PUBLIC_URL}/v1/chat/completions`;
const VALID = { model: "tollbooth/echo", messages: [{ role: "user", content: "hi" }] };

/** Sends one request and checks the answer's shape; returns its status. */
async function probe(s: TestService, appId: string, init: RequestInit, label: string) {
  const before = await s.wallet(appId);
  const res = await s.handle(new Request(URL_, { method: "POST", ...init }));
  assert.ok(res.status < 500, `${label}: ${res.status}`);
  assert.ok(res.headers.get("tollbooth-request-id"), `${label}: request id`);
  const text = await res.text();
  const after = await s.wallet(appId);
  if (res.status === 200) {
    assert.ok(after.spent >= before.spent, label);
  } else {
    const body = JSON.parse(text);
    assert.equal(typeof body.error.code, "string", label);
    assert.equal(typeof body.error.message, "string", label);
    assert.deepEqual(after, before, `${label}: a refused request changed the wallet`);
  }
  return res.status;
}

function json(apiKey: string, body: BodyInit, headers: Record<string, string> = {}): RequestInit {
  return {
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...headers },
    body,
  };
}

const tally: Record<string, Record<number, number>> = {};
function count(kind: string, status: number) {
  tally[kind] ??= {};
  tally[kind][status] = (tally[kind][status] ?? 0) + 1;
}

async function withService(
  fn: (s: TestService, app: { appId: string; apiKey: string }) => Promise<void>,
) {
  const upstream = startFakeOpenAi();
  const s = await startService({ openaiBaseUrl: upstream.url });
  try {
    const app = await s.newApp();
    await fn(s, app);
    // Still serving afterwards: nothing crashed.
    const ok = await s.chat(app.apiKey, VALID);
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.equal(Object.prototype.hasOwnProperty.call(Object.prototype, "role"), false);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await upstream.close();
  }
}

Deno.test("random JSON values as the body never give a 5xx and never charge", () =>
  withService(async (s, { appId, apiKey }) => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 4 }), async (value) => {
        count(
          "random JSON value",
          await probe(s, appId, json(apiKey, JSON.stringify(value)), "json"),
        );
      }),
      { numRuns: 150 },
    );
  }));

const hostileString = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }),
  fc.constantFrom("\ud800", "\udfff", "\u0000", "\u202e", "a".repeat(5000), "__proto__"),
);
const hostileNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -1, 1.5, 2 ** 53 + 2, 1e308, -0, 9_999_999, 10_000_001),
);
const fieldValue = fc.oneof(
  hostileString,
  hostileNumber,
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue({ maxDepth: 2 }),
);

const chatBody = fc.record({
  model: fc.oneof(
    fc.constantFrom("tollbooth/echo", "fake/gpt", "tollbooth/tiny", "nope/none"),
    hostileString,
    fieldValue,
  ),
  messages: fc.oneof(
    fc.array(
      fc.record({
        role: fc.oneof(fc.constantFrom("system", "user", "assistant", "tool", "USER"), fieldValue),
        content: fc.oneof(
          hostileString,
          fieldValue,
          fc.array(fc.record({ type: fc.constant("text"), text: hostileString })),
        ),
      }, { requiredKeys: [] }),
      { maxLength: 4 },
    ),
    fieldValue,
  ),
  max_tokens: fc.oneof(hostileNumber, fieldValue),
  stream: fc.oneof(fc.boolean(), fieldValue),
  stream_options: fieldValue,
  n: fieldValue,
  temperature: fieldValue,
}, { requiredKeys: [] });

Deno.test("random chat-shaped bodies with hostile field values never give a 5xx; only valid ones are charged", () =>
  withService(async (s, { appId, apiKey }) => {
    await fc.assert(
      fc.asyncProperty(chatBody, async (body) => {
        count(
          "random chat-shaped body",
          await probe(
            s,
            appId,
            json(apiKey, JSON.stringify(body)),
            JSON.stringify(body).slice(0, 200),
          ),
        );
      }),
      { numRuns: 200 },
    );
  }));

Deno.test("random bytes, invalid UTF-8 and lone surrogates are a 400, never a 5xx", () =>
  withService(async (s, { appId, apiKey }) => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 300 }), async (bytes) => {
        count("random bytes", await probe(s, appId, json(apiKey, bytes), "bytes"));
      }),
      { numRuns: 100 },
    );
    const prefix = new TextEncoder().encode(
      '{"model":"tollbooth/echo","messages":[{"role":"user","content":"',
    );
    const suffix = new TextEncoder().encode('"}]}');
    for (
      const bad of [[0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [
        0xe2,
        0x82,
      ], [0xfe, 0xff]]
    ) {
      const status = await probe(
        s,
        appId,
        json(apiKey, new Uint8Array([...prefix, ...bad, ...suffix])),
        `utf8 ${bad}`,
      );
      assert.equal(status, 400);
      count("invalid UTF-8", status);
    }
    // A UTF-8 byte-order mark or an escaped lone surrogate is valid JSON text: handled, not a 5xx.
    for (
      const body of [
        "\ufeff" + JSON.stringify(VALID),
        '{"model":"tollbooth/echo","messages":[{"role":"user","content":"\\ud800"}]}',
      ]
    ) {
      count(
        "BOM / escaped lone surrogate",
        await probe(s, appId, json(apiKey, body), body.slice(0, 30)),
      );
    }
  }));

Deno.test("deep nesting, huge numbers and prototype-pollution keys are refused or ignored, never a 5xx", () =>
  withService(async (s, { appId, apiKey }) => {
    const cases: [kind: string, label: string, body: string][] = [];
    for (const depth of [1_000, 100_000, 1_000_000]) {
      cases.push(["deep nesting: arrays", `${depth}`, "[".repeat(depth) + "]".repeat(depth)]);
      cases.push([
        "deep nesting: message content",
        `${depth}`,
        `{"model":"tollbooth/echo","messages":[{"role":"user","content":${"[".repeat(depth)}${
          "]".repeat(depth)
        }}]}`,
      ]);
      for (const model of ["tollbooth/echo", "fake/gpt"]) {
        cases.push([
          "deep nesting: passthrough field",
          `${depth} ${model}`,
          `{"model":"${model}","messages":[{"role":"user","content":"x"}],"metadata":${
            '{"a":'.repeat(depth)
          }1${"}".repeat(depth)}}`,
        ]);
      }
    }
    for (
      const n of [
        "1e400",
        "-1e400",
        "9007199254740993",
        "1e-400",
        "123456789012345678901234567890",
        "-0",
        "1.0000000000000002",
        "0x10",
        "NaN",
        "Infinity",
      ]
    ) {
      cases.push([
        "huge or odd numbers in max_tokens",
        n,
        `{"model":"tollbooth/echo","messages":[{"role":"user","content":"x"}],"max_tokens":${n}}`,
      ]);
    }
    cases.push([
      "prototype-pollution keys",
      "__proto__ at top",
      '{"__proto__":{"model":"tollbooth/echo","polluted":1},"messages":[{"role":"user","content":"x"}]}',
    ]);
    cases.push([
      "prototype-pollution keys",
      "__proto__ in message",
      '{"model":"tollbooth/echo","messages":[{"__proto__":{"role":"user","content":"x"}}]}',
    ]);
    cases.push([
      "prototype-pollution keys",
      "constructor.prototype",
      '{"model":"tollbooth/echo","messages":[{"role":"user","content":"x"}],"constructor":{"prototype":{"polluted":1}}}',
    ]);
    cases.push([
      "prototype-pollution keys",
      "prototype key",
      '{"model":"tollbooth/echo","prototype":{"polluted":1},"messages":[{"role":"user","content":"x","constructor":1}]}',
    ]);
    cases.push([
      "duplicate keys",
      "",
      '{"model":"nope/x","model":"tollbooth/echo","messages":[{"role":"user","content":"x"}],"max_tokens":1,"max_tokens":-5}',
    ]);
    cases.push([
      "10k messages",
      "",
      JSON.stringify({
        model: "tollbooth/echo",
        messages: Array.from({ length: 10_000 }, () => ({ role: "user", content: "x" })),
        max_tokens: 1,
      }),
    ]);
    for (const [kind, label, body] of cases) {
      count(kind, await probe(s, appId, json(apiKey, body), `${kind} ${label}`));
    }
    const deep = await s.chat(apiKey, "[".repeat(1_000_000) + "]".repeat(1_000_000));
    assert.equal(deep.status, 400);
    assert.equal((await deep.json()).error.code, "invalid_json");
    // Deep values in a field passed on to the provider would overflow its serialisation: refused.
    const nested = "[".repeat(100_000) + "]".repeat(100_000);
    const extra = await s.chat(
      apiKey,
      `{"model":"fake/gpt","messages":[{"role":"user","content":"x"}],"metadata":${nested}}`,
    );
    assert.equal(extra.status, 400);
    const error = (await extra.json()).error;
    assert.equal(error.param, "metadata");
    assert.match(error.message, /nested too deeply/);
  }));

Deno.test("a deeply nested body with an Idempotency-Key is the same 400 as without one, and changes nothing", () =>
  withService(async (s, { appId, apiKey }) => {
    const before = await s.wallet(appId);
    const nested = `{"model":"fake/gpt","messages":[{"role":"user","content":"x"}],"metadata":${
      "[".repeat(5_000)
    }${"]".repeat(5_000)}}`;
    for (const key of [null, "deep-1"]) {
      const headers: Record<string, string> = key ? { "idempotency-key": key } : {};
      const res = await s.chat(apiKey, nested, { headers });
      assert.equal(res.status, 400, `idempotency key ${key}`);
      assert.match((await res.json()).error.message, /nested too deeply/);
    }
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("10 MB bodies are refused before parsing, with and without a declared length; a body broken off mid-upload is a 400", () =>
  withService(async (s, { appId, apiKey }) => {
    const big = new Uint8Array(10 * 1024 * 1024).fill(0x20);
    assert.equal(await probe(s, appId, json(apiKey, big), "10 MB declared"), 400);
    const streamed = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 10; i++) c.enqueue(new Uint8Array(1024 * 1024).fill(0x5b));
        c.close();
      },
    });
    assert.equal(
      await probe(
        s,
        appId,
        { ...json(apiKey, streamed), duplex: "half" } as RequestInit,
        "10 MB streamed",
      ),
      400,
    );
    const broken = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode('{"model":"tollbooth/echo","messages":['));
        c.error(new Error("client went away mid-upload"));
      },
    });
    assert.equal(
      await probe(
        s,
        appId,
        { ...json(apiKey, broken), duplex: "half" } as RequestInit,
        "upload broken off",
      ),
      400,
    );
    count("body broken off mid-upload", 400);
    assert.equal(
      await probe(s, appId, json(apiKey, "x", { "content-length": "99999999999" }), "lying length"),
      400,
    );
    for (let i = 0; i < 3; i++) count("10 MB body", 400);
  }));

Deno.test("wrong content types, odd Authorization and version headers and other methods never give a 5xx", () =>
  withService(async (s, { appId, apiKey }) => {
    const body = JSON.stringify(VALID);
    for (
      const type of [
        "text/plain",
        "application/jsonx",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "",
        "application/json; charset=utf-16",
        "APPLICATION/JSON",
        " application/json ",
      ]
    ) {
      const status = await probe(s, appId, {
        headers: { authorization: `Bearer ${apiKey}`, "content-type": type },
        body,
      }, `type ${type}`);
      count("content type", status);
    }
    const oddAuth = [
      "",
      "Bearer",
      "Bearer ",
      `bearer ${apiKey}`,
      `Bearer  ${apiKey}`,
      `Bearer ${apiKey} extra`,
      `Basic ${btoa(`x:${apiKey}`)}`,
      `Bearer ${apiKey.toUpperCase()}`,
      `Bearer ${apiKey.slice(0, -1)}`,
      `Bearer ${apiKey}x`,
      `Bearer tb_${"0".repeat(36)}`,
      `Bearer ${"a".repeat(100_000)}`,
      `Bearer ${apiKey}, Bearer ${apiKey}`,
      "Bearer \u00e9\u00e8",
      `Token ${apiKey}`,
      `Bearer\t${apiKey}`,
    ];
    for (const auth of oddAuth) {
      const status = await probe(s, appId, {
        headers: { authorization: auth, "content-type": "application/json" },
        body,
      }, `auth ${auth.slice(0, 40)}`);
      count("Authorization header", status);
    }
    for (
      const version of [
        "",
        "2026-07-29 ",
        "2026-7-29",
        "latest",
        "x".repeat(10_000),
        "2026-07-29, 2026-07-29",
      ]
    ) {
      count(
        "Tollbooth-Version header",
        await probe(
          s,
          appId,
          json(apiKey, body, { "tollbooth-version": version }),
          `version ${version.slice(0, 20)}`,
        ),
      );
    }
    for (const method of ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]) {
      const res = await s.handle(
        new Request(URL_, { method, headers: { authorization: `Bearer ${apiKey}` } }),
      );
      await res.body?.cancel();
      assert.ok(res.status < 500, `${method}: ${res.status}`);
      count("other method", res.status);
    }
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
  }));

Deno.test("fuzz tally (printed for the report)", () => {
  console.log(JSON.stringify(tally));
});
