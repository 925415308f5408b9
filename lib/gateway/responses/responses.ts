/**
 * `POST /v1/responses`, served by the chat path: the body is converted to a chat request, paid
 * and answered by the same gateway (reservation, fallbacks, settle), and the answer converted
 * back. Stored responses live in the ResponseStore.
 */
import { ApiError, type Micros, randomToken } from "@/lib/core/mod.ts";
import { parseChatRequest } from "../chat_request.ts";
import { detailsOfEncryptedContent } from "../reasoning_details.ts";
import type { Caller, Gateway, RequestTrace, StreamEvent } from "../gateway.ts";
import {
  askedSummary,
  assertReferencedSize,
  chatFieldsOf,
  inputItemsOf,
  parseResponsesBody,
  referencedItems,
  type ResponsesBody,
  sentBackArguments,
  toChatRequest,
} from "./request.ts";
import { chatTurns, type ConversationItem } from "./turns.ts";
import {
  chunksToResponse,
  type ResponseEvent,
  ResponseEvents,
  type ResponseMeta,
  type ResponseObject,
} from "./response.ts";
import { MAX_STORED_RESPONSE_BYTES, ResponseStore, type StoredInputItem } from "./store.ts";

export interface ResponseOutcome {
  response: ResponseObject;
  provider: string;
  charged: Micros;
  available: Micros;
}

export interface ResponseStreamOutcome {
  provider: string;
  /** Balance right after the reservation. */
  available: Micros;
  /**
   * The events in batches (never empty), ending with response.completed (or .incomplete, or error
   * and response.failed).
   */
  events: AsyncGenerator<ResponseEvent[]>;
  cancel(): Promise<void>;
  /** Settled because the client stopped reading (see StreamOutcome). */
  stalled: Promise<void>;
}

export class Responses {
  readonly #gateway: Gateway;
  readonly #store: ResponseStore;
  readonly #log: (fields: Record<string, unknown>) => void;

  constructor(
    gateway: Gateway,
    store: ResponseStore,
    log: (fields: Record<string, unknown>) => void,
  ) {
    this.#gateway = gateway;
    this.#store = store;
    this.#log = log;
  }

  /** Validates the body, without reading anything: `stream` decides how the route answers. */
  parse(raw: unknown): ResponsesBody {
    return parseResponsesBody(raw);
  }

  async create(
    caller: Caller,
    body: ResponsesBody,
    requestId: string,
    trace: RequestTrace,
  ): Promise<ResponseOutcome> {
    const prepared = await this.#prepare(caller, body, trace);
    const { request, meta, inputPath } = prepared;
    const outcome = await this.#gateway.complete(caller, request, requestId, trace)
      .catch((error) => inResponsesTerms(error, inputPath));
    const usage = outcome.completion.usage as Parameters<typeof chunksToResponse>[1];
    const response = chunksToResponse(outcome.chunks, usage, body, meta);
    response.store = await this.#save(caller, prepared, response, requestId);
    return {
      response,
      provider: outcome.provider,
      charged: outcome.charged,
      available: outcome.available,
    };
  }

  async stream(
    caller: Caller,
    body: ResponsesBody,
    requestId: string,
    trace: RequestTrace,
  ): Promise<ResponseStreamOutcome> {
    const prepared = await this.#prepare(caller, body, trace);
    // The usage chunk (with the cost) is what response.completed reports.
    const request = { ...prepared.request, includeUsage: true };
    const outcome = await this.#gateway.stream(caller, request, requestId, trace)
      .catch((error) => inResponsesTerms(error, prepared.inputPath));
    let clientGone = false;
    const events = responseStreamEvents(outcome.events, new ResponseEvents(body, prepared.meta), {
      requestId,
      log: this.#log,
      clientGone: () => clientGone,
      // response.completed says whether it was stored (a response too large to keep is not).
      beforeFinish: async (response) => {
        response.store = await this.#save(caller, prepared, response, requestId);
      },
    });
    return {
      provider: outcome.provider,
      available: outcome.available,
      events,
      cancel: () => {
        clientGone = true;
        return outcome.cancel();
      },
      stalled: outcome.stalled,
    };
  }

  /** `GET /v1/responses/{id}`: the stored response as it was answered. */
  async retrieve(caller: Caller, responseId: string): Promise<ResponseObject> {
    const stored = await this.#store.retrieve(caller.appId, responseId);
    if (!stored) throw notStored(responseId);
    if (!stored.response) throw notKept(responseId);
    return { ...stored.response, output: stored.output };
  }

