import { simulatedPieces, simulatedTokenIds } from "../../tokens.ts";
import {
  allowedToolNames,
  contentText,
  filePartsOf,
  pdfBase64,
  type ToolDefinition,
} from "../../chat_request.ts";
import { openAiInputBound } from "../../input_bound.ts";
import { inFormat } from "../../embedding_vectors.ts";
import { randomToken } from "@/lib/core/mod.ts";
import {
  type ChatCompletionChunk,
  type Provider,
  ProviderError,
  type StreamPart,
  type UpstreamRequest,
} from "../types.ts";
import { usageObject } from "../usage.ts";

const LOREM =
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt " +
  "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris " +
  "nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit " +
  "esse cillum dolore eu fugiat nulla pariatur. Excepteur sint occaecat cupidatat non proident, sunt in " +
  "culpa qui officia deserunt mollit anim id est laborum.";

/**
 * What the simulator bills a PDF page: a flat rate, as a provider bills each page's text and an
 * image of it. Its pages are the page objects it can see in the file (at least one).
 */
export const SIMULATED_PDF_PAGE_TOKENS = 1_000;

/**
 * The input the simulator bills: OpenAI's rules for the messages, and its flat rate for each PDF
 * page. Its count (countInputTokens) is this same number, so a PDF is held at what it is billed.
 */
function simulatedPromptTokens(up: UpstreamRequest, limit = Infinity): number {
  let tokens = openAiInputBound(up.request, up.model, up.model.tokenizer, "simulated", limit);
  for (const m of up.request.messages) {
    for (const part of filePartsOf(m)) {
      const pdf = atob(pdfBase64(part));
      const pages = pdf.match(/\/Type\s*\/Page(?!s)/g)?.length ?? 0;
      tokens += Math.max(1, pages) * SIMULATED_PDF_PAGE_TOKENS;
    }
  }
  return tokens;
}

/** The simulated embeddings' size when the request names none, and the largest it may name. */
export const SIMULATED_DIMENSIONS = 256;
export const MAX_SIMULATED_DIMENSIONS = 3072;
/**
 * The most values one request's vectors may hold in all: every input at the default size. 2,048
 * inputs at 3,072 each were a 34 MB answer to an 8 KB request, for a few millionths of a dollar.
 */
export const MAX_SIMULATED_VALUES = 2048 * SIMULATED_DIMENSIONS;

type Answer =
  | { kind: "text"; pieces: string[]; finishReason: string; promptTokens: number }
  | {
    kind: "tool_call";
    id: string;
    name: string;
    pieces: string[];
    finishReason: string;
    promptTokens: number;
  };

/**
 * The built-in model: deterministic, free of network, and billed like any other. `echo` answers
 * with the last user message; `lorem` with a fixed paragraph. Offered tools (and tool_choice not
 * `none`), either calls a tool, with arguments made from its schema and the last user message,
 * until a tool result comes back, which it then echoes: an agent loop runs with no provider key.
 * Both stop at `max_tokens`. An embedding model of the
 * simulator embeds by hashing tokens (hashedEmbedding).
 */
export function createSimulator(options: { tokenDelayMs: number }): Provider {
  function answer(up: UpstreamRequest): Answer {
    const { request } = up;
    const promptTokens = simulatedPromptTokens(up);
    const lastUser = contentText(request.messages.findLast((m) => m.role === "user")?.content);
    const last = request.messages.at(-1)!;
    const tool = chosenTool(up);
    if (tool && last.role !== "tool") {
      const words = { text: lastUser, left: SAMPLE_TEXT_CHARS };
      const args = JSON.stringify(sampleValue(tool.function.parameters ?? {}, words, 0) ?? {});
      const { pieces, cut } = firstPieces(args, up.maxTokens);
      return {
        kind: "tool_call",
        // Deterministic: the same conversation gets the same call.
        id: `call_sim_${request.messages.length}`,
        name: tool.function.name,
        pieces,
        finishReason: cut ? "length" : "tool_calls",
        promptTokens,
      };
    }
    const text = up.model.upstreamModel === "lorem"
      ? LOREM
      : last.role === "tool"
      ? contentText(last.content)
      : lastUser;
    const { pieces, cut } = firstPieces(text, up.maxTokens);
    return { kind: "text", pieces, finishReason: cut ? "length" : "stop", promptTokens };
  }

  return {
    /**
     * Its own bill, exactly: the simulator is the provider. A count past the prompt's room in the
     * context refuses the request, so it stops there.
     */
    countInputTokens(request) {
      const room = request.model.contextTokens - request.maxTokens;
      return Promise.resolve(simulatedPromptTokens(request, room));
    },

    stream(request) {
      const a = answer(request);
      const id = `chatcmpl-${randomToken(96)}`;
      const created = Math.floor(Date.now() / 1000);
      const model = request.model.upstreamModel;
      const chunk = (delta: ChatCompletionChunk["choices"][0]["delta"], finish: string | null) => ({
        type: "chunk" as const,
        chunk: {
          id,
          object: "chat.completion.chunk" as const,
          created,
          model,
          choices: [{ index: 0, delta, finish_reason: finish }],
        },
      });
      // Pieces without a delay between them come in one batch, as one read of a real upstream.
      async function* parts(): AsyncGenerator<StreamPart[]> {
        let batch: StreamPart[] = [];
        if (a.kind === "text") batch.push(chunk({ role: "assistant", content: "" }, null));
        else {
          // As OpenAI streams a call: its id and name first, then the arguments in pieces.
          batch.push(chunk({
            role: "assistant",
            content: null,
            tool_calls: [{
              index: 0,
              id: a.id,
              type: "function",
              function: { name: a.name, arguments: "" },
            }],
          }, null));
        }
        for (const piece of a.pieces) {
          if (options.tokenDelayMs > 0) {
            yield batch;
            batch = [];
            await delay(options.tokenDelayMs, request.signal);
          }
          request.signal.throwIfAborted();
          batch.push(chunk(
            a.kind === "text"
              ? { content: piece }
              : { tool_calls: [{ index: 0, function: { arguments: piece } }] },
            null,
          ));
        }
        batch.push(chunk({}, a.finishReason));
        const usage = { promptTokens: a.promptTokens, completionTokens: a.pieces.length };
        batch.push({ type: "usage", usage, raw: usageObject(usage) });
        yield batch;
      }
      return Promise.resolve(parts());
    },

    embed(request) {
      const dimensions = request.dimensions ?? SIMULATED_DIMENSIONS;
      if (dimensions > MAX_SIMULATED_DIMENSIONS) {
        return Promise.reject(
          new ProviderError(
            "bad_request",
            `dimensions must be at most ${MAX_SIMULATED_DIMENSIONS} for the simulator`,
          ),
        );
      }
      if (dimensions * request.inputs.length > MAX_SIMULATED_VALUES) {
        return Promise.reject(
          new ProviderError(
            "bad_request",
            `the simulator returns at most ${MAX_SIMULATED_VALUES} values per request (inputs × dimensions); send fewer inputs or dimensions`,
          ),
        );
      }
      let promptTokens = 0;
      const data = request.inputs.map((input, index) => {
        const ids = typeof input === "string" ? simulatedTokenIds(input) : input;
        promptTokens += ids.length;
        const vector = hashedEmbedding(ids, dimensions);
        return {
          object: "embedding" as const,
          index,
          embedding: inFormat(vector, request.encodingFormat)!,
        };
      });
      return Promise.resolve({ data, promptTokens });
    },
  };
}

