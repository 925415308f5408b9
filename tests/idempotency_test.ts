import assert from "node:assert/strict";
import { issueKey } from "@/lib/tenants/mod.ts";
import { keys } from "@/lib/db.ts";
import { apiKeyScope } from "@/routes/idempotency.ts";
import { parseUsd } from "@/lib/core/mod.ts";
import { revokeKey, rotateKey } from "@/lib/billing/mod.ts";
import { IdempotencyStore } from "@/lib/idempotency/mod.ts";
import { canonicalBodyHash } from "@/lib/idempotency/mod.ts";
import {
  assertAuditClean,
  holdInput,
  serveLoopback,
  startService,
  type TestService,
  until,
  usageInput,
  usageRecords,
  userMessage,
} from "./helpers.ts";
import { completionStream } from "./upstreams.ts";

const FAKE = "fake/gpt";
const CHAT = "POST /v1/chat/completions";

/**
 * A loopback OpenAI-compatible upstream that counts its calls, answers each once `release` is
 * called (or at once when not gated), and fails the first `failFirst` calls with a 500.
 */
function countingUpstream(
  options: { gated?: boolean; failFirst?: number; cutFirst?: boolean } = {},
) {
  let calls = 0;
  let open: () => void = () => {};
  const gate = options.gated ? new Promise<void>((r) => (open = r)) : Promise.resolve();
  let entered: () => void = () => {};
  const firstCall = new Promise<void>((r) => (entered = r));
  const server = serveLoopback(async (request) => {
    const body = await request.json();
    calls++;
    entered();
    if (calls <= (options.failFirst ?? 0)) {
      return Response.json({ error: { message: "boom", type: "server_error" } }, { status: 500 });
    }
    if (options.cutFirst && calls === 1) {
      // One chunk of the answer, then the stream ends unfinished: the provider bills it.
      const chunk = {
        id: "chatcmpl-cut",
        object: "chat.completion.chunk",
        created: 1,
        model: body.model,
        choices: [{
          index: 0,
          delta: { role: "assistant", content: "half an" },
          finish_reason: null,
        }],
      };
      return new Response(`data: ${JSON.stringify(chunk)}\n\n`, {
        headers: { "content-type": "text/event-stream" },
      });
    }
    await gate;
    // Every upstream call is streamed (non-streamed requests are assembled from it).
    return completionStream({
      id: `chatcmpl-${calls}`,
      object: "chat.completion",
      created: 1,
      model: body.model,
      choices: [{
        index: 0,
        message: { role: "assistant", content: `answer ${calls}` },
        finish_reason: "stop",
      }],
      usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 },
    });
  });
  return {
    url: server.url,
    get calls() {
      return calls;
    },
    firstCall,
    release: () => open(),
    close: server.close,
  };
}

async function withUpstream(
  options: Parameters<typeof countingUpstream>[0],
  fn: (s: TestService, upstream: ReturnType<typeof countingUpstream>) => Promise<void>,
  serviceOptions: Parameters<typeof startService>[0] = {},
) {
  const upstream = countingUpstream(options);
  const s = await startService({ openaiBaseUrl: upstream.url, ...serviceOptions });
  try {
    await fn(s, upstream);
    await assertAuditClean(s.kv);
  } finally {
    upstream.release();
    await s.close();
    await upstream.close();
  }
}

const request = (content = "Hello") => ({
  model: FAKE,
  messages: userMessage(content),
  max_tokens: 20,
});

const withKey = (key: string) => ({ headers: { "idempotency-key": key } });

