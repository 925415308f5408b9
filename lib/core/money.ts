/**
 * Money is integer micro-USD (1 USD = 1,000,000 µUSD). Prices are USD per million tokens, which is
 * numerically µUSD per token; they are kept as integer pico-USD per token (µUSD per token × 10⁶) so a
 * price with up to six decimals is exact.
 *
 * Rounding rule (the only one): a request's cost is summed exactly in pico-USD over every usage
 * component at its own price (input, cached input, cache writes, output), then rounded UP once to
 * the next whole micro-USD.
 */
export type Micros = number;
export type PicosPerToken = bigint;

export const MICROS_PER_USD = 1_000_000;
const PICOS_PER_MICRO = 1_000_000n;

const USD_PATTERN = /^(\d{1,9})(?:\.(\d{1,6}))?$/;

/** Parses a non-negative decimal USD string ("10", "10.5", "0.000001") into micro-USD. */
export function parseUsd(text: string): Micros {
  const match = USD_PATTERN.exec(text.trim());
  if (!match) {
    throw new RangeError(`not a USD amount with at most 6 decimals: ${JSON.stringify(text)}`);
  }
  const whole = Number(match[1]);
  const fraction = Number((match[2] ?? "").padEnd(6, "0"));
  return whole * MICROS_PER_USD + fraction;
}

/** Formats micro-USD as a decimal string with exactly six fractional digits ("4.998214"). */
export function formatUsd(micros: Micros): string {
  assertMicros(micros);
  const sign = micros < 0 ? "-" : "";
  const abs = Math.abs(micros);
  const whole = Math.floor(abs / MICROS_PER_USD);
  const fraction = String(abs % MICROS_PER_USD).padStart(6, "0");
  return `${sign}${whole}.${fraction}`;
}

/** Parses a price in USD per million tokens ("0.15") into pico-USD per token. */
export function parsePricePerMTok(text: string): PicosPerToken {
  return BigInt(parseUsd(text));
}

/** Formats a price in pico-USD per token back as USD per million tokens, trailing zeros trimmed. */
export function formatPricePerMTok(price: PicosPerToken): string {
  const text = formatUsd(Number(price));
  return text.replace(/0+$/, "").replace(/\.$/, ".00").replace(/\.(\d)$/, ".$10");
}

/** Exact cost of a token count pair, rounded up once to micro-USD. */
export function tokensCost(
  promptTokens: number,
  completionTokens: number,
  inputPrice: PicosPerToken,
  outputPrice: PicosPerToken,
): Micros {
  return componentsCost([[promptTokens, inputPrice], [completionTokens, outputPrice]]);
}

/** Exact cost of token counts, each at its own price, summed and then rounded up once. */
export function componentsCost(
  components: readonly [tokens: number, price: PicosPerToken][],
): Micros {
  let picos = 0n;
  for (const [tokens, price] of components) {
    if (!Number.isSafeInteger(tokens) || tokens < 0) {
      throw new RangeError(`not a token count: ${tokens}`);
    }
    picos += BigInt(tokens) * price;
  }
  return Number((picos + PICOS_PER_MICRO - 1n) / PICOS_PER_MICRO);
}

function assertMicros(value: number): asserts value is Micros {
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`not an integer micro-USD amount: ${value}`);
  }
}
