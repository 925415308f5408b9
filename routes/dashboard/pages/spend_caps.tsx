import type { ApiKeyRecord, AppRecord, SpendCaps, SpendCapsRecord } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { formatUsd } from "@/lib/core/mod.ts";
import { CsrfField } from "@/components/CsrfField.tsx";
import { Alert, appPath } from "./shared.tsx";

const FIELDS = [
  ["total", "Total"],
  ["daily", "Per UTC day"],
  ["monthly", "Per UTC month"],
] as const;

function CapFields({ caps, label }: { caps: SpendCaps | null | undefined; label: string }) {
  return (
    <>
      {FIELDS.map(([name, title]) => (
        <label key={name}>
          {title} (USD)
          <input
            name={name}
            inputMode="decimal"
            placeholder="no cap"
            aria-label={`${label}: ${title.toLowerCase()} cap in USD`}
            value={caps?.[name] != null ? formatUsd(caps[name]!) : ""}
          />
        </label>
      ))}
    </>
  );
}

/** The keys tab's caps: one form per live key, and one for each end user of the app. */
export function SpendCapsCard(
  { session, app, live, caps, error }: {
    session: Session;
    app: AppRecord;
    live: ApiKeyRecord[];
    caps: SpendCapsRecord;
    error?: string;
  },
) {
  return (
    <section class="card" id="spend-caps">
      <h2>Spend caps</h2>
      <p class="muted">
        A key or end user over a cap gets 402 (<code>key_spend_cap_exceeded</code>,{" "}
        <code>user_spend_cap_exceeded</code>) while the wallet keeps its money for the others.
        Requests in flight count against a cap until they are settled, so a burst cannot pass it.
        Spending counts from when a cap is first set; leave a field empty for no cap.
      </p>
      <Alert error={error} />
      {live.map((k) => (
        <form method="post" action={`${appPath(app)}/keys/${k.id}/spend-cap`} class="row-form">
          <CsrfField session={session} />
          <strong class="cap-owner">{k.name}</strong>
          <CapFields caps={caps.keys[k.id]} label={`Key ${k.name}`} />
          <button type="submit" class="button secondary small">Save caps of {k.name}</button>
        </form>
      ))}
      <form method="post" action={`${appPath(app)}/end-user-spend-cap`} class="row-form">
        <CsrfField session={session} />
        <strong class="cap-owner">Each end user</strong>
        <CapFields caps={caps.endUser} label="Each end user" />
        <button type="submit" class="button secondary small">Save end-user caps</button>
      </form>
      <p class="muted small">
        The end user is the <code>user</code> field of a chat or Responses request.
      </p>
    </section>
  );
}
