import type { Session } from "@/lib/accounts/mod.ts";
import { CsrfField } from "./CsrfField.tsx";

/** The header's account links: sign in / sign up, or the dashboard and sign out. */
export function AccountNav({ session }: { session: Session | null }) {
  if (!session) {
    return (
      <>
        <a href="/signin">Sign in</a>
        <a class="button small" href="/signup">Sign up</a>
      </>
    );
  }
  return (
    <>
      <a href="/dashboard">Dashboard</a>
      <a href="/dashboard/management-keys">Management keys</a>
      <a href="/dashboard/account">Account</a>
      <form method="post" action="/signout" class="inline-form">
        <CsrfField session={session} />
        <button type="submit" class="link-button" title={`Signed in as ${session.owner.email}`}>
          Sign out
        </button>
      </form>
    </>
  );
}
