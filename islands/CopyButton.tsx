import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";

type Outcome = "idle" | "copied" | "manual";

/**
 * Copies with the older command, for pages where the Clipboard API is missing: it exists only in
 * a secure context (https or localhost), and a gateway may well be served over plain http. The
 * field it selects goes in `beside`, the button's own container: under a modal dialog the rest of
 * the page is inert, and a field there could be neither focused nor selected. `execCommand` says
 * true even when it copied nothing, so only a selection that is the whole value counts as copied.
 */
function copyBySelection(value: string, beside: HTMLElement): boolean {
  const field = document.createElement("textarea");
  field.value = value;
  field.setAttribute("readonly", "");
  field.setAttribute("aria-hidden", "true");
  field.tabIndex = -1;
  field.style.position = "fixed";
  field.style.opacity = "0";
  const focused = document.activeElement as HTMLElement | null;
  beside.append(field);
  field.focus({ preventScroll: true });
  field.select();
  let copied = false;
  try {
    copied = document.activeElement === field && field.selectionStart === 0 &&
      field.selectionEnd === value.length && document.execCommand("copy");
  } catch {
    copied = false;
  }
  field.remove();
  focused?.focus();
  return copied;
}

async function copy(value: string, beside: HTMLElement): Promise<boolean> {
  if (navigator.clipboard && isSecureContext) {
    try {
      await navigator.clipboard.writeText(value);
      return true;
    } catch {
      // Refused (no permission, page not focused): the older way may still work.
    }
  }
  return copyBySelection(value, beside);
}

/**
 * Copies a value to the clipboard and says so. Where the browser lets no page copy, it selects the
 * value in a field of its own (a text area: a code block's lines stay lines) and asks for the
 * keyboard shortcut instead.
 */
export default function CopyButton({ value, label = "Copy" }: { value: string; label?: string }) {
  const [outcome, setOutcome] = useState<Outcome>("idle");
  // Rendered hidden on the server: without JavaScript the button would do nothing, and the value
  // stays selectable beside it.
  const [running, setRunning] = useState(false);
  useLayoutEffect(() => setRunning(true), []);
  const manualField = useRef<HTMLTextAreaElement>(null);
  useEffect(() => {
    if (outcome !== "manual") return;
    manualField.current?.focus();
    manualField.current?.select();
  }, [outcome]);
  return (
    <>
      <button
        type="button"
        class="button secondary"
        hidden={!running}
        onClick={async (event) => {
          const container = (event.currentTarget as HTMLElement).parentElement!;
          if (!(await copy(value, container))) {
            setOutcome("manual");
            return;
          }
          setOutcome("copied");
          setTimeout(() => setOutcome("idle"), 2000);
        }}
      >
        {outcome === "copied" ? "Copied" : label}
      </button>
      {outcome === "manual" && (
        <span class="copy-manual">
          <textarea
            ref={manualField}
            class="mono"
            readOnly
            rows={Math.min(value.split("\n").length, 6)}
            value={value}
            aria-label="Text to copy"
            onFocus={(e) => (e.currentTarget as HTMLTextAreaElement).select()}
          />
          <span class="muted small" role="status">
            Selected: press {/Mac|iPhone|iPad/.test(navigator.platform) ? "⌘C" : "Ctrl+C"}{" "}
            to copy it.
          </span>
        </span>
      )}
    </>
  );
}
