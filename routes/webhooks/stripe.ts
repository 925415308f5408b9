import type { Context } from "hono";
import Stripe from "stripe";
import { ApiError, type Logger } from "@/lib/core/mod.ts";
import { handleStripeEvent } from "@/lib/payments/mod.ts";
import type { Wallets } from "@/lib/billing/mod.ts";
import type { Env } from "@/routes/middleware.ts";

/** Stripe's events are a few kilobytes; anything far larger is not from Stripe. */
export const MAX_EVENT_BYTES = 512 * 1024;

const cryptoProvider = Stripe.createSubtleCryptoProvider();

const SIGNATURE = "Stripe-Signature";

/**
 * Stripe's webhook: the signature is checked on the raw bytes before anything is parsed; a paid
 * Checkout Session is credited once (or refunded once, if its wallet can take no more), and a
 * refund or dispute of it taken back once, however often and in whatever order the events arrive.
 * A 2xx tells Stripe to stop; a 5xx (the wallet store failing, Stripe's API when a reversal's
 * payment must be looked up, or a refund Stripe did not make) makes it retry later.
 */
export function stripeWebhook(
  deps: {
    kv: Deno.Kv;
    wallets: Wallets;
    log: Logger;
    stripe: Stripe | undefined;
    webhookSecret: string | undefined;
  },
) {
  return async (c: Context<Env>) => {
    const { stripe, webhookSecret } = deps;
    if (!stripe || !webhookSecret) {
      throw new ApiError(
        "payments_unavailable",
        "Stripe payments are not configured on this server.",
      );
    }
    const signature = c.req.header("stripe-signature");
    if (!signature) {
      throw new ApiError("missing_parameter", `Missing ${SIGNATURE} header.`, { param: SIGNATURE });
    }
    // The signature covers the exact bytes Stripe sent: verify those, not a re-encoding. Their
    // size is held to MAX_EVENT_BYTES by the route's body limit.
    const body = new Uint8Array(await c.req.arrayBuffer());
    let event: Stripe.Event;
    try {
      event = await stripe.webhooks.constructEventAsync(
        body,
        signature,
        webhookSecret,
        undefined,
        cryptoProvider,
      );
    } catch (error) {
      deps.log({
        level: "warn",
        requestId: c.get("requestId"),
        event: "stripe_webhook_rejected",
        error: (error as Error).message,
      });
      throw new ApiError("invalid_parameter", "Invalid Stripe signature.", { param: SIGNATURE });
    }
    const outcome = await handleStripeEvent({ ...deps, stripe }, event);
    return c.json({ received: true, event: event?.id ?? null, outcome: outcome.status });
  };
}
