import assert from "node:assert/strict";
import {
  closesConnections,
  ConnectionSteering,
  GATHER_BELOW,
  LoadBoard,
  SPREAD_ABOVE,
} from "./connection_steering.ts";

const info = {} as Deno.ServeHandlerInfo<Deno.NetAddr>;
const request = new Request("http://localhost/");

/** The second of two lightly loaded workers, closing: the first's share is there and small. */
function gatheringSecond(clock?: () => number) {
  const board = new LoadBoard(LoadBoard.memory(2));
  board.write(0, 0.1);
  const steering = new ConnectionSteering(board, 1, { clock });
  steering.sample(250, 0);
  return { board, steering };
}

Deno.test("a worker other than the first closes its connections while the workers' shares sum below the gather line", () => {
  assert.equal(closesConnections(1, [0.1, 0.2]), true);
  assert.equal(closesConnections(3, [0.1, 0.1, 0.1, 0.1]), true);
  assert.equal(closesConnections(1, [GATHER_BELOW / 2, GATHER_BELOW / 2]), false);
});

Deno.test("the first worker never closes a connection to gather a light load", () => {
  assert.equal(closesConnections(0, [0.1, 0.1]), false);
  assert.equal(closesConnections(0, [0, 0]), false);
});

Deno.test("between the gather line and the spread line no worker closes a connection", () => {
  const shares = [0.5, 0.3];
  assert.equal(closesConnections(0, shares), false);
  assert.equal(closesConnections(1, shares), false);
});

Deno.test("the first worker, busy past the spread line, closes its connections while another worker has room", () => {
  assert.equal(closesConnections(0, [SPREAD_ABOVE + 0.1, 0.1]), true);
  assert.equal(closesConnections(0, [0.95, 0.9, 0.2]), true);
  // The others do not gather then: the process is not lightly loaded.
  assert.equal(closesConnections(1, [0.95, 0.1]), false);
});

Deno.test("the first worker keeps its connections when no other worker has room", () => {
  assert.equal(closesConnections(0, [0.95, 0.9]), false);
  assert.equal(closesConnections(0, [0.95, null]), false);
});

Deno.test("no connection is steered towards a first worker whose share is absent", () => {
  assert.equal(closesConnections(1, [null, 0.1]), false);
});

Deno.test("a share older than the stale line reads as absent, and a cleared worker at once", () => {
  const board = new LoadBoard(LoadBoard.memory(3));
  const now = 1_800_000_000_000;
  board.write(0, 0.25, now);
  board.write(1, 0.5, now - 1_000);
  board.write(2, 0.75, now - 2_000);
  assert.deepEqual(board.shares(now), [0.25, 0.5, null]);
  board.clear(0);
  assert.deepEqual(board.shares(now), [null, 0.5, null]);
});

Deno.test("a sample writes the thread's busy share and decides from every worker's", () => {
  const board = new LoadBoard(LoadBoard.memory(2));
  const second = new ConnectionSteering(board, 1);
  const first = new ConnectionSteering(board, 0);
  // 25 ms of CPU over 250 ms of wall time: a tenth of a core, from a start at 0 ms and 0 CPU.
  first.sample(250, 25);
  second.sample(250, 25);
  assert.deepEqual(board.shares(), [0.1, 0.1]);
  assert.equal(second.closing, true);
  assert.equal(first.closing, false);
  // Then the first worker gets busy: 240 ms of CPU in the next 250 ms. The process is no longer
  // light, and the second worker has room: the first spreads, the second stops gathering.
  first.sample(500, 265);
  second.sample(500, 50);
  assert.deepEqual(board.shares(), [0.96, 0.1]);
  assert.equal(second.closing, false);
  first.sample(750, 505);
  assert.equal(first.closing, true);
});

Deno.test("a stopped worker's share is absent, and it closes nothing", () => {
  const board = new LoadBoard(LoadBoard.memory(2));
  const first = new ConnectionSteering(board, 0);
  const second = new ConnectionSteering(board, 1);
  first.sample(250, 0);
  second.sample(250, 0);
  assert.equal(second.closing, true);
  first.stop();
  second.sample(500, 0);
  assert.equal(second.closing, false);
});

Deno.test("while closing, one response per 25 ms is marked Connection: close and the others pass as they are", async () => {
  let now = 1_000;
  const { steering } = gatheringSecond(() => now);
  assert.equal(steering.closing, true);
  const handler = steering.wrap(() => new Response("ok"));
  assert.equal((await handler(request, info)).headers.get("connection"), "close");
  now += 24;
  assert.equal((await handler(request, info)).headers.get("connection"), null);
  assert.equal(steering.markedResponses, 1);
  now += 1;
  assert.equal((await handler(request, info)).headers.get("connection"), "close");
  assert.equal(steering.markedResponses, 2);
});

Deno.test("a request that closes its connection itself is neither marked nor counted", async () => {
  const { steering } = gatheringSecond();
  const closing = new Request("http://localhost/", { headers: { connection: "Close" } });
  const response = await steering.wrap(() => new Response("ok"))(closing, info);
  assert.equal(response.headers.get("connection"), null);
  assert.equal(steering.markedResponses, 0);
});

Deno.test("a worker stops marking with its next response once the first worker is gone from the board", async () => {
  const { board, steering } = gatheringSecond();
  assert.equal(steering.closing, true);
  board.clear(0);
  const response = await steering.wrap(() => new Response("ok"))(request, info);
  assert.equal(response.headers.get("connection"), null);
  assert.equal(steering.markedResponses, 0);
});

Deno.test("a response whose headers cannot change is copied to carry Connection: close", async () => {
  const { steering } = gatheringSecond();
  const handler = steering.wrap(() => Response.redirect("http://localhost/elsewhere", 302));
  const response = await handler(request, info);
  assert.equal(response.status, 302);
  assert.equal(response.headers.get("location"), "http://localhost/elsewhere");
  assert.equal(response.headers.get("connection"), "close");
});

Deno.test("while not closing, the handler's own response is returned untouched", async () => {
  const steering = new ConnectionSteering(new LoadBoard(LoadBoard.memory(2)), 1);
  const answer = new Response("ok");
  const response = await steering.wrap(() => answer)(request, info);
  assert.equal(response, answer);
  assert.equal(steering.markedResponses, 0);
});
