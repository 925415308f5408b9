import assert from "node:assert/strict";
import { ApiError } from "@/lib/core/mod.ts";
import { readJsonBody } from "@/routes/json_body.ts";

function post(body: string) {
  return new Request("http://tollbooth.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
}

Deno.test("a body naming __proto__, even escaped or nested, is refused as invalid_json and pollutes nothing", async () => {
  for (
    const body of [
      '{"a": 1, "__proto__": {"polluted": true}}',
      '{"a": 1, "\\u005f\\u005fproto__": {"polluted": true}}',
      '{"a": 1, "nested": {"__proto__": {"polluted": true}}}',
    ]
  ) {
    const error = await readJsonBody(post(body)).then(() => null, (e) => e);
    assert.ok(error instanceof ApiError, body);
    assert.equal(error.code, "invalid_json", body);
    assert.match(error.message, /key named "__proto__"/, body);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  }
});

Deno.test("constructor and prototype are ordinary names: a tool schema keeps the properties so named", async () => {
  const schema = {
    type: "object",
    properties: { name: {}, constructor: { type: "string" }, prototype: { type: "string" } },
    required: ["name", "constructor", "prototype"],
  };
  const parsed = await readJsonBody(post(JSON.stringify({ parameters: schema }))) as {
    parameters: typeof schema;
  };
  assert.deepEqual(parsed.parameters, schema);
  assert.equal(Object.hasOwn(parsed.parameters.properties, "constructor"), true);
  assert.equal(({} as Record<string, unknown>).type, undefined);
});

Deno.test("a body without such keys parses as plain JSON", async () => {
  const parsed = await readJsonBody(post('{"model": "m", "messages": [], "n": 1}'));
  assert.deepEqual(parsed, { model: "m", messages: [], n: 1 });
});
