/**
 * PDFs in a chat request (a `file` part), as the openai SDK, the AI SDK and LangChain send them:
 * nothing bounds what a PDF bills but its provider's own count, so a Claude model takes one after
 * Anthropic's count_tokens has counted the request, and holds that count; a model whose provider
 * cannot count one refuses it before anything is held.
 */
import assert from "node:assert/strict";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";
import { HumanMessage } from "@langchain/core/messages";
import OpenAI, { APIError } from "openai";
import { samplePdfBase64 } from "../fakes/common.ts";
import { startOpenAiUpstream } from "../fakes/openai_upstream.ts";
import { PDF_PAGE_TOKENS } from "../fakes/openai_responses.ts";
import {
  answeredToolCall,
  CACHE_WRITING_GPT,
  CLAUDE_MODEL,
  type Dialect,
  expectedCharge,
  langChainModel,
  OPENAI_MODEL,
  openAiClient,
  RESPONSES_MODEL,
} from "./harness.ts";
import { withDialect } from "./harness.ts";
import { assertAuditClean, newUsageOf, startService } from "../helpers.ts";
import { SIMULATED_PDF_PAGE_TOKENS } from "@/lib/gateway/providers/simulator/simulator.ts";

const PAGES = 3;
const PDF = samplePdfBase64(PAGES);
const PDF_URL = `data:application/pdf;base64,${PDF}`;

/**
 * The routes whose provider counts a PDF, and what each fake bills a page: the two kinds that
 * count one, and a model served through OpenAI's chat API whose requests holding a PDF its
 * catalog entry sends to the Responses API (`documents_provider`).
 */
const ROUTES = [
  { name: "Claude model", model: CLAUDE_MODEL, kind: "anthropic", pageTokens: 2_000 },
  {
    name: "Responses-kind model",
    model: RESPONSES_MODEL,
    kind: "openai_responses",
    pageTokens: PDF_PAGE_TOKENS,
  },
  {
    name: "chat-API model with a documents provider",
    model: OPENAI_MODEL,
    kind: "openai_responses",
    pageTokens: PDF_PAGE_TOKENS,
  },
] as const;
type Route = (typeof ROUTES)[number];

function scriptAnswer(d: Dialect, route: Route) {
  if (route.kind === "anthropic") d.claude.script({ text: "Revenue grew." });
  else d.openai.script({ content: "Revenue grew." });
}

/** The PDF as a Responses API message gives it. */
const PDF_INPUT = [{
  role: "user" as const,
  content: [
    { type: "input_text" as const, text: "Summarise the report." },
    { type: "input_file" as const, file_data: PDF_URL, filename: "report.pdf" },
  ],
}];

const fileMessage = (data = PDF) => ({
  role: "user" as const,
  content: [
    { type: "text" as const, text: "Summarise the report." },
    {
      type: "file" as const,
      file: { file_data: `data:application/pdf;base64,${data}`, filename: "report.pdf" },
    },
  ],
});

/** What the provider was sent for the PDF, in its own wire format, and what it counted first. */
function sentDocument(d: Dialect, route: Route): { sent: unknown; counted: unknown } {
  if (route.kind === "anthropic") {
    const find = (messages: { content: { type: string }[] }[]) =>
      messages.at(-1)!.content.find((b) => b.type === "document");
    const counted = d.claude.counts()[0];
    return {
      sent: find(d.claude.messages().at(-1)!.body.messages),
      counted: counted && find(counted.body.messages),
    };
  }
  const find = (input: { content: { type: string }[] }[]) =>
    input.at(-1)!.content.find((p) => p.type === "input_file");
  const counted = d.openai.tokenCounts[0];
  return {
    sent: find(d.openai.responses.at(-1)!.body.input),
    counted: counted && find(counted.body.input),
  };
}

/** The PDF reached the provider in its wire format, counted first with the same body. */
function assertDocumentSent(d: Dialect, route: Route, filename = "report.pdf") {
  const expected = route.kind === "anthropic"
    ? {
      type: "document",
      source: { type: "base64", media_type: "application/pdf", data: PDF },
      title: filename,
    }
    : { type: "input_file", file_data: PDF_URL, filename };
  const { sent, counted } = sentDocument(d, route);
  assert.ok(counted, "the provider counted the request before the call");
  assert.deepEqual(sent, expected);
  assert.deepEqual(counted, expected);
}

