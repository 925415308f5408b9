/**
 * An upper bound on the tokens any Claude tokenizer bills for a text, for reservations taken before a
 * call. Pure and fast (one pass over UTF-16 code units, no regexes, no per-character strings).
 * docs/token-bounds.md has the measurements behind every number here.
 *
 * The ceiling, and the one assumption it rests on. Claude's published (legacy) tokenizer is a
 * byte-level BPE: every token covers at least one UTF-8 byte of the text it is given, so no text
 * costs more tokens than it has bytes. The later tokenizers are unpublished; this bound assumes
 * the same of them (every billed token covers at least one byte; message framing is the caller's
 * to add), and nothing here can check it. The text a tokenizer is given may be normalized first
 * (the legacy one applies NFKC), which can lengthen it: U+FDFA is 3 bytes, and 33 after NFKC. So
 * each code point is charged the most UTF-8 bytes of itself, its NFC form and its NFKC form, each
 * taken alone (normalizing a whole text also composes neighbours, which shortens it), and a lone
 * surrogate 3 bytes (it reaches the provider as U+FFFD). The bound never exceeds this ceiling.
 *
 * Below the ceiling, for ASCII only, measured rather than proven. Bytes are 4-5 times the legacy
 * tokens of English prose and 2.5-4.5 times those of code, so ASCII is charged by the pieces BPE
 * pre-tokenizers cut it into (letter runs, digit runs, punctuation runs, whitespace runs; no token
 * spans two, except that the legacy one joins a single space to the word after it): a token to
 * start a piece, a fitted part of a token for each further character, never more than the
 * piece's bytes. The parts were fitted on the legacy tokenizer with headroom for the newer ones.
 *
 * Every other script is charged its bytes. On random text within each script the legacy tokenizer
 * already spends 45-100% of the bytes, so twice its count is about the bytes; and nothing public
 * about the newer tokenizers' vocabularies for those scripts supports charging less.
 */
import { utf8Length } from "@/lib/core/mod.ts";

// The ASCII costs. Each was raised until the corpus test passed (tests/claude_token_reference.ts
// says how much headroom each sample needs) and no further; docs/token-bounds.md has the table.

/** Tokens to start any piece (letter, digit, punctuation or whitespace run). */
const PIECE_START = 1;
/**
 * Each further letter of a run, from the third to the seventh; the second letter, capitals after
 * the first, and letters past the seventh cost a whole token (short words, acronyms and long
 * unbroken runs are where BPE splits most). English-looking gibberish (random letters drawn from
 * common letter pairs, 0.39-0.45 legacy tokens a letter) is what keeps this from being lower.
 */
const LETTER_STEP = 0.4;
/**
 * The same letters of a run that does not follow a single space (a line's first word, a word after
 * punctuation, snake_case). The legacy tokenizer joins a space to the word after it, and the space
 * charged as a piece of its own is what covers such a word's dearest splits; without it, made-up
 * words of common pairs after a newline ("\npifrrlt": 6 legacy tokens) came to 1.2 times the bound.
 */
const UNSPACED_LETTER_STEP = 0.8;
const WORD_LETTERS = 7;
/**
 * Extra for a letter pair found inside at most 100 of the legacy vocabulary's word tokens: BPE
 * nearly always cuts there. 56% of random letter pairs are rare, 1-3% of English ones.
 */
const RARE_PAIR_STEP = 1.5;
/** Extra where case changes inside a letter run (camelCase, "JSONParser", random case). */
const CASE_STEP = 1;
/**
 * Each digit of a run past the third (the newer tokenizers group digits by three; the legacy one
 * spends 0.42 tokens a digit on long random runs).
 */
const DIGIT_STEP = 0.75;
/**
 * A punctuation or whitespace character repeating the two before it (`====`, indentation), for the
 * characters whose runs the vocabulary merges; any other repeats at CHANGE_STEP (`,,,,` costs the
 * legacy tokenizer half a token a character, a control character a whole one).
 */
const REPEAT_STEP = 0.25;
const RUN_MERGES = new Uint8Array(128);
for (const c of "\t\n =-*#_~./") RUN_MERGES[c.charCodeAt(0)] = 1;
/** Any other punctuation or whitespace character continuing a run. */
const CHANGE_STEP = 1;
/** Longest glued letter or digit run charged as bytes. */
const GLUED_MAX_BYTES = 16;

