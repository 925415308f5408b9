import type { ComponentChildren } from "preact";
import { AccountNav } from "@/components/AccountNav.tsx";
import { Layout } from "@/components/Layout.tsx";
import type { AppRecord, WalletRecord } from "@/lib/db.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import type { Session } from "@/lib/accounts/mod.ts";

export function usd(micros: Micros): string {
  return `$${formatUsd(micros)}`;
}

export function when(ms: number | null): string {
  if (ms === null) return "never";
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

export function When({ ms }: { ms: number | null }) {
  if (ms === null) return <span class="muted">never</span>;
  return <time datetime={new Date(ms).toISOString()} class="nowrap">{when(ms)}</time>;
}

export const appPath = (app: AppRecord) => `/dashboard/apps/${app.id}`;

export function Page(
  { title, session, islands, children }: {
    title: string;
    session: Session;
    islands?: boolean;
    children: ComponentChildren;
  },
) {
  return (
    <Layout title={title} nav={<AccountNav session={session} />} islands={islands}>
      {children}
    </Layout>
  );
}

/**
 * What a dashboard form did, named in the address its post redirects to (`?saved=`) and said once
 * on that page beside the form: a save that only reloaded the page told the owner nothing.
 */
export const SAVED_MESSAGES = {
  caps: "Spend caps saved.",
  revoked: "Key revoked: it is refused from its next request.",
  "top-up-settings": "Top-up page settings saved.",
  "top-up-address": "The top-up page has a new address. The old one no longer opens it.",
  "rate-limits": "Rate limits saved.",
  rename: "App renamed.",
  webhook: "Webhook settings saved.",
  "webhook-removed": "Webhook endpoint removed.",
  password:
    "Password changed. Every other session of this account was signed out. Management keys still work: see below.",
  "management-keys-revoked":
    "Every management key was revoked: each is refused from its next request.",
} as const;
export type Saved = keyof typeof SAVED_MESSAGES;

/** The save a confirmation cookie names, if it is one of ours (saved_notice.ts). */
export function savedOf(query: string | undefined): Saved | undefined {
  return query !== undefined && Object.hasOwn(SAVED_MESSAGES, query) ? query as Saved : undefined;
}

/** The confirmation of `saved`, where the page shows one of `shows`. */
export function SavedNotice({ saved, shows }: { saved?: Saved; shows: Saved[] }) {
  if (!saved || !shows.includes(saved)) return null;
  return <p class="saved" role="status">{SAVED_MESSAGES[saved]}</p>;
}

export function Alert({ error, id }: { error?: string; id?: string }) {
  return error ? <p class="alert" role="alert" id={id}>{error}</p> : null;
}

/**
 * A form's card and how a refused post comes back to it: the whole page again, the alert at the top
 * of the form and the field it concerns marked invalid, described by the alert, and focused. The
 * form's action has no fragment on purpose: a browser ignores `autofocus` on a page whose URL names
 * a fragment, while focusing the field also scrolls it, with the alert above it, into view.
 */
export function formAnchor(anchor: string, refused: { error: string } | undefined) {
  return {
    id: anchor,
    alert: <Alert error={refused?.error} id={`${anchor}-error`} />,
    /** The props of the field the refusal concerns; the caller spreads them on that field only. */
    invalidField: refused
      ? { autofocus: true, "aria-invalid": true, "aria-describedby": `${anchor}-error` }
      : {},
  };
}

/**
 * The id of the card that shows a new secret once (an API key, a management key, a signing secret):
 * the redirect to that page names it, so that the page opens with the secret in view.
 */
export const SECRET_CARD_ID = "secret";

type Tab = "overview" | "keys" | "usage" | "wallet" | "webhooks";

/** The app's name, its crumbs and the tabs, the active one marked. */
export function AppHeader({ app, active }: { app: AppRecord; active: Tab }) {
  const tabs: [Tab, string, string][] = [
    ["overview", "Overview", appPath(app)],
    ["keys", "API keys", `${appPath(app)}/keys`],
    ["usage", "Usage", `${appPath(app)}/usage`],
    ["wallet", "Wallet", `${appPath(app)}/wallet`],
    ["webhooks", "Webhooks", `${appPath(app)}/webhooks`],
  ];
  return (
    <>
      <p class="crumbs">
        <a href="/dashboard">Apps</a> / <span>{app.name}</span>
      </p>
      <h1>{app.name}</h1>
      <nav class="tabs" aria-label="App sections">
        {tabs.map(([tab, label, href]) => (
          <a href={href} aria-current={tab === active ? "page" : undefined}>{label}</a>
        ))}
      </nav>
    </>
  );
}

export function Balances({ wallet }: { wallet: WalletRecord }) {
  return (
    <div class="stats">
      <div class="stat">
        <span class="stat-label">Available balance</span>
        <span class="stat-value" data-testid="available">{usd(wallet.available)}</span>
      </div>
      <div class="stat">
        <span class="stat-label">Reserved by requests in flight</span>
        <span class="stat-value">{usd(wallet.reserved)}</span>
      </div>
      <div class="stat">
        <span class="stat-label">Spent to date</span>
        <span class="stat-value">{usd(wallet.spent)}</span>
      </div>
    </div>
  );
}
