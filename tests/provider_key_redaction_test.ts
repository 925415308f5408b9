/**
 * No provider credential ever leaves: an upstream that quotes our key back (whole, cut short or
 * masked), in an error answer or in a stream's error event, whatever header carried it, reaches
 * neither the client nor a log line.
 */
import assert from "node:assert/strict";
import type { CatalogFile } from "@/lib/catalog/catalog.ts";
import {
  assertAuditClean,
  PUBLIC_URL,
  serveLoopback,
  startService,
  type TestService,
  userMessage,
} from "./helpers.ts";
import { sseResponse } from "./upstreams.ts";
import { clientSafe, REDACTED } from "@/lib/gateway/redact.ts";

const OPENAI_KEY = "sk-proj-T7vQ2mX9kL4pR8wZ1cN6bY3hJ5dF0aGe";
const ANTHROPIC_KEY = "sk-ant-api03-Wm4Zx8Qp2Lr6Tv1Nc9Hb3Ky7Fd5Js0Ga-Xy12";

/** Every way an upstream may quote the key it was sent. */
function quotes(key: string): Record<string, string> {
  return {
    whole: `Invalid API key ${key}.`,
    cut: `Key ${key.slice(0, 24)}... is disabled.`,
    cut12: `Key ${key.slice(0, 12)}... is disabled.`,
    masked: `Incorrect API key provided: ${key.slice(0, 7)}${"*".repeat(24)}${key.slice(-4)}.`,
    ellipsis: `Key ${key.slice(0, 7)}...${key.slice(-4)} has no access to this model.`,
  };
}

/**
 * An upstream of either wire format whose prompt's first line says what to answer:
 * `status:<n>:<quote>` an error with that status quoting the key, `stream:<quote>` a stream that
 * fails with that quote after its first text, `echo:<text>` a 400 quoting the text back (as vLLM's
 * validation errors quote the input), `property` a 400 naming the first tool's first property (as
 * OpenAI's strict schema errors do), `stop` a 400 quoting the first stop sequence, `param` a 400
 * naming a field that holds the key, `print:<n>` a 400 quoting the prompt, then the key's first n
 * characters, `overflow` a 400 quoting the key just before a context overflow's words. Lines
 * after the
 * first are the client's own (a client's guesses at our key).
 */
function quotingUpstream(kind: "openai" | "anthropic") {
  return serveLoopback(async (req) => {
    const body = await req.json();
    const key = kind === "openai"
      ? (req.headers.get("authorization") ?? "").replace(/^Bearer /, "")
      : req.headers.get("x-api-key") ?? "";
    const prompt: string = body.messages.at(-1).content;
    const [mode, ...rest] = prompt.split("\n")[0].split(":");
    const refuse = (message: string) =>
      Response.json({ error: { message, type: "invalid_request_error" } }, { status: 400 });
    if (mode === "echo") return refuse(`Invalid value: '${rest.join(":")}'.`);
    if (mode === "property") {
      const tools = kind === "openai"
        ? body.tools.map((t: { function: { parameters: unknown } }) => t.function.parameters)
        : body.tools.map((t: { input_schema: unknown }) => t.input_schema);
      const [name] = Object.keys(tools[0].properties);
      return refuse(`Invalid schema for function 'f': In context=('properties', '${name}').`);
    }
    if (mode === "print") {
      // A key printed up to a point after the client's text: a cut the client can place.
      return refuse(
        `Request '${prompt}' refused for key ${key.slice(0, Number(rest[0]))}`,
      );
    }
    if (mode === "overflow") return refuse(`Key ${key}: maximum 10 tokens per request.`);
    if (mode === "param") {
      const error = { message: "Invalid header value.", param: `authorization=Bearer ${key}` };
      return Response.json({ error }, { status: 400 });
    }
    if (mode === "stop") {
      return refuse(`Invalid stop sequence '${(body.stop ?? body.stop_sequences)[0]}'.`);
    }
    const quote = quotes(key)[rest.at(-1)!];
    if (mode === "status") {
      const status = Number(rest[0]);
      const error = kind === "openai"
        ? { error: { message: quote, type: "invalid_request_error", code: "invalid_api_key" } }
        : { type: "error", error: { type: "invalid_request_error", message: quote } };
      return Response.json(error, { status });
    }
    if (kind === "openai") {
      const chunk = {
        id: "chatcmpl-1",
        object: "chat.completion.chunk",
        created: 1,
        model: "m",
        choices: [{
          index: 0,
          delta: { role: "assistant", content: "Hello" },
          finish_reason: null,
        }],
      };
      return sseResponse([
        `data: ${JSON.stringify(chunk)}\n\n`,
        `data: ${JSON.stringify({ error: { message: quote, type: "server_error" } })}\n\n`,
      ]);
    }
    const event = (type: string, data: unknown) =>
      `event: ${type}\ndata: ${JSON.stringify({ type, ...data as object })}\n\n`;
    return sseResponse([
      event("message_start", {
        message: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          content: [],
          model: "m",
          usage: { input_tokens: 5, output_tokens: 1 },
        },
      }),
      event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello" } }),
      event("error", { error: { type: "overloaded_error", message: quote } }),
    ]);
  });
}

