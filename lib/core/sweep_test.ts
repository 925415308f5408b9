import assert from "node:assert/strict";
import { Sweep } from "./sweep.ts";
import { sleep, until } from "../../tests/fakes/common.ts";

Deno.test("a sweep visits what it watches until the visit says it is done, then forgets it", async () => {
  const visits = new Map<string, number>();
  const sweep = new Sweep<string>((item) => {
    const n = (visits.get(item) ?? 0) + 1;
    visits.set(item, n);
    return n >= 2;
  });
  sweep.watch("a", 10);
  assert.ok(sweep.has("a"));
  await until(() => sweep.size === 0, "the item to be done with");
  await sleep(30);
  assert.equal(visits.get("a"), 2, "visited until done, then no more");
});

Deno.test("a forgotten item is not visited", async () => {
  const visited: string[] = [];
  const sweep = new Sweep<string>((item) => (visited.push(item), false));
  sweep.watch("kept", 10);
  sweep.watch("gone", 10);
  sweep.forget("gone");
  await until(() => visited.includes("kept"), "a visit of the kept item");
  sweep.forget("kept");
  assert.ok(!visited.includes("gone"));
});

Deno.test("a sweep runs at the shortest period asked for", async () => {
  let quick = 0;
  const sweep = new Sweep<string>((item) => {
    if (item === "quick") quick++;
    return false;
  });
  sweep.watch("slow", 1_000);
  sweep.watch("quick", 10);
  // At the slow period alone, three visits would take three seconds.
  await until(() => quick >= 3, "three visits at the quick period");
  sweep.forget("slow");
  sweep.forget("quick");
});

Deno.test("a visit that throws drops its own item only, and the sweep goes on", async () => {
  const errors: unknown[] = [];
  const error = console.error;
  console.error = (...args: unknown[]) => errors.push(args);
  let fine = 0;
  const sweep = new Sweep<string>((item) => {
    if (item === "broken") throw new Error("broken check");
    fine++;
    return fine >= 2;
  });
  try {
    sweep.watch("broken", 10);
    sweep.watch("fine", 10);
    await until(() => sweep.size === 0, "both items to leave the watch");
  } finally {
    console.error = error;
  }
  assert.equal(errors.length, 1);
  assert.equal(fine, 2);
  assert.equal(sweep.size, 0);
});
