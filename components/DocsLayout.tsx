import type { ComponentChildren } from "preact";
import { Island } from "./Island.tsx";
import { Layout } from "./Layout.tsx";

export const DOCS_PAGES = [
  { href: "/docs", title: "Quick start" },
  { href: "/docs/endpoints", title: "Endpoints" },
  { href: "/docs/billing", title: "How billing works" },
  { href: "/docs/rate-limits", title: "Rate limits" },
  { href: "/docs/management", title: "Management API" },
  { href: "/docs/webhooks", title: "Webhooks" },
  { href: "/docs/versioning", title: "Versioning" },
  { href: "/docs/errors", title: "Errors" },
  { href: "/docs/operations", title: "Running Tollbooth" },
  { href: "/openapi.json", title: "OpenAPI 3.1 document" },
] as const;

/** A docs page: the site layout with the docs' own table of contents beside the text. */
export function DocsLayout(
  { title, path, children }: { title: string; path: string; children: ComponentChildren },
) {
  return (
    <Layout title={title} islands>
      <div class="docs">
        <nav class="docs-nav" aria-label="Documentation">
          <ul>
            {DOCS_PAGES.map((p) => (
              <li>
                <a href={p.href} aria-current={p.href === path ? "page" : undefined}>{p.title}</a>
              </li>
            ))}
          </ul>
        </nav>
        <article class="docs-body">{children}</article>
      </div>
    </Layout>
  );
}

/** A block of code with a copy button. */
export function CodeBlock({ code, caption }: { code: string; caption?: string }) {
  return (
    <figure class="code-block">
      {caption && (
        <figcaption>
          <span>{caption}</span>
          <Island name="CopyButton" props={{ value: code, label: "Copy" }} />
        </figcaption>
      )}
      <pre><code>{code}</code></pre>
    </figure>
  );
}
