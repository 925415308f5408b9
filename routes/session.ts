import { timingSafeEqualStrings } from "@/lib/core/mod.ts";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit, pageBodyRefusal } from "./body_limit.ts";
import { CONTENT_SECURITY_POLICY } from "./security_headers.ts";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import {
  clientAddressOf,
  createSession,
  endSession,
  findSession,
  getOwner,
  isOfCurrentPassword,
  type ProxyTrust,
  type Session,
  SESSION_TTL_MS,
} from "@/lib/accounts/mod.ts";
import type { Env } from "./middleware.ts";
import type { OwnerRecord } from "@/lib/db.ts";
import { messagePage } from "@/routes/pages/message.tsx";
import { type FormFields, formNotReceived, readForm } from "./forms.ts";

export type { Session };

export type PageEnv = {
  Variables: Env["Variables"] & {
    session: Session | null;
    /** A POST's form fields, read once by `checkForm` (which answers an unreadable form). */
    form: FormFields;
  };
};

const CSRF_FIELD = "_csrf";

/** Cookie settings: `Secure` (and the `__Host-` name that requires it) except on plain localhost. */
export function sessionCookie(publicUrl: string) {
  const url = new URL(publicUrl);
  const local = ["localhost", "127.0.0.1", "[::1]"].includes(url.hostname) &&
    url.protocol === "http:";
  return { name: local ? "tb_session" : "__Host-tb_session", secure: !local };
}

type Cookie = ReturnType<typeof sessionCookie>;

/** Reads the session cookie into `session` (null when signed out, unknown or expired). */
export function loadSession(kv: Deno.Kv, cookie: Cookie): MiddlewareHandler<PageEnv> {
  return async (c, next) => {
    const id = getCookie(c, cookie.name);
    let session: Session | null = null;
    if (id) {
      const record = await findSession(kv, id);
      const owner = record && await getOwner(kv, record.ownerId);
      if (record && owner && isOfCurrentPassword(record, owner)) session = { id, record, owner };
    }
    c.set("session", session);
    await next();
  };
}

export async function startSession(
  c: Context<PageEnv>,
  kv: Deno.Kv,
  cookie: Cookie,
  owner: OwnerRecord,
) {
  const { sessionId } = await createSession(kv, owner);
  setSessionCookie(c, cookie, sessionId);
}

/** Hands the browser a session's id (a new session, or one that replaced its session). */
export function setSessionCookie(c: Context<PageEnv>, cookie: Cookie, sessionId: string) {
  setCookie(c, cookie.name, sessionId, {
    httpOnly: true,
    secure: cookie.secure,
    sameSite: "Lax",
    path: "/",
    maxAge: SESSION_TTL_MS / 1000,
  });
}

export async function stopSession(c: Context<PageEnv>, kv: Deno.Kv, cookie: Cookie) {
  const session = c.get("session");
  if (session) await endSession(kv, session.id, session.owner.id);
  deleteCookie(c, cookie.name, { path: "/", secure: cookie.secure, httpOnly: true });
}

/**
 * Signed-out visitors are sent to sign in, and back here afterwards. A form sent after the session
 * ended is not acted on: its sender goes back to the page the form was on (the Referer, when it is
 * ours), and the sign-in page says that what was sent was not saved.
 */
export const requireOwner: MiddlewareHandler<PageEnv> = async (c, next) => {
  if (!c.get("session")) {
    const url = new URL(c.req.url);
    if (c.req.method === "GET") {
      // A filter or a page of a list is part of where the visitor was.
      return c.redirect(`/signin?next=${encodeURIComponent(c.req.path + url.search)}`, 303);
    }
    const referer = URL.parse(c.req.header("referer") ?? "");
    // By host, not origin: behind a proxy that ends TLS the request's own URL says http. Sign-in
    // takes `next` only as a path of this site (safeNext).
    const back = referer?.host === url.host ? referer.pathname + referer.search : "/dashboard";
    return c.redirect(`/signin?next=${encodeURIComponent(back)}&unsent=1`, 303);
  }
  await next();
};

function refused(c: Context<PageEnv>) {
  return c.html(
    messagePage({
      title: "Form expired",
      message:
        "This form could not be accepted: it is stale or did not come from this site. Nothing was changed. Go back, reload the page and try again.",
      session: c.get("session"),
    }),
    403,
  );
}

/**
 * Every POST of a page must come from this site (Origin / Sec-Fetch-Site, when the browser sends
 * them), and, once signed in, carry the session's CSRF token in a hidden field. The form is read
 * here, once, into `form`: a body that is no readable form is answered here too.
 */
export function checkForm(publicUrl: string): MiddlewareHandler<PageEnv> {
  const publicOrigin = new URL(publicUrl).origin;
  return async (c, next) => {
    if (c.req.method !== "POST") return await next();
    const origin = c.req.header("origin");
    if (origin && origin !== publicOrigin && origin !== new URL(c.req.url).origin) {
      return refused(c);
    }
    if (c.req.header("sec-fetch-site") === "cross-site") return refused(c);
    const session = c.get("session");
    const form = await readForm(c);
    if (!form) return formNotReceived(c, session);
    if (session && !timingSafeEqualStrings(form[CSRF_FIELD] ?? "", session.record.csrfToken)) {
      return refused(c);
    }
    c.set("form", form);
    await next();
  };
}

/** Forms are a few fields; anything larger is refused before it is parsed. */
const MAX_FORM_BYTES = 16 * 1024;

/**
 * Account pages are never cached (they show keys and balances), never framed (no clickjacking of
 * the revoke button) and never leak their address to other sites. The site's own policy
 * (securityHeaders) applies in full: these pages, which show secrets once, get no weaker one.
 */
export const privatePage: MiddlewareHandler<PageEnv> = async (c, next) => {
  await next();
  c.header("Cache-Control", "no-store");
  c.header("X-Frame-Options", "DENY");
  c.header("Content-Security-Policy", CONTENT_SECURITY_POLICY);
  c.header("Referrer-Policy", "same-origin");
  c.header("X-Content-Type-Options", "nosniff");
};

export const formSizeLimit = bodyLimit(MAX_FORM_BYTES, pageBodyRefusal);

/**
 * The client's address, for the limits kept per address: the connection's, or the one a trusted
 * proxy reports (TRUSTED_PROXY_HEADER).
 */
export function clientAddress(c: Context, trust: ProxyTrust): string {
  const info = c.env as { remoteAddr?: { hostname?: string } } | undefined;
  return clientAddressOf(info?.remoteAddr?.hostname ?? "unknown", c.req.raw.headers, trust);
}
