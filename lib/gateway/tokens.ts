import { countTokens, decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as countCl100kTokens } from "gpt-tokenizer/encoding/cl100k_base";

/** Text that looks like a special token is ordinary user text to us, never a control token. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/** The o200k token ids of a text. */
export function textTokenIds(text: string): number[] {
  return encode(text, PLAIN_TEXT);
}

/** Per-message framing of the chat format (role and separators), as OpenAI documents it. */
const TOKENS_PER_MESSAGE = 4;
/** The assistant reply is primed with a few tokens. */
const TOKENS_PER_REPLY = 3;

export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : countTokens(text, PLAIN_TEXT);
}

/**
 * The larger of a text's o200k and cl100k counts: OpenAI's embedding models (text-embedding-3,
 * ada-002) bill cl100k, which takes up to several times o200k's tokens on non-Latin scripts, and an
 * OpenAI-compatible server may use either; a reservation must cover whichever bills.
 */
export function countTextTokensEitherEncoding(text: string): number {
  if (text.length === 0) return 0;
  return Math.max(countTokens(text, PLAIN_TEXT), countCl100kTokens(text, PLAIN_TEXT));
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
  for (const token of encode(text, PLAIN_TEXT)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length) pieces.push(decode(pending));
  return pieces;
}