Deno.test("a repeat with the same key and body replays the first answer: no upstream call, no charge", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const first = await s.chat(apiKey, request(), withKey("order-42"));
    assert.equal(first.status, 200);
    assert.equal(first.headers.get("idempotent-replayed"), null);
    const firstBody = await first.text();
    const afterFirst = await s.wallet(appId);

    // The same request serialised in another key order is the same request.
    const { max_tokens, messages, model } = request();
    const again = await s.chat(apiKey, { max_tokens, messages, model }, withKey("order-42"));
    assert.equal(again.status, 200);
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal(await again.text(), firstBody);
    for (const name of ["tollbooth-request-cost", "tollbooth-balance", "tollbooth-provider"]) {
      assert.equal(again.headers.get(name), first.headers.get(name), name);
    }
    assert.match(again.headers.get("content-type")!, /^application\/json/);
    assert.equal(
      again.headers.get("tollbooth-original-request-id"),
      first.headers.get("tollbooth-request-id"),
    );
    assert.notEqual(
      again.headers.get("tollbooth-request-id"),
      first.headers.get("tollbooth-request-id"),
    );

    assert.equal(upstream.calls, 1);
    assert.deepEqual(await s.wallet(appId), afterFirst);
    assert.equal((await usageRecords(s.kv, appId)).length, 1);
  }));

Deno.test("a revoked key gets 401, not the replay of an answer it was given before", () =>
  withUpstream({}, async (s) => {
    const { apiKey, keyId } = await s.newApp();
    const first = await s.chat(apiKey, request(), withKey("order-7"));
    assert.equal(first.status, 200);
    await first.body?.cancel();
    await revokeKey(s.kv, keyId);
    const again = await s.chat(apiKey, request(), withKey("order-7"));
    assert.equal(again.status, 401);
    assert.equal((await again.json()).error.code, "invalid_api_key");
    // Nothing of the answer it did not get: no replay mark, cost or balance.
    for (const name of ["idempotent-replayed", "tollbooth-request-cost", "tollbooth-balance"]) {
      assert.equal(again.headers.get(name), null, name);
    }
    assert.match(again.headers.get("content-type")!, /^application\/json/);
  }));

