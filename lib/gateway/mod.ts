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
export { encodeSseData, encodeSseEvent, SSE_DONE } from "./sse.ts";
export { Responses } from "./responses/responses.ts";
export { RESPONSE_INCLUDABLES } from "./responses/request.ts";
export type { ResponseOutcome, ResponseStreamOutcome } from "./responses/responses.ts";
export { ResponseStore } from "./responses/store.ts";
export { providerKeyRedactor, SecretRedactor } from "./redact.ts";
export { PROVIDER_FAILURES } from "./providers/types.ts";
export type { ProviderFailure } from "./providers/types.ts";
