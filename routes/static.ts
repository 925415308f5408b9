import type { Context } from "hono";

const TYPES: Record<string, string> = {
  css: "text/css; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  svg: "image/svg+xml",
  png: "image/png",
  ico: "image/x-icon",
};

const FILE_PATH = /^(?:[a-z0-9_-]+\/)*[a-z0-9_-]+\.[a-z0-9]+$/i;

/**
 * Serves files under `root` (the stylesheet, the icon and the islands bundle), read once and kept
 * in memory; with `file`, that one file whatever the path (a well-known name like /favicon.ico).
 */
export function serveStatic(root: URL, options: { file?: string } = {}) {
  const cache = new Map<string, Uint8Array<ArrayBuffer>>();
  return async (c: Context) => {
    const relative = options.file ?? c.req.path.replace(/^\/static\//, "");
    const ext = relative.split(".").pop() ?? "";
    // Names and folders below root only: a path led by a slash would resolve from the disk's root.
    if (!FILE_PATH.test(relative) || !TYPES[ext]) return c.notFound();
    const file = new URL(relative, root);
    if (!file.href.startsWith(root.href)) return c.notFound();
    let body = cache.get(relative);
    if (!body) {
      try {
        body = await Deno.readFile(file);
      } catch {
        return c.notFound();
      }
      cache.set(relative, body);
    }
    c.header("Cache-Control", "public, max-age=300");
    return c.body(body, 200, { "Content-Type": TYPES[ext] });
  };
}
