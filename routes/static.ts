import type { Context } from "hono";

const TYPES: Record<string, string> = {
  css: "text/css; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  svg: "image/svg+xml",
  png: "image/png",
  ico: "image/x-icon",
};

/**
 * Serves files under `root` (the stylesheet, the icon and the islands bundle), read once and kept
 * in memory; with `file`, that one file whatever the path (a well-known name like /favicon.ico).
 */
export function serveStatic(root: URL, options: { file?: string } = {}) {
  const cache = new Map<string, Uint8Array<ArrayBuffer>>();
  return async (c: Context) => {
    const relative = options.file ?? c.req.path.replace(/^\/static\//, "");
    const ext = relative.split(".").pop() ?? "";
    if (!/^[a-z0-9_\-/]+\.[a-z0-9]+$/i.test(relative) || relative.includes("..") || !TYPES[ext]) {
      return c.notFound();
    }
    let body = cache.get(relative);
    if (!body) {
      try {
        body = await Deno.readFile(new URL(relative, root));
      } catch {
        return c.notFound();
      }
      cache.set(relative, body);
    }
    c.header("Cache-Control", "public, max-age=300");
    return c.body(body, 200, { "Content-Type": TYPES[ext] });
  };
}