/** Charged exactly the provider's count of the PDF and the answer, within the hold. */
async function assertBilledWithinHold(d: Dialect, route: Route) {
  const [record] = await d.newUsage();
  const counted = route.kind === "anthropic"
    ? d.claude.counts()[0].inputTokens
    : d.openai.tokenCounts[0].inputTokens;
  assert.ok(
    record.promptTokens > PAGES * route.pageTokens,
    `the PDF was billed: ${record.promptTokens}`,
  );
  assert.equal(record.promptTokens, counted, "billed what was counted");
  assert.equal(record.uncharged, 0);
  assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
  assert.equal((await d.s.wallet(d.appId)).reserved, 0, "nothing left held");
}

for (const route of ROUTES) {
  Deno.test(`openai SDK, ${route.name}: a PDF file part is counted, sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const answer = await openAiClient(d).chat.completions.create({
        model: route.model,
        messages: [fileMessage()],
        max_tokens: 32,
      });
      assert.equal(answer.choices[0].message.content, "Revenue grew.");
      assertDocumentSent(d, route);
      await assertBilledWithinHold(d, route);
    }));

  Deno.test(`openai SDK, ${route.name}, streamed: a PDF file part is counted, sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const stream = await openAiClient(d).chat.completions.create({
        model: route.model,
        messages: [fileMessage()],
        max_tokens: 32,
        stream: true,
        stream_options: { include_usage: true },
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      assert.equal(text, "Revenue grew.");
      assertDocumentSent(d, route);
      await assertBilledWithinHold(d, route);
    }));

  Deno.test(`openai SDK responses.create, ${route.name}: an input_file PDF is counted, sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const answer = await openAiClient(d).responses.create({
        model: route.model,
        input: PDF_INPUT,
        max_output_tokens: 32,
      });
      assert.equal(answer.output_text, "Revenue grew.");
      assertDocumentSent(d, route);
      await assertBilledWithinHold(d, route);
    }));

  for (
    const [sdk, endpoint] of [
      ["AI SDK chat model", "chat"],
      ["AI SDK default provider (the Responses API)", "responses"],
    ] as const
  ) {
    Deno.test(`${sdk}, ${route.name}: a PDF file part is counted, sent and billed within its hold`, () =>
      withDialect(async (d) => {
        scriptAnswer(d, route);
        const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
        const result = await generateText({
          model: endpoint === "chat" ? openai.chat(route.model) : openai(route.model),
          messages: [{
            role: "user",
            content: [
              { type: "text", text: "Summarise the report." },
              { type: "file", data: PDF, mediaType: "application/pdf", filename: "report.pdf" },
            ],
          }],
          maxOutputTokens: 32,
        });
        assert.equal(result.text, "Revenue grew.");
        assertDocumentSent(d, route);
        await assertBilledWithinHold(d, route);
      }));
  }

  Deno.test(`LangChain ChatOpenAI, ${route.name}: a standard file block with a PDF is counted, sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const llm = langChainModel(d, route.model, { maxTokens: 32 });
      const answer = await llm.invoke([
        new HumanMessage({
          content: [
            { type: "text", text: "Summarise the report." },
            {
              type: "file",
              source_type: "base64",
              mime_type: "application/pdf",
              data: PDF,
              metadata: { filename: "report.pdf" },
            },
          ],
        }),
      ]);
      assert.equal(answer.content, "Revenue grew.");
      assertDocumentSent(d, route);
      await assertBilledWithinHold(d, route);
    }));

  Deno.test(`${route.name}: a PDF the provider cannot open gets its 400 from the count, before anything is held`, () =>
    withDialect(async (d) => {
      const before = await d.s.wallet(d.appId);
      const broken = btoa("%PDF-1.4\n1 0 obj\n<< /Type /Page"); // cut short: no %%EOF
      const error = await openAiClient(d).chat.completions.create({
        model: route.model,
        messages: [fileMessage(broken)],
        max_tokens: 32,
      }).catch((e) => e);
      assert.ok(error instanceof APIError, String(error));
      assert.equal(error.status, 400);
      const fake = route.kind === "anthropic" ? d.claude : d.openai;
      assert.deepEqual(
        fake.received.map((r) => `${r.path} ${r.status}`),
        [`${
          route.kind === "anthropic" ? "/v1/messages/count_tokens" : "/v1/responses/input_tokens"
        } 400`],
        "the count refused it, and no call was made",
      );
      assert.match(
        error.message,
        route.kind === "anthropic"
          ? /The PDF specified was not valid/
          : /could not be parsed as a PDF/,
      );
      // Its param would name a field of the body we made, not of the client's.
      assert.equal(error.param, undefined);
      assert.equal((await d.newUsage()).length, 0);
      assert.deepEqual(await d.s.wallet(d.appId), before, "nothing held or charged");
    }));
}

