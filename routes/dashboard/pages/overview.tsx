import { Island } from "@/components/Island.tsx";
import { CsrfField } from "@/components/CsrfField.tsx";
import type { AppRecord, RateLimits, WalletRecord } from "@/lib/db.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import type { DaySpend, ModelSpend } from "@/lib/billing/mod.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { RateLimitsCard } from "./limits.tsx";
import { TopUpLink } from "./top_up_link.tsx";
import { Alert, AppHeader, appPath, Balances, Page, usd } from "./shared.tsx";

/** GET /dashboard/apps/:id — money at a glance. */
export function overviewPage(
  session: Session,
  view: {
    app: AppRecord;
    wallet: WalletRecord;
    topUpUrl: string;
    days: DaySpend[];
    models: ModelSpend[];
    limits: { effective: RateLimits; defaults: RateLimits };
    error?: string;
    limitsError?: string;
  },
) {
  const { app, wallet } = view;
  return renderPage(
    <Page title={app.name} session={session} islands>
      <AppHeader app={app} active="overview" />
      <Balances wallet={wallet} />
      <section class="card">
        <h2>Daily spend, last 30 days</h2>
        <Island
          name="SpendChart"
          props={{ days: view.days.map((d) => ({ ...d, usd: formatUsd(d.micros) })) }}
        />
      </section>
      <section class="card">
        <h2>Spend by model</h2>
        {view.models.length === 0 ? <p class="muted">Nothing spent yet.</p> : (
          <table>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col" class="num">Spent</th>
              </tr>
            </thead>
            <tbody>
              {view.models.map((m) => (
                <tr>
                  <td>
                    <code>{m.model}</code>
                  </td>
                  <td class="num">{usd(m.micros)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <TopUpLink session={session} app={app} url={view.topUpUrl} />
      <RateLimitsCard session={session} app={app} limits={view.limits} error={view.limitsError} />
      <section class="card">
        <h2>Rename</h2>
        <Alert error={view.error} />
        <form method="post" action={`${appPath(app)}/rename`} class="row-form">
          <CsrfField session={session} />
          <label>
            App name
            <input name="name" required maxLength={100} value={app.name} />
          </label>
          <button type="submit" class="button secondary">Rename</button>
        </form>
      </section>
    </Page>,
  );
}