function catalog(openaiUrl: string, anthropicUrl: string): CatalogFile {
  const model = (id: string, provider: string) => ({
    id,
    provider,
    upstream_model: "m",
    input_usd_per_mtok: "2.00",
    output_usd_per_mtok: "8.00",
    context_tokens: 200_000,
    max_output_tokens: 8192,
  });
  return {
    providers: {
      gpt: { kind: "openai", base_url: openaiUrl, api_key_env: "OPENAI_KEY", timeout_ms: 2000 },
      claude: {
        kind: "anthropic",
        base_url: anthropicUrl,
        api_key_env: "ANTHROPIC_KEY",
        timeout_ms: 2000,
      },
    },
    models: [model("gpt/m", "gpt"), model("claude/m", "claude")],
  };
}

/** A service whose two models' upstreams quote our keys (quotingUpstream), with an app's key. */
async function withQuotingUpstreams(
  fn: (s: TestService, apiKey: string) => Promise<void>,
  log?: (fields: Record<string, unknown>) => void,
  keys = { OPENAI_KEY, ANTHROPIC_KEY },
) {
  const openai = quotingUpstream("openai");
  const anthropic = quotingUpstream("anthropic");
  const s = await startService({
    catalogFile: catalog(openai.url, anthropic.url),
    env: keys,
    log,
  });
  try {
    await fn(s, (await s.newApp()).apiKey);
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await openai.close();
    await anthropic.close();
  }
}

/**
 * What of a key a text gives away: any eight of its characters in a row, or (`masks`: in a log) its
 * last four after a mask. A client may read a masked print's four: they are all one gives away.
 */
function leaks(text: string, key: string, masks = true): string | null {
  for (let i = 0; i + 8 <= key.length; i++) {
    if (text.includes(key.slice(i, i + 8))) return key.slice(i, i + 8);
  }
  if (!masks) return null;
  return new RegExp(`[*.…]${key.slice(-4)}`).test(text) ? key.slice(-4) : null;
}

/** What a client is shown of an upstream's text: the same whatever our keys are. */
const shown = (text: string) => clientSafe(text);

