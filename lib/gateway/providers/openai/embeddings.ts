/**
 * `POST {base_url}/embeddings` of an OpenAI-compatible server: the request we send, and the
 * answer read tolerantly (extra fields ignored) but never trusted blindly: one vector per input,
 * each in the encoding the client asked for.
 */
import { z } from "zod";
import { inFormat } from "../../embedding_vectors.ts";
import { type Embedding, type EmbedRequest, type EmbedResult, ProviderError } from "../types.ts";

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

const Count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const Answer = z.looseObject({
  data: z.array(z.looseObject({
    index: Count.optional(),
    embedding: z.union([z.array(z.number()), z.string()]),
  })),
  usage: z.looseObject({ prompt_tokens: Count }).nullish().catch(null),
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
