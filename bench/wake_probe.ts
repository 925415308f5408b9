/**
 * What this machine charges a process for being woken by the network, measured apart from any
 * gateway so that the bench's CPU figures can be read against it. A child process echoes one-byte
 * messages over loopback TCP; its CPU per message is measured with one message at a time (it sleeps
 * before each, as a server at a moderate pace does before each request and again before the
 * upstream's answer) and with 16 connections in flight (it rarely sleeps, as a saturated server).
 * The difference is the price of a wake-up. Linux only: the child's CPU is read from
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds).
 *
 * Prints `{"oneAtATimeMicros": …, "inFlightMicros": …}`, each the median of three rounds.
 *
 *   deno run -A bench/wake_probe.ts
 */
const ROUNDS = 3;
const MESSAGES = 1500;
const IN_FLIGHT = 16;

if (Deno.args[0] === "--echo") {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  console.log(JSON.stringify({ port: (listener.addr as Deno.NetAddr).port }));
  for await (const conn of listener) {
    conn.setNoDelay(true);
    (async () => {
      const buffer = new Uint8Array(64);
      for (let read; (read = await conn.read(buffer)) !== null;) {
        await conn.write(buffer.subarray(0, read));
      }
    })().catch(() => {});
  }
}

/** CPU the process has used, all its threads, in µs. */
function cpuMicros(pid: number): number {
  let nanoseconds = 0;
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    nanoseconds += Number(
      Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/schedstat`).split(" ")[0],
    );
  }
  return nanoseconds / 1000;
}

async function echoes(port: number, connections: number, messages: number) {
  const conns = await Promise.all(
    Array.from({ length: connections }, async () => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      conn.setNoDelay(true);
      return conn;
    }),
  );
  try {
    await Promise.all(conns.map(async (conn) => {
      const message = new Uint8Array(1);
      const answer = new Uint8Array(64);
      for (let i = 0; i < messages / connections; i++) {
        await conn.write(message);
        if (await conn.read(answer) === null) throw new Error("echo closed");
      }
    }));
  } finally {
    for (const conn of conns) conn.close();
  }
}

async function perMessage(pid: number, port: number, connections: number): Promise<number> {
  const rounds: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const before = cpuMicros(pid);
    await echoes(port, connections, MESSAGES);
    rounds.push((cpuMicros(pid) - before) / MESSAGES);
  }
  return rounds.sort((a, b) => a - b)[ROUNDS >> 1];
}

if (Deno.args[0] !== "--echo") {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, "--echo"],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  try {
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the echo process ended before it listened");
      text += value;
    }
    const { port } = JSON.parse(text);
    // Warm the echo's JIT and connections' paths before measuring.
    await echoes(port, IN_FLIGHT, MESSAGES);
    const oneAtATimeMicros = await perMessage(child.pid, port, 1);
    const inFlightMicros = await perMessage(child.pid, port, IN_FLIGHT);
    console.log(JSON.stringify({ oneAtATimeMicros, inFlightMicros }));
  } finally {
    child.kill();
    await child.status;
  }
}
