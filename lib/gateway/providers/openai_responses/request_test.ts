import assert from "node:assert/strict";
import { openAiReasoningDetail } from "../../reasoning_details.ts";
import { testModel, upstreamRequest } from "../test_support.ts";
import { responsesRequestBody } from "./request.ts";

const GPT = testModel("openai_responses", "gpt-4.1");
const O3 = testModel("openai_responses", "o3-pro");

Deno.test("a chat conversation becomes Responses input items in order", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [
      { role: "system", content: "Be brief." },
      { role: "developer", content: [{ type: "text", text: "Use tools." }] },
      {
        role: "user",
        name: "ada",
        content: [
          { type: "text", text: "What is here?", cache_control: { type: "ephemeral" } },
          { type: "image_url", image_url: { url: "https://example.com/a.png", detail: "low" } },
          { type: "image_url", image_url: { url: "https://example.com/b.png" } },
        ],
      },
      {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "look", arguments: '{"at":"a"}' },
        }],
      },
      { role: "tool", tool_call_id: "call_1", content: [{ type: "text", text: "a cat" }] },
      { role: "assistant", content: null, refusal: "I can't say." },
    ],
  }));
  assert.deepEqual(body.input, [
    { role: "system", content: "Be brief." },
    { role: "developer", content: [{ type: "input_text", text: "Use tools." }] },
    {
      role: "user",
      content: [
        { type: "input_text", text: "What is here?" },
        { type: "input_image", image_url: "https://example.com/a.png", detail: "low" },
        { type: "input_image", image_url: "https://example.com/b.png", detail: "auto" },
      ],
    },
    { role: "assistant", content: [{ type: "output_text", text: "Let me look." }] },
    { type: "function_call", call_id: "call_1", name: "look", arguments: '{"at":"a"}' },
    {
      type: "function_call_output",
      call_id: "call_1",
      output: [{ type: "input_text", text: "a cat" }],
    },
    { role: "assistant", content: [{ type: "refusal", refusal: "I can't say." }] },
  ]);
});

Deno.test("a PDF becomes an input_file with its data URL and breakpoint, named document.pdf where the client gave no name", () => {
  const pdf = `data:application/pdf;base64,${btoa("%PDF-1.4\n%%EOF\n")}`;
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{
      role: "user",
      content: [
        {
          type: "file",
          file: { file_data: pdf, filename: "q3.pdf" },
          cache_control: { type: "ephemeral" },
          prompt_cache_breakpoint: { mode: "explicit" },
        },
        { type: "file", file: { file_data: pdf } },
      ],
    }],
  }));
  assert.deepEqual(body.input, [{
    role: "user",
    content: [
      {
        type: "input_file",
        file_data: pdf,
        filename: "q3.pdf",
        prompt_cache_breakpoint: { mode: "explicit" },
      },
      { type: "input_file", file_data: pdf, filename: "document.pdf" },
    ],
  }]);
});

Deno.test("a tool message's text and images become its function_call_output's parts", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [
      { role: "user", content: "Take a screenshot." },
      {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "shot", arguments: "{}" },
        }],
      },
      {
        role: "tool",
        tool_call_id: "call_1",
        content: [
          { type: "text", text: "Here it is:" },
          { type: "image_url", image_url: { url: "https://example.com/s.png", detail: "high" } },
          { type: "image_url", image_url: { url: "https://example.com/t.png" } },
        ],
      },
    ],
  }));
  assert.deepEqual((body.input as unknown[]).at(-1), {
    type: "function_call_output",
    call_id: "call_1",
    output: [
      { type: "input_text", text: "Here it is:" },
      { type: "input_image", image_url: "https://example.com/s.png", detail: "high" },
      { type: "input_image", image_url: "https://example.com/t.png", detail: "auto" },
    ],
  });
});

Deno.test("a tool message's name is not sent in its function_call_output, which has no such field", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny", name: "w" },
    ],
    tools: [{ type: "function", function: { name: "w" } }],
  }));
  assert.deepEqual((body.input as unknown[])[2], {
    type: "function_call_output",
    call_id: "c1",
    output: "sunny",
  });
});

