/**
 * What a gpt-oss server bills as input for a chat request: the prompt OpenAI's harmony format
 * renders (as `openai/harmony`'s encoding does, which vLLM, Groq and Together serve gpt-oss with),
 * counted in o200k with each special token (`<|start|>`, `<|message|>`, `<|end|>`, …) one token.
 * A reference for the tests, written from the format's documentation, independent of the bound.
 */
import o200k from "gpt-tokenizer/encoding/o200k_base";

interface HarmonyTool {
  function: {
    name: string;
    description?: string;
    parameters?: {
      properties?: Record<string, HarmonySchema>;
      required?: string[];
    };
  };
}

interface HarmonySchema {
  type?: string;
  description?: string;
  oneOf?: HarmonySchema[];
}

interface HarmonyMessage {
  role: string;
  content?: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

const text = (s: string) => o200k.encode(s).length;

/** `<|start|>{header}<|message|>{body}<|end|>`: three special tokens around its text. */
const message = (header: string, body: string) => 3 + text(header) + text(body);

/** Each line of a description as a comment: Rust's `str::lines()`, a trailing empty line dropped. */
function commentLines(description: string): string[] {
  const lines = description.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines.map((line) => `// ${line}`);
}

/** A schema's type as harmony writes it: integers as numbers, anything untyped as `any`. */
function typeName(schema: HarmonySchema): string {
  if (schema.type === "integer") return "number";
  return schema.type ?? "any";
}

function toolDeclaration(tool: HarmonyTool): string {
  const { name, description, parameters } = tool.function;
  const lines = description ? commentLines(description) : [];
  const properties = Object.entries(parameters?.properties ?? {});
  if (properties.length === 0) return [...lines, `type ${name} = () => any;`].join("\n");
  const fields = properties.flatMap(([key, schema]) => {
    const optional = parameters?.required?.includes(key) ? "" : "?";
    const description = schema.description ? commentLines(schema.description) : [];
    // A property of variants (encoding.rs, json_schema_to_typescript): its name alone, then a
    // line per variant, each its type, and a comma on a line of its own.
    if (schema.oneOf) {
      return [
        ...description,
        `${key}${optional}:`,
        ...schema.oneOf.map((variant) => ` | ${typeName(variant)}`),
        ",",
      ];
    }
    return [...description, `${key}${optional}: ${typeName(schema)},`];
  });
  return [...lines, `type ${name} = (_: {`, ...fields, "}) => any;"].join("\n");
}

export function harmonyPromptTokens(
  request: { messages: HarmonyMessage[]; tools?: HarmonyTool[] },
): number {
  const tools = request.tools ?? [];
  let system =
    "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-11-29\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  if (tools.length) {
    system += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  }
  let tokens = message("system", system);
  const instructions = request.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map((m) => m.content ?? "");
  if (instructions.length || tools.length) {
    let developer = instructions.length ? `# Instructions\n\n${instructions.join("\n\n")}` : "";
    if (tools.length) {
      const namespace = [
        "## functions",
        "",
        "namespace functions {",
        "",
        tools.map(toolDeclaration).join("\n\n"),
        "",
        "} // namespace functions",
      ].join("\n");
      developer += `${developer ? "\n\n" : ""}# Tools\n\n${namespace}`;
    }
    tokens += message("developer", developer);
  }
  const names = new Map<string, string>();
  for (const m of request.messages) {
    if (m.role === "user") tokens += message("user", m.content ?? "");
    if (m.role === "assistant") {
      // An answer in the history is its final channel's; a call goes to the commentary channel,
      // `<|constrain|>` before its JSON and `<|call|>` in place of `<|end|>`.
      if (m.content) tokens += 4 + text("assistant") + text("final") + text(m.content);
      for (const call of m.tool_calls ?? []) {
        names.set(call.id, call.function.name);
        tokens += 5 + text("assistant") + text(`commentary to=functions.${call.function.name} `) +
          text("json") + text(call.function.arguments);
      }
    }
    if (m.role === "tool") {
      const name = names.get(m.tool_call_id ?? "") ?? "";
      tokens += 1 + message(`functions.${name} to=assistant`, m.content ?? "") +
        text("commentary");
    }
  }
  // `<|start|>assistant`: the reply's header.
  return tokens + 1 + text("assistant");
}
