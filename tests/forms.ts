import assert from "node:assert/strict";
import { keys, type LedgerEntry } from "@/lib/db.ts";
import { PUBLIC_URL, type TestService } from "./helpers.ts";

export function page(s: TestService, path: string): Promise<Response> {
  return s.handle(new Request(`${PUBLIC_URL}${path}`));
}

/** Posts a form as a browser on our own page does (same-origin fetch metadata). */
export function postForm(
  s: TestService,
  path: string,
  fields: Record<string, string>,
  headers: Record<string, string> = { "sec-fetch-site": "same-origin", origin: PUBLIC_URL },
): Promise<Response> {
  return s.handle(
    new Request(`${PUBLIC_URL}${path}`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams(fields),
      redirect: "manual",
    }),
  );
}

export function formTokenIn(html: string): string {
  const match = /name="form_token" value="([^"]+)"/.exec(html);
  assert.ok(match, "the page has a form token");
  return match[1];
}

/** The form token of the app's top-up page, as a visitor gets it. */
export async function topUpFormToken(s: TestService, topUpToken: string): Promise<string> {
  const res = await page(s, `/top-up/${topUpToken}`);
  assert.equal(res.status, 200);
  return formTokenIn(await res.text());
}

export async function ledgerOf(s: TestService, appId: string): Promise<LedgerEntry[]> {
  const entries: LedgerEntry[] = [];
  for await (const e of s.kv.list<LedgerEntry>({ prefix: keys.ledger(appId) })) {
    entries.push(e.value);
  }
  return entries;
}

/** The money state a refusal must leave untouched. */
export async function moneyState(s: TestService, appId: string) {
  return { wallet: await s.wallet(appId), ledger: await ledgerOf(s, appId) };
}
