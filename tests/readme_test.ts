import assert from "node:assert/strict";
import { ERROR_CODES } from "@/lib/core/mod.ts";
import { DOCS_PAGES } from "@/components/DocsLayout.tsx";

const readme = await Deno.readTextFile(new URL("../README.md", import.meta.url));

/** The README's section under `heading`, up to the next section of the same level. */
function section(heading: string): string {
  const part = readme.split(`\n${heading}\n`)[1];
  assert.ok(part !== undefined, `README has no section ${heading}`);
  return part.split("\n## ")[0];
}

Deno.test("the README's errors table lists every error code with its status", () => {
  const rows = new Map<string, string>();
  for (const line of section("## Errors").split("\n")) {
    const cells = line.split("|").map((cell) => cell.trim());
    const code = /^`([a-z_]+)`$/.exec(cells[2] ?? "")?.[1];
    if (code) rows.set(code, cells[1]);
  }
  for (const [code, { status }] of Object.entries(ERROR_CODES)) {
    assert.equal(rows.get(code), String(status), `${code} in the README's errors table`);
  }
  assert.deepEqual(
    [...rows.keys()].filter((c) => !(c in ERROR_CODES)),
    [],
    "codes that no longer exist",
  );
});

Deno.test("the README names every docs page the service serves", () => {
  const docs = section("## Docs and API description");
  for (const { href } of DOCS_PAGES) assert.ok(docs.includes(`\`${href}\``), href);
});
