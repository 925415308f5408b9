/**
 * What a request reads of a stored response: what it needs, never the conversation the response
 * answered when it needs less, since an image's bytes make that megabytes for a few tokens.
 */
import assert from "node:assert/strict";
import { startService } from "./helpers.ts";
import { pngBase64 } from "./fakes/common.ts";
import { countingReads } from "@/lib/gateway/responses/test_support.ts";
import { KV_VALUE_CHUNK_BYTES } from "@/lib/core/mod.ts";

/** 3 MB of image for a handful of tokens: a PNG header (what the gateway reads of it) and more. */
const LARGE_IMAGE = `data:image/png;base64,${pngBase64(64, 64)}${"A".repeat(3_000_000)}`;

/** A service whose KV reads are counted, an app, and its stored response holding the image. */
async function withLargeStoredResponse(
  fn: (
    s: Awaited<ReturnType<typeof startService>>,
    apiKey: string,
    stored: { id: string },
    read: { bytes: number },
  ) => Promise<void>,
) {
  const read = { bytes: 0 };
  const s = await startService({ wrapKv: (kv) => countingReads(kv, read) });
  try {
    const { apiKey } = await s.newApp();
    const res = await s.post(apiKey, "/responses", {
      model: "tollbooth/echo",
      input: [{
        role: "user",
        content: [
          { type: "input_text", text: "What is this?" },
          { type: "input_image", image_url: LARGE_IMAGE },
        ],
      }],
      max_output_tokens: 16,
    });
    assert.equal(res.status, 200, await res.clone().text());
    const stored = await res.json();
    assert.equal(stored.store, true);
    read.bytes = 0;
    await fn(s, apiKey, stored, read);
  } finally {
    await s.close();
  }
}

Deno.test("GET /v1/responses/{id} reads the response object, not the conversation it answered", () =>
  withLargeStoredResponse(async (s, apiKey, stored, read) => {
    for (let i = 0; i < 2; i++) {
      read.bytes = 0;
      const res = await s.get(apiKey, `/responses/${stored.id}`, {
        template: "/responses/{response_id}",
      });
      assert.equal(res.status, 200);
      assert.equal((await res.json()).id, stored.id);
      assert.ok(read.bytes < 100_000, `read ${read.bytes} bytes for a short answer`);
    }
  }));

Deno.test("GET /v1/responses/{id}/input_items reads its request's input, not the conversation before it", () =>
  withLargeStoredResponse(async (s, apiKey, stored, read) => {
    const res = await s.post(apiKey, "/responses", {
      model: "tollbooth/echo",
      previous_response_id: stored.id,
      input: "And now?",
      max_output_tokens: 16,
    });
    assert.equal(res.status, 200, await res.clone().text());
    const next = await res.json();
    read.bytes = 0;
    const items = await s.get(apiKey, `/responses/${next.id}/input_items?limit=1`, {
      template: "/responses/{response_id}/input_items",
    });
    assert.equal(items.status, 200);
    assert.equal((await items.json()).data.length, 1);
    assert.ok(read.bytes < 100_000, `read ${read.bytes} bytes for one short input item`);
  }));

Deno.test("a previous_response_id request refused for its own fields is refused before the conversation is read", () =>
  withLargeStoredResponse(async (s, apiKey, stored, read) => {
    const refusals = [
      [{ model: "tollbooth/echo", tool_choice: "required" }, 400, "tool_choice"],
      [{ model: "nowhere/model" }, 400, "model"],
      [{ model: "tollbooth/embed" }, 400, "model"],
    ] as const;
    for (const [fields, status, param] of refusals) {
      read.bytes = 0;
      const res = await s.post(apiKey, "/responses", {
        previous_response_id: stored.id,
        input: "And now?",
        ...fields,
      });
      const body = await res.json();
      assert.equal(res.status, status, JSON.stringify(body));
      assert.equal(body.error.param, param);
      assert.ok(read.bytes < 100_000, `read ${read.bytes} bytes for a ${status} on '${param}'`);
    }
  }));

Deno.test("a page of GET /v1/responses/{id}/input_items reads its own items, not another item's image", () =>
  withLargeStoredResponse(async (s, apiKey, _stored, read) => {
    const res = await s.post(apiKey, "/responses", {
      model: "tollbooth/echo",
      input: [
        { role: "user", content: "Here it is." },
        { role: "user", content: [{ type: "input_image", image_url: LARGE_IMAGE }] },
        { role: "user", content: "What is it?" },
      ],
      max_output_tokens: 16,
    });
    assert.equal(res.status, 200, await res.clone().text());
    const { id } = await res.json();
    const page = async (query: string) => {
      read.bytes = 0;
      const items = await s.get(apiKey, `/responses/${id}/input_items?${query}`, {
        template: "/responses/{response_id}/input_items",
      });
      assert.equal(items.status, 200);
      return { ...await items.json(), read: read.bytes };
    };
    // A page reads KV chunks (60 KB) whole: the ids' and its items', a few at most.
    const few = 4 * KV_VALUE_CHUNK_BYTES;
    const all = await page("order=asc");
    assert.equal(all.data.length, 3);
    assert.ok(all.read > 3_000_000, "the page with the image reads it");
    const last = await page("limit=1");
    assert.deepEqual(last.data, [all.data[2]]);
    assert.equal(last.has_more, true);
    assert.ok(last.read < few, `read ${last.read} bytes for one short item`);
    const first = await page(`order=asc&limit=1`);
    assert.deepEqual(first.data, [all.data[0]]);
    assert.ok(first.read < few, `read ${first.read} bytes for one short item`);
    const after = await page(`order=desc&after=${all.data[1].id}`);
    assert.deepEqual(after.data, [all.data[0]]);
    assert.equal(after.has_more, false);
    assert.ok(after.read < few, `read ${after.read} bytes for one short item`);
  }));
