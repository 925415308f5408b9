/** Catalog: the curated models, their providers and prices, and the cost of a request at those prices. */
export { CatalogError, loadCatalogFile } from "./catalog.ts";
export type { Catalog, Model, ProviderConfig } from "./catalog.ts";
export { reservationCost, usageCost } from "./pricing.ts";
export type { Usage } from "./pricing.ts";
