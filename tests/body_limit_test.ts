import { concatBytes } from "@/lib/core/mod.ts";
/**
 * Every body is read within a limit while it streams, on every route that reads one: a real
 * service process is sent bodies of up to 4 GiB, generated as they go (never held by the test
 * either), chunked and with a declared length, and its memory is read from /proc before and after.
 */
import assert from "node:assert/strict";
import { admin, type Instance, instanceFiles, startInstance } from "./instances.ts";

/**
 * Far more than the service could read before it answers: an answer that arrives while the upload
 * still goes on was given at the limit. Once it has answered, Deno's server reads and drops what
 * the client still sends, so the bytes sent until the answer arrives measure how soon it came,
 * not what the service held.
 */
const UPLOAD_BYTES = 4 * 1024 * 1024 * 1024;
const MAX_GROWTH_BYTES = 50 * 1024 * 1024;
const CHUNK = new Uint8Array(64 * 1024).fill(0x61);
const encoder = new TextEncoder();

interface Upload {
  status: number;
  body: string;
  /** Body bytes sent before the answer arrived (the service drops what came after its limit). */
  sent: number;
}

/**
 * POSTs `UPLOAD_BYTES` over a raw connection, chunk after chunk, `chunked` or with a declared
 * Content-Length, and stops sending once the answer arrives (as any client whose request was
 * answered does), or when the service closes the connection.
 */
async function upload(
  instance: Instance,
  path: string,
  headers: Record<string, string>,
  framing: "chunked" | "declared",
): Promise<Upload> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: instance.port });
  const head = requestHead(path, [
    "Connection: close",
    framing === "chunked" ? "Transfer-Encoding: chunked" : `Content-Length: ${UPLOAD_BYTES}`,
  ], headers);
  const answer = readAnswer(conn);
  let sent = 0;
  let answered = false;
  answer.head.then(() => answered = true, () => answered = true);
  const frame = framing === "chunked"
    ? concatBytes([
      encoder.encode(`${CHUNK.byteLength.toString(16)}\r\n`),
      CHUNK,
      encoder.encode("\r\n"),
    ])
    : CHUNK;
  try {
    await writeAll(conn, encoder.encode(head));
    while (sent < UPLOAD_BYTES && !answered) {
      const written = await Promise.race([writeAll(conn, frame).then(() => true), answer.head]);
      if (written !== true) break;
      sent += CHUNK.byteLength;
    }
    if (sent >= UPLOAD_BYTES && framing === "chunked") {
      await writeAll(conn, encoder.encode("0\r\n\r\n"));
    }
  } catch {
    // The service closed the connection on an upload it refused: what it took is `sent`.
  }
  const { status, body } = await answer.whole;
  try {
    conn.close();
  } catch {
    // already closed
  }
  return { status, body, sent };
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array) {
  for (let offset = 0; offset < bytes.byteLength;) {
    offset += await conn.write(bytes.subarray(offset));
  }
}

/**
 * Reads one HTTP answer: `head` once its status line and headers are in, `whole` with its body up
 * to its Content-Length or the close.
 */
function readAnswer(conn: Deno.Conn) {
  const head = Promise.withResolvers<void>();
  const whole = (async () => {
    let received: Uint8Array = new Uint8Array(0);
    const buffer = new Uint8Array(64 * 1024);
    for (;;) {
      const text = new TextDecoder().decode(received);
      const end = text.indexOf("\r\n\r\n");
      if (end >= 0) {
        head.resolve();
        const length = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, end))?.[1];
        if (length !== undefined && received.byteLength >= end + 4 + Number(length)) {
          return {
            status: Number(text.slice(9, 12)),
            body: text.slice(end + 4, end + 4 + Number(length)),
          };
        }
      }
      let n: number | null = null;
      try {
        n = await conn.read(buffer);
      } catch {
        n = null;
      }
      if (n === null) {
        head.resolve();
        assert.ok(text.startsWith("HTTP/1.1 "), `an HTTP answer, got ${JSON.stringify(text)}`);
        return { status: Number(text.slice(9, 12)), body: text.slice(end + 4) };
      }
      received = concatBytes([received, buffer.subarray(0, n)]);
    }
  })();
  return { head: head.promise, whole };
}

/** Resident memory of a process, and its peak since the last reset, in bytes. */
async function memory(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kib = (field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)![1]);
  return { rss: kib("VmRSS") * 1024, peak: kib("VmHWM") * 1024 };
}

/** Sets the peak back to the current resident memory, so that a later peak is this upload's. */
async function resetPeak(pid: number) {
  await Deno.writeTextFile(`/proc/${pid}/clear_refs`, "5");
}

