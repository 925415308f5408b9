/**
 * A save's confirmation is shown on the one page its redirect leads to (Post/Redirect/Get): it rides
 * a short-lived cookie that the page takes. In the URL (`?saved=`) it came back on every reload and
 * could be linked to ("Password changed" when nothing had changed).
 */
import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { type Saved, savedOf } from "./pages/shared.tsx";

const SAVED_COOKIE = "tb_saved";
/** Long enough for the redirect to be followed; it names a message, never anything secret. */
const SAVED_COOKIE_SECONDS = 60;

/**
 * The 303 after a save to `path` (its query kept), the form's card as the fragment; `subject`
 * names which of a card's forms saved (a key's caps), where it has several.
 */
export function redirectSaved(
  c: Context,
  path: string,
  saved: Saved,
  fragment?: string,
  subject?: string,
) {
  setCookie(c, SAVED_COOKIE, subject ? `${saved}:${subject}` : saved, {
    path: "/dashboard",
    httpOnly: true,
    sameSite: "Lax",
    maxAge: SAVED_COOKIE_SECONDS,
  });
  return c.redirect(`${path}${fragment ? `#${fragment}` : ""}`, 303);
}

/** The confirmation this page shows, if a save just led here; taken, so a reload shows none. */
export function takeSaved(c: Context): Saved | undefined {
  return takeSavedOf(c).saved;
}

/** The same, with which of the card's forms saved. */
export function takeSavedOf(c: Context): { saved?: Saved; subject?: string } {
  const value = getCookie(c, SAVED_COOKIE);
  if (value === undefined) return {};
  deleteCookie(c, SAVED_COOKIE, { path: "/dashboard" });
  const [saved, subject] = value.split(":", 2);
  return { saved: savedOf(saved), subject };
}
