/** Gateway: one paid request's life (parse, price, reserve, call the provider, settle) and the provider adapters. */
export {
  ChatRequestSchema,
  DEFAULT_MAX_TOKENS,
  FIELD_SUPPORT,
  parseChatRequest,
} from "./chat_request.ts";
export {
  MAX_EMBEDDING_INPUTS,
  MAX_EMBEDDING_REQUEST_TOKENS,
  parseEmbeddingsRequest,
} from "./embeddings_request.ts";
export { Gateway } from "./gateway.ts";
export type { EmbeddingsList, RequestTrace, StreamOutcome } from "./gateway.ts";
export { encodeSseData } from "./sse.ts";
export { providerKeyRedactor, SecretRedactor } from "./redact.ts";
