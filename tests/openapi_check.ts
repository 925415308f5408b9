/**
 * Checks real responses against the served OpenAPI document: the status is documented, every
 * required header is present and matches its schema, every `Tollbooth-*` and `Idempotent-*` header
 * sent is documented, and the body matches the response schema.
 * helpers.ts runs it on every non-streamed chat response of the test suite.
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "ajv/dist/2020.js";
import { openApiDocument } from "@/lib/ops/mod.ts";
import { API_VERSION } from "@/routes/middleware.ts";

export const DOC_ID = "https://tollbooth.test/openapi.json";

let compiled: ReturnType<typeof compile> | null = null;

function compile() {
  const doc = openApiDocument("http://tollbooth.test", API_VERSION);
  // OpenAPI 3.1 schemas are JSON Schema 2020-12; the document's other keys are not schema keywords.
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema({ ...doc, $id: DOC_ID });
  return { doc, ajv };
}

const pointer = (...parts: string[]) =>
  "#/" + parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

type Json = Record<string, unknown>;

function resolve(doc: Json, value: unknown): Json {
  const v = value as Json;
  if (typeof v?.$ref !== "string") return v;
  const path = v.$ref.slice(2).split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  return path.reduce((node: unknown, key) => (node as Json)[key], doc) as Json;
}

/** Validates a JSON value against a schema at a pointer inside the document. */
export function assertSchema(value: unknown, ...path: string[]) {
  compiled ??= compile();
  const validate = compiled.ajv.getSchema(`${DOC_ID}${pointer(...path)}`);
  assert.ok(validate, `no schema at ${path.join("/")}`);
  assert.ok(
    validate(value),
    `${JSON.stringify(value).slice(0, 400)} does not match ${path.join("/")}: ${
      JSON.stringify(validate.errors)
    }`,
  );
}

/**
 * Fails unless a response matches the document's operation (createChatCompletion unless a path
 * template and method are given); reads a clone of the body.
 */
export async function assertMatchesOpenApi(
  res: Response,
  path = "/chat/completions",
  method = "post",
): Promise<void> {
  compiled ??= compile();
  const doc = compiled.doc as unknown as Json;
  const operation = ["paths", path, method];
  const item = (doc.paths as Json)[path] as Json;
  assert.ok(item?.[method], `${method} ${path} is not documented`);
  const documented = ((item[method] as Json).responses as Json)[String(res.status)] as Json;
  assert.ok(documented, `${method} ${path}: status ${res.status} is not documented`);

  // The service's own headers must be documented where they are sent, so the document cannot
  // leave one out (as it did the replay headers and a charged 502's cost).
  const names = Object.keys((documented.headers ?? {}) as Json).map((n) => n.toLowerCase());
  for (const name of res.headers.keys()) {
    if (!/^(tollbooth-|idempotent-)/.test(name)) continue;
    assert.ok(
      names.includes(name),
      `${method} ${path} ${res.status}: header ${name} is not documented`,
    );
  }

  for (const [name, spec] of Object.entries((documented.headers ?? {}) as Json)) {
    const header = resolve(doc, spec);
    const value = res.headers.get(name);
    if (value === null) {
      assert.ok(!header.required, `${res.status}: required header ${name} missing`);
      continue;
    }
    const validate = compiled.ajv.getSchema(`${DOC_ID}${pointer(...schemaPathOf(spec, name))}`)!;
    assert.ok(validate(value), `${res.status}: header ${name}: ${JSON.stringify(validate.errors)}`);
  }

  const type = (res.headers.get("content-type") ?? "").split(";")[0].trim();
  const content = documented.content as Json;
  assert.ok(content[type], `${res.status}: content type ${type} is not documented`);
  if (type === "application/json") {
    const body = await res.clone().json();
    assertSchema(
      body,
      ...operation,
      "responses",
      String(res.status),
      "content",
      "application/json",
      "schema",
    );
  }

  function schemaPathOf(spec: unknown, name: string): string[] {
    const r = (spec as Json).$ref;
    if (typeof r === "string") return [...r.slice(2).split("/"), "schema"];
    return [
      ...operation,
      "responses",
      String(res.status),
      "headers",
      name,
      "schema",
    ];
  }
}
