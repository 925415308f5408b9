/**
 * The address a request came from, for the limits kept per address. The connection's own address,
 * unless the operator says a proxy in front of the service reports the client's in a header
 * (TRUSTED_PROXY_HEADER): a header is never believed by default, since any client can send one.
 */

import { ipv6Groups, mappedIpv4 } from "@/lib/core/mod.ts";

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
  if (!trust.header) return addressBucket(connection.toLowerCase());
  const value = headers.get(trust.header)?.trim();
  if (!value) return addressBucket(connection.toLowerCase());
  let address = value;
  if (trust.header === "x-forwarded-for") {
    // Each proxy appends the address it saw connect: entries to the left of what our own proxies
    // wrote came from the client and can say anything. The right-most untrusted hop is the one
    // our outermost trusted proxy saw.
    const hops = value.split(",").map((hop) => hop.trim()).filter(Boolean);
    address = hops[Math.max(0, hops.length - trust.count)] ?? connection;
  }
  return addressBucket(address.toLowerCase().slice(0, MAX_ADDRESS_LENGTH));
}

/**
 * The unit a limit counts: an IPv4 address, or an IPv6 address's /64. A host is given a whole /64
 * (every VPS has one), so counting its addresses one by one let one machine sign up without end.
 * An IPv4 address written as IPv6 (`::ffff:203.0.113.7`) is the IPv4 address.
 */
export function addressBucket(address: string): string {
  const groups = ipv6Groups(address);
  if (!groups) return address;
  return mappedIpv4(groups) ?? `${groups.slice(0, 4).map((g) => g.toString(16)).join(":")}::/64`;
}
