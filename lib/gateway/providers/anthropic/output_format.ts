/**
 * A client's JSON schema as Anthropic's output formats take it (`output_config.format`). Those
 * formats compile the schema into a grammar and take a subset of JSON Schema ("Structured
 * outputs", "JSON Schema limitations"): a schema with anything else is a 400, after the
 * reservation. So the subset is kept, and everything else (bounds, patterns, defaults, examples,
 * other string formats, tuples) is told to the model in the description instead, as Anthropic's own
 * SDKs do; the client's parser still checks it. What no rewrite can carry, a recursive schema, is
 * not sent as a format at all (`isRecursive`).
 */

type Schema = Record<string, unknown>;

/** The string formats the grammar knows. */
const STRING_FORMATS = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "uri",
  "ipv4",
  "ipv6",
  "uuid",
]);

const isPrimitive = (value: unknown) => value === null || typeof value !== "object";

/** The schema rewritten into the subset Anthropic's output formats take. */
export function formatSchema(schema: unknown): unknown {
  if (!schema || typeof schema !== "object" || Array.isArray(schema)) return schema;
  const rest: Schema = { ...schema as Schema };
  const take = (key: string) => {
    const value = rest[key];
    delete rest[key];
    return value;
  };
  const out: Schema = {};
  // Names the dialect; constrains nothing.
  take("$schema");
  for (const key of ["$defs", "definitions"]) {
    const defs = take(key);
    if (defs && typeof defs === "object") {
      out[key] = Object.fromEntries(
        Object.entries(defs).map(([name, def]) => [name, formatSchema(def)]),
      );
    }
  }
  const ref = take("$ref");
  if (typeof ref === "string") {
    out.$ref = ref;
    const description = take("description");
    if (typeof description === "string") out.description = description;
    return out;
  }
  const literals = Array.isArray(rest.enum) && rest.enum.every(isPrimitive) ||
    rest.const !== undefined && isPrimitive(rest.const);
  if (Array.isArray(rest.enum) && rest.enum.every(isPrimitive)) out.enum = take("enum");
  if (rest.const !== undefined && isPrimitive(rest.const)) out.const = take("const");
  const type = take("type");
  // A literal says its type; the grammar takes the literal alone.
  if (!literals && type !== undefined) out.type = type;
  // The grammar takes anyOf, not oneOf; for the values an answer may take they say the same.
  const anyOf = take("anyOf") ?? take("oneOf");
  if (Array.isArray(anyOf)) out.anyOf = anyOf.map(formatSchema);
  const allOf = take("allOf");
  if (Array.isArray(allOf)) out.allOf = allOf.map(formatSchema);
  for (const key of ["description", "title"]) {
    if (typeof rest[key] === "string") out[key] = take(key);
  }
  const types = Array.isArray(type) ? type : [type];
  if (types.includes("object") || rest.properties !== undefined) {
    const properties = take("properties");
    if (properties && typeof properties === "object") {
      out.properties = Object.fromEntries(
        Object.entries(properties).map(([name, property]) => [name, formatSchema(property)]),
      );
    }
    // Every object is closed; one left open is told so in the description.
    if (rest.additionalProperties === false) take("additionalProperties");
    out.additionalProperties = false;
    if (Array.isArray(rest.required)) out.required = take("required");
  }
  if (typeof rest.format === "string" && STRING_FORMATS.has(rest.format)) {
    out.format = take("format");
  }
  if (rest.items && typeof rest.items === "object" && !Array.isArray(rest.items)) {
    out.items = formatSchema(take("items"));
  }
  if (rest.minItems === 0 || rest.minItems === 1) out.minItems = take("minItems");
  const left = Object.entries(rest);
  if (left.length) {
    const told = left.map(([key, value]) => `${key}: ${JSON.stringify(value)}`).join(", ");
    out.description = typeof out.description === "string"
      ? `${out.description} (${told})`
      : `(${told})`;
  }
  return out;
}

/**
 * Whether a schema refers to itself (a tree, a linked list): the grammar cannot be built from it.
 * A reference to the root or into it by path counts as one; references to definitions count when
 * a definition reaches itself.
 */
export function isRecursive(schema: unknown): boolean {
  const root = schema as Schema;
  const defs: Record<string, unknown> = {
    ...(root?.definitions as Schema | undefined),
    ...(root?.$defs as Schema | undefined),
  };
  const refsIn = (node: unknown, found: string[] = []): string[] => {
    if (Array.isArray(node)) node.forEach((n) => refsIn(n, found));
    else if (node && typeof node === "object") {
      for (const [key, value] of Object.entries(node)) {
        if (key === "$ref" && typeof value === "string") found.push(value);
        else if (key !== "$defs" && key !== "definitions") refsIn(value, found);
      }
    }
    return found;
  };
  const defName = (ref: string) => /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(ref)?.[1];
  const fromRoot = refsIn(root);
  if (fromRoot.some((ref) => defName(ref) === undefined)) return true;
  // Each definition is walked once (a walk of every path took time in 2^n for n definitions that
  // each refer to the next twice), without recursion: a chain of definitions may be long.
  const state = new Map<string, "open" | "done">();
  for (const start of Object.keys(defs)) {
    if (state.has(start)) continue;
    state.set(start, "open");
    const path = [{ name: start, refs: refsIn(defs[start]), next: 0 }];
    while (path.length > 0) {
      const top = path.at(-1)!;
      if (top.next === top.refs.length) {
        state.set(top.name, "done");
        path.pop();
        continue;
      }
      const name = defName(top.refs[top.next++]);
      if (name === undefined || state.get(name) === "open") return true;
      if (state.has(name)) continue;
      state.set(name, "open");
      path.push({ name, refs: refsIn(defs[name]), next: 0 });
    }
  }
  return false;
}

/**
 * Anthropic's explicit limits over all the strict schemas of one request ("Schema complexity
 * limits"): strict tools, parameters not `required`, and parameters typed as a union (`anyOf`, or
 * a list of types, as OpenAI's strict mode writes every optional field).
 */
export const STRICT_LIMITS = { tools: 20, optional: 24, unions: 16 };

/** Whether these strict schemas, each a tool's, are within STRICT_LIMITS together. */
export function withinStrictLimits(schemas: unknown[]): boolean {
  if (schemas.length > STRICT_LIMITS.tools) return false;
  let optional = 0;
  let unions = 0;
  const walk = (node: unknown): void => {
    if (!node || typeof node !== "object" || Array.isArray(node)) return;
    const schema = node as Schema;
    const properties = schema.properties;
    if (properties && typeof properties === "object" && !Array.isArray(properties)) {
      const required = new Set(Array.isArray(schema.required) ? schema.required : []);
      for (const [name, property] of Object.entries(properties)) {
        if (!required.has(name)) optional++;
        const p = property as Schema | null;
        if (p && typeof p === "object" && (Array.isArray(p.anyOf) || Array.isArray(p.type))) {
          unions++;
        }
        walk(property);
      }
    }
    walk(schema.items);
    for (const key of ["anyOf", "allOf"]) {
      if (Array.isArray(schema[key])) (schema[key] as unknown[]).forEach(walk);
    }
    for (const key of ["$defs", "definitions"]) {
      const defs = schema[key];
      if (defs && typeof defs === "object") Object.values(defs).forEach(walk);
    }
  };
  schemas.forEach(walk);
  return optional <= STRICT_LIMITS.optional && unions <= STRICT_LIMITS.unions;
}
