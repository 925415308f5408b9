/** The request converter of the OpenAI kind: the client's body, faithfully, with our cap. */
import type { Model } from "@/lib/catalog/mod.ts";
import {
  type ChatMessage,
  imagePartsOf,
  type UserContentPart,
  withoutPartFields,
} from "../../chat_request.ts";
import type { UpstreamRequest } from "../types.ts";
import { offeredTools, plainToolChoice } from "../allowed_tools.ts";

/**
 * OpenAI's reasoning models (the o-series and GPT-5) refuse `max_tokens`; every other compatible
 * server knows `max_tokens`, while not all know `max_completion_tokens` (Ollama ignores it and
 * generates to its own limit). The model decides, never the field the client happened to use: the
 * cap is what keeps the provider's bill within the hold.
 */
export function outputCapParam(
  model: Pick<Model, "outputCapParam" | "upstreamModel">,
): "max_tokens" | "max_completion_tokens" {
  if (model.outputCapParam) return model.outputCapParam;
  if (REASONING_MODEL_NAME.test(model.upstreamModel)) return "max_completion_tokens";
  return "max_tokens";
}

/**
 * OpenAI's reasoning families: the o-series, GPT-5 and later (not GPT-35, Azure's GPT-3.5), and
 * codex-mini (o4-mini tuned for Codex).
 */
const OPENAI_REASONING = String.raw`o\d|gpt-[5-9](?!\d)|codex-mini`;

/** OpenAI's reasoning models, by OpenAI's own names. */
const REASONING_MODEL_NAME = new RegExp(`^(?:${OPENAI_REASONING})`);

/**
 * Families behind the OpenAI kind that think by default and bill the thinking, which their
 * streams never show, also under a router's prefix (OpenRouter's `openai/o3`): OpenAI's
 * o-series and GPT-5 on, Gemini 2.5 and 3, xAI's Grok 3 mini and Grok 4, DeepSeek's reasoner.
 */
const THINKING_MODEL_NAME = new RegExp(
  String.raw`(?:^|\/)(?:${OPENAI_REASONING}|gemini-(?:2\.5|3)|grok-(?:3-mini|4)|deepseek-reasoner)`,
  "i",
);

/**
 * A model that reasons before it answers and bills reasoning its stream does not show: by the
 * families' names, or flagged in the catalog by the cap parameter only reasoning models require.
 * A client that leaves such a stream saves nothing, so its usage is read to the end.
 */
export function isReasoningModel(
  model: Pick<Model, "outputCapParam" | "upstreamModel">,
): boolean {
  return model.outputCapParam === "max_completion_tokens" ||
    THINKING_MODEL_NAME.test(model.upstreamModel);
}

/** Gemini, also under a router's or a cloud's prefix: the one family that attaches extra_content. */
const GEMINI_MODEL_NAME = /(?:^|\/)gemini-/i;

/**
 * The message as the client sent it, without what only Tollbooth or other kinds read: without an
 * assistant's `reasoning_content` or `reasoning_details` unless the provider wants them back, its
 * `phase` (the Responses kind's), and
 * without its tool calls' `extra_content` (Gemini's thought signatures) unless the model is
 * Gemini's, so a conversation that moves on from Gemini to another model is not refused for a
 * field that model does not know.
 */
function upstreamMessage(
  m: ChatMessage,
  options: {
    forwardReasoningContent: boolean;
    forwardReasoningDetails: boolean;
    extraContent: boolean;
  },
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    ...m,
    content: withoutPartFields(m.content, ["cache_control"]),
  };
  if (!options.forwardReasoningContent) delete out.reasoning_content;
  if (!options.forwardReasoningDetails) delete out.reasoning_details;
  delete out.phase;
  if (
    !options.extraContent && m.role === "assistant" && m.tool_calls?.some((c) => c.extra_content)
  ) {
    out.tool_calls = m.tool_calls.map(({ extra_content: _extra, ...call }) => call);
  }
  return out;
}

/** What a tool message says in place of its images when it has no text of its own. */
export const TOOL_IMAGES_NOTE = "The tool's output is the images in the next user message.";

/** What introduces one tool call's images in the user message that carries them. */
export function toolImagesLabel(toolCallId: string): string {
  return `Images from tool call ${toolCallId}:`;
}

/**
 * OpenAI's chat API takes images only in user messages. A tool message's images therefore move to
 * one user message right after the run of tool messages they came in (a call turn's answers must
 * follow it unbroken), each call's introduced by its id; the tool message keeps its text, or says
 * where its images went. Messages without such images are returned as they are.
 */