/** The rare letter pairs: bit j of entry i is set when letter i followed by letter j is rare. */
const RARE_PAIRS = [
  82576,
  48871150,
  48345706,
  48871078,
  33556096,
  65386190,
  65639982,
  48611054,
  22086528,
  66043886,
  66846446,
  48477926,
  48967404,
  46371458,
  33620624,
  48313966,
  66060287,
  46203520,
  44237418,
  44115522,
  66143904,
  67092206,
  66690670,
  58162923,
  66258927,
  67108846,
];

const NONE = 0, LOWER = 1, UPPER = 2, DIGIT = 3, SPACE = 4, PUNCT = 5;
/** Piece kind of each ASCII code unit. */
const ASCII_KIND = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  ASCII_KIND[c] = c >= 97 && c <= 122
    ? LOWER
    : c >= 65 && c <= 90
    ? UPPER
    : c >= 48 && c <= 57
    ? DIGIT
    : c === 32 || (c >= 9 && c <= 13)
    ? SPACE
    : PUNCT;
}

/**
 * Most UTF-8 bytes of a code point, its NFC form and its NFKC form; filled lazily (0 = not yet
 * known), so normalize() runs once per distinct code point per process, not per character.
 */
let normalizedBytes: Uint8Array | undefined;

/** Bytes to charge a non-ASCII code point: its UTF-8 length, or more if normalization lengthens it. */
function nonAsciiBytes(cp: number): number {
  const table = normalizedBytes ??= new Uint8Array(0x110000);
  let n = table[cp];
  if (n === 0) {
    const s = String.fromCodePoint(cp);
    n = Math.max(utf8Length(s), utf8Length(s.normalize("NFC")), utf8Length(s.normalize("NFKC")));
    table[cp] = Math.min(n, 255);
  }
  return n;
}

/**
 * What a finished ASCII piece is charged: its cost, never more than its bytes, and its bytes when
 * it is glued to another kind and short (hex, base64 and UUIDs glue short runs; capping the
 * length keeps a cut between two glued pieces from changing the total by more than a few tokens).
 */
function pieceCost(cost: number, bytes: number, solid: boolean): number {
  return cost > bytes || (solid && bytes <= GLUED_MAX_BYTES) ? bytes : cost;
}

/**
 * An upper bound on the tokens any Claude tokenizer bills for `text` alone (no message framing).
 * At least 1 for non-empty text, at most its byte ceiling. Bounding two parts of a text separately
 * gives at least the bound of the whole less 7: bound(a + b) ≤ bound(a) + bound(b) + 7 (a cut
 * between a glued digit run and letter run loses up to 16 - 12.75 and 16 - 13 tokens, plus rounding).
 */
