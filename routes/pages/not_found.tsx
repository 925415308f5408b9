import { Layout } from "@/components/Layout.tsx";
import { renderPage } from "@/routes/render.ts";

export function notFoundPage(): string {
  return renderPage(
    <Layout title="Not found">
      <h1>Page not found</h1>
      <p>
        There is nothing at this address. Go to the <a href="/">home page</a> or the{" "}
        <a href="/models">models</a>.
      </p>
    </Layout>,
  );
}
