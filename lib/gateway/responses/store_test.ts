import assert from "node:assert/strict";
import {
  MAX_STORED_RESPONSE_BYTES,
  ResponseStore,
  STORED_RESPONSE_TTL_MS,
  type StoredResponse,
} from "./store.ts";
import type { OutputItem } from "./response.ts";
import { keys, type StoredResponseRecord } from "@/lib/db.ts";
import { countingReads } from "./test_support.ts";

const message = (id: string, text: string): OutputItem => ({
  type: "message",
  id,
  status: "completed",
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [], logprobs: [] }],
});

async function withStore(fn: (store: ResponseStore, clock: { now: number }) => Promise<void>) {
  const kv = await Deno.openKv(":memory:");
  const clock = { now: 1_000_000 };
  try {
    await fn(new ResponseStore(kv, () => clock.now), clock);
  } finally {
    kv.close();
  }
}

Deno.test("a stored response larger than a KV value comes back whole from its chunks", () =>
  withStore(async (store) => {
    const long = "word ".repeat(100_000); // 500 KB, nine chunks
    const output = [message("msg_1", long)];
    const body = ResponseStore.encode({ conversation: [{ role: "user", content: long }], output })!;
    await store.save("app_a", "resp_1", body, output);
    const loaded = await store.load("app_a", "resp_1");
    assert.equal((loaded!.conversation[0] as { content: string }).content, long);
    assert.deepEqual(loaded!.output, output);
  }));

Deno.test("a stored response is the app's own, and gone after 30 days", () =>
  withStore(async (store, clock) => {
    const output = [message("msg_1", "hi")];
    await store.save(
      "app_a",
      "resp_1",
      ResponseStore.encode({ conversation: [], output })!,
      output,
    );
    assert.equal(await store.load("app_b", "resp_1"), null);
    assert.ok(await store.load("app_a", "resp_1"));
    clock.now += STORED_RESPONSE_TTL_MS;
    assert.equal(await store.load("app_a", "resp_1"), null);
    assert.equal((await store.items("app_a", ["msg_1"])).size, 0);
  }));

Deno.test("output items are found by id across stored responses; unknown ids are left out", () =>
  withStore(async (store) => {
    for (const [response, item] of [["resp_1", "msg_1"], ["resp_2", "msg_2"]]) {
      const output = [message(item, item)];
      await store.save(
        "app_a",
        response,
        ResponseStore.encode({ conversation: [], output })!,
        output,
      );
    }
    const found = await store.items("app_a", ["msg_2", "msg_x", "msg_1"]);
    assert.deepEqual([...found.keys()].sort(), ["msg_1", "msg_2"]);
    assert.equal((await store.items("app_b", ["msg_1"])).size, 0);
  }));

Deno.test("a response over the size limit is not stored", () => {
  const huge = "x".repeat(MAX_STORED_RESPONSE_BYTES);
  assert.equal(ResponseStore.encode({ conversation: [{ content: huge }], output: [] }), null);
});

Deno.test("a deleted response is gone with its items; deleting again answers alike; another app's is not found", () =>
  withStore(async (store, clock) => {
    const long = "word ".repeat(30_000); // three chunks
    const output = [message("msg_1", long)];
    await store.save(
      "app_a",
      "resp_1",
      ResponseStore.encode({ conversation: [], output })!,
      output,
    );
    assert.equal(await store.delete("app_b", "resp_1"), false);
    assert.ok(await store.load("app_a", "resp_1"));
    assert.equal(await store.delete("app_a", "resp_1"), true);
    assert.equal(await store.load("app_a", "resp_1"), null);
    assert.equal((await store.items("app_a", ["msg_1"])).size, 0);
    assert.equal(await store.delete("app_a", "resp_1"), true, "deleting again answers alike");
    assert.equal(await store.delete("app_a", "resp_never"), false);
    clock.now += STORED_RESPONSE_TTL_MS;
    assert.equal(await store.delete("app_a", "resp_1"), false, "the marker expires with it");
  }));

Deno.test("an item reference reads the stored output it names, not the conversation its response answered", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const read = { bytes: 0 };
    const store = new ResponseStore(countingReads(kv, read));
    // A large conversation (an image's bytes cost few tokens) and a short answer: 32 references
    // each read whole made a 2 KB request read 250 MB before anything was reserved.
    const conversation = [{ role: "user", content: "x".repeat(3_000_000) }];
    const output = [message("msg_1", "Short.")];
    await store.save("app_a", "resp_1", ResponseStore.encode({ conversation, output })!, output);
    read.bytes = 0;
    const found = await store.items("app_a", ["msg_1"]);
    assert.deepEqual(found.get("msg_1"), output[0]);
    assert.ok(read.bytes < 10_000, `read ${read.bytes} bytes for one short item`);
    assert.equal(
      ((await store.load("app_a", "resp_1"))!.conversation[0] as { content: string }).content
        .length,
      3_000_000,
    );
  } finally {
    kv.close();
  }
});