Deno.test("an upstream error quoting each provider's key reaches neither the client nor the log", async () => {
  const logs: string[] = [];
  await withQuotingUpstreams(async (s, apiKey) => {
    const answers: string[] = [];
    for (const model of ["gpt/m", "claude/m"]) {
      for (const form of Object.keys(quotes(""))) {
        for (const status of [400, 401, 403, 404, 429, 500]) {
          const res = await s.chat(apiKey, {
            model,
            messages: userMessage(`status:${status}:${form}`),
          });
          answers.push(`${res.status} ${await res.text()}`);
        }
        const res = await s.chat(apiKey, {
          model,
          messages: userMessage(`stream:${form}`),
          stream: true,
        });
        assert.equal(res.status, 200);
        answers.push(await res.text());
      }
    }
    await s.wallets.drain();
    // The quotes did reach us, redacted: the upstream's reason is still there to read.
    assert.ok(
      answers.some((a) => a.startsWith("400 ") && a.includes("Invalid API key [redacted]")),
    );
    assert.ok(answers.some((a) => a.includes("stream_interrupted") && a.includes("[redacted]")));
    assert.ok(logs.some((l) => l.includes("upstream_credentials_refused")));
    assert.ok(logs.some((l) => l.includes("upstream_stream_failed") && l.includes("[redacted]")));
    for (const key of [OPENAI_KEY, ANTHROPIC_KEY]) {
      for (const [where, lines] of Object.entries({ client: answers, log: logs })) {
        for (const line of lines) {
          assert.equal(
            leaks(line, key, where === "log"),
            null,
            `${key.slice(0, 6)}… leaked to the ${where}: ${line}`,
          );
        }
      }
    }
  }, (fields) => logs.push(JSON.stringify(fields)));
});

/**
 * Each key's public prefix and seven characters more (a guess within a client's reach: 64^7 at
 * most), and the same with its last character wrong.
 */
const GUESSES = {
  right: [OPENAI_KEY.slice(0, 15), ANTHROPIC_KEY.slice(0, 20)],
  wrong: [`${OPENAI_KEY.slice(0, 14)}!`, `${ANTHROPIC_KEY.slice(0, 19)}!`],
};

Deno.test("a client's own text in an error comes back as sent, never searched for our keys", async () => {
  const s = await startService({
    catalogFile: catalog("http://127.0.0.1:9", "http://127.0.0.1:9"),
    env: { OPENAI_KEY: OPENAI_KEY, ANTHROPIC_KEY: ANTHROPIC_KEY },
  });
  try {
    const { apiKey } = await s.newApp();
    const auth = { authorization: `Bearer ${apiKey}` };
    for (const guess of [...GUESSES.right, ...GUESSES.wrong]) {
      const answers = [
        await s.handle(new Request(`${PUBLIC_URL}/v1/x/${guess}`)),
        await s.handle(
          new Request(`${PUBLIC_URL}/v1/responses/resp_${guess}`, { headers: auth }),
        ),
        await s.chat(apiKey, { model: `gpt/${guess}`, messages: userMessage("Hi") }),
        await s.chat(apiKey, { model: "gpt/m", messages: userMessage("Hi"), [guess]: 1 }),
      ];
      for (const res of answers) {
        const { error } = await res.json();
        assert.ok(res.status >= 400 && res.status < 500, `${res.status} ${error.message}`);
        assert.ok(error.message.includes(guess), `${guess} not quoted: ${error.message}`);
        assert.ok(!error.message.includes("[redacted]"), error.message);
      }
    }
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("an upstream's quote of the client's text comes back made safe as any text is, a piece of our key as any other guess", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    const told = async (guess: string) => {
      const res = await s.chat(apiKey, { model: "gpt/m", messages: userMessage(`echo:${guess}`) });
      assert.equal(res.status, 400);
      return (await res.json()).error.message as string;
    };
    for (const guess of [...GUESSES.right, ...GUESSES.wrong]) {
      assert.equal(
        await told(guess),
        `The upstream provider rejected the request: Invalid value: '${shown(guess)}'.`,
      );
    }
  }));

/**
 * Guesses of a client that knows all of what an upstream printed of a key but its last thirteen
 * characters: every twelve of what it knows, each with the next character right and wrong.
 */
function guessesAt(printed: string): string[] {
  const known = printed.length - 13;
  const right = Array.from({ length: Math.max(0, known - 10) }, (_, i) => printed.slice(i, i + 12));
  return [...right, ...right.map((g) => `${g.slice(0, 11)}!`)];
}

Deno.test("an upstream's reason quoting our key reads the same whatever guesses at the key the request holds, short of the whole key", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    for (const [model, key] of [["gpt/m", OPENAI_KEY], ["claude/m", ANTHROPIC_KEY]]) {
      for (const form of ["whole", "cut", "cut12"]) {
        for (const command of [`status:400:${form}`, `stream:${form}`]) {
          const told = async (guesses: string[]) => {
            const res = await s.chat(apiKey, {
              model,
              messages: userMessage([command, ...guesses].join("\n")),
              stream: command.startsWith("stream"),
            });
            // The prompt's length changes only what was charged.
            return (await res.text()).replaceAll(/"(id|created)":[^,]+,|\d+\.\d{6} USD/g, "");
          };
          const bare = await told([]);
          assert.match(bare, /\[redacted\]/, `${model} ${command}: ${bare}`);
          const printed = { whole: key, cut: key.slice(0, 24), cut12: key.slice(0, 12) }[form]!;
          assert.equal(await told(guessesAt(printed)), bare, `${model} ${command}`);
          assert.equal(leaks(bare, key), null, bare);
        }
      }
    }
  }));

