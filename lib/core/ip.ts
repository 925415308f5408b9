/**
 * IP address text, for the limits kept per client and the endpoints refused as internal: one
 * parser, so that every way of writing an address (compressed or not, an IPv4 tail, brackets, a
 * zone) is read alike.
 */

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** An IPv4 address's four octets; null when the text is not one. */
export function ipv4Octets(address: string): number[] | null {
  const m = IPV4.exec(address);
  if (!m) return null;
  const octets = m.slice(1).map(Number);
  return octets.every((o) => o <= 255) ? octets : null;
}

/**
 * An IPv6 address's eight 16-bit groups (brackets, a port after them and a zone dropped; an IPv4
 * tail read as the last two groups); null when the text is not one.
 */
export function ipv6Groups(address: string): number[] | null {
  let text = address.replace(/^\[|\](?::\d+)?$/g, "").replace(/%.*$/, "").toLowerCase();
  if (!text.includes(":")) return null;
  const lastColon = text.lastIndexOf(":");
  const last = text.slice(lastColon + 1);
  if (last.includes(".")) {
    const o = ipv4Octets(last);
    if (!o) return null;
    text = `${text.slice(0, lastColon + 1)}${((o[0] << 8) | o[1]).toString(16)}:${
      ((o[2] << 8) | o[3]).toString(16)
    }`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const parse = (part: string) => (part ? part.split(":") : []);
  const head = parse(halves[0]);
  const rest = halves.length === 2 ? parse(halves[1]) : [];
  if (![...head, ...rest].every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  return [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...rest]
    .map((g) => parseInt(g, 16));
}

/** The IPv4 address an IPv6 one carries (`::ffff:a.b.c.d`, however written); null otherwise. */
export function mappedIpv4(groups: number[]): string | null {
  if (!groups.slice(0, 5).every((g) => g === 0) || groups[5] !== 0xffff) return null;
  return [groups[6] >> 8, groups[6] & 255, groups[7] >> 8, groups[7] & 255].join(".");
}
