/**
 * Webhooks: an app's endpoint and threshold, low-balance, top-up, refund and chargeback events,
 * signed delivery.
 */
export {
  backoffMs,
  listWebhookEvents,
  prepareEvent,
  retrySpanMs,
  retrySpanText,
  sendTestEvent,
  TestEventLimitError,
  WEBHOOK_DEFAULTS,
  WEBHOOK_EVENT_RETENTION_MS,
  WebhookDeliverer,
  WebhookWatcher,
} from "./events.ts";
export type { DelivererOptions } from "./events.ts";
export {
  deleteWebhookSettings,
  getWebhookSettings,
  saveWebhookSettings,
  validWebhookUrl,
  WebhookUrlError,
} from "./settings.ts";
export {
  DEFAULT_TOLERANCE_SECONDS,
  SIGNATURE_HEADER,
  signatureHeader,
  verifySignature,
} from "./signing.ts";
