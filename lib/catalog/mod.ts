/** Catalog: the curated models, their providers and prices, and the cost of a request at those prices. */
export {
  CatalogError,
  catalogFromFile,
  loadCatalogFile,
  providersOf,
  readCatalogFile,
} from "./catalog.ts";
export type {
  Catalog,
  LongContextPrices,
  Model,
  ModelType,
  Prices,
  ProviderConfig,
  Route,
  Tokenizer,
} from "./catalog.ts";
export { claudeRules, claudeRulesByName, HIGH_RES_IMAGE_EDGE } from "./claude_rules.ts";
export type { ClaudeRules, ClaudeThinking } from "./claude_rules.ts";
export type { ImagePatches } from "./openai_images.ts";
export { modelList, modelObject } from "./model_list.ts";
export type { ModelList, ModelObject } from "./model_list.ts";
export { believedCacheCounts, reservationCost, usageCost } from "./pricing.ts";
export type { Usage } from "./pricing.ts";
