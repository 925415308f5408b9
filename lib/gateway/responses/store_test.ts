import assert from "node:assert/strict";
import { MAX_STORED_RESPONSE_BYTES, ResponseStore, STORED_RESPONSE_TTL_MS } from "./store.ts";
import type { OutputItem } from "./response.ts";
import { keys, type StoredResponseRecord } from "@/lib/db.ts";

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

/** The bytes of the values `kv` read, by get and getMany, as `read.bytes`. */
function countingReads(kv: Deno.Kv, read: { bytes: number }): Deno.Kv {
  const count = (value: unknown) => {
    read.bytes += value instanceof Uint8Array
      ? value.byteLength
      : JSON.stringify(value ?? null).length;
  };
  return new Proxy(kv, {
    get(target, name) {
      if (name === "get") {
        return async (key: Deno.KvKey) => {
          const entry = await target.get(key);
          count(entry.value);
          return entry;
        };
      }
      if (name === "getMany") {
        return async (keys: Deno.KvKey[]) => {
          const entries = await target.getMany(keys);
          for (const entry of entries) count(entry.value);
          return entries;
        };
      }
      const value = Reflect.get(target, name);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

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
