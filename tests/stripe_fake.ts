/**
 * A loopback stand-in for the part of Stripe's API the top-up flow calls (create, retrieve and list
 * Checkout Sessions), answering with objects shaped like the API reference's, and signed webhook
 * events built with the stripe package's own test helper.
 */
import Stripe from "stripe";
import { createStripeClient } from "@/lib/payments/mod.ts";
import { serveLoopback } from "./helpers.ts";

export const WEBHOOK_SECRET = "whsec_test_tollbooth_fake_secret";
export const STRIPE_ENV = {
  STRIPE_SECRET_KEY: "sk_test_tollbooth_fake",
  STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
};

export type SessionObject = Record<string, unknown> & {
  id: string;
  metadata: Record<string, string>;
  amount_total: number | null;
  payment_status: string;
  status: string;
};

/** A Checkout Session as Stripe returns it (fields from the API reference), paid or not. */
export function checkoutSessionObject(
  input: {
    id?: string;
    appId: string;
    amountMicros: number;
    amountTotal?: number;
    paid?: boolean;
    metadata?: Record<string, string>;
    successUrl?: string;
    cancelUrl?: string;
  },
): SessionObject {
  const id = input.id ?? `cs_test_${crypto.randomUUID().replaceAll("-", "")}`;
  const total = input.amountTotal ?? input.amountMicros / 10_000;
  const created = Math.floor(Date.now() / 1000);
  return {
    id,
    object: "checkout.session",
    adaptive_pricing: { enabled: false },
    after_expiration: null,
    allow_promotion_codes: null,
    amount_subtotal: total,
    amount_total: total,
    automatic_tax: { enabled: false, liability: null, status: null },
    billing_address_collection: null,
    cancel_url: input.cancelUrl ?? "http://tollbooth.test/top-up/x",
    client_reference_id: input.appId,
    client_secret: null,
    consent: null,
    consent_collection: null,
    created,
    currency: "usd",
    custom_fields: [],
    custom_text: {
      after_submit: null,
      shipping_address: null,
      submit: null,
      terms_of_service_acceptance: null,
    },
    customer: null,
    customer_creation: "if_required",
    customer_details: input.paid
      ? { email: "buyer@example.com", name: null, phone: null, tax_exempt: "none", tax_ids: [] }
      : null,
    customer_email: null,
    expires_at: created + 86_400,
    invoice: null,
    invoice_creation: null,
    livemode: false,
    locale: null,
    metadata: input.metadata ?? {
      app_id: input.appId,
      amount_micros: String(input.amountMicros),
      top_up_token: "token",
    },
    mode: "payment",
    payment_intent: input.paid
      ? `pi_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`
      : null,
    payment_link: null,
    payment_method_collection: "if_required",
    payment_method_options: { card: { request_three_d_secure: "automatic" } },
    payment_method_types: ["card"],
    payment_status: input.paid ? "paid" : "unpaid",
    phone_number_collection: { enabled: false },
    recovered_from: null,
    saved_payment_method_options: null,
    setup_intent: null,
    shipping_address_collection: null,
    shipping_cost: null,
    shipping_options: [],
    status: input.paid ? "complete" : "open",
    submit_type: "pay",
    subscription: null,
    success_url: input.successUrl ?? "http://tollbooth.test/receipt",
    total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
    ui_mode: "hosted",
    url: input.paid ? null : `https://checkout.stripe.com/c/pay/${id}#fidkdWxOYHwnPyd1blpxYHZxWjA0`,
  };
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Headers;
  form: URLSearchParams;
}

