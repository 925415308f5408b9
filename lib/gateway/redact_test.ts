import assert from "node:assert/strict";
import fc from "fast-check";
import { catalogFromFile } from "@/lib/catalog/mod.ts";
import {
  clientSafe,
  clientSafeHides,
  providerKeyRedactor,
  REDACTED,
  SecretRedactor,
  upstreamReasonsShown,
} from "./redact.ts";

const OPENAI_KEY = "sk-proj-Q3x9VbT2mLk8RwZp4NcY7hJd0aFe";
const ANTHROPIC_KEY = "sk-ant-api03-Hq7Lm2Vx9Pz4Rt8Kc1Wn6Bd3Fy5Gs0Ju-abcd";
const redactor = new SecretRedactor([OPENAI_KEY, ANTHROPIC_KEY]);

Deno.test("a whole key is redacted wherever it appears", () => {
  assert.equal(
    redactor.redact(`Incorrect API key provided: ${OPENAI_KEY}.`),
    `Incorrect API key provided: ${REDACTED}.`,
  );
  assert.equal(redactor.redact(`x-api-key: ${ANTHROPIC_KEY}`), `x-api-key: ${REDACTED}`);
  assert.equal(
    redactor.redact(`GET /v1?key=${ANTHROPIC_KEY}&alt=sse`),
    `GET /v1?key=${REDACTED}&alt=sse`,
  );
});

Deno.test("a key cut short is redacted from its first twelve characters on", () => {
  const cut = ANTHROPIC_KEY.slice(0, 20);
  assert.equal(redactor.redact(`key ${cut} is invalid`), `key ${REDACTED} is invalid`);
  const middle = OPENAI_KEY.slice(10, 22);
  assert.doesNotMatch(redactor.redact(`(${middle})`), new RegExp(middle));
});

Deno.test("a masked print showing the key's tail is redacted", () => {
  for (
    const masked of ["sk-ant-...abcd", "sk-ant-…abcd", `sk-proj-********${OPENAI_KEY.slice(-4)}`]
  ) {
    const out = redactor.redact(`invalid key ${masked}.`);
    assert.equal(out, `invalid key ${REDACTED}.`, masked);
  }
});

Deno.test("a masked print is redacted with its word, after mixed masks and runs of mask characters, but one dot is no mask", () => {
  const tail = OPENAI_KEY.slice(-4);
  assert.equal(redactor.redact(`(prod-key.*${tail})`), `(${REDACTED})`);
  assert.equal(redactor.redact(`key ${"*".repeat(200)}${tail}`), `key ${REDACTED}`);
  assert.equal(redactor.redact(`end.${tail} here`), `end.${tail} here`);
  // A word longer than 128 characters keeps its start.
  const word = "w".repeat(300);
  assert.equal(redactor.redact(`${word}***${tail}`), `${"w".repeat(172)}${REDACTED}`);
});

Deno.test("a long word or run of mask characters with no tail after it is left as it is, searched once", () => {
  // Searched from each of its characters to its end, 160,000 characters took 15 s, 4 MB hours.
  for (
    const text of ["a".repeat(160_000) + "..", "*".repeat(4_000_000), "-.".repeat(80_000)]
  ) {
    assert.equal(redactor.redact(text), text);
  }
  const long = "a".repeat(160_000) + "...abcd";
  assert.equal(redactor.redact(long), "a".repeat(160_000 - 128) + REDACTED);
});

Deno.test("text without a key is left as it is", () => {
  const text = "The model `gpt-4o` does not exist... or you do not have access to it (sk-other).";
  assert.equal(redactor.redact(text), text);
});

Deno.test("log fields are redacted however deeply they nest", () => {
  const seen: Record<string, unknown>[] = [];
  const log = redactor.logger((fields) => seen.push(fields));
  log({ event: "x", message: `bad ${OPENAI_KEY}`, nested: { list: [ANTHROPIC_KEY, 3] }, n: 1 });
  assert.doesNotMatch(JSON.stringify(seen), /Q3x9VbT2|Hq7Lm2Vx/);
  assert.deepEqual(seen[0].nested, { list: [REDACTED, 3] });
  assert.equal(seen[0].n, 1);
});

Deno.test("redacting a log line never changes the fields passed in, and a line without a key is passed on as it is", () => {
  const fields = { event: "x", nested: { list: [ANTHROPIC_KEY, 3] }, at: new Date(0) };
  const redacted = redactor.redactDeep(fields);
  assert.deepEqual(fields.nested.list, [ANTHROPIC_KEY, 3], "the caller's object is untouched");
  assert.deepEqual(redacted.nested.list, [REDACTED, 3]);
  assert.equal(JSON.stringify(redacted.at), '"1970-01-01T00:00:00.000Z"');
  const url = redactor.redactDeep({ url: new URL(`https://host/v1?key=${OPENAI_KEY}`) });
  assert.doesNotMatch(JSON.stringify(url), /Q3x9VbT2/, "what toJSON writes is redacted too");
  const clean = { event: "request", path: "/v1/chat/completions", nested: { n: 1 } };
  assert.equal(redactor.redactDeep(clean), clean);
});

Deno.test("ordinary words a key happens to contain are left alone in a log line", () => {
  const words = new SecretRedactor(["sk-upstream-test"]);
  assert.equal(words.redact("outcome upstream_cut"), "outcome upstream_cut");
  assert.equal(words.redact("sent sk-upstream-test"), `sent ${REDACTED}`);
});

Deno.test("a key of eight to eleven characters is redacted whole", () => {
  const short = new SecretRedactor(["k3y-9x2z"]);
  assert.equal(short.redact("bad key k3y-9x2z!"), `bad key ${REDACTED}!`);
});

