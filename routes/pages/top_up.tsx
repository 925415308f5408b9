import type { ComponentChildren } from "preact";
import { Island } from "@/components/Island.tsx";
import { Layout } from "@/components/Layout.tsx";
import type { AppRecord, LedgerEntry } from "@/lib/db.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import { type PaymentMode, TOP_UP_AMOUNTS_USD } from "@/lib/payments/mod.ts";
import { renderPage } from "@/routes/render.ts";

/** USD for people: at least two decimals, more only when the micro-dollars need them. */
export function displayUsd(amount: Micros): string {
  return formatUsd(amount).replace(/(\.\d\d\d*?)0+$/, "$1");
}

function BackToApp({ app }: { app: AppRecord }) {
  if (!app.topUpReturnUrl) return null;
  return (
    <a class="button secondary" href={app.topUpReturnUrl} rel="noopener noreferrer">
      ← Back to {app.name}
    </a>
  );
}

function PaymentPage(
  { title, children, islands }: { title: string; children: ComponentChildren; islands?: boolean },
) {
  return (
    <Layout title={title} islands={islands} audience="buyers">
      <div class="topup">{children}</div>
    </Layout>
  );
}

export interface TopUpPageInput {
  app: AppRecord;
  mode: PaymentMode;
  formToken: string;
  action: string;
  /** Present only when the owner lets the page show it. */
  balance: Micros | null;
}

export function topUpPage({ app, mode, formToken, action, balance }: TopUpPageInput): string {
  return renderPage(
    <PaymentPage title={`Add credits to ${app.name}`} islands>
      <p class="eyebrow">Credits for an app</p>
      <h1>Add credits to {app.name}</h1>
      <p class="lede">
        <strong>{app.name}</strong>{" "}
        runs its AI features through Tollbooth and pays for them from a prepaid wallet. Credits you
        buy here go to {app.name}'s wallet and are used up as you use the app.
      </p>
      {balance !== null && (
        <p class="balance">
          Current balance of {app.name}: <strong>{displayUsd(balance)} USD</strong>
        </p>
      )}
      {mode === "dev" && (
        <p class="notice test-mode" role="note">
          <strong>Development server.</strong>{" "}
          Purchases go through a test checkout: no card, no real money.
        </p>
      )}
      {mode === "unavailable" && (
        <p class="notice" role="status">
          <strong>Purchases are unavailable right now.</strong>{" "}
          This server cannot take payments at the moment, so nothing can be bought and nothing will
          be charged. Please try again later.
        </p>
      )}
      <Island
        name="TopUpForm"
        props={{
          action,
          formToken,
          amounts: [...TOP_UP_AMOUNTS_USD],
          initialAmount: 10,
          appName: app.name,
          mode,
        }}
      />
      <ul class="trust">
        <li>
          <strong>One-time purchase.</strong> No subscription, no account, nothing recurring.
        </li>
        <li>
          <strong>Exactly what you pay is credited.</strong> No fees, no deduction.
        </li>
        <li>
          <strong>Secure checkout.</strong>{" "}
          {mode === "dev"
            ? "In development the checkout is a test page on this server."
            : `Card details are entered on Stripe's checkout page and never reach Tollbooth or ${app.name}.`}
        </li>
        <li>
          <strong>Who you pay:</strong> Tollbooth, the service that bills{" "}
          {app.name}'s AI usage. The whole amount becomes {app.name}'s credits.
        </li>
      </ul>
      <p class="actions">
        <BackToApp app={app} />
      </p>
    </PaymentPage>,
  );
}