const MiB = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

Deno.test("bodies of up to 4 GiB, chunked or declared, are refused at each route's limit while they still arrive, without the process growing", async () => {
  const files = await instanceFiles();
  const created = await admin(files.kvPath, "create-app", "--name", "big bodies");
  assert.equal(created.code, 0, created.stderr);
  const instance = await startInstance({
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    STRIPE_SECRET_KEY: "sk_test_not_called",
    STRIPE_WEBHOOK_SECRET: "whsec_not_called",
  });
  try {
    const signUp = await fetch(`${instance.url}/signup`, {
      method: "POST",
      body: new URLSearchParams({ email: "big@example.com", password: "correct horse battery" }),
      redirect: "manual",
    });
    await signUp.body?.cancel();
    const cookie = signUp.headers.get("set-cookie")!.split(";")[0];
    const dashboard = await (await fetch(`${instance.url}/dashboard`, { headers: { cookie } }))
      .text();
    const csrf = /name="_csrf" value="([0-9a-z]+)"/.exec(dashboard)![1];
    const form = { "Content-Type": "application/x-www-form-urlencoded" };
    const topUpPath = new URL(created.output.top_up_url).pathname;
    const routes: { path: string; headers: Record<string, string>; refusal: RegExp }[] = [
      {
        path: "/v1/chat/completions",
        headers: {
          Authorization: `Bearer ${created.output.api_key}`,
          "Content-Type": "application/json",
        },
        refusal: /"code":"request_too_large"/,
      },
      {
        path: "/webhooks/stripe",
        headers: { "Stripe-Signature": "t=1,v1=00", "Content-Type": "application/json" },
        refusal: /"code":"request_too_large"/,
      },
      { path: topUpPath, headers: form, refusal: /Form too large/ },
      { path: "/signup", headers: form, refusal: /Form too large/ },
      { path: "/signin", headers: form, refusal: /Form too large/ },
      {
        path: `/dashboard/apps?_csrf=${csrf}`,
        headers: { ...form, Cookie: cookie },
        refusal: /Form too large/,
      },
    ];
    const measured: string[] = [];
    for (const route of routes) {
      for (const framing of ["chunked", "declared"] as const) {
        await resetPeak(instance.pid);
        const before = await memory(instance.pid);
        const result = await upload(instance, route.path, route.headers, framing);
        const after = await memory(instance.pid);
        const growth = after.peak - before.rss;
        measured.push(
          `${route.path.replace(/\/top-up\/.*/, "/top-up/:token")} ${framing}: ${result.status}, ${
            MiB(result.sent)
          } MiB sent before the answer, peak +${MiB(growth)} MiB`,
        );
        assert.match(result.body, route.refusal, `${route.path} ${framing}`);
        assert.equal(result.status, route.refusal.source.includes("code") ? 400 : 413);
        assert.ok(
          result.sent < UPLOAD_BYTES,
          `${route.path} ${framing} answered only after the whole upload`,
        );
        assert.ok(growth < MAX_GROWTH_BYTES, `${route.path} ${framing} grew ${MiB(growth)} MiB`);
      }
    }
    console.log(measured.join("\n"));
    // The service still serves, and the refused requests changed nothing.
    const audit = await admin(files.kvPath, "audit");
    assert.equal(audit.code, 0, JSON.stringify(audit.output));
    assert.equal(audit.output.apps, 1);
  } finally {
    await instance.stop();
    await files.remove();
  }
});

/** A request's head: its request line, `framing` (a body's length or chunking) and `headers`. */
function requestHead(path: string, framing: string[], headers: Record<string, string>): string {
  return [
    `POST ${path} HTTP/1.1`,
    "Host: 127.0.0.1",
    ...framing,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
    "",
    "",
  ].join("\r\n");
}

/**
 * Sends a request's head and only the start of its body, then waits: `declared` bytes are
 * announced and `sent` of them sent, or (`chunked`) one chunk of one byte.
 */
async function stall(
  instance: Instance,
  path: string,
  headers: Record<string, string>,
  body: { declared: number; sent: number } | "chunked",
) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: instance.port });
  const start = body === "chunked"
    ? encoder.encode(`${requestHead(path, ["Transfer-Encoding: chunked"], headers)}1\r\n{\r\n`)
    : concatBytes([
      encoder.encode(requestHead(path, [`Content-Length: ${body.declared}`], headers)),
      new Uint8Array(body.sent).fill(0x7b),
    ]);
  await writeAll(conn, start);
  const answer = readAnswer(conn).whole.finally(() => {
    try {
      conn.close();
    } catch {
      // already closed
    }
  });
  return { answer };
}

