import assert from "node:assert/strict";
import { parseSse } from "../sse.ts";
import {
  type BodyReader,
  createHttp1Fetch,
  type Http1Answer,
  type Http1Fetch,
  type Http1Init,
} from "./http1.ts";
import { sleep, until } from "../../../tests/fakes/common.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

interface ReceivedRequest {
  /** The head as it crossed the wire, CRLFs included. */
  head: string;
  body: string;
}

/** One accepted connection, seen from the server: reads requests, writes exact bytes. */
class Peer {
  private buffer = new Uint8Array(0);
  /** The client closed its side (or the connection failed). */
  private ended = false;
  private waiters: (() => void)[] = [];
  readonly requests: ReceivedRequest[] = [];

  constructor(readonly conn: Deno.Conn, readonly index: number) {
    this.pump();
  }

  /** The one reader of the connection: what arrives is buffered, the end is noted. */
  private async pump() {
    const chunk = new Uint8Array(65_536);
    for (;;) {
      const count = await this.conn.read(chunk).catch(() => null);
      if (count === null) this.ended = true;
      else {
        const joined = new Uint8Array(this.buffer.length + count);
        joined.set(this.buffer);
        joined.set(chunk.subarray(0, count), this.buffer.length);
        this.buffer = joined;
      }
      for (const wake of this.waiters.splice(0)) wake();
      if (this.ended) return;
    }
  }

  private changed(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** The next whole request (head and content-length body); null when the client closes first. */
  async request(): Promise<ReceivedRequest | null> {
    for (;; await this.changed()) {
      const end = decoder.decode(this.buffer).indexOf("\r\n\r\n");
      if (end !== -1) {
        const head = decoder.decode(this.buffer.subarray(0, end + 4));
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0);
        const headBytes = encoder.encode(head).length;
        if (this.buffer.length >= headBytes + length) {
          const body = decoder.decode(this.buffer.subarray(headBytes, headBytes + length));
          this.buffer = this.buffer.slice(headBytes + length);
          const request = { head, body };
          this.requests.push(request);
          return request;
        }
      }
      if (this.ended) return null;
    }
  }

  /** Resolves when the client has closed the connection; a client that never does fails. */
  async clientClosed(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const never = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("the client kept the connection open")), 10_000);
    });
    try {
      await Promise.race([
        (async () => {
          while (!this.ended) await this.changed();
        })(),
        never,
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  async write(...parts: (string | Uint8Array)[]) {
    for (const part of parts) {
      const bytes = typeof part === "string" ? encoder.encode(part) : part;
      let written = 0;
      while (written < bytes.length) written += await this.conn.write(bytes.subarray(written));
    }
  }

  close() {
    try {
      this.conn.close();
    } catch {
      // closed already
    }
  }
}

/**
 * A raw TCP server on 127.0.0.1: every accepted connection runs `script`, and is closed when the
 * script ends. Counts connections, so a test can tell a reused connection from a new one.
 */
function scriptedServer(script: (peer: Peer) => Promise<void>) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const peers: Peer[] = [];
  const scripts: Promise<void>[] = [];
  const failures: unknown[] = [];
  const accepting = (async () => {
    for await (const conn of listener) {
      const peer = new Peer(conn, peers.length);
      peers.push(peer);
      scripts.push(
        script(peer).catch((error) => void failures.push(error)).finally(() => peer.close()),
      );
    }
  })().catch(() => {});
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    peers,
    get accepted() {
      return peers.length;
    },
    async close() {
      listener.close();
      for (const peer of peers) peer.close();
      await accepting;
      await Promise.all(scripts);
      assert.deepEqual(failures, [], "the server's script failed");
    },
  };
}

/** Answers every request on a connection with `answer`, until the client closes it. */
function answering(answer: (request: ReceivedRequest) => string | Uint8Array) {
  return async (peer: Peer) => {
    let request: ReceivedRequest | null;
    while ((request = await peer.request())) await peer.write(answer(request));
  };
}

async function withServer(
  script: (peer: Peer) => Promise<void>,
  test: (server: ReturnType<typeof scriptedServer>, client: Http1Fetch) => Promise<void>,
) {
  const server = scriptedServer(script);
  const client = createHttp1Fetch({ env: {} });
  try {
    await test(server, client);
  } finally {
    client.closeIdle();
    await server.close();
  }
}

const post = (body = "{}", extra: Partial<Http1Init> = {}): Http1Init => ({
  method: "POST",
  headers: { "content-type": "application/json" },
  body,
  ...extra,
});

/** A bound on a wait whose end the test needs: a client that buffered would fail, not hang. */
const bounded = () => AbortSignal.timeout(10_000);

