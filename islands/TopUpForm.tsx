import { useEffect, useState } from "preact/hooks";

export interface TopUpFormProps {
  action: string;
  formToken: string;
  amounts: number[];
  initialAmount: number;
  appName: string;
  mode: "stripe" | "dev" | "unavailable";
}

/**
 * Choosing an amount and paying. It is a plain form (POST with the amount and the signed form
 * token) that works without JavaScript; hydrated, it names the exact price on the button and
 * blocks a second submission while checkout opens.
 */
export default function TopUpForm(
  { action, formToken, amounts, initialAmount, appName, mode }: TopUpFormProps,
) {
  const [amount, setAmount] = useState(initialAmount);
  const [hydrated, setHydrated] = useState(false);
  const [submitting, setSubmitting] = useState(false);
  useEffect(() => setHydrated(true), []);
  // Coming back with the browser's back button restores this page as it was left.
  useEffect(() => {
    const reset = (event: Event) => {
      if ((event as Event & { persisted?: boolean }).persisted) setSubmitting(false);
    };
    addEventListener("pageshow", reset);
    return () => removeEventListener("pageshow", reset);
  }, []);
  const available = mode !== "unavailable";
  const checkout = mode === "dev" ? "test checkout" : "secure checkout";

  let label = `Continue to ${checkout}`;
  if (!available) label = "Purchases unavailable";
  else if (submitting) label = `Opening ${checkout}…`;
  else if (hydrated) label = `Pay ${amount}.00 USD`;

  return (
    <form
      method="post"
      action={action}
      class="topup-form"
      onSubmit={(event) => {
        if (submitting || !available) event.preventDefault();
        else setSubmitting(true);
      }}
    >
      <input type="hidden" name="form_token" value={formToken} />
      <fieldset disabled={!available}>
        <legend>Choose an amount of credits for {appName}</legend>
        <div class="amounts">
          {amounts.map((usd) => (
            <label class="amount-choice" key={usd}>
              <input
                type="radio"
                name="amount"
                value={String(usd)}
                checked={amount === usd}
                onChange={() => setAmount(usd)}
              />
              <span class="amount-value">{usd} USD</span>
              <span class="amount-note">{usd}.00 USD of credits</span>
            </label>
          ))}
        </div>
      </fieldset>
      <button
        type="submit"
        class="button pay"
        disabled={!available || submitting}
        aria-live="polite"
      >
        {label}
      </button>
      <p class="fineprint">
        {available
          ? `One-time payment in US dollars. You will ${
            mode === "dev" ? "confirm on a test page" : "pay on Stripe's secure checkout page"
          } and come back here with a receipt.`
          : "Nothing can be bought at the moment; nothing will be charged."}
      </p>
    </form>
  );
}
