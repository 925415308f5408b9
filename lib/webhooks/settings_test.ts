import assert from "node:assert/strict";
import { privateIp, validWebhookUrl, WebhookUrlError } from "./settings.ts";

const strict = { allowLoopback: false };

Deno.test("a public https endpoint is accepted as it is", () => {
  assert.equal(
    validWebhookUrl("https://hooks.example.com/tb", strict),
    "https://hooks.example.com/tb",
  );
});

Deno.test("endpoints inside the network are refused: private, metadata, reserved, internal names", () => {
  for (
    const url of [
      "https://10.1.2.3/x",
      "https://169.254.169.254/latest/meta-data",
      "https://198.18.0.1/x",
      "https://224.0.0.1/x",
      "https://[::1]/x",
      "https://instance-data/x",
      "https://kubernetes.default.svc/x",
      "https://foo.internal./x",
      "https://printer.local/x",
      "https://127.0.0.1/x",
    ]
  ) {
    assert.throws(() => validWebhookUrl(url, strict), WebhookUrlError, url);
  }
});

Deno.test("plain http is only for loopback, and only where the service allows it", () => {
  assert.throws(() => validWebhookUrl("http://hooks.example.com/x", strict), WebhookUrlError);
  assert.throws(() => validWebhookUrl("http://127.0.0.1:9/x", strict), WebhookUrlError);
  assert.equal(
    validWebhookUrl("http://127.0.0.1:9/x", { allowLoopback: true }),
    "http://127.0.0.1:9/x",
  );
});

Deno.test("addresses off the public internet are told apart, IPv4 written as IPv6 included", () => {
  for (
    const inside of [
      "10.0.0.1",
      "100.64.0.1",
      "172.31.255.255",
      "::1",
      "fd00::1",
      "fe80::1",
      "::ffff:192.168.1.1",
      "64:ff9b::a00:1",
      "0:0:0:0:0:0:0:1",
      "::ffff:7f00:1",
      "192.0.2.1",
      "198.51.100.7",
      "203.0.113.5",
      "192.88.99.1",
      "2002:a9fe:a9fe::1",
      "2002:7f00:1::1",
      "2001:0:4136:e378:8000:63bf:3fff:fdd2",
      "2001:db8::1",
      "100::1",
    ]
  ) {
    assert.ok(privateIp(inside), inside);
  }
  for (
    const outside of [
      "93.184.216.34",
      "172.32.0.1",
      "2606:4700::6810:84e5",
      "::ffff:8.8.8.8",
      "2002:808:808::1",
      "2001:4860::8888",
    ]
  ) {
    assert.ok(!privateIp(outside), outside);
  }
});

Deno.test("IETF-reserved 192.0.0.0/24, site-local fec0::/10 and IPv4 carried in ::/96 or ::ffff:0:0/96 are inside", () => {
  for (
    const inside of [
      "192.0.0.1",
      "192.0.0.170",
      "fec0::1",
      "feff::1",
      "::127.0.0.1",
      "::a9fe:a9fe",
      "::169.254.169.254",
      "::ffff:0:10.0.0.1",
      "::ffff:0:127.0.0.1",
    ]
  ) {
    assert.ok(privateIp(inside), inside);
  }
  for (const outside of ["192.0.1.1", "192.1.0.1", "2001:4860:4860::8888"]) {
    assert.ok(!privateIp(outside), outside);
  }
});