/** The two ways a caller reads an answer: a Response's stream (`fetch`), or `answer()`'s reader. */
const WAYS = ["fetch", "answer"] as const;

/** A call's body, read by `way`: each read's text, null at the end. */
async function openBody(
  way: typeof WAYS[number],
  client: Http1Fetch,
  url: string,
  init: Http1Init,
): Promise<{ read(): Promise<string | null>; cancel(): Promise<void> }> {
  if (way === "fetch") {
    const reader = (await client(url, init)).body!.getReader();
    return {
      read: async () => {
        const { value, done } = await reader.read();
        return done ? null : decoder.decode(value);
      },
      cancel: () => reader.cancel(),
    };
  }
  const body = bodyReader(await client.answer(url, init));
  return {
    read: async () => {
      const { value, done } = await body.read(new Uint8Array(64));
      return done ? null : decoder.decode(value);
    },
    cancel: () => body.cancel(),
  };
}

function gzip(text: string, format: CompressionFormat): Promise<Uint8Array> {
  const compressed = new Blob([text]).stream().pipeThrough(new CompressionStream(format));
  return new Response(compressed).bytes();
}

Deno.test("a content-length body is read to its length", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: text/plain\r\n\r\nhello world"
    ),
    async (server, client) => {
      const response = await client(server.url, post());
      assert.equal(response.status, 200);
      assert.equal(response.statusText, "OK");
      assert.equal(response.ok, true);
      assert.equal(response.headers.get("content-type"), "text/plain");
      assert.equal(await response.text(), "hello world");
    },
  );
});

Deno.test("a chunked body split at awkward byte boundaries arrives whole and in order", async () => {
  const pieces = [
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
    "1", // inside the size line
    "a\r", // inside the CRLF after the size
    "\n0123456789", // 10 of 26 bytes
    "abcdefghijklmnop\r", // the rest, and inside the CRLF after the data
    '\n3;ext="x"\r\nxyz\r\n', // an extension, ignored
    "0\r", // inside the last chunk's line
    "\nexpires: never\r\n", // a trailer, discarded
    "\r\n",
  ];
  await withServer(async (peer) => {
    await peer.request();
    for (const piece of pieces) {
      await peer.write(piece);
      await sleep(5); // separate reads for the client, most likely
    }
    await peer.clientClosed();
  }, async (server, client) => {
    const response = await client(server.url, post());
    assert.equal(await response.text(), "0123456789abcdefghijklmnopxyz");
    assert.equal(response.headers.has("expires"), false, "trailers are not headers");
  });
});

Deno.test("a BYOB reader with a small buffer gets the body in pieces that fit it", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      const response = await client(server.url, post());
      const reader = response.body!.getReader({ mode: "byob" });
      const parts: string[] = [];
      for (;;) {
        const { value, done } = await reader.read(new Uint8Array(4));
        if (done) break;
        parts.push(decoder.decode(value));
      }
      assert.deepEqual(parts, ["0123", "4567", "89"]);
    },
  );
});

Deno.test("chunks of a chunked body that arrived together are given in one BYOB read", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" +
      "3\r\nabc\r\n3\r\ndef\r\n4\r\nghij\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      const response = await client(server.url, post());
      const reader = response.body!.getReader({ mode: "byob" });
      const first = await reader.read(new Uint8Array(64));
      assert.equal(decoder.decode(first.value), "abcdefghij");
      assert.equal((await reader.read(new Uint8Array(64))).done, true);
    },
  );
});

Deno.test("a chunked body whose last chunk and trailers arrived with its data ends in that read, and its connection is reused", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" +
      "3\r\nabc\r\n3\r\ndef\r\n0\r\nx-trailer: 1\r\n\r\n"
    ),
    async (server, client) => {
      for (let i = 0; i < 2; i++) {
        const response = await client(server.url, post());
        const reader = response.body!.getReader({ mode: "byob" });
        assert.equal(decoder.decode((await reader.read(new Uint8Array(64))).value), "abcdef");
        assert.equal((await reader.read(new Uint8Array(64))).done, true);
      }
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("the data before bad chunk framing in the same read is given first, then the error", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nxyz\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      for (const way of WAYS) {
        const body = await openBody(way, client, server.url, post());
        assert.equal(await body.read(), "abc", way);
        await assert.rejects(body.read(), /chunk size/, way);
      }
    },
  );
});

