/**
 * Stored responses (`store`, the Responses API's default): the conversation a response answered
 * and its output, kept in KV per app for `previous_response_id` and `item_reference`, for 30 days
 * as OpenAI keeps them. A body larger than a KV value is split into chunks; the head, written
 * last, makes it visible, so a half-written response is never read.
 */
import { ApiError, getManyChunked, KV_VALUE_CHUNK_BYTES as CHUNK_BYTES } from "@/lib/core/mod.ts";
import { keys, type StoredResponseItemRecord, type StoredResponseRecord } from "@/lib/db.ts";
import { MAX_REFERENCED_RESPONSES, type ResponseInputItem } from "./request.ts";
import type { OutputItem, ResponseObject } from "./response.ts";

export const STORED_RESPONSE_TTL_MS = 30 * 24 * 60 * 60 * 1000;
/** A larger response is answered but not stored (`store: false` in its object). */
export const MAX_STORED_RESPONSE_BYTES = 8 * 1024 * 1024;

/** Chunks per commit: well within a commit's size limit. */
const CHUNKS_PER_COMMIT = 10;

export interface StoredResponse {
  /** The chat messages the response answered, `instructions` aside, and its answer after them. */
  conversation: Record<string, unknown>[];
  output: OutputItem[];
  /**
   * The response object as it was answered, its output aside (that is `output`), and the input
   * items of its request as OpenAI lists them: for `GET /v1/responses/{id}` and its input_items.
   * Absent from responses stored before they were kept.
   */
  response?: Omit<ResponseObject, "output">;
  input?: StoredInputItem[];
}

/** An input item as `input_items` lists it: every item with an id. */
export type StoredInputItem = Record<string, unknown> & { id: string; type: string };

/**
 * A stored response's parts as written, each read without the others: the conversation is what
 * `previous_response_id` needs, and it can be megabytes (an image's bytes) for a few tokens.
 */
export interface EncodedResponse {
  /** The conversation and the output. */
  body: Uint8Array;
  /** The response object, output aside; null when there is none to keep. */
  object: Uint8Array | null;
  /** The input items (`encodeInput`); null when there are none to keep. */
  input: { bytes: Uint8Array; indexBytes: number } | null;
}

/**
 * A stored response's input items as `input_items` pages them: their ids, and a read of the items
 * from one index to another; `ids` is null for one stored before its input was kept.
 */
export type StoredInputList =
  | { ids: string[]; read(from: number, to: number): Promise<StoredInputItem[] | null> }
  | { ids: null };

/**
 * Input items as stored: the JSON of their ids and of where each item ends, then each item's
 * JSON, so that a page reads the ids and its own items, not an image of another item.
 */
function encodeInput(items: StoredInputItem[]): { bytes: Uint8Array; indexBytes: number } {
  const encoder = new TextEncoder();
  const texts = items.map((item) => encoder.encode(JSON.stringify(item)));
  let end = 0;
  const ends = texts.map((text) => (end += text.byteLength));
  const index = encoder.encode(JSON.stringify({ ids: items.map((item) => item.id), ends }));
  const bytes = new Uint8Array(index.byteLength + end);
  bytes.set(index);
  let at = index.byteLength;
  for (const text of texts) {
    bytes.set(text, at);
    at += text.byteLength;
  }
  return { bytes, indexBytes: index.byteLength };
}

export class ResponseStore {
  readonly #kv: Deno.Kv;
  readonly #now: () => number;

  constructor(kv: Deno.Kv, now: () => number = Date.now) {
    this.#kv = kv;
    this.#now = now;
  }

  /** Whether a response of this size is stored at all. */
  static fits(bytes: number): boolean {
    return bytes <= MAX_STORED_RESPONSE_BYTES;
  }

