import type {
  ApiKeyRecord,
  AppRecord,
  SpendCaps,
  SpendCapsRecord,
  SpendCounter,
} from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { formatUsd, type Micros } from "@/lib/core/mod.ts";
import { currentCounter } from "@/lib/billing/mod.ts";
import { CsrfField } from "@/components/CsrfField.tsx";
import { appPath, formAnchor, SavedNotice } from "./shared.tsx";

const FIELDS = [
  ["total", "Total"],
  ["daily", "Per UTC day"],
  ["monthly", "Per UTC month"],
] as const;

/** What a counter has spent in each cap's window: in all, today (UTC), this month (UTC). */
const SPENT_IN: Record<CapField, (counter: SpendCounter) => Micros> = {
  total: (c) => c.total,
  daily: (c) => c.daySpent,
  monthly: (c) => c.monthSpent,
};
const WINDOW_NAMES: Record<CapField, string> = {
  total: "in all",
  daily: "today",
  monthly: "this month",
};

export const CAP_FIELDS = FIELDS.map(([name]) => name);
type CapField = (typeof CAP_FIELDS)[number];

/** A refused caps form: whose caps (a key's id, or "end-user") and what was typed. */
export interface CapsRefusal {
  error: string;
  target: string;
  /** The field the error concerns. */
  field: CapField;
  typed: Record<CapField, string>;
}

/**
 * Spent in a cap's window and what is left under it; requests in flight hold part of a cap until
 * they settle, so they count against what is left. A window that has passed (yesterday's spending)
 * counts nothing, and a cap set on a key not counted yet has all of it left. Nothing when neither
 * a cap nor a count is there.
 */
function CapUsage(
  { cap, name, counter, id }: {
    cap: Micros | null | undefined;
    name: CapField;
    counter: SpendCounter | undefined;
    id: string;
  },
) {
  if (!counter && cap == null) return null;
  const now = currentCounter(counter ?? null, Date.now());
  const spent = SPENT_IN[name](now);
  const left = cap == null ? null : Math.max(0, cap - spent - now.held);
  return (
    <span class="cap-usage muted small" id={id}>
      ${formatUsd(spent)} spent {WINDOW_NAMES[name]}
      {left !== null && <>{` · $${formatUsd(left)} left`}</>}
      {left !== null && now.held > 0 && <>{` ($${formatUsd(now.held)} held)`}</>}
    </span>
  );
}

function CapFields(
  { caps, typed, label, invalid, counter, idPrefix }: {
    caps: SpendCaps | null | undefined;
    typed: Record<CapField, string> | undefined;
    label: string;
    /** The props of the field a refusal concerns. */
    invalid: { field: CapField; props: Record<string, unknown> } | undefined;
    counter: SpendCounter | undefined;
    idPrefix: string;
  },
) {
  return (
    <>
      {FIELDS.map(([name, title]) => {
        const usageId = `${idPrefix}-${name}-usage`;
        const refusal = invalid?.field === name ? invalid.props : {};
        const described = [
          refusal["aria-describedby"],
          (counter || caps?.[name] != null) && usageId,
        ].filter(Boolean);
        return (
          <label key={name}>
            {title} (USD)
            <input
              name={name}
              inputMode="decimal"
              placeholder="no cap"
              aria-label={`${label}: ${title.toLowerCase()} cap in USD`}
              value={typed ? typed[name] : caps?.[name] != null ? formatUsd(caps[name]!) : ""}
              {...refusal}
              aria-describedby={described.length ? described.join(" ") : undefined}
            />
            <CapUsage cap={caps?.[name]} name={name} counter={counter} id={usageId} />
          </label>
        );
      })}
    </>
  );
}

/** One caps form; a refused one comes back with its alert at its top and the values typed. */
function CapsForm(
  { session, action, target, owner, label, caps, counter, refused, saved, button }: {
    session: Session;
    action: string;
    target: string;
    owner: string;
    label: string;
    caps: SpendCaps | null | undefined;
    counter?: SpendCounter;
    refused?: CapsRefusal;
    /** These caps were just saved. */
    saved: boolean;
    button: string;
  },
) {
  const mine = refused?.target === target ? refused : undefined;
  const form = formAnchor(`caps-${target}`, mine);
  return (
    <form method="post" action={action} class="caps-form" id={form.id}>
      {form.alert}
      {saved && <SavedNotice saved="caps" shows={["caps"]} />}
      <CsrfField session={session} />
      <strong class="cap-owner">{owner}</strong>
      <CapFields
        caps={caps}
        typed={mine?.typed}
        label={label}
        invalid={mine && { field: mine.field, props: form.invalidField }}
        counter={counter}
        idPrefix={form.id}
      />
      <button type="submit" class="button secondary small" aria-label={button}>Save caps</button>
    </form>
  );
}

/**
 * The keys tab's caps: one form per key of `capKeys` (every live key with a cap, and the page's
 * other live keys), and one for each end user of the app.
 */
export function SpendCapsCard(
  { session, app, capKeys, spent, paged, caps, refused, saved }: {
    session: Session;
    app: AppRecord;
    capKeys: ApiKeyRecord[];
    /** What each key spent under its caps, for those whose spending is counted. */
    spent: Map<string, SpendCounter>;
    /** The keys tab is one of several pages: a key without a cap is listed on its own page only. */
    paged: boolean;
    caps: SpendCapsRecord;
    refused?: CapsRefusal;
    /** Whose caps were just saved (a key's id, or end-user). */
    saved?: string;
  },
) {
  return (
    <section class="card" id="spend-caps">
      <h2>Spend caps</h2>
      <p class="muted">
        A key or end user over a cap gets 402 (<code>key_spend_cap_exceeded</code>,{" "}
        <code>user_spend_cap_exceeded</code>) while the wallet keeps its money for the others.
        Requests in flight count against a cap until they are settled, so a burst cannot pass it.
        Spending counts from when a cap is first set; leave a field empty for no cap. Under a key's
        caps: what it spent in each cap's period (in all, the current UTC day, the current UTC
        month) and what is left.
      </p>
      {paged && (
        <p class="muted">
          Listed here: every key with a cap, whatever its page, and this page's other keys. To cap a
          key of another page, open that page.
        </p>
      )}
      {capKeys.map((k) => {
        // Keys may share a name (a rotated key keeps its own): the prefix tells them apart.
        const key = `${k.name} (${k.prefix}…)`;
        return (
          <CapsForm
            session={session}
            action={`${appPath(app)}/keys/${k.id}/spend-cap`}
            target={k.id}
            owner={key}
            label={`Key ${key}`}
            caps={caps.keys[k.id]}
            counter={spent.get(k.id)}
            refused={refused}
            saved={saved === k.id}
            button={`Save caps of ${key}`}
          />
        );
      })}
      <CapsForm
        session={session}
        action={`${appPath(app)}/end-user-spend-cap`}
        target="end-user"
        owner="Each end user"
        label="Each end user"
        caps={caps.endUser}
        refused={refused}
        saved={saved === "end-user"}
        button="Save end-user caps"
      />
      <p class="muted small">
        The end user is the <code>user</code> field of a chat, Responses or embeddings request.
      </p>
    </section>
  );
}