Deno.test("the request bytes on the wire are as specified", async () => {
  const body = '{"text":"héllo ✓"}';
  await withServer(
    answering(() => "HTTP/1.1 204 No Content\r\n\r\n"),
    async (server, client) => {
      await client(`${server.url}/v1/chat/completions?beta=1#fragment`, {
        method: "post",
        headers: { Authorization: "Bearer sk-test", "content-type": "application/json" },
        body,
      });
      const [request] = server.peers[0].requests;
      assert.equal(
        request.head,
        "POST /v1/chat/completions?beta=1 HTTP/1.1\r\n" +
          `host: 127.0.0.1:${server.port}\r\n` +
          "Authorization: Bearer sk-test\r\n" +
          "content-type: application/json\r\n" +
          `content-length: ${encoder.encode(body).length}\r\n` +
          "accept-encoding: identity\r\n" +
          "user-agent: tollbooth\r\n" +
          "\r\n",
      );
      assert.equal(request.body, body);
    },
  );
});

Deno.test("a caller's user-agent and accept-encoding replace the defaults", async () => {
  await withServer(answering(() => "HTTP/1.1 204 No Content\r\n\r\n"), async (server, client) => {
    await client(server.url, {
      method: "GET",
      headers: { "User-Agent": "probe/1", "Accept-Encoding": "gzip" },
    });
    assert.equal(
      server.peers[0].requests[0].head,
      `GET / HTTP/1.1\r\nhost: 127.0.0.1:${server.port}\r\n` +
        "User-Agent: probe/1\r\nAccept-Encoding: gzip\r\n\r\n",
    );
  });
});

Deno.test("headers given as a Headers object or as pairs are sent", async () => {
  await withServer(answering(() => "HTTP/1.1 204 No Content\r\n\r\n"), async (server, client) => {
    await client(server.url, post("{}", { headers: new Headers({ "x-api-key": "k1" }) }));
    await client(server.url, post("{}", { headers: [["x-api-key", "k2"]] }));
    const [first, second] = server.peers[0].requests;
    assert.match(first.head, /\r\nx-api-key: k1\r\n/);
    assert.match(second.head, /\r\nx-api-key: k2\r\n/);
  });
});

Deno.test("a keep-alive connection is reused for the next request", async () => {
  await withServer(
    answering((request) =>
      `HTTP/1.1 200 OK\r\ncontent-length: ${request.body.length}\r\n\r\n${request.body}`
    ),
    async (server, client) => {
      assert.equal(await (await client(server.url, post("one"))).text(), "one");
      assert.equal(await (await client(server.url, post("two"))).text(), "two");
      assert.equal(server.accepted, 1);
      assert.equal(server.peers[0].requests.length, 2);
    },
  );
});

Deno.test("a chunked answer's connection, trailers read, is reused", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-checksum: 1\r\n\r\n"
    ),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
      assert.equal(await (await client(server.url, post())).text(), "ok");
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("an answer with connection: close is not reused", async () => {
  await withServer(
    answering(() => "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
      await server.peers[0].clientClosed();
      assert.equal(await (await client(server.url, post())).text(), "ok");
      assert.equal(server.accepted, 2);
    },
  );
});

Deno.test("a read-until-close answer is read to the close and its connection not reused", async () => {
  await withServer(async (peer) => {
    await peer.request();
    await peer.write("HTTP/1.1 200 OK\r\n\r\nuntil ");
    await sleep(5);
    await peer.write("the end");
  }, async (server, client) => {
    assert.equal(await (await client(server.url, post())).text(), "until the end");
    assert.equal(await (await client(server.url, post())).text(), "until the end");
    assert.equal(server.accepted, 2);
  });
});

