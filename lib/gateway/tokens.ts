import { countTokens, decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100kTokens } from "gpt-tokenizer/encoding/cl100k_base";
import type { Tokenizer } from "@/lib/catalog/mod.ts";
import { utf8Length } from "@/lib/core/mod.ts";

/** Text that looks like a special token is ordinary user text to us, never a control token. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * gpt-tokenizer's merges take time in the square of one pre-token's length: a run of one class of
 * characters (letters, punctuation, whitespace) that the pre-tokenizer keeps whole. 320,000 "x"
 * took 172 s of one thread, and any key could send them; so can a long sentence of a script
 * written without spaces (Thai). Such a run is tokenized in pieces of at most this length, each
 * piece on its own, which keeps the time linear.
 */
const LONG_RUN_CHARS = 128;
const LONG_RUN = /[\p{L}\p{M}]{128,}|[^\s\p{L}\p{M}\p{N}]{128,}|\s{128,}/gu;

/** The text in pieces: long runs cut into LONG_RUN_CHARS, the text between them whole. */
function* piecesOf(text: string): Generator<string> {
  let from = 0;
  for (const match of text.matchAll(LONG_RUN)) {
    if (match.index > from) yield text.slice(from, match.index);
    const run = match[0];
    for (let at = 0; at < run.length;) {
      let end = Math.min(at + LONG_RUN_CHARS, run.length);
      // Never between the two halves of a surrogate pair.
      if (end < run.length && /[\uDC00-\uDFFF]/.test(run[end])) end--;
      yield run.slice(at, end);
      at = end;
    }
    from = match.index + run.length;
  }
  if (from < text.length) yield text.slice(from);
}

/**
 * `count` of a text counted piece by piece, plus one token per cut: a cut can only stop merges
 * across it, and measured on Thai, Hindi, Arabic, CJK, Latin and punctuation runs of both
 * encodings it never cost more than half a token (the pieces' sum came 1–3% above the exact count,
 * never below it).
 */
function countInPieces(text: string, count: (text: string) => number): number {
  if (text.length < LONG_RUN_CHARS) return count(text);
  let total = 0;
  let pieces = 0;
  for (const piece of piecesOf(text)) {
    total += count(piece);
    pieces++;
  }
  return total + pieces - 1;
}

/** `encode` of a text, piece by piece (see LONG_RUN_CHARS). */
function encodeInPieces(text: string): number[] {
  if (text.length < LONG_RUN_CHARS) return encode(text, PLAIN_TEXT);
  const ids: number[] = [];
  for (const piece of piecesOf(text)) {
    for (const id of encode(piece, PLAIN_TEXT)) ids.push(id);
  }
  return ids;
}

/** The o200k token ids of a text (long runs taken in pieces: see LONG_RUN_CHARS). */
export function textTokenIds(text: string): number[] {
  return encodeInPieces(text);
}

/** Per-message framing of the chat format (role and separators), as OpenAI documents it. */
const TOKENS_PER_MESSAGE = 4;
/** The assistant reply is primed with a few tokens. */
const TOKENS_PER_REPLY = 3;

/**
 * Counts of texts seen lately, per encoding. Every request is counted before it is reserved, and
 * agent loops resend their whole history each turn while system prompts and tool schemas repeat:
 * a count is computed once. Bounded by the characters held; full, it starts over.
 */
const COUNT_CACHE_CHARS = 4_000_000;
const COUNT_CACHE_MIN_CHARS = 16;

export class CountCache {
  readonly #counts = new Map<string, number>();
  #chars = 0;

  count(text: string, count: (text: string) => number): number {
    if (text.length < COUNT_CACHE_MIN_CHARS) return count(text);
    const known = this.#counts.get(text);
    if (known !== undefined) return known;
    const counted = count(text);
    if (text.length <= COUNT_CACHE_CHARS / 16) {
      if (this.#chars + text.length > COUNT_CACHE_CHARS) {
        this.#counts.clear();
        this.#chars = 0;
      }
      this.#counts.set(text, counted);
      this.#chars += text.length;
    }
    return counted;
  }
}

const o200kCounts = new CountCache();
const cl100kCounts = new CountCache();
const countO200k = (text: string) => countInPieces(text, (piece) => countTokens(piece, PLAIN_TEXT));
const countCl100k = (text: string) =>
  countInPieces(text, (piece) => countCl100kTokens(piece, PLAIN_TEXT));
// Each encoding cached on its own: a text counted for a hold and for a limit is encoded once.
// Each bounded count is at or above its encoding's exact one, and so is the larger of the two.
const countEither = (text: string) =>
  Math.max(o200kCounts.count(text, countO200k), cl100kCounts.count(text, countCl100k));

export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : o200kCounts.count(text, countO200k);
}

/**
 * The larger of a text's o200k and cl100k counts: OpenAI's embedding models (text-embedding-3,
 * ada-002) bill cl100k, which takes up to several times o200k's tokens on non-Latin scripts, and an
 * OpenAI-compatible server may use either; a reservation must cover whichever bills.
 */
export function countTextTokensEitherEncoding(text: string): number {
  return text.length === 0 ? 0 : countEither(text);
}

/** A text's tokens by a catalog model's tokenizer (see the catalog's `tokenizer`). */
export function countTokensWith(tokenizer: Tokenizer, text: string): number {
  if (text.length === 0) return 0;
  switch (tokenizer) {
    case "o200k":
      return o200kCounts.count(text, countO200k);
    case "cl100k":
      // Neither encoding bounds the other ("IIII…" counts more in cl100k, identifiers in o200k),
      // and a catalog's cl100k applies to every route: the larger of the two covers either.
      return countEither(text);
    case "utf8_bytes":
      return utf8Length(text);
  }
}

/**
 * A text's tokens in the count a model's own input limit is in: its tokenizer's alone, where
 * countTokensWith gives an upper bound for a hold. utf8_bytes has no count of its own: its bytes.
 * A long run is counted in pieces (LONG_RUN_CHARS): its exact count costs minutes.
 */
export function countLimitTokens(tokenizer: Tokenizer, text: string): number {
  if (text.length === 0) return 0;
  switch (tokenizer) {
    case "o200k":
      return o200kCounts.count(text, countO200k);
    case "cl100k":
      return cl100kCounts.count(text, countCl100k);
    case "utf8_bytes":
      return utf8Length(text);
  }
}

/** Prompt tokens of a chat, counted with the o200k_base tokenizer and OpenAI's chat framing. */
export function countPromptTokens(messages: readonly { content: string }[]): number {
  let total = TOKENS_PER_REPLY;
  for (const m of messages) total += TOKENS_PER_MESSAGE + countTextTokens(m.content);
  return total;
}

/**
 * Splits text into pieces of one token each, merging tokens that only make sense together (a
 * character split over several byte-level tokens), so that every piece is valid text.
 */
export function splitIntoTokenTexts(text: string): string[] {
  const pieces: string[] = [];
  let pending: number[] = [];
  for (const token of encodeInPieces(text)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decode(pending));
  return pieces;
}
