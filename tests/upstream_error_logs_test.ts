/**
 * An upstream that quotes our request in its error (a compatible server answering 400 with the
 * prompt it refused, a long input echoed back, an error event quoting the answer so far) puts none
 * of that text in the service's log lines, which still say what failed: the upstream's status,
 * error type, code and param. The client's own error keeps the upstream's explanation.
 */
import assert from "node:assert/strict";
import { clientSafe } from "@/lib/gateway/redact.ts";
import { serveLoopback, type TestService, until, userMessage } from "./helpers.ts";
import { sseResponse, startUpstreamService, upstreamModel } from "./upstreams.ts";

const SECRET = "the vault code is quokka-harmonica-5521 and the courier is Zebra Violet";
const PROMPT = `Please keep this between us: ${SECRET}.`;
/** Words of the prompt and of the answer no log line may carry. */
const PRIVATE = ["quokka", "harmonica", "Zebra Violet", "vault code", "marzipan", "lighthouse"];
const OUTPUT = "Understood, marzipan-lighthouse-77 noted";

/** The text of the last message the upstream received, in either wire format. */
function received(body: { messages: { content: string | { text?: string }[] }[] }): string {
  const content = body.messages.at(-1)!.content;
  return typeof content === "string" ? content : content.map((p) => p.text ?? "").join("");
}

/**
 * One server for every provider of the catalog, by its base path: `/rejects` answers 400 quoting
 * the prompt (OpenAI's shape on /chat/completions, Anthropic's on /v1/messages), `/too-long` 400
 * quoting the first 400 characters of a long input, `/fails` 503 quoting it, `/streams` an error
 * event quoting the prompt and the answer it had begun.
 */
function quotingUpstream() {
  return serveLoopback(async (req) => {
    const path = new URL(req.url).pathname;
    const sent = received(await req.json());
    if (path === "/rejects/v1/messages") {
      return Response.json({
        type: "error",
        error: {
          type: "invalid_request_error",
          message: `messages.0.content: "${sent}" is not allowed`,
        },
      }, { status: 400 });
    }
    if (path === "/rejects/chat/completions") {
      return Response.json({
        error: {
          message: `Invalid 'messages[0].content': '${sent}' contains a forbidden phrase.`,
          type: "invalid_request_error",
          param: "messages[0].content",
          code: "content_policy_violation",
        },
      }, { status: 400 });
    }
    if (path === "/too-long/chat/completions") {
      return Response.json({
        error: {
          message: `This model's maximum context length is 512 tokens; your input was: ${
            sent.slice(0, 400)
          }`,
          type: "invalid_request_error",
          param: "messages",
          code: "context_length_exceeded",
        },
      }, { status: 400 });
    }
    if (path === "/fails/chat/completions") {
      return Response.json({
        error: {
          message: `Overloaded while reading "${sent}"`,
          type: "server_error",
          code: "overloaded",
        },
      }, { status: 503 });
    }
    const chunk = {
      id: "chatcmpl-1",
      object: "chat.completion.chunk",
      created: 1,
      model: "m",
      choices: [{ index: 0, delta: { role: "assistant", content: OUTPUT }, finish_reason: null }],
    };
    const error = {
      error: {
        message: `Moderation stopped "${OUTPUT}" in reply to "${sent}"`,
        type: "server_error",
        code: "content_filter",
      },
    };
    return sseResponse([
      `data: ${JSON.stringify(chunk)}\n\n`,
      `data: ${JSON.stringify(error)}\n\n`,
    ]);
  });
}

async function withQuotingUpstream(fn: (s: TestService, apiKey: string) => Promise<void>) {
  const upstream = quotingUpstream();
  const s = await startUpstreamService({
    gpt: { kind: "openai", base_url: `${upstream.url}/rejects` },
    claude: { kind: "anthropic", base_url: `${upstream.url}/rejects` },
    small: { kind: "openai", base_url: `${upstream.url}/too-long` },
    flaky: { kind: "openai", base_url: `${upstream.url}/fails` },
    moderated: { kind: "openai", base_url: `${upstream.url}/streams` },
  }, [
    upstreamModel("flaky/then-gpt", "flaky", "flaky-model", {
      fallbacks: [{ provider: "gpt", upstream_model: "gpt-model" }],
    }),
  ]);
  try {
    const { apiKey } = await s.newApp();
    await fn(s, apiKey);
  } finally {
    await s.close();
    await upstream.close();
  }
}

