/**
 * Fails when the project's modules import each other in a cycle, or when an import goes against the
 * house's direction (routes → lib areas → core). Reads the graph from `deno info --json`, type
 * imports included, so it sees what a reader of the code sees.
 */
const ROOT = new URL("../", import.meta.url);
const rootPath = decodeURIComponent(ROOT.pathname);

/** Each lib area, and the areas it may import from (besides itself and core). */
export const AREA_DEPENDENCIES: Record<string, string[]> = {
  core: [],
  db: ["core"],
  catalog: ["core"],
  tenants: ["db"],
  accounts: ["db"],
  billing: ["db", "tenants"],
  payments: ["db", "tenants", "billing", "accounts"],
  gateway: ["db", "tenants", "billing", "catalog"],
  ops: ["db", "tenants", "billing", "catalog", "gateway"],
  idempotency: ["db"],
  management: ["db"],
  webhooks: ["db"],
};

function areaOf(path: string): string | null {
  const m = /^lib\/([^/.]+)(?:\/|\.ts$)/.exec(path);
  return m ? m[1] : null;
}

export async function importGraph(entries: string[]) {
  const edges = new Map<string, Set<string>>();
  for (const entry of entries) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", entry],
      cwd: rootPath,
      stdout: "piped",
      stderr: "inherit",
    }).output();
    const info = JSON.parse(new TextDecoder().decode(out.stdout));
    for (const mod of info.modules ?? []) {
      if (!mod.specifier?.startsWith("file://")) continue;
      const from = local(mod.specifier);
      if (!from) continue;
      const set = edges.get(from) ?? new Set();
      for (const dep of mod.dependencies ?? []) {
        for (const side of [dep.code, dep.type]) {
          const to = side?.specifier && local(side.specifier);
          if (to) set.add(to);
        }
      }
      edges.set(from, set);
    }
  }
  return edges;
}

function local(specifier: string): string | null {
  if (!specifier.startsWith("file://")) return null;
  const path = decodeURIComponent(new URL(specifier).pathname);
  if (!path.startsWith(rootPath) || path.includes("/node_modules/")) return null;
  return path.slice(rootPath.length);
}

export function findCycles(edges: Map<string, Set<string>>): string[][] {
  const cycles: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, "open");
    stack.push(node);
    for (const next of edges.get(node) ?? []) {
      if (state.get(next) === "open") cycles.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of edges.keys()) if (!state.has(node)) visit(node);
  return cycles;
}

export function wrongWay(edges: Map<string, Set<string>>): string[] {
  const problems: string[] = [];
  for (const [from, tos] of edges) {
    const fromArea = areaOf(from);
    for (const to of tos) {
      const toArea = areaOf(to);
      if (from.startsWith("lib/") && !to.startsWith("lib/")) {
        problems.push(`${from} -> ${to}: lib/ imports nothing outside lib/`);
      } else if (fromArea && toArea && fromArea !== toArea && toArea !== "core") {
        if (!AREA_DEPENDENCIES[fromArea]?.includes(toArea)) {
          problems.push(`${from} -> ${to}: ${fromArea} may not depend on ${toArea}`);
        }
      } else if (
        (from.startsWith("routes/") || from.startsWith("components/")) && toArea &&
        toArea !== "db" && !/^lib\/[^/]+\/mod\.ts$/.test(to)
      ) {
        problems.push(`${from} -> ${to}: routes and components use an area's mod.ts`);
      } else if (from.startsWith("components/") && to.startsWith("routes/")) {
        problems.push(`${from} -> ${to}: components do not import routes`);
      }
    }
  }
  return problems;
}

/** Every entry point of the service and its tools. */
export const ENTRIES = ["main.ts", "worker.ts", "scripts/admin.ts", "islands/client.ts"];

if (import.meta.main) {
  const edges = await importGraph(ENTRIES);
  const cycles = findCycles(edges);
  const problems = wrongWay(edges);
  for (const c of cycles) console.error(`cycle: ${c.join(" -> ")}`);
  for (const p of problems) console.error(`direction: ${p}`);
  console.log(
    `${edges.size} modules, ${cycles.length} cycles, ${problems.length} wrong-way imports`,
  );
  if (cycles.length || problems.length) Deno.exit(1);
}
