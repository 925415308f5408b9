import type { ComponentChildren } from "preact";
import { AccountNav } from "@/components/AccountNav.tsx";
import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import { Layout } from "@/components/Layout.tsx";
import type { ApiKeyRecord, AppRecord, RateLimits, UsageRecord, WalletRecord } from "@/lib/db.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import type { DaySpend, ModelSpend, UsagePage, WalletActivity } from "@/lib/billing/mod.ts";
import { renderPage } from "@/routes/render.ts";
import type { Session } from "@/lib/accounts/mod.ts";

type KeyRow = ApiKeyRecord & { lastUsedAt: number | null };

function usd(micros: Micros): string {
  return `$${formatUsd(micros)}`;
}

function when(ms: number | null): string {
  if (ms === null) return "never";
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

function When({ ms }: { ms: number | null }) {
  if (ms === null) return <span class="muted">never</span>;
  return <time datetime={new Date(ms).toISOString()} class="nowrap">{when(ms)}</time>;
}

const appPath = (app: AppRecord) => `/dashboard/apps/${app.id}`;

function Page(
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

function Alert({ error }: { error?: string }) {
  return error ? <p class="alert" role="alert">{error}</p> : null;
}

type Tab = "overview" | "keys" | "usage" | "wallet";

function AppHeader({ app, active }: { app: AppRecord; active: Tab }) {
  const tabs: [Tab, string, string][] = [
    ["overview", "Overview", appPath(app)],
    ["keys", "API keys", `${appPath(app)}/keys`],
    ["usage", "Usage", `${appPath(app)}/usage`],
    ["wallet", "Wallet", `${appPath(app)}/wallet`],
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

function Balances({ wallet }: { wallet: WalletRecord }) {
  return (
    <div class="stats">
      <div class="stat">
        <span class="stat-label">Available balance</span>
        <span class="stat-value" data-testid="available">{usd(wallet.available)}</span>
      </div>
      <div class="stat">
        <span class="stat-label">Held by requests in flight</span>
        <span class="stat-value">{usd(wallet.reserved)}</span>
      </div>
      <div class="stat">
        <span class="stat-label">Spent to date</span>
        <span class="stat-value">{usd(wallet.spent)}</span>
      </div>
    </div>
  );
}

/** GET /dashboard: the owner's apps with their balances, and a form for a new one. */
export function appsPage(
  session: Session,
  apps: { app: AppRecord; wallet: WalletRecord }[],
  error?: string,
) {
  return renderPage(
    <Page title="Your apps" session={session}>
      <h1>Your apps</h1>
      <p class="muted">Signed in as {session.owner.email}.</p>
      {apps.length === 0
        ? (
          <p>
            You have no apps yet. Create one: it starts with <strong>$5.000000</strong>{" "}
            of credits and an API key.
          </p>
        )
        : (
          <div class="table-scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">App</th>
                  <th scope="col" class="num">Available</th>
                  <th scope="col" class="num">In flight</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {apps.map(({ app, wallet }) => (
                  <tr>
                    <td>
                      <a href={appPath(app)}>{app.name}</a>
                    </td>
                    <td class="num">{usd(wallet.available)}</td>
                    <td class="num">{usd(wallet.reserved)}</td>
                    <td>
                      <When ms={app.createdAt} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      <section class="card">
        <h2>Create an app</h2>
        <Alert error={error} />
        <form method="post" action="/dashboard/apps" class="row-form">
          <CsrfField session={session} />
          <label>
            App name
            <input name="name" required maxLength={100} placeholder="e.g. Recipe assistant" />
          </label>
          <button type="submit" class="button">Create app</button>
        </form>
      </section>
    </Page>,
  );
}

/** The one time a raw key is shown: after creating an app, a key, or rotating one. */
export function keyIssuedPage(
  session: Session,
  app: AppRecord,
  issued: { apiKey: string; name: string; reason: "app" | "key" | "rotate" },
) {
  const heading = issued.reason === "app"
    ? `App “${app.name}” is ready`
    : issued.reason === "rotate"
    ? `Key “${issued.name}” rotated`
    : `Key “${issued.name}” created`;
  return renderPage(
    <Page title={heading} session={session} islands>
      <section class="card narrow">
        <h1>{heading}</h1>
        {issued.reason === "app" && (
          <p>
            It has <strong>$5.000000</strong>{" "}
            of starter credits and a first API key named “default”.
          </p>
        )}
        {issued.reason === "rotate" && <p>The old key no longer works.</p>}
        <div class="key-reveal">
          <p>
            <strong>Copy this API key now.</strong>{" "}
            It is shown only this once: we keep only its hash and cannot show it again. Keep it on
            your server, never in client-side code.
          </p>
          <div class="copy-row">
            <input class="mono" readOnly value={issued.apiKey} aria-label="New API key" />
            <Island name="CopyButton" props={{ value: issued.apiKey, label: "Copy key" }} />
          </div>
        </div>
        <p>
          <a class="button" href={`${appPath(app)}/keys`}>I have saved it: go to the keys</a>
        </p>
      </section>
    </Page>,
  );
}

/** GET /dashboard/apps/:id — money at a glance. */
export function overviewPage(
  session: Session,
  view: {
    app: AppRecord;
    wallet: WalletRecord;
    topUpUrl: string;
    days: DaySpend[];
    models: ModelSpend[];
    limits: { effective: RateLimits; defaults: RateLimits };
    error?: string;
    limitsError?: string;
  },
) {
  const { app, wallet } = view;
  return renderPage(
    <Page title={app.name} session={session} islands>
      <AppHeader app={app} active="overview" />
      <Balances wallet={wallet} />
      <section class="card">
        <h2>Daily spend, last 30 days</h2>
        <Island
          name="SpendChart"
          props={{ days: view.days.map((d) => ({ ...d, usd: formatUsd(d.micros) })) }}
        />
      </section>
      <section class="card">
        <h2>Spend by model</h2>
        {view.models.length === 0 ? <p class="muted">Nothing spent yet.</p> : (
          <table>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col" class="num">Spent</th>
              </tr>
            </thead>
            <tbody>
              {view.models.map((m) => (
                <tr>
                  <td>
                    <code>{m.model}</code>
                  </td>
                  <td class="num">{usd(m.micros)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <TopUpLink session={session} app={app} url={view.topUpUrl} />
      <RateLimitsCard session={session} app={app} limits={view.limits} error={view.limitsError} />
      <section class="card">
        <h2>Rename</h2>
        <Alert error={view.error} />
        <form method="post" action={`${appPath(app)}/rename`} class="row-form">
          <CsrfField session={session} />
          <label>
            App name
            <input name="name" required maxLength={100} value={app.name} />
          </label>
          <button type="submit" class="button secondary">Rename</button>
        </form>
      </section>
    </Page>,
  );
}

const LIMIT_FIELDS = [
  { name: "rpm", label: "Requests per minute" },
  { name: "tpm", label: "Tokens per minute" },
] as const;

function RateLimitsCard(
  { session, app, limits, error }: {
    session: Session;
    app: AppRecord;
    limits: { effective: RateLimits; defaults: RateLimits };
    error?: string;
  },
) {
  const custom = (name: "rpm" | "tpm") =>
    limits.effective[name] === limits.defaults[name] ? "" : String(limits.effective[name]);
  return (
    <section class="card">
      <h2>Rate limits</h2>
      <p class="muted">
        In force: {limits.effective.rpm.toLocaleString("en-US")} requests and{" "}
        {limits.effective.tpm.toLocaleString("en-US")}{" "}
        tokens per minute for the whole app; each key has the same limits. A request over them gets
        429 with <code>Retry-After</code>. Leave a field empty for the default (
        {limits.defaults.rpm.toLocaleString("en-US")} and{" "}
        {limits.defaults.tpm.toLocaleString("en-US")}).
      </p>
      <Alert error={error} />
      <form method="post" action={`${appPath(app)}/limits`} class="row-form">
        <CsrfField session={session} />
        {LIMIT_FIELDS.map(({ name, label }) => (
          <label key={name}>
            {label}
            <input
              name={name}
              type="number"
              min={1}
              step={1}
              inputMode="numeric"
              value={custom(name)}
            />
          </label>
        ))}
        <button type="submit" class="button secondary">Save limits</button>
      </form>
    </section>
  );
}

function TopUpLink(
  { session, app, url, error }: { session: Session; app: AppRecord; url: string; error?: string },
) {
  return (
    <section class="card">
      <h2>Top-up page</h2>
      <p class="muted">
        Share this address with your app's users: anyone who has it can add credits to this wallet
        (5, 10, 25 or 50 USD). It is also the <code>top_up_url</code> of the API's 402 errors.
      </p>
      <div class="copy-row">
        <input class="mono" readOnly value={url} aria-label="Top-up page address" />
        <Island name="CopyButton" props={{ value: url, label: "Copy link" }} />
      </div>
      <form method="post" action={`${appPath(app)}/top-up-link`} class="inline-form">
        <CsrfField session={session} />
        <button type="submit" class="button secondary small">Replace this address</button>
        <span class="muted small">
          If it leaked: the current address stops working and a new one is made.
        </span>
      </form>
      <h3>What your users see</h3>
      <Alert error={error} />
      <form method="post" action={`${appPath(app)}/top-up-settings`} class="stack">
        <CsrfField session={session} />
        <label>
          Link back to your app (optional)
          <input
            name="return_url"
            type="url"
            value={app.topUpReturnUrl ?? ""}
            placeholder="https://your-app.example/credits"
          />
        </label>
        <label class="checkbox">
          <input type="checkbox" name="show_balance" checked={app.topUpShowBalance ?? false} />{" "}
          Show the app's current balance on the top-up page
        </label>
        <button type="submit" class="button secondary">Save top-up page</button>
      </form>
    </section>
  );
}

/** The column heads of the cells below. */
function KeyHeaderCells() {
  return (
    <>
      <th scope="col">Name</th>
      <th scope="col">Key</th>
      <th scope="col">Created</th>
      <th scope="col">Last used</th>
    </>
  );
}

/** The cells a key row shows whether it is live or revoked. */
function KeyCells({ k }: { k: KeyRow }) {
  return (
    <>
      <td>{k.name}</td>
      <td>
        <code>{k.prefix}…</code>
      </td>
      <td>
        <When ms={k.createdAt} />
      </td>
      <td>
        <When ms={k.lastUsedAt} />
      </td>
    </>
  );
}

/** GET /dashboard/apps/:id/keys */
export function keysPage(session: Session, app: AppRecord, keyRows: KeyRow[], error?: string) {
  const live = keyRows.filter((k) => k.revokedAt === null);
  const revoked = keyRows.filter((k) => k.revokedAt !== null);
  return renderPage(
    <Page title={`${app.name} · API keys`} session={session} islands>
      <AppHeader app={app} active="keys" />
      <section class="card">
        <h2>Create a key</h2>
        <p class="muted">
          The key is shown once, when it is created. Keys are for your server only.
        </p>
        <Alert error={error} />
        <Island
          name="NewKeyForm"
          props={{
            action: `${appPath(app)}/keys`,
            csrfToken: session.record.csrfToken,
            mode: "create",
          }}
        />
      </section>
      <section class="card">
        <h2>Active keys</h2>
        <p class="muted">
          <strong>Rotate</strong>{" "}
          issues a new key with the same name and revokes the old one in the same step: deploy the
          new key right away, requests with the old one are refused from that moment.{" "}
          <strong>Revoke</strong> stops a key at its very next request.
        </p>
        {live.length === 0
          ? <p>No active keys: create one to call the API.</p>
          : (
            <div class="table-scroll">
              <table>
                <thead>
                  <tr>
                    <KeyHeaderCells />
                    <th scope="col">
                      <span class="visually-hidden">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {live.map((k) => (
                    <tr>
                      <KeyCells k={k} />
                      <td>
                        <div class="actions">
                          <Island
                            name="NewKeyForm"
                            props={{
                              action: `${appPath(app)}/keys/${k.id}/rotate`,
                              csrfToken: session.record.csrfToken,
                              mode: "rotate",
                              keyName: k.name,
                            }}
                          />
                          <form
                            method="post"
                            action={`${appPath(app)}/keys/${k.id}/revoke`}
                            class="inline-form"
                          >
                            <CsrfField session={session} />
                            <button
                              type="submit"
                              class="button danger small"
                              aria-label={`Revoke key ${k.name}`}
                            >
                              Revoke
                            </button>
                          </form>
                        </div>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
      </section>
      {revoked.length > 0 && (
        <section class="card">
          <h2>Revoked keys</h2>
          <div class="table-scroll">
            <table>
              <thead>
                <tr>
                  <KeyHeaderCells />
                  <th scope="col">Revoked</th>
                </tr>
              </thead>
              <tbody>
                {revoked.map((k) => (
                  <tr class="muted">
                    <KeyCells k={k} />
                    <td>
                      <When ms={k.revokedAt} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      )}
    </Page>,
  );
}

const OUTCOMES: Record<UsageRecord["outcome"], string> = {
  completed: "completed",
  upstream_cut: "cut by provider",
  client_closed: "client disconnected",
};

/** GET /dashboard/apps/:id/usage?cursor= */
export function usagePage(
  session: Session,
  app: AppRecord,
  page: UsagePage,
  keyNames: Map<string, string>,
  isFirstPage: boolean,
) {
  return renderPage(
    <Page title={`${app.name} · Usage`} session={session}>
      <AppHeader app={app} active="usage" />
      <p class="muted">
        Every request that reached a model, newest first. Requests refused before the model ran
        (invalid, unpaid, rate-limited, provider unreachable) cost nothing and are not listed.
      </p>
      {page.records.length === 0
        ? <p>{isFirstPage ? "No requests yet." : "No older requests."}</p>
        : (
          <div class="table-scroll">
            <table class="usage">
              <thead>
                <tr>
                  <th scope="col">Time</th>
                  <th scope="col">Key</th>
                  <th scope="col">Model</th>
                  <th scope="col" class="num">Prompt</th>
                  <th scope="col" class="num">Completion</th>
                  <th scope="col" class="num">Cost</th>
                  <th scope="col">Status</th>
                  <th scope="col">Streamed</th>
                  <th scope="col">Request id</th>
                </tr>
              </thead>
              <tbody>
                {page.records.map((u) => (
                  <tr>
                    <td>
                      <When ms={u.createdAt} />
                    </td>
                    <td>{keyNames.get(u.keyId) ?? u.keyId}</td>
                    <td>
                      <code>{u.model}</code>
                    </td>
                    <td class="num">{u.promptTokens.toLocaleString("en-US")}</td>
                    <td class="num">{u.completionTokens.toLocaleString("en-US")}</td>
                    <td class="num">{usd(u.cost)}</td>
                    <td>{OUTCOMES[u.outcome]}</td>
                    <td>{u.streamed ? "yes" : "no"}</td>
                    <td>
                      <code class="small">{u.requestId}</code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      <nav class="pager" aria-label="Pages">
        {!isFirstPage && <a href={`${appPath(app)}/usage`}>Newest</a>}
        {page.nextCursor && (
          <a href={`${appPath(app)}/usage?cursor=${encodeURIComponent(page.nextCursor)}`}>
            Older requests →
          </a>
        )}
      </nav>
    </Page>,
  );
}

const CREDIT_LABELS = {
  starter: "Starter credits",
  top_up: "Top-up",
  operator_credit: "Credit from Tollbooth",
};

/** GET /dashboard/apps/:id/wallet */
export function walletPage(
  session: Session,
  view: {
    app: AppRecord;
    wallet: WalletRecord;
    topUpUrl: string;
    activity: WalletActivity[];
    keyNames: Map<string, string>;
    topUpError?: string;
  },
) {
  const { app, wallet } = view;
  return renderPage(
    <Page title={`${app.name} · Wallet`} session={session} islands>
      <AppHeader app={app} active="wallet" />
      <Balances wallet={wallet} />
      <p class="muted">
        Credited in total: {usd(wallet.starter + wallet.topUps + wallet.operatorCredits)} (starter
        {" "}
        {usd(wallet.starter)}, top-ups {usd(wallet.topUps)}, credits from Tollbooth{" "}
        {usd(wallet.operatorCredits)}). Available + in flight + spent always equals that total.
      </p>
      <TopUpLink session={session} app={app} url={view.topUpUrl} error={view.topUpError} />
      <section class="card">
        <h2>Latest activity</h2>
        <div class="table-scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">What</th>
                <th scope="col" class="num">Amount</th>
              </tr>
            </thead>
            <tbody>
              {view.activity.map((a) =>
                a.kind === "credit"
                  ? (
                    <tr>
                      <td>
                        <When ms={a.at} />
                      </td>
                      <td>
                        {CREDIT_LABELS[a.entry.kind]}
                        {a.entry.reason !== CREDIT_LABELS[a.entry.kind] && (
                          <span class="muted">— {a.entry.reason}</span>
                        )}
                      </td>
                      <td class="num credit">+{usd(a.entry.amount)}</td>
                    </tr>
                  )
                  : (
                    <tr>
                      <td>
                        <When ms={a.at} />
                      </td>
                      <td>
                        Request <code class="small">{a.usage.requestId}</code> ·{" "}
                        <code>{a.usage.model}</code> · key{" "}
                        {view.keyNames.get(a.usage.keyId) ?? a.usage.keyId}
                      </td>
                      <td class="num">−{usd(a.usage.cost)}</td>
                    </tr>
                  )
              )}
            </tbody>
          </table>
        </div>
        <p class="muted">
          All requests with their tokens are on the <a href={`${appPath(app)}/usage`}>usage</a>{" "}
          page.
        </p>
      </section>
    </Page>,
  );
}
