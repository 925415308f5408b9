import { Hono, type MiddlewareHandler } from "hono";
import { AccountNav } from "@/components/AccountNav.tsx";
import { Layout } from "@/components/Layout.tsx";
import {
  AccountError,
  beginSignIn,
  beginSignUp,
  checkCredentials,
  EmailTakenError,
  MAX_EMAIL_CHARS,
  normalizeEmail,
  PASSWORD_MIN,
  type ProxyTrust,
  signInSucceeded,
  signUp,
  takeAccountOfAddress,
} from "@/lib/accounts/mod.ts";
import { renderPage } from "./render.ts";
import {
  checkForm,
  clientAddress,
  formSizeLimit,
  loadSession,
  type PageEnv,
  privatePage,
  sessionCookie,
  startSession,
  stopSession,
} from "./session.ts";

/**
 * Only same-site paths, with a query of plain and percent-encoded characters: `next` must not send
 * a fresh session to another site.
 */
function safeNext(next: string | undefined): string {
  return next && /^\/[a-z0-9/_-]*(\?[a-z0-9_.~%=&+-]*)?$/i.test(next) && !next.startsWith("//")
    ? next
    : "/dashboard";
}

interface FormState {
  email?: string;
  error?: string;
  /** The field the error concerns: marked invalid, described by the error, and focused. */
  field?: "email" | "password";
  next?: string;
  /** The visitor was sent here by a form sent after its session had ended. */
  unsent?: boolean;
  /** The email has an account: the refusal leads to sign-in. */
  taken?: boolean;
}

const ERROR_ID = "account-error";

/** As on the dashboard's forms: a refused field comes back marked, described and focused. */
function invalidIf(state: FormState, field: "email" | "password") {
  return state.error && state.field === field
    ? { autofocus: true, "aria-invalid": true, "aria-describedby": ERROR_ID }
    : {};
}

function accountPage(kind: "signup" | "signin", state: FormState): string {
  const signup = kind === "signup";
  const title = signup ? "Create your account" : "Sign in";
  const action = signup ? "/signup" : `/signin?next=${encodeURIComponent(safeNext(state.next))}`;
  return renderPage(
    <Layout title={title} nav={<AccountNav session={null} />}>
      <section class="card narrow">
        <h1>{title}</h1>
        {signup && (
          <p class="muted">
            Each app you create starts with 5.00 USD of credits. No payment card needed.
          </p>
        )}
        {state.error && (
          <p class="alert" role="alert" id={ERROR_ID}>
            {state.error}
            {state.taken && (
              <>
                {" "}
                <a href="/signin">Sign in</a> instead.
              </>
            )}
          </p>
        )}
        {state.unsent && !state.error && (
          <p class="alert" role="status">
            You were signed out, so the form you sent was not saved. Sign in, then send it again.
          </p>
        )}
        <form method="post" action={action} class="stack">
          <label>
            Email
            <input
              type="email"
              name="email"
              required
              autocomplete="email"
              value={state.email ?? ""}
              maxLength={254}
              {...invalidIf(state, "email")}
            />
          </label>
          <label>
            Password
            <input
              type="password"
              name="password"
              required
              minLength={signup ? PASSWORD_MIN : undefined}
              maxLength={200}
              autocomplete={signup ? "new-password" : "current-password"}
              {...invalidIf(state, "password")}
            />
            {signup && <small class="muted">At least {PASSWORD_MIN} characters.</small>}
          </label>
          <button type="submit" class="button">{signup ? "Create account" : "Sign in"}</button>
        </form>
        {!signup && (
          <p class="muted">
            Forgot your password? This service sends no email: ask its operator to reset it. They
            give you a new password; sign in with it, then change it under Account.
          </p>
        )}
        <p class="muted">
          {signup
            ? (
              <>
                Already have an account? <a href="/signin">Sign in</a>
              </>
            )
            : (
              <>
                New here? <a href="/signup">Create an account</a>
              </>
            )}
        </p>
      </section>
    </Layout>,
  );
}

