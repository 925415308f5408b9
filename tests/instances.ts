/**
 * Real Tollbooth processes (`deno run -A main.ts`) for tests of what only a process shows: several
 * instances on one KV file, signals and shutdown. Each listens on a random loopback port.
 */
import type { CatalogFile } from "@/lib/catalog/catalog.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** A simulator model at prices that make a few requests add up: for money checks across instances. */
export const PRICEY = {
  id: "tollbooth/pricey",
  provider: "tollbooth",
  upstream_model: "lorem",
  input_usd_per_mtok: "100",
  output_usd_per_mtok: "1000",
  context_tokens: 32768,
  max_output_tokens: 8192,
};

export interface Instance {
  url: string;
  port: number;
  /** The process id, for reading the process's memory from /proc. */
  pid: number;
  /** Every JSON line the process wrote on stdout so far. */
  lines: Record<string, unknown>[];
  stderr(): string;
  signal(signal: Deno.Signal): void;
  status: Promise<Deno.CommandStatus>;
  /** SIGTERM, then waits for the exit (or kills after 15 s). */
  stop(): Promise<Deno.CommandStatus>;
}

/** A temp dir with a KV file path and a catalog whose simulator answers at the given pace. */
export async function instanceFiles(
  options: { tokenDelayMs?: number; models?: CatalogFile["models"] } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "tollbooth-instances-" });
  const catalog: CatalogFile = {
    providers: { tollbooth: { kind: "simulator", token_delay_ms: options.tokenDelayMs ?? 0 } },
    models: options.models ?? [
      {
        id: "tollbooth/echo",
        provider: "tollbooth",
        upstream_model: "echo",
        input_usd_per_mtok: "0.50",
        output_usd_per_mtok: "1.50",
        context_tokens: 32768,
        max_output_tokens: 8192,
      },
      {
        id: "tollbooth/lorem",
        provider: "tollbooth",
        upstream_model: "lorem",
        input_usd_per_mtok: "0.50",
        output_usd_per_mtok: "1.50",
        context_tokens: 32768,
        max_output_tokens: 8192,
      },
    ],
  };
  const modelsFile = `${dir}/models.json`;
  await Deno.writeTextFile(modelsFile, JSON.stringify(catalog));
  return {
    dir,
    kvPath: `${dir}/kv.sqlite3`,
    modelsFile,
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}

/** Starts `deno run -A main.ts`, or the deno command given (such as `["task", "dev"]`). */
export async function startInstance(
  env: Record<string, string>,
  command: string[] = ["run", "-A", "main.ts"],
): Promise<Instance> {
  const child = new Deno.Command(Deno.execPath(), {
    args: command,
    cwd: ROOT,
    // One worker unless a test asks for more: tests that count a process's slices or lines would
    // otherwise depend on how many cores the machine has.
    env: { PORT: "0", PUBLIC_URL: "http://tollbooth.test", SERVE_WORKERS: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: Record<string, unknown>[] = [];
  let errText = "";
  const listening = Promise.withResolvers<number>();
  (async () => {
    let buffered = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      buffered += text;
      let nl;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        try {
          const parsed = JSON.parse(line);
          lines.push(parsed);
          if (parsed.event === "listening") listening.resolve(parsed.port);
        } catch {
          lines.push({ raw: line });
        }
      }
    }
  })();
  (async () => {
    for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) errText += text;
  })();
  const status = child.status;
  status.then((s) => listening.reject(new Error(`instance exited (${s.code}): ${errText}`)));
  const port = await listening.promise;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    lines,
    stderr: () => errText,
    signal: (signal) => child.kill(signal),
    status,
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch {
        // already exited
      }
      const timer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch {
          // already exited
        }
      }, 15_000);
      try {
        return await status;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

export function chat(instance: Instance, apiKey: string, body: unknown) {
  return fetch(`${instance.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
}

/** Runs `deno task admin` on a KV file and returns its exit code and JSON output. */
export async function admin(kvPath: string, ...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "admin", ...args],
    cwd: ROOT,
    env: { KV_PATH: kvPath, PUBLIC_URL: "http://tollbooth.test" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  return {
    code: out.code,
    output: text.trim() ? JSON.parse(text) : null,
    stderr: new TextDecoder().decode(out.stderr),
  };
}
