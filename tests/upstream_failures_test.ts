/**
 * The failure matrix: every way an upstream fails, for each wire format, with the status, the
 * body's code and the wallet afterwards. Fakes speak the providers' real formats (tests/fixtures).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { countPromptTokens } from "@/lib/gateway/tokens.ts";
import { claudeTokenBound } from "@/lib/gateway/claude_tokens.ts";
import { until } from "./fakes/common.ts";
import {
  assertAuditClean,
  serveLoopback,
  type TestService,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import {
  cost,
  type FakeProvider,
  fixtureJson,
  sseResponse,
  startUpstreamService,
} from "./upstreams.ts";

type Kind = "openai" | "anthropic";
const KINDS: Kind[] = ["openai", "anthropic"];
const START = 5_000_000;
const PROMPT = "Tell me a story";
/** Prompt tokens the Anthropic fixtures report in message_start. */
const ANTHROPIC_INPUT_TOKENS = 14;
const PIECES = ["Once", " upon", " a time"];
/** "Once upon a time" in o200k_base. */
const PIECES_TOKENS = 4;

/** One OpenAI chat chunk event of the cut answer's. */
function openAiChunk(
  delta: Record<string, unknown>,
  { finishReason = null, usage = null }: { finishReason?: string | null; usage?: unknown } = {},
): string {
  return `data: ${
    JSON.stringify({
      id: "chatcmpl-cut",
      object: "chat.completion.chunk",
      created: 1733000000,
      model: "up-model",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      usage,
    })
  }\n\n`;
}

