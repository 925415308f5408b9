import { Sweep } from "@/lib/core/mod.ts";
import { ProviderError } from "./providers/types.ts";
import type { BodyReader } from "./providers/http1.ts";

/**
 * The longest line an event stream may send: far above any real event (a base64 image in one
 * delta included), it bounds the memory one upstream can take before its stream is cut.
 */
export const MAX_LINE_CHARS = 32 * 1024 * 1024;

const lineTooLong = () =>
  new ProviderError(
    "stream_cut",
    `upstream event stream line longer than ${MAX_LINE_CHARS} characters`,
  );

export interface SseEvent {
  event: string | null;
  data: string;
}

/**
 * Parses a server-sent event stream as the HTML standard defines it (data, event, comments), in
 * batches: the events each network read completes, never an empty batch. A chat answer's dozen
 * events mostly come in one read, and a step of an async generator per event, in every layer
 * above, cost more than parsing them.
 *
 * `isLast` names the event a stream ends with (`[DONE]`, `message_stop`): a reader that stops
 * there leaves the body's few remaining bytes (the chunked end) to be read rather than cancelled,
 * so that the upstream connection goes back to its pool instead of being closed and opened anew.
 * `onRead` hears of every read that ended a line, comments (an upstream's keep-alive) included:
 * bytes that never end a line (one trickled at a time) are no sign of life.
 */
export async function* parseSse(
  body: ReadableStream<Uint8Array> | BodyReader,
  isLast: (event: SseEvent) => boolean = () => false,
  onRead: () => void = () => {},
): AsyncGenerator<SseEvent[]> {
  const decoder = new TextDecoder();
  let event: string | null = null;
  /** The event's data lines so far, joined by line feeds; null before its first. */
  let data: string | null = null;
  const reader = chunkReader(body);
  /** Applies one line; returns the event it completes, if any. */
  const takeLine = (line: string): SseEvent | null => {
    if (line === "") {
      const done = data === null ? null : { event, data };
      event = null;
      data = null;
      return done;
    }
    // Nearly every line of an upstream's stream is "data: …": read without splitting it.
    if (line.startsWith("data:")) {
      const value = line.slice(line.charCodeAt(5) === 32 ? 6 : 5);
      data = data === null ? value : `${data}\n${value}`;
      return null;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data = data === null ? value : `${data}\n${value}`;
    else if (field === "event") event = value;
    return null;
  };
  let finished = false;
  let lastSeen = false;
  // Upstreams end lines with \n; a stream is scanned for \r\n or a lone \r only once it has one.
  let crSeen = false;
  const lineBreak = /\r\n|\r|\n/g;
  /** A read ended in \r: its line has ended, and an \n starting the next read belongs to it. */
  let skipLineFeed = false;
  /** The start of the current line, as read so far: each read scans only its own text. */
  let partial: string[] = [];
  let partialLength = 0;
  const lineOf = (text: string, from: number, to: number) => {
    const line = text.slice(from, to);
    if (partial.length === 0) return line;
    const whole = partial.join("") + line;
    partial = [];
    partialLength = 0;
    return whole;
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const text = decoder.decode(value, { stream: true });
      crSeen ||= text.includes("\r");
      const batch: SseEvent[] = [];
      let start = 0;
      let lineEnded = false;
      if (skipLineFeed) {
        skipLineFeed = false;
        if (text.charCodeAt(0) === 10) start = 1;
      }
      for (;;) {
        let end: number;
        let next: number;
        if (!crSeen) {
          end = text.indexOf("\n", start);
          next = end + 1;
        } else {
          lineBreak.lastIndex = start;
          const found = lineBreak.exec(text);
          end = found ? found.index : -1;
          next = found ? end + found[0].length : 0;
          // A \r that ends this read may be the first half of \r\n.
          if (found && found[0] === "\r" && next === text.length) skipLineFeed = true;
        }
        if (end === -1) break;
        lineEnded = true;
        const complete = takeLine(lineOf(text, start, end));
        start = next;
        if (complete) {
          lastSeen ||= isLast(complete);
          batch.push(complete);
        }
      }
      if (start < text.length) {
        partialLength += text.length - start;
        if (partialLength > MAX_LINE_CHARS) {
          // The events before the line still count (a usage event among them is the bill).
          if (batch.length > 0) yield batch;
          throw lineTooLong();
        }
        partial.push(start === 0 ? text : text.slice(start));
      }
      if (lineEnded) onRead();
      if (batch.length > 0) yield batch;
    }
    finished = true;
    // The standard drops an unterminated last line; an upstream that ends its usage event that
    // way would then go unbilled by its own count, so the line is kept.
    const last = partial.join("") + decoder.decode();
    if (last !== "") takeLine(last);
    if (data !== null) yield [{ event, data }];
  } finally {
    // A body read to its end needs no release: releasing a reader costs an Error it never shows.
    if (!finished && lastSeen) readToEnd(reader);
    else if (!finished) await reader.cancel().catch(() => {});
  }
}

