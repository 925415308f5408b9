/**
 * Provider credentials never leave the process. An upstream may quote our key back in an error
 * (whole, cut short, or masked with its last characters shown, as OpenAI's "sk-proj-****abcd"),
 * whatever header carried it; that text must reach neither clients nor logs. One redactor, built
 * from the catalog's configured keys, is applied to every log line. What a client reads of an
 * upstream is made safe without looking at our keys (clientSafe): an upstream may quote the
 * client's own text back, or print a key cut where the client chooses, and any decision made on
 * our keys would tell a client which of its guesses were pieces of one.
 */
import { type Catalog, type ProviderConfig, providersOf } from "@/lib/catalog/mod.ts";
import type { Logger } from "@/lib/core/mod.ts";

export const REDACTED = "[redacted]";

/**
 * Any run of this many characters of a key is treated as the key (a key cut short). Shorter runs
 * could be ordinary words of a log line (a key may contain one); a random run this long is not.
 */
export const MIN_SECRET_RUN = 12;
/**
 * A key shorter than this (a local server that ignores its key) is not one we can tell from
 * ordinary text; keys from here up to MIN_SECRET_RUN are redacted whole only.
 */
export const MIN_SECRET_LENGTH = 8;
/** The visible tail of a masked key: `****abcd`. */
const MASKED_TAIL = 4;
const WORD = /[\w-]/;
const MASK_CHAR = /[*•….]/;
/** The most of a masked print's word that is redacted with it. */
const MASKED_WORD = 128;
/** A masked print needs one of these; a text without any skips the masked-print search. */
const MASK_HINT = /[*•…]|\.\./;

/** Polynomial hash of a MIN_SECRET_RUN-long window, rolled along a text one character at a time. */
const HASH_BASE = 31;
let HASH_TOP = 1; // HASH_BASE ** (MIN_SECRET_RUN - 1), modulo 2^32
for (let i = 1; i < MIN_SECRET_RUN; i++) HASH_TOP = Math.imul(HASH_TOP, HASH_BASE);

/** Bits of the run hashes' bitmap: a few hundred runs set well under 1% of them. */
const RUN_BITMAP_BITS = 1 << 16;
const RUN_BITMAP_MASK = RUN_BITMAP_BITS - 1;
const RUN_BITMAP_WORDS = RUN_BITMAP_BITS / 32;

function windowHash(text: string, from: number): number {
  let hash = 0;
  for (let k = from; k < from + MIN_SECRET_RUN; k++) {
    hash = (Math.imul(hash, HASH_BASE) + text.charCodeAt(k)) | 0;
  }
  return hash;
}

export class SecretRedactor {
  readonly #runs = new Set<string>();
  // Every log line passes through here: windows are compared by a rolling hash first, looked up in
  // a bitmap of the runs' hashes (a set lookup per character was most of a log line's redaction),
  // so a text with no run of a key costs no string allocation per character.
  readonly #runHashes = new Uint32Array(RUN_BITMAP_WORDS);
  readonly #short: string[] = [];
  readonly #masked: RegExp | null;

  constructor(secrets: Iterable<string>) {
    const tails = new Set<string>();
    for (const secret of secrets) {
      if (secret.length < MIN_SECRET_LENGTH) continue;
      for (const form of new Set([secret, encodeURIComponent(secret)])) {
        if (form.length < MIN_SECRET_RUN) this.#short.push(form);
        for (let i = 0; i + MIN_SECRET_RUN <= form.length; i++) {
          this.#runs.add(form.slice(i, i + MIN_SECRET_RUN));
          const hash = windowHash(form, i) & RUN_BITMAP_MASK;
          this.#runHashes[hash >>> 5] |= 1 << (hash & 31);
        }
      }
      tails.add(escapeRegExp(secret.slice(-MASKED_TAIL)));
    }
    // A masked print: a mask (asterisks, bullets, an ellipsis, two dots or more) and the tail; the
    // word before it goes with it (redactMasked), found by hand. Searched from each character of
    // a long word or mask to its end, as the pattern once was, a text took time in the square of
    // its length (a 64 KB request path held the thread 2.7 s): a mask is matched from its first
    // character only.
    this.#masked = tails.size === 0
      ? null
      : new RegExp(`(?<![*•….])[*•….]+(?:${[...tails].join("|")})`, "g");
  }

  /** Whether there is anything to redact at all (no configured keys: every call is a no-op). */
  get empty(): boolean {
    return this.#masked === null;
  }

  /** Masked prints with the word each is part of (up to MASKED_WORD characters of it). */
  #redactMasked(text: string): string {
    let out = "";
    let copiedTo = 0;
    for (const match of text.matchAll(this.#masked!)) {
      // One dot alone is a full stop, not a mask.
      if (match[0][0] === "." && !MASK_CHAR.test(match[0][1])) continue;
      let start = match.index;
      while (start > copiedTo && match.index - start < MASKED_WORD && WORD.test(text[start - 1])) {
        start--;
      }
      out += text.slice(copiedTo, start) + REDACTED;
      copiedTo = match.index + match[0].length;
    }
    return copiedTo === 0 ? text : out + text.slice(copiedTo);
  }

