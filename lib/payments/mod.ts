/**
 * Payments: the hosted top-up page, Stripe Checkout, and the webhook that credits a purchase and
 * takes refunded and disputed ones back.
 */
export { FormTokens } from "./form_tokens.ts";
export {
  confirmCheckoutSession,
  createCheckoutSession,
  createStripeClient,
  handleStripeEvent,
} from "./stripe_checkout.ts";
export type { Stripe } from "./stripe_checkout.ts";
export { operatorGiveBack, operatorTakeBack } from "./stripe_reversals.ts";
export {
  beginCheckout,
  createDevPurchase,
  creditTopUp,
  findAppByTopUpToken,
  findAppOfAnyTopUpToken,
  findDevPurchase,
  findTopUpEntry,
  hasRoomForTopUp,
  MAX_CHECKOUTS_PER_ADDRESS,
  paymentMethodName,
  paymentMode,
  paymentSourceOf,
  TOP_UP_AMOUNTS_USD,
  topUpAmountOfChoice,
  updateTopUpSettings,
  validateReturnUrl,
} from "./top_up.ts";
export type { PaymentMode } from "./top_up.ts";