/** The first events of a stream in each format, carrying PIECES. */
function streamStart(kind: Kind): string[] {
  if (kind === "openai") {
    return [
      openAiChunk({ role: "assistant", content: "" }),
      ...PIECES.map((p) => openAiChunk({ content: p })),
    ];
  }
  return [
    `event: message_start\ndata: ${
      JSON.stringify({
        type: "message_start",
        message: {
          id: "msg_cut",
          type: "message",
          role: "assistant",
          content: [],
          model: "up-model",
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: ANTHROPIC_INPUT_TOKENS, output_tokens: 1 },
        },
      })
    }\n\n`,
    `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
    ...PIECES.map((text) =>
      `event: content_block_delta\ndata: ${
        JSON.stringify({
          type: "content_block_delta",
          index: 0,
          delta: { type: "text_delta", text },
        })
      }\n\n`
    ),
  ];
}

/**
 * The output of a cut stream, counted by us: o200k tokens for the OpenAI kind, the Claude bound
 * (Claude's tokenizer is not published; o200k undercounts it) for the Anthropic kind.
 */
function producedTokens(kind: Kind) {
  return kind === "anthropic" ? claudeTokenBound(PIECES.join("")) : PIECES_TOKENS;
}

/** What a stream cut after PIECES costs: upstream's prompt count when it gave one, else ours. */
function cutCost(kind: Kind) {
  const prompt = kind === "anthropic"
    ? ANTHROPIC_INPUT_TOKENS
    : countPromptTokens([{ content: PROMPT }]);
  return cost(prompt, producedTokens(kind));
}

function errorFixture(kind: Kind, name: string) {
  const all = fixtureJson<
    Record<string, { status: number; body: unknown; headers?: Record<string, string> }>
  >(`${kind}_errors.json`);
  const { status, body, headers } = all[name];
  return Response.json(body, { status, headers });
}

async function withBaseUrl(
  kind: FakeProvider["kind"],
  baseUrl: string,
  fn: (s: TestService, apiKey: string, appId: string) => Promise<void>,
  timeoutMs = 2000,
) {
  const s = await startUpstreamService({
    up: { kind, base_url: baseUrl, timeout_ms: timeoutMs },
  });
  try {
    const { apiKey, appId } = await s.newApp();
    await fn(s, apiKey, appId);
    const wallet = await s.wallet(appId);
    assert.equal(wallet.reserved, 0);
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
}

async function withFake(
  kind: FakeProvider["kind"],
  handler: (req: Request) => Response | Promise<Response>,
  fn: (s: TestService, apiKey: string, appId: string) => Promise<void>,
  timeoutMs = 2000,
) {
  const fake = serveLoopback(handler);
  try {
    await withBaseUrl(kind, fake.url, fn, timeoutMs);
  } finally {
    await fake.close();
  }
}

function ask(s: TestService, apiKey: string, stream: boolean) {
  return s.chat(apiKey, { model: "up/m", messages: userMessage(PROMPT), max_tokens: 100, stream });
}

/** The answer's text, read from its stream or its message. */
async function answerText(res: Response, stream: boolean): Promise<string> {
  return stream ? (await readStream(res)).content : (await res.json()).choices[0].message.content;
}

async function assertError(res: Response, status: number, code: string) {
  assert.equal(res.status, status, `status for ${code}`);
  const body = await res.json();
  assert.equal(body.error.code, code);
  return body.error as { code: string; message: string };
}

/** Asks twice, streamed and not; both must fail with the same status and code, charging nothing. */
async function assertBothFail(
  s: TestService,
  apiKey: string,
  appId: string,
  status: number,
  code: string,
) {
  const errors = [];
  for (const stream of [false, true]) {
    const res = await ask(s, apiKey, stream);
    errors.push({ error: await assertError(res, status, code), headers: res.headers });
  }
  const wallet = await s.wallet(appId);
  assert.equal(wallet.available, START, "nothing charged");
  return errors;
}

function failures(s: TestService) {
  return s.logs.filter((l) => l.path === "/v1/chat/completions").map((l) => l.upstreamFailure);
}

/** The holds of the calls given up for the timeout, as logged, and as the wallet stats sum them. */
function abandoned(s: TestService) {
  const logged = s.logs.filter((l) => l.event === "upstream_abandoned").map((l) => l.exposure);
  return { logged, counted: s.wallets.stats.abandonedExposureMicros };
}

function closedPort() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** Accepts connections and never says a word. */
function silentListener() {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  (async () => {
    for await (const conn of listener) conns.push(conn);
  })().catch(() => {});
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    close() {
      for (const c of conns) c.close();
      listener.close();
    },
  };
}

/** Reads a streamed response to its end: the chunks' text, and the final event. */
async function readStream(res: Response) {
  const text = await res.text();
  const data = text.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) => b.slice(6));
  const last = data.at(-1)!;
  const chunks = data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d));
  const content = chunks.flatMap((c) =>
    (c.choices ?? []).map((ch: { delta?: { content?: string } }) => ch.delta?.content ?? "")
  ).join("");
  return { data, last, content, chunks };
}

/**
 * An upstream that answers 200 and the first events, then drops the connection inside its chunked
 * body (no last chunk): the provider broke off mid-answer, as a reset or a crashed server does.
 */
function droppingUpstream(kind: Kind) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  (async () => {
    for await (const conn of listener) {
      (async () => {
        const buffer = new Uint8Array(64 * 1024);
        let request = "";
        // The whole request first, so that the drop is of the answer, not of the request.
        while (true) {
          const n = await conn.read(buffer);
          if (n === null) break;
          request += new TextDecoder().decode(buffer.subarray(0, n));
          const end = request.indexOf("\r\n\r\n");
          const length = Number(/content-length: *(\d+)/i.exec(request)?.[1] ?? 0);
          if (end >= 0 && new TextEncoder().encode(request.slice(end + 4)).length >= length) break;
        }
        const events = new TextEncoder().encode(streamStart(kind).join(""));
        await conn.write(new TextEncoder().encode(
          "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
            `${events.length.toString(16)}\r\n`,
        ));
        await conn.write(events);
        await conn.write(new TextEncoder().encode("\r\n"));
        conn.close();
      })().catch(() => {});
    }
  })().catch(() => {});
  return { url: `http://127.0.0.1:${port}`, close: () => listener.close() };
}

for (const kind of KINDS) {
  Deno.test(`${kind}: a connection dropped inside the answer's body is a stream_cut, charged what was produced`, async () => {
    const upstream = droppingUpstream(kind);
    try {
      await withBaseUrl(kind, upstream.url, async (s, apiKey, appId) => {
        const streamed = await ask(s, apiKey, true);
        assert.equal(streamed.status, 200);
        const { last, content } = await readStream(streamed);
        assert.equal(content, PIECES.join(""));
        assert.equal(JSON.parse(last).error.code, "stream_interrupted");
        const whole = await ask(s, apiKey, false);
        await assertError(whole, 502, "upstream_interrupted");
        assert.equal(whole.headers.get("tollbooth-request-cost"), (cutCost(kind) / 1e6).toFixed(6));
        // The provider failed mid-answer: counted as such, not as a provider we could not reach.
        assert.deepEqual(failures(s), ["stream_cut", "stream_cut"]);
        assert.equal((await s.wallet(appId)).available, START - 2 * cutCost(kind));
      });
    } finally {
      upstream.close();
    }
  });

  Deno.test(`${kind}: connection refused is 502 provider_unreachable, nothing charged`, async () => {
    const port = closedPort();
    await withBaseUrl(kind, `http://127.0.0.1:${port}`, async (s, apiKey, appId) => {
      await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
      assert.deepEqual(failures(s), ["unreachable", "unreachable"]);
    });
  });

  Deno.test(`${kind}: DNS failure is 502 provider_unreachable, nothing charged`, () =>
    withBaseUrl(kind, "http://upstream.tollbooth.invalid", async (s, apiKey, appId) => {
      await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
    }, 3000));

  Deno.test(`${kind}: TLS failure (https to a plain-HTTP port) is 502, nothing charged`, async () => {
    const plain = serveLoopback(() => new Response("plain"));
    try {
      await withBaseUrl(kind, `https://127.0.0.1:${plain.port}`, async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.deepEqual(failures(s), ["unreachable", "unreachable"]);
        // Never answered as HTTP: nothing a provider would bill.
        assert.deepEqual(abandoned(s), { logged: [], counted: 0 });
      });
    } finally {
      await plain.close();
    }
  });

  Deno.test(`${kind}: an upstream that accepts but never answers times out: 502, nothing charged`, async () => {
    const silent = silentListener();
    try {
      await withBaseUrl(kind, silent.url, async (s, apiKey, appId) => {
        const [plain] = await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.match(plain.error.message, /timeout/);
        assert.deepEqual(failures(s), ["timeout", "timeout"]);
        // Sent, then given up: what the provider may bill for them is reported, not charged.
        const { logged, counted } = abandoned(s);
        assert.equal(logged.length, 2);
        for (const exposure of logged) assert.ok((exposure as number) > 0);
        assert.equal(counted, (logged[0] as number) + (logged[1] as number));
      }, 300);
    } finally {
      silent.close();
    }
  });

  Deno.test(`${kind}: headers but no first byte within the timeout: 502, nothing charged`, () =>
    withFake(
      kind,
      () => sseResponse([], { stall: true, headers: { "content-type": "application/json" } }),
      async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.deepEqual(failures(s), ["timeout", "timeout"]);
        assert.equal(abandoned(s).logged.length, 2);
      },
      300,
    ));

  for (const name of ["api_error", "overloaded"]) {
    Deno.test(`${kind}: upstream ${name} (5xx) is 502 provider_unreachable, nothing charged`, () =>
      withFake(kind, () => errorFixture(kind, name), async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.deepEqual(failures(s), ["upstream_error", "upstream_error"]);
      }));
  }

  Deno.test(`${kind}: upstream 429 is our 429 upstream_rate_limited with its Retry-After, nothing charged`, () =>
    withFake(kind, () => errorFixture(kind, "rate_limit"), async (s, apiKey, appId) => {
      const results = await assertBothFail(s, apiKey, appId, 429, "upstream_rate_limited");
      for (const { headers } of results) assert.equal(headers.get("retry-after"), "17");
    }));

  for (
    const retryAfter of ["2300000000", new Date(Date.now() + 365 * 86_400_000).toUTCString()]
  ) {
    Deno.test(`${kind}: an upstream Retry-After past a minute (${retryAfter}) is relayed as 60 s`, () =>
      withFake(
        kind,
        () => {
          const answer = errorFixture(kind, "rate_limit");
          answer.headers.set("retry-after", retryAfter);
          return answer;
        },
        async (s, apiKey, appId) => {
          const results = await assertBothFail(s, apiKey, appId, 429, "upstream_rate_limited");
          for (const { headers, error } of results) {
            assert.equal(headers.get("retry-after"), "60");
            assert.match(error.message, /retry after 60 s/);
          }
        },
      ));
  }

  // OpenAI sends both; the openai SDK waits `retry-after-ms` first.
  for (
    const [sent, relayed] of [
      [{ "retry-after-ms": "1500", "retry-after": "2" }, { ms: "1500", seconds: "2" }],
      [{ "retry-after-ms": "327" }, { ms: "327", seconds: "1" }],
      [{ "retry-after": "17" }, { ms: "17000", seconds: "17" }],
      [{ "retry-after-ms": "90000", "retry-after": "90" }, { ms: "60000", seconds: "60" }],
      [{ "retry-after-ms": "200", "retry-after": "30" }, { ms: "30000", seconds: "30" }],
      // A blank header names no wait (the openai SDK reads it as none), not a wait of 0.
      [{ "retry-after-ms": "" }, { ms: "1000", seconds: "1" }],
    ] as const
  ) {
    Deno.test(`${kind}: upstream 429 with ${JSON.stringify(sent)} is relayed as retry-after-ms ${relayed.ms} and Retry-After ${relayed.seconds}, the same wait`, () =>
      withFake(
        kind,
        () => {
          const answer = errorFixture(kind, "rate_limit");
          answer.headers.delete("retry-after");
          for (const [name, value] of Object.entries(sent)) answer.headers.set(name, value);
          return answer;
        },
        async (s, apiKey, appId) => {
          const results = await assertBothFail(s, apiKey, appId, 429, "upstream_rate_limited");
          for (const { headers } of results) {
            assert.equal(headers.get("retry-after-ms"), relayed.ms);
            assert.equal(headers.get("retry-after"), relayed.seconds);
          }
        },
      ));
  }

  Deno.test(`${kind}: upstream 400 context too long is 400 context_length_exceeded with its reason, nothing charged`, () =>
    withFake(kind, () => errorFixture(kind, "context_too_long"), async (s, apiKey, appId) => {
      const [{ error }] = await assertBothFail(s, apiKey, appId, 400, "context_length_exceeded");
      assert.match(error.message, kind === "openai" ? /maximum context length/ : /too long/);
    }));

  Deno.test(`${kind}: other upstream 400 is 400 upstream_rejected with its reason, nothing charged`, () =>
    withFake(kind, () => errorFixture(kind, "invalid_request"), async (s, apiKey, appId) => {
      const [{ error }] = await assertBothFail(s, apiKey, appId, 400, "upstream_rejected");
      assert.match(error.message, kind === "openai" ? /frobnicate/ : /temperature/);
    }));

  for (const name of ["authentication", "permission"]) {
    Deno.test(`${kind}: upstream ${name} (401/403) is 502, logged at level error, nothing charged`, () =>
      withFake(kind, () => errorFixture(kind, name), async (s, apiKey, appId) => {
        const [{ error }] = await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.doesNotMatch(error.message, /key/i, "our credentials are not the client's business");
        const loud = s.logs.filter((l) => l.event === "upstream_credentials_refused");
        assert.equal(loud.length, 2);
        assert.ok(loud.every((l) => l.level === "error" && l.provider === "up"));
      }));
  }

  Deno.test(`${kind}: upstream 404 (a catalog model the upstream lacks) is 502, nothing charged`, () =>
    withFake(
      kind,
      () =>
        Response.json({ error: { message: "The model `up-model` does not exist" } }, {
          status: 404,
        }),
      async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.deepEqual(failures(s), ["upstream_error", "upstream_error"]);
      },
    ));

  Deno.test(`${kind}: upstream 402 (our billing) is 502 logged at level error, nothing charged`, () =>
    withFake(
      kind,
      () => Response.json({ error: { message: "credit balance too low" } }, { status: 402 }),
      async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.ok(
          s.logs.some((l) => l.event === "upstream_credentials_refused" && l.level === "error"),
        );
      },
    ));

  Deno.test(`${kind}: our account out of credit (OpenAI's 429 insufficient_quota, Anthropic's 400 credit balance) is 502 logged at level error, not a rate limit to retry, nothing charged`, () =>
    withFake(
      kind,
      () =>
        kind === "openai"
          ? Response.json({
            error: {
              message:
                "You exceeded your current quota, please check your plan and billing details.",
              type: "insufficient_quota",
              code: "insufficient_quota",
              param: null,
            },
          }, { status: 429 })
          : Response.json({
            type: "error",
            error: {
              type: "invalid_request_error",
              message:
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            },
          }, { status: 400 }),
      async (s, apiKey, appId) => {
        const results = await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        for (const { headers, error } of results) {
          assert.equal(headers.get("retry-after"), null);
          assert.doesNotMatch(error.message, /credit|quota/i, "our billing is not the client's");
        }
        assert.ok(
          s.logs.some((l) => l.event === "upstream_credentials_refused" && l.level === "error"),
        );
      },
    ));

  Deno.test(`${kind}: malformed JSON before any byte reached the client is 502, nothing charged`, () =>
    withFake(
      kind,
      async (req) => {
        const broken = '{"id": "chatcmpl-broken", "choices": [';
        return (await req.json()).stream
          ? sseResponse([`data: ${broken}\n\n`])
          : new Response(broken, { headers: { "content-type": "application/json" } });
      },
      async (s, apiKey, appId) => {
        await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
        assert.deepEqual(failures(s), ["malformed_response", "malformed_response"]);
      },
    ));

  Deno.test(`${kind}: malformed JSON mid-stream charges what was produced and ends in an error event`, () =>
    withFake(
      kind,
      () => sseResponse([...streamStart(kind), 'data: {"choices": [{"delta"\n\n']),
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, true);
        assert.equal(res.status, 200);
        const { last, content } = await readStream(res);
        assert.equal(content, PIECES.join(""));
        assert.equal(JSON.parse(last).error.code, "stream_interrupted");
        assert.equal((await s.wallet(appId)).available, START - cutCost(kind));
      },
    ));

  Deno.test(`${kind}: a stream cut after some chunks charges what was produced; no [DONE], an error event`, () =>
    withFake(kind, () => sseResponse(streamStart(kind)), async (s, apiKey, appId) => {
      const res = await s.chat(apiKey, {
        model: "up/m",
        messages: userMessage(PROMPT),
        max_tokens: 100,
        stream: true,
        stream_options: { include_usage: true },
      });
      assert.equal(res.status, 200);
      const { data, last, content, chunks } = await readStream(res);
      assert.equal(content, PIECES.join(""));
      assert.ok(!data.includes("[DONE]"));
      const error = JSON.parse(last).error;
      assert.equal(error.code, "stream_interrupted");
      // The usage chunk before the error says what was charged.
      const usage = chunks.findLast((c) => c.usage)?.usage;
      assert.equal(usage.completion_tokens, producedTokens(kind));
      const charged = cutCost(kind);
      assert.equal(usage.cost, (charged / 1e6).toFixed(6));
      assert.equal((await s.wallet(appId)).available, START - charged);
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.outcome, "upstream_cut");
      assert.equal(record.countedLocally, true);
      assert.equal(record.cost, charged);
    }));

  Deno.test(`${kind}: a stream that stalls past the timeout is cut and charged what was produced`, () =>
    withFake(
      kind,
      () => sseResponse(streamStart(kind), { stall: true }),
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, true);
        assert.equal(res.status, 200);
        const { last, content } = await readStream(res);
        assert.equal(content, PIECES.join(""));
        const error = JSON.parse(last).error;
        assert.equal(error.code, "stream_interrupted");
        assert.match(error.message, /no data from upstream for 300 ms/);
        assert.equal((await s.wallet(appId)).available, START - cutCost(kind));
      },
      300,
    ));

  Deno.test(`${kind}: a non-streamed answer cut after it began is 502 upstream_interrupted and charged what was produced`, () =>
    withFake(kind, () => sseResponse(streamStart(kind)), async (s, apiKey, appId) => {
      const res = await ask(s, apiKey, false);
      const error = await assertError(res, 502, "upstream_interrupted");
      const charged = cutCost(kind);
      assert.match(
        error.message,
        new RegExp(`were charged \\(${(charged / 1e6).toFixed(6)} USD\\)`),
      );
      assert.equal(res.headers.get("tollbooth-request-cost"), (charged / 1e6).toFixed(6));
      assert.equal((await s.wallet(appId)).available, START - charged);
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(record.outcome, "upstream_cut");
      assert.equal(record.streamed, false);
      assert.equal(record.cost, charged);
      assert.equal(res.headers.get("tollbooth-provider"), record.provider, "who served is named");
    }));

  Deno.test(`${kind}: a non-streamed answer cut after it began says x-should-retry: false, so the openai SDK with its default retries runs and charges it once`, async () => {
    let calls = 0;
    await withFake(kind, () => {
      calls++;
      return sseResponse(streamStart(kind));
    }, async (s, apiKey, appId) => {
      const gateway = serveLoopback(s.handle);
      try {
        // maxRetries left at the SDK's default (2): a 502 is retried unless the server says not.
        const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey });
        const failed = await client.chat.completions.create({
          model: "up/m",
          messages: [{ role: "user", content: PROMPT }],
          max_tokens: 100,
        }).then(() => null, (error: unknown) => error);
        assert.ok(failed instanceof OpenAI.APIError);
        assert.equal(failed.status, 502);
        assert.equal(failed.headers?.get("x-should-retry"), "false");
        assert.equal(calls, 1);
        assert.equal((await s.wallet(appId)).available, START - cutCost(kind));
      } finally {
        await gateway.close();
      }
    });
  });

  Deno.test(`${kind}: a non-streamed answer that stalls past the timeout after it began is 502 upstream_interrupted and charged what was produced`, () =>
    withFake(
      kind,
      () => sseResponse(streamStart(kind), { stall: true }),
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, false);
        const error = await assertError(res, 502, "upstream_interrupted");
        assert.match(error.message, /no data from upstream for 300 ms/);
        assert.equal((await s.wallet(appId)).available, START - cutCost(kind));
      },
      300,
    ));

  Deno.test(`${kind}: a client that disconnects mid-stream aborts the upstream and pays for what was produced`, async () => {
    let upstreamAborted: () => void;
    const aborted = new Promise<void>((resolve) => upstreamAborted = resolve);
    await withFake(
      kind,
      (req) => {
        req.signal.addEventListener("abort", () => upstreamAborted());
        return sseResponse(streamStart(kind), { stall: true, onCancel: () => upstreamAborted() });
      },
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, true);
        assert.equal(res.status, 200);
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let seen = "";
        while ((seen.match(/"content":"[^"]+"/g) ?? []).length < PIECES.length) {
          const { value, done } = await reader.read();
          assert.ok(!done);
          seen += value;
        }
        await reader.cancel();
        await aborted;
        await s.wallets.drain();
        const wallet = await s.wallet(appId);
        assert.equal(wallet.available, START - cutCost(kind));
        const [record] = await usageRecords(s.kv, appId);
        assert.equal(record.outcome, "client_closed");
        assert.equal(record.countedLocally, true);
        assert.equal(record.completionTokens, producedTokens(kind));
      },
      5000,
    );
  });
}

