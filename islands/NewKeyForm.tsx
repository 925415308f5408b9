import { useLayoutEffect, useRef, useState } from "preact/hooks";
import CopyButton from "./CopyButton.tsx";

export interface NewKeyFormProps {
  /** Where the form posts; the server answers JSON `{api_key, name}` when asked for JSON. */
  action: string;
  csrfToken: string;
  /** "create" asks for a name; "rotate" replaces the named key after a confirmation. */
  mode: "create" | "rotate";
  /** The keys tab, where "I have saved it" goes: it lists the keys as they now are. */
  keysPath: string;
  keyName?: string;
  /** The name a refused post (without JavaScript) typed, and the alert that says why. */
  refused?: { name: string; alertId: string };
}

/**
 * Issues a key (new, or the replacement of a rotated one) and shows it once, in place, with a copy
 * button. Without JavaScript the same form posts and the server shows the key on its own page.
 */
export default function NewKeyForm(
  { action, csrfToken, mode, keysPath, keyName, refused }: NewKeyFormProps,
) {
  const [issued, setIssued] = useState<{ apiKey: string; name: string } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [revealOpen, setRevealOpen] = useState(false);
  const dialog = useRef<HTMLDialogElement>(null);
  const opener = useRef<HTMLButtonElement>(null);
  const shownKey = useRef<HTMLInputElement>(null);

  // The form that had the focus is gone: the key that replaced it takes it (and selects itself).
  useLayoutEffect(() => {
    if (issued && mode === "create") shownKey.current?.focus();
  }, [issued]);

  // Shown modal: the page behind it is inert, and Escape closes it. Before the frame is painted,
  // so that the key is never on the page outside its dialog. Closed, the focus goes back to the
  // button that opened it, once the render that closed it has committed (before, the render could
  // take the focus away again).
  const wasOpen = useRef(false);
  useLayoutEffect(() => {
    if (revealOpen && dialog.current && !dialog.current.open) dialog.current.showModal();
    if (!revealOpen && wasOpen.current) opener.current?.focus();
    wasOpen.current = revealOpen;
  }, [revealOpen]);

  // A modal dialog's Tab still leaves the page for the browser's own controls after the last
  // field; the dialog is all the page there is while it is open, so Tab goes round inside it.
  function keepFocusInside(event: KeyboardEvent) {
    if (event.key !== "Tab" || !dialog.current) return;
    const inside = [
      ...dialog.current.querySelectorAll<HTMLElement>("input, textarea, button, a[href]"),
    ];
    const first = inside[0];
    const last = inside[inside.length - 1];
    const from = document.activeElement;
    if (event.shiftKey && (from === first || !dialog.current.contains(from))) {
      event.preventDefault();
      last?.focus();
    } else if (!event.shiftKey && (from === last || !dialog.current.contains(from))) {
      event.preventDefault();
      first?.focus();
    }
  }

  async function submit(event: Event) {
    event.preventDefault();
    if (mode === "rotate" && issued) {
      // Already rotated: the button shows the new key again until the page is reloaded.
      setRevealOpen(true);
      return;
    }
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
        throw new Error(
          body.error?.message ?? `The key could not be issued (${response.status}).`,
        );
      }
      // A session that ended meanwhile answers with the sign-in page, not a key.
      if (typeof body.api_key !== "string") {
        throw new Error("Your session has ended: reload the page and sign in again.");
      }
      setIssued({ apiKey: body.api_key, name: body.name });
      setRevealOpen(true);
      form.reset();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  }

  /**
   * The keys tab fetched anew, with a GET: this page may be the answer to a refused form, which a
   * reload would post again. The page of keys it shows stays the one on screen, if it is one.
   */
  function keysTab(): string {
    return location.pathname === keysPath ? `${keysPath}${location.search}` : keysPath;
  }

  const reveal = issued && (
    <div class={mode === "rotate" ? "key-reveal modal" : "key-reveal"} role="status">
      <p>
        <strong>{mode === "rotate" ? "New key for" : "New key"} “{issued.name}”.</strong>{" "}
        Copy it now: it is shown only this once and cannot be shown again.
        {mode === "rotate" && " The old key no longer works."}
      </p>
      <div class="copy-row">
        <input
          ref={shownKey}
          class="mono"
          readOnly
          value={issued.apiKey}
          aria-label="New API key"
          onFocus={(e) =>
            (e.currentTarget as HTMLInputElement).select()}
        />
        <CopyButton value={issued.apiKey} label="Copy key" />
      </div>
      <button
        type="button"
        class="button"
        onClick={() =>
          location.assign(keysTab())}
      >
        I have saved it
      </button>
    </div>
  );

  if (reveal && mode === "create") return reveal;

  return (
    <>
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
          ref={opener}
          class={mode === "create" ? "button" : "button secondary small"}
          disabled={busy}
          aria-label={mode === "rotate"
            ? issued ? `Show the new key of ${keyName}` : `Rotate key ${keyName}`
            : undefined}
        >
          {mode === "create" ? "Create key" : issued ? "Show new key" : "Rotate"}
        </button>
        {error && <p class="alert" role="alert">{error}</p>}
      </form>
      {reveal && (
        // The rotated key shows over the table row it came from, where there is room to read it.
        <dialog
          ref={dialog}
          class="key-dialog"
          aria-label="Rotated key"
          onKeyDown={keepFocusInside}
          onClose={() => setRevealOpen(false)}
        >
          {reveal}
        </dialog>
      )}
    </>
  );
}