  /** `GET /v1/responses/{id}/input_items`: the input items of its request, a page at a time. */
  async inputItems(
    caller: Caller,
    responseId: string,
    query: { after?: string; limit?: string; order?: string },
  ) {
    const limit = query.limit === undefined ? 20 : Number(query.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
      throw new ApiError(
        "invalid_parameter",
        "Invalid value for 'limit': must be an integer from 1 to 100.",
        { param: "limit" },
      );
    }
    const order = query.order ?? "desc";
    if (order !== "asc" && order !== "desc") {
      throw new ApiError("invalid_parameter", "Invalid value for 'order': must be asc or desc.", {
        param: "order",
      });
    }
    const list = await this.#store.inputList(caller.appId, responseId);
    if (!list) throw notStored(responseId);
    if (!list.ids) throw notKept(responseId);
    const ids = order === "asc" ? list.ids : [...list.ids].reverse();
    let start = 0;
    if (query.after !== undefined) {
      const at = ids.indexOf(query.after);
      if (at === -1) {
        throw new ApiError(
          "invalid_parameter",
          `Invalid value for 'after': no input item '${query.after.slice(0, 100)}' in response '${
            responseId.slice(0, 100)
          }'.`,
          { param: "after" },
        );
      }
      start = at + 1;
    }
    // Only the page's items are read: another item may be an image's megabytes.
    const end = Math.min(start + limit, ids.length);
    const stored = order === "asc"
      ? await list.read(start, end)
      : (await list.read(ids.length - end, ids.length - start))?.reverse();
    if (!stored) throw notStored(responseId);
    return {
      object: "list" as const,
      data: stored,
      first_id: stored[0]?.id ?? null,
      last_id: stored.at(-1)?.id ?? null,
      has_more: start + limit < ids.length,
    };
  }

  /** `DELETE /v1/responses/{id}`: deleting again answers alike; another app's is not found. */
  async delete(caller: Caller, responseId: string) {
    if (!(await this.#store.delete(caller.appId, responseId))) throw notStored(responseId);
    return { id: responseId, object: "response" as const, deleted: true as const };
  }

  async #prepare(caller: Caller, body: ResponsesBody, trace: RequestTrace) {
    const previousId = body.previous_response_id ?? null;
    // Refused before the previous conversation is read, not after: it can be megabytes (an
    // image's bytes) for a few tokens, and a refusal is free and not counted by the rate limits.
    if (previousId) this.#assertOwnFields(body, trace);
    const previous = previousId ? await this.#store.load(caller.appId, previousId) : null;
    if (previousId && !previous) {
      throw new ApiError(
        "invalid_parameter",
        `Invalid value for 'previous_response_id': no stored response '${
          previousId.slice(0, 100)
        }' (responses created with store: false, expired after 30 days or of another app are not kept).`,
        { param: "previous_response_id" },
      );
    }
    const items = await this.#store.items(caller.appId, referencedItems(body));
    // As much as one stored response may hold, however often its items are referenced.
    assertReferencedSize(body, items, MAX_STORED_RESPONSE_BYTES);
    const converted = toChatRequest(body, { previous: previous?.conversation ?? [], items });
    const newItemId = (prefix: string) => `${prefix}_${randomToken(128)}`;
    let request;
    try {
      request = parseChatRequest(converted.chat);
      const summary = askedSummary(body);
      if (summary !== null) request.reasoningSummary = summary;
    } catch (error) {
      inResponsesTerms(error, converted.inputPath);
    }
    const meta: ResponseMeta = {
      id: `resp_${randomToken(128)}`,
      createdAt: Math.floor(Date.now() / 1000),
      model: body.model,
      store: body.store !== false,
      previousResponseId: previousId,
      newItemId,
    };
    return {
      request: request!,
      conversation: converted.conversation,
      input: inputItemsOf(body, items, newItemId),
      meta,
      inputPath: converted.inputPath,
    };
  }

  /**
   * What the request's own fields would be refused for once its conversation was read: the chat
   * request's fields, checked beside a message that breaks no rule, and its model.
   */
  #assertOwnFields(body: ResponsesBody, trace: RequestTrace) {
    try {
      parseChatRequest({
        model: body.model,
        messages: [{ role: "user", content: "." }],
        ...chatFieldsOf(body),
      });
    } catch (error) {
      inResponsesTerms(error);
    }
    this.#gateway.assertChatModel(body.model, trace);
  }

