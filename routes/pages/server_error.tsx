import { Layout } from "@/components/Layout.tsx";
import { renderPage } from "@/routes/render.ts";

/** The 500 page of HTML routes: an apology and the request id, never a stack trace. */
export function serverErrorPage(requestId: string): string {
  return renderPage(
    <Layout title="Something went wrong">
      <h1>Something went wrong</h1>
      <p>
        The page could not be shown because of an error on our side. Nothing you did caused it; try
        again in a moment.
      </p>
      <p>
        If it keeps happening, quote this request id to support: <code>{requestId}</code>
      </p>
    </Layout>,
  );
}