export function toolImagesInUserMessages(messages: readonly ChatMessage[]): readonly ChatMessage[] {
  if (!messages.some(hasToolImages)) return messages;
  const out: ChatMessage[] = [];
  let moved: UserContentPart[] = [];
  const flush = () => {
    if (moved.length) out.push({ role: "user", content: moved });
    moved = [];
  };
  for (const m of messages) {
    if (m.role !== "tool") flush();
    if (m.role !== "tool" || !hasToolImages(m)) {
      out.push(m);
      continue;
    }
    const text = (m.content as UserContentPart[]).filter((part) => part.type === "text");
    out.push({ ...m, content: text.length ? text : TOOL_IMAGES_NOTE });
    moved.push({ type: "text", text: toolImagesLabel(m.tool_call_id) }, ...imagePartsOf(m));
  }
  flush();
  return out;
}

function hasToolImages(m: ChatMessage): boolean {
  return m.role === "tool" && imagePartsOf(m).length > 0;
}

/**
 * Whether `baseUrl` is OpenAI's own API, which runs a request that names no tier, or `auto`, at the
 * tier its project is set to: priority, billed above the catalog's prices, if its owner chose so.
 */
export function runsProjectTier(baseUrl: string): boolean {
  return URL.parse(baseUrl)?.hostname === "api.openai.com";
}

/**
 * The tier to ask for: the client's, or `default` by name where the server would otherwise choose
 * one (see runsProjectTier). Flex, scale and priority are refused before (other prices).
 */
export function askedServiceTier(
  clientTier: unknown,
  pinDefault: boolean,
): unknown {
  return pinDefault && (clientTier === undefined || clientTier === "auto") ? "default" : clientTier;
}

/**
 * The body for `POST {base_url}/chat/completions`: only `model`, the cap and usage are ours.
 * `streamOptions` false leaves `stream_options` out, the client's included, for a server that
 * refuses the field (Mistral's) and reports its usage on its last chunk unasked;
 * `forwardReasoningContent` sends assistants' `reasoning_content` back (DeepSeek's thinking mode),
 * `forwardReasoningDetails` their `reasoning_details` (OpenRouter's); `allowedTools` false offers a
 * server without OpenAI's `allowed_tools` choice only the tools it allows (offeredTools);
 * `pinDefaultTier` asks for the default service tier by name (runsProjectTier).
 */
export function openAiRequestBody(
  up: UpstreamRequest,
  stream: boolean,
  {
    streamOptions = true,
    forwardReasoningContent = false,
    forwardReasoningDetails = false,
    allowedTools = true,
    pinDefaultTier = false,
  } = {},
): Record<string, unknown> {
  const { stream_options: clientStreamOptions, tools, ...params } = up.request.params;
  const messageOptions = {
    forwardReasoningContent,
    forwardReasoningDetails,
    extraContent: GEMINI_MODEL_NAME.test(up.model.upstreamModel),
  };
  const body: Record<string, unknown> = {
    ...params,
    model: up.model.upstreamModel,
    messages: toolImagesInUserMessages(up.request.messages).map((m) =>
      upstreamMessage(m, messageOptions)
    ),
  };
  // OpenAI's chat API takes metadata only for a completion it stores, and refuses the request
  // otherwise; unstored, it tags nothing. A Responses request's metadata (kept here with the
  // response, stored or not) would otherwise fail every model served through this API.
  if (params.store !== true) delete body.metadata;
  if (tools?.length) {
    const offered = allowedTools ? tools : offeredTools(up.request);
    body.tools = offered.map(({ cache_control: _cc, ...tool }) => tool);
    if (!allowedTools) body.tool_choice = plainToolChoice(params.tool_choice);
  } else {
    // OpenAI refuses a tool_choice without tools; without tools "auto" and "none" (the only
    // choices then accepted, see checkTools) mean nothing, so they are not sent.
    delete body.tool_choice;
  }
  body[outputCapParam(up.model)] = up.maxTokens;
  const tier = askedServiceTier(params.service_tier, pinDefaultTier);
  if (tier !== undefined) body.service_tier = tier;
  body.stream = stream;
  // The usage is what the request is billed by: always asked for, whatever the client said.
  if (stream && streamOptions) {
    body.stream_options = { ...clientStreamOptions, include_usage: true };
  }
  return body;
}
