import assert from "node:assert/strict";
import { creditedOf } from "@/lib/billing/mod.ts";
import { parseUsd } from "@/lib/core/mod.ts";
import { keys, type LedgerEntry } from "@/lib/db.ts";
import { OwnerSession } from "./owner_session.ts";
import { usageRecords, userMessage, withService } from "./helpers.ts";

const CREDITS = 40;
const CHARGES = 33;

interface Row {
  kind: "credit" | "charge";
  /** The credit's reason, or the charge's request id. */
  name: string;
  micros: number;
}

/** The rows of the wallet page's activity table. */
function rowsOf(html: string): Row[] {
  const body = html.slice(html.indexOf("<tbody>"), html.indexOf("</tbody>"));
  return body.split("<tr>").slice(1).map((row) => {
    const charge = /<code class="small">(req_[0-9a-z]+)<\/code>[\s\S]*?−\$([0-9.]+)/.exec(row);
    if (charge) return { kind: "charge", name: charge[1], micros: parseUsd(charge[2]) };
    const credit =
      /<td data-label="What">((?:(?!<td)[\s\S])*?)<\/td><td class="num credit" data-label="Amount">\+\$([0-9.]+)/
        .exec(row);
    assert.ok(credit, row);
    return { kind: "credit", name: credit[1], micros: parseUsd(credit[2]) };
  });
}

function link(html: string, text: string): string | undefined {
  return new RegExp(`href="([^"]+)">${text}`).exec(html)?.[1].replaceAll("&amp;", "&");
}

async function busyApp(s: Parameters<Parameters<typeof withService>[0]>[0]) {
  const v = new OwnerSession(s);
  await v.signUp("ada@example.com");
  const { appId, apiKey } = await v.createApp("busy");
  for (let i = 1; i <= CREDITS; i++) {
    await s.wallets.credit(appId, {
      amount: i * 1_000,
      kind: "operator_credit",
      reason: `credit ${i}`,
    });
  }
  for (let i = 0; i < CHARGES; i++) {
    const res = await s.chat(apiKey, { model: "tollbooth/echo", messages: userMessage(`hi ${i}`) });
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }
  await s.wallets.drain();
  return { v, appId };
}

/** Follows one list's "Older … →" links from `path` to its end; every page's rows of that kind. */
async function walk(v: OwnerSession, path: string, kind: Row["kind"], linkText: string) {
  const pages: { path: string; html: string; rows: Row[] }[] = [];
  let next: string | undefined = path;
  while (next) {
    const html = await v.page(next);
    pages.push({ path: next, html, rows: rowsOf(html).filter((r) => r.kind === kind) });
    next = link(html, linkText);
    assert.ok(pages.length <= 10, "the pager ends");
  }
  return pages;
}

Deno.test("the wallet page pages credits and charges apart, every entry once, to the ledger's sums", () =>
  withService(async (s) => {
    const { v, appId } = await busyApp(s);
    const wallet = await s.wallet(appId);
    const ledger = await Array.fromAsync(s.kv.list<LedgerEntry>({ prefix: keys.ledger(appId) }));
    const usage = await usageRecords(s.kv, appId);
    assert.equal(ledger.length, CREDITS + 1, "the starter credit and each credit");
    assert.equal(usage.length, CHARGES);
    const walletPath = `/dashboard/apps/${appId}/wallet`;

    const creditPages = await walk(v, walletPath, "credit", "Older credits →");
    assert.deepEqual(creditPages.map((p) => p.rows.length), [30, CREDITS + 1 - 30]);
    const credits = creditPages.flatMap((p) => p.rows);
    assert.equal(new Set(credits.map((r) => r.name)).size, credits.length, "each credit once");
    assert.equal(credits.reduce((sum, r) => sum + r.micros, 0), creditedOf(wallet));

    const chargePages = await walk(v, walletPath, "charge", "Older charges →");
    assert.deepEqual(chargePages.map((p) => p.rows.length), [30, CHARGES - 30]);
    const charges = chargePages.flatMap((p) => p.rows);
    assert.deepEqual(
      charges.map((r) => r.name).toSorted(),
      usage.map((u) => u.requestId).toSorted(),
      "each charge once",
    );
    assert.equal(charges.reduce((sum, r) => sum + r.micros, 0), wallet.spent);

    // Newest first across pages: the last page holds the oldest of each.
    assert.equal(credits.at(-1)!.name, "Starter credits");
    assert.equal(charges.at(-1)!.name, usage[0].requestId);
    assert.equal(link(creditPages[0].html, "Newest"), undefined, "the first page is the newest");
    assert.equal(link(creditPages[1].html, "Newest"), walletPath);
  }));

Deno.test("each wallet list's pager keeps the other list where it was", () =>
  withService(async (s) => {
    const { v, appId } = await busyApp(s);
    const walletPath = `/dashboard/apps/${appId}/wallet`;
    const first = await v.page(walletPath);
    const olderCredits = link(first, "Older credits →")!;
    const creditsPage = await v.page(olderCredits);
    const olderCharges = link(creditsPage, "Older charges →")!;
    const creditsCursor = new URL(olderCredits, "http://x").searchParams.get("credits_cursor");
    assert.equal(
      new URL(olderCharges, "http://x").searchParams.get("credits_cursor"),
      creditsCursor,
    );
    const both = await v.page(olderCharges);
    const kinds = (html: string, kind: Row["kind"]) =>
      rowsOf(html).filter((r) => r.kind === kind).map((r) => r.name);
    assert.deepEqual(kinds(both, "credit"), kinds(creditsPage, "credit"), "credits stay put");
    assert.notDeepEqual(kinds(both, "charge"), kinds(creditsPage, "charge"));
    // And the other way round: older credits from a page of older charges keep those charges.
    const chargesFirst = await v.page(link(first, "Older charges →")!);
    const thenCredits = await v.page(link(chargesFirst, "Older credits →")!);
    assert.deepEqual(kinds(thenCredits, "charge"), kinds(chargesFirst, "charge"));
  }));

Deno.test("a wallet cursor that is not ours, or names no entry, starts that list again and keeps the other", () =>
  withService(async (s) => {
    const { v, appId } = await busyApp(s);
    const walletPath = `/dashboard/apps/${appId}/wallet`;
    const chargesCursor = new URL(link(await v.page(walletPath), "Older charges →")!, "http://x")
      .searchParams.get("charges_cursor")!;
    const kept = `${walletPath}?charges_cursor=${chargesCursor}`;
    for (
      const credits of ["garbage!", "use_abc", `led_${"a".repeat(5000)}`, "led_abc", "led_0%00"]
    ) {
      const res = await v.request(`${kept}&credits_cursor=${credits}`);
      assert.equal(res.status, 303, credits);
      assert.equal(res.headers.get("location"), kept, credits);
    }
    for (const charges of ["garbage!", "led_abc", "use_abc"]) {
      const res = await v.request(`${walletPath}?charges_cursor=${charges}`);
      assert.equal(res.status, 303, charges);
      assert.equal(res.headers.get("location"), walletPath, charges);
    }
    // Another app's entry is no entry of this one's.
    const { appId: otherId } = await s.newApp("other");
    const [{ key: [, , otherEntry] }] = await Array.fromAsync(
      s.kv.list({ prefix: keys.ledger(otherId) }),
    );
    const res = await v.request(`${kept}&credits_cursor=${String(otherEntry)}`);
    assert.equal(res.status, 303);
    assert.equal(res.headers.get("location"), kept);
  }));
