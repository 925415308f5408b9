import { Island } from "@/components/Island.tsx";
import { CsrfField } from "@/components/CsrfField.tsx";
import type { AppRecord, WalletRecord } from "@/lib/db.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import type { DaySpend, ModelSpend } from "@/lib/billing/mod.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { type AppLimits, type LimitsRefusal, RateLimitsCard } from "./limits.tsx";
import { TopUpLink, type TopUpSettingsRefusal } from "./top_up_link.tsx";
import {
  AppHeader,
  appPath,
  Balances,
  formAnchor,
  Page,
  type Saved,
  SavedNotice,
  usd,
} from "./shared.tsx";

/** GET /dashboard/apps/:id — money at a glance. */
export function overviewPage(
  session: Session,
  view: {
    app: AppRecord;
    wallet: WalletRecord;
    topUpUrl: string;
    days: DaySpend[];
    models: ModelSpend[];
    limits: AppLimits;
    renameRefused?: { error: string; name: string };
    limitsRefused?: LimitsRefusal;
    topUpRefused?: TopUpSettingsRefusal;
    saved?: Saved;
  },
) {
  const { app, wallet } = view;
  const rename = formAnchor("rename", view.renameRefused);
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
        <h2>Spend by model, all time</h2>
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
      <TopUpLink
        session={session}
        app={app}
        url={view.topUpUrl}
        on="overview"
        refused={view.topUpRefused}
        saved={view.saved}
      />
      <RateLimitsCard
        session={session}
        app={app}
        limits={view.limits}
        refused={view.limitsRefused}
        saved={view.saved}
      />
      <section class="card" id={rename.id}>
        <h2>Rename</h2>
        {rename.alert}
        <SavedNotice saved={view.saved} shows={["rename"]} />
        <form method="post" action={`${appPath(app)}/rename`} class="row-form">
          <CsrfField session={session} />
          <label>
            App name
            <input
              name="name"
              required
              maxLength={100}
              value={view.renameRefused?.name ?? app.name}
              {...rename.invalidField}
            />
          </label>
          <button type="submit" class="button secondary">Rename</button>
        </form>
      </section>
    </Page>,
  );
}
