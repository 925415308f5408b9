import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import type { ApiKeyRecord, AppRecord } from "@/lib/db.ts";
import type { ApiKeyReveal, Session } from "@/lib/accounts/mod.ts";
import type { SpendCapsRecord, SpendCounter } from "@/lib/db.ts";
import { type CapsRefusal, SpendCapsCard } from "./spend_caps.tsx";
import { renderPage } from "@/routes/render.ts";
import {
  AppHeader,
  appPath,
  formAnchor,
  Page,
  type Saved,
  SavedNotice,
  SECRET_CARD_ID,
  When,
} from "./shared.tsx";

export type KeyRow = ApiKeyRecord & { lastUsedAt: number | null };

export interface KeyRefusal {
  error: string;
  name: string;
}

/** The one time a raw key is shown: after creating an app, a key, or rotating one. */
export function keyIssuedPage(session: Session, app: AppRecord, issued: ApiKeyReveal) {
  const heading = issued.kind === "new_app"
    ? `App “${app.name}” is ready`
    : issued.kind === "rotated_key"
    ? `Key “${issued.name}” rotated`
    : `Key “${issued.name}” created`;
  return renderPage(
    <Page title={heading} session={session} islands>
      <section class="card narrow" id={SECRET_CARD_ID}>
        <h1>{heading}</h1>
        {issued.kind === "new_app" && (
          <p>
            It has <strong>$5.00</strong> of starter credits and a first API key named “default”.
          </p>
        )}
        {issued.kind === "rotated_key" && <p>The old key no longer works.</p>}
        <div class="key-reveal">
          <p>
            <strong>Copy this API key now.</strong>{" "}
            It is shown only this once: we keep only its hash and cannot show it again. Keep it on
            your server, never in client-side code.
          </p>
          <div class="copy-row">
            <input class="mono" readOnly value={issued.secret} aria-label="New API key" />
            <Island name="CopyButton" props={{ value: issued.secret, label: "Copy key" }} />
          </div>
        </div>
        <p>
          <a class="button" href={`${appPath(app)}/keys`}>I have saved it: go to the keys</a>
        </p>
      </section>
    </Page>,
  );
}

/** The same page opened again (reloaded, or from history): the key it showed is not kept. */
export function keyShownPage(session: Session, app: AppRecord) {
  return renderPage(
    <Page title="Key already shown" session={session}>
      <section class="card narrow" id={SECRET_CARD_ID}>
        <h1>This key was already shown</h1>
        <p>
          A new API key is shown only once, on the page that followed its creation, and we keep only
          its hash. Nothing was created again. If you did not save it, rotate it on the keys page:
          that gives a new key and retires the old one.
        </p>
        <p>
          <a class="button" href={`${appPath(app)}/keys`}>Go to the keys</a>
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
      <td data-label="Name" class="key-name">{k.name}</td>
      <td data-label="Key">
        <code>{k.prefix}…</code>
      </td>
      <td data-label="Created">
        <When ms={k.createdAt} />
      </td>
      <td data-label="Last used">
        <When ms={k.lastUsedAt} />
      </td>
    </>
  );
}

/** Where the pages either side of this one are; null where there is none. */
export interface KeysPager {
  newer: string | null;
  older: string | null;
}

/** GET /dashboard/apps/:id/keys?limit=&starting_after=|ending_before=: a page of keys, newest first. */
export function keysPage(
  session: Session,
  app: AppRecord,
  keyRows: KeyRow[],
  view: {
    refused: { key?: KeyRefusal; caps?: CapsRefusal };
    // Never optional: a page shown without the stored caps would post them back empty.
    caps: SpendCapsRecord;
    /** The live keys the caps card has a form for, newest first. */
    capKeys: ApiKeyRecord[];
    /** What each of `capKeys` spent under its caps, for those whose spending is counted. */
    spent: Map<string, SpendCounter>;
    pager: KeysPager;
    saved?: Saved;
    /** Whose caps form saved (a key's id, or end-user): its confirmation goes beside it. */
    savedCaps?: string;
  },
) {
  const live = keyRows.filter((k) => k.revokedAt === null);
  const revoked = keyRows.filter((k) => k.revokedAt !== null);
  const newKey = formAnchor("new-key", view.refused.key);
  const { pager } = view;
  return renderPage(
    <Page title={`${app.name} · API keys`} session={session} islands>
      <AppHeader app={app} active="keys" />
      <section class="card" id={newKey.id}>
        <h2>Create a key</h2>
        <p class="muted">
          The key is shown once, when it is created. Keys are for your server only.
        </p>
        {newKey.alert}
        <Island
          name="NewKeyForm"
          props={{
            action: `${appPath(app)}/keys`,
            csrfToken: session.record.csrfToken,
            mode: "create",
            keysPath: `${appPath(app)}/keys`,
            refused: view.refused.key && { name: view.refused.key.name, alertId: "new-key-error" },
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
        <SavedNotice saved={view.saved} shows={["revoked"]} />
        {live.length === 0
          ? (
            <p>
              {pager.newer || pager.older
                ? "No active keys on this page."
                : "No active keys: create one to call the API."}
            </p>
          )
          : (
            <div class="table-scroll">
              <table class="stacked">
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
                              keysPath: `${appPath(app)}/keys`,
                              keyName: k.name,
                            }}
                          />
                          <form
                            method="post"
                            action={`${appPath(app)}/keys/${k.id}/revoke`}
                            class="inline-form"
                            data-confirm={`Revoke "${k.name}"? It stops working at once, and this cannot be undone.`}
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
        capKeys={view.capKeys}
        spent={view.spent}
        paged={Boolean(pager.newer || pager.older)}
        caps={view.caps}
        refused={view.refused.caps}
        saved={view.saved === "caps" ? view.savedCaps : undefined}
      />
      {revoked.length > 0 && (
        <section class="card">
          <h2>Revoked keys</h2>
          <div class="table-scroll">
            <table class="stacked">
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
                    <td data-label="Revoked">
                      <When ms={k.revokedAt} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
      {(pager.newer || pager.older) && (
        <nav class="pager" aria-label="Pages of keys">
          {pager.newer ? <a href={pager.newer} rel="prev">← Previous (newer keys)</a> : <span />}
          {pager.older && <a href={pager.older} rel="next">Next (older keys) →</a>}
        </nav>
      )}
    </Page>,
  );
}
