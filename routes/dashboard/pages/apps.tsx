import { CsrfField } from "@/components/CsrfField.tsx";
import type { AppRecord, WalletRecord } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { appPath, formAnchor, Page, usd, When } from "./shared.tsx";

/** GET /dashboard: the owner's apps with their balances, and a form for a new one. */
export function appsPage(
  session: Session,
  apps: { app: AppRecord; wallet: WalletRecord }[],
  refused?: { error: string; name: string },
) {
  const newApp = formAnchor("new-app", refused);
  return renderPage(
    <Page title="Your apps" session={session}>
      <h1>Your apps</h1>
      <p class="muted">Signed in as {session.owner.email}.</p>
      {apps.length === 0
        ? (
          <p>
            You have no apps yet. Create one: it starts with <strong>$5.00</strong>{" "}
            of credits and an API key.
          </p>
        )
        : (
          <div class="table-scroll">
            <table class="stacked">
              <thead>
                <tr>
                  <th scope="col">App</th>
                  <th scope="col" class="num">Available</th>
                  <th scope="col" class="num">In flight</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {apps.map(({ app, wallet }) => (
                  <tr>
                    <td data-label="App">
                      <a href={appPath(app)}>{app.name}</a>
                    </td>
                    <td class="num" data-label="Available">{usd(wallet.available)}</td>
                    <td class="num" data-label="In flight">{usd(wallet.reserved)}</td>
                    <td data-label="Created">
                      <When ms={app.createdAt} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      <section class="card" id={newApp.id}>
        <h2>Create an app</h2>
        {newApp.alert}
        <form method="post" action="/dashboard/apps" class="row-form">
          <CsrfField session={session} />
          <label>
            App name
            <input
              name="name"
              required
              maxLength={100}
              placeholder="e.g. Recipe assistant"
              value={refused?.name}
              {...newApp.invalidField}
            />
          </label>
          <button type="submit" class="button">Create app</button>
        </form>
      </section>
    </Page>,
  );
}