  /**
   * Stores the response when asked to and when it fits; whether it was stored. A failure to store
   * loses no money (the answer is charged and given) and is logged.
   */
  async #save(
    caller: Caller,
    prepared: {
      meta: ResponseMeta;
      conversation: Record<string, unknown>[];
      input: StoredInputItem[];
    },
    response: ResponseObject,
    requestId: string,
  ): Promise<boolean> {
    const { meta, conversation } = prepared;
    if (!meta.store) return false;
    const { output, ...kept } = response;
    const encoded = ResponseStore.encode({
      conversation: [...conversation, ...assistantTurn(output)],
      output,
      response: { ...kept, store: true },
      input: prepared.input,
    });
    if (!encoded) return false;
    try {
      await this.#store.save(caller.appId, meta.id, encoded, output);
      return true;
    } catch (error) {
      this.#log({
        level: "error",
        requestId,
        event: "response_store_failed",
        error: String(error),
      });
      return false;
    }
  }
}

function notKept(responseId: string): ApiError {
  return new ApiError(
    "not_found",
    `Response '${
      responseId.slice(0, 100)
    }' was stored before its object and input were kept: it can still be continued with previous_response_id until it expires, not read back.`,
    { param: "response_id" },
  );
}

function notStored(responseId: string): ApiError {
  return new ApiError(
    "not_found",
    `No stored response '${
      responseId.slice(0, 100)
    }' (responses created with store: false, deleted, expired after 30 days or of another app are not kept).`,
    { param: "response_id" },
  );
}

/**
 * The gateway's chat stream as Responses events. An exception of the conversion itself ends the
 * client's stream with error and response.failed (logged with the request id), and the rest of
 * the upstream is still read: the provider bills the whole answer, and its usage is charged.
 */
export async function* responseStreamEvents(
  source: AsyncIterable<StreamEvent[]>,
  converter: ResponseEvents,
  options: {
    requestId: string;
    log: (fields: Record<string, unknown>) => void;
    /**
     * Whether the client went away: the chat stream then ends early but cleanly, and what it
     * brought is neither a completed response nor one to store.
     */
    clientGone?: () => boolean;
    /**
     * Runs with the finished response before its last event goes out: it may still say whether
     * the response was stored.
     */
    beforeFinish: (response: ResponseObject) => Promise<void>;
  },
): AsyncGenerator<ResponseEvent[]> {
  /** The events of the batch being converted, never handed on empty. */
  let out: ResponseEvent[] = converter.start();
  let usage = null;
  /** An exception of our own converting: the rest is read, not converted. */
  let broken: { error: unknown } | null = null;
  for await (const events of source) {
    // Read to the end all the same: the provider bills the whole answer, and its usage is
    // what is charged, not a count of what had been converted.
    for (const event of events) {
      if (broken) break;
      if (event.type === "error") {
        out.push(...converter.fail(event.error.code, event.error.message, usage));
        yield out;
        return;
      }
      const chunk = event.chunk;
      if (chunk.usage && chunk.choices.length === 0) {
        usage = chunk.usage as Parameters<ResponseEvents["finish"]>[0];
        continue;
      }
      try {
        out.push(...converter.chunk(chunk));
      } catch (error) {
        broken = { error };
      }
    }
    if (out.length > 0) {
      yield out;
      out = [];
    }
  }
  // Nobody reads a finish now; storing the cut-short answer would offer it for retrieval and
  // as a previous_response_id as if it were whole (the usage record has what it cost).
  if (options.clientGone?.()) return;
  if (!broken) {
    try {
      const finished = converter.finish(usage);
      await options.beforeFinish(finished.at(-1)!.response as ResponseObject);
      out.push(...finished);
    } catch (error) {
      broken = { error };
    }
    if (!broken) {
      if (out.length > 0) yield out;
      return;
    }
  }
  const { error } = broken;
  options.log({
    level: "error",
    requestId: options.requestId,
    event: "response_conversion_failed",
    error: error instanceof Error ? error.message : String(error),
    stack: error instanceof Error ? error.stack : undefined,
  });
  out.push(...failedEnding(converter, options.requestId));
  yield out;
}

/**
 * How a stream our own conversion broke ends: error and response.failed, in OpenAI's shape. The
 * converter's state may be what broke, so a bare error event stands in if it cannot say more.
 */
function failedEnding(converter: ResponseEvents, requestId: string): ResponseEvent[] {
  const code = "internal_error";
  const message =
    `Internal error while streaming the response. Quote request id ${requestId} to support.`;
  try {
    return converter.fail(code, message);
  } catch {
    return [converter.error(code, message)];
  }
}

/**
 * The answer as chat messages, for a later `previous_response_id`: converted as its items sent back
 * in `input` are (turns.ts), calls with what the server attached to them, Claude's signed thinking
 * (its reasoning items' details) to go back to it.
 */
