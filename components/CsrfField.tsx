import type { Session } from "@/lib/accounts/mod.ts";

/** The hidden field every state-changing form of a session sends back. */
export function CsrfField({ session }: { session: Session | null }) {
  return session ? <input type="hidden" name="_csrf" value={session.record.csrfToken} /> : null;
}
