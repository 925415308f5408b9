import type { AppRecord, UsageRecord } from "@/lib/db.ts";
import type { UsagePage } from "@/lib/billing/mod.ts";
import type { ReportRow } from "@/lib/management/mod.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { renderPage } from "@/routes/render.ts";
import { AppHeader, appPath, Page, usd, When } from "./shared.tsx";

const OUTCOMES: Record<UsageRecord["outcome"], string> = {
  completed: "completed",
  upstream_cut: "cut by provider",
  client_closed: "client disconnected",
};

/** The parts of a token count billed or spent otherwise (cached input, reasoning), when any. */
function TokenDetails({ parts }: { parts: [number | undefined, string][] }) {
  const shown = parts.filter(([n]) => n);
  if (shown.length === 0) return null;
  return (
    <span class="small muted token-details">
      {shown.map(([n, label]) => `${n!.toLocaleString("en-US")} ${label}`).join(" · ")}
    </span>
  );
}

/**
 * An end user's requests. A name stored before lone surrogates were refused is linked as U+FFFD:
 * encodeURIComponent throws on a lone surrogate.
 */
function endUserPath(app: AppRecord, user: string): string {
  return `${appPath(app)}/usage?user=${encodeURIComponent(user.toWellFormed())}`;
}

/** Spend per end user (the request's `user`) over the last 30 days; each links to its requests. */
function EndUsers({ app, rows, user }: { app: AppRecord; rows: ReportRow[]; user?: string }) {
  return (
    <section class="card">
      <h2>Spend by end user, last 30 days</h2>
      {rows.length === 0
        ? <p class="muted">No requests in the last 30 days.</p>
        : (
          <div class="table-scroll">
            <table class="end-users">
              <thead>
                <tr>
                  <th scope="col">End user</th>
                  <th scope="col" class="num">Requests</th>
                  <th scope="col" class="num">Spent</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => (
                  <tr>
                    <td>
                      {r.group === null ? <span class="muted">(no user given)</span> : (
                        <a
                          href={endUserPath(app, r.group)}
                          aria-current={r.group === user ? "page" : undefined}
                        >
                          {r.group}
                        </a>
                      )}
                    </td>
                    <td class="num">{r.requests.toLocaleString("en-US")}</td>
                    <td class="num">{usd(r.cost)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      <p class="muted small">
        The end user is the <code>user</code> field of a chat, Responses or embeddings request.
      </p>
    </section>
  );
}

/** GET /dashboard/apps/:id/usage?cursor=&user= */
export function usagePage(
  session: Session,
  app: AppRecord,
  page: UsagePage,
  keyNames: Map<string, string>,
  isFirstPage: boolean,
  endUsers: { rows: ReportRow[]; user?: string } = { rows: [] },
) {
  // Shown only where it says something: few apps ever have usage their balance could not cover.
  const showUncharged = page.records.some((u) => u.uncharged > 0);
  const { user } = endUsers;
  const userQuery = user === undefined ? "" : `user=${encodeURIComponent(user)}&`;
  return renderPage(
    <Page title={`${app.name} · Usage`} session={session}>
      <AppHeader app={app} active="usage" />
      {user !== undefined && (
        <p>
          Requests of end user <strong>{user}</strong> only.{" "}
          <a href={`${appPath(app)}/usage`}>All requests</a>
        </p>
      )}
      <p class="muted">
        Every request that reached a model, newest first. Requests refused before the model ran
        (invalid, unpaid, rate-limited, provider unreachable) cost nothing and are not listed.
        {showUncharged &&
          " “Not charged” is usage beyond what the request's reservation and the balance could cover: the wallet never goes below zero, so it was not taken."}
      </p>
      {page.records.length === 0
        ? (
          <p>
            {page.nextCursor
              ? "None among the requests looked at so far: older ones may match."
              : isFirstPage
              ? "No requests yet."
              : "No older requests."}
          </p>
        )
        : (
          <div class="table-scroll">
            <table class="usage stacked">
              <thead>
                <tr>
                  <th scope="col">Time</th>
                  <th scope="col">Model</th>
                  <th scope="col" class="num">Cost</th>
                  {showUncharged && <th scope="col" class="num">Not charged</th>}
                  <th scope="col" class="num">Prompt</th>
                  <th scope="col" class="num">Completion</th>
                  <th scope="col">Key</th>
                  <th scope="col">End user</th>
                  <th scope="col">Status</th>
                  <th scope="col">Request id</th>
                </tr>
              </thead>
              <tbody>
                {page.records.map((u) => (
                  <tr>
                    <td data-label="Time">
                      <When ms={u.createdAt} />
                    </td>
                    <td data-label="Model">
                      <code>{u.model}</code>
                    </td>
                    <td class="num" data-label="Cost">{usd(u.cost)}</td>
                    {showUncharged && (
                      <td class="num" data-label="Not charged">{usd(u.uncharged)}</td>
                    )}
                    <td class="num" data-label="Prompt">
                      {u.promptTokens.toLocaleString("en-US")}
                      <TokenDetails
                        parts={[
                          [u.cachedTokens, "cached"],
                          [u.cacheWriteTokens, "cache write"],
                          [u.cacheWrite1hTokens, "of it kept 1 h"],
                        ]}
                      />
                    </td>
                    <td class="num" data-label="Completion">
                      {u.completionTokens.toLocaleString("en-US")}
                      <TokenDetails parts={[[u.reasoningTokens, "reasoning"]]} />
                    </td>
                    <td data-label="Key" class="wraps">{keyNames.get(u.keyId) ?? u.keyId}</td>
                    <td data-label="End user" class="wraps">
                      {u.user ?? <span class="muted">—</span>}
                    </td>
                    <td data-label="Status">
                      {OUTCOMES[u.outcome]}
                      <span class="small muted status-detail">
                        {u.streamed ? "streamed" : "not streamed"}
                      </span>
                    </td>
                    <td data-label="Request id" class="wraps">
                      <code class="small">{u.requestId}</code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      <nav class="pager" aria-label="Pages">
        {!isFirstPage && <a href={`${appPath(app)}/usage?${userQuery}`}>Newest</a>}
        {page.nextCursor && (
          <a
            href={`${appPath(app)}/usage?${userQuery}cursor=${encodeURIComponent(page.nextCursor)}`}
          >
            Older requests →
          </a>
        )}
      </nav>
      <EndUsers app={app} rows={endUsers.rows} user={user} />
    </Page>,
  );
}