Deno.test("an HTTP/1.0 answer's connection is not reused", async () => {
  await withServer(
    answering(() => "HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
      await server.peers[0].clientClosed();
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("a Keep-Alive timeout of 1 s leaves no time to reuse the connection", async () => {
  await withServer(
    answering(() => "HTTP/1.1 200 OK\r\nkeep-alive: timeout=1\r\ncontent-length: 2\r\n\r\nok"),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
      await server.peers[0].clientClosed();
      assert.equal(client.idleConnections(), 0);
    },
  );
});

Deno.test("a connection the server closes while idle is not reused; the next request succeeds on a new one", async () => {
  await withServer(async (peer) => {
    await peer.request();
    await peer.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    if (peer.index === 0) return; // closed once answered, while the client holds it idle
    await peer.clientClosed();
  }, async (server, client) => {
    assert.equal(await (await client(server.url, post())).text(), "ok");
    await until(() => client.idleConnections() === 0, "the client to see the close");
    assert.equal(await (await client(server.url, post())).text(), "ok");
    assert.equal(server.accepted, 2);
    assert.equal(server.peers[0].requests.length, 1);
  });
});

Deno.test("a server's unasked bytes on an idle connection make the client drop it", async () => {
  await withServer(async (peer) => {
    await peer.request();
    await peer.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    await sleep(5);
    await peer.write("HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n");
    await peer.clientClosed();
  }, async (server, client) => {
    assert.equal(await (await client(server.url, post())).text(), "ok");
    await server.peers[0].clientClosed();
    assert.equal(client.idleConnections(), 0);
  });
});

Deno.test("a failure on a reused connection before any answer is reported, never retried", async () => {
  await withServer(async (peer) => {
    await peer.request();
    await peer.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    await peer.request(); // the second request arrives, and the server drops it unanswered
  }, async (server, client) => {
    assert.equal(await (await client(server.url, post())).text(), "ok");
    await assert.rejects(client(server.url, post("billed once")), TypeError);
    assert.equal(server.accepted, 1, "no second connection: no retry");
    assert.equal(server.peers[0].requests.length, 2);
  });
});

Deno.test("an SSE answer flows part by part", async () => {
  const firstRead = Promise.withResolvers<void>();
  await withServer(async (peer) => {
    await peer.request();
    await peer.write(
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
      'f\r\ndata: {"n":1}\n\n\r\n',
    );
    await firstRead.promise; // the second event is written only once the first was read
    await peer.write('f\r\ndata: {"n":2}\n\n\r\n0\r\n\r\n');
    await peer.clientClosed();
  }, async (server, client) => {
    const response = await client(server.url, post("{}", { signal: bounded() }));
    const events = parseSse(response.body!);
    assert.deepEqual((await events.next()).value, [{ event: null, data: '{"n":1}' }]);
    firstRead.resolve();
    assert.deepEqual((await events.next()).value, [{ event: null, data: '{"n":2}' }]);
    assert.equal((await events.next()).done, true);
  });
});

Deno.test("abort before headers rejects with the signal's reason and closes the connection", async () => {
  const received = Promise.withResolvers<void>();
  await withServer(async (peer) => {
    await peer.request();
    received.resolve();
    await peer.clientClosed();
  }, async (server, client) => {
    const controller = new AbortController();
    const answer = client(server.url, post("{}", { signal: controller.signal }));
    await received.promise;
    const reason = new Error("client left");
    controller.abort(reason);
    await assert.rejects(answer, (error) => error === reason);
    await server.peers[0].clientClosed();
    assert.equal(client.idleConnections(), 0);
  });
});

Deno.test("an already aborted signal rejects with its reason without connecting", async () => {
  await withServer(answering(() => "HTTP/1.1 204 No Content\r\n\r\n"), async (server, client) => {
    const reason = new DOMException("gone", "AbortError");
    await assert.rejects(
      client(server.url, post("{}", { signal: AbortSignal.abort(reason) })),
      (error) => error === reason,
    );
    assert.equal(server.accepted, 0);
  });
});

Deno.test("abort mid-body fails the waiting read and every read after it with the reason, and the connection is not reused", async () => {
  for (const way of WAYS) {
    await withServer(async (peer) => {
      if (!await peer.request()) return;
      await peer.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nfirst part");
      await peer.clientClosed();
    }, async (server, client) => {
      const controller = new AbortController();
      const body = await openBody(
        way,
        client,
        server.url,
        post("{}", { signal: controller.signal }),
      );
      assert.equal(await body.read(), "first part", way);
      const pending = body.read();
      const reason = new DOMException("upstream timed out", "TimeoutError");
      controller.abort(reason);
      await assert.rejects(pending, (error) => error === reason, way);
      await assert.rejects(body.read(), (error) => error === reason, way);
      await server.peers[0].clientClosed();
      assert.equal(client.idleConnections(), 0, way);
    });
  }
});

Deno.test("cancelling the body closes the connection", async () => {
  for (const way of WAYS) {
    await withServer(async (peer) => {
      await peer.request();
      await peer.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n");
      await peer.clientClosed();
    }, async (server, client) => {
      const body = await openBody(way, client, server.url, post());
      assert.equal(await body.read(), "first", way);
      await body.cancel();
      await server.peers[0].clientClosed();
      assert.equal(client.idleConnections(), 0, way);
    });
  }
});

Deno.test("a connection closed mid-body fails the next read with a TypeError", async () => {
  for (const way of WAYS) {
    await withServer(async (peer) => {
      await peer.request();
      await peer.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ncut short");
    }, async (server, client) => {
      const body = await openBody(way, client, server.url, post());
      assert.equal(await body.read(), "cut short", way);
      await assert.rejects(body.read(), TypeError, way);
      assert.equal(client.idleConnections(), 0, way);
    });
  }
});

Deno.test("a connection closed before any answer rejects with a TypeError", async () => {
  await withServer(async (peer) => {
    await peer.request();
  }, async (server, client) => {
    await assert.rejects(client(server.url, post()), TypeError);
  });
});

Deno.test("a refused connection rejects with a TypeError", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  const client = createHttp1Fetch({ env: {} });
  await assert.rejects(client(`http://127.0.0.1:${port}/`, post()), TypeError);
});

/** The error a client meets for an answer of these bytes: at the headers or in the body. */
async function answerError(answer: string): Promise<unknown> {
  let caught: unknown = null;
  await withServer(async (peer) => {
    await peer.request();
    await peer.write(answer);
    await peer.clientClosed();
  }, async (server, client) => {
    try {
      const response = await client(server.url, post());
      await response.text();
    } catch (error) {
      caught = error;
    }
    assert.equal(client.idleConnections(), 0);
  });
  return caught;
}

Deno.test("response headers over 64 KiB are an error", async () => {
  const huge = `x-padding: ${"a".repeat(70 * 1024)}\r\n`;
  const error = await answerError(`HTTP/1.1 200 OK\r\n${huge}content-length: 0\r\n\r\n`);
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /64 KiB/);
});

Deno.test("response headers just under 64 KiB are read", async () => {
  const padding = `x-padding: ${"a".repeat(60 * 1024)}`;
  await withServer(
    answering(() => `HTTP/1.1 200 OK\r\n${padding}\r\ncontent-length: 2\r\n\r\nok`),
    async (server, client) => {
      const response = await client(server.url, post());
      assert.equal(response.headers.get("x-padding")?.length, 60 * 1024);
      assert.equal(await response.text(), "ok");
    },
  );
});

Deno.test("a bad status line is an error", async () => {
  for (
    const line of [
      "HTTP/2 200 OK",
      "HTTP/1.1 20 OK",
      "ICY 200 OK",
      "HTTP/1.1 200 OK\r",
      "\ufeffHTTP/1.1 200 OK",
    ]
  ) {
    const error = await answerError(`${line}\r\ncontent-length: 0\r\n\r\n`);
    assert.ok(error instanceof TypeError, line);
    assert.match(error.message, /status line/);
  }
});

Deno.test("a response header without a token name, or with a CR or NUL in its value, is an error", async () => {
  for (
    const [field, message] of [
      ["bad name: 1", /bad header line/],
      ["no-colon", /bad header line/],
      [": empty", /bad header line/],
      ["x-\u00e9: 1", /bad header line/],
      ["x-value: a\rb", /bad value for header x-value/],
      ["x-value: a\0b", /bad value for header x-value/],
    ] as const
  ) {
    const error = await answerError(`HTTP/1.1 200 OK\r\n${field}\r\ncontent-length: 0\r\n\r\n`);
    assert.ok(error instanceof TypeError, field);
    assert.match(error.message, message, field);
  }
});

Deno.test("the framing's fields are read in any case, their values without the whitespace around them", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\nTRANSFER-ENCODING: \t chunked \t\r\nConnection: Keep-Alive\r\n" +
      "X-Spaced:   kept inside  \r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      for (let i = 0; i < 2; i++) {
        const response = await client(server.url, post());
        assert.equal(response.headers.get("x-spaced"), "kept inside");
        assert.equal(await response.text(), "abc");
      }
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("an invalid chunk size is an error", async () => {
  for (const size of ["zz", "-1", "", "1 1", "fffffffffffffffff"]) {
    const error = await answerError(
      `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${size}\r\nabc\r\n0\r\n\r\n`,
    );
    assert.ok(error instanceof TypeError, JSON.stringify(size));
    assert.match(error.message, /chunk size/);
  }
});

Deno.test("chunk data without its CRLF is an error", async () => {
  const error = await answerError(
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
  );
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /CRLF/);
});

