import assert from "node:assert/strict";
import { ipv4Octets, ipv6Groups, mappedIpv4 } from "./ip.ts";

Deno.test("an IPv4 address is four octets of at most 255", () => {
  assert.deepEqual(ipv4Octets("203.0.113.7"), [203, 0, 113, 7]);
  assert.equal(ipv4Octets("256.0.0.1"), null);
  assert.equal(ipv4Octets("example.com"), null);
});

Deno.test("an IPv6 address reads alike however it is written", () => {
  const loopback = [0, 0, 0, 0, 0, 0, 0, 1];
  for (const text of ["::1", "0:0:0:0:0:0:0:1", "[::1]", "[::1]:8080", "::0:1"]) {
    assert.deepEqual(ipv6Groups(text), loopback, text);
  }
  assert.deepEqual(ipv6Groups("fe80::1%eth0"), [0xfe80, 0, 0, 0, 0, 0, 0, 1]);
  assert.deepEqual(ipv6Groups("::ffff:127.0.0.1"), ipv6Groups("::ffff:7f00:1"));
  for (const text of ["1::2::3", "1:2:3:4:5:6:7", "g::1", "1.2.3.4", "::ffff:1.2.3.999"]) {
    assert.equal(ipv6Groups(text), null, text);
  }
});

Deno.test("an IPv4 address carried in IPv6 is told, in either spelling", () => {
  assert.equal(mappedIpv4(ipv6Groups("::ffff:203.0.113.7")!), "203.0.113.7");
  assert.equal(mappedIpv4(ipv6Groups("0:0:0:0:0:ffff:cb00:7107")!), "203.0.113.7");
  assert.equal(mappedIpv4(ipv6Groups("2001:db8::1")!), null);
});
