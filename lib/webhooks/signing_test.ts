import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { newWebhookSecret, signatureHeader, verifySignature } from "./signing.ts";

const SECRET = "whsec_test";
const BODY = '{"id":"evt_1","type":"balance.low"}';

Deno.test("the header is t=<seconds>,v1=<HMAC-SHA256 hex of 't.body'>, as Stripe signs", () => {
  const expected = createHmac("sha256", SECRET).update(`1700000000.${BODY}`).digest("hex");
  assert.equal(signatureHeader(SECRET, 1700000000, BODY), `t=1700000000,v1=${expected}`);
});

Deno.test("a signature verifies for its body and secret within the tolerance", () => {
  const header = signatureHeader(SECRET, 1700000000, BODY);
  assert.ok(verifySignature(SECRET, header, BODY, 1700000000 + 299));
});

Deno.test("another body, another secret or an old timestamp does not verify", () => {
  const header = signatureHeader(SECRET, 1700000000, BODY);
  assert.ok(!verifySignature(SECRET, header, BODY + " ", 1700000000));
  assert.ok(!verifySignature("whsec_other", header, BODY, 1700000000));
  assert.ok(!verifySignature(SECRET, header, BODY, 1700000000 + 301));
  assert.ok(!verifySignature(SECRET, "t=abc,v1=00", BODY, 1700000000));
});

Deno.test("any one of several v1 signatures may match (secret rotation)", () => {
  const good = signatureHeader(SECRET, 1700000000, BODY).split(",v1=")[1];
  assert.ok(
    verifySignature(SECRET, `t=1700000000,v1=${"0".repeat(64)},v1=${good}`, BODY, 1700000000),
  );
});

Deno.test("secrets are whsec_ followed by a fresh random token", () => {
  const a = newWebhookSecret();
  assert.match(a, /^whsec_[0-9a-z]{30,}$/);
  assert.notEqual(a, newWebhookSecret());
});
