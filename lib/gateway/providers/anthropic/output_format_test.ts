import assert from "node:assert/strict";
import { formatSchema, isRecursive } from "./output_format.ts";

Deno.test("what output formats take is kept; bounds, patterns, defaults and examples are told in the description", () => {
  const schema = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: {
      born: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 },
      name: { type: "string", description: "Full name", minLength: 1, pattern: "^[A-Z]" },
      tags: {
        type: "array",
        items: { type: "string", maxLength: 8 },
        minItems: 2,
        default: [],
      },
      // A property's name is not a keyword.
      maximum: { type: "number", examples: [{ minimum: 1 }] },
      kind: { enum: ["a", "b"], type: "string" },
    },
    required: ["born", "name", "tags", "maximum", "kind"],
    additionalProperties: false,
  };
  assert.deepEqual(formatSchema(schema), {
    type: "object",
    properties: {
      born: {
        type: "integer",
        description: "(minimum: -9007199254740991, maximum: 9007199254740991)",
      },
      name: { type: "string", description: 'Full name (minLength: 1, pattern: "^[A-Z]")' },
      tags: {
        type: "array",
        items: { type: "string", description: "(maxLength: 8)" },
        description: "(minItems: 2, default: [])",
      },
      maximum: { type: "number", description: '(examples: [{"minimum":1}])' },
      kind: { enum: ["a", "b"] },
    },
    required: ["born", "name", "tags", "maximum", "kind"],
    additionalProperties: false,
  });
});

Deno.test("oneOf (zod's discriminated unions) becomes anyOf; other string formats and tuples are told; definitions and references are kept", () => {
  const schema = {
    type: "object",
    properties: {
      shape: {
        oneOf: [
          {
            type: "object",
            properties: { kind: { const: "circle" }, r: { type: "number" } },
            required: ["kind", "r"],
            additionalProperties: false,
          },
          { $ref: "#/$defs/Square" },
        ],
      },
      id: { type: "string", format: "cuid2" },
      at: { type: "string", format: "date-time" },
      pair: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }], items: false },
    },
    required: ["shape", "id", "at", "pair"],
    additionalProperties: false,
    $defs: {
      Square: {
        type: "object",
        properties: { side: { type: "number", exclusiveMinimum: 0 } },
        required: ["side"],
        additionalProperties: false,
      },
    },
  };
  assert.deepEqual(formatSchema(schema), {
    $defs: {
      Square: {
        type: "object",
        properties: { side: { type: "number", description: "(exclusiveMinimum: 0)" } },
        required: ["side"],
        additionalProperties: false,
      },
    },
    type: "object",
    properties: {
      shape: {
        anyOf: [
          {
            type: "object",
            properties: { kind: { const: "circle" }, r: { type: "number" } },
            required: ["kind", "r"],
            additionalProperties: false,
          },
          { $ref: "#/$defs/Square" },
        ],
      },
      id: { type: "string", description: '(format: "cuid2")' },
      at: { type: "string", format: "date-time" },
      pair: {
        type: "array",
        description: '(prefixItems: [{"type":"string"},{"type":"number"}], items: false)',
      },
    },
    required: ["shape", "id", "at", "pair"],
    additionalProperties: false,
  });
});

Deno.test("a schema that reaches itself is recursive; one that only shares definitions is not", () => {
  const node = (children: unknown) => ({
    type: "object",
    properties: { children },
    required: ["children"],
    additionalProperties: false,
  });
  assert.equal(isRecursive(node({ type: "array", items: { $ref: "#" } })), true);
  assert.equal(
    isRecursive({
      ...node({ $ref: "#/$defs/Node" }),
      $defs: { Node: node({ $ref: "#/$defs/Node" }) },
    }),
    true,
  );
  assert.equal(
    isRecursive({
      ...node({ $ref: "#/$defs/A" }),
      $defs: { A: node({ $ref: "#/$defs/B" }), B: node({ $ref: "#/$defs/A" }) },
    }),
    true,
  );
  assert.equal(
    isRecursive({
      ...node({ anyOf: [{ $ref: "#/$defs/Leaf" }, { $ref: "#/$defs/Leaf" }] }),
      $defs: { Leaf: { type: "string" } },
    }),
    false,
  );
  assert.equal(isRecursive(node({ type: "string" })), false);
});

Deno.test("definitions that each refer to the next twice are walked once each, recursive or not, however many", () => {
  // Every path was walked: 2^n paths, hours for 30 definitions.
  const chain = (n: number, last: unknown) => {
    const $defs: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) {
      $defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
    }
    $defs[`d${n}`] = last;
    return { $ref: "#/$defs/d0", $defs };
  };
  assert.equal(isRecursive(chain(40, { type: "string" })), false);
  assert.equal(isRecursive(chain(40, { $ref: "#/$defs/d3" })), true);
  // A chain longer than any stack.
  assert.equal(isRecursive(chain(200_000, { type: "string" })), false);
});
