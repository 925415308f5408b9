/**
 * A Deno.Kv that fails on purpose: every read (`get`, `getMany`, `list`) and every atomic commit is
 * a numbered step, and a plan decides for each step whether it runs, throws before touching the
 * store, or (commits only) is applied and then throws, as when a connection drops after the write.
 */
export type Step = "get" | "getMany" | "list" | "commit";
export type Fault = "ok" | "throw" | "throw_after_commit" | "busy";

export class InjectedKvError extends Error {}

export interface FaultyKv {
  kv: Deno.Kv;
  /** Steps taken so far, in order. */
  steps: Step[];
  /** Faults actually injected, in order. */
  injected: { step: Step; fault: Fault; index: number }[];
  /** `key`: a read's (the first of a getMany's). */
  plan: (step: Step, index: number, key?: Deno.KvKey) => Fault;
}

export function faultyKv(real: Deno.Kv, plan: FaultyKv["plan"] = () => "ok"): FaultyKv {
  const state: FaultyKv = { kv: real, steps: [], injected: [], plan };
  const decide = (step: Step, key?: Deno.KvKey): Fault => {
    const index = state.steps.length;
    state.steps.push(step);
    const fault = state.plan(step, index, key);
    if (fault !== "ok") state.injected.push({ step, fault, index });
    if (fault === "throw") throw new InjectedKvError(`injected ${step} failure at step ${index}`);
    if (fault === "busy") throw new TypeError("database is locked");
    return fault;
  };

  const wrapAtomic = (atomic: Deno.AtomicOperation): Deno.AtomicOperation => {
    // retryWhileBusy replaces an operation's commit with its own, which calls this one.
    let replaced: Deno.AtomicOperation["commit"] | undefined;
    const proxy: Deno.AtomicOperation = new Proxy(atomic, {
      set(target, name, value) {
        if (name !== "commit") return Reflect.set(target, name, value);
        replaced = value;
        return true;
      },
      get(target, name) {
        if (name === "commit" && replaced) return replaced;
        if (name === "commit") {
          return async () => {
            const fault = decide("commit");
            const result = await target.commit();
            if (fault === "throw_after_commit") {
              throw new InjectedKvError(`injected failure after commit (ok=${result.ok})`);
            }
            return result;
          };
        }
        const value = Reflect.get(target, name, target);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          const out = value.apply(target, args);
          return out === target ? proxy : out;
        };
      },
    });
    return proxy;
  };

  state.kv = new Proxy(real, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (typeof value !== "function") return value;
      switch (name) {
        case "get":
        case "getMany":
          return async (...args: unknown[]) => {
            decide(name, (name === "get" ? args[0] : (args[0] as Deno.KvKey[])[0]) as Deno.KvKey);
            return await value.apply(target, args);
          };
        case "list":
          return (...args: unknown[]) => {
            decide("list");
            return value.apply(target, args);
          };
        case "atomic":
          return () => wrapAtomic(target.atomic());
        default:
          return value.bind(target);
      }
    },
  });
  return state;
}