export function receiptPage(
  { app, entry, balance, topUpPath }: {
    app: AppRecord;
    entry: LedgerEntry;
    balance: Micros | null;
    /** Absent when the receipt was reached through a replaced address. */
    topUpPath?: string;
  },
): string {
  const date = new Date(entry.createdAt).toISOString().replace("T", " ").slice(0, 16) + " UTC";
  return renderPage(
    <PaymentPage title="Receipt">
      <p class="eyebrow">Receipt</p>
      <h1>Thank you: {displayUsd(entry.amount)} USD added to {app.name}</h1>
      <p class="lede">The credits are in {app.name}'s wallet and can be used right away.</p>
      <dl class="receipt">
        <dt>Amount</dt>
        <dd>{displayUsd(entry.amount)} USD</dd>
        <dt>Credited to</dt>
        <dd>{app.name}</dd>
        <dt>Date</dt>
        <dd>
          <time dateTime={new Date(entry.createdAt).toISOString()}>{date}</time>
        </dd>
        <dt>Reference</dt>
        <dd>
          <code class="reference">{entry.reference}</code>
        </dd>
        {balance !== null && (
          <>
            <dt>Balance now</dt>
            <dd>{displayUsd(balance)} USD</dd>
          </>
        )}
      </dl>
      <p class="muted">
        One-time purchase; nothing recurring. Keep the reference for any question.
      </p>
      <p class="actions">
        <BackToApp app={app} />
        {topUpPath && <a class="button secondary" href={topUpPath}>Buy more credits</a>}
      </p>
    </PaymentPage>,
  );
}

/** The receipt while the payment is confirmed; the response's Refresh header reloads it. */
export function crediting(app: AppRecord, reference: string): string {
  return renderPage(
    <PaymentPage title="Crediting your payment">
      <p class="eyebrow">Receipt</p>
      <h1>Payment received, crediting…</h1>
      <p class="lede" role="status">
        Your payment is being confirmed and the credits are being added to{" "}
        {app.name}'s wallet. This page refreshes by itself every few seconds.
      </p>
      <p>
        You can also close it: the credits are added as soon as the payment is confirmed, whether or
        not this page is open.
      </p>
      <p class="muted">
        Reference: <code class="reference">{reference}</code>
      </p>
    </PaymentPage>,
  );
}

export interface DevCheckoutInput {
  app: AppRecord;
  amount: Micros;
  formToken: string;
  action: string;
  cancelPath: string;
}

export function devCheckoutPage(
  { app, amount, formToken, action, cancelPath }: DevCheckoutInput,
): string {
  return renderPage(
    <PaymentPage title="Test checkout">
      <p class="test-banner" role="note">TEST CHECKOUT · development mode · no real money</p>
      <h1>Test payment of {displayUsd(amount)} USD</h1>
      <p class="lede">
        This server runs in development payment mode. Confirming adds {displayUsd(amount)}{" "}
        USD of credits to{" "}
        {app.name}'s wallet through the same path as a real payment, without charging anything.
        Production servers use Stripe Checkout instead.
      </p>
      <dl class="receipt">
        <dt>Amount</dt>
        <dd>{displayUsd(amount)} USD</dd>
        <dt>Credits for</dt>
        <dd>{app.name}</dd>
      </dl>
      <form method="post" action={action} class="stack">
        <input type="hidden" name="form_token" value={formToken} />
        <button type="submit" class="button pay">Pay {displayUsd(amount)} USD (test)</button>
      </form>
      <p class="actions">
        <a href={cancelPath}>Cancel and go back</a>
      </p>
    </PaymentPage>,
  );
}

/** A refusal or dead end on the payment pages: what happened, that nothing changed, what to do. */
export function paymentProblemPage(
  { title, message, backPath }: { title: string; message: string; backPath?: string },
): string {
  return renderPage(
    <PaymentPage title={title}>
      <h1>{title}</h1>
      <p class="lede">{message}</p>
      {backPath && (
        <p class="actions">
          <a class="button secondary" href={backPath}>Back to the top-up page</a>
        </p>
      )}
    </PaymentPage>,
  );
}

export function topUpNotFoundPage(): string {
  return paymentProblemPage({
    title: "This top-up link does not work",
    message:
      "There is no top-up page at this address. The link may be mistyped, or the app's developer may have replaced it with a new one. Go back to the app and follow its current link. Nothing was charged.",
  });
}
