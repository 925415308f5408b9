/** Operations: metrics, the OpenAPI document, the dev banner, the admin commands. */
export { ADMIN_COMMANDS, type AdminCommand } from "./admin_commands.ts";
export { ConnectionSteering, LoadBoard } from "./connection_steering.ts";
export { ADMIN_SHARED_SETTINGS, devBanner } from "./dev_banner.ts";
export { type MetricsSnapshot, PROMETHEUS_CONTENT_TYPE } from "./metrics.ts";
export { openApiDocument, RATE_LIMIT_HEADERS, WEBHOOK_ONLY_ERRORS } from "./openapi.ts";
export { MANAGEMENT_ONLY_ERRORS } from "./management_openapi.ts";
export { ServiceMetrics } from "./service_metrics.ts";
export { type FromWorker, serveWorkerCount, type ToWorker, WorkerPool } from "./workers.ts";
