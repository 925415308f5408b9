/**
 * `POST {base_url}/embeddings` of an OpenAI-compatible server: the request we send, and the
 * answer read tolerantly (extra fields ignored) but never trusted blindly: one vector per input,
 * each in the encoding the client asked for.
 */
import { z } from "zod";
import { inFormat } from "../../embedding_vectors.ts";
import { type Embedding, type EmbedRequest, type EmbedResult, ProviderError } from "../types.ts";
import { TokenCount } from "../usage.ts";

export function embeddingsBody(request: EmbedRequest): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model: request.model.upstreamModel,
    input: request.input,
    encoding_format: request.encodingFormat,
  };
  if (request.dimensions !== undefined) body.dimensions = request.dimensions;
  if (request.user !== undefined) body.user = request.user;
  return body;
}

/** The longest vector an answer is allowed per input, unless the request asks for longer. */
export const MAX_VECTOR_DIMENSIONS = 8192;
/** The longest number JSON can carry a float32 in ("-1.1754943508222875e-38"), with its comma. */
const FLOAT_JSON_BYTES = 26;
/** An answer's fields besides the vectors: per item, and once. */
const ITEM_OVERHEAD_BYTES = 256;
const ANSWER_OVERHEAD_BYTES = 64 * 1024;

/**
 * The most an answer to this request may take before reading stops: per input, a vector of the
 * largest model size (or the asked size, if larger) in JSON numbers. Not the asked size, nor base64
 * when that was asked: a server that ignores `dimensions` or `encoding_format` answers with full
 * float vectors, which the answer's reader accepts.
 */
export function embeddingsAnswerBytes(request: EmbedRequest): number {
  const dimensions = Math.max(request.dimensions ?? 0, MAX_VECTOR_DIMENSIONS);
  return ANSWER_OVERHEAD_BYTES +
    request.inputs.length * (dimensions * FLOAT_JSON_BYTES + ITEM_OVERHEAD_BYTES);
}

const Answer = z.looseObject({
  data: z.array(z.looseObject({
    index: z.number().int().nonnegative().optional(),
    embedding: z.union([z.array(z.number()), z.string()]),
  })),
  usage: z.looseObject({ prompt_tokens: TokenCount }).nullish().catch(null),
});

/** The answer's vectors in input order and its billed tokens; throws malformed_response. */
export function readEmbeddingsAnswer(json: unknown, request: EmbedRequest): EmbedResult {
  const parsed = Answer.safeParse(json);
  if (!parsed.success) throw malformed("without a list of embeddings");
  const { data, usage } = parsed.data;
  if (data.length !== request.inputs.length) {
    throw malformed(`with ${data.length} embeddings for ${request.inputs.length} inputs`);
  }
  const out: Embedding[] = new Array(data.length);
  for (const [position, item] of data.entries()) {
    const index = item.index ?? position;
    if (index >= data.length || out[index]) throw malformed("with embedding indexes out of order");
    const embedding = inFormat(item.embedding, request.encodingFormat);
    if (embedding === null) throw malformed("with an embedding that is not base64 float32");
    out[index] = { object: "embedding", index, embedding };
  }
  return { data: out, promptTokens: usage?.prompt_tokens ?? null };
}

function malformed(what: string) {
  return new ProviderError("malformed_response", `upstream answered 200 ${what}`);
}