/** The tool output the provider was sent, and counted first, in its own wire format. */
function sentToolOutput(d: Dialect, route: Route): { sent: unknown; counted: unknown } {
  if (route.kind === "anthropic") {
    const last = (messages: { content: unknown[] }[]) => messages.at(-1)!.content;
    return {
      sent: last(d.claude.messages().at(-1)!.body.messages),
      counted: last(d.claude.counts()[0].body.messages),
    };
  }
  return {
    sent: d.openai.responses.at(-1)!.body.input.at(-1),
    counted: d.openai.tokenCounts[0].body.input.at(-1),
  };
}

function expectedToolOutput(route: Route): unknown {
  if (route.kind === "anthropic") {
    return [{
      type: "tool_result",
      tool_use_id: "call_1",
      content: [
        { type: "text", text: "The attachment:" },
        {
          type: "document",
          source: { type: "base64", media_type: "application/pdf", data: PDF },
          title: "report.pdf",
        },
      ],
    }];
  }
  return {
    type: "function_call_output",
    call_id: "call_1",
    output: [
      { type: "input_text", text: "The attachment:" },
      { type: "input_file", file_data: PDF_URL, filename: "report.pdf" },
    ],
  };
}

for (const route of ROUTES) {
  Deno.test(`openai SDK, ${route.name}: a tool message's PDF is counted, sent in the tool's result and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const answer = await openAiClient(d).chat.completions.create({
        model: route.model,
        messages: [
          { role: "user", content: "What does the attachment say?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{
              id: "call_1",
              type: "function",
              function: { name: "fetch_attachment", arguments: "{}" },
            }],
          },
          {
            role: "tool",
            tool_call_id: "call_1",
            // The openai SDK types a tool message's parts as text; the gateway takes files too.
            content: [
              { type: "text", text: "The attachment:" },
              { type: "file", file: { file_data: PDF_URL, filename: "report.pdf" } },
            ] as unknown as OpenAI.ChatCompletionContentPartText[],
          },
        ],
        tools: [{ type: "function", function: { name: "fetch_attachment" } }],
        max_tokens: 32,
      });
      assert.equal(answer.choices[0].message.content, "Revenue grew.");
      const { sent, counted } = sentToolOutput(d, route);
      assert.deepEqual(sent, expectedToolOutput(route));
      assert.deepEqual(counted, expectedToolOutput(route));
      await assertBilledWithinHold(d, route);
    }));

  Deno.test(`openai SDK responses.create, ${route.name}: a function_call_output's input_file is counted, sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const answer = await openAiClient(d).responses.create({
        model: route.model,
        ...answeredToolCall("What does the attachment say?", "fetch_attachment", [
          { type: "input_text", text: "The attachment:" },
          { type: "input_file", file_data: PDF_URL, filename: "report.pdf" },
        ]),
        max_output_tokens: 32,
      });
      assert.equal(answer.output_text, "Revenue grew.");
      const { sent, counted } = sentToolOutput(d, route);
      assert.deepEqual(sent, expectedToolOutput(route));
      assert.deepEqual(counted, expectedToolOutput(route));
      await assertBilledWithinHold(d, route);
    }));
}

Deno.test("a PDF to a model served through OpenAI's chat API alone, which cannot count it, is refused before anything is held", () =>
  withDialect(async (d) => {
    const before = await d.s.wallet(d.appId);
    const error = await openAiClient(d).chat.completions.create({
      model: CACHE_WRITING_GPT,
      messages: [fileMessage()],
      max_tokens: 32,
    }).catch((e) => e);
    assert.ok(error instanceof APIError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.code, "unsupported_parameter");
    assert.equal(error.param, "messages[0].content[1].type");
    assert.equal(d.openai.received.length, 0, "no call was made");
    assert.deepEqual(await d.s.wallet(d.appId), before, "nothing held or charged");
  }));

