import { type Context, Hono } from "hono";
import { AccountNav } from "@/components/AccountNav.tsx";
import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import { Layout } from "@/components/Layout.tsx";
import {
  isManagementKeyReveal,
  type ManagementKeyReveal,
  type Session,
  takeReveal,
} from "@/lib/accounts/mod.ts";
import { NotFoundError } from "@/lib/core/mod.ts";
import type { ManagementKeyRecord } from "@/lib/db.ts";
import {
  issueManagementKey,
  listManagementKeys,
  revokeAllManagementKeys,
  revokeManagementKey,
  TooManyManagementKeysError,
} from "@/lib/management/mod.ts";
import { notFoundPage } from "@/routes/pages/not_found.tsx";
import { renderPage } from "@/routes/render.ts";
import type { PageEnv } from "@/routes/session.ts";
import { formAnchor, type Saved, SavedNotice, SECRET_CARD_ID, when } from "./pages/shared.tsx";
import { redirectToReveal } from "./reveals.ts";
import { redirectSaved, takeSaved } from "./saved_notice.ts";

const PATH = "/dashboard/management-keys";
export const REVOKE_ALL_MANAGEMENT_KEYS_PATH = `${PATH}/revoke-all`;

/** One form that revokes every live management key: the step after a suspected compromise. */
export function RevokeAllManagementKeysForm({ session, live }: { session: Session; live: number }) {
  return (
    <form
      method="post"
      action={REVOKE_ALL_MANAGEMENT_KEYS_PATH}
      class="inline-form"
      data-confirm={`Revoke all ${live} management key${
        live === 1 ? "" : "s"
      }? Each stops working at once, and this cannot be undone.`}
    >
      <CsrfField session={session} />
      <button type="submit" class="button danger">Revoke all management keys</button>
    </form>
  );
}

