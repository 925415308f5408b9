/**
 * A webhook's POST over a connection to the address its name was checked at: TLS verifies the
 * URL's name, but the name is not looked up again. With fetch it would be, and a name whose
 * record changes between the check and the send (DNS rebinding) would have Tollbooth post to an
 * address inside its own network. Only the status is read: the deliverer keeps no body.
 */

/** A status line longer than this is not an HTTP server's. */
const MAX_HEAD_BYTES = 8 * 1024;
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3})(?: |\r?$)/;

const encoder = new TextEncoder();

export interface PinnedPost {
  /** The IP address the name was checked at (v6 without brackets). */
  address: string;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
  /** Trusted roots besides the system's (tests). */
  caCerts?: string[];
}

/** Sends the POST and answers the response's status. */
export async function postPinned(url: URL, post: PinnedPost): Promise<number> {
  const secure = url.protocol === "https:";
  const port = Number(url.port) || (secure ? 443 : 80);
  const { signal } = post;
  signal.throwIfAborted();
  const tcp = await Deno.connect({ hostname: post.address, port, signal });
  let conn: Deno.Conn = tcp;
  const onAbort = () => {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    if (secure) {
      conn = await Deno.startTls(tcp, {
        hostname: url.hostname.replace(/^\[|\]$/g, ""),
        alpnProtocols: ["http/1.1"],
        ...(post.caCerts ? { caCerts: post.caCerts } : {}),
      });
    }
    const body = encoder.encode(post.body);
    const fields = Object.entries(post.headers).map(([name, value]) => `${name}: ${value}\r\n`);
    const head = `POST ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n` +
      fields.join("") + `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
    await writeAll(conn, encoder.encode(head));
    await writeAll(conn, body);
    return await readStatus(conn);
  } catch (error) {
    throw signal.aborted ? signal.reason : error;
  } finally {
    signal.removeEventListener("abort", onAbort);
    onAbort();
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array) {
  let written = 0;
  while (written < bytes.length) written += await conn.write(bytes.subarray(written));
}

/** The status of the final response (interim 1xx heads, such as 103 Early Hints, skipped). */
async function readStatus(conn: Deno.Conn): Promise<number> {
  const buffer = new Uint8Array(MAX_HEAD_BYTES);
  let filled = 0;
  let start = 0;
  for (;;) {
    const lineEnd = buffer.subarray(start, filled).indexOf(10);
    if (lineEnd !== -1) {
      const line = new TextDecoder().decode(buffer.subarray(start, start + lineEnd));
      const status = STATUS_LINE.exec(line);
      if (!status) throw new Error(`invalid HTTP response: ${JSON.stringify(line.slice(0, 80))}`);
      const code = Number(status[1]);
      if (code >= 200) return code;
      const headEnd = headEndAfter(buffer.subarray(0, filled), start);
      if (headEnd !== -1) {
        start = headEnd;
        continue;
      }
    }
    if (filled === buffer.length) throw new Error("the response's head is too large");
    const read = await conn.read(buffer.subarray(filled));
    if (read === null) throw new Error("the endpoint closed the connection before a status line");
    filled += read;
  }
}

/** Where the head starting at `from` ends (after its blank line), or -1 when it has not yet. */
function headEndAfter(bytes: Uint8Array, from: number): number {
  for (let i = from; i + 1 < bytes.length; i++) {
    if (bytes[i] !== 10) continue;
    if (bytes[i + 1] === 10) return i + 2;
    if (bytes[i + 1] === 13 && i + 2 < bytes.length && bytes[i + 2] === 10) return i + 3;
  }
  return -1;
}
