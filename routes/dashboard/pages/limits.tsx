import { CsrfField } from "@/components/CsrfField.tsx";
import type { AppRecord, RateLimits } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { Alert, appPath } from "./shared.tsx";

const LIMIT_FIELDS = [
  { name: "rpm", label: "Requests per minute" },
  { name: "tpm", label: "Tokens per minute" },
] as const;

/** The overview's card that sets the app's rate limits. */
export function RateLimitsCard(
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