/** How long, and how much, the rest of a body after its last event may take before it is cut. */
const READ_TO_END_MS = 2_000;
const READ_TO_END_BYTES = 65_536;
/** How often bodies still being read to their end are checked against their time. */
const READ_TO_END_SWEEP_MS = 250;

type ChunkReader = ReturnType<typeof chunkReader>;

/**
 * Bodies being read to their end, each with the time it is cut at: one sweep for all of them
 * rather than a timer per body, which was set and cleared for every answer although almost every
 * body ends within the same read.
 */
const readingToEnd = new Sweep<{ reader: ChunkReader; cutAt: number }>((body, now) => {
  if (body.cutAt > now) return false;
  body.reader.cancel().catch(() => {});
  return true;
});

/** Reads what follows a stream's last event, in the background; cancels a body that goes on. */
function readToEnd(reader: ChunkReader) {
  // Timed before the first read: an upstream may send nothing more and keep the connection open.
  const body = { reader, cutAt: Date.now() + READ_TO_END_MS };
  readingToEnd.watch(body, READ_TO_END_SWEEP_MS);
  (async () => {
    let bytes = 0;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        bytes += value.byteLength;
        if (bytes > READ_TO_END_BYTES) return await reader.cancel();
      }
    } catch {
      // Cut or cancelled: the connection is closed, which is all that is left to do.
    } finally {
      readingToEnd.forget(body);
    }
  })();
}

/** Large enough for any one network read of an event stream; a larger chunk takes two reads. */
const READ_BUFFER_BYTES = 16_384;
/**
 * Read buffers of bodies read to their end, for the next bodies: a new zero-filled buffer per
 * body was 5% of a short request's CPU.
 */
const spareReadBuffers: ArrayBuffer[] = [];
const MAX_SPARE_READ_BUFFERS = 64;

/**
 * Reads a body's chunks into one reused buffer where the body allows it (the upstream client's
 * body, a fetch body's byte stream): the default reader allocates and zero-fills a new buffer for
 * every read, which was a third of what reading an upstream's stream cost. Each chunk must be used
 * before the next read.
 */
function chunkReader(body: ReadableStream<Uint8Array> | BodyReader) {
  let reader: BodyReader;
  if (!(body instanceof ReadableStream)) reader = body;
  else {
    try {
      reader = body.getReader({ mode: "byob" });
    } catch {
      // Not a byte stream (a stream made in JS): the default reader.
      return body.getReader();
    }
  }
  let buffer = spareReadBuffers.pop() ?? new ArrayBuffer(READ_BUFFER_BYTES);
  let ended = false;
  return {
    async read(): Promise<ReadableStreamReadResult<Uint8Array>> {
      // The buffer may be another body's by now.
      if (ended) return { done: true, value: undefined };
      const result = await reader.read(new Uint8Array(buffer));
      if (result.value) buffer = result.value.buffer as ArrayBuffer;
      if (!result.done) return result as ReadableStreamReadResult<Uint8Array>;
      ended = true;
      // At the end no chunk of it is held any more (each is used before the next read).
      if (
        buffer.byteLength === READ_BUFFER_BYTES && spareReadBuffers.length < MAX_SPARE_READ_BUFFERS
      ) {
        spareReadBuffers.push(buffer);
      }
      return { done: true, value: undefined };
    },
    cancel: (reason?: unknown) => reader.cancel(reason),
  };
}

const encoder = new TextEncoder();

/**
 * The shared buffer events are encoded into; a new one is taken once it is full. Small, since an
 * event still queued for a slow client keeps its whole buffer alive: 8 KiB at most per open stream.
 */
const SLAB_BYTES = 8 * 1024;
let slab = new Uint8Array(SLAB_BYTES);
let slabUsed = 0;

/**
 * An event's bytes, as a view of a shared buffer: `encode`, which makes a buffer per call, was a
 * third of relaying a chunk (1.3 µs, against 0.5 µs for this). A view is never written again once
 * returned, and a buffer lives as long as any of its views is still queued for a client.
 */
function encodeEventText(text: string): Uint8Array {
  // UTF-8 takes at most three bytes per UTF-16 unit.
  const room = text.length * 3;
  if (room > SLAB_BYTES / 4) return encoder.encode(text);
  if (slabUsed + room > SLAB_BYTES) {
    slab = new Uint8Array(SLAB_BYTES);
    slabUsed = 0;
  }
  const start = slabUsed;
  slabUsed += encoder.encodeInto(text, slab.subarray(start)).written;
  return slab.subarray(start, slabUsed);
}

/**
 * The end of a chat stream, one buffer for every stream: encoded per stream when it starts, its
 * view would hold a shared buffer for the stream's whole life.
 */
export const SSE_DONE: Uint8Array = encoder.encode("data: [DONE]\n\n");

export function encodeSseData(data: string): Uint8Array {
  return encodeEventText(`data: ${data}\n\n`);
}

/** An event with a name, as the Responses API streams them. */
export function encodeSseEvent(event: string, data: string): Uint8Array {
  return encodeEventText(`event: ${event}\ndata: ${data}\n\n`);
}