export function claudeTokenBound(text: string): number {
  let total = 0;
  // The current ASCII piece: its kind (LOWER and UPPER are both letters), cost, bytes, and whether
  // it is charged its bytes whatever its cost (a letter or digit run glued to another kind).
  let kind = NONE;
  let cost = 0;
  let bytes = 0;
  let solid = false;
  let prev = 0;
  let prev2 = 0;
  /** Whether the code unit before is a non-ASCII one that glues to letters and digits. */
  let afterGlue = false;
  /** Whether the current piece follows a punctuation piece directly. */
  let afterPunct = false;
  /** Whether the current piece follows a piece that is one space. */
  let afterSpace = false;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c < 128) {
      const k = ASCII_KIND[c];
      if (
        kind !== NONE &&
        (k === kind || (k <= UPPER && k !== NONE && (kind === LOWER || kind === UPPER)))
      ) {
        bytes++;
        if (k <= UPPER) {
          cost += k === UPPER || bytes === 2 || bytes > WORD_LETTERS
            ? 1
            : afterSpace
            ? LETTER_STEP
            : UNSPACED_LETTER_STEP;
          if ((RARE_PAIRS[(prev | 32) - 97] >>> ((c | 32) - 97)) & 1) cost += RARE_PAIR_STEP;
          // camelCase and random case cut where lower meets upper, and after a run of capitals.
          if (k === UPPER ? kind === LOWER : kind === UPPER && ASCII_KIND[prev2] === UPPER) {
            cost += CASE_STEP;
          }
        } else if (k === DIGIT) cost += bytes <= 3 ? 1 : DIGIT_STEP;
        else cost += c === prev && c === prev2 && RUN_MERGES[c] ? REPEAT_STEP : CHANGE_STEP;
      } else {
        const alnum = k <= DIGIT;
        let glued = alnum && afterGlue;
        if (kind !== NONE) {
          // Letters against digits ("a1b2", hex, base64) are charged as bytes, and so is a short
          // letter run between two punctuation marks (random printable text is full of them).
          if (alnum && kind <= DIGIT) solid = glued = true;
          else if (k === PUNCT && kind <= UPPER && afterPunct && bytes <= 3) solid = true;
          total += pieceCost(cost, bytes, solid);
        }
        afterPunct = kind === PUNCT;
        afterSpace = kind === SPACE && bytes === 1 && prev === 32;
        cost = PIECE_START;
        bytes = 1;
        solid = glued;
      }
      kind = k;
      prev2 = prev;
      prev = c;
      afterGlue = false;
      continue;
    }
    const glue = c > 0xbf && (c < 0x2000 || c > 0x206f);
    if (kind !== NONE) {
      if (glue && kind <= DIGIT) solid = true;
      total += pieceCost(cost, bytes, solid);
      kind = NONE;
    }
    afterGlue = glue;
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = c <= 0xdbff && i + 1 < n ? text.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        total += nonAsciiBytes(((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000);
        i++;
      } else total += 3; // lone surrogate: sent as U+FFFD
    } else total += nonAsciiBytes(c);
  }
  if (kind !== NONE) total += pieceCost(cost, bytes, solid);
  return Math.ceil(total);
}

/**
 * An upper bound on the tokens of a JSON value (a tool's input schema, a tool result) as text.
 * Anthropic renders tools into the prompt in its own unpublished format; this bounds the value
 * serialized with two-space indentation, which this bound never charges less than the compact
 * form. Fixed per-model overheads (the tool-use system prompt) are the caller's to add.
 */
export function claudeTokenBoundOfJson(value: unknown): number {
  const compact = JSON.stringify(value);
  if (compact === undefined) return 0;
  const added = jsonIndentation(value, 2);
  if (compact.length + added <= MAX_INDENTED_JSON_CHARS) {
    return claudeTokenBound(JSON.stringify(value, null, 2));
  }
  // The indented form's ceiling, without writing it: the whitespace it adds is a byte a character.
  return byteCeiling(compact) + added;
}

/**
 * Indented JSON up to this size is written and bounded; a larger one, its ceiling. Deep nesting
 * indents every line by twice its depth: a 4 MB schema of arrays 58 deep was 234 million
 * characters, seconds to write and half a GB to hold.
 */
const MAX_INDENTED_JSON_CHARS = 4 * 1024 * 1024;

/**
 * The characters indenting a JSON value `width` spaces a level adds to its compact form (as
 * `JSON.stringify(value, null, width)` and Python's `json.dumps(value, indent=width)` write it).
 */
export function jsonIndentation(value: unknown, width: number): number {
  return indentation(value, 0, width);
}

function indentation(value: unknown, depth: number, width: number): number {
  if (value === null || typeof value !== "object") return 0;
  const line = 1 + width * (depth + 1); // a newline and the member's indent
  let added = 0;
  let members = 0;
  if (Array.isArray(value)) {
    for (const item of value) {
      added += line + indentation(item, depth + 1, width);
      members++;
    }
  } else {
    for (const member of Object.values(value)) {
      if (member === undefined || typeof member === "function") continue;
      added += line + 1 + indentation(member, depth + 1, width); // and the space after the colon
      members++;
    }
  }
  return members === 0 ? 0 : added + 1 + width * depth; // the closing line
}

/** The most tokens a text can cost: its bytes, each code point at its dearest normal form. */
function byteCeiling(text: string): number {
  let total = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) total++;
    else if (c >= 0xd800 && c <= 0xdfff) {
      const d = c <= 0xdbff && i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d <= 0xdfff) {
        total += nonAsciiBytes(((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000);
        i++;
      } else total += 3;
    } else total += nonAsciiBytes(c);
  }
  return total;
}