Deno.test("keys shorter than eight characters are not treated as secrets", () => {
  const short = new SecretRedactor(["ollama"]);
  assert.equal(short.empty, true);
  assert.equal(short.redact("ollama says hi"), "ollama says hi");
});

Deno.test("no twelve characters of a key survive, wherever in a text it is cut", () => {
  fc.assert(fc.property(
    fc.string({ maxLength: 40 }),
    fc.nat(OPENAI_KEY.length - 12),
    fc.integer({ min: 12, max: OPENAI_KEY.length }),
    fc.string({ maxLength: 40 }),
    (before, from, length, after) => {
      const piece = OPENAI_KEY.slice(from, from + length);
      const out = redactor.redact(`${before}${piece}${after}${piece}`);
      for (let i = 0; i + 12 <= OPENAI_KEY.length; i++) {
        assert.ok(!out.includes(OPENAI_KEY.slice(i, i + 12)), out);
      }
    },
  ));
});

Deno.test("the catalog's redactor covers every provider a model may reach: its own, its fallbacks' and its documents'", () => {
  const provider = (kind: string, env: string) => ({
    kind,
    base_url: "https://api.example",
    api_key_env: env,
  });
  const catalog = catalogFromFile("models.json", {
    providers: {
      chat: provider("openai", "CHAT_KEY"),
      backup: provider("openai", "BACKUP_KEY"),
      documents: provider("openai_responses", "DOCUMENTS_KEY"),
    },
    models: [{
      id: "openai/gpt-4o",
      provider: "chat",
      upstream_model: "gpt-4o",
      input_usd_per_mtok: "2.50",
      output_usd_per_mtok: "10.00",
      context_tokens: 128_000,
      max_output_tokens: 16_384,
      fallbacks: [{ provider: "backup", upstream_model: "gpt-4o" }],
      documents_provider: "documents",
    }],
  }, {
    CHAT_KEY: "sk-chat-0123456789abcdef",
    BACKUP_KEY: "sk-backup-0123456789abcdef",
    DOCUMENTS_KEY: "sk-documents-0123456789abcdef",
  });
  assert.equal(
    providerKeyRedactor(catalog).redact(
      "sk-chat-0123456789abcdef sk-backup-0123456789abcdef sk-documents-0123456789abcdef",
    ),
    [REDACTED, REDACTED, REDACTED].join(" "),
  );
});

Deno.test("clientSafe takes out every run of key characters of 12 or more that is not a word, whoever's key", () => {
  for (const key of [OPENAI_KEY, ANTHROPIC_KEY, "sk-proj-SomeOneElsesKey123456"]) {
    assert.equal(clientSafe(`Invalid key ${key}.`), `Invalid key ${REDACTED}.`);
    assert.equal(
      clientSafe(`Key ${key.slice(0, 12)}... is disabled`),
      `Key ${REDACTED}... is disabled`,
    );
  }
  // Eleven characters in a row, or a masked print's four, are all that can show.
  assert.equal(clientSafe(`Key ${OPENAI_KEY.slice(0, 11)}`), `Key ${OPENAI_KEY.slice(0, 11)}`);
  const masked = `Incorrect API key provided: sk-proj-****${OPENAI_KEY.slice(-4)}.`;
  assert.equal(clientSafe(masked), masked);
  // Words stay, however long.
  const words =
    "Invalid schema for function 'get_weather': In context=('properties', 'location'), 'additionalProperties' is required; max_completion_tokens is 1048576.";
  assert.equal(clientSafe(words), words);
});

Deno.test("clientSafe hides a key of random key characters, however it is cut", () => {
  for (
    const key of [
      "sk-proj-T7vQ2mX9kL4pR8wZ1cN6bY3hJ5dF0aGe",
      "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ]
  ) {
    assert.ok(clientSafeHides(key), key);
    for (let from = 0; from + 12 <= key.length; from++) {
      assert.ok(!clientSafe(`x ${key.slice(from)} y`).includes(key.slice(from, from + 12)));
    }
  }
});

Deno.test("clientSafe does not hide a passphrase, a short key or one with characters other than key characters", () => {
  for (
    const key of [
      "correct_horse_battery_staple",
      "correctHorseBatteryStaple",
      "localgatewaypassword",
      "sk-local1",
      "ABSKQmVkcm9ja0FQSUtleS1+ZGVm/c3R1dnd4eXo=",
      // Twelve letters in a row that could be a camelCase word's, the rest random.
      "9x-abcDefghIjkl-4Q7",
    ]
  ) {
    assert.ok(!clientSafeHides(key), key);
  }
});

Deno.test("a provider's reasons are shown unless its key is one clientSafe cannot hide", () => {
  const provider = (apiKey: string | undefined) => ({
    name: "p",
    kind: "openai" as const,
    baseUrl: "http://127.0.0.1:9",
    apiKeyEnv: "K",
    apiKey,
    streamOptions: true,
    forwardReasoningContent: false,
    forwardReasoningDetails: false,
    allowedTools: false,
    reasoningSummaries: false,
    streaming: true,
  });
  assert.ok(upstreamReasonsShown(provider("sk-proj-T7vQ2mX9kL4pR8wZ1cN6bY3hJ5dF0aGe")));
  assert.ok(upstreamReasonsShown(provider(undefined)), "no key");
  assert.ok(upstreamReasonsShown(provider("EMPTY")), "a placeholder under eight characters");
  assert.ok(!upstreamReasonsShown(provider("correct_horse_battery_staple")));
  assert.ok(!upstreamReasonsShown(provider("sk-local1")));
});
