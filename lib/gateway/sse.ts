export interface SseEvent {
  event: string | null;
  data: string;
}

/** Parses a server-sent event stream as the HTML standard defines it (data, event, comments). */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let event: string | null = null;
  let data: string[] = [];
  const reader = body.getReader();
  /** Applies one line; returns the event it completes, if any. */
  const takeLine = (line: string): SseEvent | null => {
    if (line === "") {
      const done = data.length ? { event, data: data.join("\n") } : null;
      event = null;
      data = [];
      return done;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
    return null;
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) !== -1) {
        const line = buffer.slice(0, newline);
        const width = buffer.startsWith("\r\n", newline) ? 2 : 1;
        // A lone \r at the end of the buffer may be the first half of \r\n.
        if (width === 1 && buffer[newline] === "\r" && newline === buffer.length - 1) break;
        buffer = buffer.slice(newline + width);
        const complete = takeLine(line);
        if (complete) yield complete;
      }
    }
    // The standard drops an unterminated last line; an upstream that ends its usage event that
    // way would then go unbilled by its own count, so the line is kept.
    buffer += decoder.decode();
    if (buffer.endsWith("\r")) buffer = buffer.slice(0, -1);
    if (buffer !== "") takeLine(buffer);
    if (data.length) yield { event, data: data.join("\n") };
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => {});
  }
}

const encoder = new TextEncoder();

export function encodeSseData(data: string): Uint8Array {
  return encoder.encode(`data: ${data}\n\n`);
}

/** An event with a name, as the Responses API streams them. */
export function encodeSseEvent(event: string, data: string): Uint8Array {
  return encoder.encode(`event: ${event}\ndata: ${data}\n\n`);
}