Deno.test("10 simultaneous repeats of one key: one upstream call, one charge, nine 409s, then replays", () =>
  withUpstream({ gated: true }, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const server = serveLoopback(s.handle);
    try {
      const send = () =>
        fetch(`${server.url}/v1/chat/completions`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${apiKey}`,
            "content-type": "application/json",
            "idempotency-key": "burst",
          },
          body: JSON.stringify(request()),
        }).then(async (res) => ({
          status: res.status,
          replayed: res.headers.get("idempotent-replayed"),
          cost: res.headers.get("tollbooth-request-cost"),
          body: await res.json(),
        }));
      let answered = 0;
      const all = Array.from({ length: 10 }, () => send().finally(() => answered++));
      // The upstream holds the one request that runs until the nine others have been answered:
      // they all met the key while it ran.
      await upstream.firstCall;
      await until(() => answered === 9, "the nine repeats to be answered");
      upstream.release();
      const responses = await Promise.all(all);

      const ran = responses.filter((r) => r.status === 200);
      const busy = responses.filter((r) => r.status === 409);
      assert.equal(ran.length, 1, JSON.stringify(responses.map((r) => r.status)));
      assert.equal(ran[0].replayed, null);
      assert.equal(busy.length, 9);
      for (const r of busy) assert.equal(r.body.error.code, "idempotency_key_in_use");

      assert.equal(upstream.calls, 1);
      const usage = await usageRecords(s.kv, appId);
      assert.equal(usage.length, 1);
      const wallet = await s.wallet(appId);
      assert.equal(wallet.spent, parseUsd(ran[0].cost!));
      assert.equal(wallet.reserved, 0);

      // Once it has finished, a repeat gets its answer.
      const late = await send();
      assert.equal(late.status, 200);
      assert.equal(late.replayed, "true");
      assert.deepEqual(late.body, ran[0].body);
      assert.equal(upstream.calls, 1);
    } finally {
      await server.close();
    }
  }));

Deno.test("a repeat while the first request still runs gets 409 idempotency_key_in_use", () =>
  withUpstream({ gated: true }, async (s, upstream) => {
    const { apiKey } = await s.newApp();
    const first = s.chat(apiKey, request(), withKey("slow-one"));
    await upstream.firstCall;
    const repeat = await s.chat(apiKey, request(), withKey("slow-one"));
    assert.equal(repeat.status, 409);
    const body = await repeat.json();
    assert.equal(body.error.code, "idempotency_key_in_use");
    assert.equal(body.error.type, "invalid_request_error");
    upstream.release();
    assert.equal((await first).status, 200);
    assert.equal(upstream.calls, 1);
  }));

Deno.test("the same key with a different body gets 422 idempotency_key_reused, and nothing runs", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    assert.equal((await s.chat(apiKey, request("one"), withKey("k-1"))).status, 200);
    const before = await s.wallet(appId);
    const other = await s.chat(apiKey, request("two"), withKey("k-1"));
    assert.equal(other.status, 422);
    assert.equal((await other.json()).error.code, "idempotency_key_reused");
    assert.equal(upstream.calls, 1);
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("keys are private to the app: another app's request with the same key runs and is charged", () =>
  withUpstream({}, async (s, upstream) => {
    const a = await s.newApp("a");
    const b = await s.newApp("b");
    const ra = await s.chat(a.apiKey, request(), withKey("shared"));
    const rb = await s.chat(b.apiKey, request(), withKey("shared"));
    assert.equal(ra.status, 200);
    assert.equal(rb.status, 200);
    assert.equal(rb.headers.get("idempotent-replayed"), null);
    assert.equal(upstream.calls, 2);
    assert.equal((await usageRecords(s.kv, a.appId)).length, 1);
    assert.equal((await usageRecords(s.kv, b.appId)).length, 1);
  }));

Deno.test("keys are private to the API key: another key of the same app, same key and body, runs and is charged", () =>
  withUpstream({}, async (s, upstream) => {
    const app = await s.newApp("reseller");
    const other = await issueKey(s.kv, app.appId, "second customer", "operator");
    const first = await s.chat(app.apiKey, request(), withKey("order-1"));
    const second = await s.chat(other.apiKey, request(), withKey("order-1"));
    assert.equal(first.status, 200);
    assert.equal(second.status, 200);
    assert.equal(second.headers.get("idempotent-replayed"), null, "not the first key's answer");
    assert.notEqual((await first.json()).id, (await second.json()).id);
    // A different body under the same key from the other API key is not a reuse either.
    const third = await s.chat(other.apiKey, request("Another"), withKey("order-2"));
    const fourth = await s.chat(app.apiKey, request("Different"), withKey("order-2"));
    assert.equal(third.status, 200);
    assert.equal(fourth.status, 200);
    await third.body?.cancel();
    await fourth.body?.cancel();
    assert.equal(upstream.calls, 4);
    assert.equal((await usageRecords(s.kv, app.appId)).length, 4);
  }));

Deno.test("a retry with the key that replaced a rotated one replays the first answer: one upstream call, charged once", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey, keyId } = await s.newApp();
    const first = await s.chat(apiKey, request(), withKey("order-9"));
    assert.equal(first.status, 200);
    const firstBody = await first.text();
    const afterFirst = await s.wallet(appId);
    // A rotation changes the secret, not the customer: the client retries with the new key.
    const { issued } = await rotateKey(s.kv, keyId);
    const again = await s.chat(issued.apiKey, request(), withKey("order-9"));
    assert.equal(again.status, 200);
    assert.equal(again.headers.get("idempotent-replayed"), "true");
    assert.equal(await again.text(), firstBody);
    // And again after a second rotation.
    const { issued: third } = await rotateKey(s.kv, issued.record.id);
    const once = await s.chat(third.apiKey, request(), withKey("order-9"));
    assert.equal(once.headers.get("idempotent-replayed"), "true");
    await once.body?.cancel();
    assert.equal(upstream.calls, 1);
    assert.deepEqual(await s.wallet(appId), afterFirst);
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 1);
    assert.equal(afterFirst.spent, records.reduce((n, r) => n + r.cost, 0));
  }));

Deno.test("a failed first attempt (502, nothing charged) is not recorded: a retry with the key runs", () =>
  withUpstream({ failFirst: 1 }, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const failed = await s.chat(apiKey, request(), withKey("retry-me"));
    assert.equal(failed.status, 502);
    assert.equal((await failed.json()).error.code, "provider_unreachable");
    assert.equal((await s.wallet(appId)).spent, 0);

    const retried = await s.chat(apiKey, request(), withKey("retry-me"));
    assert.equal(retried.status, 200);
    assert.equal(retried.headers.get("idempotent-replayed"), null);
    const replay = await s.chat(apiKey, request(), withKey("retry-me"));
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    assert.equal(upstream.calls, 2);
    assert.equal((await usageRecords(s.kv, appId)).length, 1);
  }));

Deno.test("a first attempt that was charged (502 upstream_interrupted) is recorded: a retry with the key replays it, charged once", () =>
  withUpstream({ cutFirst: true }, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const cut = await s.chat(apiKey, request(), withKey("cut-once"));
    assert.equal(cut.status, 502);
    assert.equal((await cut.json()).error.code, "upstream_interrupted");
    const charged = parseUsd(cut.headers.get("tollbooth-request-cost")!);
    assert.ok(charged > 0);

    const retried = await s.chat(apiKey, request(), withKey("cut-once"));
    assert.equal(retried.status, 502);
    assert.equal(retried.headers.get("idempotent-replayed"), "true");
    assert.equal(parseUsd(retried.headers.get("tollbooth-request-cost")!), charged);
    assert.equal(retried.headers.get("x-should-retry"), "false");
    assert.equal(upstream.calls, 1);
    assert.equal((await s.wallet(appId)).spent, charged);
  }));

Deno.test("a streamed request with an Idempotency-Key is refused with 400 idempotency_key_with_stream", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const res = await s.chat(apiKey, { ...request(), stream: true }, withKey("s-1"));
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error.code, "idempotency_key_with_stream");
    assert.equal(body.error.param, "stream");
    assert.equal(upstream.calls, 0);
    assert.equal((await s.wallet(appId)).available, 5_000_000);
  }));

Deno.test("a malformed Idempotency-Key is 400 invalid_parameter naming the header", () =>
  withUpstream({}, async (s, upstream) => {
    const { apiKey } = await s.newApp();
    for (const key of ["", "has space", "x".repeat(256), "é"]) {
      const res = await s.chat(apiKey, request(), withKey(key));
      assert.equal(res.status, 400, JSON.stringify(key));
      const body = await res.json();
      assert.equal(body.error.code, "invalid_parameter");
      assert.equal(body.error.param, "Idempotency-Key");
    }
    assert.equal(upstream.calls, 0);
  }));

Deno.test("a null body with an Idempotency-Key is refused as not a JSON object, as it is without the key", () =>
  withUpstream({}, async (s, upstream) => {
    const { apiKey } = await s.newApp();
    for (const init of [withKey("null-1"), {}]) {
      const res = await s.chat(apiKey, "null", init);
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.equal(body.error.code, "invalid_json");
      assert.equal(body.error.message, "The request body must be a JSON object.");
    }
    assert.equal(upstream.calls, 0);
  }));

Deno.test("a key is replayed for 24 hours, then runs afresh", async () => {
  let clock = Date.now();
  await withUpstream({}, async (s, upstream) => {
    const { apiKey } = await s.newApp();
    assert.equal((await s.chat(apiKey, request(), withKey("daily"))).status, 200);
    clock += 23 * 60 * 60 * 1000;
    const replay = await s.chat(apiKey, request(), withKey("daily"));
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    clock += 2 * 60 * 60 * 1000;
    const fresh = await s.chat(apiKey, request(), withKey("daily"));
    assert.equal(fresh.status, 200);
    assert.equal(fresh.headers.get("idempotent-replayed"), null);
    assert.equal(upstream.calls, 2);
  }, { now: () => clock });
});

/** Claims `key` as another process would that then died, its request `requestId` unanswered. */
async function claimAsDeadProcess(
  s: TestService,
  caller: { appId: string; keyId: string },
  key: string,
  requestId: string,
  now: () => number,
) {
  const dead = new IdempotencyStore(s.kv, { leaseMs: 60_000, now });
  const claim = await dead.claim(
    apiKeyScope(caller),
    key,
    canonicalBodyHash(request()),
    requestId,
    CHAT,
  );
  assert.equal(claim.kind, "claimed");
}

Deno.test("a claim left by a dead process is taken over once its lease has passed", async () => {
  let clock = Date.now();
  await withUpstream({}, async (s, upstream) => {
    const { appId, apiKey, keyId } = await s.newApp();
    // Another process claimed the key and died before answering.
    await claimAsDeadProcess(s, { appId, keyId }, "orphan", "req_dead", () => clock);
    assert.equal((await s.chat(apiKey, request(), withKey("orphan"))).status, 409);
    clock += 61_000;
    const taken = await s.chat(apiKey, request(), withKey("orphan"));
    assert.equal(taken.status, 200);
    assert.equal(upstream.calls, 1);
  }, { now: () => clock, env: { RESERVATION_TTL_SECONDS: "60" } });
});

Deno.test("a charged request sent with an Idempotency-Key is indexed by its request id; one sent without is not", async () => {
  await withUpstream({}, async (s) => {
    const { apiKey } = await s.newApp();
    const keyed = await s.chat(apiKey, request(), withKey("indexed"));
    const plain = await s.chat(apiKey, request());
    assert.equal(keyed.status, 200);
    assert.equal(plain.status, 200);
    await keyed.body?.cancel();
    await plain.body?.cancel();
    const indexOf = (res: Response) =>
      s.kv.get(keys.chargedRequest(res.headers.get("tollbooth-request-id")!));
    assert.notEqual((await indexOf(keyed)).value, null);
    assert.equal((await indexOf(plain)).value, null);
  });
});

Deno.test("a claim left by a process that died after its charge is never run again: a retry is 422 idempotency_answer_lost", async () => {
  let clock = Date.now();
  await withUpstream({}, async (s, upstream) => {
    const { appId, apiKey, keyId } = await s.newApp();
    // Another process claimed the key, was charged for its request, and died before recording
    // the answer: the charge's commit wrote its usage record, and the claim still says running.
    await claimAsDeadProcess(s, { appId, keyId }, "charged", "req_dead_charged", () => clock);
    const held = await s.wallets.reserve(appId, holdInput("req_dead_charged", 1_000));
    assert.ok(held.ok);
    await s.wallets.settle(appId, held.reservation.id, {
      ...usageInput("req_dead_charged", 700),
      idempotent: true,
    });
    const spent = (await s.wallet(appId)).spent;
    clock += 61_000;
    const retry = await s.chat(apiKey, request(), withKey("charged"));
    assert.equal(retry.status, 422);
    const error = (await retry.json()).error;
    assert.equal(error.code, "idempotency_answer_lost");
    assert.match(error.message, /req_dead_charged\) was charged 0\.000700 USD/);
    assert.equal(upstream.calls, 0, "not run again");
    assert.equal((await s.wallet(appId)).spent, spent, "not charged again");
    await assertAuditClean(s.kv);
  }, { now: () => clock, env: { RESERVATION_TTL_SECONDS: "60" } });
});

Deno.test("a claim renewed while its request runs is not taken over after its first lease", async () => {
  const kv = await Deno.openKv(":memory:");
  let clock = Date.now();
  try {
    const store = new IdempotencyStore(kv, { leaseMs: 60_000, now: () => clock });
    const hash = canonicalBodyHash(request());
    const claim = await store.claim("app:a", "long", hash, "req_long", CHAT);
    assert.equal(claim.kind, "claimed");
    if (claim.kind !== "claimed") return;
    clock += 50_000;
    assert.equal(await store.renew("app:a", "long", claim), true);
    clock += 50_000; // past the first lease, within the renewed one
    assert.equal((await store.claim("app:a", "long", hash, "req_retry", CHAT)).kind, "in_use");
    assert.equal(
      await store.complete("app:a", "long", claim, "req_long", hash, {
        status: 200,
        headers: {},
        body: new TextEncoder().encode("{}"),
      }),
      true,
      "the renewed claim still records its answer",
    );
    assert.equal((await store.claim("app:a", "long", hash, "req_retry", CHAT)).kind, "replay");
  } finally {
    kv.close();
  }
});

Deno.test("an answer completed while a renewal of its claim is in flight is still recorded", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const store = new IdempotencyStore(kv, { leaseMs: 60_000 });
    const hash = canonicalBodyHash(request());
    const claim = await store.claim("app:a", "racing", hash, "req_racing", CHAT);
    assert.equal(claim.kind, "claimed");
    if (claim.kind !== "claimed") return;
    // The renewal timer fired just before the request ended: its commit is still on its way.
    const renewing = store.renew("app:a", "racing", claim);
    const recorded = await store.complete("app:a", "racing", claim, "req_racing", hash, {
      status: 200,
      headers: {},
      body: new TextEncoder().encode("{}"),
    });
    assert.equal(await renewing, true);
    assert.equal(recorded, true, "the answer is recorded, not lost to the renewal");
    assert.equal((await store.claim("app:a", "racing", hash, "req_retry", CHAT)).kind, "replay");
  } finally {
    kv.close();
  }
});

Deno.test("a large answer is recorded in parts and replayed byte for byte", async () => {
  const kv = await Deno.openKv(":memory:");
  const store = new IdempotencyStore(kv, { leaseMs: 1000 });
  const body = Uint8Array.from({ length: 65_536 * 3 + 17 }, (_, i) => (i * 31) % 251);
  const claim = await store.claim("app:x", "big", "h", "req_1", CHAT);
  assert.equal(claim.kind, "claimed");
  if (claim.kind !== "claimed") return;
  assert.ok(
    await store.complete("app:x", "big", claim, "req_1", "h", {
      status: 200,
      headers: { "content-type": "application/json" },
      body,
    }),
  );
  const replay = await store.claim("app:x", "big", "h", "req_2", CHAT);
  assert.equal(replay.kind, "replay");
  if (replay.kind === "replay") assert.deepEqual(replay.response.body, body);
  kv.close();
});

Deno.test("an answer up to the replay limit is replayed; one byte over, it is recorded as too large, without its body", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const store = new IdempotencyStore(kv, { leaseMs: 1000, maxBodyBytes: 100_000 });
    const answer = (bytes: number) => ({
      status: 200,
      headers: {},
      body: new Uint8Array(bytes).fill(120),
    });
    for (const [key, bytes] of [["at", 100_000], ["over", 100_001]] as const) {
      const claim = await store.claim("app:x", key, "h", `req_${key}`, CHAT);
      assert.equal(claim.kind, "claimed");
      if (claim.kind !== "claimed") return;
      assert.ok(await store.complete("app:x", key, claim, `req_${key}`, "h", answer(bytes)));
    }
    const atLimit = await store.claim("app:x", "at", "h", "req_2", CHAT);
    assert.equal(atLimit.kind, "replay");
    if (atLimit.kind === "replay") assert.equal(atLimit.response.body.byteLength, 100_000);
    const over = await store.claim("app:x", "over", "h", "req_3", CHAT);
    assert.equal(over.kind, "too_large");
    if (over.kind === "too_large") {
      assert.deepEqual(over, {
        kind: "too_large",
        requestId: "req_over",
        bytes: 100_001,
        limit: 100_000,
      });
    }
    const stored = await Array.fromAsync(kv.list({ prefix: ["idempotency_bodies", "app:x"] }));
    assert.ok(
      stored.every((entry) => entry.key[2] === "at"),
      "the answer over the limit left no body parts",
    );
    assert.equal(
      (await store.claim("app:x", "over", "other body", "req_4", CHAT)).kind,
      "reused",
      "a key recorded as too large still refuses another body",
    );
  } finally {
    kv.close();
  }
});

Deno.test("a repeat of an answer too large to record is 422 idempotency_replay_too_large: not run, not charged", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const first = await s.chat(apiKey, request(), withKey("huge"));
    assert.equal(first.status, 200);
    const firstId = first.headers.get("tollbooth-request-id")!;
    const cost = parseUsd(first.headers.get("tollbooth-request-cost")!);
    assert.ok(cost > 0);
    await first.body?.cancel();
    const afterFirst = await s.wallet(appId);

    const again = await s.chat(apiKey, request(), withKey("huge"));
    assert.equal(again.status, 422);
    const body = await again.json();
    assert.equal(body.error.code, "idempotency_replay_too_large");
    assert.ok(body.error.message.includes(firstId), "the message names the request that ran");
    assert.equal(again.headers.get("tollbooth-request-cost"), null);

    assert.equal(upstream.calls, 1, "the repeat never reached the provider");
    assert.deepEqual(await s.wallet(appId), afterFirst);
    const usage = await usageRecords(s.kv, appId);
    assert.equal(usage.length, 1);
    assert.equal(
      usage.reduce((sum, u) => sum + u.cost, 0),
      cost,
      "the ledger holds the one charge",
    );
  }, { env: { IDEMPOTENCY_REPLAY_MAX_BYTES: "64" } }));

Deno.test("embeddings and responses take Idempotency-Key too: a repeat is replayed and charged once", async () => {
  const s = await startService();
  try {
    const { appId, apiKey } = await s.newApp();
    const post = (path: string, body: unknown, key: string) =>
      s.handle(
        new Request(`http://localhost${path}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${apiKey}`,
            "content-type": "application/json",
            "idempotency-key": key,
          },
          body: JSON.stringify(body),
        }),
      );
    const calls = [
      ["/v1/embeddings", { model: "tollbooth/embed", input: ["one", "two"] }],
      ["/v1/responses", { model: "tollbooth/echo", input: "Hello there", store: false }],
    ] as const;
    for (const [path, body] of calls) {
      const first = await post(path, body, `key-${path}`);
      assert.equal(first.status, 200, path);
      const firstBody = await first.json();
      const again = await post(path, body, `key-${path}`);
      assert.equal(again.status, 200, path);
      assert.equal(again.headers.get("idempotent-replayed"), "true", path);
      assert.equal(
        again.headers.get("tollbooth-request-cost"),
        first.headers.get("tollbooth-request-cost"),
      );
      assert.deepEqual(await again.json(), firstBody);
    }
    await s.wallets.drain();
    const records = await usageRecords(s.kv, appId);
    assert.equal(records.length, 2, "one usage record per endpoint, not per attempt");
    const wallet = await s.wallet(appId);
    assert.equal(wallet.spent, records.reduce((n, r) => n + r.cost, 0));
    await assertAuditClean(s.kv);
  } finally {
    await s.close();
  }
});

