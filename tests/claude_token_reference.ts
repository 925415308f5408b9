/**
 * What the Claude token bound is measured against, shared by lib/gateway/claude_tokens_test.ts and
 * scripts/measure_token_bounds.ts: the multilingual corpus, Claude's published legacy tokenizer
 * (a dev dependency: nothing under lib/ may import it), the UTF-8 byte ceiling, and the headroom
 * each sample must be held with. docs/token-bounds.md explains the choices.
 */
import { getTokenizer } from "@anthropic-ai/tokenizer";

export interface CorpusSample {
  id: string;
  /** Unicode script (or a group: Han+Kana, Emoji, Symbols, Mixed, Other) the sample is written in. */
  script: string;
  lang?: string;
  /** prose, code and data are written as people write them; adversarial samples are not. */
  kind: "prose" | "code" | "data" | "adversarial";
  /** How a generated sample was made. */
  note?: string;
  /** Whether `text` stores UTF-16 code units as \\uXXXX (lone surrogates, which JSON tools reject). */
  escaped?: boolean;
  text: string;
}

const corpusUrl = new URL("./fixtures/multilingual_corpus.json", import.meta.url);

export function loadCorpus(): CorpusSample[] {
  const samples: CorpusSample[] = JSON.parse(Deno.readTextFileSync(corpusUrl)).samples;
  for (const s of samples) {
    if (s.escaped) {
      s.text = s.text.replace(
        /\\u([0-9A-F]{4})/g,
        (_, hex) => String.fromCharCode(parseInt(hex, 16)),
      );
    }
  }
  return samples;
}

let tokenizer: ReturnType<typeof getTokenizer> | undefined;

/**
 * Tokens of `text` by Claude's legacy tokenizer, exactly as the package's countTokens counts them
 * (NFKC first, special-token text allowed), with one tokenizer kept instead of one per call.
 */
export function legacyClaudeTokens(text: string): number {
  tokenizer ??= getTokenizer();
  return tokenizer.encode(text.normalize("NFKC"), "all").length;
}

/** The legacy vocabulary as byte strings (for deriving the rare letter pairs). */
export function legacyVocabulary(): number[][] {
  tokenizer ??= getTokenizer();
  return tokenizer.token_byte_values();
}

const encoder = new TextEncoder();
const utf8 = (s: string) => encoder.encode(s).length;

/**
 * The byte ceiling, computed independently of the module under test: per code point the most UTF-8
 * bytes of it, its NFC and its NFKC form; a lone surrogate 3 (it is sent as U+FFFD). No tokenizer
 * whose every token covers at least one byte of its (normalized) input can exceed it.
 */
export function byteCeiling(text: string): number {
  let n = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (cp >= 0xd800 && cp <= 0xdfff) n += 3;
    else n += Math.max(utf8(ch), utf8(ch.normalize("NFC")), utf8(ch.normalize("NFKC")));
  }
  return n;
}

/** Plain UTF-8 bytes (lone surrogates as U+FFFD, as TextEncoder does). */
export function utf8Bytes(text: string): number {
  return utf8(text);
}

/**
 * How many times the legacy count a sample must be held with (before the byte ceiling caps it).
 * What is public about the newer tokenizers (Opus 4.7 against 4.6, measured through count_tokens)
 * says they cost more where the old one compressed well and about the same where it did not:
 * English and German prose up to 1.46-1.94 times, code 1.13-1.54, JSON and Markdown 1.15-1.31,
 * hashes, UUIDs and numbers 1.00-1.07, Chinese, Japanese, Korean, Arabic, Hindi and Russian 1.00.
 * Nothing public compares the Claude 3 tokenizer with the legacy one. So:
 * - text people write (every hand-written sample) is held at 2 times where the legacy tokenizer
 *   packs 4 or more characters into a token, shading down to 1.5 times at 2 characters a token;
 * - machine-made text (every generated sample) at 1.5 times;
 * - except two generated samples measured directly on the newest tokenizer: one letter repeated
 *   ('a' × 512: 2.99 times its predecessor) at 3, and " hi" repeated (1.95 times) at 2.
 * The 1.5 floor is the margin for what is not known; the byte ceiling caps every requirement.
 */
export function headroomOf(sample: CorpusSample, legacy = legacyClaudeTokens(sample.text)) {
  if (sample.id === "repeated-a") return 3;
  if (sample.id === "repeated-hi") return 2;
  if (sample.note !== undefined) return 1.5;
  const charsPerToken = [...sample.text].length / Math.max(1, legacy);
  return Math.min(2, Math.max(1.5, 1.5 + (charsPerToken - 2) / 4));
}

/** The least bound a sample must get: headroom times its legacy count, capped by the byte ceiling. */
export function requiredBound(sample: CorpusSample, legacy = legacyClaudeTokens(sample.text)) {
  return Math.min(Math.ceil(headroomOf(sample, legacy) * legacy), byteCeiling(sample.text));
}
