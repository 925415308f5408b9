/**
 * The hold of a request to a Claude route is never below what the provider bills as its input:
 * random requests (tool histories with ids and names Anthropic refuses, tools or none, images,
 * cache breakpoints, thinking, answer schemas, text of every script) are turned into the Messages
 * body the gateway sends, and the fake Anthropic's count of that body is compared with the bound
 * the gateway reserves by (inputBound, as gateway.ts calls it).
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { assertSupported, type ChatRequest, parseChatRequest } from "@/lib/gateway/chat_request.ts";
import { inputBound } from "@/lib/gateway/input_bound.ts";
import { messagesRequest } from "@/lib/gateway/providers/anthropic/request.ts";
import { testModel } from "@/lib/gateway/providers/test_support.ts";
import { pngBase64 } from "./fakes/common.ts";
import { startAnthropicUpstream } from "./fakes/anthropic_upstream.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

// ---- text
const cjk = fc.string({
  unit: fc.integer({ min: 0x4e00, max: 0x9fff }).map((c) => String.fromCodePoint(c)),
  maxLength: 60,
});
const emoji = fc.string({
  unit: fc.constantFrom("😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🤖", "✨", "🧪"),
  maxLength: 30,
});
const ws = fc.string({
  unit: fc.constantFrom(" ", "\n", "\t", "\r\n", "\u3000", "\u00a0"),
  maxLength: 40,
});
const words = fc.array(
  fc.constantFrom(
    "the",
    "Hello",
    "world",
    "naïve",
    "ﬁle",
    "x",
    "aaaa",
    "1234567",
    '{"a":1}',
    "αβγ",
    "Привет",
    "مرحبا",
    "コード",
  ),
  { maxLength: 30 },
).map((w) => w.join(" "));
const longRun = fc.tuple(
  fc.constantFrom("a", " hi", "ab", "😀", "中", " ", "\n", "0", ".", "-_"),
  fc.integer({ min: 50, max: 3000 }),
)
  .map(([s, n]) => s.repeat(n));
const nfkc = fc.string({
  unit: fc.constantFrom("ﷺ", "㍻", "ﬃ", "½", "™", "㌀", "Ａ", "①", "ｶ", "\u0301", "e"),
  maxLength: 40,
});
const sep = fc.constantFrom(" ", "  ", "\n", ", ", ". ", "_", "-", "", "/");
const randWords = fc.tuple(
  fc.array(
    fc.oneof(
      fc.stringMatching(/^[a-z]{1,9}$/),
      fc.stringMatching(/^[A-Za-z]{1,9}$/),
      fc.stringMatching(/^[a-zA-Z0-9]{1,12}$/),
      fc.stringMatching(/^[qxzjvkwy]{2,8}$/),
    ),
    { maxLength: 300 },
  ),
  sep,
).map(([w, s]) => w.join(s));
const text: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: randWords },
  { weight: 1, arbitrary: nfkc },
  { weight: 1, arbitrary: fc.stringMatching(/^[a-z ]{0,400}$/) },
  { weight: 3, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 2, arbitrary: cjk },
  { weight: 2, arbitrary: emoji },
  { weight: 2, arbitrary: ws },
  { weight: 3, arbitrary: words },
  { weight: 1, arbitrary: longRun },
  {
    weight: 1,
    arbitrary: fc.array(fc.oneof(cjk, emoji, ws, words), { maxLength: 6 }).map((a) => a.join("")),
  },
);

const cacheControl = fc.option(
  fc.constant({ type: "ephemeral" }),
  { nil: undefined, freq: 4 },
);
const textPart = fc.record({ text, cache_control: cacheControl }).map(({ text, cache_control }) =>
  cache_control ? { type: "text", text, cache_control } : { type: "text", text }
);
const imagePart = fc.tuple(
  fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 5000 })),
  fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 5000 })),
  cacheControl,
).map(([w, h, cc]) => ({
  type: "image_url",
  image_url: { url: `data:image/png;base64,${pngBase64(w, h)}` },
  ...(cc ? { cache_control: cc } : {}),
}));
const content = fc.oneof(text, fc.array(textPart, { minLength: 1, maxLength: 5 }));
const userContent = fc.oneof(
  text,
  fc.array(fc.oneof({ weight: 3, arbitrary: textPart }, { weight: 1, arbitrary: imagePart }), {
    minLength: 1,
    maxLength: 6,
  }),
);

// ---- tools
const idArb = fc.oneof(
  fc.constantFrom(
    "call_0",
    "call_1",
    "functions.get_weather:0",
    "a b",
    "é",
    "_",
    "call-0",
    "call.0",
    "x/y",
    "🙂",
  ),
  fc.string({ minLength: 1, maxLength: 20 }),
  fc.string({ unit: "grapheme", minLength: 1, maxLength: 20 }),
  cjk.filter((s) => s.length > 0),
);
const fnNameArb = fc.oneof(
  fc.constantFrom(
    "weather",
    "weather.get",
    "functions.get_weather",
    "a.b.c",
    "ns:tool",
    "工具",
    "x".repeat(70),
    "é",
  ),
  fc.stringMatching(/^[a-zA-Z0-9_.-]{1,80}$/),
  fc.string({ minLength: 1, maxLength: 30 }),
);
const declaredName = fc.oneof(
  fc.constantFrom("weather", "time", "lookup"),
  fc.stringMatching(/^[a-zA-Z0-9_-]{1,64}$/),
);
const argsArb = fc.oneof(
  fc.constant(""),
  fc.constant("{}"),
  fc.constant('{"n":1e20,"m":-0.0000001,"s":"\\u00e9"}'),
  fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }).map((
    o,
  ) => JSON.stringify(o)),
  fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }).map((
    o,
  ) => JSON.stringify(o, null, 2)),
  fc.record({ q: text }).map((o) => JSON.stringify(o)),
);
const schemaArb: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.constant({}),
  fc.constant({
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  }),
  fc.dictionary(
    fc.string({ maxLength: 8 }),
    fc.record({ type: fc.constantFrom("string", "number", "boolean"), description: text }),
    { maxKeys: 4 },
  )
    .map((props) => ({
      type: "object",
      properties: props,
      required: Object.keys(props),
      additionalProperties: false,
    })),
  fc.record({
    type: fc.constant("object"),
    properties: fc.constant({ e: { enum: ["", "", "a"] } }),
  }),
);
const toolDef = fc.record({
  name: declaredName,
  description: fc.option(text, { nil: undefined }),
  parameters: fc.option(schemaArb, { nil: undefined }),
  cache_control: cacheControl,
}).map(({ name, description, parameters, cache_control }) => ({
  type: "function",
  function: {
    name,
    ...(description !== undefined ? { description } : {}),
    ...(parameters !== undefined ? { parameters } : {}),
  },
  ...(cache_control ? { cache_control } : {}),
}));

// A turn: a user message, or an assistant message with its tool results.
const toolTurn = fc.record({
  content: fc.option(content, { nil: null }),
  calls: fc.uniqueArray(fc.record({ id: idArb, name: fnNameArb, args: argsArb }), {
    minLength: 1,
    maxLength: 4,
    selector: (c) => c.id,
  }),
  results: fc.array(
    fc.oneof(text, fc.array(fc.oneof(textPart, imagePart), { minLength: 1, maxLength: 3 })),
    { minLength: 4, maxLength: 4 },
  ),
}).map(({ content, calls, results }) => {
  const msgs: Json[] = [{
    role: "assistant",
    content: content ?? "",
    tool_calls: calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: c.args },
    })),
  }];
  const seen = new Set<string>();
  calls.forEach((c, k) => {
    if (seen.has(c.id)) return;
    seen.add(c.id);
    msgs.push({ role: "tool", tool_call_id: c.id, content: results[k] });
  });
  return msgs;
});
const turn = fc.oneof(
  { weight: 3, arbitrary: userContent.map((c) => [{ role: "user", content: c }]) },
  { weight: 2, arbitrary: content.map((c) => [{ role: "assistant", content: c }]) },
  { weight: 3, arbitrary: toolTurn },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.constantFrom("system", "developer"), content).map((
      [role, c],
    ) => [{ role, content: c }]),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(text, fc.option(fc.string({ maxLength: 10 }), { nil: undefined })).map((
      [t, name],
    ) => [
      { role: "user", content: t, ...(name ? { name } : {}) },
    ]),
  },
);
const requestArb = fc.record({
  system: fc.array(fc.tuple(fc.constantFrom("system", "developer"), content), { maxLength: 2 }),
  turns: fc.array(turn, { minLength: 1, maxLength: 6 }),
  tools: fc.option(
    fc.uniqueArray(toolDef, { minLength: 1, maxLength: 4, selector: (t) => t.function.name }),
    { nil: undefined },
  ),
  response_format: fc.option(
    fc.oneof(
      fc.record({ type: fc.constant("json_object") }),
      fc.record({
        type: fc.constant("json_schema"),
        json_schema: fc.record({ name: declaredName, schema: schemaArb, strict: fc.boolean() }, {
          requiredKeys: ["name"],
        }),
      }),
    ),
    { nil: undefined },
  ),
  reasoning_effort: fc.option(
    fc.constantFrom("none", "minimal", "low", "medium", "high", "xhigh", "max"),
    { nil: undefined },
  ),
  stop: fc.option(
    fc.oneof(
      fc.string({ maxLength: 5 }),
      fc.array(fc.string({ maxLength: 5 }), { minLength: 1, maxLength: 4 }),
    ),
    { nil: undefined },
  ),
  tool_choice: fc.option(fc.constantFrom("none", "auto", "required"), { nil: undefined }),
  // OpenAI's allowed tools: which of the tools (by position) and the mode; Claude is sent fewer.
  allowed: fc.option(
    fc.record({
      mode: fc.constantFrom("auto", "required"),
      pick: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
    }),
    { nil: undefined },
  ),
  max_tokens: fc.constantFrom(4096, 32000),
}, { requiredKeys: ["system", "turns", "max_tokens"] }).map((r) => {
  const body: Json = {
    model: "p/m",
    messages: [...r.system.map(([role, c]) => ({ role, content: c })), ...r.turns.flat()],
    max_tokens: r.max_tokens,
  };
  for (
    const k of ["tools", "response_format", "reasoning_effort", "stop", "tool_choice"] as const
  ) {
    if (r[k] !== undefined) body[k] = r[k];
  }
  const allowed = r.tools?.filter((_, i) => r.allowed?.pick[i]);
  if (r.allowed && allowed?.length) {
    body.tool_choice = {
      type: "allowed_tools",
      allowed_tools: {
        mode: r.allowed.mode,
        tools: allowed.map((t) => ({ type: "function", function: { name: t.function.name } })),
      },
    };
  }
  if (!body.tools) delete body.tool_choice;
  return body;
});

/** The request as the gateway takes it for a route of this model, or null when it refuses it. */
function accepted(body: Json, model: ReturnType<typeof testModel>): ChatRequest | null {
  try {
    const request = parseChatRequest(body);
    assertSupported(request, [model], body.max_tokens);
    return request;
  } catch {
    return null;
  }
}

for (const upstreamModel of ["claude-sonnet-4-5", "claude-opus-4-7"]) {
  Deno.test(`the input bound of a request to ${upstreamModel} is never below what Anthropic bills for the body sent, over random requests`, async () => {
    const model = testModel("anthropic", upstreamModel);
    const upstream = startAnthropicUpstream();
    try {
      let compared = 0;
      fc.assert(
        fc.property(requestArb, (body) => {
          const request = accepted(body, model);
          if (!request) return true;
          compared++;
          const sent = messagesRequest({
            model,
            request,
            maxTokens: body.max_tokens,
            signal: new AbortController().signal,
            requestId: "req_property",
          }, false);
          const billed = upstream.inputTokens(JSON.parse(JSON.stringify(sent)));
          const bound = inputBound(model.provider, request, model, model.tokenizer);
          return billed <= bound;
        }),
        { numRuns: 300 },
      );
      assert.ok(compared > 150, `only ${compared} of 300 random requests were taken`);
    } finally {
      await upstream.close();
    }
  });
}
