/**
 * What a log line says of an upstream's error. A provider may quote our request back in its error
 * message (a compatible server answering 400 with the prompt it refused, or a long input): a log
 * line must carry no prompt or completion text, yet the operator needs to know what failed. So a
 * log keeps the upstream's status, error type, code and param, and its message with every run of
 * QUOTED_RUN characters or more that is also in the request's text replaced by its length, cut to
 * MAX_LOGGED_MESSAGE characters. The client's own answer keeps the upstream's message whole: it
 * quotes the client's own request.
 */
import { ProviderError, type ProviderFailure } from "./providers/types.ts";

/**
 * A run of this many characters of the message that the request also holds is taken for a quote of
 * it. Shorter runs are ordinary words that any message shares with any prompt.
 */
export const QUOTED_RUN = 8;
/** Of the message as the upstream sent it (up to 500 characters), a log keeps this many. */
export const MAX_LOGGED_MESSAGE = 200;
/** Type, code and param are identifiers; anything longer is not one. */
const MAX_LOGGED_FIELD = 100;

/**
 * Where a request's own shape sits: keys whose values name the model, a role or a part's type, at
 * those places only. Elsewhere (metadata, a tool's JSON schema, a stop sequence) any key is the
 * client's, so `role` or `type` there may hold anything the client wrote.
 */
interface Shape {
  /** Keys of this object whose values are structure, never content. */
  structure?: readonly string[];
  /** The shapes of children: of an object under that key, or of each element of an array. */
  children?: Readonly<Record<string, Shape>>;
}
const TYPED: Shape = { structure: ["type"] };
const MESSAGE: Shape = { structure: ["role"], children: { content: TYPED, tool_calls: TYPED } };
const CHAT_REQUEST: Shape = {
  structure: ["model", "capParam"],
  children: {
    messages: MESSAGE,
    params: { children: { tools: TYPED, tool_choice: TYPED, response_format: TYPED } },
  },
};

/** An upstream failure as logged: the request log line's `upstreamError`, and the warnings'. */
export interface UpstreamErrorLog {
  kind: ProviderFailure;
  /** The upstream's HTTP status; null for a failure without one (a refused connection, a stream). */
  status: number | null;
  type: string | null;
  code: string | null;
  param: string | null;
  message: string;
}

/**
 * The failure as a log may carry it. `sent` gives the texts of the request (`requestTexts`); it is
 * called only here, so a request that does not fail never collects them.
 */
export function upstreamErrorLog(error: unknown, sent: () => string[]): UpstreamErrorLog {
  const texts = sent();
  const scrub = (text: string, max: number) =>
    bounded(withoutQuotes(readableEscapes(text), texts), max);
  const field = (value: string | null | undefined) => value ? scrub(value, MAX_LOGGED_FIELD) : null;
  if (!(error instanceof ProviderError)) {
    return {
      kind: "unreachable",
      status: null,
      type: null,
      code: null,
      param: null,
      message: scrub(String((error as Error)?.message ?? error), MAX_LOGGED_MESSAGE),
    };
  }
  return {
    kind: error.kind,
    status: error.upstreamStatus ?? null,
    type: field(error.upstreamError?.type),
    code: field(error.upstreamError?.code),
    param: field(error.upstreamError?.param),
    message: scrub(error.message, MAX_LOGGED_MESSAGE),
  };
}

/**
 * The request's texts (`requestTexts`), collected the first time a failure asks for them and kept
 * for the next: a request whose providers fail in turn is scanned once.
 */
export function textsOf(request: unknown): () => string[] {
  let texts: string[] | undefined;
  return () => texts ??= requestTexts(request);
}

/**
 * Every string of a request (a chat request, or an embedding's input) long enough to be quoted,
 * the values of its shape (the model, roles, part types) left out.
 */
