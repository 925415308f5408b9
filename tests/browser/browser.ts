import { type Browser, chromium } from "playwright-core";
import { createReadStream, createWriteStream } from "node:fs";
import { pipeline } from "node:stream/promises";
import { brotliDecompressSync, createBrotliDecompress } from "node:zlib";

/** Where a chromium already on the machine usually lives, tried in order before the npm one. */
const SYSTEM_CHROMIUMS = [
  "/usr/bin/chromium",
  "/usr/bin/chromium-browser",
  "/usr/bin/google-chrome",
  "/usr/bin/google-chrome-stable",
  "/Applications/Chromium.app/Contents/MacOS/Chromium",
  "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
];

interface ChromiumLaunch {
  executablePath: string;
  source: "CHROMIUM_PATH" | "system" | "npm";
  /** Added to the browser's environment, not the test process's. */
  env?: Record<string, string>;
}

let found: Promise<ChromiumLaunch> | undefined;

/** The browser the tests drive: CHROMIUM_PATH, else a system chromium, else the npm one. */
function findChromium(): Promise<ChromiumLaunch> {
  found ??= locate();
  return found;
}

async function locate(): Promise<ChromiumLaunch> {
  const override = Deno.env.get("CHROMIUM_PATH");
  if (override) {
    // A path given on purpose that does not work is a mistake to report, not to route around.
    if (!isExecutable(override)) {
      throw new Error(`CHROMIUM_PATH=${override} is not an executable file`);
    }
    return { executablePath: override, source: "CHROMIUM_PATH" };
  }
  const system = SYSTEM_CHROMIUMS.find(isExecutable);
  if (system) return { executablePath: system, source: "system" };
  return await npmChromium();
}

function isExecutable(path: string): boolean {
  try {
    const info = Deno.statSync(path);
    return info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0;
  } catch {
    return false;
  }
}

/**
 * The chromium inside the npm package @sparticuz/chromium, unpacked once per package version into
 * the user's cache: no root, and nothing fetched from outside the npm registry.
 */
async function npmChromium(): Promise<ChromiumLaunch> {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") {
    throw new Error(
      `no chromium found, and the npm one is built for x86_64 Linux only (this is ` +
        `${Deno.build.arch} ${Deno.build.os}): set CHROMIUM_PATH to a Chromium or Chrome executable`,
    );
  }
  const packageDir = new URL("../", import.meta.resolve("@sparticuz/chromium"));
  const { version } = JSON.parse(
    await Deno.readTextFile(new URL("package.json", packageDir)).catch(() => {
      throw new Error("@sparticuz/chromium is not installed: run `deno install`");
    }),
  );
  const dir = `${cacheHome()}/tollbooth/chromium-${version}`;
  if (!isExecutable(`${dir}/chromium`)) await unpack(new URL("bin/", packageDir), dir);
  return {
    executablePath: `${dir}/chromium`,
    source: "npm",
    env: {
      // Built for Amazon Linux: these NSS and expat builds are its own, not whatever the host has.
      LD_LIBRARY_PATH: [`${dir}/lib`, Deno.env.get("LD_LIBRARY_PATH")].filter(Boolean).join(":"),
      FONTCONFIG_FILE: `${dir}/fonts.conf`,
    },
  };
}

function cacheHome(): string {
  const xdg = Deno.env.get("XDG_CACHE_HOME");
  if (xdg) return xdg;
  const home = Deno.env.get("HOME");
  if (!home) throw new Error("neither XDG_CACHE_HOME nor HOME is set: nowhere to cache chromium");
  return `${home}/.cache`;
}

/**
 * Test files start in parallel, each possibly finding the cache cold: each unpacks into its own
 * directory and renames it into place, so a reader sees either nothing or a whole browser.
 */