export function assistantTurn(output: ResponseEvents["output"]): Record<string, unknown>[] {
  const items = output.flatMap((item, i): ConversationItem<number>[] => {
    if (item.type === "reasoning") {
      const details = item.encrypted_content
        ? detailsOfEncryptedContent(item.encrypted_content)
        : null;
      return Array.isArray(details) ? [{ type: "reasoning", details }] : [];
    }
    if (item.type === "function_call") {
      const call = {
        id: item.call_id,
        type: "function",
        function: { name: item.name, arguments: sentBackArguments(item.arguments) },
        ...(item.extra_content ? { extra_content: item.extra_content } : {}),
      };
      return [{ type: "function_call", call, source: i }];
    }
    const text = item.content.map((p) => (p.type === "output_text" ? p.text : p.refusal));
    const message = {
      role: "assistant",
      content: text.join("") || null,
      ...(item.phase ? { phase: item.phase } : {}),
    };
    return [{ type: "message", message, source: i }];
  });
  return chatTurns(items).map((turn) => turn.message);
}

/** The chat dialect's names in an error's param, as the Responses API names the same fields. */
const RENAMED: [RegExp, string][] = [
  [/^max_(completion_)?tokens$/, "max_output_tokens"],
  [/^response_format(\.json_schema)?/, "text.format"],
  [/^reasoning_effort$/, "reasoning.effort"],
  [/^verbosity$/, "text.verbosity"],
  [/^(tools\[\d+\])\.function\.(.*)$/, "$1.$2"],
  [/^tool_choice\.function\.name$/, "tool_choice.name"],
  [/^tool_choice\.allowed_tools\.(tools\[\d+\])\.function\.name$/, "tool_choice.$1.name"],
  [/^tool_choice\.allowed_tools\./, "tool_choice."],
  [/^logprobs$/, "include"],
];

/**
 * The same names inside an error's words: only these field names, whole, so that no other word is
 * touched. `messages[…]` paths are mapped to `input[…]` where the mapping is exact (inputPath).
 */
const RENAMED_IN_TEXT: [RegExp, string][] = [
  [/\bmax_completion_tokens\b/g, "max_output_tokens"],
  [/\bmax_tokens\b/g, "max_output_tokens"],
  [/\bresponse_format(\.json_schema)?\b/g, "text.format"],
  [/\breasoning_effort\b/g, "reasoning.effort"],
  [/\b(tools\[\d+\])\.function\./g, "$1."],
  [/\btool_choice\.function\.name\b/g, "tool_choice.name"],
  [/\btool_choice\.allowed_tools\.(tools\[\d+\])\.function\.name\b/g, "tool_choice.$1.name"],
  [/\btool_choice\.allowed_tools\./g, "tool_choice."],
  [/content part 'file'/g, "content part 'input_file'"],
];

/** A chat path inside a message: `messages[3]`, then fields and indexes (not a sentence's dot). */
const MESSAGE_PATH = /\bmessages\[\d+\](?:\.[a-z_]+|\[\d+\])*/g;

/** Where the upstream's own words begin: they name the upstream's body, and stay as they are. */
const UPSTREAM_WORDS = "The upstream provider rejected the request:";

/** An error of the chat path in the Responses API's names: its param and its message. */
export function inResponsesTerms(
  error: unknown,
  inputPath: (chatPath: string) => string = (path) => path.startsWith("messages") ? "input" : path,
): never {
  if (!(error instanceof ApiError)) throw error;
  const renameParam = (chatParam: string) => {
    if (/^messages\b/.test(chatParam)) return inputPath(chatParam);
    for (const [pattern, replacement] of RENAMED) {
      if (pattern.test(chatParam)) return chatParam.replace(pattern, replacement);
    }
    return chatParam;
  };
  const param = error.param === undefined ? undefined : renameParam(error.param);
  const cut = error.message.indexOf(UPSTREAM_WORDS);
  const ours = cut === -1 ? error.message : error.message.slice(0, cut);
  let text = ours;
  if (param !== undefined && param !== error.param) {
    text = text.replaceAll(`'${error.param}'`, `'${param}'`);
  }
  text = text.replace(MESSAGE_PATH, (path) => inputPath(path));
  for (const [pattern, replacement] of RENAMED_IN_TEXT) text = text.replace(pattern, replacement);
  if (param === error.param && text === ours) throw error;
  throw new ApiError(error.code, text + error.message.slice(ours.length), {
    param,
    extra: error.extra,
    headers: error.headers,
  });
}
