import type { ComponentChildren } from "preact";

export interface LayoutProps {
  title: string;
  children: ComponentChildren;
  /** Extra content for the header's right side (account links); a dashboard link by default. */
  nav?: ComponentChildren;
  /** Pages with islands load the client bundle; the others ship no JavaScript. */
  islands?: boolean;
  /**
   * Who reads the page: developers get the site's navigation; the buyers on an app's hosted
   * top-up pages are that app's end users, for whom models, docs and a dashboard mean nothing.
   */
  audience?: "developers" | "buyers";
}

export function Layout(
  { title, children, nav, islands, audience = "developers" }: LayoutProps,
) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{`${title} · Tollbooth`}</title>
        <link rel="icon" href="/static/favicon.svg" type="image/svg+xml" />
        <link rel="stylesheet" href="/static/styles.css" />
        {islands && <script type="module" src="/static/build/islands.js" />}
      </head>
      <body>
        {audience === "buyers"
          ? (
            <header class="site-header">
              <span class="brand">Tollbooth</span>
              <span class="header-note">Credits for apps</span>
            </header>
          )
          : (
            <header class="site-header">
              <a class="brand" href="/">Tollbooth</a>
              <nav aria-label="Main">
                <a href="/models">Models</a>
                <a href="/docs">Docs</a>
                <a href="/docs/errors">Errors</a>
                {nav ?? <a href="/dashboard">Dashboard</a>}
              </nav>
            </header>
          )}
        <main>{children}</main>
        <footer class="site-footer">
          {audience === "buyers"
            ? "Tollbooth · prepaid credits for apps"
            : "Tollbooth · pay-as-you-go LLM gateway · API version 2026-07-29"}
        </footer>
      </body>
    </html>
  );
}
