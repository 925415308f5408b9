/**
 * The hosted top-up page, its purchase form, the development test checkout and the receipt. The
 * visitors are anonymous end users of someone else's app: every refusal is a page that says what
 * happened and that nothing was charged.
 */
import { type Context, Hono } from "hono";
import { type AppRecord, keys, type WalletRecord } from "@/lib/db.ts";
import {
  beginCheckout,
  confirmCheckoutSession,
  createCheckoutSession,
  createDevPurchase,
  creditTopUp,
  findAppByTopUpToken,
  findAppOfAnyTopUpToken,
  findDevPurchase,
  findTopUpEntry,
  type FormTokens,
  hasRoomForTopUp,
  type PaymentMode,
  paymentSourceOf,
  type Stripe,
  topUpAmountOfChoice,
} from "@/lib/payments/mod.ts";
import type { Logger, Micros } from "@/lib/core/mod.ts";
import { WalletCreditLimitError, type Wallets } from "@/lib/billing/mod.ts";
import type { Env } from "./middleware.ts";
import { clientAddress, formSizeLimit } from "./session.ts";
import type { ProxyTrust } from "@/lib/accounts/mod.ts";
import { readForm } from "./forms.ts";
import {
  crediting,
  devCheckoutPage,
  paymentProblemPage,
  receiptPage,
  topUpNotFoundPage,
  topUpPage,
} from "@/routes/pages/top_up.tsx";

export interface TopUpDeps {
  kv: Deno.Kv;
  wallets: Wallets;
  log: Logger;
  formTokens: FormTokens;
  mode: PaymentMode;
  /** Set in "stripe" mode. */
  stripe: Stripe | undefined;
  publicUrl: string;
  /** Where the client's address is read, for the bound on the Checkout Sessions it opens. */
  proxyTrust: ProxyTrust;
}

type C = Context<Env>;

const pagePath = (app: AppRecord) => `/top-up/${app.topUpToken}`;
const purchasePurpose = (app: AppRecord) => `top-up:${app.topUpToken}`;
const devCheckoutPurpose = (purchaseId: string) => `dev-checkout:${purchaseId}`;

/** The page's address must not leak to other sites, be cached, or be indexed. */
function privatePage(c: C, html: string, status = 200) {
  c.header("Cache-Control", "no-store");
  c.header("Referrer-Policy", "same-origin");
  c.header("X-Robots-Tag", "noindex, nofollow");
  return c.html(html, status as 200);
}

/** Browsers say where a form post comes from; one from another site is refused. */
function isCrossSitePost(c: C, publicUrl: string): boolean {
  const site = c.req.header("sec-fetch-site");
  if (site && site !== "same-origin" && site !== "none") return true;
  const origin = c.req.header("origin");
  if (!origin || origin === "null") return false;
  return origin !== new URL(c.req.url).origin && origin !== new URL(publicUrl).origin;
}

