import { CodeBlock, DocsLayout } from "@/components/DocsLayout.tsx";
import { CONFIG_DEFAULTS } from "@/lib/core/mod.ts";
import { renderPage } from "@/routes/render.ts";
import type { Examples } from "./examples.ts";

/** GET /docs/management; `requestsPerMinute` is the limit of all of an owner's keys together. */
export function managementDocsPage(
  publicUrl: string,
  examples: Examples,
  requestsPerMinute: number,
) {
  const curl = `curl ${publicUrl}/v1/management/apps \\
  -H "Authorization: Bearer $TOLLBOOTH_MANAGEMENT_KEY"`;
  // Any value unique to the request does as the key; uuidgen is not on every system.
  const createKey = `APP_ID=app_...   # an id from the list above
curl ${publicUrl}/v1/management/apps/$APP_ID/keys \\
  -H "Authorization: Bearer $TOLLBOOTH_MANAGEMENT_KEY" \\
  -H "Content-Type: application/json" -H "Idempotency-Key: customer-42-key-1" \\
  -d '{"name": "customer 42"}'`;
  return renderPage(
    <DocsLayout title="Management API" path="/docs/management">
      <h1>Management API</h1>
      <p>
        For apps that resell AI: your servers manage your Tollbooth apps over HTTP. Create a{" "}
        <strong>management key</strong> (<code>tbm_…</code>) in the dashboard under{" "}
        <a href="/dashboard/management-keys">Management keys</a>: it is shown once, stored hashed,
        acts on all of your apps and is revoked there. App API keys (<code>tb_…</code>) do not open
        this API, and a management key cannot call models.
      </p>
      <CodeBlock code={curl} caption="List your apps with their balances" />

      <h2 id="endpoints">Endpoints</h2>
      <p>
        All under <code>/v1/management</code>, described in full in the{" "}
        <a href="/openapi.json">OpenAPI document</a>.
      </p>
      <ul>
        <li>
          <code>GET /apps</code>,{" "}
          <code>GET /apps/{"{app_id}"}</code>: balance, amount held by requests in flight (<code>
            reserved
          </code>), spent, credited, <code>refunded</code>{" "}
          (taken back for refunded and disputed top-ups), <code>owed</code>{" "}
          (taken back but already spent: paid from the balance before anything else), top-up page.
        </li>
        <li>
          <code>GET /apps/{"{app_id}"}/keys</code>, <code>POST /apps/{"{app_id}"}/keys</code>{" "}
          (<code>{'{"name": …}'}</code>; the answer's <code>api_key</code>{" "}
          is the secret, shown this once),{" "}
          <code>POST /apps/{"{app_id}"}/keys/{"{key_id}"}/revoke</code>. An app has at most 100 live
          keys by default (the server's <code>MAX_LIVE_KEYS_PER_APP</code>): one more is 403{" "}
          <code>api_key_limit_reached</code>{" "}
          until a key is revoked; rotating a key in the dashboard is never refused.
        </li>
        <li>
          Spend caps (USD, <code>total</code>, <code>daily</code>,{" "}
          <code>monthly</code>; UTC windows): <code>spend_cap</code> when creating a key,{" "}
          <code>POST /apps/{"{app_id}"}/keys/{"{key_id}"}/spend_cap</code>, and{" "}
          <code>GET|POST /apps/{"{app_id}"}/end_user_spend_cap</code>{" "}
          for each end user. A POST replaces the caps (absent or null: none). Requests in flight
          count against a cap until settled, so no burst passes it (a cap lowered below them stops
          new requests, not those in flight: each is charged up to its hold); over it, 402{" "}
          <code>key_spend_cap_exceeded</code> or <code>user_spend_cap_exceeded</code> with{" "}
          <code>cap</code>, <code>cap_amount</code> and <code>remaining</code>.
        </li>
        <li>
          <code>GET /apps/{"{app_id}"}/usage</code>: every settled request, filtered by{" "}
          <code>user</code>, <code>key_id</code> or <code>model</code>.
        </li>
        <li>
          <code>GET /apps/{"{app_id}"}/usage/report?group_by=day|model|key|user</code> with{" "}
          <code>from</code> and <code>to</code> (UTC days from 2000-01-01 to 9999-12-31,{" "}
          <code>from</code> not after{" "}
          <code>to</code>, at most 93; default the last 30): requests, tokens and cost per group.
          {" "}
          <code>user</code> is the <code>user</code>{" "}
          field of a chat, Responses or embeddings request; requests without one form the group{" "}
          <code>null</code>.
        </li>
        <li>
          <code>GET /apps/{"{app_id}"}/ledger</code>: credits (starter, top-ups, operator credits),
          refunds and chargebacks of top-ups (and given back when a refund fails or a dispute is
          won) and charges, newest first; amounts are signed (charges, refunds and chargebacks
          negative).
        </li>
      </ul>

      <h2 id="pagination">Pagination</h2>
      <p>
        Lists take <code>limit</code> (1 to 100, default 20) and{" "}
        <code>starting_after</code>, and answer{" "}
        <code>{'{"object": "list", "data": […], "has_more": …, "next_cursor": …}'}</code>. Pass{" "}
        <code>next_cursor</code> as <code>starting_after</code> until <code>has_more</code>{" "}
        is false. Lists are newest first and stable while requests keep landing: a walk to the end
        shows every record that existed when it began, each exactly once (newer records appear on a
        new walk). A usage record is dated when its request settled but may be written a moment
        later (a hot app's charges are posted in batches), so it can land behind the newest record
        you have seen: to sync usage, walk back past the last record you saw by a margin (five
        minutes is ample) and skip the ids you already have. A <code>starting_after</code>{" "}
        that is not a cursor of that list is 400{" "}
        <code>invalid_parameter</code>. The keys list pages the same way (a reseller's app may hold
        thousands of keys).
      </p>

      <h2 id="idempotency">Idempotency</h2>
      <p>
        POSTs take an{" "}
        <code>Idempotency-Key</code>, private to your account, with the same rules as the chat
        endpoint (<a href="/docs/billing#idempotency">details</a>). A replayed key creation returns
        the same key's id with{" "}
        <code>api_key: null</code>: secrets are never stored. If you lost the first answer, revoke
        that key and create another.
      </p>
      <CodeBlock code={createKey} caption="Create an API key for one of your customers" />

      <h2 id="rate-limit">Rate limit</h2>
      <p>
        Your account's management keys may make {requestsPerMinute}{" "}
        requests a minute between them on this server (
        {CONFIG_DEFAULTS.MANAGEMENT_RATE_LIMIT_RPM} by default, the server's{" "}
        <code>MANAGEMENT_RATE_LIMIT_RPM</code>), reads and writes alike, counted in fixed UTC
        minutes. The count is your account's: all of your management keys share it, so a second key
        does not add to it. One more is 429 <code>rate_limit_exceeded</code> with{" "}
        <code>Retry-After</code>{" "}
        (the seconds to the end of the minute) and is not run: nothing is created or changed. It
        does not touch your apps' API limits.
      </p>
      <p>
        Every answer after your key is accepted, errors and the 429 included, carries the count in
        the same headers as the paid API's request window: <code>x-ratelimit-limit-requests</code>,
        {" "}
        <code>x-ratelimit-remaining-requests</code> (left in this minute) and{" "}
        <code>x-ratelimit-reset-requests</code> (the time to the end of the minute, such as{" "}
        <code>45s</code>). A 401 carries none.
      </p>

      <h2 id="errors">Errors</h2>
      <p>
        The same error shape as the rest of the API: <code>401 invalid_management_key</code>,{" "}
        <code>404 resource_not_found</code> (an app or key that is not yours; <code>param</code>
        {" "}
        names it), <code>400 invalid_parameter</code> for a bad query or body field,{" "}
        <code>409</code>/<code>422</code> for Idempotency-Key conflicts,{" "}
        <code>429 rate_limit_exceeded</code> <a href="#rate-limit">over the rate limit</a>.
      </p>

      <h2 id="example">Example: Node, no dependencies</h2>
      <CodeBlock code={examples.management} caption="docs/examples/management.mjs" />
    </DocsLayout>,
  );
}