/** GET/POST /signup, /signin and POST /signout. */
export function accountRoutes(
  deps: {
    kv: Deno.Kv;
    publicUrl: string;
    proxyTrust: ProxyTrust;
    signupsPerAddressPerDay: number;
    /** The throttles count in fixed windows of this clock. */
    now?: () => number;
  },
) {
  const { kv, publicUrl } = deps;
  const now = deps.now ?? Date.now;
  const addressOf = (c: Parameters<typeof clientAddress>[0]) => clientAddress(c, deps.proxyTrust);
  const cookie = sessionCookie(publicUrl);
  const pages = new Hono<PageEnv>();
  const session = loadSession(kv, cookie);
  const form = checkForm(publicUrl);
  // A sign-in or sign-up form sent from a tab opened before this browser signed in carries no
  // CSRF token (it was made without a session), and was refused as a stale form. The browser is
  // signed in already: it goes where signing in would have taken it, the form not acted on (no
  // account switched to by a form this site did not make for the session).
  const signedInAlready: MiddlewareHandler<PageEnv> = async (c, next) => {
    if (c.get("session")) return c.redirect(safeNext(c.req.query("next")), 303);
    await next();
  };
  pages.use("/signup", privatePage, formSizeLimit);
  pages.use("/signin", privatePage, formSizeLimit);
  pages.use("/signout", privatePage, formSizeLimit);

  pages.get("/signup", session, (c) => {
    if (c.get("session")) return c.redirect("/dashboard", 303);
    return c.html(accountPage("signup", {}));
  });

  pages.post("/signup", session, signedInAlready, form, async (c) => {
    const body = c.get("form");
    const email = body.email ?? "";
    const address = addressOf(c);
    const wait = await beginSignUp(kv, address, now());
    if (wait > 0) {
      c.header("Retry-After", String(wait));
      const minutes = Math.ceil(wait / 60);
      const error = `Too many sign-ups from your network. Try again in ${minutes} minute${
        minutes === 1 ? "" : "s"
      }.`;
      return c.html(accountPage("signup", { email, error }), 429);
    }
    // Each account can make apps with starter credits: an address makes a few a day.
    const permit = await takeAccountOfAddress(kv, address, deps.signupsPerAddressPerDay, now());
    if (!permit.ok) {
      c.header("Retry-After", String(permit.retryAfter));
      const error =
        `Too many accounts were created from your network today. Try again tomorrow (UTC), or sign in to an account you have.`;
      return c.html(accountPage("signup", { email, error }), 429);
    }
    try {
      const owner = await signUp(kv, { email, password: body.password ?? "" });
      await startSession(c, kv, cookie, owner);
      return c.redirect("/dashboard", 303);
    } catch (error) {
      await permit.release();
      if (!(error instanceof AccountError)) throw error;
      return c.html(
        accountPage("signup", {
          email,
          error: error.message,
          field: error.field,
          taken: error instanceof EmailTakenError,
        }),
        400,
      );
    }
  });

  pages.get("/signin", session, (c) => {
    const next = safeNext(c.req.query("next"));
    if (c.get("session")) return c.redirect(next, 303);
    return c.html(accountPage("signin", { next, unsent: c.req.query("unsent") === "1" }));
  });

  pages.post("/signin", session, signedInAlready, form, async (c) => {
    const body = c.get("form");
    const email = normalizeEmail(body.email ?? "");
    const password = body.password ?? "";
    const next = safeNext(c.req.query("next"));
    const wrong = () =>
      c.html(
        // Which of the two was wrong is not said; the password is the one to type again.
        accountPage("signin", {
          email,
          next,
          error: "Wrong email or password.",
          field: "password",
        }),
        401,
      );
    // No account has such an address, and it would not fit the throttle's key.
    if (email.length > MAX_EMAIL_CHARS) return wrong();
    const attempt = await beginSignIn(kv, email, addressOf(c), now());
    const wait = attempt.retryAfter;
    if (wait > 0) {
      c.header("Retry-After", String(wait));
      const minutes = Math.ceil(wait / 60);
      return c.html(
        accountPage("signin", {
          email,
          next,
          error: `Too many failed sign-ins. Try again in ${minutes} minute${
            minutes === 1 ? "" : "s"
          }.`,
        }),
        429,
      );
    }
    const owner = await checkCredentials(kv, { email, password });
    if (!owner) return wrong();
    await signInSucceeded(kv, email, attempt, now());
    await startSession(c, kv, cookie, owner);
    return c.redirect(next, 303);
  });

  pages.post("/signout", session, form, async (c) => {
    await stopSession(c, kv, cookie);
    return c.redirect("/signin", 303);
  });

  return pages;
}
