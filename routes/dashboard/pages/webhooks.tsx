import type { AppRecord, WebhookEventRecord, WebhookSettingsRecord } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { retrySpanText, WEBHOOK_DEFAULTS } from "@/lib/webhooks/mod.ts";
import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import { renderPage } from "@/routes/render.ts";
import { AppHeader, appPath, formAnchor, Page, When } from "./shared.tsx";

const STATES: Record<WebhookEventRecord["state"], string> = {
  pending: "retrying",
  delivered: "delivered",
  failed: "failed",
};

function lastResult(e: WebhookEventRecord): string {
  const last = e.attempts.at(-1);
  if (!last) return "not sent yet";
  return last.status !== null ? `HTTP ${last.status}` : `unreachable: ${last.error}`;
}

/** GET /dashboard/apps/:id/webhooks: the endpoint, the threshold, and the deliveries. */
export function webhooksPage(
  session: Session,
  view: {
    app: AppRecord;
    settings: WebhookSettingsRecord | null;
    events: WebhookEventRecord[];
    /** Shown once, right after it was made. */
    newSecret?: string;
    error?: string;
    url?: string;
    threshold?: string;
  },
) {
  const { app, settings } = view;
  const base = `${appPath(app)}/webhooks`;
  const endpoint = formAnchor("endpoint", view.error ? { error: view.error } : undefined);
  const threshold = view.threshold ??
    (settings?.lowBalanceThreshold != null ? formatUsd(settings.lowBalanceThreshold) : "");
  return renderPage(
    <Page title={`${app.name} · Webhooks`} session={session} islands={Boolean(view.newSecret)}>
      <AppHeader app={app} active="webhooks" />
      {view.newSecret && (
        <section class="card">
          <div class="key-reveal">
            <p>
              <strong>Copy this signing secret now.</strong>{" "}
              It is shown only this once. Check every event's <code>Tollbooth-Signature</code>{" "}
              with it (see <a href="/docs/webhooks">webhooks</a>).
            </p>
            <div class="copy-row">
              <input class="mono" readOnly value={view.newSecret} aria-label="Signing secret" />
              <Island name="CopyButton" props={{ value: view.newSecret, label: "Copy secret" }} />
            </div>
          </div>
        </section>
      )}
      <section class="card" id={endpoint.id}>
        <h2>Endpoint</h2>
        <p class="muted">
          Tollbooth POSTs a signed event to this address when the balance (available plus held by
          requests in flight) falls below the threshold (once per crossing, again after it has risen
          above), and when a top-up is credited. A failed delivery is retried with growing waits,
          {" "}
          {WEBHOOK_DEFAULTS.maxAttempts} attempts in all over {retrySpanText()}.
        </p>
        {endpoint.alert}
        <form method="post" action={`${base}${endpoint.fragment}`} class="stack">
          <CsrfField session={session} />
          <label>
            Endpoint (https)
            <input
              name="url"
              type="url"
              required
              value={view.url ?? settings?.url ?? ""}
              placeholder="https://your-app.example/tollbooth-events"
              {...endpoint.firstField}
            />
          </label>
          <label>
            Low-balance threshold in USD (optional)
            <input
              name="threshold"
              inputMode="decimal"
              value={threshold}
              placeholder="e.g. 5.00"
            />
          </label>
          <button type="submit" class="button">Save webhook</button>
        </form>
      </section>
      {settings && (
        <section class="card">
          <h2>Test and secret</h2>
          <form method="post" action={`${base}/test`} class="inline-form">
            <CsrfField session={session} />
            <button type="submit" class="button secondary">Send test event</button>
          </form>{" "}
          <form method="post" action={`${base}/rotate-secret`} class="inline-form">
            <CsrfField session={session} />
            <button type="submit" class="button secondary">Replace the signing secret</button>
          </form>{" "}
          <form method="post" action={`${base}/delete`} class="inline-form">
            <CsrfField session={session} />
            <button type="submit" class="button danger">Remove webhook</button>
          </form>
        </section>
      )}
      <section class="card">
        <h2>Deliveries</h2>
        {view.events.length === 0 ? <p class="muted">No events yet.</p> : (
          <div class="table-scroll">
            <table class="deliveries">
              <thead>
                <tr>
                  <th scope="col">Created</th>
                  <th scope="col">Event</th>
                  <th scope="col">State</th>
                  <th scope="col" class="num">Attempts</th>
                  <th scope="col">Last result</th>
                  <th scope="col">Next attempt</th>
                </tr>
              </thead>
              <tbody>
                {view.events.map((e) => (
                  <tr data-event={e.id}>
                    <td>
                      <When ms={e.createdAt} />
                    </td>
                    <td>
                      <code>{e.type}</code> <code class="small">{e.id}</code>
                    </td>
                    <td>{STATES[e.state]}</td>
                    <td class="num">{e.attempts.length}</td>
                    <td>{lastResult(e)}</td>
                    <td>{e.nextAttemptAt === null ? "—" : <When ms={e.nextAttemptAt} />}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>
    </Page>,
  );
}