/** The fake API: sessions it created, by id, so tests can mark them paid. */
export function startFakeStripe() {
  const requests: RecordedRequest[] = [];
  const sessions = new Map<string, SessionObject>();
  const server = serveLoopback(async (request) => {
    const url = new URL(request.url);
    const form = new URLSearchParams(await request.text());
    requests.push({ method: request.method, path: url.pathname, headers: request.headers, form });
    if (request.headers.get("authorization") !== `Bearer ${STRIPE_ENV.STRIPE_SECRET_KEY}`) {
      return Response.json({ error: { type: "invalid_request_error", message: "bad key" } }, {
        status: 401,
      });
    }
    if (request.method === "POST" && url.pathname === "/v1/checkout/sessions") {
      const session = checkoutSessionObject({
        appId: form.get("client_reference_id") ?? "",
        amountMicros: Number(form.get("metadata[amount_micros]")),
        amountTotal: Number(form.get("line_items[0][price_data][unit_amount]")),
        metadata: {
          app_id: form.get("metadata[app_id]") ?? "",
          amount_micros: form.get("metadata[amount_micros]") ?? "",
          top_up_token: form.get("metadata[top_up_token]") ?? "",
        },
        successUrl: form.get("success_url") ?? "",
        cancelUrl: form.get("cancel_url") ?? "",
      });
      sessions.set(session.id, session);
      return Response.json(session);
    }
    if (request.method === "GET" && url.pathname === "/v1/checkout/sessions") {
      // List Checkout Sessions, filtered by `payment_intent` as Stripe's API filters it.
      const paymentIntent = url.searchParams.get("payment_intent");
      const limit = Number(url.searchParams.get("limit") ?? 10);
      const found = [...sessions.values()]
        .filter((s) => paymentIntent === null || s.payment_intent === paymentIntent)
        .reverse();
      return Response.json({
        object: "list",
        data: found.slice(0, limit),
        has_more: found.length > limit,
        url: "/v1/checkout/sessions",
      });
    }
    const match = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(url.pathname);
    if (request.method === "GET" && match) {
      const session = sessions.get(match[1]);
      if (session) return Response.json(session);
      return Response.json({
        error: {
          code: "resource_missing",
          message: `No such checkout.session: '${match[1]}'`,
          param: "session",
          type: "invalid_request_error",
        },
      }, { status: 404 });
    }
    return Response.json({ error: { type: "invalid_request_error", message: "unknown" } }, {
      status: 404,
    });
  });
  const stripe = createStripeClient(STRIPE_ENV.STRIPE_SECRET_KEY, {
    host: "127.0.0.1",
    port: server.port,
    protocol: "http",
  });
  return {
    stripe,
    port: server.port,
    requests,
    sessions,
    /** What Stripe does when the buyer pays: the session turns complete and paid. */
    markPaid(id: string) {
      const session = sessions.get(id)!;
      Object.assign(session, {
        payment_status: "paid",
        status: "complete",
        url: null,
        payment_intent: "pi_3PaidFakeIntent0000000",
      });
      return session;
    },
    close: server.close,
  };
}

let eventCounter = 0;

/** A Refund as Stripe sends it in `refund.*` events (fields from the API reference). */
export function refundObject(
  input: { id?: string; paymentIntent: string; amount: number; status?: string },
): Record<string, unknown> {
  return {
    id: input.id ?? `re_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    object: "refund",
    amount: input.amount,
    balance_transaction: null,
    charge: `ch_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    created: Math.floor(Date.now() / 1000),
    currency: "usd",
    destination_details: { card: { type: "refund" }, type: "card" },
    metadata: {},
    payment_intent: input.paymentIntent,
    reason: "requested_by_customer",
    receipt_number: null,
    source_transfer_reversal: null,
    status: input.status ?? "succeeded",
    transfer_reversal: null,
  };
}

/** A Dispute as Stripe sends it in `charge.dispute.*` events (fields from the API reference). */
export function disputeObject(
  input: { id?: string; paymentIntent: string; amount: number; status: string },
): Record<string, unknown> {
  return {
    id: input.id ?? `dp_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    object: "dispute",
    amount: input.amount,
    balance_transactions: [],
    charge: `ch_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    created: Math.floor(Date.now() / 1000),
    currency: "usd",
    evidence_details: { due_by: null, has_evidence: false, past_due: false, submission_count: 0 },
    is_charge_refundable: false,
    livemode: false,
    metadata: {},
    payment_intent: input.paymentIntent,
    reason: "fraudulent",
    status: input.status,
  };
}

/** An Event envelope around a session, as Stripe delivers it. */
export function eventPayload(type: string, object: Record<string, unknown>, id?: string): string {
  return JSON.stringify({
    id: id ?? `evt_test_${Date.now()}${eventCounter++}`,
    object: "event",
    api_version: "2026-10-28.endive",
    created: Math.floor(Date.now() / 1000),
    data: { object },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  });
}

const signer = new Stripe("sk_test_signer", { httpClient: Stripe.createFetchHttpClient() });

export function signPayload(payload: string, secret = WEBHOOK_SECRET): Promise<string> {
  return signer.webhooks.generateTestHeaderStringAsync({
    payload,
    secret,
    cryptoProvider: Stripe.createSubtleCryptoProvider(),
  });
}

export async function webhookRequest(
  payload: string,
  signature?: string,
): Promise<Request> {
  return new Request("http://tollbooth.test/webhooks/stripe", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "stripe-signature": signature ?? await signPayload(payload),
    },
    body: payload,
  });
}
