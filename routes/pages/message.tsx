import { AccountNav } from "@/components/AccountNav.tsx";
import { Layout } from "@/components/Layout.tsx";
import { renderPage } from "@/routes/render.ts";
import type { Session } from "@/lib/accounts/mod.ts";

/** A page that only says something: a refused form, a throttled sign-in. */
export function messagePage(
  { title, message, session }: { title: string; message: string; session: Session | null },
): string {
  return renderPage(
    <Layout title={title} nav={<AccountNav session={session} />}>
      <section class="card narrow">
        <h1>{title}</h1>
        <p>{message}</p>
        <p>
          <a href={session ? "/dashboard" : "/"}>Back to {session ? "the dashboard" : "home"}</a>
        </p>
      </section>
    </Layout>,
  );
}
