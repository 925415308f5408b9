import assert from "node:assert/strict";
import { admin, chat, startInstance } from "./instances.ts";
import { until } from "./helpers.ts";

/**
 * The README's first command, run as a newcomer would: `deno task dev` with no keys and no setup
 * (only a free port and a scratch KV file, so the test leaves ./data alone). The built-in simulator
 * answers a paid request and the wallet moves by exactly the reported cost.
 */
Deno.test("deno task dev starts the service with no keys and no setup, and a paid request works", async () => {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const dev = await startInstance({ KV_PATH: kvPath }, ["task", "dev"]);
  try {
    const created = await admin(kvPath, "create-app", "--name", "demo");
    assert.equal(created.code, 0);
    assert.equal(created.output.balance, "5.000000");
    const res = await chat(dev, created.output.api_key, {
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "Hi" }],
    });
    assert.equal(res.status, 200);
    assert.equal((await res.json()).choices[0].message.content, "Hi");
    const cost = Math.round(Number(res.headers.get("tollbooth-request-cost")) * 1e6);
    assert.ok(cost > 0);
    assert.equal(Math.round(Number(res.headers.get("tollbooth-balance")) * 1e6), 5_000_000 - cost);
    const bundle = await fetch(`${dev.url}/static/build/islands.js`);
    assert.equal(bundle.status, 200, "deno task dev built the islands bundle");
    await bundle.body?.cancel();
    assert.ok(dev.lines.some((l) => l.event === "listening" && l.payments === "dev"));
  } finally {
    await dev.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deno task dev prints a banner on stderr: addresses, how to create an app, the keyless models; stdout stays JSON", async () => {
  const dir = await Deno.makeTempDir();
  const dev = await startInstance({ KV_PATH: `${dir}/kv.sqlite3` }, ["task", "dev"]);
  try {
    await until(() => dev.stderr().includes("The log follows"), "the dev banner");
    const banner = dev.stderr();
    assert.match(banner, /Tollbooth \(development\) is running at http:\/\/tollbooth\.test/);
    assert.match(banner, /Dashboard +http:\/\/tollbooth\.test\/dashboard/);
    assert.match(banner, /Docs +http:\/\/tollbooth\.test\/docs/);
    assert.match(banner, /deno task admin create-app --name demo/);
    assert.match(
      banner,
      /tollbooth\/echo, tollbooth\/lorem and tollbooth\/embed are built in: no key needed/,
    );
    assert.match(banner, /test checkout/);
    assert.ok(
      dev.lines.length > 0 && dev.lines.every((l) => !("raw" in l)),
      "stdout: JSON lines only",
    );
  } finally {
    await dev.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deno task start serves everything without keys, with purchases marked unavailable", async () => {
  const dir = await Deno.makeTempDir();
  const kvPath = `${dir}/kv.sqlite3`;
  const start = await startInstance({ KV_PATH: kvPath }, ["task", "start"]);
  try {
    assert.ok(start.lines.some((l) => l.event === "listening" && l.payments === "unavailable"));
    assert.doesNotMatch(start.stderr(), /create-app/, "the banner is for deno task dev only");
    const created = await admin(kvPath, "create-app", "--name", "prod");
    const res = await chat(start, created.output.api_key, {
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "Hi" }],
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
  } finally {
    await start.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
