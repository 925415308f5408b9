import type { AppRecord, WebhookEventRecord, WebhookSettingsRecord } from "@/lib/db.ts";
import type { Session, WebhookSecretReveal } from "@/lib/accounts/mod.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { retrySpanText, WEBHOOK_DEFAULTS } from "@/lib/webhooks/mod.ts";
import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import { renderPage } from "@/routes/render.ts";
import {
  Alert,
  AppHeader,
  appPath,
  formAnchor,
  Page,
  type Saved,
  SavedNotice,
  SECRET_CARD_ID,
  When,
} from "./shared.tsx";

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

/** The one time a signing secret is shown. */
function SigningSecretCard({ revealed }: { revealed: WebhookSecretReveal }) {
  return (
    <section class="card" id={SECRET_CARD_ID}>
      <h2>
        {revealed.kind === "replaced_webhook_secret"
          ? "Signing secret replaced"
          : "Webhook saved with its signing secret"}
      </h2>
      {revealed.kind === "replaced_webhook_secret" && (
        <p>Events are signed with this secret from now on; the old one no longer signs them.</p>
      )}
      <div class="key-reveal">
        <p>
          <strong>Copy this signing secret now.</strong>{" "}
          It is shown only this once. Check every event's <code>Tollbooth-Signature</code>{" "}
          with it (see <a href="/docs/webhooks">webhooks</a>).
        </p>
        <div class="copy-row">
          <input class="mono" readOnly value={revealed.secret} aria-label="Signing secret" />
          <Island name="CopyButton" props={{ value: revealed.secret, label: "Copy secret" }} />
        </div>
      </div>
    </section>
  );
}

/** A refused endpoint form: the field the error concerns, and what was typed. */
export interface EndpointRefusal {
  error: string;
  field: "url" | "threshold";
  url: string;
  threshold: string;
}

/** GET /dashboard/apps/:id/webhooks: the endpoint, the threshold, and the deliveries. */
export function webhooksPage(
  session: Session,
  view: {
    app: AppRecord;
    settings: WebhookSettingsRecord | null;
    events: WebhookEventRecord[];
    /**
     * On the page the form that made a secret redirects to: the secret, shown once, and on that
     * page opened again, that it was already shown.
     */
    secret?: WebhookSecretReveal | "already_shown";
    refused?: EndpointRefusal;
    /** Why no test event was sent (too many a minute): said beside its button. */
    testRefused?: string;
    saved?: Saved;
  },
) {
  const { app, settings } = view;
  const base = `${appPath(app)}/webhooks`;
  const { refused } = view;
  const endpoint = formAnchor("endpoint", refused);
  const invalid = (field: EndpointRefusal["field"]) =>
    refused?.field === field ? endpoint.invalidField : {};
  const threshold = refused?.threshold ??
    (settings?.lowBalanceThreshold != null ? formatUsd(settings.lowBalanceThreshold) : "");
  return renderPage(
    // The script shows a new secret, and asks before the secret is replaced or the hook removed.
    <Page title={`${app.name} · Webhooks`} session={session} islands>
      <AppHeader app={app} active="webhooks" />
      {view.secret === "already_shown"
        ? (
          <section class="card" id={SECRET_CARD_ID}>
            <h2>This signing secret was already shown</h2>
            <p>
              A new signing secret is shown only once, on the page that followed it. Nothing was
              replaced again. If you did not save it, replace it: events are signed with the new one
              from then on.
            </p>
          </section>
        )
        : view.secret && <SigningSecretCard revealed={view.secret} />}
      <section class="card" id={endpoint.id}>
        <h2>Endpoint</h2>
        <p class="muted">
          Tollbooth POSTs a signed event to this address when the balance (available plus held by
          requests in flight) falls below the threshold (once per crossing, again after it has risen
          above), when a top-up is credited, when one is refunded or charged back, and when a
          dispute is won. A failed delivery is retried with growing waits,{" "}
          {WEBHOOK_DEFAULTS.maxAttempts} attempts in all over {retrySpanText()}.
        </p>
        {endpoint.alert}
        <SavedNotice saved={view.saved} shows={["webhook", "webhook-removed"]} />
        <form method="post" action={base} class="stack">
          <CsrfField session={session} />
          <label>
            Endpoint (https)
            <input
              name="url"
              type="url"
              required
              value={refused?.url ?? settings?.url ?? ""}
              placeholder="https://your-app.example/tollbooth-events"
              {...invalid("url")}
            />
          </label>
          <label>
            Low-balance threshold in USD (optional)
            <input
              name="threshold"
              inputMode="decimal"
              value={threshold}
              placeholder="e.g. 5.00"
              {...invalid("threshold")}
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
            <button
              type="submit"
              class="button secondary"
              {...(view.testRefused
                ? { autofocus: true, "aria-describedby": "test-event-error" }
                : {})}
            >
              Send test event
            </button>
            <Alert error={view.testRefused} id="test-event-error" />
          </form>{" "}
          <form
            method="post"
            action={`${base}/rotate-secret`}
            class="inline-form"
            data-confirm="Replace the signing secret? Your endpoint must take the new one: events signed with it fail the old one's check."
          >
            <CsrfField session={session} />
            <button type="submit" class="button secondary">Replace the signing secret</button>
          </form>{" "}
          <form
            method="post"
            action={`${base}/delete`}
            class="inline-form"
            data-confirm="Remove the webhook? No more events are sent to it."
          >
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