/**
 * The first `max` pieces of an answer, and whether it was cut there: an echo of a long message
 * is read only as far as the cap.
 */
function firstPieces(text: string, max: number): { pieces: string[]; cut: boolean } {
  const pieces: string[] = [];
  for (const piece of simulatedPieces(text)) {
    if (pieces.length === max) return { pieces, cut: true };
    pieces.push(piece.text);
  }
  return { pieces, cut: false };
}

function chosenTool(up: UpstreamRequest): ToolDefinition | null {
  const { tools, tool_choice: choice } = up.request.params;
  if (!tools?.length || choice === "none") return null;
  if (choice && typeof choice === "object" && choice.type === "function") {
    return tools.find((t) => t.function.name === choice.function.name) ?? null;
  }
  // Allowed tools: the first of them, as the first of all tools otherwise.
  const allowed = allowedToolNames(choice);
  if (allowed) return tools.find((t) => allowed.includes(t.function.name)) ?? null;
  return tools[0];
}

/**
 * The user's words a tool call's arguments are made from: each string at most the first
 * SAMPLE_STRING_CHARS of them, all strings together at most SAMPLE_TEXT_CHARS. The whole message in
 * every string of a wide schema was hundreds of MB for one request.
 */
const SAMPLE_STRING_CHARS = 256;
const SAMPLE_TEXT_CHARS = 16_384;

interface SampleWords {
  text: string;
  left: number;
}

/** A value that fits a JSON Schema, made from the user's words where it takes text. */
function sampleValue(schema: unknown, words: SampleWords, depth: number): unknown {
  if (!schema || typeof schema !== "object" || depth > 8) return null;
  const s = schema as Record<string, unknown>;
  if (Array.isArray(s.enum) && s.enum.length) return s.enum[0];
  if ("const" in s) return s.const;
  for (const key of ["anyOf", "oneOf", "allOf"]) {
    const options = s[key];
    if (Array.isArray(options) && options.length) return sampleValue(options[0], words, depth + 1);
  }
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== "null") : s.type;
  switch (type) {
    case "string": {
      const taken = words.text.slice(0, Math.min(SAMPLE_STRING_CHARS, words.left));
      words.left -= taken.length;
      return taken.toWellFormed();
    }
    case "integer":
    case "number":
      return typeof s.minimum === "number" ? s.minimum : 1;
    case "boolean":
      return true;
    case "null":
      return null;
    case "array":
      return [sampleValue(s.items, words, depth + 1)];
    default: {
      const properties = (s.properties ?? {}) as Record<string, unknown>;
      return Object.fromEntries(
        Object.entries(properties).map(([k, v]) => [k, sampleValue(v, words, depth + 1)]),
      );
    }
  }
}

/** Places each token adds its sign to: enough for texts that share words to point alike. */
const PLACES_PER_TOKEN = 4;

/**
 * A unit vector from the tokens by feature hashing: each token adds ±1 at a few places chosen
 * by a hash of its id, so equal texts embed equally and texts sharing tokens have a positive
 * cosine similarity. Linear in the tokens, whatever the dimensions.
 */
export function hashedEmbedding(tokenIds: readonly number[], dimensions: number): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  for (const id of tokenIds) {
    for (let k = 0; k < PLACES_PER_TOKEN; k++) {
      const h = mix(id * PLACES_PER_TOKEN + k);
      vector[h % dimensions] += h & 0x80000000 ? -1 : 1;
    }
  }
  const norm = Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
  return norm === 0 ? vector : vector.map((x) => x / norm);
}

/** A 32-bit integer hash (murmur3's finalizer), unsigned. */
function mix(value: number): number {
  let h = value >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
