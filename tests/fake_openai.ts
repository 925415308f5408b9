/**
 * A loopback OpenAI-compatible upstream whose behaviour each request picks in its last user
 * message, so one server can serve every fault at once:
 *   "cut:N"     streams N content chunks, then drops the connection (no finish, no [DONE]);
 *   "status:S"  answers HTTP status S with an OpenAI-style error body;
 *   "quote-key:S" the same, quoting the Authorization header it got in the message;
 *   "slow:MS …" waits MS between chunks (before the answer, when not streaming);
 *   "wait:MS …" waits MS before answering at all, then reads the rest of the message;
 *   anything else: the words of the message, one chunk each, then usage and [DONE].
 */
import { serveLoopback } from "./helpers.ts";

export interface FakeOpenAi {
  url: string;
  /** Every Authorization header and body received, to prove what reached the upstream. */
  received: { authorization: string | null; body: string }[];
  counts: { ok: number; cut: number; status: number };
  close(): Promise<void>;
}

const encoder = new TextEncoder();

/** Faults the upstream picks by itself, whatever the request: a share of failures and of cuts. */
export interface Chaos {
  failShare: number;
  cutShare: number;
}

const CHAOS_STATUSES = [500, 502, 503, 429];

export function startFakeOpenAi(options: { chaos?: Chaos; keepBodies?: boolean } = {}): FakeOpenAi {
  const received: FakeOpenAi["received"] = [];
  const counts = { ok: 0, cut: 0, status: 0 };
  const keepBodies = options.keepBodies ?? true;
  const server = serveLoopback(async (request) => {
    const text = await request.text();
    if (keepBodies) {
      received.push({ authorization: request.headers.get("authorization"), body: text });
    }
    const body = JSON.parse(text);
    let last: string = body.messages.findLast((m: { role: string }) => m.role === "user")
      ?.content ?? "";
    const chaos = options.chaos;
    if (chaos) {
      const roll = Math.random();
      if (roll < chaos.failShare) {
        last = `status:${CHAOS_STATUSES[Math.floor(Math.random() * CHAOS_STATUSES.length)]}`;
      } else if (body.stream && roll < chaos.failShare + chaos.cutShare) {
        last = `cut:${Math.floor(Math.random() * 8)} ${last}`;
      }
    }
    const wait = /^wait:(\d+) /.exec(last);
    if (wait) {
      // Time to the first byte, as a model thinking before it answers.
      await sleep(Number(wait[1]), request.signal);
      last = last.slice(wait[0].length);
    }
    const status = /^(status|quote-key):(\d{3})/.exec(last);
    if (status) {
      counts.status++;
      // Some upstreams quote the credentials they refused in their error message.
      const message = status[1] === "quote-key"
        ? `Incorrect API key provided: ${request.headers.get("authorization")}`
        : `fake upstream failure ${status[2]}`;
      return Response.json(
        { error: { message, type: "server_error" } },
        { status: Number(status[2]) },
      );
    }
    const cut = /^cut:(\d+)/.exec(last);
    const slow = /^slow:(\d+)/.exec(last);
    const delayMs = slow ? Number(slow[1]) : 0;
    const words = last.split(/\s+/).filter(Boolean).slice(0, body.max_tokens ?? 2048);
    const usage = {
      prompt_tokens: 10,
      completion_tokens: words.length,
      total_tokens: 10 + words.length,
    };
    const base = { id: "chatcmpl-fake", created: 1, model: body.model };
    if (!body.stream) {
      if (delayMs > 0) await sleep(delayMs, request.signal);
      counts.ok++;
      return Response.json({
        ...base,
        object: "chat.completion",
        choices: [{
          index: 0,
          message: { role: "assistant", content: words.join(" ") },
          finish_reason: "stop",
        }],
        usage,
      });
    }
    const chunk = (delta: unknown, finish: string | null) =>
      encoder.encode(
        `data: ${
          JSON.stringify({
            ...base,
            object: "chat.completion.chunk",
            choices: [{ index: 0, delta, finish_reason: finish }],
          })
        }\n\n`,
      );
    const cutAfter = cut ? Number(cut[1]) : Infinity;
    let sent = 0;
    return new Response(
      new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (delayMs > 0) await sleep(delayMs, request.signal);
          if (sent === cutAfter) {
            counts.cut++;
            // Erroring the body makes the server drop the connection mid-response.
            controller.error(new Error("fake upstream killed mid-stream"));
            return;
          }
          if (sent < words.length) {
            controller.enqueue(chunk({ content: (sent ? " " : "") + words[sent] }, null));
            sent++;
            return;
          }
          counts.ok++;
          controller.enqueue(chunk({}, "stop"));
          controller.enqueue(
            encoder.encode(
              `data: ${
                JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })
              }\n\n`,
            ),
          );
          controller.enqueue(encoder.encode("data: [DONE]\n\n"));
          controller.close();
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    );
  });
  return { url: server.url, received, counts, close: server.close };
}

/** A wait that ends early when the caller goes away, so shutting the server down never hangs. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}