export function requestTexts(request: unknown): string[] {
  const out: string[] = [];
  const stack: [unknown, Shape | undefined][] = [[request, CHAT_REQUEST]];
  while (stack.length > 0) {
    const [value, shape] = stack.pop()!;
    if (typeof value === "string") {
      if (value.length >= QUOTED_RUN) out.push(value);
    } else if (Array.isArray(value)) {
      for (const element of value) stack.push([element, shape]);
    } else if (value !== null && typeof value === "object") {
      for (const [key, child] of Object.entries(value)) {
        if (shape?.structure?.includes(key) && typeof child === "string") continue;
        stack.push([child, shape?.children?.[key]]);
      }
    }
  }
  return out;
}

const ESCAPED: Record<string, string> = {
  '"': '"',
  "'": "'",
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};

/**
 * The text with JSON's and Python's string escapes read (`\u041f`, `\x41`, `\"`, `\n`): an upstream
 * that quotes the request as escaped JSON (non-Latin text as `\uXXXX`) quotes it all the same.
 */
export function readableEscapes(text: string): string {
  if (!text.includes("\\")) return text;
  return text.replace(
    /\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|(["'\\/bfnrt]))/g,
    (_, u, x, c) => u || x ? String.fromCharCode(parseInt(u ?? x, 16)) : ESCAPED[c],
  );
}

/** Polynomial hash of a QUOTED_RUN-long window, rolled along a text one character at a time. */
const HASH_BASE = 31;
let HASH_TOP = 1; // HASH_BASE ** (QUOTED_RUN - 1), modulo 2^32
for (let i = 1; i < QUOTED_RUN; i++) HASH_TOP = Math.imul(HASH_TOP, HASH_BASE);

function windowHash(text: string, from: number): number {
  let hash = 0;
  for (let k = from; k < from + QUOTED_RUN; k++) {
    hash = (Math.imul(hash, HASH_BASE) + text.charCodeAt(k)) | 0;
  }
  return hash;
}

/**
 * `message` with every run of QUOTED_RUN or more characters that one of `texts` also holds replaced
 * by `[n chars]`. The message's windows are hashed once and each text rolled over once, so a
 * request of megabytes costs a pass over it, not a search per window.
 */
export function withoutQuotes(message: string, texts: readonly string[]): string {
  if (message.length < QUOTED_RUN || texts.length === 0) return message;
  const windows = new Map<number, number[]>();
  // A bitmap of the windows' hashes answers most characters of a long request without the map.
  const seen = new Uint32Array(2048);
  for (let i = 0; i + QUOTED_RUN <= message.length; i++) {
    const hash = windowHash(message, i);
    const starts = windows.get(hash);
    if (starts) starts.push(i);
    else windows.set(hash, [i]);
    seen[(hash >>> 5) & 2047] |= 1 << (hash & 31);
  }
  const quoted = new Uint8Array(message.length);
  for (const text of texts) {
    if (text.length < QUOTED_RUN) continue;
    let hash = windowHash(text, 0);
    for (let j = 0;; j++) {
      const starts = (seen[(hash >>> 5) & 2047] & (1 << (hash & 31))) !== 0
        ? windows.get(hash)
        : undefined;
      if (starts) {
        for (const i of starts) {
          if (text.startsWith(message.slice(i, i + QUOTED_RUN), j)) {
            quoted.fill(1, i, i + QUOTED_RUN);
          }
        }
      }
      if (j + QUOTED_RUN >= text.length) break;
      hash = (Math.imul(hash - Math.imul(text.charCodeAt(j), HASH_TOP), HASH_BASE) +
        text.charCodeAt(j + QUOTED_RUN)) | 0;
    }
  }
  let out = "";
  for (let i = 0; i < message.length;) {
    if (!quoted[i]) {
      out += message[i++];
      continue;
    }
    const from = i;
    while (i < message.length && quoted[i]) i++;
    out += `[${i - from} chars]`;
  }
  return out;
}

/**
 * At most `max` characters, cut after a whole word: a word cut in two could leave a piece of a key
 * too short for the key redactor to know, or of a quote too short to be found.
 */
function bounded(text: string, max: number): string {
  if (text.length <= max) return text;
  const space = text.lastIndexOf(" ", max - 1);
  return `${text.slice(0, space > 0 ? space : 0)}…`;
}