Deno.test("conflicting content-length values are an error", async () => {
  for (const fields of ["content-length: 2\r\ncontent-length: 3", "content-length: 2, 3"]) {
    const error = await answerError(`HTTP/1.1 200 OK\r\n${fields}\r\n\r\nok`);
    assert.ok(error instanceof TypeError, fields);
    assert.match(error.message, /conflicting content-length/);
  }
});

Deno.test("repeated equal content-length values are one length", async () => {
  await withServer(
    answering(() => "HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\ncontent-length: 2\r\n\r\nok"),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
    },
  );
});

Deno.test("a content-length that is not a number is an error", async () => {
  const error = await answerError("HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nok");
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /content-length/);
});

Deno.test("obsolete line folding in response headers is an error", async () => {
  const error = await answerError(
    "HTTP/1.1 200 OK\r\nx-a: one\r\n two\r\ncontent-length: 0\r\n\r\n",
  );
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /folding/);
});

Deno.test("a transfer coding other than chunked is an error", async () => {
  const error = await answerError("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /transfer-encoding/);
});

Deno.test("a content coding other than gzip or deflate is an error", async () => {
  const error = await answerError(
    "HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 0\r\n\r\n",
  );
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /content-encoding/);
});

Deno.test("a 101 Switching Protocols is an error", async () => {
  const error = await answerError("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n");
  assert.ok(error instanceof TypeError);
  assert.match(error.message, /101/);
});

