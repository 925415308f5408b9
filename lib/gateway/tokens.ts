import { countTokens, decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100kTokens } from "gpt-tokenizer/encoding/cl100k_base";
import type { Tokenizer } from "@/lib/catalog/mod.ts";
import { utf8Length } from "@/lib/core/mod.ts";

/** Text that looks like a special token is ordinary user text to us, never a control token. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * gpt-tokenizer's merges take time in the square of one pre-token's length: a run of one class of
 * characters (letters, punctuation, whitespace) that the pre-tokenizer keeps whole. 320,000 "x"
 * took 172 s of one thread, and any key could send them. Runs this long or longer are never given
 * to it whole: a count bounds such a run by its UTF-8 bytes, which no byte-level token count
 * exceeds, and an encoding takes it in pieces of this length.
 */
const LONG_RUN_CHARS = 128;
const LONG_RUN = /[\p{L}\p{M}]{128,}|[^\s\p{L}\p{M}\p{N}]{128,}|\s{128,}/gu;

/** The text between long runs (`run: false`) and the long runs themselves, in order. */
function* runsOf(text: string): Generator<{ text: string; run: boolean }> {
  let from = 0;
  for (const match of text.matchAll(LONG_RUN)) {
    if (match.index > from) yield { text: text.slice(from, match.index), run: false };
    yield { text: match[0], run: true };
    from = match.index + match[0].length;
  }
  if (from < text.length) yield { text: text.slice(from), run: false };
}

/**
 * `count` of a text whose long runs are bounded by their bytes; the pieces are counted apart, each
 * split costing at most the one token a merge across it would have saved.
 */
function countRunsBounded(text: string, count: (text: string) => number): number {
  if (text.length < LONG_RUN_CHARS) return count(text);
  let total = 0;
  let pieces = 0;
  for (const piece of runsOf(text)) {
    total += piece.run ? utf8Length(piece.text) : count(piece.text);
    pieces++;
  }
  return total + pieces - 1;
}

/** `encode` of a text whose long runs are encoded in pieces of LONG_RUN_CHARS. */
function encodeRunsInPieces(text: string): number[] {
  if (text.length < LONG_RUN_CHARS) return encode(text, PLAIN_TEXT);
  const ids: number[] = [];
  for (const piece of runsOf(text)) {
    if (!piece.run) {
      for (const id of encode(piece.text, PLAIN_TEXT)) ids.push(id);
      continue;
    }
    for (let at = 0; at < piece.text.length;) {
      let end = Math.min(at + LONG_RUN_CHARS, piece.text.length);
      // Never between the two halves of a surrogate pair.
      if (end < piece.text.length && /[\uDC00-\uDFFF]/.test(piece.text[end])) end--;
      for (const id of encode(piece.text.slice(at, end), PLAIN_TEXT)) ids.push(id);
      at = end;
    }
  }
  return ids;
}

/** The o200k token ids of a text (long runs taken in pieces: see LONG_RUN_CHARS). */
export function textTokenIds(text: string): number[] {
  return encodeRunsInPieces(text);
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

class CountCache {
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
const countO200k = (text: string) =>
  countRunsBounded(text, (piece) => countTokens(piece, PLAIN_TEXT));
const countCl100k = (text: string) =>
  countRunsBounded(text, (piece) => countCl100kTokens(piece, PLAIN_TEXT));
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
 * A long run is still bounded by its bytes (LONG_RUN_CHARS): its exact count costs minutes.
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
  for (const token of encodeRunsInPieces(text)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decode(pending));
  return pieces;
}
