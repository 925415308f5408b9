/** What the Responses tests share: a response's identity with item ids counted from 1. */
import { parseResponsesBody, type ResponsesBody } from "./request.ts";
import type { ResponseMeta } from "./response.ts";

export function testMeta(fields: Partial<ResponseMeta> = {}): ResponseMeta {
  let n = 0;
  return {
    id: "resp_test",
    createdAt: 1_741_290_958,
    model: "openai/gpt-4o-mini",
    store: true,
    previousResponseId: null,
    newItemId: (prefix) => `${prefix}_${++n}`,
    ...fields,
  };
}

/** A Responses body for the test model, with `fields` on top. */
export const testBody = (fields: Record<string, unknown> = {}): ResponsesBody =>
  parseResponsesBody({ model: "openai/gpt-4o-mini", input: "Hi", ...fields });

/** The bytes of the values `kv` read, by get and getMany, as `read.bytes`. */
export function countingReads(kv: Deno.Kv, read: { bytes: number }): Deno.Kv {
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