Deno.test("an upstream quoting a tool's property name or a short stop sequence shows it made safe as any text, a piece of our key as any other", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    const told = async (body: Record<string, unknown>) => {
      const res = await s.chat(apiKey, body);
      assert.equal(res.status, 400);
      return (await res.json()).error.message as string;
    };
    for (const model of ["gpt/m", "claude/m"]) {
      for (const guess of [...GUESSES.right, ...GUESSES.wrong]) {
        const tool = {
          type: "function",
          function: { name: "f", parameters: { type: "object", properties: { [guess]: {} } } },
        };
        const property = await told({ model, messages: userMessage("property"), tools: [tool] });
        assert.ok(property.includes(`'${shown(guess)}'`), property);
      }
      // A mask and a key's last four characters: a masked print's shape.
      for (const stop of [`..${OPENAI_KEY.slice(-4)}`, `**${ANTHROPIC_KEY.slice(-4)}`, "..zzzz"]) {
        const quoted = await told({ model, messages: userMessage("stop"), stop: [stop] });
        assert.ok(quoted.includes(`'${stop}'`), quoted);
      }
    }
  }));

Deno.test("the field an upstream's rejection names is made safe as its words are", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    const res = await s.chat(apiKey, { model: "gpt/m", messages: userMessage("param") });
    assert.equal(res.status, 400);
    const { error } = await res.json();
    assert.equal(error.param, "authorization=Bearer [redacted]");
    assert.equal(leaks(JSON.stringify(error), OPENAI_KEY), null);
  }));

Deno.test("a client that knows a piece of our key cannot read on through an upstream that echoes its text", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    for (const key of [OPENAI_KEY, ANTHROPIC_KEY]) {
      // Eleven characters it was shown somewhere, and next characters to try, the right one too.
      const seed = key.slice(20, 31);
      const candidates = [key[31], ..."ABCDEFGHIJKLMNO"].map((c) => `${seed}${c}`).join(" ");
      const res = await s.chat(apiKey, {
        model: "gpt/m",
        messages: userMessage(`echo:${candidates}`),
      });
      const { error } = await res.json();
      assert.equal(
        error.message,
        `The upstream provider rejected the request: Invalid value: '${shown(candidates)}'.`,
      );
    }
  }));

