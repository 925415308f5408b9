import { type Context, Hono } from "hono";
import { CsrfField } from "@/components/CsrfField.tsx";
import {
  beginPasswordChange,
  changePassword,
  newPasswordProblem,
  PASSWORD_MAX,
  PASSWORD_MIN,
  PasswordChangeError,
  type ProxyTrust,
  type Session,
  signInSucceeded,
} from "@/lib/accounts/mod.ts";
import { sha256Hex } from "@/lib/core/mod.ts";
import { countLiveManagementKeys } from "@/lib/management/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { clientAddress, type PageEnv, sessionCookie, setSessionCookie } from "@/routes/session.ts";
import { formAnchor, Page, type Saved, SavedNotice } from "./pages/shared.tsx";
import { redirectSaved, takeSaved } from "./saved_notice.ts";
import { RevokeAllManagementKeysForm } from "./management_keys.tsx";

export const ACCOUNT_PATH = "/dashboard/account";
const PASSWORD_CARD = "password";
const NEW_PASSWORD_HINT = "new-password-hint";

type PasswordRefusal = { error: string; field?: PasswordChangeError["field"] };

/**
 * GET /dashboard/account: the owner's email, the form that changes the password, and the
 * management keys a change leaves working, with the one form that revokes them all.
 */
function accountPage(
  session: Session,
  liveManagementKeys: number,
  state: { saved?: Saved; refused?: PasswordRefusal },
) {
  const card = formAnchor(PASSWORD_CARD, state.refused);
  const invalidIf = (field: PasswordChangeError["field"]) =>
    state.refused?.field === field ? card.invalidField : {};
  return renderPage(
    // The script asks before the revocation of every management key (data-confirm).
    <Page title="Account" session={session} islands={liveManagementKeys > 0}>
      <p class="crumbs">
        <a href="/dashboard">Apps</a> / <span>Account</span>
      </p>
      <h1>Account</h1>
      <p>
        Signed in as <strong>{session.owner.email}</strong>.
      </p>
      <section class="card narrow start" id={card.id}>
        <h2>Change password</h2>
        <SavedNotice saved={state.saved} shows={["password"]} />
        {card.alert}
        <form method="post" action={`${ACCOUNT_PATH}/password`} class="stack">
          <CsrfField session={session} />
          {/* Tells a password manager which account the new password belongs to. */}
          <input
            type="email"
            name="username"
            autocomplete="username"
            value={session.owner.email}
            readOnly
            hidden
          />
          <label>
            Current password
            <input
              type="password"
              name="current_password"
              required
              maxLength={PASSWORD_MAX}
              autocomplete="current-password"
              {...invalidIf("current_password")}
            />
          </label>
          <label>
            New password
            <input
              type="password"
              name="new_password"
              required
              minLength={PASSWORD_MIN}
              maxLength={PASSWORD_MAX}
              autocomplete="new-password"
              {...invalidIf("new_password")}
              // The hint describes the field; inside its label it was read as part of its name.
              aria-describedby={[invalidIf("new_password")["aria-describedby"], NEW_PASSWORD_HINT]
                .filter(Boolean).join(" ")}
            />
          </label>
          <small class="muted" id={NEW_PASSWORD_HINT}>At least {PASSWORD_MIN} characters.</small>
          <label>
            Confirm the new password
            <input
              type="password"
              name="confirmation"
              required
              minLength={PASSWORD_MIN}
              maxLength={PASSWORD_MAX}
              autocomplete="new-password"
              {...invalidIf("confirmation")}
            />
          </label>
          <button type="submit" class="button">Change password</button>
        </form>
        <p class="muted">
          Changing the password signs out every other browser and device signed in to this account;
          this one stays signed in.
        </p>
      </section>
      <section class="card narrow start" id="management-keys">
        <h2>Management keys</h2>
        {liveManagementKeys === 0 ? <p>This account has no live management keys.</p> : (
          <>
            <p>
              A password change or reset leaves management keys working: this account has{" "}
              {liveManagementKeys}{" "}
              live management key{liveManagementKeys === 1 ? "" : "s"}. If someone else may have had
              your password, they may have made one too: revoke them all, then create new ones for
              your servers.
            </p>
            <RevokeAllManagementKeysForm session={session} live={liveManagementKeys} />
          </>
        )}
        <p class="muted">
          See them one by one under <a href="/dashboard/management-keys">Management keys</a>.
        </p>
      </section>
    </Page>,
  );
}

/** Mounted inside the dashboard's router, behind its session, CSRF and owner checks. */
export function accountSettingsRoutes(
  deps: {
    kv: Deno.Kv;
    proxyTrust: ProxyTrust;
    /** The session cookie's settings: the change hands the browser a new session. */
    cookie: ReturnType<typeof sessionCookie>;
    /** The throttle counts in fixed windows of this clock. */
    now?: () => number;
  },
) {
  const { kv } = deps;
  const now = deps.now ?? Date.now;
  const r = new Hono<PageEnv>();
  const session = (c: Context<PageEnv>) => c.get("session")!;

  const liveManagementKeys = (c: Context<PageEnv>) =>
    countLiveManagementKeys(kv, session(c).owner.id);

  r.get(
    "/",
    async (c) =>
      c.html(accountPage(session(c), await liveManagementKeys(c), { saved: takeSaved(c) })),
  );

  r.post("/password", async (c) => {
    const form = c.get("form");
    const refuse = async (refused: PasswordRefusal, status: 400 | 429) =>
      c.html(accountPage(session(c), await liveManagementKeys(c), { refused }), status);
    const input = {
      sessionId: session(c).id,
      currentPassword: form.current_password ?? "",
      newPassword: form.new_password ?? "",
      confirmation: form.confirmation ?? "",
    };
    // A new password that cannot be taken is refused before the current one counts as an attempt.
    const problem = newPasswordProblem(input.newPassword, input.confirmation);
    if (problem) return refuse({ error: problem.message, field: problem.field }, 400);
    // The current password is guessed here as at sign-in, and counted against the email too.
    const email = session(c).owner.email;
    const attempt = await beginPasswordChange(
      kv,
      email,
      sha256Hex(session(c).id),
      clientAddress(c, deps.proxyTrust),
      now(),
    );
    if (attempt.retryAfter > 0) {
      c.header("Retry-After", String(attempt.retryAfter));
      const minutes = Math.ceil(attempt.retryAfter / 60);
      return refuse({
        error: `Too many wrong passwords were typed here. Try again in ${minutes} minute${
          minutes === 1 ? "" : "s"
        }.`,
        field: "current_password",
      }, 429);
    }
    try {
      const { sessionId } = await changePassword(kv, input, now());
      setSessionCookie(c, deps.cookie, sessionId);
    } catch (error) {
      if (!(error instanceof PasswordChangeError)) throw error;
      return refuse({ error: error.message, field: error.field }, 400);
    }
    await signInSucceeded(kv, email, attempt, now());
    return redirectSaved(c, ACCOUNT_PATH, "password", PASSWORD_CARD);
  });

  return r;
}