Deno.test("the items of a response stored before its output was kept apart are still found, and deleted with it", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const store = new ResponseStore(kv);
    const output = [message("msg_1", "Old.")];
    await store.save(
      "app_a",
      "resp_1",
      ResponseStore.encode({ conversation: [], output })!,
      output,
    );
    // Its head as such a response's was: without the output's chunks.
    const key = keys.storedResponse("app_a", "resp_1");
    const { outputChunks: _, outputBytes: __, ...old } = (await kv.get<StoredResponseRecord>(key))
      .value!;
    await kv.set(key, old);
    await kv.delete(keys.storedResponseOutputChunk("app_a", "resp_1", 0));
    assert.deepEqual((await store.items("app_a", ["msg_1"])).get("msg_1"), output[0]);
    assert.equal(await store.delete("app_a", "resp_1"), true);
    assert.equal((await store.items("app_a", ["msg_1"])).size, 0);
  } finally {
    kv.close();
  }
});

/** A response as `Responses` stores it: a large conversation before a short request and answer. */
function answered(conversationBytes: number) {
  const output = [message("msg_1", "Short.")];
  const response = {
    id: "resp_1",
    object: "response",
    created_at: 1,
    status: "completed",
  } as unknown as StoredResponse["response"];
  const input = [{
    id: "msg_0",
    type: "message",
    role: "user",
    content: [{ type: "input_text", text: "And?" }],
  }];
  const conversation = [{ role: "user", content: "x".repeat(conversationBytes) }];
  return { conversation, output, response, input };
}

/** The whole input list of app_a's stored response, null when there is none. */
async function listed(store: ResponseStore, responseId: string) {
  const list = await store.inputList("app_a", responseId);
  return list?.ids ? await list.read(0, list.ids.length) : list && "not kept";
}

Deno.test("any run of stored input items reads back as they were listed, across chunks", () =>
  withStore(async (store) => {
    // Items of a few bytes to several chunks, so that runs begin and end inside chunks.
    const input = [5, 70_000, 10, 200_000, 1, 64_000, 3].map((length, i) => ({
      id: `msg_${i}`,
      type: "message",
      role: "user",
      content: [{ type: "input_text", text: "é".repeat(length) }],
    }));
    const stored = { ...answered(10), input };
    await store.save("app_a", "resp_1", ResponseStore.encode(stored)!, stored.output);
    const list = await store.inputList("app_a", "resp_1");
    assert.ok(list?.ids);
    assert.deepEqual(list.ids, input.map((item) => item.id));
    for (let from = 0; from <= input.length; from++) {
      for (let to = from; to <= input.length; to++) {
        assert.deepEqual(await list.read(from, to), input.slice(from, to), `${from} to ${to}`);
      }
    }
  }));

Deno.test("a response stored with its object and input in its body is still read back, and deleted whole", () =>
  withStore(async (store) => {
    const stored = answered(100);
    // As such a response was written: one body holding them all, nothing kept apart.
    const body = new TextEncoder().encode(JSON.stringify(stored));
    await store.save("app_a", "resp_1", { body, object: null, input: null }, stored.output);
    assert.deepEqual(await store.retrieve("app_a", "resp_1"), {
      response: stored.response,
      output: stored.output,
    });
    assert.deepEqual(await listed(store, "resp_1"), stored.input);
    assert.equal(await store.delete("app_a", "resp_1"), true);
    assert.equal(await store.retrieve("app_a", "resp_1"), null);
    assert.equal(await listed(store, "resp_1"), null);
  }));

Deno.test("a deleted response's object and input are deleted with it", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const store = new ResponseStore(kv);
    const stored = answered(100);
    await store.save("app_a", "resp_1", ResponseStore.encode(stored)!, stored.output);
    const left = async () =>
      (await Array.fromAsync(kv.list({ prefix: [] }))).map((entry) => entry.key[0]);
    assert.ok((await left()).includes("stored_response_object_chunks"));
    assert.ok((await left()).includes("stored_response_input_chunks"));
    assert.equal(await store.delete("app_a", "resp_1"), true);
    assert.deepEqual(await left(), ["stored_responses"], "the marker alone");
  } finally {
    kv.close();
  }
});

Deno.test("a response whose object and input with its conversation are over the size limit is not stored", () => {
  const stored = answered(MAX_STORED_RESPONSE_BYTES / 2);
  stored.input[0].content[0].text = "y".repeat(MAX_STORED_RESPONSE_BYTES / 2);
  assert.equal(ResponseStore.encode(stored), null);
});
