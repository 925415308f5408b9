import assert from "node:assert/strict";

/**
 * The one stylesheet is plain CSS: every rule closes, and rules nest only inside at-rules such as
 * @media. (An unclosed rule silently turns every later one into a nested rule that matches nothing.)
 */
Deno.test("the stylesheet's rules all close and nest only inside at-rules", async () => {
  const css = (await Deno.readTextFile(new URL("../static/styles.css", import.meta.url)))
    .replace(/\/\*[\s\S]*?\*\//g, "");
  const open: string[] = [];
  let selector = "";
  for (const ch of css) {
    if (ch === "{") {
      const head = selector.trim();
      assert.ok(
        open.length === 0 || open.every((h) => h.startsWith("@")),
        `"${head}" is nested inside "${open.at(-1)}"`,
      );
      open.push(head);
      selector = "";
    } else if (ch === "}") {
      assert.ok(open.length > 0, "a closing brace without its rule");
      open.pop();
      selector = "";
    } else if (ch === ";") {
      selector = "";
    } else {
      selector += ch;
    }
  }
  assert.deepEqual(open, [], "every rule is closed");
});
