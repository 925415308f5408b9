/**
 * What this machine charges a thread for waking up, measured in a process of its own so that the
 * bench's CPU figures can be read against it: a server at a moderate pace is woken about twice per
 * proxied request (the client's request, the upstream's answer), a saturated one rarely. Prints
 * `{"wakeMicros": …}`: the median CPU (user and system) per wake of a thread that sleeps 2 ms on
 * a timer and does nothing else, over five rounds of 300 wakes.
 *
 *   deno run bench/wake_probe.ts
 */
import process from "node:process";

const ROUNDS = 5;
const WAKES = 300;

const cpuMicros = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

const rounds: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const before = cpuMicros();
  for (let i = 0; i < WAKES; i++) await new Promise((resolve) => setTimeout(resolve, 2));
  rounds.push((cpuMicros() - before) / WAKES);
}
console.log(JSON.stringify({ wakeMicros: rounds.sort((a, b) => a - b)[ROUNDS >> 1] }));
