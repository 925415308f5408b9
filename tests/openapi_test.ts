import assert from "node:assert/strict";
import { Validator } from "@seriousme/openapi-schema-validator";
import { ERROR_CODES, type ErrorCode } from "@/lib/core/mod.ts";
import { MANAGEMENT_ONLY_ERRORS, RATE_LIMIT_HEADERS, WEBHOOK_ONLY_ERRORS } from "@/lib/ops/mod.ts";
import { assertMatchesOpenApi, assertSchema } from "./openapi_check.ts";
import {
  PUBLIC_URL,
  readSse,
  serveLoopback,
  type TestService,
  userMessage,
  withService,
} from "./helpers.ts";

const ECHO = "tollbooth/echo";

async function servedDocument(s: TestService) {
  const res = await s.handle(new Request(`${PUBLIC_URL}/openapi.json`));
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^application\/json/);
  return await res.json();
}

Deno.test("/openapi.json is a valid OpenAPI 3.1 document", () =>
  withService(async (s) => {
    const doc = await servedDocument(s);
    const validator = new Validator();
    const result = await validator.validate(doc);
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
    assert.equal(validator.version, "3.1");
    const broken = await new Validator().validate({ ...doc, paths: { "/x": { post: 5 } } });
    assert.equal(broken.valid, false, "the validator does reject a broken document");
    assert.equal(doc.servers[0].url, `${PUBLIC_URL}/v1`);
    assert.equal(doc.paths["/chat/completions"].post.operationId, "createChatCompletion");
  }));

Deno.test("the document lists every error code of the endpoint under its status", () =>
  withService(async (s) => {
    const doc = await servedDocument(s);
    const responses = doc.paths["/chat/completions"].post.responses;
    for (const [code, e] of Object.entries(ERROR_CODES)) {
      if (
        code === "not_found" || MANAGEMENT_ONLY_ERRORS.includes(code as ErrorCode) ||
        WEBHOOK_ONLY_ERRORS.includes(code as ErrorCode)
      ) continue;
      const schema = responses[String(e.status)]?.content["application/json"].schema;
      assert.ok(schema, `status ${e.status} of ${code} is documented`);
      // References are followed one level: the 402's alternatives live in components.
      const text = JSON.stringify(schema).replace(
        /\{"\$ref":"#\/components\/schemas\/(\w+)"\}/g,
        (_, name) => JSON.stringify(doc.components.schemas[name]),
      );
      assert.ok(text.includes(`"${code}"`), `${code} appears under ${e.status}`);
    }
    const extras = doc.components.schemas.InsufficientCreditsError.properties.error.required;
    assert.ok(extras.includes("balance") && extras.includes("top_up_url"));
    assert.ok(responses["429"].headers["Retry-After"]);
    const ok = responses["200"].headers;
    for (
      const h of [
        "Tollbooth-Balance",
        "Tollbooth-Request-Cost",
        "Tollbooth-Request-Id",
        "Tollbooth-Version",
        ...Object.keys(RATE_LIMIT_HEADERS),
      ]
    ) assert.ok(ok[h], `200 documents ${h}`);
  }));

