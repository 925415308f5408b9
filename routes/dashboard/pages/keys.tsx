import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import type { ApiKeyRecord, AppRecord } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import type { SpendCapsRecord } from "@/lib/db.ts";
import { SpendCapsCard } from "./spend_caps.tsx";
import { renderPage } from "@/routes/render.ts";
import { Alert, AppHeader, appPath, Page, When } from "./shared.tsx";

export type KeyRow = ApiKeyRecord & { lastUsedAt: number | null };

/** The one time a raw key is shown: after creating an app, a key, or rotating one. */
export function keyIssuedPage(
  session: Session,
  app: AppRecord,
  issued: { apiKey: string; name: string; reason: "app" | "key" | "rotate" },
) {
  const heading = issued.reason === "app"
    ? `App “${app.name}” is ready`
    : issued.reason === "rotate"
    ? `Key “${issued.name}” rotated`
    : `Key “${issued.name}” created`;
  return renderPage(
    <Page title={heading} session={session} islands>
      <section class="card narrow">
        <h1>{heading}</h1>
        {issued.reason === "app" && (
          <p>
            It has <strong>$5.000000</strong>{" "}
            of starter credits and a first API key named “default”.
          </p>
        )}
        {issued.reason === "rotate" && <p>The old key no longer works.</p>}
        <div class="key-reveal">
          <p>
            <strong>Copy this API key now.</strong>{" "}
            It is shown only this once: we keep only its hash and cannot show it again. Keep it on
            your server, never in client-side code.
          </p>
          <div class="copy-row">
            <input class="mono" readOnly value={issued.apiKey} aria-label="New API key" />
            <Island name="CopyButton" props={{ value: issued.apiKey, label: "Copy key" }} />
          </div>
        </div>
        <p>
          <a class="button" href={`${appPath(app)}/keys`}>I have saved it: go to the keys</a>
        </p>
      </section>
    </Page>,
  );
}

/** The column heads of the cells below. */
function KeyHeaderCells() {
  return (
    <>
      <th scope="col">Name</th>
      <th scope="col">Key</th>
      <th scope="col">Created</th>
      <th scope="col">Last used</th>
    </>
  );
}

/** The cells a key row shows whether it is live or revoked. */
function KeyCells({ k }: { k: KeyRow }) {
  return (
    <>
      <td>{k.name}</td>
      <td>
        <code>{k.prefix}…</code>
      </td>
      <td>
        <When ms={k.createdAt} />
      </td>
      <td>
        <When ms={k.lastUsedAt} />
      </td>
    </>
  );
}

/** GET /dashboard/apps/:id/keys */
export function keysPage(
  session: Session,
  app: AppRecord,
  keyRows: KeyRow[],
  error: string | undefined,
  // Never defaulted: a page shown without the stored caps would post them back empty.
  caps: { record: SpendCapsRecord; error?: string },
) {
  const live = keyRows.filter((k) => k.revokedAt === null);
  const revoked = keyRows.filter((k) => k.revokedAt !== null);
  return renderPage(
    <Page title={`${app.name} · API keys`} session={session} islands>
      <AppHeader app={app} active="keys" />
      <section class="card">
        <h2>Create a key</h2>
        <p class="muted">
          The key is shown once, when it is created. Keys are for your server only.
        </p>
        <Alert error={error} />
        <Island
          name="NewKeyForm"
          props={{
            action: `${appPath(app)}/keys`,
            csrfToken: session.record.csrfToken,
            mode: "create",
          }}
        />
      </section>
      <section class="card">
        <h2>Active keys</h2>
        <p class="muted">
          <strong>Rotate</strong>{" "}
          issues a new key with the same name and revokes the old one in the same step: deploy the
          new key right away, requests with the old one are refused from that moment.{" "}
          <strong>Revoke</strong> stops a key at its very next request.
        </p>
        {live.length === 0
          ? <p>No active keys: create one to call the API.</p>
          : (
            <div class="table-scroll">
              <table>
                <thead>
                  <tr>
                    <KeyHeaderCells />
                    <th scope="col">
                      <span class="visually-hidden">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {live.map((k) => (
                    <tr>
                      <KeyCells k={k} />
                      <td>
                        <div class="actions">
                          <Island
                            name="NewKeyForm"
                            props={{
                              action: `${appPath(app)}/keys/${k.id}/rotate`,
                              csrfToken: session.record.csrfToken,
                              mode: "rotate",
                              keyName: k.name,
                            }}
                          />
                          <form
                            method="post"
                            action={`${appPath(app)}/keys/${k.id}/revoke`}
                            class="inline-form"
                          >
                            <CsrfField session={session} />
                            <button
                              type="submit"
                              class="button danger small"
                              aria-label={`Revoke key ${k.name}`}
                            >
                              Revoke
                            </button>
                          </form>
                        </div>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
      </section>
      <SpendCapsCard
        session={session}
        app={app}
        live={live}
        caps={caps.record}
        error={caps.error}
      />
      {revoked.length > 0 && (
        <section class="card">
          <h2>Revoked keys</h2>
          <div class="table-scroll">
            <table>
              <thead>
                <tr>
                  <KeyHeaderCells />
                  <th scope="col">Revoked</th>
                </tr>
              </thead>
              <tbody>
                {revoked.map((k) => (
                  <tr class="muted">
                    <KeyCells k={k} />
                    <td>
                      <When ms={k.revokedAt} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
    </Page>,
  );
}