Deno.test("the cap goes as max_output_tokens, streamed and never stored", () => {
  const body = responsesRequestBody(
    upstreamRequest(GPT, { messages: [{ role: "user", content: "hi" }], max_tokens: 100 }, 100),
  );
  assert.equal(body.max_output_tokens, 100);
  assert.equal(body.stream, true);
  assert.equal(body.store, false);
  for (const field of ["max_tokens", "max_completion_tokens", "messages", "stream_options"]) {
    assert.ok(!(field in body), field);
  }
});

Deno.test("function tools are flat and strict only when the client says so", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    tools: [
      {
        type: "function",
        function: { name: "a", description: "A.", parameters: { type: "object" } },
      },
      { type: "function", function: { name: "b", strict: true, parameters: { type: "object" } } },
      { type: "function", function: { name: "c" } },
    ],
    tool_choice: { type: "function", function: { name: "b" } },
    parallel_tool_calls: false,
  }));
  assert.deepEqual(body.tools, [
    {
      type: "function",
      name: "a",
      description: "A.",
      parameters: { type: "object" },
      strict: false,
    },
    { type: "function", name: "b", parameters: { type: "object" }, strict: true },
    { type: "function", name: "c", parameters: { type: "object", properties: {} }, strict: false },
  ]);
  assert.deepEqual(body.tool_choice, { type: "function", name: "b" });
  assert.equal(body.parallel_tool_calls, false);
});

Deno.test("an allowed_tools choice goes in the Responses API's flat shape, with every tool", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    tools: [
      { type: "function", function: { name: "a" } },
      { type: "function", function: { name: "b" } },
    ],
    tool_choice: {
      type: "allowed_tools",
      allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "b" } }] },
    },
  }));
  assert.equal((body.tools as unknown[]).length, 2);
  assert.deepEqual(body.tool_choice, {
    type: "allowed_tools",
    mode: "required",
    tools: [{ type: "function", name: "b" }],
  });
});

Deno.test("a tool choice without tools is not sent", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    tool_choice: "none",
  }));
  assert.ok(!("tool_choice" in body));
});

Deno.test("response_format and verbosity become text.format and text.verbosity", () => {
  const schema = { type: "object", properties: { n: { type: "integer" } } };
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    response_format: { type: "json_schema", json_schema: { name: "count", schema } },
    verbosity: "low",
  }));
  assert.deepEqual(body.text, {
    format: { type: "json_schema", name: "count", schema, strict: false },
    verbosity: "low",
  });
  const json = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    response_format: { type: "json_object" },
  }));
  assert.deepEqual(json.text, { format: { type: "json_object" } });
  const plain = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    response_format: { type: "text" },
  }));
  assert.ok(!("text" in plain));
});

Deno.test("a reasoning model is asked for its encrypted reasoning, and its effort goes as reasoning.effort", () => {
  const body = responsesRequestBody(upstreamRequest(O3, {
    messages: [{ role: "user", content: "hi" }],
    reasoning_effort: "high",
  }));
  assert.deepEqual(body.reasoning, { effort: "high" });
  assert.deepEqual(body.include, ["reasoning.encrypted_content"]);
  const plain = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
  }));
  assert.ok(!("reasoning" in plain) && !("include" in plain));
});

Deno.test("reasoning summaries are asked for only where the provider says it may", () => {
  const request = upstreamRequest(O3, { messages: [{ role: "user", content: "hi" }] });
  assert.deepEqual(responsesRequestBody(request, { reasoningSummaries: true }).reasoning, {
    summary: "auto",
  });
  assert.ok(!("reasoning" in responsesRequestBody(request)));
});

