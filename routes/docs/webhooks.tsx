import { CodeBlock, DocsLayout } from "@/components/DocsLayout.tsx";
import { renderPage } from "@/routes/render.ts";
import type { Examples } from "./examples.ts";
import { retrySpanText, WEBHOOK_DEFAULTS } from "@/lib/webhooks/mod.ts";

const EXAMPLE = `{
  "id": "evt_0mhx3c2k1s9f2a7q0d8e4b1c5",
  "object": "event",
  "type": "balance.low",
  "created": 1795900000,
  "app_id": "app_0mhx2z…",
  "data": { "balance": "1.998210", "reserved": "0.000000", "threshold": "2.000000" }
}`;

/** GET /docs/webhooks */
export function webhooksDocsPage(examples: Examples) {
  const base = WEBHOOK_DEFAULTS.retryBaseMs / 1000;
  return renderPage(
    <DocsLayout title="Webhooks" path="/docs/webhooks">
      <h1>Webhooks: low balance and top-ups</h1>
      <p>
        Set an endpoint and an optional low-balance threshold per app in the dashboard (the app's
        {" "}
        <strong>Webhooks</strong>{" "}
        tab). The signing secret (<code>whsec_…</code>) is shown once; replace it there if it leaks.
        Endpoints are https.
      </p>
      <h2 id="events">Events</h2>
      <ul>
        <li>
          <code>balance.low</code>: the balance (available plus held by requests in flight) fell
          below the threshold. Once per crossing: it fires again only after the balance has risen to
          the threshold or above (a top-up). Holds are not counted as spent, so a burst of requests
          in flight does not fire and re-arm it.
        </li>
        <li>
          <code>balance.topped_up</code>: a top-up was credited (<code>amount</code>,{" "}
          <code>reference</code> of the payment, <code>ledger_entry_id</code>, the{" "}
          <code>balance</code> after it).
        </li>
        <li>
          <code>balance.taken_back</code>: a top-up was refunded or charged back (<code>kind</code>
          {" "}
          <code>refund</code> or <code>chargeback</code>, <code>amount</code>,{" "}
          <code>reference</code>, <code>ledger_entry_id</code>, <code>balance</code>, and{" "}
          <code>owed</code>: what had already been spent, taken from the balance before anything
          else as money comes back).{" "}
          <code>balance.given_back</code>: a refund failed or was canceled, or a dispute was won,
          and what it took was given back (<code>kind</code> <code>refund_reversed</code> or{" "}
          <code>chargeback_reversed</code>, the same fields).
        </li>
        <li>
          <code>webhook.test</code>: sent by the dashboard's “Send test event” button (at most 5 a
          minute per app).
        </li>
      </ul>
      <CodeBlock code={EXAMPLE} caption="An event's body" />
      <h2 id="signature">Verifying the signature</h2>
      <p>
        Every POST carries <code>Tollbooth-Signature: t=&lt;unix seconds&gt;,v1=&lt;hex&gt;</code>
        {" "}
        where the hex is HMAC-SHA256 with your secret over <code>t + "." + raw body</code>
        — Stripe's scheme. Compute it over the raw bytes (before parsing JSON), compare in constant
        time, and refuse timestamps more than five minutes old.
      </p>
      <CodeBlock code={examples.webhookVerify} caption="docs/examples/webhook-verify.mjs" />
      <h2 id="delivery">Delivery and retries</h2>
      <ul>
        <li>
          At least once: answer 2xx when you have the event. Anything else (or no answer in{" "}
          {WEBHOOK_DEFAULTS.timeoutMs / 1000} seconds) is retried after {base} s, {2 * base} s,{" "}
          {4 * base} s, … up to {WEBHOOK_DEFAULTS.maxBackoffMs / 60_000} minutes apart,{" "}
          {WEBHOOK_DEFAULTS.maxAttempts}{" "}
          attempts in all ({retrySpanText()}), then the event is marked failed in the dashboard.
          Delivered and failed events are listed for 30 days.
        </li>
        <li>
          The same event can arrive twice (a retry after a lost answer, a process restarted
          mid-delivery): de-duplicate on <code>id</code>, also sent as{" "}
          <code>Tollbooth-Event-Id</code>.
        </li>
        <li>
          Detection and delivery run in the background: they never slow an API request down.
        </li>
      </ul>
    </DocsLayout>,
  );
}
