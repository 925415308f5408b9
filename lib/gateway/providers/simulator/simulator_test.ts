import assert from "node:assert/strict";
import { collect, testModel, upstreamRequest } from "../test_support.ts";
import { assembleCompletion } from "../assemble.ts";
import type { ChatCompletionChunk, UpstreamRequest } from "../types.ts";
import { createSimulator, SIMULATED_PDF_PAGE_TOKENS } from "./simulator.ts";

const echo = testModel("simulator", "echo");
const simulator = createSimulator({ tokenDelayMs: 0 });
/** A non-streamed answer, as the gateway serves it: the stream assembled. */
const complete = async (request: UpstreamRequest) =>
  assembleCompletion(await collect(await simulator.stream(request)));
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string" },
        unit: { enum: ["c", "f"] },
        days: { type: "integer" },
      },
      required: ["city"],
    },
  },
}];

Deno.test("offered tools, echo calls one with arguments made from its schema and the user's words", async () => {
  const request = upstreamRequest(echo, { messages: [{ role: "user", content: "Paris" }], tools });
  const { completion, usage } = await complete(request);
  const message = completion.choices[0].message;
  assert.equal(message.content, null);
  assert.deepEqual(message.tool_calls, [{
    id: "call_sim_1",
    type: "function",
    function: { name: "get_weather", arguments: '{"city":"Paris","unit":"c","days":1}' },
  }]);
  assert.equal(completion.choices[0].finish_reason, "tool_calls");
  assert.ok(usage && usage.completionTokens > 0);
});

Deno.test("echo's tool call streams like OpenAI's: id and name first, then the arguments in pieces", async () => {
  const request = upstreamRequest(echo, { messages: [{ role: "user", content: "Paris" }], tools });
  const parts = await collect(await simulator.stream(request));
  const first = parts[0];
  assert.ok(first.type === "chunk");
  assert.deepEqual((first.chunk as ChatCompletionChunk).choices[0].delta.tool_calls, [{
    index: 0,
    id: "call_sim_1",
    type: "function",
    function: { name: "get_weather", arguments: "" },
  }]);
  const { completion } = assembleCompletion(await collect(await simulator.stream(request)));
  assert.equal(
    (completion.choices[0].message.tool_calls as { function: { arguments: string } }[])[0].function
      .arguments,
    '{"city":"Paris","unit":"c","days":1}',
  );
});

Deno.test("after the tool result, echo answers with it: an agent loop ends", async () => {
  const { completion } = await complete(upstreamRequest(echo, {
    messages: [
      { role: "user", content: "Paris" },
      {
        role: "assistant",
        tool_calls: [{
          id: "call_sim_1",
          type: "function",
          function: { name: "get_weather", arguments: "{}" },
        }],
      },
      { role: "tool", tool_call_id: "call_sim_1", content: "Sunny, 21 C" },
    ],
    tools,
  }));
  assert.equal(completion.choices[0].message.content, "Sunny, 21 C");
  assert.equal(completion.choices[0].finish_reason, "stop");
});

Deno.test("tool_choice none or a named tool is obeyed", async () => {
  const two = [...tools, { type: "function", function: { name: "noop" } }];
  const named = await complete(upstreamRequest(echo, {
    messages: [{ role: "user", content: "x" }],
    tools: two,
    tool_choice: { type: "function", function: { name: "noop" } },
  }));
  assert.equal(
    (named.completion.choices[0].message.tool_calls as { function: { name: string } }[])[0]
      .function.name,
    "noop",
  );
  const none = await complete(upstreamRequest(echo, {
    messages: [{ role: "user", content: "x" }],
    tools: two,
    tool_choice: "none",
  }));
  assert.equal(none.completion.choices[0].message.content, "x");
});

Deno.test("allowed_tools are obeyed: echo calls the first allowed tool", async () => {
  const two = [...tools, { type: "function", function: { name: "noop" } }];
  const { completion } = await complete(upstreamRequest(echo, {
    messages: [{ role: "user", content: "x" }],
    tools: two,
    tool_choice: {
      type: "allowed_tools",
      allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "noop" } }] },
    },
  }));
  assert.equal(
    (completion.choices[0].message.tool_calls as { function: { name: string } }[])[0].function
      .name,
    "noop",
  );
});

/** The arguments of the call echo makes to its one tool of `parameters`, for `text`. */
async function sampledArguments(parameters: unknown, text: string, maxTokens = 100_000) {
  const { completion } = await complete(upstreamRequest(echo, {
    messages: [{ role: "user", content: text }],
    tools: [{ type: "function", function: { name: "f", parameters } }],
  }, maxTokens));
  const calls = completion.choices[0].message.tool_calls as { function: { arguments: string } }[];
  return JSON.parse(calls[0].function.arguments);
}

Deno.test("a tool's arguments take each type's sample: an array one item, a string the user's words", async () => {
  const parameters = {
    type: "object",
    properties: { flags: { type: "array", items: { type: "boolean" } }, note: { type: "string" } },
  };
  assert.deepEqual(await sampledArguments(parameters, "t"), { flags: [true], note: "t" });
});

Deno.test("a tool's strings take at most 256 characters of the user's words each, 16,384 in all, however wide its schema", async () => {
  // Each of 500 strings took the whole 1 MB message: 500 MB for one request.
  const properties = Object.fromEntries(
    Array.from({ length: 500 }, (_, i) => [`p${i}`, { type: "string" }]),
  );
  const args = await sampledArguments({ type: "object", properties }, "a".repeat(1_000_000));
  const strings = Object.values(args) as string[];
  assert.equal(strings[0], "a".repeat(256));
  assert.equal(strings.join("").length, 16_384);
  assert.equal(strings.at(-1), "");
});

Deno.test("a PDF is billed at the simulator's flat rate a page, and its count is that bill", async () => {
  const pages = 2;
  const pdf = btoa(`%PDF-1.4\n${"<< /Type /Page >>\n".repeat(pages)}%%EOF\n`);
  const withPdf = (file_data: string) =>
    upstreamRequest(echo, {
      messages: [{
        role: "user",
        content: [{ type: "text", text: "Read it." }, { type: "file", file: { file_data } }],
      }],
    });
  const plain = await complete(
    upstreamRequest(echo, { messages: [{ role: "user", content: "Read it." }] }),
  );
  const request = withPdf(`data:application/pdf;base64,${pdf}`);
  const { completion, usage } = await complete(request);
  assert.equal(completion.choices[0].message.content, "Read it.");
  assert.equal(
    usage!.promptTokens,
    plain.usage!.promptTokens + pages * SIMULATED_PDF_PAGE_TOKENS,
  );
  assert.equal(await simulator.countInputTokens!(request), usage!.promptTokens);
  // A file whose pages it cannot see is one page.
  const unseen = withPdf(`data:application/pdf;base64,${btoa("%PDF-1.7\n%%EOF\n")}`);
  assert.equal(
    (await complete(unseen)).usage!.promptTokens,
    plain.usage!.promptTokens + SIMULATED_PDF_PAGE_TOKENS,
  );
});
