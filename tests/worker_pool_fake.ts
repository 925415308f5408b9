/// <reference lib="deno.worker" />
/**
 * A stand-in for worker.ts that speaks the supervisor's protocol (lib/ops/workers.ts) without a
 * service. The test steers it and reads what it saw through the process environment, which
 * workers share with their parent: `FAKE_WORKER_FAIL_START=<index>` fails that worker's start,
 * `FAKE_WORKER_CRASH=<index>` makes it fail once after it listens; it records the port it was
 * given as `FAKE_WORKER_PORT_<index>`, the catalog as `FAKE_WORKER_CATALOG_<index>`, and counts its
 * starts in `FAKE_WORKER_STARTS_<index>`.
 * `FAKE_WORKER_ASK=<index>` has that worker ask for its siblings' metrics once it listens and
 * `FAKE_WORKER_ASK_NOW` is set, and record what it got as `FAKE_WORKER_SIBLINGS_<index>`. Each worker counts `index + 1` requests.
 * At each start a worker takes and ends a commit turn of the wallet "app_locked", and records in
 * `FAKE_WORKER_LOCK_TAKEOVERS_<index>_<start>` how many locks it took over after 50 ms; a crashing worker
 * takes that turn again before it fails and never ends it.
 */
import { CommitLocks } from "@/lib/billing/mod.ts";
import type { FromWorker, ToWorker } from "@/lib/ops/mod.ts";

const send = (message: FromWorker) => self.postMessage(message);
let index = -1;

self.onmessage = async (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  switch (message.type) {
    case "start": {
      index = message.index;
      const starts = Number(Deno.env.get(`FAKE_WORKER_STARTS_${index}`) ?? 0) + 1;
      Deno.env.set(`FAKE_WORKER_STARTS_${index}`, String(starts));
      Deno.env.set(`FAKE_WORKER_PORT_${index}`, String(message.port));
      Deno.env.set(`FAKE_WORKER_CATALOG_${index}`, JSON.stringify(message.catalogSource));
      if (Deno.env.get("FAKE_WORKER_FAIL_START") === String(index)) {
        throw new Error("cannot open KV");
      }
      // A probe with an owner of its own: a restarted worker would count its predecessor's lock
      // as its own.
      const probe = new CommitLocks(message.commitLocks, index + 10, { waitMs: 50 });
      (await probe.begin("app_locked")).end(false);
      Deno.env.set(`FAKE_WORKER_LOCK_TAKEOVERS_${index}_${starts}`, String(probe.takenOver));
      send({ type: "listening", port: message.port || 41_234 });
      if (Deno.env.get("FAKE_WORKER_ASK") === String(index)) {
        // Once the test says its siblings run: a sibling still loading on a busy machine answers
        // after the pool's wait, which gives its last snapshot (none yet).
        const ask = () =>
          Deno.env.get("FAKE_WORKER_ASK_NOW")
            ? send({ type: "siblings", id: 1 })
            : setTimeout(ask, 10);
        ask();
      }
      if (Deno.env.get("FAKE_WORKER_CRASH") === String(index)) {
        Deno.env.delete("FAKE_WORKER_CRASH");
        await new CommitLocks(message.commitLocks, index).begin("app_locked");
        setTimeout(() => {
          throw new Error("worker crashed");
        }, 20);
      }
      return;
    }
    case "siblings":
      Deno.env.set(`FAKE_WORKER_SIBLINGS_${index}`, JSON.stringify(message.snapshots));
      return;
    case "stop":
      Deno.env.set(`FAKE_WORKER_STOPPED_${index}`, message.signal);
      send({ type: "stopped" });
      return;
    case "snapshot":
      send({
        type: "snapshot",
        id: message.id,
        snapshot: { requests_total: [{ labels: {}, value: index + 1 }] },
      });
      return;
  }
};
