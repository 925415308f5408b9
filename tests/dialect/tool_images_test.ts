/**
 * A tool that returns an image (a screenshot, a chart), on every provider kind: the image reaches
 * the provider in the form its wire format takes, the provider bills it, and the hold covers that
 * bill: the charge is exactly the provider's usage, within what was reserved.
 */
import assert from "node:assert/strict";
import type OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, tool } from "ai";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { z } from "zod";
import { pngBase64 } from "../fakes/common.ts";
import { chatHoldingExactly } from "../helpers.ts";
import {
  ADAPTIVE_CLAUDE,
  answeredToolCall,
  CLAUDE_MODEL,
  type Dialect,
  type DialectModel,
  expectedCharge,
  langChainModel,
  OPENAI_MODEL,
  openAiClient,
  RESPONSES_MODEL,
} from "./harness.ts";
import { withDialect } from "./harness.ts";

const SCREENSHOT = `data:image/png;base64,${pngBase64(1024, 1024)}`;
/** The fewest tokens the screenshot costs: OpenAI's tiles (high detail), Claude's area. */
const IMAGE_TOKENS = { openai: 765, anthropic: Math.ceil((1024 * 1024) / 750) };

const ROUTES = [
  { model: OPENAI_MODEL, kind: "openai" },
  { model: RESPONSES_MODEL, kind: "openai_responses" },
  { model: CLAUDE_MODEL, kind: "anthropic" },
] as const;

type Route = (typeof ROUTES)[number];

function scriptAnswer(d: Dialect, route: Route) {
  if (route.kind === "anthropic") d.claude.script({ text: "A login form." });
  else d.openai.script({ content: "A login form." });
}

/** The charge is the provider's own count of the request, images included, within the hold. */
async function assertBilledWithinHold(
  d: Dialect,
  route: Route,
  usage: { prompt: number; completion: number },
) {
  const [record] = await d.newUsage();
  assert.equal(record.promptTokens, usage.prompt);
  assert.ok(
    record.promptTokens > IMAGE_TOKENS[route.kind === "anthropic" ? "anthropic" : "openai"],
    "the provider billed the image",
  );
  assert.equal(record.cost, expectedCharge(route.model as DialectModel, usage));
  assert.equal(record.uncharged, 0);
  assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
}

/** What the provider got in place of the tool's output, in its own wire format. */
function sentToolOutput(d: Dialect, route: Route): unknown {
  if (route.kind === "anthropic") {
    return d.claude.messages().at(-1)!.body.messages.at(-1)!.content;
  }
  if (route.kind === "openai_responses") return d.openai.responses.at(-1)!.body.input.at(-1);
  return d.openai.chats.at(-1)!.body.messages.slice(-2);
}

function expectedToolOutput(route: Route, callId: string): unknown {
  const base64 = SCREENSHOT.split(",")[1];
  if (route.kind === "anthropic") {
    return [{
      type: "tool_result",
      tool_use_id: callId,
      content: [
        { type: "text", text: "The screen:" },
        { type: "image", source: { type: "base64", media_type: "image/png", data: base64 } },
      ],
    }];
  }
  if (route.kind === "openai_responses") {
    return {
      type: "function_call_output",
      call_id: callId,
      output: [
        { type: "input_text", text: "The screen:" },
        { type: "input_image", image_url: SCREENSHOT, detail: "high" },
      ],
    };
  }
  // OpenAI's chat API takes images in user messages only.
  return [
    { role: "tool", tool_call_id: callId, content: [{ type: "text", text: "The screen:" }] },
    {
      role: "user",
      content: [
        { type: "text", text: `Images from tool call ${callId}:` },
        { type: "image_url", image_url: { url: SCREENSHOT, detail: "high" } },
      ],
    },
  ];
}