Deno.test("the same key and body sent to another endpoint gets 422 idempotency_key_reused, never the first endpoint's answer", () =>
  withUpstream({}, async (s, upstream) => {
    const { appId, apiKey } = await s.newApp();
    const first = await s.chat(apiKey, request(), withKey("one-request"));
    assert.equal(first.status, 200);
    await first.body?.cancel();
    const before = await s.wallet(appId);
    const other = await s.post(apiKey, "/embeddings", request(), withKey("one-request"));
    assert.equal(other.status, 422);
    assert.equal(other.headers.get("idempotent-replayed"), null);
    const { error } = await other.json();
    assert.equal(error.code, "idempotency_key_reused");
    assert.match(error.message, /another endpoint \(POST \/v1\/chat\/completions\)/);
    assert.equal(upstream.calls, 1);
    assert.deepEqual(await s.wallet(appId), before);
  }));

Deno.test("a record from before endpoints were kept still replays a retry of the same body, until it expires", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const store = new IdempotencyStore(kv, { leaseMs: 1000 });
    const claim = await store.claim("app:x", "legacy", "h", "req_1", CHAT);
    assert.equal(claim.kind, "claimed");
    if (claim.kind !== "claimed") return;
    await store.complete("app:x", "legacy", claim, "req_1", "h", {
      status: 200,
      headers: {},
      body: new TextEncoder().encode("{}"),
    });
    // As an older version wrote it: no endpoint.
    const entry = await kv.get<Record<string, unknown>>(["idempotency", "app:x", "legacy"]);
    const { endpoint: _, ...legacy } = entry.value!;
    await kv.set(entry.key, legacy);
    assert.equal((await store.claim("app:x", "legacy", "h", "req_2", CHAT)).kind, "replay");
    assert.equal((await store.claim("app:x", "legacy", "other", "req_3", CHAT)).kind, "reused");
  } finally {
    kv.close();
  }
});
