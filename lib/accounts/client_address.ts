/**
 * The address a request came from, for the limits kept per address. The connection's own address,
 * unless the operator says a proxy in front of the service reports the client's in a header
 * (TRUSTED_PROXY_HEADER): a header is never believed by default, since any client can send one.
 */

export interface ProxyTrust {
  /** Lower-case header name, such as `x-forwarded-for` or `fly-client-ip`; unset: none trusted. */
  header: string | undefined;
  /** How many trusted proxies append to X-Forwarded-For (1: only the one in front of us). */
  count: number;
}

const MAX_ADDRESS_LENGTH = 64;

export function clientAddressOf(
  connection: string,
  headers: Headers,
  trust: ProxyTrust,
): string {
  if (!trust.header) return connection;
  const value = headers.get(trust.header)?.trim();
  if (!value) return connection;
  let address = value;
  if (trust.header === "x-forwarded-for") {
    // Each proxy appends the address it saw connect: entries to the left of what our own proxies
    // wrote came from the client and can say anything. The right-most untrusted hop is the one
    // our outermost trusted proxy saw.
    const hops = value.split(",").map((hop) => hop.trim()).filter(Boolean);
    address = hops[Math.max(0, hops.length - trust.count)] ?? connection;
  }
  return address.toLowerCase().slice(0, MAX_ADDRESS_LENGTH);
}