/** GET /dashboard/management-keys: the owner's keys for the management API. */
function managementKeysPage(
  session: Session,
  { keys: rows, olderRevoked }: { keys: ManagementKeyRecord[]; olderRevoked: number },
  refused?: { error: string; name: string },
  saved?: Saved,
) {
  const newKey = formAnchor("new-management-key", refused);
  const live = rows.filter((k) => k.revokedAt === null);
  const revoked = rows.filter((k) => k.revokedAt !== null);
  return renderPage(
    // The script asks before a revocation (data-confirm).
    <Layout title="Management keys" nav={<AccountNav session={session} />} islands>
      <p class="crumbs">
        <a href="/dashboard">Apps</a> / <span>Management keys</span>
      </p>
      <h1>Management keys</h1>
      <p class="muted">
        A management key (<code>tbm_…</code>) lets your own servers call the{" "}
        <a href="/docs/management">management API</a>: list your apps and balances, issue and revoke
        API keys, read usage and the ledger. It acts on all of your apps: keep it on your server. It
        is shown once, when it is created.
      </p>
      <section class="card" id={newKey.id}>
        <h2>Create a management key</h2>
        {newKey.alert}
        <form method="post" action={PATH} class="row-form">
          <CsrfField session={session} />
          <label>
            Key name
            <input
              name="name"
              required
              maxLength={60}
              placeholder="e.g. billing backend"
              value={refused?.name}
              {...newKey.invalidField}
            />
          </label>
          <button type="submit" class="button">Create management key</button>
        </form>
      </section>
      <section class="card">
        <h2>Active management keys</h2>
        <SavedNotice saved={saved} shows={["management-keys-revoked"]} />
        {live.length === 0 ? <p>No management keys yet.</p> : (
          <div class="table-scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Key</th>
                  <th scope="col">Created</th>
                  <th scope="col">
                    <span class="visually-hidden">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {live.map((k) => (
                  <tr>
                    <td>{k.name}</td>
                    <td>
                      <code>{k.prefix}…</code>
                    </td>
                    <td>{when(k.createdAt)}</td>
                    <td>
                      <form
                        method="post"
                        action={`${PATH}/${k.id}/revoke`}
                        class="inline-form"
                        data-confirm={`Revoke management key "${k.name}"? It stops working at once, and this cannot be undone.`}
                      >
                        <CsrfField session={session} />
                        <button
                          type="submit"
                          class="button danger small"
                          aria-label={`Revoke management key ${k.name}`}
                        >
                          Revoke
                        </button>
                      </form>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        {live.length > 1 && <RevokeAllManagementKeysForm session={session} live={live.length} />}
      </section>
      {revoked.length > 0 && (
        <section class="card">
          <h2>Revoked management keys</h2>
          <ul>
            {revoked.map((k) => (
              <li class="muted">
                {k.name} (<code>{k.prefix}…</code>), revoked {when(k.revokedAt!)}
              </li>
            ))}
          </ul>
          {olderRevoked > 0 && (
            <p class="muted">
              And {olderRevoked} older revoked key{olderRevoked === 1 ? "" : "s"}, not shown.
            </p>
          )}
        </section>
      )}
    </Layout>,
  );
}

/** The one time a raw management key is shown: the page the creation form redirects to. */
function managementKeyIssuedPage(session: Session, issued: ManagementKeyReveal) {
  const managementKey = issued.secret;
  return renderPage(
    <Layout title="Management key created" nav={<AccountNav session={session} />} islands>
      <section class="card narrow" id={SECRET_CARD_ID}>
        <h1>Management key “{issued.name}” created</h1>
        <div class="key-reveal">
          <p>
            <strong>Copy this management key now.</strong>{" "}
            It is shown only this once: we keep only its hash. It acts on all of your apps; keep it
            on your server.
          </p>
          <div class="copy-row">
            <input class="mono" readOnly value={managementKey} aria-label="New management key" />
            <Island name="CopyButton" props={{ value: managementKey, label: "Copy key" }} />
          </div>
        </div>
        <p>
          <a class="button" href={PATH}>I have saved it: back to management keys</a>
        </p>
      </section>
    </Layout>,
  );
}

/** The same page opened again (reloaded, or from history): the key it showed is not kept. */
function managementKeyShownPage(session: Session) {
  return renderPage(
    <Layout title="Management key already shown" nav={<AccountNav session={session} />}>
      <section class="card narrow" id={SECRET_CARD_ID}>
        <h1>This management key was already shown</h1>
        <p>
          A new management key is shown only once, on the page that followed its creation, and we
          keep only its hash. Nothing was created again. If you did not save it, revoke it and
          create another.
        </p>
        <p>
          <a class="button" href={PATH}>Go to the management keys</a>
        </p>
      </section>
    </Layout>,
  );
}

/** Mounted inside the dashboard's router, behind its session, CSRF and owner checks. */
export function managementKeyRoutes(kv: Deno.Kv) {
  const r = new Hono<PageEnv>();
  const session = (c: Context<PageEnv>) => c.get("session")!;

  r.get("/", async (c) => {
    const listed = await listManagementKeys(kv, session(c).owner.id);
    return c.html(managementKeysPage(session(c), listed, undefined, takeSaved(c)));
  });

  r.post("/", async (c) => {
    const ownerId = session(c).owner.id;
    const name = (c.get("form").name ?? "").trim();
    const refuse = async (error: string) =>
      c.html(
        managementKeysPage(session(c), await listManagementKeys(kv, ownerId), {
          error,
          name: c.get("form").name ?? "",
        }),
        400,
      );
    if (name.length === 0 || name.length > 60) return refuse("A key name has 1 to 60 characters.");
    let issued;
    try {
      issued = await issueManagementKey(kv, ownerId, name);
    } catch (error) {
      if (!(error instanceof TooManyManagementKeysError)) throw error;
      return refuse("You have as many management keys as allowed: revoke one first.");
    }
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "new_management_key",
      name,
      secret: issued.managementKey,
    });
  });

  r.get("/issued/:revealId", async (c) => {
    const revealId = c.req.param("revealId");
    const issued = await takeReveal(kv, session(c).id, revealId, isManagementKeyReveal);
    if (!issued) return c.html(managementKeyShownPage(session(c)));
    return c.html(managementKeyIssuedPage(session(c), issued));
  });

  r.post("/revoke-all", async (c) => {
    await revokeAllManagementKeys(kv, session(c).owner.id);
    return redirectSaved(c, PATH, "management-keys-revoked");
  });

  r.post("/:keyId/revoke", async (c) => {
    try {
      await revokeManagementKey(kv, session(c).owner.id, c.req.param("keyId"));
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      return c.html(notFoundPage(), 404);
    }
    return c.redirect(PATH, 303);
  });
  return r;
}
