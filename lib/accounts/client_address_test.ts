import assert from "node:assert/strict";
import { addressBucket, clientAddressOf } from "./client_address.ts";

const headers = (init: Record<string, string>) => new Headers(init);

Deno.test("without a trusted proxy header, the connection's address is used and headers are not believed", () => {
  const sent = headers({ "x-forwarded-for": "203.0.113.7", "fly-client-ip": "203.0.113.8" });
  assert.equal(clientAddressOf("10.0.0.2", sent, { header: undefined, count: 1 }), "10.0.0.2");
});

Deno.test("X-Forwarded-For gives the right-most untrusted hop, whatever the client wrote to its left", () => {
  const forged = headers({ "x-forwarded-for": "1.1.1.1, 2.2.2.2, 198.51.100.4" });
  const one = { header: "x-forwarded-for", count: 1 };
  assert.equal(clientAddressOf("10.0.0.2", forged, one), "198.51.100.4");
  const two = { header: "x-forwarded-for", count: 2 };
  assert.equal(clientAddressOf("10.0.0.2", forged, two), "2.2.2.2");
  const short = headers({ "x-forwarded-for": "198.51.100.4" });
  assert.equal(clientAddressOf("10.0.0.2", short, two), "198.51.100.4");
});

Deno.test("a single-address header such as Fly-Client-IP is taken as it is (IPv6: its /64); missing, the connection's", () => {
  const fly = { header: "fly-client-ip", count: 1 };
  assert.equal(
    clientAddressOf("10.0.0.2", headers({ "fly-client-ip": " 2001:DB8::1 " }), fly),
    "2001:db8:0:0::/64",
  );
  assert.equal(
    clientAddressOf("10.0.0.2", headers({ "fly-client-ip": "203.0.113.9" }), fly),
    "203.0.113.9",
  );
  assert.equal(clientAddressOf("10.0.0.2", headers({}), fly), "10.0.0.2");
});

Deno.test("limits count an IPv6 client by its /64, and an IPv4 address written as IPv6 as IPv4", () => {
  const none = { header: undefined, count: 1 };
  const a = clientAddressOf("2001:db8:1:2::1", headers({}), none);
  const b = clientAddressOf("2001:db8:1:2:ffff:ffff:ffff:ffff", headers({}), none);
  assert.equal(a, "2001:db8:1:2::/64");
  assert.equal(a, b, "one host's addresses are one client");
  assert.notEqual(clientAddressOf("2001:db8:1:3::1", headers({}), none), a, "the next /64 is not");
  const viaProxy = { header: "x-forwarded-for", count: 1 };
  assert.equal(
    clientAddressOf("10.0.0.2", headers({ "x-forwarded-for": "2001:DB8:1:2::abcd" }), viaProxy),
    a,
  );
  assert.equal(addressBucket("::ffff:203.0.113.7"), "203.0.113.7");
  assert.equal(addressBucket("::1"), "0:0:0:0::/64");
  assert.equal(addressBucket("fe80::1%eth0"), "fe80:0:0:0::/64");
  assert.equal(addressBucket("[2001:db8::1]:8080"), "2001:db8:0:0::/64");
  assert.equal(addressBucket("203.0.113.7"), "203.0.113.7");
  assert.equal(addressBucket("not:an:address"), "not:an:address", "kept as it is, not merged");
});