/** Sends one request; returns the client's answer and the log lines written while it ran. */
async function logged(s: TestService, send: () => Promise<Response>) {
  const from = s.logs.length;
  const res = await send();
  const text = await res.text();
  // A stream's line is written once it is settled, with the next batch of lines.
  await until(() => s.logs.slice(from).some((l) => l.event === "request"), "the request's line");
  const lines = s.logs.slice(from);
  for (const line of lines) {
    const json = JSON.stringify(line);
    for (const word of PRIVATE) {
      assert.ok(!json.includes(word), `"${word}" in the log line ${json}`);
    }
  }
  const request = lines.find((l) => l.event === "request")!;
  return { status: res.status, text, lines, request };
}

Deno.test("a compatible server's 400 quoting the prompt: the client reads it, the log has its status, type, code and param but no prompt", () =>
  withQuotingUpstream(async (s, apiKey) => {
    const { status, text, request } = await logged(
      s,
      () => s.chat(apiKey, { model: "gpt/m", messages: userMessage(PROMPT) }),
    );
    assert.equal(status, 400);
    assert.equal(JSON.parse(text).error.code, "upstream_rejected");
    // As any upstream text is shown: its long key-like runs (`quokka-harmonica-5521`) taken out.
    assert.ok(
      text.includes(clientSafe(SECRET)),
      "the client's error quotes the client's own prompt",
    );
    assert.equal(request.errorCode, "upstream_rejected");
    assert.equal(request.upstreamFailure, "bad_request");
    assert.deepEqual(request.upstreamError, {
      status: 400,
      type: "invalid_request_error",
      code: "content_policy_violation",
      param: "messages[0].content",
      message:
        `Invalid 'messages[0].content': '[${PROMPT.length} chars]' contains a forbidden phrase.`,
    });
  }));

Deno.test("Anthropic's 400 quoting the prompt leaves no prompt in the log, its error type kept", () =>
  withQuotingUpstream(async (s, apiKey) => {
    const { status, request } = await logged(
      s,
      () => s.chat(apiKey, { model: "claude/m", messages: userMessage(PROMPT) }),
    );
    assert.equal(status, 400);
    const upstream = request.upstreamError as Record<string, unknown>;
    assert.equal(upstream.status, 400);
    assert.equal(upstream.type, "invalid_request_error");
    assert.match(
      String(upstream.message),
      /^messages\.0\.content: "\[\d+ chars\]\.?" is not allowed$/,
    );
  }));

Deno.test("a long input echoed in a context-length 400 leaves none of it in the log; the message is bounded", () =>
  withQuotingUpstream(async (s, apiKey) => {
    const long = Array.from({ length: 60 }, (_, i) => `line ${i}: ${SECRET}.`).join("\n");
    const { status, text, request } = await logged(
      s,
      () => s.chat(apiKey, { model: "small/m", messages: userMessage(long) }),
    );
    assert.equal(status, 400);
    assert.equal(JSON.parse(text).error.code, "context_length_exceeded");
    const upstream = request.upstreamError as Record<string, unknown>;
    assert.equal(upstream.code, "context_length_exceeded");
    assert.equal(upstream.param, "messages");
    assert.match(String(upstream.message), /^This model's maximum context length is 512 tokens;/);
    assert.ok(String(upstream.message).length <= 200);
  }));

Deno.test("a provider failing with a 503 quoting the prompt, then a fallback's 400: neither log line quotes it", () =>
  withQuotingUpstream(async (s, apiKey) => {
    const { status, lines, request } = await logged(
      s,
      () => s.chat(apiKey, { model: "flaky/then-gpt", messages: userMessage(PROMPT) }),
    );
    assert.equal(status, 400);
    const fellBack = lines.find((l) => l.event === "upstream_fallback")!;
    assert.equal(fellBack.kind, "upstream_error");
    assert.equal(fellBack.status, 503);
    assert.equal(fellBack.code, "overloaded");
    assert.match(
      String(fellBack.message),
      /^upstream failed: Overloaded while reading "\[\d+ chars\]"$/,
    );
    assert.equal((request.upstreamError as Record<string, unknown>).status, 400);
  }));

Deno.test("an error event quoting the prompt and the answer so far leaves neither in the log", () =>
  withQuotingUpstream(async (s, apiKey) => {
    const { status, text, lines, request } = await logged(
      s,
      () => s.chat(apiKey, { model: "moderated/m", messages: userMessage(PROMPT), stream: true }),
    );
    assert.equal(status, 200);
    assert.ok(text.includes("stream_interrupted"));
    const failed = lines.find((l) => l.event === "upstream_stream_failed")!;
    assert.equal(failed.kind, "stream_cut");
    assert.equal(failed.code, "content_filter");
    assert.match(
      String(failed.message),
      /^upstream error in stream: Moderation stopped "\[\d+ chars\]" in reply to "\[\d+ chars\]"$/,
    );
    assert.equal(request.upstreamFailure, "stream_cut");
    assert.deepEqual(request.upstreamError, {
      status: null,
      type: "server_error",
      code: "content_filter",
      param: null,
      message: failed.message,
    });
  }));
