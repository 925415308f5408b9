import type { Context } from "hono";
import { leaveReveal, type Reveal } from "@/lib/accounts/mod.ts";
import { SECRET_CARD_ID } from "./pages/shared.tsx";

/** The one page that takes a reveal of that kind (lib/accounts/reveals.ts). */
function revealPage(reveal: Reveal, revealId: string): string {
  switch (reveal.kind) {
    case "new_app":
    case "new_key":
    case "rotated_key":
      return `/dashboard/apps/${reveal.appId}/issued/${revealId}`;
    case "new_webhook_secret":
    case "replaced_webhook_secret":
      return `/dashboard/apps/${reveal.appId}/webhooks/secret/${revealId}`;
    case "new_management_key":
      return `/dashboard/management-keys/issued/${revealId}`;
  }
}

/**
 * Post/Redirect/Get for a new secret: the POST leaves it for the session's next page and redirects
 * there, so that reloading that page shows it no second time and posts nothing again. The redirect
 * names the secret's card: without a fragment of its own it would keep the form's, and open the
 * page scrolled to that form, past the secret.
 */
export async function redirectToReveal(
  c: Context,
  kv: Deno.Kv,
  sessionId: string,
  reveal: Reveal,
): Promise<Response> {
  const revealId = await leaveReveal(kv, sessionId, reveal);
  return c.redirect(`${revealPage(reveal, revealId)}#${SECRET_CARD_ID}`, 303);
}