for (const route of ROUTES) {
  Deno.test(`openai SDK responses.create, ${route.kind} kind: a function_call_output's image reaches the provider and is billed within the hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const answer = await openAiClient(d).responses.create({
        model: route.model,
        ...answeredToolCall("What is on the screen?", "screenshot", [
          { type: "input_text", text: "The screen:" },
          { type: "input_image", image_url: SCREENSHOT, detail: "high" },
        ]),
        max_output_tokens: 16,
      });
      assert.equal(answer.output_text, "A login form.");
      assert.deepEqual(sentToolOutput(d, route), expectedToolOutput(route, "call_1"));
      await assertBilledWithinHold(d, route, {
        prompt: answer.usage!.input_tokens,
        completion: answer.usage!.output_tokens,
      });
    }));

  if (route.kind === "openai_responses") continue;
  Deno.test(`openai SDK chat.completions.create, ${route.kind} kind: a tool message's image reaches the provider and is billed within the hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const toolMessage = {
        role: "tool",
        tool_call_id: "call_1",
        content: [
          { type: "text", text: "The screen:" },
          { type: "image_url", image_url: { url: SCREENSHOT, detail: "high" } },
        ],
      } as unknown as OpenAI.ChatCompletionToolMessageParam;
      const answer = await openAiClient(d).chat.completions.create({
        model: route.model,
        messages: [
          { role: "user", content: "What is on the screen?" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{
              id: "call_1",
              type: "function",
              function: { name: "screenshot", arguments: "{}" },
            }],
          },
          toolMessage,
        ],
        tools: [{ type: "function", function: { name: "screenshot" } }],
        max_tokens: 16,
      });
      assert.equal(answer.choices[0].message.content, "A login form.");
      assert.deepEqual(sentToolOutput(d, route), expectedToolOutput(route, "call_1"));
      await assertBilledWithinHold(d, route, {
        prompt: answer.usage!.prompt_tokens,
        completion: answer.usage!.completion_tokens,
      });
    }));
}

/** The AI SDK's two ways in: its default OpenAI provider (the Responses API) and chat completions. */
const AI_SDK_PROVIDERS = [
  {
    name: "default OpenAI provider",
    model: (d: Dialect, id: string) => createOpenAI({ baseURL: d.baseURL, apiKey: d.apiKey })(id),
  },
  {
    name: "OpenAI-compatible provider with multi-part tool content",
    model: (d: Dialect, id: string) =>
      createOpenAICompatible({
        name: "tollbooth",
        baseURL: d.baseURL,
        apiKey: d.apiKey,
        includeUsage: true,
        supportsMultiPartToolContent: true,
      })(id),
  },
];

for (
  const [route, provider] of ROUTES.filter((r) => r.kind !== "openai_responses").flatMap((r) =>
    AI_SDK_PROVIDERS.map((p) => [r, p] as const)
  )
) {
  Deno.test(`AI SDK ${provider.name}, ${route.kind} kind: a tool whose model output is a screenshot runs its loop, each step billed within its hold`, () =>
    withDialect(async (d) => {
      if (route.kind === "anthropic") {
        d.claude.script(
          { content: [{ type: "tool_use", name: "screenshot", input: {} }] },
          { text: "A login form." },
        );
      } else {
        d.openai.script({ toolCalls: [{ name: "screenshot", arguments: {} }] }, {
          content: "A login form.",
        });
      }
      const result = await generateText({
        model: provider.model(d, route.model),
        prompt: "What is on the screen?",
        tools: {
          screenshot: tool({
            inputSchema: z.object({}),
            execute: () => Promise.resolve("taken"),
            toModelOutput: () => ({
              type: "content",
              value: [
                { type: "text", text: "The screen:" },
                {
                  type: "file",
                  data: { type: "data", data: SCREENSHOT.split(",")[1] },
                  mediaType: "image/png",
                },
              ],
            }),
          }),
        },
        stopWhen: stepCountIs(2),
        maxOutputTokens: 16,
      });
      assert.equal(result.text, "A login form.");
      const sent = route.kind === "anthropic"
        ? d.claude.messages().at(-1)!.body.messages.at(-1)!.content
        : d.openai.chats.at(-1)!.body.messages.at(-1)!.content;
      assert.ok(JSON.stringify(sent).includes(SCREENSHOT.split(",")[1]), "the image was sent");
      const records = await d.newUsage();
      assert.equal(records.length, 2);
      assert.ok(records[1].promptTokens > IMAGE_TOKENS[route.kind], "the image was billed");
      for (const record of records) {
        assert.equal(record.uncharged, 0);
        assert.ok(
          record.cost <= record.reserved,
          `charged ${record.cost} within ${record.reserved}`,
        );
      }
    }));
}

