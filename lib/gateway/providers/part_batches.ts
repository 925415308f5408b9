import { ProviderError, type StreamPart } from "./types.ts";

/** One wire format's conversion of an upstream's events, event by event. */
export interface EventConversion<E> {
  /** Adds the parts the event makes; true when it is the stream's last (nothing after it is read). */
  take(event: E, parts: StreamPart[]): boolean;
  /** Whether the stream got far enough to be whole, when it ends without its last event. */
  finished(): boolean;
  /**
   * The parts still owed once the events end, for a format that holds some back: `cut` when the
   * stream failed (the bill so far).
   */
  close?(parts: StreamPart[], cut: boolean): void;
}

/**
 * The loop both converters share: each batch of events (one upstream read) becomes one batch of
 * parts, none when it made none. A failure, the converter's own or a cut, first hands on the parts
 * made before it in the same batch (a usage part among them is the bill), then is thrown.
 */
export async function* convertBatches<E>(
  batches: AsyncIterable<E[]>,
  conversion: EventConversion<E>,
  unfinished: string,
): AsyncGenerator<StreamPart[]> {
  let parts: StreamPart[] = [];
  try {
    let last = false;
    batches: for await (const events of batches) {
      for (const event of events) {
        if (conversion.take(event, parts)) {
          last = true;
          break batches;
        }
      }
      if (parts.length > 0) {
        yield parts;
        parts = [];
      }
    }
    if (!last && !conversion.finished()) throw new ProviderError("stream_cut", unfinished);
  } catch (error) {
    conversion.close?.(parts, true);
    if (parts.length > 0) yield parts;
    throw error;
  }
  conversion.close?.(parts, false);
  if (parts.length > 0) yield parts;
}

/** Events that came in one piece (a whole answer made into its stream's events), as one batch. */
export async function* oneBatch<E>(events: E[]): AsyncGenerator<E[]> {
  yield events;
}
