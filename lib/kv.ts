export const DEFAULT_KV_PATH = "./data/tollbooth.sqlite3";

/**
 * Opens the KV store named by KV_PATH: a file, ":memory:", or a denokv URL (with
 * DENO_KV_ACCESS_TOKEN). Unset, it is the local file, except on Deno Deploy, where it is Deploy's KV.
 */
export async function openKv(path: string | undefined): Promise<Deno.Kv> {
  if (!path && Deno.env.get("DENO_DEPLOYMENT_ID")) return await Deno.openKv();
  const target = path || DEFAULT_KV_PATH;
  if (target !== ":memory:" && !/^https?:\/\//.test(target)) {
    const dir = target.replace(/[^/]*$/, "");
    if (dir) await Deno.mkdir(dir, { recursive: true });
  }
  return await Deno.openKv(target);
}
