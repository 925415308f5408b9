import { useState } from "preact/hooks";
import CopyButton from "./CopyButton.tsx";

export interface NewKeyFormProps {
  /** Where the form posts; the server answers JSON `{api_key, name}` when asked for JSON. */
  action: string;
  csrfToken: string;
  /** "create" asks for a name; "rotate" replaces the named key after a confirmation. */
  mode: "create" | "rotate";
  keyName?: string;
  /** The name a refused post (without JavaScript) typed, and the alert that says why. */
  refused?: { name: string; alertId: string };
}

/**
 * Issues a key (new, or the replacement of a rotated one) and shows it once, in place, with a copy
 * button. Without JavaScript the same form posts and the server shows the key on its own page.
 */
export default function NewKeyForm({ action, csrfToken, mode, keyName, refused }: NewKeyFormProps) {
  const [issued, setIssued] = useState<{ apiKey: string; name: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: Event) {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    if (
      mode === "rotate" &&
      !confirm(`Rotate "${keyName}"? The current key stops working immediately.`)
    ) return;
    setBusy(true);
    setError(null);
    try {
      const response = await fetch(action, {
        method: "POST",
        body: new FormData(form),
        headers: { accept: "application/json" },
      });
      const body = await response.json().catch(() => ({}));
      if (!response.ok) {
        throw new Error(body.error ?? `The key could not be issued (${response.status}).`);
      }
      // A session that ended meanwhile answers with the sign-in page, not a key.
      if (typeof body.api_key !== "string") {
        throw new Error("Your session has ended: reload the page and sign in again.");
      }
      setIssued({ apiKey: body.api_key, name: body.name });
      form.reset();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  }

  if (issued) {
    const reveal = (
      <div class={mode === "rotate" ? "key-reveal modal" : "key-reveal"} role="status">
        <p>
          <strong>{mode === "rotate" ? "New key for" : "New key"} “{issued.name}”.</strong>{" "}
          Copy it now: it is shown only this once and cannot be shown again.
          {mode === "rotate" && " The old key no longer works."}
        </p>
        <div class="copy-row">
          <input
            class="mono"
            readOnly
            value={issued.apiKey}
            aria-label="New API key"
            onFocus={(e) => (e.currentTarget as HTMLInputElement).select()}
          />
          <CopyButton value={issued.apiKey} label="Copy key" />
        </div>
        <button type="button" class="button" onClick={() => location.reload()}>
          I have saved it
        </button>
      </div>
    );
    // A rotated key is revealed above the table row it came from, where there is room to read it.
    return mode === "rotate"
      ? (
        <div class="overlay" role="dialog" aria-modal="true" aria-label="Rotated key">
          {reveal}
        </div>
      )
      : reveal;
  }

  return (
    <form
      method="post"
      action={action}
      onSubmit={submit}
      class={mode === "create" ? "row-form" : "inline-form"}
    >
      <input type="hidden" name="_csrf" value={csrfToken} />
      {mode === "create" && (
        <label>
          Key name
          <input
            name="name"
            required
            maxLength={60}
            placeholder="e.g. production server"
            defaultValue={refused?.name}
            {...(refused
              ? { autofocus: true, "aria-invalid": true, "aria-describedby": refused.alertId }
              : {})}
          />
        </label>
      )}
      <button
        type="submit"
        class={mode === "create" ? "button" : "button secondary small"}
        disabled={busy}
        aria-label={mode === "rotate" ? `Rotate key ${keyName}` : undefined}
      >
        {mode === "create" ? "Create key" : "Rotate"}
      </button>
      {error && <p class="alert" role="alert">{error}</p>}
    </form>
  );
}
