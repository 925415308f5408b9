/**
 * What an operator sees when Tollbooth cannot start: one line on stderr naming what is wrong, exit
 * code 1, and no stack trace, whether one thread serves the port or a pool of workers does.
 */
import assert from "node:assert/strict";
import { instanceFiles } from "./instances.ts";

const MAIN = new URL("../main.ts", import.meta.url).pathname;

async function start(env: Record<string, string>) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", MAIN],
    env: { PORT: "0", PUBLIC_URL: "http://tollbooth.test", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

/** Exit 1 and a single line of stderr: "Tollbooth cannot start: …" matching `what`. */
function assertRefused(out: { code: number; stderr: string }, what: RegExp, label: string) {
  assert.equal(out.code, 1, `${label}: ${out.stderr}`);
  const lines = out.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `${label}: one line, no stack trace: ${out.stderr}`);
  assert.match(lines[0], /^Tollbooth cannot start: /, label);
  assert.match(lines[0], what, label);
}

for (const workers of ["1", "2"]) {
  Deno.test(`a KV_PATH that cannot be opened stops the start with one line naming it (SERVE_WORKERS=${workers})`, async () => {
    const files = await instanceFiles();
    try {
      // A directory where the KV file should be.
      const out = await start({
        KV_PATH: files.dir,
        MODELS_FILE: files.modelsFile,
        SERVE_WORKERS: workers,
      });
      assertRefused(out, new RegExp(`KV_PATH ${files.dir} cannot be opened`), workers);
    } finally {
      await files.remove();
    }
  });
}

// Workers share the port by SO_REUSEPORT: with REUSE_PORT=on each of them finds it taken.
const PORT_SETTINGS: Record<string, string>[] = [
  { SERVE_WORKERS: "1" },
  { SERVE_WORKERS: "2" },
  { SERVE_WORKERS: "2", REUSE_PORT: "on" },
];
for (const env of PORT_SETTINGS) {
  const label = Object.entries(env).map(([k, v]) => `${k}=${v}`).join(" ");
  Deno.test(`a PORT another process listens on stops the start with one line naming it (${label})`, async () => {
    const files = await instanceFiles();
    const taken = Deno.listen({ hostname: "0.0.0.0", port: 0 });
    try {
      const out = await start({
        PORT: String(taken.addr.port),
        KV_PATH: files.kvPath,
        MODELS_FILE: files.modelsFile,
        ...env,
      });
      assertRefused(out, new RegExp(`port ${taken.addr.port}\\b.* in use`, "i"), label);
    } finally {
      taken.close();
      await files.remove();
    }
  });
}

Deno.test("a denokv KV_PATH without DENO_KV_ACCESS_TOKEN stops the start with one line naming both", async () => {
  const out = await start({ KV_PATH: "http://127.0.0.1:9", SERVE_WORKERS: "1" });
  assertRefused(out, /KV_PATH is a denokv URL: set DENO_KV_ACCESS_TOKEN/, "denokv");
});