export function topUpRoutes(deps: TopUpDeps) {
  const { kv, formTokens, mode } = deps;
  const routes = new Hono<Env>();
  routes.use("*", formSizeLimit);

  const notFound = (c: C) => privatePage(c, topUpNotFoundPage(), 404);
  const refuse = (
    c: C,
    status: number,
    title: string,
    message: string,
    app?: AppRecord,
    // A page reached through a replaced address must not lead to the new one.
    linkBack = true,
  ) =>
    privatePage(
      c,
      paymentProblemPage({ title, message, backPath: app && linkBack ? pagePath(app) : undefined }),
      status,
    );
  const balanceShown = async (app: AppRecord): Promise<Micros | null> => {
    if (!app.topUpShowBalance) return null;
    const wallet = await kv.get<WalletRecord>(keys.wallet(app.id));
    return wallet.value?.available ?? null;
  };
  const walletFull = (c: C, app: AppRecord) =>
    refuse(
      c,
      409,
      "This app cannot take more credits",
      "This amount would take its wallet past the most credits a wallet may hold (one billion USD in all), so nothing was bought and nothing was charged. A smaller amount may still fit.",
      app,
    );
  const notReceived = (c: C, app: AppRecord) =>
    refuse(
      c,
      400,
      "Form not received",
      "The form did not arrive whole or could not be read, so nothing was bought and nothing was charged. Open the top-up page again and choose an amount.",
      app,
    );
  const expired = (c: C, app: AppRecord) =>
    refuse(
      c,
      403,
      "This form has expired",
      "The form was too old, changed, or not from this page, so nothing was bought and nothing was charged. Open the top-up page again and choose an amount.",
      app,
    );

  routes.get("/:token", async (c) => {
    const app = await findAppByTopUpToken(kv, c.req.param("token"));
    if (!app) return notFound(c);
    return privatePage(
      c,
      topUpPage({
        app,
        mode,
        formToken: await formTokens.issue(purchasePurpose(app)),
        action: pagePath(app),
        balance: await balanceShown(app),
      }),
    );
  });

  routes.post("/:token", async (c) => {
    const app = await findAppByTopUpToken(kv, c.req.param("token"));
    if (!app) return notFound(c);
    if (isCrossSitePost(c, deps.publicUrl)) return expired(c, app);
    const form = await readForm(c);
    if (!form) return notReceived(c, app);
    if (!(await formTokens.verify(purchasePurpose(app), form.form_token))) return expired(c, app);
    const amount = topUpAmountOfChoice(form.amount);
    if (amount === null) {
      return refuse(
        c,
        400,
        "Choose one of the offered amounts",
        "Credits are sold in amounts of 5, 10, 25 or 50 USD only. Nothing was bought and nothing was charged.",
        app,
      );
    }
    if (mode === "unavailable") {
      return refuse(
        c,
        503,
        "Purchases are unavailable right now",
        "This server cannot take payments at the moment. Nothing was bought and nothing was charged. Please try again later.",
        app,
      );
    }
    if (!(await hasRoomForTopUp(kv, app.id, amount))) return walletFull(c, app);
    if (mode === "dev") {
      const purchase = await createDevPurchase(kv, app.id, amount);
      return c.redirect(`${pagePath(app)}/dev-checkout/${purchase.id}`, 303);
    }
    const wait = await beginCheckout(kv, clientAddress(c, deps.proxyTrust));
    if (wait > 0) {
      c.header("Retry-After", String(wait));
      const minutes = Math.ceil(wait / 60);
      return refuse(
        c,
        429,
        "Too many checkouts",
        `Too many checkouts were opened from your network. Try again in ${minutes} minute${
          minutes === 1 ? "" : "s"
        }. Nothing was bought and nothing was charged.`,
        app,
      );
    }
    try {
      const pageUrl = `${deps.publicUrl}${pagePath(app)}`;
      const session = await createCheckoutSession({ stripe: deps.stripe!, kv }, {
        app,
        amount,
        successUrl: `${pageUrl}/receipt?session_id={CHECKOUT_SESSION_ID}`,
        cancelUrl: pageUrl,
        idempotencyKey: `top-up:${form.form_token}:${amount}`,
      });
      if (!session.url) {
        return c.redirect(`${pagePath(app)}/receipt?session_id=${session.id}`, 303);
      }
      return c.redirect(session.url, 303);
    } catch (error) {
      deps.log({
        level: "error",
        requestId: c.get("requestId"),
        event: "checkout_create_failed",
        appId: app.id,
        error: String(error),
      });
      return refuse(
        c,
        502,
        "Checkout could not be opened",
        "The payment provider did not answer as expected. Nothing was charged. Please try again in a moment.",
        app,
      );
    }
  });

  routes.get("/:token/dev-checkout/:purchase", async (c) => {
    if (mode !== "dev") return notFound(c);
    const app = await findAppByTopUpToken(kv, c.req.param("token"));
    if (!app) return notFound(c);
    const purchaseId = c.req.param("purchase");
    if (await findTopUpEntry(kv, app.id, "dev", purchaseId)) {
      return c.redirect(`${pagePath(app)}/receipt?session_id=${purchaseId}`, 303);
    }
    const purchase = await findDevPurchase(kv, app.id, purchaseId);
    if (!purchase) return notFound(c);
    return privatePage(
      c,
      devCheckoutPage({
        app,
        amount: purchase.amount,
        formToken: await formTokens.issue(devCheckoutPurpose(purchase.id)),
        action: `${pagePath(app)}/dev-checkout/${purchase.id}`,
        cancelPath: pagePath(app),
      }),
    );
  });

  routes.post("/:token/dev-checkout/:purchase", async (c) => {
    if (mode !== "dev") return notFound(c);
    const app = await findAppByTopUpToken(kv, c.req.param("token"));
    if (!app) return notFound(c);
    const purchase = await findDevPurchase(kv, app.id, c.req.param("purchase"));
    if (!purchase) return notFound(c);
    if (isCrossSitePost(c, deps.publicUrl)) return expired(c, app);
    const form = await readForm(c);
    if (!form) return notReceived(c, app);
    if (!(await formTokens.verify(devCheckoutPurpose(purchase.id), form.form_token))) {
      return expired(c, app);
    }
    try {
      await creditTopUp(deps.wallets, app.id, {
        source: "dev",
        reference: purchase.id,
        amount: purchase.amount,
      });
    } catch (error) {
      if (!(error instanceof WalletCreditLimitError)) throw error;
      return walletFull(c, app);
    }
    return c.redirect(`${pagePath(app)}/receipt?session_id=${purchase.id}`, 303);
  });

  routes.get("/:token/receipt", async (c) => {
    // A receipt outlives a replaced address: the payment was made to the app it was given to.
    const found = await findAppOfAnyTopUpToken(kv, c.req.param("token"));
    if (!found) return notFound(c);
    const { app, current } = found;
    const refuseHere = (status: number, title: string, message: string) =>
      refuse(c, status, title, message, app, current);
    const reference = c.req.query("session_id") ?? "";
    const source = paymentSourceOf(reference);
    const unknown = () =>
      refuseHere(
        404,
        "No payment found",
        "There is no completed payment with this reference for this app. If you paid, the receipt link may be incomplete; nothing is lost, the credits are added once the payment is confirmed.",
      );
    if (!source) return unknown();
    const showReceipt = async (entry: NonNullable<Awaited<ReturnType<typeof findTopUpEntry>>>) =>
      privatePage(
        c,
        receiptPage({
          app,
          entry,
          // A replaced address may have leaked: it shows a past payment, not the wallet now.
          balance: current ? await balanceShown(app) : null,
          topUpPath: current ? pagePath(app) : undefined,
        }),
      );

    if (source === "stripe" && deps.stripe) {
      const outcome = await confirmCheckoutSession(
        { ...deps, stripe: deps.stripe },
        app,
        reference,
      );
      if (outcome.status === "credited") return await showReceipt(outcome.entry);
      if (outcome.status === "processing") {
        c.header("Refresh", "3");
        return privatePage(c, crediting(app, reference));
      }
      if (outcome.status === "refunded") {
        return refuseHere(
          409,
          "Payment refunded",
          `This app's wallet could take no more credits when the payment arrived (it holds the most a wallet may), so no credits were added and the whole payment was refunded to the card or account that paid. Refunds take 5 to 10 business days to appear; quote the reference ${reference} if it does not.`,
        );
      }
      if (outcome.status === "refund_pending") {
        return refuseHere(
          409,
          "Payment received but not credited: refund pending",
          `This app's wallet could take no more credits when the payment arrived (it holds the most a wallet may), so no credits were added. The whole payment is being refunded to the card or account that paid; the refund is retried automatically until it is made. Quote the reference ${reference} if it does not appear within 10 business days.`,
        );
      }
      if (outcome.status === "refused") {
        return refuseHere(
          409,
          "Payment received but not credited",
          `This payment could not be credited to this app, so no credits were added. The operator has been alerted and will refund it; quote the reference ${reference}.`,
        );
      }
      if (outcome.status === "unpaid") {
        return refuseHere(
          402,
          "Payment not completed",
          "This checkout was not paid, so nothing was charged and no credits were added. You can choose an amount again.",
        );
      }
      return unknown();
    }
    const entry = await findTopUpEntry(kv, app.id, source, reference);
    if (entry) return await showReceipt(entry);
    if (source === "dev" && await findDevPurchase(kv, app.id, reference)) {
      return refuseHere(
        402,
        "Payment not completed",
        "This test checkout was not confirmed, so no credits were added. You can choose an amount again.",
      );
    }
    return unknown();
  });

  return routes;
}