Deno.test("real 200 responses, JSON and SSE, match the document", () =>
  withService(async (s) => {
    const { apiKey } = await s.newApp();
    // s.chat checks status, headers and the JSON body against the document.
    const json = await s.chat(apiKey, { model: ECHO, messages: userMessage("Hi") });
    assert.equal(json.status, 200);
    await json.body?.cancel();
    const stream = await s.chat(apiKey, {
      model: "tollbooth/lorem",
      messages: userMessage("go"),
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(stream.status, 200);
    await assertMatchesOpenApi(stream);
    const events = await readSse(stream);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    for (const chunk of chunks) {
      assertSchema(chunk, "components", "schemas", "ChatCompletionChunk");
    }
    assert.ok(chunks.at(-1).usage.cost, "the usage chunk carries the cost");
  }));

Deno.test("real error responses of every status match the document", async () => {
  let upstreamStatus = 429;
  const upstream = serveLoopback(() =>
    new Response(JSON.stringify({ error: { message: "upstream says no" } }), {
      status: upstreamStatus,
      headers: { "content-type": "application/json", "retry-after": "7" },
    })
  );
  try {
    await withService(async (s) => {
      const { appId, apiKey } = await s.newApp();
      const seen = new Map<string, number>();
      const check = async (res: Promise<Response>) => {
        const r = await res; // s.chat has checked it against the document
        const body = await r.json();
        seen.set(body.error.code, r.status);
      };
      const raw = (body: string, headers: Record<string, string> = {}) =>
        s.chat(apiKey, body, { headers });
      await check(raw("{nope"));
      await check(s.chat(apiKey, { messages: userMessage("x") }));
      await check(s.chat(apiKey, { model: ECHO, messages: [{ role: "robot", content: "x" }] }));
      await check(s.chat(apiKey, { model: "nope/x", messages: userMessage("x") }));
      await check(
        s.chat(apiKey, { model: ECHO, messages: userMessage("x") }, {
          headers: { "tollbooth-version": "2020-01-01" },
        }),
      );
      await check(raw(JSON.stringify({ model: ECHO, messages: userMessage("x".repeat(5e6)) })));
      await check(
        s.chat(apiKey, {
          model: "tollbooth/tiny",
          messages: userMessage("a b ".repeat(30)),
          max_tokens: 32,
        }),
      );
      await check(s.chat(null, { model: ECHO, messages: userMessage("x") }));
      await check(s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x") }));
      upstreamStatus = 400;
      await check(s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x") }));
      upstreamStatus = 503;
      await check(s.chat(apiKey, { model: "fake/gpt", messages: userMessage("x") }));
      // Reserve all but 10 micro-USD, so that the next request cannot be covered.
      const reserved = await s.wallets.reserve(appId, {
        amount: (await s.wallet(appId)).available - 10,
        keyId: "key_test",
        requestId: "req_hold",
        model: ECHO,
      });
      assert.ok(reserved.ok);
      await check(s.chat(apiKey, { model: ECHO, messages: userMessage("x") }));
      await s.wallets.release(appId, reserved.reservation.id);
      assert.deepEqual(Object.fromEntries(seen), {
        invalid_json: 400,
        missing_parameter: 400,
        invalid_parameter: 400,
        model_not_found: 400,
        unsupported_version: 400,
        request_too_large: 400,
        context_length_exceeded: 400,
        invalid_api_key: 401,
        upstream_rate_limited: 429,
        upstream_rejected: 400,
        provider_unreachable: 502,
        insufficient_credits: 402,
      });
    }, { openaiBaseUrl: upstream.url, env: { MAX_BODY_BYTES: "1000000" } });
  } finally {
    await upstream.close();
  }
});

Deno.test("a stream cut by the upstream ends with an error event in the documented shape", async () => {
  const chunk = {
    id: "chatcmpl-x",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-test",
    choices: [{ index: 0, delta: { content: "partial" }, finish_reason: null }],
  };
  // One chunk, then the connection ends without a finish: a cut stream.
  const upstream = serveLoopback(() =>
    new Response(`data: ${JSON.stringify(chunk)}\n\n`, {
      headers: { "content-type": "text/event-stream" },
    })
  );
  try {
    await withService(async (s) => {
      const { apiKey } = await s.newApp();
      const res = await s.chat(apiKey, {
        model: "fake/gpt",
        messages: userMessage("x"),
        stream: true,
      });
      assert.equal(res.status, 200);
      const events = await readSse(res);
      assertSchema(JSON.parse(events[0]), "components", "schemas", "ChatCompletionChunk");
      const last = JSON.parse(events.at(-1)!);
      assertSchema(last, "components", "schemas", "Error");
      assert.equal(last.error.code, "stream_interrupted");
      assert.ok(!events.includes("[DONE]"));
      for (let i = 0; i < 100 && !s.logs.some((l) => l.event === "request"); i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      const line = s.logs.find((l) => l.event === "request")!;
      assert.equal(line.outcome, "upstream_cut");
      assert.equal(line.upstreamFailure, "stream_cut");
      assert.equal(line.errorCode, "stream_interrupted");
    }, { openaiBaseUrl: upstream.url });
  } finally {
    await upstream.close();
  }
});

Deno.test("a response that breaks the document is caught by the check", async () => {
  const res = new Response(JSON.stringify({ error: { code: "insufficient_credits" } }), {
    status: 402,
    headers: {
      "content-type": "application/json",
      "tollbooth-request-id": "req_abc",
      "tollbooth-version": "2026-07-29",
      ...Object.fromEntries(Object.keys(RATE_LIMIT_HEADERS).map((name) => [name, "1"])),
    },
  });
  await assert.rejects(assertMatchesOpenApi(res), /does not match/);
  const noId = new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
  await assert.rejects(assertMatchesOpenApi(noId), /required header Tollbooth-Request-Id/);
});

Deno.test("every operation taking Idempotency-Key documents the replay headers on each answer it records, and a charged 502 its cost", () =>
  withService(async (s) => {
    const doc = await servedDocument(s);
    type Op = {
      operationId: string;
      parameters?: { $ref?: string }[];
      responses: Record<string, { headers?: Record<string, unknown> }>;
    };
    const idempotent: string[] = [];
    for (const item of Object.values(doc.paths) as Record<string, Op>[]) {
      for (const op of Object.values(item)) {
        if (!op.parameters?.some((p) => p.$ref === "#/components/parameters/IdempotencyKey")) {
          continue;
        }
        idempotent.push(op.operationId);
        for (const [status, response] of Object.entries(op.responses)) {
          const headers = Object.keys(response.headers ?? {});
          const charged = headers.includes("Tollbooth-Request-Cost");
          const replayed = headers.includes("Idempotent-Replayed") &&
            headers.includes("Tollbooth-Original-Request-Id");
          assert.equal(replayed, status.startsWith("2") || charged, `${op.operationId} ${status}`);
        }
      }
    }
    for (
      const id of ["createChatCompletion", "createResponse", "createEmbedding", "createApiKey"]
    ) {
      assert.ok(idempotent.includes(id), id);
    }
    assert.ok(idempotent.includes("setEndUserSpendCap"));
    // The endpoints served from a stream can be cut after they began: that 502 was charged.
    for (const path of ["/chat/completions", "/responses"]) {
      const bad = doc.paths[path].post.responses["502"];
      assert.ok(bad.content["application/json"].schema.properties.error.properties.code.enum
        .includes("upstream_interrupted"));
      for (const name of ["Tollbooth-Request-Cost", "Tollbooth-Balance", "Idempotent-Replayed"]) {
        assert.ok(name in bad.headers, `${path} 502 ${name}`);
      }
    }
    // An embedding is one JSON answer: it cannot be cut after it began.
    const embedding = doc.paths["/embeddings"].post.responses["502"];
    assert.ok(
      !embedding.content["application/json"].schema.properties.error.properties.code.enum
        .includes("upstream_interrupted"),
    );
    assert.ok(!("Tollbooth-Request-Cost" in embedding.headers));
  }));