Deno.test("transfer-encoding and content-length together: chunked framing, connection not reused", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      assert.equal(await (await client(server.url, post())).text(), "ok");
      await server.peers[0].clientClosed();
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("a CR or LF in a header value throws a TypeError before connecting", async () => {
  await withServer(answering(() => "HTTP/1.1 204 No Content\r\n\r\n"), async (server, client) => {
    for (const value of ["a\r\nx-injected: 1", "a\nb", "a\rb", "a\0b"]) {
      await assert.rejects(
        client(server.url, post("{}", { headers: { "x-note": value } })),
        TypeError,
      );
    }
    await assert.rejects(
      client(server.url, post("{}", { headers: { "bad name": "x" } })),
      TypeError,
    );
    await assert.rejects(
      client(server.url, post("{}", { headers: { "content-length": "1" } })),
      TypeError,
    );
    assert.equal(server.accepted, 0);
  });
});

Deno.test("a 100 Continue before the 200 is skipped", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" +
      "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    ),
    async (server, client) => {
      const response = await client(server.url, post());
      assert.equal(response.status, 200);
      assert.equal(response.headers.has("link"), false);
      assert.equal(await response.text(), "ok");
    },
  );
});

Deno.test("204 and HEAD answers have no body, and their connection is reused", async () => {
  await withServer(
    answering((request) =>
      request.head.startsWith("HEAD")
        ? "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"
        : "HTTP/1.1 204 No Content\r\n\r\n"
    ),
    async (server, client) => {
      const noContent = await client(server.url, post());
      assert.equal(noContent.status, 204);
      assert.equal(noContent.body, null);
      const head = await client(server.url, { method: "HEAD" });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("content-length"), "1000");
      assert.equal(head.body, null);
      assert.equal(await (await client(server.url, post())).text(), "");
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("an empty content-length body is an empty stream, and its connection is reused", async () => {
  await withServer(
    answering(() => "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
    async (server, client) => {
      const response = await client(server.url, post());
      assert.ok(response.body);
      assert.equal(client.idleConnections(), 1, "pooled without waiting for a read");
      assert.equal(await response.text(), "");
    },
  );
});

Deno.test("a gzip- or deflate-encoded body is decoded", async () => {
  const text = "a compressed answer, ".repeat(50);
  const encoded = { gzip: await gzip(text, "gzip"), deflate: await gzip(text, "deflate") };
  await withServer(
    answering((request) => {
      const format = request.body as "gzip" | "deflate";
      const bytes = encoded[format];
      const head = `HTTP/1.1 200 OK\r\ncontent-encoding: ${format}\r\n` +
        `content-length: ${bytes.length}\r\n\r\n`;
      const out = new Uint8Array(head.length + bytes.length);
      out.set(encoder.encode(head));
      out.set(bytes, head.length);
      return out;
    }),
    async (server, client) => {
      assert.equal(await (await client(server.url, post("gzip"))).text(), text);
      const response = await client(server.url, post("deflate"));
      const events = response.body!.getReader({ mode: "byob" }); // still a byte stream
      let read = "";
      for (;;) {
        const { value, done } = await events.read(new Uint8Array(256));
        if (done) break;
        read += decoder.decode(value, { stream: true });
      }
      assert.equal(read, text);
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("with a proxy in the environment, the global fetch answers", async () => {
  const calls: string[] = [];
  const fallback = (url: string) => {
    calls.push(url);
    return Promise.resolve(new Response("via fetch"));
  };
  for (const name of ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"]) {
    const client = createHttp1Fetch({ env: { [name]: "http://proxy.invalid:3128" }, fallback });
    const response = await client("https://api.openai.com/v1/chat/completions", post());
    assert.equal(await response.text(), "via fetch");
  }
  assert.equal(calls.length, 3);
});

Deno.test("a scheme other than http or https goes to the global fetch", async () => {
  const calls: string[] = [];
  const client = createHttp1Fetch({
    env: {},
    fallback: (url) => {
      calls.push(url);
      return Promise.resolve(new Response("via fetch"));
    },
  });
  assert.equal(await (await client("data:text/plain,hi", { method: "GET" })).text(), "via fetch");
  assert.deepEqual(calls, ["data:text/plain,hi"]);
});

const TLS_DIR = new URL("../../../tests/fixtures/tls/", import.meta.url);
const tlsFile = (name: string) => Deno.readTextFileSync(new URL(name, TLS_DIR));

/** An https server on 127.0.0.1 that answers every request on a connection with `ok`. */
function tlsServer() {
  const listener = Deno.listenTls({
    hostname: "127.0.0.1",
    port: 0,
    cert: tlsFile("server.pem"),
    key: tlsFile("server.key"),
    alpnProtocols: ["http/1.1"],
  });
  const seen = { connections: 0, alpn: [] as (string | null)[] };
  const open: Deno.TlsConn[] = [];
  (async () => {
    for await (const conn of listener) {
      seen.connections++;
      open.push(conn);
      (async () => {
        const handshake = await conn.handshake();
        seen.alpn.push(handshake.alpnProtocol);
        const buffer = new Uint8Array(65_536);
        let text = "";
        for (;;) {
          const n = await conn.read(buffer);
          if (n === null) return;
          text += new TextDecoder().decode(buffer.subarray(0, n));
          while (text.includes("\r\n\r\n")) {
            const end = text.indexOf("\r\n\r\n") + 4;
            const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? 0);
            if (text.length < end + length) break;
            text = text.slice(end + length);
            await conn.write(
              new TextEncoder().encode("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            );
          }
        }
      })().catch(() => {});
    }
  })().catch(() => {});
  return {
    url: `https://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/v1/chat/completions`,
    seen,
    close() {
      listener.close();
      for (const conn of open) {
        try {
          conn.close();
        } catch {
          // already closed
        }
      }
    },
  };
}

Deno.test("https: the server's certificate is verified, ALPN says http/1.1, and the TLS connection is reused", async () => {
  const server = tlsServer();
  const client = createHttp1Fetch({ caCerts: [tlsFile("ca.pem")], env: {} });
  try {
    for (let i = 0; i < 3; i++) {
      const res = await client(server.url, { method: "POST", headers: {}, body: "{}" });
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "ok");
    }
    assert.equal(server.seen.connections, 1);
    assert.deepEqual(server.seen.alpn, ["http/1.1"]);
  } finally {
    client.closeIdle();
    server.close();
  }
});

Deno.test("https: a server whose certificate no trusted authority signed is refused", async () => {
  const server = tlsServer();
  const client = createHttp1Fetch({ env: {} });
  try {
    await assert.rejects(
      client(server.url, { method: "POST", headers: {}, body: "{}" }),
      (error: unknown) =>
        // The wording is the TLS library's; that it is about the certificate is ours.
        error instanceof TypeError && /certificate/i.test(String(error.message)),
    );
  } finally {
    client.closeIdle();
    server.close();
  }
});

/**
 * A server that reads a request's head only, then answers 413 at once: and closes (`close`), or
 * keeps the connection without reading until the client closes it (`keep`). Not a Peer, which
 * reads everything that arrives.
 */
function earlyAnswerServer(then: "close" | "keep") {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const state = { clientClosed: false };
  const served = (async () => {
    const conn = await listener.accept();
    const buffer = new Uint8Array(4096);
    let head = "";
    while (!head.includes("\r\n\r\n")) {
      const n = await conn.read(buffer);
      if (n === null) break;
      head += decoder.decode(buffer.subarray(0, n));
    }
    const answer = '{"error":{"message":"request too large"}}';
    const close = then === "close" ? "connection: close\r\n" : "";
    await conn.write(
      encoder.encode(
        `HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: ${answer.length}\r\n${close}\r\n${answer}`,
      ),
    );
    if (then === "keep") {
      // Reads nothing more for a while, then drains until the client closes.
      await sleep(200);
      while (await conn.read(new Uint8Array(1 << 20)).catch(() => null) !== null) { /* drain */ }
      state.clientClosed = true;
    }
    conn.close();
  })();
  const url = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/v1/chat/completions`;
  return { url, state, served, close: () => listener.close() };
}

Deno.test("a server that answers a large body early (413) and closes without reading it: the answer is returned, not the failed write", async () => {
  const server = earlyAnswerServer("close");
  const client = createHttp1Fetch({ env: {} });
  try {
    const res = await client(server.url, post("x".repeat(16 * 1024 * 1024), { signal: bounded() }));
    assert.equal(res.status, 413);
    assert.match(await res.text(), /request too large/);
  } finally {
    await server.served;
    server.close();
    client.closeIdle();
  }
});

Deno.test("a server that answers a large body early (413) and keeps the connection without reading: the answer is returned at once, and the connection closed after it", async () => {
  const server = earlyAnswerServer("keep");
  const client = createHttp1Fetch({ env: {} });
  try {
    // The guard is generous; the answer must come long before it.
    const res = await client(server.url, post("x".repeat(16 * 1024 * 1024), { signal: bounded() }));
    assert.equal(res.status, 413);
    assert.match(await res.text(), /request too large/);
    assert.equal(client.idleConnections(), 0, "not returned to the pool");
  } finally {
    // A connection wrongly kept in the pool would hold the server until its idle timeout.
    client.closeIdle();
    await server.served;
    assert.ok(server.state.clientClosed);
    server.close();
  }
});

// The answer without a Response (`client.answer`): what the providers read.

/** Reads a body reader to its end through a buffer of `size` bytes; the reads' texts. */
async function readAll(body: BodyReader, size = 64): Promise<string[]> {
  const reads: string[] = [];
  for (;;) {
    const { value, done } = await body.read(new Uint8Array(size));
    if (done) return reads;
    reads.push(decoder.decode(value));
  }
}

function bodyReader(answer: Http1Answer): BodyReader {
  assert.ok(answer.body && !(answer.body instanceof ReadableStream), "a body reader");
  return answer.body;
}

Deno.test("answer: an identity body is read into the caller's buffer, chunks that arrived together in one read, and its connection is reused", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" +
      "3\r\nabc\r\n3\r\ndef\r\n4\r\nghij\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      for (let i = 0; i < 2; i++) {
        const answer = await client.answer(server.url, post());
        assert.equal(answer.status, 200);
        assert.equal(answer.ok, true);
        assert.deepEqual(await readAll(bodyReader(answer)), ["abcdefghij"]);
      }
      assert.equal(server.accepted, 1);
      assert.equal(client.idleConnections(), 1);
    },
  );
});

Deno.test("answer: a buffer smaller than the body gets it in pieces that fit", async () => {
  await withServer(
    answering(() => "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789"),
    async (server, client) => {
      const answer = await client.answer(server.url, post());
      assert.deepEqual(await readAll(bodyReader(answer), 4), ["0123", "4567", "89"]);
    },
  );
});

Deno.test("answer: header fields are found in any case, repeated ones joined as Headers joins them", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nx-list: a\r\nX-List: b\r\n" +
      "content-length: 0\r\n\r\n"
    ),
    async (server, client) => {
      const answer = await client.answer(server.url, post());
      assert.equal(answer.status, 429);
      assert.equal(answer.statusText, "Too Many Requests");
      assert.equal(answer.ok, false);
      assert.equal(answer.headers.get("retry-after"), "3");
      assert.equal(answer.headers.get("X-LIST"), "a, b");
      assert.equal(answer.headers.get("absent"), null);
      assert.deepEqual(await readAll(bodyReader(answer)), []);
    },
  );
});

Deno.test("answer: a 204 has no body and its connection is reused", async () => {
  await withServer(
    answering(() => "HTTP/1.1 204 No Content\r\n\r\n"),
    async (server, client) => {
      for (let i = 0; i < 2; i++) {
        assert.equal((await client.answer(server.url, post())).body, null);
      }
      assert.equal(server.accepted, 1);
    },
  );
});

Deno.test("answer: a gzip-encoded body comes decoded, as a byte stream", async () => {
  const text = "a compressed answer, ".repeat(50);
  const bytes = await gzip(text, "gzip");
  await withServer(
    answering(() => {
      const head =
        `HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: ${bytes.length}\r\n\r\n`;
      const out = new Uint8Array(head.length + bytes.length);
      out.set(encoder.encode(head));
      out.set(bytes, head.length);
      return out;
    }),
    async (server, client) => {
      const answer = await client.answer(server.url, post());
      assert.ok(answer.body instanceof ReadableStream);
      assert.equal(await new Response(answer.body).text(), text);
    },
  );
});

Deno.test("answer: an event stream parses straight from the body reader", async () => {
  await withServer(
    answering(() =>
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
      "9\r\ndata: a\n\n\r\n9\r\ndata: b\n\n\r\n0\r\n\r\n"
    ),
    async (server, client) => {
      const answer = await client.answer(server.url, post());
      const events: string[] = [];
      for await (const batch of parseSse(bodyReader(answer))) {
        for (const event of batch) events.push(event.data);
      }
      assert.deepEqual(events, ["a", "b"]);
      assert.equal(client.idleConnections(), 1);
    },
  );
});