Deno.test("a chat-API model's request holding a PDF goes to its documents provider, and its other requests stay on the chat API", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    d.openai.script({ content: "Revenue grew." }, { content: "Hello." });
    const withPdf = await client.chat.completions.create({
      model: OPENAI_MODEL,
      messages: [fileMessage()],
      max_tokens: 32,
    }).withResponse();
    const without = await client.chat.completions.create({
      model: OPENAI_MODEL,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 32,
    }).withResponse();
    assert.equal(withPdf.data.choices[0].message.content, "Revenue grew.");
    assert.equal(without.data.choices[0].message.content, "Hello.");
    assert.equal(withPdf.response.headers.get("tollbooth-provider"), "oair");
    assert.equal(without.response.headers.get("tollbooth-provider"), "oai");
    assert.deepEqual(
      d.openai.received.map((r) => r.path),
      ["/v1/responses/input_tokens", "/v1/responses", "/v1/chat/completions"],
    );
    assert.equal(d.openai.responses[0].body.model, "gpt-4.1-mini");
    const records = await d.newUsage();
    assert.deepEqual(records.map((r) => [r.model, r.provider]), [
      [OPENAI_MODEL, "oair"],
      [OPENAI_MODEL, "oai"],
    ]);
    assert.equal(records[0].promptTokens, d.openai.tokenCounts[0].inputTokens, "billed as counted");
  }));

Deno.test("responses.create: a stored PDF conversation on a chat-API model continued by previous_response_id goes to its documents provider again, counted with the PDF", () =>
  withDialect(async (d) => {
    const client = openAiClient(d);
    d.openai.script({ content: "Revenue grew." }, { content: "Costs fell." });
    const first = await client.responses.create({
      model: OPENAI_MODEL,
      input: PDF_INPUT,
      max_output_tokens: 32,
    });
    const next = await client.responses.create({
      model: OPENAI_MODEL,
      previous_response_id: first.id,
      input: "And the costs?",
      max_output_tokens: 32,
    }).withResponse();
    assert.equal(next.data.output_text, "Costs fell.");
    assert.equal(next.response.headers.get("tollbooth-provider"), "oair");
    assert.deepEqual(
      d.openai.received.map((r) => r.path),
      [
        "/v1/responses/input_tokens",
        "/v1/responses",
        "/v1/responses/input_tokens",
        "/v1/responses",
      ],
    );
    const hasPdf = (input: { content: { type: string }[] | string }[]) =>
      input.some((m) => Array.isArray(m.content) && m.content.some((p) => p.type === "input_file"));
    assert.ok(hasPdf(d.openai.tokenCounts[1].body.input), "the follow-up's count holds the PDF");
    assert.ok(hasPdf(d.openai.responses[1].body.input), "and so does its call");
    const records = await d.newUsage();
    assert.deepEqual(
      records.map((r) => r.promptTokens),
      d.openai.tokenCounts.map((c) => c.inputTokens),
      "each turn billed as counted",
    );
    for (const r of records) {
      assert.ok(r.cost <= r.reserved, `charged ${r.cost} within ${r.reserved}`);
    }
  }));

Deno.test("a field OpenAI's Responses API lacks, on a chat-API model's request holding a PDF, is refused before anything is held, saying where such a request goes", () =>
  withDialect(async (d) => {
    const before = await d.s.wallet(d.appId);
    const error = await openAiClient(d).chat.completions.create({
      model: OPENAI_MODEL,
      messages: [fileMessage()],
      max_tokens: 32,
      stop: ["END"],
    }).catch((e) => e);
    assert.ok(error instanceof APIError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.code, "unsupported_parameter");
    assert.equal(error.param, "stop");
    assert.match(
      error.message,
      /A request holding a PDF is served on oai\/gpt-4\.1-mini through OpenAI's Responses API/,
    );
    assert.equal(d.openai.received.length, 0, "no call was made");
    assert.deepEqual(await d.s.wallet(d.appId), before, "nothing held or charged");
  }));

Deno.test("a refusal a chat-API model would make without its documents route does not blame that route", () =>
  withDialect(async (d) => {
    const error = await openAiClient(d).chat.completions.create({
      model: OPENAI_MODEL,
      messages: [{
        role: "user",
        content: [
          ...fileMessage().content,
          { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } },
        ],
      }],
      max_tokens: 32,
    }).catch((e) => e);
    assert.ok(error instanceof APIError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.param, "messages[0].content[2].type");
    assert.match(error.message, /Unsupported content part 'input_audio'/);
    assert.doesNotMatch(error.message, /A request holding a PDF is served/);
    assert.equal(d.openai.received.length, 0, "no call was made");
  }));

