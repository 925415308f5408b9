import assert from "node:assert/strict";
import { ENTRIES, findCycles, importGraph, wrongWay } from "@/scripts/check_imports.ts";

Deno.test("the project's modules import each other without a cycle, type imports included", async () => {
  const edges = await importGraph(ENTRIES);
  assert.ok(edges.size > 50, `the graph was read (${edges.size} modules)`);
  assert.deepEqual(findCycles(edges).map((c) => c.join(" -> ")), []);
});

Deno.test("imports point one way: routes -> lib areas (through mod.ts) -> core", async () => {
  assert.deepEqual(wrongWay(await importGraph(ENTRIES)), []);
});

Deno.test("the checker sees a cycle and a wrong-way import when there is one", () => {
  const edges = new Map([
    ["lib/core/money.ts", new Set(["lib/billing/wallet.ts"])],
    ["lib/billing/wallet.ts", new Set(["lib/core/money.ts"])],
    ["routes/x.ts", new Set(["lib/billing/wallet.ts"])],
  ]);
  assert.equal(findCycles(edges).length, 1);
  assert.deepEqual(wrongWay(edges), [
    "lib/core/money.ts -> lib/billing/wallet.ts: core may not depend on billing",
    "routes/x.ts -> lib/billing/wallet.ts: routes and components use an area's mod.ts",
  ]);
});
