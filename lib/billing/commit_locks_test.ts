import assert from "node:assert/strict";
import { CommitLocks } from "./commit_locks.ts";

Deno.test("a wallet's commit turn waits for the turn of another worker on the same memory", async () => {
  const memory = CommitLocks.memory(8);
  const first = await new CommitLocks(memory, 0).begin("app_1");
  let secondBegan = false;
  const second = new CommitLocks(memory, 1).begin("app_1").then((turn) => {
    secondBegan = true;
    return turn;
  });
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(secondBegan, false);
  first.end(false);
  (await second).end(false);
  assert.equal(secondBegan, true);
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

Deno.test("the supervisor frees the turns of a dead worker, and only its", async () => {
  const memory = CommitLocks.memory(8);
  const dead = new CommitLocks(memory, 3);
  await dead.begin("app_1");
  let began = false;
  const waiting = new CommitLocks(memory, 1).begin("app_1").then((turn) => {
    began = true;
    return turn;
  });
  CommitLocks.releaseOwner(memory, 0);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(began, false);
  CommitLocks.releaseOwner(memory, 3);
  (await waiting).end(false);
  assert.equal(began, true);
});

Deno.test("a turn held past the wait goes ahead unlocked and is counted", async () => {
  const memory = CommitLocks.memory(8);
  await new CommitLocks(memory, 0).begin("app_1");
  const late = new CommitLocks(memory, 1, { waitMs: 30 });
  const turn = await late.begin("app_1");
  assert.equal(late.timeouts, 1);
  // Ending a turn it never held must not free the holder's.
  turn.end(true);
  const third = new CommitLocks(memory, 2, { waitMs: 30 });
  (await third.begin("app_1")).end(false);
  assert.equal(third.timeouts, 1);
});
