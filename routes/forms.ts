/**
 * Reading a page's form. A browser only ever sends a whole, well-formed form; anything else (a
 * broken multipart body, a body cut short of its Content-Length) is refused with a page, never
 * a 500, and nothing is changed.
 */
import type { Context } from "hono";
import type { Session } from "@/lib/accounts/mod.ts";
import { messagePage } from "@/routes/pages/message.tsx";

/** A form's text fields; a file or repeated `name[]` field is not one of ours and is left out. */
export type FormFields = Record<string, string>;

/**
 * The request's form fields: none for a body that is not a form, null when a form body could not
 * be read or parsed.
 */
export async function readForm(c: Context): Promise<FormFields | null> {
  let body: Record<string, unknown>;
  try {
    body = await c.req.parseBody();
  } catch {
    return null;
  }
  const fields: FormFields = {};
  for (const [name, value] of Object.entries(body)) {
    if (typeof value === "string") fields[name] = value;
  }
  return fields;
}

/** The answer to a form `readForm` could not read. */
export function formNotReceived(c: Context, session: Session | null): Response {
  return c.html(
    messagePage({
      title: "Form not received",
      message:
        "The form did not arrive whole or could not be read, so nothing was changed. Go back, reload the page and try again.",
      session,
    }),
    400,
  );
}

/**
 * A whole number of digits only, such as a limit typed into a form: `Number()` would also take
 * "0x10", "1e3", " 7 " or "", so it is not used on form text. Null when `text` is not one.
 */
export function parseFormInteger(text: string): number | null {
  if (!/^[0-9]{1,15}$/.test(text)) return null;
  return Number(text);
}