Deno.test("stalled uploads hold no more memory than they sent, and large, chunked and form ones are refused 408 once BODY_READ_TIMEOUT_MS has passed", async () => {
  const files = await instanceFiles();
  const created = await admin(files.kvPath, "create-app", "--name", "slow bodies");
  assert.equal(created.code, 0, created.stderr);
  const instance = await startInstance({
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    BODY_READ_TIMEOUT_MS: "3000",
  });
  try {
    const api = {
      Authorization: `Bearer ${created.output.api_key}`,
      "Content-Type": "application/json",
    };
    const form = { "Content-Type": "application/x-www-form-urlencoded" };
    await resetPeak(instance.pid);
    const before = await memory(instance.pid);
    // Each declares just under the 4 MiB limit and sends one byte: a buffer sized by the declared
    // length would take 8 MB apiece, 320 MB in all.
    const large = await Promise.all(
      Array.from(
        { length: 40 },
        () => stall(instance, "/v1/chat/completions", api, { declared: 4_000_000, sent: 1 }),
      ),
    );
    const chunked = await stall(instance, "/v1/chat/completions", api, "chunked");
    const page = await stall(instance, "/signup", form, { declared: 100, sent: 5 });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const growth = (await memory(instance.pid)).peak - before.rss;
    assert.ok(growth < 40 * 1024 * 1024, `40 stalled uploads grew the process ${MiB(growth)} MiB`);
    for (const { answer } of [...large, chunked]) {
      const { status, body } = await answer;
      assert.equal(status, 408, body);
      assert.equal(JSON.parse(body).error.code, "request_timeout");
    }
    const refused = await page.answer;
    assert.equal(refused.status, 408);
    assert.match(refused.body, /Form not received in time/);
    // The service still serves, and the refused requests changed nothing.
    const models = await fetch(`${instance.url}/v1/models`, { headers: api });
    assert.equal(models.status, 200);
    await models.body?.cancel();
    const audit = await admin(files.kvPath, "audit");
    assert.equal(audit.code, 0, JSON.stringify(audit.output));
  } finally {
    await instance.stop();
    await files.remove();
  }
});

Deno.test("a small API body trickled a byte a second is refused 408 request_timeout once BODY_READ_TIMEOUT_MS has passed, on every route that reads one", async () => {
  const files = await instanceFiles();
  const created = await admin(files.kvPath, "create-app", "--name", "trickled bodies");
  assert.equal(created.code, 0, created.stderr);
  const instance = await startInstance({
    KV_PATH: files.kvPath,
    MODELS_FILE: files.modelsFile,
    BODY_READ_TIMEOUT_MS: "2000",
  });
  try {
    const api = {
      Authorization: `Bearer ${created.output.api_key}`,
      "Content-Type": "application/json",
    };
    const keyed = { ...api, "Idempotency-Key": crypto.randomUUID() };
    const started = Date.now();
    const answers = await Promise.all([
      trickle(instance, "/v1/chat/completions", api),
      trickle(instance, "/v1/embeddings", api),
      trickle(instance, "/v1/responses", api),
      trickle(instance, "/v1/chat/completions", keyed),
    ]);
    const elapsed = Date.now() - started;
    for (const { status, body } of answers) {
      assert.equal(status, 408, body);
      assert.equal(JSON.parse(body).error.code, "request_timeout");
    }
    // The deadline, and the sweep's second at most, not the 200 seconds the bodies would take.
    assert.ok(elapsed < 6_000, `answered after ${elapsed} ms`);
    const audit = await admin(files.kvPath, "audit");
    assert.equal(audit.code, 0, JSON.stringify(audit.output));
  } finally {
    await instance.stop();
    await files.remove();
  }
});

/**
 * Declares a 200-byte JSON body (under the 16 KiB read at once) and sends it a byte a second
 * until the service answers; the answer.
 */
async function trickle(instance: Instance, path: string, headers: Record<string, string>) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: instance.port });
  const body = encoder.encode(JSON.stringify({ model: "tollbooth/echo", pad: "x".repeat(200) }))
    .subarray(0, 200);
  await writeAll(conn, encoder.encode(requestHead(path, ["Content-Length: 200"], headers)));
  const answer = readAnswer(conn);
  let answered = false;
  answer.head.then(() => answered = true, () => answered = true);
  try {
    for (let i = 0; i < body.byteLength && !answered; i++) {
      await writeAll(conn, body.subarray(i, i + 1));
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  } catch {
    // The service closed the connection once it answered.
  }
  const whole = await answer.whole;
  try {
    conn.close();
  } catch {
    // already closed
  }
  return whole;
}
