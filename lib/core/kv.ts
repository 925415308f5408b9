export const DEFAULT_KV_PATH = "./data/tollbooth.sqlite3";

/** The KV store named by KV_PATH cannot be opened; the message says which and why. */
export class KvOpenError extends Error {}

/**
 * A read or commit met the file's lock held by others past every retry (BUSY_BUDGET_MS and
 * BUSY_MIN_TRIES): it did not run. Routes answer 503 `service_unavailable` with Retry-After.
 */
export class KvBusyError extends Error {}

/**
 * Opens the KV store named by KV_PATH: a file, ":memory:", or a denokv URL (with
 * DENO_KV_ACCESS_TOKEN). Unset, it is the local file, except on Deno Deploy, where it is Deploy's KV.
 */
export async function openKv(path: string | undefined): Promise<Deno.Kv> {
  const deploy = !path && Deno.env.get("DENO_DEPLOYMENT_ID");
  const target = deploy ? undefined : path || DEFAULT_KV_PATH;
  try {
    if (target && target !== ":memory:" && !/^https?:\/\//.test(target)) {
      const dir = target.replace(/[^/]*$/, "");
      if (dir) await Deno.mkdir(dir, { recursive: true });
    }
    return retryWhileBusy(await whileBusy(() => Deno.openKv(target), OPEN_BUSY_BUDGET_MS));
  } catch (error) {
    const what = target === undefined ? "Deno Deploy's KV" : `KV_PATH ${target}`;
    throw new KvOpenError(`${what} cannot be opened: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

const BUSY = /database is (locked|busy)/i;
/**
 * How long a read or commit waits out a held lock before its error is let through: longer than
 * three processes of two workers each took turns at one file's lock (8 tries within about 150 ms
 * gave 58–82 errors a minute there), far shorter than any client's timeout.
 */
const BUSY_BUDGET_MS = 2_000;
/**
 * Opening waits longer: SQLite's own wait (5 s) can run out while another process holds the file
 * for its setup, and two instances starting on a new file at once were seen to refuse one of them
 * ("database is locked") where a second try would have opened it. A start can afford the wait.
 */
const OPEN_BUSY_BUDGET_MS = 15_000;
/**
 * Tries made before the budget may end the wait: on a loaded machine the process itself can stand
 * still for seconds between two tries (a soak beside another suite lost a commit after two), and
 * then the budget was spent without the lock being given a chance to free. With the pauses below,
 * this many tries take at most 0.7 s (0.35 s on average) when the process is not held up.
 */
const BUSY_MIN_TRIES = 20;

/**
 * Several processes on one SQLite file (instances, or an admin command beside a running service)
 * take turns at its write lock, and one that meets it held for a moment is told "database is
 * locked". That statement did not run, so reads, listings, commits, sets and deletes are simply
 * retried. (Were a commit ever
 * applied anyway, retrying it is still harmless: every write here is versionstamp-checked, so the
 * second try fails its check; the wallet resolves such outcomes through its batch marker.)
 */
export function retryWhileBusy(kv: Deno.Kv): Deno.Kv {
  // The operation's commit is replaced (not the operation proxied): a Proxy's trap ran on every
  // builder call of every commit (about 2% of the samples of a profile at 500 req/s).
  const atomic = () => {
    const operation = kv.atomic();
    const commit = operation.commit.bind(operation);
    operation.commit = () => whileBusy(commit);
    return operation;
  };
  return new Proxy(kv, {
    get(target, prop) {
      if (prop === "atomic") return atomic;
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      // A set or delete is as unconditional the second time as the first: retrying it is safe.
      if (prop === "get" || prop === "getMany" || prop === "set" || prop === "delete") {
        return (...args: unknown[]) => whileBusy(() => value.apply(target, args));
      }
      if (prop === "list") {
        return (selector: Deno.KvListSelector, options?: Deno.KvListOptions) =>
          new ListWhileBusy(target, selector, options);
      }
      return value.bind(target);
    },
  });
}

/** Whether `error` is a KvBusyError, as it is or as the cause of another (the wallet's own). */
export function causedByBusyKv(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof KvBusyError) return true;
  }
  return false;
}

/**
 * A listing that meets a locked database goes on where it stopped: a list reads in batches, so the
 * lock can be met at any of them, and a new listing from the last entry given (its cursor), for
 * what is left of the limit, gives no entry twice.
 */
class ListWhileBusy<T> implements AsyncIterableIterator<Deno.KvEntry<T>> {
  readonly #kv: Deno.Kv;
  readonly #selector: Deno.KvListSelector;
  readonly #options: Deno.KvListOptions;
  #listing: Deno.KvListIterator<T> | null = null;
  /** Entries the current listing gave, and all listings together. */
  #givenByListing = 0;
  #given = 0;
  #cursor: string | undefined;

  constructor(kv: Deno.Kv, selector: Deno.KvListSelector, options: Deno.KvListOptions = {}) {
    this.#kv = kv;
    this.#selector = selector;
    this.#options = options;
    this.#cursor = options.cursor;
  }

  get cursor(): string {
    if (this.#listing && this.#givenByListing > 0) return this.#listing.cursor;
    if (this.#cursor !== undefined) return this.#cursor;
    return (this.#listing ?? this.#kv.list<T>(this.#selector, this.#options)).cursor;
  }

  next(): Promise<IteratorResult<Deno.KvEntry<T>, undefined>> {
    return whileBusy(async () => {
      if (!this.#listing) {
        const { limit } = this.#options;
        if (limit !== undefined && this.#given >= limit) return { done: true, value: undefined };
        this.#listing = this.#kv.list<T>(this.#selector, {
          ...this.#options,
          cursor: this.#cursor,
          ...(limit === undefined ? {} : { limit: limit - this.#given }),
        });
        this.#givenByListing = 0;
      }
      try {
        const result = await this.#listing.next();
        if (!result.done) this.#givenByListing++, this.#given++;
        return result;
      } catch (error) {
        if (this.#givenByListing > 0) this.#cursor = this.#listing.cursor;
        this.#listing = null;
        throw error;
      }
    });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<Deno.KvEntry<T>> {
    return this;
  }
}

async function whileBusy<T>(run: () => Promise<T>, budgetMs = BUSY_BUDGET_MS): Promise<T> {
  let since: number | null = null;
  for (let attempt = 1;; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (!BUSY.test(String((error as Error)?.message))) throw error;
      since ??= Date.now();
      if (attempt >= BUSY_MIN_TRIES && Date.now() - since >= budgetMs) {
        throw new KvBusyError((error as Error).message, { cause: error });
      }
      // Jittered and growing to 50 ms: the holders' turns are short, but there may be many.
      const pause = Math.random() * Math.min(50, 2 ** attempt);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/**
 * The bytes of one part of a value split across keys: under KV's 64 KiB per value, with room for a
 * record's other fields beside it.
 */
export const KV_VALUE_CHUNK_BYTES = 60_000;

/** Reads any number of keys, in order: KV's getMany takes at most 10, so ten at a time. */
export async function getManyChunked<T>(
  kv: Deno.Kv,
  keys: Deno.KvKey[],
): Promise<Deno.KvEntryMaybe<T>[]> {
  const out: Deno.KvEntryMaybe<T>[] = [];
  for (let i = 0; i < keys.length; i += 10) {
    out.push(...await kv.getMany<T[]>(keys.slice(i, i + 10)));
  }
  return out;
}

/** Index entries a count marks dead per commit. */
const MARKS_PER_COMMIT = 100;

/**
 * How many entries of an index (`prefix`, the id last in each key) stand for live records. An
 * index whose entries are true while their record is live and set false in the commit that ends it
 * (a key's revocation) is counted reading only the records of entries not marked false; an entry
 * found dead there (ended before its index was marked) is marked for the next count. An end is
 * never undone, so marking needs no check, and a failed mark is made next time.
 */
export async function countLiveIndexed<T>(
  kv: Deno.Kv,
  prefix: Deno.KvKey,
  recordKey: (id: string) => Deno.KvKey,
  isLive: (record: T) => boolean,
): Promise<number> {
  const unmarked: Deno.KvKey[] = [];
  for await (const entry of kv.list<boolean>({ prefix })) {
    if (entry.value !== false) unmarked.push(entry.key);
  }
  const records = await getManyChunked<T>(kv, unmarked.map((k) => recordKey(String(k.at(-1)))));
  let live = 0;
  const dead: Deno.KvKey[] = [];
  records.forEach((r, i) => {
    if (r.value !== null && isLive(r.value)) live++;
    else if (r.value !== null) dead.push(unmarked[i]);
  });
  for (let i = 0; i < dead.length; i += MARKS_PER_COMMIT) {
    const atomic = kv.atomic();
    for (const key of dead.slice(i, i + MARKS_PER_COMMIT)) atomic.set(key, false);
    await atomic.commit().catch(() => {});
  }
  return live;
}
