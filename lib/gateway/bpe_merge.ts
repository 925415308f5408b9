/**
 * Byte-pair merges of one pre-token as tiktoken makes them: while two adjacent parts make a token,
 * merge the pair whose token ranks lowest, the leftmost of equal ranks. gpt-tokenizer rescans every
 * pair after each merge, which takes time in the square of the pre-token's length (320,000 "x"
 * took 172 s); a heap of the pairs takes n log n and gives the same parts.
 */

/**
 * The rank of the token the pre-token's bytes from `start` to `end` make, or undefined when they
 * make none.
 */
export type RankOf = (start: number, end: number) => number | undefined;

/** The start of each part of a pre-token of `n` bytes once merged, in order. */
export function mergedParts(n: number, rankOf: RankOf): number[] {
  if (n === 0) return [];
  // Parts as a linked list over their start offsets; `n` ends it.
  const next = new Int32Array(n);
  const prev = new Int32Array(n);
  const alive = new Uint8Array(n).fill(1);
  for (let i = 0; i < n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  // Each merge offers at most two pairs: n - 1 at first, then fewer than 2n.
  const heap = new PairHeap(3 * n);
  const rankOfPair = (start: number): number => {
    const right = next[start];
    if (right >= n) return -1;
    return rankOf(start, next[right]) ?? -1;
  };
  for (let i = 0; i + 1 < n; i++) {
    const rank = rankOfPair(i);
    if (rank >= 0) heap.add(rank, i, i + 2);
  }
  heap.heapify();
  while (heap.size > 0) {
    const start = heap.topStart();
    const end = heap.topEnd();
    heap.pop();
    // A pair whose parts have changed since it was offered is stale: its new form was offered.
    if (!alive[start] || next[start] >= n || next[next[start]] !== end) continue;
    alive[next[start]] = 0;
    next[start] = end;
    if (end < n) prev[end] = start;
    const left = prev[start];
    if (left >= 0) {
      const rank = rankOfPair(left);
      if (rank >= 0) heap.push(rank, left, next[start]);
    }
    const rank = rankOfPair(start);
    if (rank >= 0) heap.push(rank, start, next[next[start]]);
  }
  const starts: number[] = [];
  for (let i = 0; i < n; i = next[i]) starts.push(i);
  return starts;
}

/** Ranks are below 2^21 and offsets below 2^31: a key orders by rank, then by start. */
const START_SPAN = 2_147_483_648;

/** A binary min-heap of pairs by (rank, start): the leftmost of equal ranks first. */
class PairHeap {
  readonly #keys: Float64Array;
  readonly #ends: Int32Array;
  size = 0;

  constructor(capacity: number) {
    this.#keys = new Float64Array(capacity);
    this.#ends = new Int32Array(capacity);
  }

  /** Appends without ordering; `heapify` orders what was added. */
  add(rank: number, start: number, end: number) {
    this.#keys[this.size] = rank * START_SPAN + start;
    this.#ends[this.size] = end;
    this.size++;
  }

  heapify() {
    for (let i = (this.size >> 1) - 1; i >= 0; i--) this.#down(i, this.#keys[i], this.#ends[i]);
  }

  topStart(): number {
    return this.#keys[0] % START_SPAN;
  }

  topEnd(): number {
    return this.#ends[0];
  }

  push(rank: number, start: number, end: number) {
    const keys = this.#keys;
    const ends = this.#ends;
    const key = rank * START_SPAN + start;
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (keys[parent] <= key) break;
      keys[i] = keys[parent];
      ends[i] = ends[parent];
      i = parent;
    }
    keys[i] = key;
    ends[i] = end;
  }

  pop() {
    this.size--;
    if (this.size > 0) this.#down(0, this.#keys[this.size], this.#ends[this.size]);
  }

  /** Sinks (key, end) from `i` to its place. */
  #down(i: number, key: number, end: number) {
    const keys = this.#keys;
    const ends = this.#ends;
    const size = this.size;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= size) break;
      const right = left + 1;
      const child = right < size && keys[right] < keys[left] ? right : left;
      if (keys[child] >= key) break;
      keys[i] = keys[child];
      ends[i] = ends[child];
      i = child;
    }
    keys[i] = key;
    ends[i] = end;
  }
}
