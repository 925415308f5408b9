/**
 * A loopback stand-in for the part of Stripe's API the top-up flow calls (create, retrieve and list
 * Checkout Sessions; create refunds), answering with objects shaped like the API reference's, and
 * signed webhook events built with the stripe package's own test helper.
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

/** A Stripe API error answer, as the API reference shapes it. */
function stripeError(
  status: number,
  error: { type: string; message: string; code?: string; param?: string },
): Response {
  return Response.json({ error }, { status });
}

/** The fields `POST /v1/refunds` takes (API reference, "Create a refund"). */
const REFUND_FIELDS = new Set([
  "amount",
  "charge",
  "currency",
  "customer",
  "instructions_email",
  "origin",
  "payment_intent",
  "reason",
  "refund_application_fee",
  "reverse_transfer",
]);
const REFUND_REASONS = new Set(["duplicate", "fraudulent", "requested_by_customer"]);

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Headers;
  form: URLSearchParams;
}

/**
 * The fake API: sessions it created, by id, so tests can mark them paid; the refunds it made, and
 * the answers it keeps per Idempotency-Key (for 24 hours at Stripe, errors included).
 */
export function startFakeStripe() {
  const requests: RecordedRequest[] = [];
  const sessions = new Map<string, SessionObject>();
  const refunds: Record<string, unknown>[] = [];
  const idempotent = new Map<string, { request: string; status: number; body: unknown }>();
  let refundsToRefuse = 0;

  /** `POST /v1/refunds`, checked as Stripe checks it, plus the key our contract promises. */
  function createRefund(request: Request, form: URLSearchParams): Response {
    if (request.headers.get("content-type") !== "application/x-www-form-urlencoded") {
      return stripeError(400, {
        type: "invalid_request_error",
        message: `Invalid request: the body must be form-encoded, not ${
          request.headers.get("content-type")
        }`,
      });
    }
    for (const name of form.keys()) {
      if (!REFUND_FIELDS.has(name) && !/^metadata\[[^\]]{1,40}\]$/.test(name)) {
        return stripeError(400, {
          type: "invalid_request_error",
          code: "parameter_unknown",
          param: name,
          message: `Received unknown parameter: ${name}`,
        });
      }
    }
    const paymentIntent = form.get("payment_intent");
    if (!paymentIntent) {
      return stripeError(400, {
        type: "invalid_request_error",
        code: "parameter_missing",
        message:
          "One of the following params should be provided for this request: payment_intent or charge.",
      });
    }
    const reason = form.get("reason");
    if (reason !== null && !REFUND_REASONS.has(reason)) {
      return stripeError(400, {
        type: "invalid_request_error",
        code: "parameter_invalid_empty",
        param: "reason",
        message: `Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer`,
      });
    }
    const session = [...sessions.values()].find((s) => s.payment_intent === paymentIntent);
    if (!session || session.payment_status !== "paid") {
      return stripeError(404, {
        type: "invalid_request_error",
        code: "resource_missing",
        param: "payment_intent",
        message: `No such payment_intent: '${paymentIntent}'`,
      });
    }
    // Not Stripe's rule, ours: a refund's key names the Checkout Session it refunds.
    const key = request.headers.get("idempotency-key");
    if (!key?.includes(session.id)) {
      return stripeError(400, {
        type: "invalid_request_error",
        message:
          `fake Stripe: a refund's Idempotency-Key must name its Checkout Session ${session.id}; got ${key}`,
      });
    }
    const fingerprint = [...form.entries()].map(([k, v]) => `${k}=${v}`).sort().join("&");
    const kept = idempotent.get(key);
    if (kept) {
      if (kept.request !== fingerprint) {
        return stripeError(400, {
          type: "idempotency_error",
          message:
            `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
        });
      }
      return Response.json(kept.body, {
        status: kept.status,
        headers: { "idempotent-replayed": "true" },
      });
    }
    const keep = (status: number, body: unknown) => {
      idempotent.set(key, { request: fingerprint, status, body });
      return Response.json(body, { status });
    };
    if (refundsToRefuse > 0) {
      refundsToRefuse--;
      return keep(400, {
        error: {
          type: "invalid_request_error",
          code: "balance_insufficient",
          message: "You have insufficient funds in your Stripe account for this refund.",
        },
      });
    }
    const paid = session.amount_total ?? 0;
    // A failed or canceled refund gave its money back to the balance: it refunds nothing.
    const refunded = refunds
      .filter((r) => r.payment_intent === paymentIntent && !UNDONE.has(r.status as string))
      .reduce((sum, r) => sum + (r.amount as number), 0);
    const amount = form.has("amount") ? Number(form.get("amount")) : paid - refunded;
    if (refunded >= paid) {
      return keep(400, {
        error: {
          type: "invalid_request_error",
          code: "charge_already_refunded",
          message: `Charge for ${paymentIntent} has already been refunded.`,
        },
      });
    }
    if (!Number.isInteger(amount) || amount < 1 || amount > paid - refunded) {
      return keep(400, {
        error: {
          type: "invalid_request_error",
          code: "amount_too_large",
          param: "amount",
          message: `Refund amount (${amount}) is greater than unrefunded amount on charge (${
            paid - refunded
          })`,
        },
      });
    }
    const metadata: Record<string, string> = {};
    for (const [name, value] of form) {
      const field = /^metadata\[(.+)\]$/.exec(name);
      if (field) metadata[field[1]] = value;
    }
    const refund = refundObject({ paymentIntent, amount, metadata, reason });
    refunds.push(refund);
    // The answer as it was: a replay does not show the refund's later failure.
    return keep(200, { ...refund });
  }

  const server = serveLoopback(async (request) => {
    const url = new URL(request.url);
    const form = new URLSearchParams(await request.text());
    requests.push({ method: request.method, path: url.pathname, headers: request.headers, form });
    if (request.headers.get("authorization") !== `Bearer ${STRIPE_ENV.STRIPE_SECRET_KEY}`) {
      return Response.json({ error: { type: "invalid_request_error", message: "bad key" } }, {
        status: 401,
      });
    }
    if (request.method === "POST" && url.pathname === "/v1/refunds") {
      return createRefund(request, form);
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
    /** The refunds made, each once (a replayed key answers the first's refund again). */
    refunds,
    /** The next `count` refunds are refused as Stripe refuses one it cannot pay out. */
    refuseRefunds(count: number) {
      refundsToRefuse = count;
    },
    /**
     * What Stripe does when a refund fails at the payer's bank (`failed`) or is canceled: the
     * refund turns so (its money may be refunded again), and the events Stripe sends about it.
     * A failed refund is announced by `refund.failed` and `refund.updated`; a canceled one by
     * `refund.updated` alone.
     */
    failRefund(id: string, status: "failed" | "canceled" = "failed") {
      const refund = refunds.find((r) => r.id === id);
      if (!refund) throw new Error(`fake Stripe: no refund ${id}`);
      const previous = { status: refund.status };
      Object.assign(
        refund,
        status === "failed"
          ? {
            status,
            failure_reason: "expired_or_canceled_card",
            failure_balance_transaction: `txn_${
              crypto.randomUUID().replaceAll("-", "").slice(0, 24)
            }`,
          }
          : { status },
      );
      return {
        refund,
        updated: eventPayload("refund.updated", refund, undefined, previous),
        failed: status === "failed" ? eventPayload("refund.failed", refund) : null,
      };
    },
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

const UNDONE = new Set(["failed", "canceled"]);

/** A Refund as Stripe sends it in `refund.*` events (fields from the API reference). */
export function refundObject(
  input: {
    id?: string;
    paymentIntent: string;
    amount: number;
    status?: string;
    metadata?: Record<string, string>;
    reason?: string | null;
    /** The refund's currency (usd by default), `amount` in its smallest unit. */
    currency?: string;
    /** What the payer was shown, when it was another currency (Refund.presentment_details). */
    presentment?: { amount: number; currency: string };
  },
): Record<string, unknown> {
  return {
    id: input.id ?? `re_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    object: "refund",
    amount: input.amount,
    balance_transaction: null,
    charge: `ch_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    created: Math.floor(Date.now() / 1000),
    currency: input.currency ?? "usd",
    destination_details: { card: { type: "refund" }, type: "card" },
    metadata: input.metadata ?? {},
    payment_intent: input.paymentIntent,
    ...(input.presentment
      ? {
        presentment_details: {
          presentment_amount: input.presentment.amount,
          presentment_currency: input.presentment.currency,
        },
      }
      : {}),
    reason: input.reason === undefined ? "requested_by_customer" : input.reason,
    receipt_number: null,
    source_transfer_reversal: null,
    status: input.status ?? "succeeded",
    transfer_reversal: null,
  };
}

/** A Dispute as Stripe sends it in `charge.dispute.*` events (fields from the API reference). */
export function disputeObject(
  input: { id?: string; paymentIntent: string; amount: number; status: string; currency?: string },
): Record<string, unknown> {
  return {
    id: input.id ?? `dp_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    object: "dispute",
    amount: input.amount,
    balance_transactions: [],
    charge: `ch_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    created: Math.floor(Date.now() / 1000),
    currency: input.currency ?? "usd",
    evidence_details: { due_by: null, has_evidence: false, past_due: false, submission_count: 0 },
    is_charge_refundable: false,
    livemode: false,
    metadata: {},
    payment_intent: input.paymentIntent,
    reason: "fraudulent",
    status: input.status,
  };
}

/**
 * An Event envelope around an object, as Stripe delivers it; a `*.updated` event also carries the
 * changed fields' earlier values.
 */
export function eventPayload(
  type: string,
  object: Record<string, unknown>,
  id?: string,
  previousAttributes?: Record<string, unknown>,
): string {
  return JSON.stringify({
    id: id ?? `evt_test_${Date.now()}${eventCounter++}`,
    object: "event",
    api_version: "2026-10-28.endive",
    created: Math.floor(Date.now() / 1000),
    data: previousAttributes ? { object, previous_attributes: previousAttributes } : { object },
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
