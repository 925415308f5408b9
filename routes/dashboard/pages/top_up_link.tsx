import { CsrfField } from "@/components/CsrfField.tsx";
import { Island } from "@/components/Island.tsx";
import type { AppRecord } from "@/lib/db.ts";
import type { Session } from "@/lib/accounts/mod.ts";
import { appPath, formAnchor, type Saved, SavedNotice } from "./shared.tsx";

export interface TopUpSettingsRefusal {
  error: string;
  returnUrl: string;
  showBalance: boolean;
}

/** The top-up page's address and settings, on the overview and the wallet tab. */
export function TopUpLink(
  { session, app, url, on, refused, saved }: {
    session: Session;
    app: AppRecord;
    url: string;
    /** The tab it is on: its forms bring the owner back there. */
    on: "overview" | "wallet";
    refused?: TopUpSettingsRefusal;
    saved?: Saved;
  },
) {
  const settings = formAnchor("top-up-page", refused);
  const from = <input type="hidden" name="from" value={on} />;
  return (
    <section class="card" id={settings.id}>
      <h2>Top-up page</h2>
      <p class="muted">
        Share this address with your app's users: anyone who has it can add credits to this wallet
        (5, 10, 25 or 50 USD). It is also the <code>top_up_url</code> of the API's 402 errors.
      </p>
      <SavedNotice saved={saved} shows={["top-up-address"]} />
      <div class="copy-row">
        <input class="mono" readOnly value={url} aria-label="Top-up page address" />
        <Island name="CopyButton" props={{ value: url, label: "Copy link" }} />
      </div>
      <form
        method="post"
        action={`${appPath(app)}/top-up-link`}
        class="inline-form"
        data-confirm="Replace the top-up page's address? Every link to the current one stops working."
      >
        <CsrfField session={session} />
        {from}
        <button type="submit" class="button secondary small">Replace this address</button>
        <span class="muted small">
          If it leaked: the current address stops working and a new one is made.
        </span>
      </form>
      <h3>What your users see</h3>
      {settings.alert}
      <SavedNotice saved={saved} shows={["top-up-settings"]} />
      <form
        method="post"
        action={`${appPath(app)}/top-up-settings`}
        class="stack"
      >
        <CsrfField session={session} />
        {from}
        <label>
          Link back to your app (optional)
          <input
            name="return_url"
            type="url"
            value={refused ? refused.returnUrl : app.topUpReturnUrl ?? ""}
            placeholder="https://your-app.example/credits"
            {...settings.invalidField}
          />
        </label>
        <label class="checkbox">
          <input
            type="checkbox"
            name="show_balance"
            checked={refused ? refused.showBalance : app.topUpShowBalance ?? false}
          />{" "}
          Show the app's current balance on the top-up page
        </label>
        <button type="submit" class="button secondary">Save top-up page</button>
      </form>
    </section>
  );
}
