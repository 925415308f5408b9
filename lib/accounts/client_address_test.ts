import assert from "node:assert/strict";
import { clientAddressOf } from "./client_address.ts";

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

Deno.test("a single-address header such as Fly-Client-IP is taken as it is; missing, the connection's", () => {
  const fly = { header: "fly-client-ip", count: 1 };
  assert.equal(
    clientAddressOf("10.0.0.2", headers({ "fly-client-ip": " 2001:DB8::1 " }), fly),
    "2001:db8::1",
  );
  assert.equal(clientAddressOf("10.0.0.2", headers({}), fly), "10.0.0.2");
});
