import assert from "node:assert/strict";
import { within } from "@/lib/core/mod.ts";
import { CommitLocks } from "./commit_locks.ts";

Deno.test("a wallet's commit turn waits for the turn of another worker on the same memory", async () => {
  const memory = CommitLocks.memory(8);
  const first = await new CommitLocks(memory, 0).begin("app_1");
  const second = new CommitLocks(memory, 1).begin("app_1");
  assert.equal(await within(second, 20), false);
  first.end(false);
  (await second).end(false);
});

Deno.test("a worker whose next batch is ready keeps the lock at most 4 turns in a row while another waits, then hands it over", async () => {
  const memory = CommitLocks.memory(8);
  const a = new CommitLocks(memory, 0);
  const b = new CommitLocks(memory, 1);
  const order: string[] = [];
  const first = await a.begin("app_1");
  order.push("a");
  const waiting = b.begin("app_1").then((turn) => {
    order.push("b");
    turn.end(false);
  });
  await within(waiting, 10);
  first.end(false);
  // Its next batches ask at once, each in the task that ended the turn before.
  for (let i = 0; i < 6; i++) {
    const turn = await a.begin("app_1");
    order.push("a");
    turn.end(false);
  }
  await waiting;
  assert.ok(order.indexOf("b") <= 4, order.join(" "));
  assert.equal(a.takenOver + b.takenOver, 0);
});

Deno.test("turns of one worker on one slot queue in order and never take the lock from each other", async () => {
  const memory = CommitLocks.memory(1); // every app in the one slot
  const locks = new CommitLocks(memory, 0, { waitMs: 30 });
  const order: number[] = [];
  await Promise.all([1, 2, 3].map(async (n) => {
    const turn = await locks.begin(`app_${n}`);
    order.push(n);
    await new Promise((r) => setTimeout(r, 40)); // longer than the wait: no take-over from itself
    turn.end(true);
  }));
  assert.deepEqual(order, [1, 2, 3]);
  assert.equal(locks.takenOver, 0);
});

Deno.test("a committed turn bumps the wallet's generation; one that committed nothing leaves it", async () => {
  const memory = CommitLocks.memory(8);
  const a = new CommitLocks(memory, 0);
  const b = new CommitLocks(memory, 1);
  const turn = await a.begin("app_1");
  const after = turn.end(true);
  assert.equal(after, turn.generation + 1);
  const next = await b.begin("app_1");
  assert.equal(next.generation, after);
  assert.equal(next.end(false), after);
  assert.equal((await a.begin("app_1")).generation, after);
});

Deno.test("a commit whose generation another writer bumped too reports its memory stale (-1)", async () => {
  const memory = CommitLocks.memory(8);
  const turn = await new CommitLocks(memory, 0).begin("app_1");
  // A worker that took the lock over from a hung holder committed meanwhile.
  const words = new Int32Array(memory);
  for (let i = 1; i < words.length; i += 3) Atomics.add(words, i, 1);
  assert.equal(turn.end(true), -1);
});

Deno.test("the supervisor frees the turns of a dead worker, and only its", async () => {
  const memory = CommitLocks.memory(8);
  await new CommitLocks(memory, 3).begin("app_1");
  const waiting = new CommitLocks(memory, 1).begin("app_1");
  CommitLocks.releaseOwner(memory, 0);
  assert.equal(await within(waiting, 20), false);
  CommitLocks.releaseOwner(memory, 3);
  (await waiting).end(false);
});

Deno.test("a lock held past the wait is taken over and counted; its old holder's end leaves it alone", async () => {
  const memory = CommitLocks.memory(8);
  const hung = await new CommitLocks(memory, 0).begin("app_1");
  const late = new CommitLocks(memory, 1, { waitMs: 30 });
  const turn = await late.begin("app_1");
  assert.equal(late.takenOver, 1);
  hung.end(true);
  const third = new CommitLocks(memory, 2, { waitMs: 1_000 });
  const waiting = third.begin("app_1");
  assert.equal(await within(waiting, 20), false, "still the late turn's");
  turn.end(false);
  (await waiting).end(false);
  assert.equal(third.takenOver, 0);
});

Deno.test("an owner outside the waiting mask is refused", () => {
  assert.throws(() => new CommitLocks(CommitLocks.memory(8), 31), RangeError);
});

Deno.test("with three workers, one that waits gets the lock within a bounded number of turns while the other two trade it", async () => {
  const memory = CommitLocks.memory(8);
  const [a, b, c] = [0, 1, 2].map((i) => new CommitLocks(memory, i));
  const order: string[] = [];
  let stop = false;
  const trade = async (locks: CommitLocks, name: string) => {
    while (!stop) {
      const turn = await locks.begin("app_1");
      order.push(name);
      turn.end(false);
      await Promise.resolve();
    }
  };
  const first = await a.begin("app_1");
  const traders = [trade(a, "a"), trade(b, "b")];
  const waiting = c.begin("app_1").then((turn) => {
    order.push("c");
    stop = true;
    turn.end(false);
  });
  await new Promise((r) => setTimeout(r, 10));
  first.end(false);
  await waiting;
  await Promise.all(traders);
  assert.ok(order.indexOf("c") <= 8, order.join(" "));
  assert.equal(a.takenOver + b.takenOver + c.takenOver, 0);
});
