import assert from "node:assert/strict";
import { postPinned } from "./pinned_post.ts";

const TLS_DIR = new URL("../../tests/fixtures/tls/", import.meta.url);
const tlsFile = (name: string) => Deno.readTextFileSync(new URL(name, TLS_DIR));
const CA = [tlsFile("ca.pem")];

/** An https server on `hostname:port` (its certificate names localhost) answering `status`. */
function tlsServer(hostname: string, port: number, status: number) {
  const seen: string[] = [];
  const server = Deno.serve({
    hostname,
    port,
    cert: tlsFile("server.pem"),
    key: tlsFile("server.key"),
    onListen() {},
  }, async (request) => {
    seen.push(`${request.headers.get("host")} ${await request.text()}`);
    return new Response("ignored", { status });
  });
  return { server, seen, port: server.addr.port };
}

const post = (url: string, address: string, signal = AbortSignal.timeout(5_000)) =>
  postPinned(new URL(url), {
    address,
    headers: { "content-type": "application/json", "tollbooth-event-id": "evt_1" },
    body: '{"type":"test"}',
    signal,
    caCerts: CA,
  });

/**
 * Whether a second loopback address can be bound: Linux routes all of 127/8 to loopback, macOS
 * only 127.0.0.1 unless aliased (`ifconfig lo0 alias 127.0.0.2`).
 */
function secondLoopbackBinds(): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.2", port: 0 }).close();
    return true;
  } catch {
    return false;
  }
}

Deno.test({
  name:
    "the POST goes to the address given, not to where the name resolves, with TLS checking the name",
  // Two servers on one port need two loopback addresses.
  ignore: !secondLoopbackBinds(),
}, async () => {
  // Two servers on one port: the name resolves to the first; the address given is the second's.
  const pinned = tlsServer("127.0.0.2", 0, 202);
  const resolved = tlsServer("127.0.0.1", pinned.port, 200);
  try {
    const status = await post(`https://localhost:${pinned.port}/hooks?x=1`, "127.0.0.2");
    assert.equal(status, 202);
    assert.deepEqual(pinned.seen, [`localhost:${pinned.port} {"type":"test"}`]);
    assert.deepEqual(resolved.seen, []);
  } finally {
    await pinned.server.shutdown();
    await resolved.server.shutdown();
  }
});

Deno.test("a certificate that does not name the URL's host is refused", async () => {
  const server = tlsServer("127.0.0.1", 0, 200);
  try {
    await assert.rejects(post(`https://hooks.example.com:${server.port}/`, "127.0.0.1"));
    assert.deepEqual(server.seen, []);
  } finally {
    await server.server.shutdown();
  }
});

/** A plain TCP server that reads one request and answers it with `raw` bytes, then closes. */
function answeringOnce(raw: string) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  (async () => {
    const conn = await listener.accept();
    await conn.read(new Uint8Array(4096));
    await conn.write(new TextEncoder().encode(raw));
    conn.close();
  })();
  return { url: `http://localhost:${(listener.addr as Deno.NetAddr).port}/`, listener };
}

Deno.test("interim 1xx heads are skipped for the final status", async () => {
  const { url, listener } = answeringOnce(
    "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
  );
  try {
    assert.equal(await post(url, "127.0.0.1"), 204);
  } finally {
    listener.close();
  }
});

Deno.test("a receiver that never answers is given up at the signal", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const held: Deno.Conn[] = [];
  (async () => {
    for await (const conn of listener) held.push(conn);
  })().catch(() => {});
  try {
    await assert.rejects(
      post(`http://localhost:${port}/`, "127.0.0.1", AbortSignal.timeout(200)),
      (error: Error) => error.name === "TimeoutError",
    );
  } finally {
    for (const conn of held) conn.close();
    listener.close();
  }
});

Deno.test("what is not an HTTP response is an error, not a status", async () => {
  const { url, listener } = answeringOnce("SSH-2.0-OpenSSH_9.2\r\n");
  try {
    await assert.rejects(post(url, "127.0.0.1"), /invalid HTTP response/);
  } finally {
    listener.close();
  }
});
