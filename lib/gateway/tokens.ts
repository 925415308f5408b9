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
 * Merging a pre-token longer than LIBRARY_MERGE_CHARS costs about a microsecond a character (4 MiB
 * of letters with no space took 4 s, 7 s in both encodings) on the thread every request shares,
 * where ordinary prose counts at 3-30 MB/s. Such merges for holds and limits are rationed per
 * process: a request counts what is left of the ration exactly, and a pre-token beyond it is
 * bounded from its bytes, which no token covers fewer than one of (hold) nor more than
 * LONGEST_TOKEN_BYTES of (limit). A hold so bounded is larger than the bill, and settles to it.
 */
export class MergeRation {
  #chars: number;
  #at: number;

  constructor(
    /** Characters of long pre-tokens one request may merge at once. */
    readonly burst: number,
    /** Characters the ration grows by each second, up to the burst. */
    readonly perSecond: number,
    readonly now: () => number = () => performance.now(),
  ) {
    this.#chars = burst;
    this.#at = now();
  }

  /** Whether a pre-token of `chars` characters may be merged now; if so, it is taken. */
  take(chars: number): boolean {
    const at = this.now();
    this.#chars = Math.min(this.burst, this.#chars + (at - this.#at) / 1000 * this.perSecond);
    this.#at = at;
    if (chars > this.#chars) return false;
    this.#chars -= chars;
    return true;
  }
}

/** About half a second of one core at once, a tenth of it each second after. */
export const HOLD_MERGES = new MergeRation(500_000, 100_000);

/** What a long pre-token beyond the ration counts as: more than it has, or fewer. */
type Beyond = "upper" | "lower";

/** A count, and whether it is exact (a count beyond the ration is not cached). */
interface Counted {
  count: number;
  exact: boolean;
}

/**
 * A text's tokens by an encoding, as its tokenizer makes them with no special tokens (text that
 * looks like one is ordinary user text to us, never a control token): each pre-token a token, or
 * its merged parts. `onToken` sees each token's rank. Exact unless a ration is given and a long
 * pre-token is beyond it: that one is bounded from its bytes, from above or below.
 */
function tokenize(
  core: BpeCore,
  text: string,
  rationed?: { ration: MergeRation; beyond: Beyond },
  onToken?: (rank: number) => void,
  /** Counting stops once the count passes this: what is past a context needs no exact number. */
  limit = Infinity,
): Counted {
  let count = 0;
  let exact = true;
  for (const [match] of text.matchAll(core.tokenSplitRegex)) {
    if (count > limit) return { count, exact: false };
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
    if (rationed && !rationed.ration.take(match.length)) {
      const bytes = utf8Length(match);
      count += rationed.beyond === "upper" ? bytes : Math.ceil(bytes / LONGEST_TOKEN_BYTES);
      exact = false;
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
  return { count, exact };
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
  tokenize(O200K, text, undefined, (rank) => ids.push(rank));
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

  /** `count`'s count of `text`, from the cache when it was counted before; kept if exact. */
  count(text: string, count: (text: string) => number | Counted): number {
    if (text.length < COUNT_CACHE_MIN_CHARS) return countOf(count(text));
    const known = this.#counts.get(text);
    if (known !== undefined) return known;
    const counted = count(text);
    if (typeof counted !== "number" && !counted.exact) return counted.count;
    const tokens = countOf(counted);
    if (text.length <= COUNT_CACHE_CHARS / 16) {
      if (this.#chars + text.length > COUNT_CACHE_CHARS) {
        this.#counts.clear();
        this.#chars = 0;
      }
      this.#counts.set(text, tokens);
      this.#chars += text.length;
    }
    return tokens;
  }
}

const countOf = (counted: number | Counted) =>
  typeof counted === "number" ? counted : counted.count;

/** Counting one text in one encoding: exactly, or within a ration. */
type Count = (text: string) => Counted;

/** An encoding's counts, cached, by the ways a text is counted. */
function encodingCounts(core: BpeCore) {
  const cache = new CountCache();
  const exactly: Count = (text) => tokenize(core, text);
  const within = (ration: MergeRation, beyond: Beyond, limit = Infinity): Count => (text) =>
    tokenize(core, text, { ration, beyond }, undefined, limit);
  const held = within(HOLD_MERGES, "upper");
  const limited = within(HOLD_MERGES, "lower");
  // A count stopped at its limit is no exact count: not cached.
  return {
    exact: (text: string) => cache.count(text, exactly),
    // Each encoding cached on its own: a text counted for a hold and for a limit is encoded once.
    held: (text: string, ration = HOLD_MERGES, limit = Infinity) =>
      cache.count(
        text,
        ration === HOLD_MERGES && limit === Infinity ? held : within(ration, "upper", limit),
      ),
    limited: (text: string, ration = HOLD_MERGES, limit = Infinity) =>
      cache.count(
        text,
        ration === HOLD_MERGES && limit === Infinity ? limited : within(ration, "lower", limit),
      ),
  };
}

const O200K_COUNTS = encodingCounts(O200K);
const CL100K_COUNTS = encodingCounts(CL100K);

export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : O200K_COUNTS.exact(text);
}

/**
 * The larger of a text's o200k and cl100k counts: OpenAI's embedding models (text-embedding-3,
 * ada-002) bill cl100k, which takes up to several times o200k's tokens on non-Latin scripts, and an
 * OpenAI-compatible server may use either; a reservation must cover whichever bills.
 */
export function countTextTokensEitherEncoding(text: string): number {
  return text.length === 0 ? 0 : Math.max(O200K_COUNTS.exact(text), CL100K_COUNTS.exact(text));
}

/**
 * A text's tokens by a catalog model's tokenizer (see the catalog's `tokenizer`), for a hold: no
 * fewer than the model bills. Exact, but for long pre-tokens beyond the merge ration.
 */
export function countTokensWith(
  tokenizer: Tokenizer,
  text: string,
  ration: MergeRation = HOLD_MERGES,
  /** Counting stops once past this (a count above a context need not be exact). */
  limit = Infinity,
): number {
  if (text.length === 0) return 0;
  switch (tokenizer) {
    case "o200k":
      return O200K_COUNTS.held(text, ration, limit);
    case "cl100k": {
      // Neither encoding bounds the other ("IIII…" counts more in cl100k, identifiers in o200k),
      // and a catalog's cl100k applies to every route: the larger of the two covers either.
      const o200k = O200K_COUNTS.held(text, ration, limit);
      return o200k > limit ? o200k : Math.max(o200k, CL100K_COUNTS.held(text, ration, limit));
    }
    case "utf8_bytes":
      return utf8Length(text);
  }
}

/**
 * A text's tokens by a catalog model's tokenizer, exactly, as countTokensWith would count them
 * with no ration: for output a request has paid to have produced.
 */
export function countExactTokensWith(tokenizer: Tokenizer, text: string): number {
  if (text.length === 0) return 0;
  switch (tokenizer) {
    case "o200k":
      return O200K_COUNTS.exact(text);
    case "cl100k":
      return countTextTokensEitherEncoding(text);
    case "utf8_bytes":
      return utf8Length(text);
  }
}

/**
 * A text's tokens in the count a model's own input limit is in: its tokenizer's alone, where
 * countTokensWith gives an upper bound for a hold. utf8_bytes has no count of its own: its bytes.
 * No more than the model counts: beyond the merge ration, a limit is left to the provider.
 */
export function countLimitTokens(
  tokenizer: Tokenizer,
  text: string,
  ration: MergeRation = HOLD_MERGES,
  /** Counting stops once past this. */
  limit = Infinity,
): number {
  if (text.length === 0) return 0;
  switch (tokenizer) {
    case "o200k":
      return O200K_COUNTS.limited(text, ration, limit);
    case "cl100k":
      return CL100K_COUNTS.limited(text, ration, limit);
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

/** A piece of text as the simulator makes its tokens: whole characters, and the ids in it. */
export interface SimulatedPiece {
  text: string;
  ids: number[];
}

/** Where the ids of a long pre-token's cut pieces start: past o200k's vocabulary. */
const UNMERGED_ID_BASE = 1 << 20;

/**
 * A text's tokens as the built-in simulator makes and bills them, lazily: o200k's for each
 * pre-token up to LIBRARY_MERGE_CHARS (tokens that split a character are kept together as one
 * piece, so every piece is valid text); a longer pre-token is cut into pieces of whole characters
 * of at most LONGEST_TOKEN_BYTES bytes, one id each, instead of merged. No real token is longer
 * than half that, so a long pre-token is billed fewer tokens than it has, never more than a hold
 * counts; merging it would hold the thread about a second a MiB, on every count. The same text
 * gives the same pieces every time: the simulator's count is its bill.
 */
export function* simulatedPieces(text: string): Generator<SimulatedPiece> {
  for (const token of simulatedPreTokens(text)) {
    if ("cut" in token) {
      for (const piece of byteCuts(token.cut, LONGEST_TOKEN_BYTES)) {
        yield { text: piece, ids: [cutId(piece)] };
      }
      continue;
    }
    let pending: number[] = [];
    for (const rank of token.ranks) {
      pending.push(rank);
      const piece = decode(pending);
      if (piece.includes("\uFFFD")) continue;
      yield { text: piece, ids: pending };
      pending = [];
    }
    if (pending.length) yield { text: decode(pending), ids: pending };
  }
}

/** The ids of the simulator's tokens of a text (simulatedPieces' ids, with no text decoded). */
export function simulatedTokenIds(text: string): number[] {
  const ids: number[] = [];
  for (const token of simulatedPreTokens(text)) {
    if ("cut" in token) {
      for (const piece of byteCuts(token.cut, LONGEST_TOKEN_BYTES)) ids.push(cutId(piece));
    } else ids.push(...token.ranks);
  }
  return ids;
}

/**
 * Each pre-token as the simulator tokenizes it: a whole token's rank, or a short one's merged
 * ranks; a long one (past LIBRARY_MERGE_CHARS) to be cut, not merged.
 */
function* simulatedPreTokens(text: string): Generator<{ ranks: number[] } | { cut: string }> {
  for (const [match] of text.matchAll(O200K.tokenSplitRegex)) {
    const whole = O200K.getBpeRankFromString(match);
    if (whole !== undefined) yield { ranks: [whole] };
    else if (match.length > LIBRARY_MERGE_CHARS) yield { cut: match.toWellFormed() };
    else yield { ranks: O200K.bytePairEncode(match) };
  }
}

/** A cut piece's id: past o200k's vocabulary, hashed from the piece (the same text, the same id). */
const cutId = (piece: string) => UNMERGED_ID_BASE + (stringHash(piece) & 0xfffffff);

/** The simulator's counts of texts seen lately: its count of a request and its bill agree. */
const SIMULATED_COUNTS = new CountCache();

/**
 * The simulator's count of a text's tokens: as many as simulatedPieces makes, counted without
 * writing them. Stops once past `limit` (kept only when whole).
 */
export function countSimulatedTokens(text: string, limit = Infinity): number {
  return SIMULATED_COUNTS.count(text, () => {
    let count = 0;
    for (const token of simulatedPreTokens(text)) {
      if (count > limit) return { count, exact: false };
      if ("ranks" in token) count += token.ranks.length;
      else for (const _ of byteCuts(token.cut, LONGEST_TOKEN_BYTES)) count++;
    }
    return count;
  });
}

/** Whole-character slices of a (well-formed) text of at most `bytes` UTF-8 bytes each. */
function* byteCuts(text: string, bytes: number): Generator<string> {
  let start = 0;
  let size = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const pair = code >= 0xd800 && code <= 0xdbff;
    const width = code < 0x80 ? 1 : code < 0x800 ? 2 : pair ? 4 : 3;
    if (size + width > bytes) {
      yield text.slice(start, i);
      start = i;
      size = 0;
    }
    size += width;
    if (pair) i++;
  }
  if (start < text.length) yield text.slice(start);
}

/** FNV-1a over a string's UTF-16 units: a piece's id. */
function stringHash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