Deno.test("a key printed up to a point the client chooses, after text of the client's holding its start, is gone once twelve of it in a row are printed", () =>
  withQuotingUpstreams(async (s, apiKey) => {
    for (const [model, key] of [["gpt/m", OPENAI_KEY], ["claude/m", ANTHROPIC_KEY]]) {
      for (const known of [8, 20]) {
        for (let printed = known + 1; printed <= known + 11; printed++) {
          const res = await s.chat(apiKey, {
            model,
            messages: [
              { role: "system", content: key.slice(0, known) },
              { role: "user", content: `print:${printed}` },
            ],
          });
          const { error } = await res.json();
          if (printed >= 12) {
            assert.ok(
              error.message.endsWith(`for key ${REDACTED}`),
              `${printed}: ${error.message}`,
            );
          } // Fewer than twelve in a row: at most a few past the public prefix, not enough to go on.
          else assert.ok(error.message.includes(key.slice(0, printed)), error.message);
        }
      }
    }
  }));

/**
 * Keys clientSafe cannot hide: a passphrase reads as a field name, a short key is no run of twelve,
 * and a base64 key's `+` and `/` cut it into runs a client could read on their own.
 */
const UNHIDDEN_KEYS = [
  { OPENAI_KEY: "correct_horse_battery_staple", ANTHROPIC_KEY: "sk-local1" },
  {
    OPENAI_KEY: "localgatewaypassword",
    ANTHROPIC_KEY: "ABSKQmVkcm9ja0FQSUtleS1+ZGVm/c3R1dnd4eXo=",
  },
];

Deno.test("a provider whose key clientSafe cannot hide has its reasons withheld from clients and kept in the log", async () => {
  for (const keys of UNHIDDEN_KEYS) {
    const logs: string[] = [];
    await withQuotingUpstreams(
      async (s, apiKey) => {
        const answers: string[] = [];
        for (const model of ["gpt/m", "claude/m"]) {
          for (const prompt of ["status:400:whole", "status:400:cut", "param", "echo:a reason"]) {
            const res = await s.chat(apiKey, { model, messages: userMessage(prompt) });
            const { error } = await res.json();
            assert.equal(res.status, 400);
            assert.equal(error.code, "upstream_rejected");
            assert.equal(
              error.message,
              "The upstream provider rejected the request (its reason is in the operator's log: this provider's messages could quote our key)",
            );
            assert.equal(error.param, undefined);
            answers.push(JSON.stringify(error));
          }
          const res = await s.chat(apiKey, {
            model,
            messages: userMessage("stream:whole"),
            stream: true,
          });
          const streamed = await res.text();
          assert.match(streamed, /The upstream stream failed after it had begun; the tokens/);
          answers.push(streamed);
        }
        await s.wallets.drain();
        for (const key of Object.values(keys)) {
          for (const line of answers) {
            assert.equal(leaks(line, key), null, `${key.slice(0, 6)}… leaked: ${line}`);
          }
          for (const line of logs) {
            assert.equal(leaks(line, key, false), null, `${key.slice(0, 6)}… logged: ${line}`);
          }
        }
        assert.ok(
          logs.some((l) => l.includes("Invalid value: ")),
          "the log has the reason",
        );
      },
      (fields) => logs.push(JSON.stringify(fields)),
      keys,
    );
  }
});

Deno.test("a withheld reason's error code is the same whatever the client sends beside our key", () =>
  withQuotingUpstreams(
    async (s, apiKey) => {
      const key = UNHIDDEN_KEYS[0].OPENAI_KEY;
      const codes = new Set<string>();
      // Each guess at the key's last characters, right or wrong, before the overflow's words.
      for (const c of [key.at(-1)!, "x", "y"]) {
        const res = await s.chat(apiKey, {
          model: "gpt/m",
          messages: [
            { role: "system", content: `${c}: maxim` },
            { role: "user", content: "overflow" },
          ],
        });
        codes.add((await res.json()).error.code);
      }
      assert.deepEqual([...codes], ["context_length_exceeded"]);
    },
    undefined,
    UNHIDDEN_KEYS[0],
  ));
