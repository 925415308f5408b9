import o200k, { decode } from "gpt-tokenizer/encoding/o200k_base";
import cl100k from "gpt-tokenizer/encoding/cl100k_base";
import type { Tokenizer } from "@/lib/catalog/mod.ts";
import { utf8Length } from "@/lib/core/mod.ts";
import { mergedParts } from "./bpe_merge.ts";

/**
 * What of gpt-tokenizer's encoder the exact count below needs: its pre-tokenizer and its ranks.
 * They are not its public API (its own count merges in the square of a pre-token's length), so
 * their shape is checked once, here: a release that changes them stops the service at start and
 * fails the tests, rather than counting wrong.
 */
interface BpeCore {
  tokenSplitRegex: RegExp;
  getBpeRankFromString(text: string): number | undefined;
  getBpeRankFromBytes(bytes: Uint8Array): number | undefined;
  bytePairEncode(text: string): number[];
}

function bpeCoreOf(encoding: unknown, name: string): BpeCore {
  const core = (encoding as { bytePairEncodingCoreProcessor?: Partial<BpeCore> })
    .bytePairEncodingCoreProcessor;
  if (
    !core || !(core.tokenSplitRegex instanceof RegExp) || !core.tokenSplitRegex.global ||
    typeof core.getBpeRankFromString !== "function" ||
    typeof core.getBpeRankFromBytes !== "function" || typeof core.bytePairEncode !== "function"
  ) {
    throw new Error(
      `gpt-tokenizer's ${name} encoder no longer has the internals tokens.ts counts with`,
    );
  }
  return core as BpeCore;
}

/**
 * Up to this length a pre-token is merged by gpt-tokenizer itself (its cache of merged pre-tokens
 * makes repeated words cheap); a longer one (a run of letters with no space, as in Thai or
 * Chinese, a long number, a base64 blob) by mergedParts, whose time is not quadratic.
 */
const LIBRARY_MERGE_CHARS = 64;

const UTF8 = new TextEncoder();

/**
 * A text's exact tokens by an encoding, as its tokenizer makes them with no special tokens (text
 * that looks like one is ordinary user text to us, never a control token): each pre-token a
 * token, or its merged parts. `onToken` sees each token's rank; the count is returned.
 */
function tokenize(core: BpeCore, text: string, onToken?: (rank: number) => void): number {
  let count = 0;
  for (const [match] of text.matchAll(core.tokenSplitRegex)) {
    const whole = core.getBpeRankFromString(match);
    if (whole !== undefined) {
      count++;
      onToken?.(whole);
      continue;
    }
    if (match.length <= LIBRARY_MERGE_CHARS) {
      const ranks = core.bytePairEncode(match);
      count += ranks.length;
      if (onToken) { for (const rank of ranks) onToken(rank); }
      continue;
    }
    const rankOf = spanRanks(core, match);
    const starts = mergedParts(rankOf.bytes, rankOf);
    count += starts.length;
    if (onToken) {
      for (const [i, start] of starts.entries()) {
        onToken(rankOf(start, starts[i + 1] ?? rankOf.bytes)!);
      }
    }
  }
  return count;
}

/**
 * Ranks of spans of a pre-token's UTF-8 bytes. A span from one character's start to another's is
 * that slice of the text, looked up as a string (no decoding: a merge looks up two ranks); a span
 * that cuts a character is no valid UTF-8, and is looked up by its bytes.
 */
function spanRanks(core: BpeCore, given: string) {
  // Lone surrogates as the encoder writes them (U+FFFD), so that slices and bytes agree.
  const text = given.toWellFormed();
  const bytes = UTF8.encode(text);
  // The index in `text` where each byte offset starts a character, else -1; and the end.
  const charAt = new Int32Array(bytes.length + 1).fill(-1);
  let byte = 0;
  for (let i = 0; i < text.length; i++) {
    charAt[byte] = i;
    const code = text.charCodeAt(i);
    if (code < 0x80) byte += 1;
    else if (code < 0x800) byte += 2;
    else if (code >= 0xd800 && code <= 0xdbff) {
      byte += 4;
      i++;
    } else byte += 3;
  }
  charAt[bytes.length] = text.length;
  const rankOf = (start: number, end: number) => {
    if (end - start > LONGEST_TOKEN_BYTES) return undefined;
    const from = charAt[start];
    const to = charAt[end];
    return from >= 0 && to >= 0
      ? core.getBpeRankFromString(text.slice(from, to))
      : core.getBpeRankFromBytes(bytes.subarray(start, end));
  };
  return Object.assign(rankOf, { bytes: bytes.length });
}

/** No token is longer than this many bytes in either encoding. */
const LONGEST_TOKEN_BYTES = 256;

const O200K = bpeCoreOf(o200k, "o200k_base");
const CL100K = bpeCoreOf(cl100k, "cl100k_base");

/** The o200k token ids of a text. */
export function textTokenIds(text: string): number[] {
  const ids: number[] = [];
  tokenize(O200K, text, (rank) => ids.push(rank));
  return ids;
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
const countO200k = (text: string) => tokenize(O200K, text);
const countCl100k = (text: string) => tokenize(CL100K, text);
// Each encoding cached on its own: a text counted for a hold and for a limit is encoded once.
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
  for (const token of textTokenIds(text)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decode(pending));
  return pieces;
}