/** An OpenAI-kind stream of `deltas` (anything in a choice's delta) with its usage, then [DONE]. */
function openAiStream(deltas: unknown[], usage: Record<string, unknown>) {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${
      JSON.stringify({ id: "chatcmpl-odd", object: "chat.completion.chunk", choices, ...extra })
    }\n\n`;
  return sseResponse([
    ...deltas.map((delta) => chunk([{ index: 0, delta, finish_reason: null }])),
    chunk([{ index: 0, delta: {}, finish_reason: "stop" }]),
    chunk([], { usage }),
    "data: [DONE]\n\n",
  ]);
}

for (const endpoint of ["chat", "responses"] as const) {
  Deno.test(`openai, ${endpoint}: a delta that is a string or a number is emptied: a non-streamed answer is 200, charged once as its header says`, () =>
    withFake(
      "openai",
      () =>
        openAiStream([{ role: "assistant", content: "" }, "hello", 7, { content: "Hi" }], {
          prompt_tokens: 10,
          completion_tokens: 5,
          total_tokens: 15,
        }),
      async (s, apiKey, appId) => {
        const res = endpoint === "chat"
          ? await ask(s, apiKey, false)
          : await s.post(apiKey, "/responses", {
            model: "up/m",
            input: PROMPT,
            max_output_tokens: 100,
          });
        assert.equal(res.status, 200, await res.clone().text());
        await res.body?.cancel();
        const [record] = await usageRecords(s.kv, appId);
        assert.equal(record.cost, cost(10, 5));
        assert.equal(res.headers.get("tollbooth-request-cost"), (record.cost / 1e6).toFixed(6));
        assert.equal((await s.wallet(appId)).available, START - record.cost);
      },
    ));
}

Deno.test("openai: a usage past what any model can bill is read as none: the answer is charged by our count, and the audit still adds up", () =>
  withFake(
    "openai",
    () =>
      openAiStream(
        [{ role: "assistant", content: "" }, ...PIECES.map((content) => ({ content }))],
        {
          prompt_tokens: 2 ** 53 - 1,
          completion_tokens: 5,
        },
      ),
    async (s, apiKey, appId) => {
      for (let i = 0; i < 2; i++) {
        const res = await ask(s, apiKey, false);
        assert.equal(res.status, 200);
        await res.body?.cancel();
      }
      const records = await usageRecords(s.kv, appId);
      for (const record of records) {
        assert.equal(record.countedLocally, true);
        assert.equal(record.uncharged, 0);
      }
      assert.equal((await s.wallet(appId)).available, START - 2 * records[0].cost);
    },
  ));

Deno.test("openai: a data line trickled a byte at a time is silence: the upstream is cut at its timeout, not held while it trickles", async () => {
  let cut = false;
  // 20 s of "x", one a tenth of the timeout apart: never a line's end.
  const trickle = () =>
    sseResponse(streamStart("openai"), {
      paced: { everyMs: 50, count: 400, piece: (i) => i === 0 ? "data: x" : "x" },
      onCancel: () => cut = true,
    });
  await withFake("openai", trickle, async (s, apiKey, appId) => {
    const res = await ask(s, apiKey, false);
    await assertError(res, 502, "upstream_interrupted");
    // The request ended at the timeout; the upstream hears of the cut once its connection closes.
    await until(() => cut, "the upstream was cut while it still trickled");
    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.cost, cutCost("openai"));
  }, 500);
});

Deno.test("openai: a usage whose total is wrong and whose cached tokens pass the prompt reaches the client as billed, in the documented shape", () =>
  withFake(
    "openai",
    () =>
      openAiStream([{ role: "assistant", content: "" }, { content: "Hi" }], {
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: -100,
        prompt_tokens_details: { cached_tokens: 60 },
      }),
    async (s, apiKey, appId) => {
      // s.chat holds the answer to the OpenAPI document.
      const res = await ask(s, apiKey, false);
      assert.equal(res.status, 200);
      const { usage } = await res.json();
      assert.equal(usage.total_tokens, 15);
      assert.equal(usage.prompt_tokens_details.cached_tokens, 10);
      const [record] = await usageRecords(s.kv, appId);
      assert.equal(usage.cost, (record.cost / 1e6).toFixed(6));
    },
  ));

for (const stream of [false, true]) {
  Deno.test(`openai: a stream that is only [DONE] answered nothing: 502 provider_unreachable, nothing charged${stream ? ", streamed" : ""}`, () =>
    withFake("openai", () => sseResponse(["data: [DONE]\n\n"]), async (s, apiKey, appId) => {
      const res = await ask(s, apiKey, stream);
      await assertError(res, 502, "provider_unreachable");
      assert.equal((await s.wallet(appId)).available, START);
      assert.deepEqual(await usageRecords(s.kv, appId), []);
    }));
}

for (const stream of [false, true]) {
  Deno.test(`openai: a server that ignores stream and answers the whole completion as JSON is served and charged its usage${stream ? ", streamed" : ""}`, () =>
    withFake(
      "openai",
      () =>
        Response.json({
          id: "chatcmpl-whole",
          object: "chat.completion",
          created: 1733000000,
          model: "up-model",
          choices: [{
            index: 0,
            message: { role: "assistant", content: "Once upon a time" },
            logprobs: null,
            finish_reason: "stop",
          }],
          usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
        }),
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, stream);
        assert.equal(res.status, 200);
        const content = await answerText(res, stream);
        assert.equal(content, "Once upon a time");
        const [record] = await usageRecords(s.kv, appId);
        assert.equal(record.outcome, "completed");
        assert.equal(record.cost, cost(10, 5));
        assert.equal((await s.wallet(appId)).available, START - cost(10, 5));
      },
    ));
}

Deno.test("openai: an error object answered with 200 is the upstream's error, its reason logged: 502 provider_unreachable, nothing charged", () =>
  withFake(
    "openai",
    () => Response.json({ error: { message: "model overloaded", type: "server_error" } }),
    async (s, apiKey, appId) => {
      await assertBothFail(s, apiKey, appId, 502, "provider_unreachable");
      assert.deepEqual(failures(s), ["upstream_error", "upstream_error"]);
      const logged = s.logs.filter((l) => l.path === "/v1/chat/completions")
        .map((l) => (l.upstreamError as { message: string; type: string }));
      for (const error of logged) {
        assert.equal(error.message, "upstream failed: model overloaded");
        assert.equal(error.type, "server_error");
      }
      assert.deepEqual(await usageRecords(s.kv, appId), []);
    },
  ));

/** Each other kind's whole answer (the fixtures) with the counts it reports and its text. */
const WHOLE_ANSWERS = {
  anthropic: {
    fixture: "anthropic_message_basic.json",
    prompt: 12,
    completion: 6,
    name: "message",
  },
  openai_responses: {
    fixture: "openai_response_basic.json",
    prompt: 36,
    completion: 87,
    name: "response",
  },
} as const;

for (const [kind, answer] of Object.entries(WHOLE_ANSWERS)) {
  for (const stream of [false, true]) {
    Deno.test(`${kind}: a server that ignores stream and answers the whole ${answer.name} as JSON is served and charged its usage${stream ? ", streamed" : ""}`, () =>
      withFake(
        kind as keyof typeof WHOLE_ANSWERS,
        () => Response.json(fixtureJson(answer.fixture)),
        async (s, apiKey, appId) => {
          const res = await ask(s, apiKey, stream);
          assert.equal(res.status, 200, await res.clone().text());
          const content = await answerText(res, stream);
          const whole = fixtureJson<Record<string, unknown>>(answer.fixture);
          const text = kind === "anthropic"
            ? (whole as { content: { text: string }[] }).content[0].text
            : (whole as { output: { content: { text: string }[] }[] }).output[0].content[0].text;
          assert.equal(content, text);
          const [record] = await usageRecords(s.kv, appId);
          assert.equal(record.outcome, "completed");
          assert.equal(record.cost, cost(answer.prompt, answer.completion));
          assert.equal((await s.wallet(appId)).available, START - record.cost);
        },
      ));
  }
}

Deno.test("openai: a reasoning stream its client left, whose upstream will not stop, is cut once past what its cap could produce, and charged the cap", async () => {
  let cut = false;
  // Words past any cap, a chunk every 5 ms, for 30 s: far longer than the cap allows.
  const words = { choices: [{ index: 0, delta: { content: "word ".repeat(50) } }] };
  const endless = () =>
    sseResponse(streamStart("openai"), {
      paced: { everyMs: 5, count: 6_000, piece: () => `data: ${JSON.stringify(words)}\n\n` },
      onCancel: () => cut = true,
    });
  await withFake("openai", endless, async (s, apiKey, appId) => {
    const res = await s.chat(apiKey, {
      model: "up/m",
      messages: userMessage(PROMPT),
      max_tokens: 10,
      reasoning_effort: "low",
      stream: true,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    await until(async () => (await s.wallet(appId)).reserved === 0, "settled");
    // The upstream hears of the cut once its connection closes, a moment after the settle.
    await until(() => cut, "the upstream was cut");
    const [record] = await usageRecords(s.kv, appId);
    assert.equal(record.completionTokens, 10);
  }, 5000);
});

for (const stream of [false, true]) {
  Deno.test(`openai: an event stream labelled application/json is read as the stream it is and charged its usage${stream ? ", streamed" : ""}`, () =>
    withFake(
      "openai",
      () =>
        sseResponse([
          ...streamStart("openai"),
          openAiChunk({}, {
            finishReason: "stop",
            usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
          }),
          "data: [DONE]\n\n",
        ], { headers: { "content-type": "application/json" } }),
      async (s, apiKey, appId) => {
        const res = await ask(s, apiKey, stream);
        assert.equal(res.status, 200, await res.clone().text());
        const content = await answerText(res, stream);
        assert.equal(content, PIECES.join(""));
        const [record] = await usageRecords(s.kv, appId);
        assert.equal(record.cost, cost(10, 5));
      },
    ));
}