async function unpack(bin: URL, dir: string) {
  const parent = dir.slice(0, dir.lastIndexOf("/"));
  await Deno.mkdir(parent, { recursive: true });
  await removeAbandoned(parent);
  // Says why this first run is slower, and in CI's log which browser the tests used.
  console.error(`no chromium cached yet: unpacking @sparticuz/chromium into ${dir}`);
  const partial = await Deno.makeTempDir({ dir: parent, prefix: ".partial-" });
  try {
    await pipeline(
      createReadStream(new URL("chromium.br", bin)),
      createBrotliDecompress(),
      createWriteStream(`${partial}/chromium`, { mode: 0o755 }),
    );
    await extractTar(new URL("al2023.tar.br", bin), partial);
    await extractTar(new URL("fonts.tar.br", bin), partial);
    // The package's own fonts.conf names Lambda's directories; this one keeps the host's fonts
    // (a fresh machine may have none) and adds the bundled ones.
    await Deno.writeTextFile(
      `${partial}/fonts.conf`,
      `<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <dir>${dir}/fonts</dir>
</fontconfig>
`,
    );
    try {
      await Deno.rename(partial, dir);
    } catch (error) {
      // Another test file won the race; its copy is as good as this one.
      if (!isExecutable(`${dir}/chromium`)) throw error;
    }
  } finally {
    await Deno.remove(partial, { recursive: true }).catch(() => {});
  }
}

/** A run killed while unpacking leaves a 200 MB directory that nothing else would ever remove. */
async function removeAbandoned(parent: string) {
  const hourAgo = Date.now() - 3_600_000;
  for await (const entry of Deno.readDir(parent)) {
    if (!entry.name.startsWith(".partial-")) continue;
    const path = `${parent}/${entry.name}`;
    const info = await Deno.stat(path).catch(() => undefined);
    if (info?.mtime && info.mtime.getTime() < hourAgo) {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    }
  }
}

/** The package's small tarballs hold only plain files and directories (ustar). */
async function extractTar(file: URL, into: string) {
  const tar = brotliDecompressSync(await Deno.readFile(file));
  const text = (from: number, length: number, offset: number) =>
    new TextDecoder().decode(tar.subarray(offset + from, offset + from + length)).replace(
      /\0.*$/s,
      "",
    );
  let offset = 0;
  while (offset + 512 <= tar.length && tar[offset] !== 0) {
    const prefix = text(257, 6, offset).startsWith("ustar") ? text(345, 155, offset) : "";
    const name = (prefix ? `${prefix}/` : "") + text(0, 100, offset);
    const size = parseInt(text(124, 12, offset).trim() || "0", 8);
    const mode = parseInt(text(100, 8, offset).trim() || "644", 8);
    const type = String.fromCharCode(tar[offset + 156]);
    if (name.startsWith("/") || name.split("/").includes("..")) {
      throw new Error(`${file.pathname}: refusing entry ${name}`);
    }
    const path = `${into}/${name}`;
    const body = tar.subarray(offset + 512, offset + 512 + size);
    if (type === "5") {
      await Deno.mkdir(path, { recursive: true });
    } else if (type === "0" || type === "\0") {
      await Deno.mkdir(path.slice(0, path.lastIndexOf("/")), { recursive: true });
      await Deno.writeFile(path, body, { mode: mode & 0o777 });
    } else {
      throw new Error(`${file.pathname}: entry ${name} has unsupported tar type ${type}`);
    }
    offset += 512 + Math.ceil(size / 512) * 512;
  }
}

/**
 * A chromium, headless, without the background traffic a closed network refuses. `hostAliases`
 * resolve to loopback in this browser only: an alias is not localhost, so a page served on it over
 * plain http is not a secure context, as on an operator's plain-http host.
 */
export async function launchBrowser(
  { hostAliases = [] }: { hostAliases?: string[] } = {},
): Promise<Browser> {
  const { executablePath, source, env } = await findChromium();
  const launching = chromium.launch({
    executablePath,
    env: env ? { ...Deno.env.toObject(), ...env } : undefined,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      ...(hostAliases.length === 0
        ? []
        : [`--host-resolver-rules=${hostAliases.map((h) => `MAP ${h} 127.0.0.1`).join(",")}`]),
    ],
  });
  return await launching.catch((error) => {
    throw new Error(
      `chromium (${source}: ${executablePath}) did not start; ` +
        "CHROMIUM_PATH=/path/to/chromium picks another",
      { cause: error },
    );
  });
}

/** Where browser tests write screenshots for a reviewer (not committed). */
export const SCREENSHOT_DIR = new URL("../screenshots/", import.meta.url).pathname;