for (const route of ROUTES.filter((r) => r.kind !== "openai_responses")) {
  Deno.test(`LangChain ChatOpenAI, ${route.kind} kind: a ToolMessage with an image block is sent and billed within its hold`, () =>
    withDialect(async (d) => {
      scriptAnswer(d, route);
      const llm = langChainModel(d, route.model, { maxTokens: 16 }).bindTools([{
        type: "function",
        function: { name: "screenshot", parameters: {} },
      }]);
      const answer = await llm.invoke([
        new HumanMessage("What is on the screen?"),
        new AIMessage({
          content: "",
          tool_calls: [{ id: "call_1", name: "screenshot", args: {} }],
        }),
        new ToolMessage({
          tool_call_id: "call_1",
          content: [
            { type: "text", text: "The screen:" },
            { type: "image_url", image_url: { url: SCREENSHOT, detail: "high" } },
          ],
        }),
      ]);
      assert.equal(answer.content, "A login form.");
      assert.deepEqual(sentToolOutput(d, route), expectedToolOutput(route, "call_1"));
      const [record] = await d.newUsage();
      assert.ok(record.promptTokens > IMAGE_TOKENS[route.kind], "the image was billed");
      assert.equal(record.uncharged, 0);
      assert.ok(record.cost <= record.reserved, `charged ${record.cost} within ${record.reserved}`);
    }));
}

Deno.test("Opus 4.7 reads an image at up to 2576 px, about three times the tokens of earlier Claude models: the hold covers it", () =>
  withDialect(async (d) => {
    // 2576 × 1456 px: 92 × 52 patches of 28 px, where a model that scales to 1568 px bills 1,852.
    const wide = `data:image/png;base64,${pngBase64(2576, 1456)}`;
    const body = {
      model: ADAPTIVE_CLAUDE,
      max_tokens: 16,
      messages: [{
        role: "user" as const,
        content: [
          { type: "image_url" as const, image_url: { url: wide } },
          { type: "text" as const, text: "What does the dashboard show?" },
        ],
      }],
    };
    d.claude.script({ text: "Sales." }, { text: "Sales." });
    await openAiClient(d).chat.completions.create(body);
    const billed = d.claude.messages()[0].inputTokens;
    assert.ok(billed > 92 * 52, `billed ${billed}`);
    const [learned] = await d.newUsage();
    assert.equal(learned.promptTokens, billed);

    // An app holding exactly that hold is charged the whole bill.
    const { res, record } = await chatHoldingExactly(d.s, body, learned.reserved);
    assert.equal(res.status, 200);
    assert.equal(record.model, ADAPTIVE_CLAUDE);
    assert.equal(record.promptTokens, billed);
    assert.equal(record.uncharged, 0, `held ${record.reserved}, ${record.uncharged} uncharged`);
  }));

Deno.test("each image block on Claude is held over its framing beyond its pixels: a hundred one-pixel images are charged in full from an app holding exactly the hold", () =>
  withDialect(async (d) => {
    const dot = `data:image/png;base64,${pngBase64(1, 1)}`;
    const body = {
      model: CLAUDE_MODEL,
      max_tokens: 16,
      messages: [{
        role: "user" as const,
        content: [
          ...Array.from({ length: 100 }, () => ({
            type: "image_url" as const,
            image_url: { url: dot },
          })),
          { type: "text" as const, text: "How many dots?" },
        ],
      }],
    };
    d.claude.script({ text: "100." }, { text: "100." });
    await openAiClient(d).chat.completions.create(body);
    const billed = d.claude.messages()[0].inputTokens;
    assert.ok(billed > 100 * 65, `billed ${billed}`);
    const [learned] = await d.newUsage();
    const { res, record } = await chatHoldingExactly(d.s, body, learned.reserved);
    assert.equal(res.status, 200);
    assert.equal(record.promptTokens, billed);
    assert.equal(record.uncharged, 0, `held ${record.reserved}, ${record.uncharged} uncharged`);
  }));
