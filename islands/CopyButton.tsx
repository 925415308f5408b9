import { useEffect, useRef, useState } from "preact/hooks";

type Outcome = "idle" | "copied" | "manual";

/**
 * Copies with the older command, for pages where the Clipboard API is missing: it exists only in
 * a secure context (https or localhost), and a gateway may well be served over plain http.
 */
function copyBySelection(value: string): boolean {
  const field = document.createElement("textarea");
  field.value = value;
  field.setAttribute("readonly", "");
  field.style.position = "fixed";
  field.style.opacity = "0";
  const focused = document.activeElement as HTMLElement | null;
  document.body.append(field);
  field.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch {
    copied = false;
  }
  field.remove();
  focused?.focus();
  return copied;
}

async function copy(value: string): Promise<boolean> {
  if (navigator.clipboard && isSecureContext) {
    try {
      await navigator.clipboard.writeText(value);
      return true;
    } catch {
      // Refused (no permission, page not focused): the older way may still work.
    }
  }
  return copyBySelection(value);
}

/**
 * Copies a value to the clipboard and says so. Where the browser lets no page copy, it selects the
 * value in a field of its own (a text area: a code block's lines stay lines) and asks for the
 * keyboard shortcut instead.
 */
export default function CopyButton({ value, label = "Copy" }: { value: string; label?: string }) {
  const [outcome, setOutcome] = useState<Outcome>("idle");
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
        onClick={async () => {
          if (!(await copy(value))) {
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
