/**
 * The bench's floor: the least a Deno gateway with Tollbooth's upstream client can cost on this
 * machine. One thread: `Deno.serve` and `createHttp1Fetch` (lib/gateway/providers/http1.ts), the
 * request body read whole and sent on to the upstream, its answer streamed back, nothing else (no
 * key, no wallet, no parsing, no logs). Tollbooth on one worker minus this is what the gateway
 * adds; this minus direct is what the runtime and the extra hop cost.
 *
 *   deno run -A bench/floor.ts --port=18601 --upstream=http://127.0.0.1:18600
 */
import { createHttp1Fetch } from "../lib/gateway/providers/http1.ts";

const arg = (name: string) => Deno.args.find((a) => a.startsWith(`--${name}=`))?.split("=")[1];
const port = Number(arg("port"));
const upstream = arg("upstream")!;
const upstreamFetch = createHttp1Fetch();

Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, async (request) => {
  const url = new URL(request.url);
  if (request.method !== "POST") return new Response("ok");
  const answer = await upstreamFetch(`${upstream}${url.pathname}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-bench" },
    body: await request.text(),
  });
  return new Response(answer.body, {
    status: answer.status,
    headers: { "content-type": answer.headers.get("content-type") ?? "application/json" },
  });
});

console.log(JSON.stringify({ event: "listening", port }));