  redact(text: string): string {
    if (this.empty || text.length < MASKED_TAIL) return text;
    if (MASK_HINT.test(text)) text = this.#redactMasked(text);
    for (const secret of this.#short) text = text.replaceAll(secret, REDACTED);
    if (text.length < MIN_SECRET_RUN) return text;
    let out = "";
    let copiedTo = 0;
    let i = 0;
    let hash = windowHash(text, 0);
    for (;;) {
      const bit = hash & RUN_BITMAP_MASK;
      if (
        (this.#runHashes[bit >>> 5] & (1 << (bit & 31))) !== 0 &&
        this.#runs.has(text.slice(i, i + MIN_SECRET_RUN))
      ) {
        let end = i + MIN_SECRET_RUN;
        while (
          end < text.length && this.#runs.has(text.slice(end - MIN_SECRET_RUN + 1, end + 1))
        ) {
          end++;
        }
        out += text.slice(copiedTo, i) + REDACTED;
        copiedTo = i = end;
        if (i + MIN_SECRET_RUN > text.length) break;
        hash = windowHash(text, i);
        continue;
      }
      if (i + MIN_SECRET_RUN >= text.length) break;
      hash = (Math.imul(hash - Math.imul(text.charCodeAt(i), HASH_TOP), HASH_BASE) +
        text.charCodeAt(i + MIN_SECRET_RUN)) | 0;
      i++;
    }
    return copiedTo === 0 ? text : out + text.slice(copiedTo);
  }

  /** A copy of `value` with every string in it redacted (log fields, nested or not). */
  redactDeep<T>(value: T): T {
    if (this.empty) return value;
    return this.#deep(value, 0) as T;
  }

  /** `value` itself when nothing in it changes: a log line without a key is not copied. */
  #deep(value: unknown, depth: number): unknown {
    if (typeof value === "string") return this.redact(value);
    if (depth > 8 || value === null || typeof value !== "object") return value;
    if (value instanceof Error) return this.redact(String(value.stack ?? value.message));
    // What JSON.stringify would write for it (a URL's href, a Date's ISO text), redacted in turn.
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") return this.#deep(toJSON.call(value), depth + 1);
    if (Array.isArray(value)) {
      let copy: unknown[] | null = null;
      value.forEach((item, i) => {
        const redacted = this.#deep(item, depth + 1);
        if (redacted !== item) (copy ??= [...value])[i] = redacted;
      });
      return copy ?? value;
    }
    // Names, not entries: a pair per field was most of walking a request's log line.
    const fields = value as Record<string, unknown>;
    let copy: Record<string, unknown> | null = null;
    for (const name of Object.keys(fields)) {
      const field = fields[name];
      const redacted = this.#deep(field, depth + 1);
      if (redacted !== field) (copy ??= { ...fields })[name] = redacted;
    }
    return copy ?? value;
  }

  /** The same logger, writing redacted lines. */
  logger(log: Logger): Logger {
    if (this.empty) return log;
    return (fields) => log(this.redactDeep(fields));
  }
}

/** The redactor of every provider key the catalog has configured, fallbacks and documents included. */
export function providerKeyRedactor(catalog: Catalog): SecretRedactor {
  const secrets = new Set<string>();
  for (const model of catalog.models) {
    for (const provider of providersOf(model)) {
      if (provider.kind !== "simulator" && provider.apiKey) secrets.add(provider.apiKey);
    }
  }
  return new SecretRedactor(secrets);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** A run of the characters keys are made of (base64url: OpenAI's, Anthropic's, Google's, …). */
const KEY_LIKE_RUN = /[A-Za-z0-9_-]{12,}/g;
/**
 * Runs that are words, not secrets: snake_case and camelCase (field names), no digits. Not
 * kebab-case: keys are dashed (`sk-proj-…`, a local server's `sk-my-own-key`).
 */
const WORDLIKE = /^(?:[a-z]+(?:_[a-z]+)*|[a-z]+(?:[A-Z][a-z]+)+)$/;

/**
 * An upstream's words as a client may read them: every run of key characters 12 or longer that is
 * not a word (`max_completion_tokens` and `additionalProperties` stay) replaced by REDACTED. It
 * looks at the text alone, never at our keys, so nothing a client sends, and no cut it places,
 * makes it answer differently for a piece of a key: a key printed whole or cut is gone from its
 * first 12 characters (its public prefix and 4 more), unless they happen to read as a word.
 */
export function clientSafe(text: string): string {
  return text.replace(KEY_LIKE_RUN, (run) => WORDLIKE.test(run) ? run : REDACTED);
}

/** Could be a piece of a word WORDLIKE lets through: snake_case letters, or camelCase ones. */
function partOfWord(piece: string): boolean {
  return (/^[a-z_]+$/.test(piece) && !piece.includes("__")) ||
    (/^[a-zA-Z]+$/.test(piece) && !/[A-Z]{2}/.test(piece));
}

/**
 * Whether clientSafe hides `key` wherever an upstream prints it, whole or cut where a client
 * chooses: a run holding 12 of its characters in a row is never let through as a word. A key
 * with other characters (`+`, `/`, `.`) splits into runs clientSafe may not see, a shorter key is
 * never a run, and a passphrase (`correct_horse_battery_staple`) reads as a field name.
 */
export function clientSafeHides(key: string): boolean {
  if (!/^[A-Za-z0-9_-]+$/.test(key) || key.length < MIN_SECRET_RUN) return false;
  for (let i = 0; i + MIN_SECRET_RUN <= key.length; i++) {
    if (partOfWord(key.slice(i, i + MIN_SECRET_RUN))) return false;
  }
  return true;
}

/**
 * Whether a client may read a provider's reasons (made safe by clientSafe). Decided on the
 * configuration alone, so a withheld reason tells a client nothing of the key: the operator's
 * log keeps it. A key shorter than MIN_SECRET_LENGTH is a local server's placeholder, not a secret.
 */
export function upstreamReasonsShown(provider: ProviderConfig): boolean {
  if (provider.kind === "simulator" || !provider.apiKey) return true;
  return provider.apiKey.length < MIN_SECRET_LENGTH || clientSafeHides(provider.apiKey);
}
