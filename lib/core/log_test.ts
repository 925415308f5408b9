import assert from "node:assert/strict";
import { flushLogs, jsonLogger, loggedPath, logSoon, requestLogLine } from "./log.ts";

/** Past the next write of buffered lines (LOG_FLUSH_MS, 100 ms). */
const nextFlush = () => new Promise((resolve) => setTimeout(resolve, 150));

Deno.test("a deferred line is written with the next batch of lines, not during the current task", async () => {
  const written: string[] = [];
  logSoon(() => written.push("a"));
  logSoon(() => written.push("b"));
  await Promise.resolve();
  assert.deepEqual(written, [], "microtasks (a response's own continuations) run first");
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.deepEqual(written, [], "nor the next task: the line waits for the batch");
  await nextFlush();
  assert.deepEqual(written, ["a", "b"]);
});

Deno.test("flushing the logs (before an exit) writes the deferred lines first", () => {
  const written: string[] = [];
  logSoon(() => written.push("last words"));
  flushLogs();
  assert.deepEqual(written, ["last words"]);
});

Deno.test("a deferred line that throws does not cost the lines after it", async () => {
  const written: string[] = [];
  const errors: unknown[] = [];
  const error = console.error;
  console.error = (...args: unknown[]) => errors.push(args);
  try {
    logSoon(() => {
      throw new Error("broken line");
    });
    logSoon(() => written.push("after"));
    await nextFlush();
  } finally {
    console.error = error;
  }
  assert.deepEqual(written, ["after"]);
  assert.equal(errors.length, 1);
});

Deno.test("a line deferred while the waiting lines are written is written with the next batch, not left behind", async () => {
  const written: string[] = [];
  logSoon(() => {
    written.push("first");
    logSoon(() => written.push("second"));
  });
  await nextFlush();
  assert.deepEqual(written, ["first"]);
  await nextFlush();
  assert.deepEqual(written, ["first", "second"]);
});

Deno.test("a line is one JSON object: time and level (info unless the fields say), then the fields", () => {
  flushLogs();
  const printed: string[] = [];
  const print = console.log;
  console.log = (text: string) => printed.push(text);
  try {
    jsonLogger({ event: "a", n: 1, nested: { quote: '"' } });
    jsonLogger({ level: "warn", event: "b" });
    jsonLogger({});
    flushLogs();
  } finally {
    console.log = print;
  }
  const lines = printed.join("\n").split("\n").map((line) => JSON.parse(line));
  assert.deepEqual(lines.map((line) => Object.keys(line).slice(0, 2)), [
    ["time", "level"],
    ["time", "level"],
    ["time", "level"],
  ]);
  assert.deepEqual(lines.map(({ time: _, ...rest }) => rest), [
    { level: "info", event: "a", n: 1, nested: { quote: '"' } },
    { level: "warn", event: "b" },
    { level: "info" },
  ]);
  assert.ok(lines.every((line) => !Number.isNaN(Date.parse(line.time))));
});

Deno.test("a key pasted into a request's path is masked in its log line, its prefix kept", () => {
  const key = "tb_lwug4ayecqrql9a78t6syk8h0sqcudwvlukc";
  const line = requestLogLine(
    { requestId: "req_1", method: "GET", path: `/v1/models/${key}`, status: 404, totalMs: 1 },
    {},
  );
  assert.equal(line.path, "/v1/models/tb_[redacted]");
  assert.equal(
    loggedPath(
      "/v1/management/apps/tbm_abcdefghijklmnopqrstuvwxyz0123/keys/sk-proj-abcdefghijklmnop",
    ),
    "/v1/management/apps/tbm_[redacted]/keys/sk-[redacted]",
  );
  // Ids and short words are not secrets: they stay.
  assert.equal(
    loggedPath("/v1/management/apps/app_123/keys/key_456"),
    "/v1/management/apps/app_123/keys/key_456",
  );
  assert.equal(loggedPath("/v1/chat/completions"), "/v1/chat/completions");
});
