import { CsrfField } from "@/components/CsrfField.tsx";
import type { ApiKeyRecord, AppRecord, RateLimits } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { appPath, formAnchor, type Saved, SavedNotice } from "./shared.tsx";

const LIMIT_FIELDS = [
  { name: "rpm", label: "Requests per minute" },
  { name: "tpm", label: "Tokens per minute" },
] as const;

/** The limits in force: the app's, its defaults, and the live keys that have limits of their own. */
export interface AppLimits {
  effective: RateLimits;
  defaults: RateLimits;
  keys: { key: ApiKeyRecord; limits: RateLimits }[];
}

export interface LimitsRefusal {
  error: string;
  /** The field the error concerns. */
  field: "rpm" | "tpm";
  rpm: string;
  tpm: string;
}

const perMinute = (limits: RateLimits) =>
  `${limits.rpm.toLocaleString("en-US")} requests and ${
    limits.tpm.toLocaleString("en-US")
  } tokens per minute`;

/** The overview's card that sets the app's rate limits. */
export function RateLimitsCard(
  { session, app, limits, refused, saved }: {
    session: Session;
    app: AppRecord;
    limits: AppLimits;
    refused?: LimitsRefusal;
    saved?: Saved;
  },
) {
  const custom = (name: "rpm" | "tpm") =>
    refused
      ? refused[name]
      : limits.effective[name] === limits.defaults[name]
      ? ""
      : String(limits.effective[name]);
  const form = formAnchor("rate-limits", refused);
  return (
    <section class="card" id={form.id}>
      <h2>Rate limits</h2>
      <p class="muted" data-testid="limits-in-force">
        In force: {perMinute(limits.effective)} for the whole app. {limits.keys.length === 0
          ? "Each key may use all of it: no key has limits of its own."
          : "Each key may use all of it, except these keys with limits of their own (the app's limits still hold for all keys together):"}
      </p>
      {limits.keys.length > 0 && (
        <ul class="muted" data-testid="key-limits">
          {limits.keys.map(({ key, limits }) => (
            <li key={key.id}>
              {key.name} (<code>{key.prefix}…</code>): {perMinute(limits)}
            </li>
          ))}
        </ul>
      )}
      <p class="muted">
        A request over a limit gets 429 with{" "}
        <code>Retry-After</code>. Leave a field empty for the default ({limits.defaults.rpm
          .toLocaleString("en-US")} and {limits.defaults.tpm.toLocaleString("en-US")}).
      </p>
      {form.alert}
      <SavedNotice saved={saved} shows={["rate-limits"]} />
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
              {...(refused?.field === name ? form.invalidField : {})}
            />
          </label>
        ))}
        <button type="submit" class="button secondary">Save limits</button>
      </form>
    </section>
  );
}