  /** The encoded parts, or null when together they are too large to store. */
  static encode(response: StoredResponse): EncodedResponse | null {
    const encoder = new TextEncoder();
    const { conversation, output } = response;
    const body = encoder.encode(JSON.stringify({ conversation, output }));
    const object = response.response ? encoder.encode(JSON.stringify(response.response)) : null;
    const input = response.input ? encodeInput(response.input) : null;
    const bytes = body.byteLength + (object?.byteLength ?? 0) + (input?.bytes.byteLength ?? 0);
    return ResponseStore.fits(bytes) ? { body, object, input } : null;
  }

  async save(
    appId: string,
    responseId: string,
    encoded: EncodedResponse,
    output: OutputItem[],
  ): Promise<void> {
    const createdAt = this.#now();
    const expiresAt = createdAt + STORED_RESPONSE_TTL_MS;
    const chunks = await this.#writeChunks(
      encoded.body,
      (i) => keys.storedResponseChunk(appId, responseId, i),
    );
    // The output apart from the conversation: a reference to one of its items reads what the
    // answer holds (paid for by its output tokens), not the conversation, which an image's bytes
    // make megabytes for a few tokens.
    const outputBody = new TextEncoder().encode(JSON.stringify(output));
    const outputChunks = await this.#writeChunks(
      outputBody,
      (i) => keys.storedResponseOutputChunk(appId, responseId, i),
    );
    // The object and the input apart too: reading one back reads what its answer holds, or what
    // its request sent, not the conversation before it.
    const object = encoded.object && {
      objectChunks: await this.#writeChunks(
        encoded.object,
        (i) => keys.storedResponseObjectChunk(appId, responseId, i),
      ),
      objectBytes: encoded.object.byteLength,
    };
    const input = encoded.input && {
      inputChunks: await this.#writeChunks(
        encoded.input.bytes,
        (i) => keys.storedResponseInputChunk(appId, responseId, i),
      ),
      inputBytes: encoded.input.bytes.byteLength,
      inputIndexBytes: encoded.input.indexBytes,
    };
    const head: StoredResponseRecord = {
      id: responseId,
      createdAt,
      expiresAt,
      chunks,
      bytes: encoded.body.byteLength,
      outputChunks,
      outputBytes: outputBody.byteLength,
      ...object,
      ...input,
    };
    const expireIn = STORED_RESPONSE_TTL_MS;
    const op = this.#kv.atomic().set(keys.storedResponse(appId, responseId), head, { expireIn });
    for (const item of output) {
      const entry: StoredResponseItemRecord = { responseId, expiresAt };
      op.set(keys.storedResponseItem(appId, item.id), entry, { expireIn });
    }
    await commit(op);
  }

  /** Writes `bytes` in chunks under `key`, some commits at a time; how many chunks. */
  async #writeChunks(bytes: Uint8Array, key: (index: number) => Deno.KvKey): Promise<number> {
    const expireIn = STORED_RESPONSE_TTL_MS;
    const chunks = Math.max(1, Math.ceil(bytes.byteLength / CHUNK_BYTES));
    for (let first = 0; first < chunks; first += CHUNKS_PER_COMMIT) {
      const op = this.#kv.atomic();
      for (let i = first; i < Math.min(chunks, first + CHUNKS_PER_COMMIT); i++) {
        op.set(key(i), bytes.subarray(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES), { expireIn });
      }
      await commit(op);
    }
    return chunks;
  }

  /** The JSON written in chunks under `key`, `bytes` long; null when a chunk is missing. */
  async #readJson(key: (index: number) => Deno.KvKey, bytes: number): Promise<unknown> {
    const body = await this.#readRange(key, 0, bytes);
    return body && JSON.parse(new TextDecoder().decode(body));
  }

  /** Bytes `from` to `to` (excluded) of what was written in chunks under `key`; null when gone. */
  async #readRange(
    key: (index: number) => Deno.KvKey,
    from: number,
    to: number,
  ): Promise<Uint8Array | null> {
    const bytes = new Uint8Array(to - from);
    const first = Math.floor(from / CHUNK_BYTES);
    const chunks = to > from ? Math.floor((to - 1) / CHUNK_BYTES) - first + 1 : 0;
    for (let done = 0; done < chunks; done += 10) {
      const batch = await this.#kv.getMany<Uint8Array[]>(
        Array.from({ length: Math.min(10, chunks - done) }, (_, j) => key(first + done + j)),
      );
      for (const [j, entry] of batch.entries()) {
        if (!entry.value) return null;
        const at = (first + done + j) * CHUNK_BYTES;
        bytes.set(
          entry.value.subarray(Math.max(0, from - at), Math.max(0, to - at)),
          Math.max(0, at - from),
        );
      }
    }
    return bytes;
  }

  /** The head of the app's stored response, or null when there is none (as for `load`). */
  async #head(appId: string, responseId: string) {
    const head = await this.#kv.get<StoredResponseRecord>(keys.storedResponse(appId, responseId));
    if (!head.value || head.value.deleted || head.value.expiresAt <= this.#now()) return null;
    return head.value;
  }

  /**
   * The app's stored response, or null when there is none (never stored, expired, deleted,
   * another app's). Its object and input are not in it when they were kept apart (`retrieve`,
   * `inputList`).
   */
  async load(appId: string, responseId: string): Promise<StoredResponse | null> {
    const head = await this.#head(appId, responseId);
    if (!head) return null;
    return await this.#body(appId, head);
  }

  /** The body of the stored response with this head, or null when it is gone. */
  async #body(appId: string, head: StoredResponseRecord): Promise<StoredResponse | null> {
    return await this.#readJson(
      (i) => keys.storedResponseChunk(appId, head.id, i),
      head.bytes,
    ) as StoredResponse | null;
  }

  /** The output items of the stored response with this head, or null when they are gone. */
  async #output(appId: string, head: StoredResponseRecord): Promise<OutputItem[] | null> {
    if (head.outputChunks === undefined || head.outputBytes === undefined) {
      return (await this.#body(appId, head))?.output ?? null;
    }
    return await this.#readJson(
      (i) => keys.storedResponseOutputChunk(appId, head.id, i),
      head.outputBytes,
    ) as OutputItem[] | null;
  }

  /**
   * The response object and output of the app's stored response, or null when there is none (as
   * for `load`); `response` is absent from one stored before its object was kept.
   */
  async retrieve(
    appId: string,
    responseId: string,
  ): Promise<Pick<StoredResponse, "response" | "output"> | null> {
    const head = await this.#head(appId, responseId);
    if (!head) return null;
    if (head.objectChunks === undefined || head.objectBytes === undefined) {
      const whole = await this.#body(appId, head);
      return whole && { response: whole.response, output: whole.output };
    }
    const response = await this.#readJson(
      (i) => keys.storedResponseObjectChunk(appId, responseId, i),
      head.objectBytes,
    ) as StoredResponse["response"] | null;
    const output = response && await this.#output(appId, head);
    return response && output ? { response, output } : null;
  }

  /** The input items of the app's stored response, or null when there is none (as for `load`). */
  async inputList(appId: string, responseId: string): Promise<StoredInputList | null> {
    const head = await this.#head(appId, responseId);
    if (!head) return null;
    const { inputChunks, inputIndexBytes } = head;
    if (inputChunks === undefined || inputIndexBytes === undefined) {
      const whole = await this.#body(appId, head);
      if (!whole) return null;
      const input = whole.input;
      if (input === undefined) return { ids: null };
      return {
        ids: input.map((item) => item.id),
        read: (from, to) => Promise.resolve(input.slice(from, to)),
      };
    }
    const key = (i: number) => keys.storedResponseInputChunk(appId, responseId, i);
    const decoder = new TextDecoder();
    const indexBytes = await this.#readRange(key, 0, inputIndexBytes);
    if (!indexBytes) return null;
    const { ids, ends } = JSON.parse(decoder.decode(indexBytes)) as {
      ids: string[];
      ends: number[];
    };
    const start = (i: number) => i === 0 ? 0 : ends[i - 1];
    return {
      ids,
      read: async (from, to) => {
        if (from >= to) return [];
        const first = start(from);
        const bytes = await this.#readRange(
          key,
          inputIndexBytes + first,
          inputIndexBytes + ends[to - 1],
        );
        if (!bytes) return null;
        return Array.from({ length: to - from }, (_, k) => {
          const item = bytes.subarray(start(from + k) - first, ends[from + k] - first);
          return JSON.parse(decoder.decode(item)) as StoredInputItem;
        });
      },
    };
  }

  /**
   * Deletes the app's stored response: its body and its items at once, a marker left in its place
   * until it would have expired. Whether there was one (a deleted one counts, so that deleting
   * twice answers alike); another app's is not there.
   */
  async delete(appId: string, responseId: string): Promise<boolean> {
    const key = keys.storedResponse(appId, responseId);
    for (let attempt = 0; attempt < 5; attempt++) {
      const head = await this.#kv.get<StoredResponseRecord>(key);
      const now = this.#now();
      if (!head.value || head.value.expiresAt <= now) return false;
      if (head.value.deleted) return true;
      const output = (await this.#output(appId, head.value)) ?? [];
      const marker: StoredResponseRecord = { ...head.value, chunks: 0, bytes: 0, deleted: true };
      // The marker first, checked: from then on nothing reads the body or its items.
      const marked = await this.#kv.atomic().check(head)
        .set(key, marker, { expireIn: head.value.expiresAt - now }).commit();
      if (!marked.ok) continue;
      const leftovers = [
        ...Array.from(
          { length: head.value.chunks },
          (_, i) => keys.storedResponseChunk(appId, responseId, i),
        ),
        ...Array.from(
          { length: head.value.outputChunks ?? 0 },
          (_, i) => keys.storedResponseOutputChunk(appId, responseId, i),
        ),
        ...Array.from(
          { length: head.value.objectChunks ?? 0 },
          (_, i) => keys.storedResponseObjectChunk(appId, responseId, i),
        ),
        ...Array.from(
          { length: head.value.inputChunks ?? 0 },
          (_, i) => keys.storedResponseInputChunk(appId, responseId, i),
        ),
        ...output.map((item) => keys.storedResponseItem(appId, item.id)),
      ];
      // What a crash here leaves expires with the response; nothing reads it meanwhile.
      for (let first = 0; first < leftovers.length; first += 500) {
        const op = this.#kv.atomic();
        for (const k of leftovers.slice(first, first + 500)) op.delete(k);
        await commit(op);
      }
      return true;
    }
    throw new Error("deleting a stored response lost its commit five times");
  }

  /** The stored output items of this app with these ids; ids not found are left out. */
  async items(appId: string, ids: string[]): Promise<Map<string, ResponseInputItem>> {
    const found = new Map<string, ResponseInputItem>();
    const byResponse = new Map<string, string[]>();
    const entries = await getManyChunked<StoredResponseItemRecord>(
      this.#kv,
      ids.map((id) => keys.storedResponseItem(appId, id)),
    );
    entries.forEach((entry, i) => {
      if (!entry.value || entry.value.expiresAt <= this.#now()) return;
      const list = byResponse.get(entry.value.responseId) ?? [];
      list.push(ids[i]);
      byResponse.set(entry.value.responseId, list);
    });
    if (byResponse.size > MAX_REFERENCED_RESPONSES) {
      throw new ApiError(
        "invalid_parameter",
        `Invalid value for 'input': its item_reference items point into more than ${MAX_REFERENCED_RESPONSES} stored responses.`,
        { param: "input" },
      );
    }
    for (const [responseId, wanted] of byResponse) {
      const head = await this.#head(appId, responseId);
      for (const item of (head && await this.#output(appId, head)) ?? []) {
        if (wanted.includes(item.id)) found.set(item.id, item as ResponseInputItem);
      }
    }
    return found;
  }
}

async function commit(op: Deno.AtomicOperation) {
  const result = await op.commit();
  if (!result.ok) throw new Error("storing a response failed its commit");
}
