import assert from "node:assert/strict";
import { ProviderError } from "./providers/types.ts";
import {
  MAX_LOGGED_MESSAGE,
  readableEscapes,
  requestTexts,
  upstreamErrorLog,
  withoutQuotes,
} from "./upstream_log.ts";

Deno.test("a run of 8 or more characters the request holds is replaced by its length", () => {
  const prompt = "my card number is 4111-1111-1111-1111, keep it";
  assert.equal(
    withoutQuotes(`Refused input '${prompt}' (policy 7)`, [prompt]),
    `Refused input '[${prompt.length} chars]' (policy 7)`,
  );
  // A quote cut short or taken from the middle is a quote all the same.
  assert.equal(withoutQuotes("saw: 1111-1111-1111 ...", [prompt]), "saw: [14 chars] ...");
});

Deno.test("words shorter than 8 characters that a message shares with the prompt stay", () => {
  assert.equal(
    withoutQuotes("Invalid value for temperature", ["the value is wrong"]),
    "Invalid value for temperature",
  );
});

Deno.test("a quote at the end of megabytes of request is found", () => {
  const input = "x".repeat(4 * 1024 * 1024) + " the hidden tail sentence";
  assert.equal(withoutQuotes("echo: hidden tail sentence", [input]), "echo:[21 chars]");
});

Deno.test("a request's texts leave out its model, roles and part types", () => {
  const texts = requestTexts({
    model: "openai/gpt-4o-mini",
    messages: [
      { role: "assistant", content: "an earlier answer" },
      {
        role: "user",
        content: [{ type: "image_url", image_url: { url: "https://x.test/a.png" } }],
      },
    ],
    params: { tools: [{ type: "function", function: { description: "looks up orders" } }] },
  });
  assert.deepEqual(
    texts.sort(),
    ["an earlier answer", "https://x.test/a.png", "looks up orders"],
  );
});

Deno.test("keys named model, role or type that the client chose (metadata, a tool's schema) are its texts", () => {
  const texts = requestTexts({
    model: "openai/gpt-4o-mini",
    messages: [{ role: "user", content: "hello" }],
    params: {
      metadata: { role: "patient has a confidential diagnosis" },
      tools: [{
        type: "function",
        function: {
          parameters: {
            type: "object",
            properties: { model: { type: "string", description: "the vault's combination" } },
          },
        },
      }],
    },
  });
  assert.deepEqual(texts.sort(), [
    "patient has a confidential diagnosis",
    "the vault's combination",
  ]);
});

Deno.test('a quote the upstream escaped as JSON or Python does (\\uXXXX, \\x41, \\") is still a quote', () => {
  const prompt = "Пароль от сейфа: лебедь-гармошка";
  const escaped = JSON.stringify(prompt).replace(
    /[^\x20-\x7e]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  const logged = upstreamErrorLog(
    new ProviderError("bad_request", `Bad input: ${escaped}`, { upstreamStatus: 400 }),
    () => [prompt],
  );
  assert.equal(logged.message, `Bad input: "[${prompt.length} chars]"`);
  assert.equal(readableEscapes("\\x41\\\\u0041 \\'q\\' \\n"), "A\\u0041 'q' \n");
});

Deno.test("a logged upstream error keeps status, type, code and param, its message bounded after a word", () => {
  const prompt = "secret plan: meet at the old mill";
  const message = `${"word ".repeat(60)}quoting ${prompt}`;
  const logged = upstreamErrorLog(
    new ProviderError("bad_request", message, {
      upstreamStatus: 400,
      upstreamError: { type: "invalid_request_error", code: "bad", param: "messages[0]" },
    }),
    () => [prompt],
  );
  assert.deepEqual({ ...logged, message: undefined }, {
    kind: "bad_request",
    status: 400,
    type: "invalid_request_error",
    code: "bad",
    param: "messages[0]",
    message: undefined,
  });
  assert.ok(logged.message.length <= MAX_LOGGED_MESSAGE);
  assert.match(logged.message, /^(word )+word…$/);
});

Deno.test("an error that is not the upstream's is logged as unreachable, scrubbed alike", () => {
  const logged = upstreamErrorLog(new TypeError("reset while sending 'hello there world'"), () => [
    "hello there world",
  ]);
  assert.equal(logged.kind, "unreachable");
  assert.equal(logged.status, null);
  assert.equal(logged.message, "reset while sending '[17 chars]'");
});
