import type { AppRecord, LedgerEntry, WalletRecord } from "@/lib/db.ts";
import type { Micros } from "@/lib/core/mod.ts";
import { creditedOf, takesBack, type WalletActivity } from "@/lib/billing/mod.ts";
import { paymentMethodName, paymentSourceOf } from "@/lib/payments/mod.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { TopUpLink, type TopUpSettingsRefusal } from "./top_up_link.tsx";
import { AppHeader, appPath, Balances, Page, type Saved, usd, When } from "./shared.tsx";

const CREDIT_LABELS = {
  starter: "Starter credits",
  top_up: "Top-up",
  operator_credit: "Credit from Tollbooth",
  refund: "Top-up refunded",
  chargeback: "Top-up disputed (chargeback)",
  refund_reversed: "Refund failed: given back",
  chargeback_reversed: "Dispute won: chargeback given back",
};

/**
 * A credit's kind and reason, and its payment reference: the one a buyer's receipt shows, so an
 * owner can find a buyer's payment. A top-up's stored reason repeats its kind and amount, so only
 * how it was paid is said.
 */
function CreditDescription({ entry }: { entry: LedgerEntry }) {
  const label = CREDIT_LABELS[entry.kind];
  const source = entry.kind === "top_up" && entry.reference
    ? paymentSourceOf(entry.reference)
    : null;
  const detail = source ? `via ${paymentMethodName(source)}` : entry.reason;
  return (
    <>
      {label}
      {detail !== label && <span class="muted">{` — ${detail}`}</span>}
      {entry.reference && (
        <span class="ledger-reference muted small">
          Reference <code>{entry.reference}</code>
        </span>
      )}
    </>
  );
}

/** GET /dashboard/apps/:id/wallet */
export function walletPage(
  session: Session,
  view: {
    app: AppRecord;
    wallet: WalletRecord;
    /** Usage never charged because its reservation and the balance could not cover it. */
    uncharged: Micros;
    topUpUrl: string;
    activity: WalletActivity[];
    keyNames: Map<string, string>;
    /** Where each link leads; null where there is nothing that way. */
    pager: { newest: string | null; olderCredits: string | null; olderCharges: string | null };
    topUpRefused?: TopUpSettingsRefusal;
    saved?: Saved;
  },
) {
  const { app, wallet, pager } = view;
  return renderPage(
    <Page title={`${app.name} · Wallet`} session={session} islands>
      <AppHeader app={app} active="wallet" />
      <Balances wallet={wallet} />
      <p class="muted">
        Credited in total: {usd(creditedOf(wallet))} (starter {usd(wallet.starter)}, top-ups{" "}
        {usd(wallet.topUps)}, credits from Tollbooth {usd(wallet.operatorCredits)}).{" "}
        {(wallet.refunded ?? 0) > 0
          ? (
            <>
              Refunded and disputed top-ups took back{" "}
              {usd(wallet.refunded ?? 0)}: available + in flight + spent always equals the total
              less that.
            </>
          )
          : <>Available + in flight + spent always equals that total.</>}
      </p>
      {(wallet.owed ?? 0) > 0 && (
        <p class="muted" data-testid="owed">
          Owed: <strong>{usd(wallet.owed ?? 0)}</strong>{" "}
          of a refunded or disputed top-up had already been spent or was held by requests in flight.
          It is taken from the balance as money comes back (holds ending, the next top-up) before
          anything is reserved.
        </p>
      )}
      {view.uncharged > 0 && (
        <p class="muted" data-testid="uncharged">
          Not charged: <strong>{usd(view.uncharged)}</strong>{" "}
          of usage went beyond what its requests' reservations and the balance could cover. A wallet
          never goes below zero, so that part was not taken and is not owed; it is not in the spent
          total.
        </p>
      )}
      <TopUpLink
        session={session}
        app={app}
        url={view.topUpUrl}
        on="wallet"
        refused={view.topUpRefused}
        saved={view.saved}
      />
      <section class="card">
        <h2>{pager.newest ? "Older activity" : "Latest activity"}</h2>
        <p class="muted">
          Up to 30 credits and refunds and up to 30 charges, newest first. Each kind pages on its
          own: older credits keep the charges shown, and older charges the credits. Every entry, of
          both kinds, is also in the management API's ledger.
        </p>
        <div class="table-scroll">
          <table class="stacked">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">What</th>
                <th scope="col" class="num">Amount</th>
              </tr>
            </thead>
            <tbody>
              {view.activity.map((a) =>
                a.kind === "credit"
                  ? (
                    <tr>
                      <td data-label="Time">
                        <When ms={a.at} />
                      </td>
                      <td data-label="What">
                        <CreditDescription entry={a.entry} />
                      </td>
                      {takesBack(a.entry.kind)
                        ? <td class="num" data-label="Amount">−{usd(a.entry.amount)}</td>
                        : <td class="num credit" data-label="Amount">+{usd(a.entry.amount)}</td>}
                    </tr>
                  )
                  : (
                    <tr>
                      <td data-label="Time">
                        <When ms={a.at} />
                      </td>
                      <td data-label="What">
                        Request <code class="small">{a.usage.requestId}</code> ·{" "}
                        <code>{a.usage.model}</code> · key{" "}
                        {view.keyNames.get(a.usage.keyId) ?? a.usage.keyId}
                      </td>
                      <td class="num" data-label="Amount">
                        −{usd(a.usage.cost)}
                        {a.usage.uncharged > 0 && (
                          <span class="muted small">
                            {` (${usd(a.usage.uncharged)} not charged)`}
                          </span>
                        )}
                      </td>
                    </tr>
                  )
              )}
            </tbody>
          </table>
        </div>
        <nav class="pager" aria-label="Pages">
          {pager.newest && <a href={pager.newest}>Newest</a>}
          {pager.olderCredits && <a href={pager.olderCredits}>Older credits →</a>}
          {pager.olderCharges && <a href={pager.olderCharges}>Older charges →</a>}
        </nav>
        <p class="muted">
          All requests with their tokens are on the <a href={`${appPath(app)}/usage`}>usage</a>{" "}
          page.
        </p>
      </section>
    </Page>,
  );
}