Deno.test("a concise summary is asked of the models after gpt-5 as asked, and as auto of those that refuse it", () => {
  const summaryOf = (model: string, asked: "concise" | "detailed") => {
    const request = upstreamRequest(testModel("openai_responses", model), {
      messages: [{ role: "user", content: "hi" }],
      reasoning_effort: "low",
    });
    request.request.reasoningSummary = asked;
    return (responsesRequestBody(request, { reasoningSummaries: true }).reasoning as {
      summary: string;
    }).summary;
  };
  for (const model of ["gpt-5.1", "gpt-5.4-mini", "openai/gpt-6", "computer-use-preview"]) {
    assert.equal(summaryOf(model, "concise"), "concise", model);
  }
  for (const model of ["o3", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5-codex"]) {
    assert.equal(summaryOf(model, "concise"), "auto", model);
    assert.equal(summaryOf(model, "detailed"), "detailed", model);
  }
});

Deno.test("an assistant message's reasoning goes back to the model that made it, before the message", () => {
  const own = openAiReasoningDetail({ id: "rs_1", encrypted_content: "gAAAA-own" }, 0, "o3-pro");
  const foreign = openAiReasoningDetail({ id: "rs_2", encrypted_content: "gAAAA-x" }, 1, "o4-mini");
  const claude = {
    type: "reasoning.text",
    text: "hm",
    signature: "sig",
    id: "o3-pro#2",
    format: "anthropic-claude-v1",
    index: 2,
  };
  const body = responsesRequestBody(upstreamRequest(O3, {
    messages: [
      { role: "user", content: "weather?" },
      {
        role: "assistant",
        content: null,
        reasoning_details: [own, foreign, claude],
        tool_calls: [{ id: "call_1", type: "function", function: { name: "w", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
  }));
  assert.deepEqual((body.input as unknown[]).slice(1), [
    { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "gAAAA-own" },
    { type: "function_call", call_id: "call_1", name: "w", arguments: "{}" },
    { type: "function_call_output", call_id: "call_1", output: "sunny" },
  ]);
});

Deno.test("the client's hints pass as the Responses API names them", () => {
  const body = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    temperature: 0.2,
    top_p: 0.9,
    user: "u1",
    metadata: { a: "b" },
    prompt_cache_key: "k",
    safety_identifier: "s",
    service_tier: "default",
    seed: 7,
    store: true,
  }));
  assert.equal(body.temperature, 0.2);
  assert.equal(body.top_p, 0.9);
  assert.equal(body.user, "u1");
  assert.deepEqual(body.metadata, { a: "b" });
  assert.equal(body.prompt_cache_key, "k");
  assert.equal(body.safety_identifier, "s");
  assert.equal(body.service_tier, "default");
  // No seed in the Responses API; storing at OpenAI is never asked for.
  assert.ok(!("seed" in body));
  assert.equal(body.store, false);
});

Deno.test("logprobs are asked for with include, beside the encrypted reasoning", () => {
  const body = responsesRequestBody(upstreamRequest(O3, {
    messages: [{ role: "user", content: "hi" }],
    logprobs: true,
    top_logprobs: 3,
  }));
  assert.deepEqual(body.include, ["reasoning.encrypted_content", "message.output_text.logprobs"]);
  assert.equal(body.top_logprobs, 3);
  const plain = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    logprobs: true,
  }));
  assert.deepEqual(plain.include, ["message.output_text.logprobs"]);
  assert.equal(plain.top_logprobs, 0);
  const none = responsesRequestBody(upstreamRequest(GPT, {
    messages: [{ role: "user", content: "hi" }],
    logprobs: false,
  }));
  assert.ok(!("include" in none) && !("top_logprobs" in none));
});

Deno.test("reasoning goes back only with the output that followed it: an answer cut while reasoning sends none", () => {
  const own = openAiReasoningDetail({ id: "rs_1", encrypted_content: "gAAAA-own" }, 0, "o3-pro");
  const body = responsesRequestBody(upstreamRequest(O3, {
    messages: [
      { role: "user", content: "Think hard." },
      { role: "assistant", content: "", reasoning_details: [own] },
      { role: "user", content: "Go on." },
    ],
  }));
  assert.deepEqual(body.input, [
    { role: "user", content: "Think hard." },
    { role: "user", content: "Go on." },
  ]);
});

Deno.test("codex-mini reasons, as the o4-mini it is tuned from", () => {
  const body = responsesRequestBody(
    upstreamRequest(testModel("openai_responses", "codex-mini-latest"), {
      messages: [{ role: "user", content: "hi" }],
    }),
  );
  assert.deepEqual(body.include, ["reasoning.encrypted_content"]);
});

Deno.test("OpenAI's Responses API is asked for the default tier when the client names none or auto", () => {
  const tier = (service_tier?: string) =>
    responsesRequestBody(
      upstreamRequest(GPT, { messages: [{ role: "user", content: "hi" }], service_tier }),
      { pinDefaultTier: true },
    ).service_tier;
  assert.equal(tier(), "default");
  assert.equal(tier("auto"), "default");
  assert.equal(tier("default"), "default");
});