Deno.test("a PDF to a chat-API model with fallbacks and a documents provider goes to the documents provider alone", async () => {
  const openai = startOpenAiUpstream();
  const s = await startService({
    catalogFile: {
      providers: {
        oai: { kind: "openai", base_url: "http://127.0.0.1:9", api_key_env: "K" },
        backup: { kind: "openai", base_url: "http://127.0.0.1:9", api_key_env: "K" },
        oair: { kind: "openai_responses", base_url: openai.baseUrl, api_key_env: "K" },
      },
      models: [{
        id: "oai/gpt-4.1",
        provider: "oai",
        upstream_model: "gpt-4.1",
        input_usd_per_mtok: "2.00",
        output_usd_per_mtok: "8.00",
        context_tokens: 200_000,
        max_output_tokens: 8192,
        fallbacks: [{ provider: "backup", upstream_model: "gpt-4.1-mini" }],
        documents_provider: "oair",
      }],
    },
    env: { K: openai.apiKey },
  });
  try {
    const { appId, apiKey } = await s.newApp();
    openai.script({ content: "Revenue grew." });
    const res = await s.chat(apiKey, {
      model: "oai/gpt-4.1",
      messages: [fileMessage()],
      max_tokens: 32,
    });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(res.headers.get("tollbooth-provider"), "oair");
    assert.equal((await res.json()).choices[0].message.content, "Revenue grew.");
    const [record] = await newUsageOf(s, appId)();
    assert.equal(record.promptTokens, openai.tokenCounts[0].inputTokens);
    assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
    await s.wallets.drain();
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
    await openai.close();
  }
});

Deno.test("a PDF given without a file name reaches OpenAI's Responses API as document.pdf", () =>
  withDialect(async (d) => {
    d.openai.script({ content: "Revenue grew." });
    await openAiClient(d).chat.completions.create({
      model: RESPONSES_MODEL,
      messages: [{
        role: "user",
        content: [{ type: "file", file: { file_data: PDF_URL } }],
      }],
      max_tokens: 32,
    });
    assertDocumentSent(d, ROUTES[1], "document.pdf");
    await assertBilledWithinHold(d, ROUTES[1]);
  }));

Deno.test("a PDF to a model that falls back to another model is refused before anything is held", async () => {
  const s = await startService({
    catalogFile: {
      providers: {
        ant: { kind: "anthropic", base_url: "http://127.0.0.1:9", api_key_env: "K" },
        backup: { kind: "anthropic", base_url: "http://127.0.0.1:9", api_key_env: "K" },
      },
      models: [{
        id: "ant/claude",
        provider: "ant",
        upstream_model: "claude-sonnet-4-5",
        input_usd_per_mtok: "3.00",
        output_usd_per_mtok: "15.00",
        context_tokens: 200_000,
        max_output_tokens: 8192,
        fallbacks: [{ provider: "backup", upstream_model: "claude-haiku-4-5" }],
      }],
    },
    env: { K: "sk-ant-unused-0123456789" },
  });
  try {
    const { appId, apiKey } = await s.newApp();
    const before = await s.wallet(appId);
    const res = await s.chat(apiKey, {
      model: "ant/claude",
      messages: [fileMessage()],
      max_tokens: 32,
    });
    assert.equal(res.status, 400);
    const { error } = await res.json();
    assert.equal(error.code, "unsupported_parameter");
    assert.match(error.message, /its fallbacks are served by others/);
    assert.equal(error.param, "messages[0].content[1].type");
    assert.deepEqual(await s.wallet(appId), before, "nothing held or charged");
  } finally {
    await s.close();
  }
});

Deno.test("responses.create: an input_file to a model served through OpenAI's chat API alone is refused in the Responses API's names", () =>
  withDialect(async (d) => {
    const error = await openAiClient(d).responses.create({
      model: CACHE_WRITING_GPT,
      input: PDF_INPUT,
      max_output_tokens: 32,
    }).catch((e) => e);
    assert.ok(error instanceof APIError, String(error));
    assert.equal(error.status, 400);
    assert.equal(error.code, "unsupported_parameter");
    assert.equal(error.param, "input[0].content[1].type");
    assert.match(error.message, /content part 'input_file'/);
    assert.equal(d.openai.received.length, 0, "no call was made");
  }));

Deno.test("the built-in simulator takes a PDF, held at its own count and charged exactly that bill", async () => {
  const s = await startService();
  try {
    const { appId, apiKey } = await s.newApp();
    const before = await s.wallet(appId);
    const res = await s.chat(apiKey, {
      model: "tollbooth/echo",
      messages: [fileMessage()],
      max_tokens: 32,
    });
    assert.equal(res.status, 200);
    const answer = await res.json();
    assert.equal(answer.choices[0].message.content, "Summarise the report.");
    assert.ok(answer.usage.prompt_tokens > PAGES * SIMULATED_PDF_PAGE_TOKENS, "its pages billed");
    const [record] = await newUsageOf(s, appId)();
    assert.equal(record.promptTokens, answer.usage.prompt_tokens);
    assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
    assert.equal(res.headers.get("tollbooth-request-cost"), answer.usage.cost);
    await s.wallets.drain();
    const after = await s.wallet(appId);
    assert.equal(before.available - after.available, record.cost, "the wallet paid the charge");
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("openai SDK, Claude model: a PDF marked with cache_control is written to Claude's cache, then read from it, each billed within its hold", () =>
  withDialect(async (d) => {
    const pdfTokens = PAGES * ROUTES[0].pageTokens;
    d.claude.script(
      { text: "Revenue grew.", cacheCreationInputTokens: pdfTokens },
      { text: "Revenue grew.", cacheReadInputTokens: pdfTokens },
    );
    // Claude's breakpoint on the file part itself (our extension, sent to Anthropic only).
    const messages = [{
      role: "user",
      content: [
        {
          type: "file",
          file: { file_data: PDF_URL, filename: "report.pdf" },
          cache_control: { type: "ephemeral" },
        },
        { type: "text", text: "Summarise the report." },
      ],
    }] as unknown as OpenAI.ChatCompletionMessageParam[];
    for (let turn = 0; turn < 2; turn++) {
      await openAiClient(d).chat.completions.create({
        model: CLAUDE_MODEL,
        messages,
        max_tokens: 32,
      });
    }
    const sent = d.claude.messages()[0].body.messages[0].content[0];
    assert.deepEqual(sent.cache_control, { type: "ephemeral" });
    const [write, read] = await d.newUsage();
    assert.equal(write.cacheWriteTokens, pdfTokens);
    assert.equal(read.cachedTokens, pdfTokens);
    for (const record of [write, read]) {
      assert.equal(
        record.cost,
        expectedCharge(CLAUDE_MODEL, {
          prompt: record.promptTokens,
          completion: record.completionTokens,
          cached: record.cachedTokens ?? 0,
          cacheWrite: record.cacheWriteTokens ?? 0,
        }),
      );
      assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
    }
    assert.ok(read.cost < write.cost, "the cached read costs less than the write");
  }));

for (const route of ROUTES) {
  Deno.test(`AI SDK default provider, ${route.name}: a tool whose model output is a PDF runs its loop, the PDF counted and each step billed within its hold`, () =>
    withDialect(async (d) => {
      if (route.kind === "anthropic") {
        d.claude.script(
          { content: [{ type: "tool_use", name: "fetch_attachment", input: {} }] },
          { text: "Revenue grew." },
        );
      } else {
        d.openai.script({ toolCalls: [{ name: "fetch_attachment", arguments: {} }] }, {
          content: "Revenue grew.",
        });
      }
      const openai = createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey });
      const result = await generateText({
        model: openai(route.model),
        prompt: "What does the attachment say?",
        tools: {
          fetch_attachment: tool({
            inputSchema: z.object({}),
            execute: () => Promise.resolve("fetched"),
            toModelOutput: () => ({
              type: "content",
              value: [
                { type: "text", text: "The attachment:" },
                {
                  type: "file",
                  data: { type: "data", data: PDF },
                  mediaType: "application/pdf",
                  filename: "report.pdf",
                },
              ],
            }),
          }),
        },
        stopWhen: stepCountIs(2),
        maxOutputTokens: 32,
      });
      assert.equal(result.text, "Revenue grew.");
      const counted = route.kind === "anthropic" ? d.claude.counts() : d.openai.tokenCounts;
      assert.ok(JSON.stringify(counted.at(-1)!.body).includes(PDF), "the PDF was counted");
      const records = await d.newUsage();
      assert.equal(records.length, 2);
      assert.ok(records[1].promptTokens > PAGES * route.pageTokens, "the PDF was billed");
      for (const record of records) {
        assert.equal(record.uncharged, 0);
        assert.ok(
          record.cost <= record.reserved,
          `charged ${record.cost} within ${record.reserved}`,
        );
      }
    }));
}
