import { type Context, Hono, type MiddlewareHandler } from "hono";
import {
  type AppCreationBound,
  AppLimitError,
  createApp,
  getApp,
  getWallet,
  issueKey,
  type KeyIssueBound,
  KeyLimitError,
  keyNameOf,
  listOwnerApps,
  MAX_KEY_NAME_CHARS,
  renameApp,
  rotateTopUpToken,
  topUpUrl,
} from "@/lib/tenants/mod.ts";
import { type ApiKeyRecord, type AppRecord, keys, type RateLimits } from "@/lib/db.ts";
import {
  cappedKeyIds,
  dailySpend,
  getRateLimits,
  getSpendCaps,
  keySpendCounters,
  LimitAboveCeilingError,
  MAX_LIMIT,
  mergedActivity,
  revokeKey,
  rotateKey,
  setRateLimits,
  setSpendCaps,
  spendByModel,
  unchargedOf,
} from "@/lib/billing/mod.ts";
import { updateTopUpSettings } from "@/lib/payments/mod.ts";
import {
  ApiError,
  getManyChunked,
  isPlausibleId,
  NotFoundError,
  parseUsd,
} from "@/lib/core/mod.ts";
import { apiKeyRevealOf, type ProxyTrust, takeReveal } from "@/lib/accounts/mod.ts";
import { notFoundPage } from "@/routes/pages/not_found.tsx";
import {
  checkForm,
  formSizeLimit,
  loadSession,
  type PageEnv,
  privatePage,
  requireOwner,
  sessionCookie,
} from "@/routes/session.ts";
import { parseFormInteger } from "@/routes/forms.ts";
import { appsPage } from "./pages/apps.tsx";
import { keyIssuedPage, type KeyRefusal, keyShownPage, keysPage } from "./pages/keys.tsx";
import { CAP_FIELDS, type CapsRefusal } from "./pages/spend_caps.tsx";
import { redirectSaved, takeSaved, takeSavedOf } from "./saved_notice.ts";
import { overviewPage } from "./pages/overview.tsx";
import { usagePage } from "./pages/usage.tsx";
import { walletPage } from "./pages/wallet.tsx";
import { managementKeyRoutes } from "./management_keys.tsx";
import { accountSettingsRoutes } from "./account.tsx";
import {
  MAX_PAGE_LIMIT,
  pageAppKeys,
  pageCredits,
  pageUsage,
  type TwoWayPageRequest,
  UnknownCursorError,
  usageReport,
} from "@/lib/management/mod.ts";
import { addWebhookRoutes, type WebhookRouteDeps } from "./webhooks.ts";
import { redirectToReveal } from "./reveals.ts";

const USAGE_PAGE_SIZE = 50;
const KEYS_PAGE_SIZE = 50;
/** A usage record's id (`newId("use")`): the only cursor the usage pages hand out. */
const USAGE_ID_PATTERN = /^use_[0-9a-z]{1,60}$/;
/** A ledger entry's id (`newId("led")`): the wallet page's credits cursor. */
const LEDGER_ID_PATTERN = /^led_[0-9a-z]{1,60}$/;
/** Credits, and charges, on one wallet page: each list has a page of its own size. */
const WALLET_PAGE_SIZE = 30;

/** Where each of the wallet page's lists starts: its newest, or those older than its cursor. */
interface WalletCursors {
  credits?: string;
  charges?: string;
}

function walletPath(app: AppRecord, cursors: WalletCursors = {}): string {
  const query = new URLSearchParams();
  if (cursors.credits) query.set("credits_cursor", cursors.credits);
  if (cursors.charges) query.set("charges_cursor", cursors.charges);
  const search = query.toString();
  return `/dashboard/apps/${app.id}/wallet${search && `?${search}`}`;
}

type DashboardEnv = { Variables: PageEnv["Variables"] & { app: AppRecord } };

/** Loads the app of the URL into `app`; someone else's app and no app look the same: 404. */
function ownedApp(kv: Deno.Kv): MiddlewareHandler<DashboardEnv> {
  return async (c, next) => {
    let app: AppRecord | null = null;
    try {
      app = await getApp(kv, c.req.param("appId") ?? "");
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
    if (!app || app.ownerId !== c.get("session")!.owner.id) {
      return c.html(notFoundPage(), 404);
    }
    c.set("app", app);
    await next();
  };
}

function wantsJson(c: Context) {
  return (c.req.header("accept") ?? "").includes("application/json");
}

/**
 * The names of the keys a page shows, by id: only theirs are read, as an app may have had
 * thousands of keys (revoked ones stay).
 */
async function keyNames(kv: Deno.Kv, appId: string, keyIds: Iterable<string>) {
  const ids = [...new Set(keyIds)];
  const records = await getManyChunked<ApiKeyRecord>(kv, ids.map(keys.apiKey));
  return new Map(
    records.flatMap(({ value: k }) =>
      k && k.appId === appId ? [[k.id, `${k.name} (${k.prefix}…)`] as const] : []
    ),
  );
}

/** /dashboard: an owner's apps, keys, wallet and usage. Every app route checks ownership. */
export function dashboardRoutes(
  deps: {
    kv: Deno.Kv;
    publicUrl: string;
    rateLimits: RateLimits;
    appCreation: AppCreationBound;
    keyBound: KeyIssueBound;
    webhooks: Omit<WebhookRouteDeps, "kv">;
    /** For the password change's throttle, which counts per client address as sign-in does. */
    proxyTrust: ProxyTrust;
    now?: () => number;
  },
) {
  const { kv, publicUrl } = deps;
  const r = new Hono<DashboardEnv>();
  r.use(
    "*",
    privatePage,
    formSizeLimit,
    loadSession(kv, sessionCookie(publicUrl)),
    checkForm(publicUrl),
    requireOwner,
  );
  // Also matches /apps/:appId itself.
  r.use("/apps/:appId/*", ownedApp(kv));
  r.route("/management-keys", managementKeyRoutes(kv));
  r.route(
    "/account",
    accountSettingsRoutes({
      kv,
      proxyTrust: deps.proxyTrust,
      cookie: sessionCookie(publicUrl),
      now: deps.now,
    }),
  );
  addWebhookRoutes(r, { kv, ...deps.webhooks });

  const session = (c: Context<DashboardEnv>) => c.get("session")!;
  const notFound = (c: Context<DashboardEnv>) => c.html(notFoundPage(), 404);

  r.get("/", async (c) => {
    return c.html(appsPage(session(c), await listOwnerApps(kv, session(c).owner.id)));
  });

  r.post("/apps", async (c) => {
    const name = (c.get("form").name ?? "").trim();
    if (name.length === 0 || name.length > 100) {
      const apps = await listOwnerApps(kv, session(c).owner.id);
      const refused = { error: "An app name has 1 to 100 characters.", name };
      return c.html(appsPage(session(c), apps, refused), 400);
    }
    let created;
    try {
      created = await createApp(kv, {
        name,
        ownerId: session(c).owner.id,
        bound: deps.appCreation,
      });
    } catch (error) {
      if (!(error instanceof AppLimitError)) throw error;
      const apps = await listOwnerApps(kv, session(c).owner.id);
      if (error.retryAfterSeconds) c.header("Retry-After", String(error.retryAfterSeconds));
      const refused = { error: error.message, name };
      return c.html(appsPage(session(c), apps, refused), error.perDay ? 429 : 403);
    }
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "new_app",
      appId: created.app.id,
      name: created.key.record.name,
      secret: created.key.apiKey,
    });
  });

  r.get("/apps/:appId/issued/:revealId", async (c) => {
    const app = c.get("app");
    const issued = await takeReveal(
      kv,
      session(c).id,
      c.req.param("revealId"),
      apiKeyRevealOf(app.id),
    );
    if (!issued) return c.html(keyShownPage(session(c), app));
    return c.html(keyIssuedPage(session(c), app, issued));
  });

  async function overview(app: AppRecord) {
    const [wallet, days, models, limits] = await Promise.all([
      getWallet(kv, app.id),
      dailySpend(kv, app.id),
      spendByModel(kv, app.id),
      getRateLimits(kv, deps.rateLimits, app.id),
    ]);
    const ownLimitKeyIds = Object.keys(limits.keys);
    const ownLimitKeys = await getManyChunked<ApiKeyRecord>(kv, ownLimitKeyIds.map(keys.apiKey));
    const keyLimits = ownLimitKeys.flatMap(({ value: key }) =>
      key && key.revokedAt === null ? [{ key, limits: limits.keys[key.id] }] : []
    );
    return {
      app,
      wallet,
      topUpUrl: topUpUrl(publicUrl, app),
      days,
      models,
      limits: { effective: limits.app, defaults: limits.ceiling, keys: keyLimits },
    };
  }

  async function walletView(app: AppRecord, cursors: WalletCursors = {}) {
    const [wallet, uncharged, credits, charges] = await Promise.all([
      getWallet(kv, app.id),
      unchargedOf(kv, app.id),
      pageCredits(kv, app.id, { limit: WALLET_PAGE_SIZE, startingAfter: cursors.credits }),
      pageUsage(kv, app.id, { limit: WALLET_PAGE_SIZE, startingAfter: cursors.charges }),
    ]);
    const names = await keyNames(kv, app.id, charges.data.map((u) => u.keyId));
    // Each list's link moves that list on and keeps the other where it is.
    const pager = {
      newest: cursors.credits || cursors.charges ? walletPath(app) : null,
      olderCredits: credits.nextCursor &&
        walletPath(app, { ...cursors, credits: credits.nextCursor }),
      olderCharges: charges.nextCursor &&
        walletPath(app, { ...cursors, charges: charges.nextCursor }),
    };
    return {
      app,
      wallet,
      uncharged,
      topUpUrl: topUpUrl(publicUrl, app),
      activity: mergedActivity(credits.data, charges.data),
      keyNames: names,
      pager,
    };
  }

  r.get("/apps/:appId", async (c) => {
    const app = c.get("app");
    const saved = takeSaved(c);
    return c.html(overviewPage(session(c), { ...await overview(app), saved }));
  });

  r.post("/apps/:appId/rename", async (c) => {
    const app = c.get("app");
    try {
      await renameApp(kv, app.id, c.get("form").name ?? "");
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      const renameRefused = {
        error: "An app name has 1 to 100 characters.",
        name: c.get("form").name ?? "",
      };
      return c.html(overviewPage(session(c), { ...await overview(app), renameRefused }), 400);
    }
    return redirectSaved(c, `/dashboard/apps/${app.id}`, "rename", "rename");
  });

  /** The tab a top-up page form was posted from (it is on two): the owner goes back there. */
  const topUpFormPage = (c: Context<DashboardEnv>, app: AppRecord) =>
    c.get("form").from === "overview" ? `/dashboard/apps/${app.id}` : walletPath(app);

  r.post("/apps/:appId/top-up-link", async (c) => {
    const app = c.get("app");
    await rotateTopUpToken(kv, app.id);
    return redirectSaved(c, topUpFormPage(c, app), "top-up-address", "top-up-page");
  });

  /**
   * A page of the keys tab (the newest keys, or those either side of a cursor), with the caps as
   * stored: every answer, an error page too, shows them, of every live key with a cap whatever its
   * page, and of the page's other live keys. A refused form is shown again as typed, its key's
   * too when it is on another page.
   */
  async function keysView(
    c: Context<DashboardEnv>,
    app: AppRecord,
    refused: { key?: KeyRefusal; caps?: CapsRefusal } = {},
    request: TwoWayPageRequest = { limit: KEYS_PAGE_SIZE },
  ) {
    const [page, record] = await Promise.all([
      pageAppKeys(kv, app.id, request),
      getSpendCaps(kv, app.id),
    ]);
    const onPage = new Set(page.data.map((k) => k.id));
    const refusedKey = refused.caps && refused.caps.target !== "end-user"
      ? [refused.caps.target]
      : [];
    const elsewhereIds = new Set(
      [...cappedKeyIds(record), ...refusedKey].filter((id) => !onPage.has(id)),
    );
    const elsewhere = await getManyChunked<ApiKeyRecord>(kv, [...elsewhereIds].map(keys.apiKey));
    const capKeys = [...page.data, ...elsewhere.flatMap(({ value: key }) => key ? [key] : [])]
      .filter((k) => k.revokedAt === null)
      .sort((a, b) => a.id < b.id ? 1 : -1);
    const paged = request.endingBefore !== undefined || request.startingAfter !== undefined;
    const olderThanPage = request.endingBefore !== undefined || page.hasMore;
    const newerThanPage = request.endingBefore !== undefined ? page.hasMore : paged;
    const limitQuery = request.limit === KEYS_PAGE_SIZE ? "" : `limit=${request.limit}&`;
    const base = `/dashboard/apps/${app.id}/keys?${limitQuery}`;
    const first = page.data[0]?.id;
    const last = page.data.at(-1)?.id;
    const pager = {
      // A page emptied meanwhile has no cursor of its own: the way back is the newest page.
      newer: !newerThanPage ? null : first ? `${base}ending_before=${first}` : base,
      older: olderThanPage && last ? `${base}starting_after=${last}` : null,
    };
    const spent = await keySpendCounters(kv, app.id, record, capKeys.map((k) => k.id));
    const { saved, subject } = takeSavedOf(c);
    return keysPage(session(c), app, page.data, {
      refused,
      caps: record,
      capKeys,
      spent,
      pager,
      saved,
      savedCaps: subject,
    });
  }

  r.get("/apps/:appId/keys", async (c) => {
    const app = c.get("app");
    const limitText = c.req.query("limit");
    const limit = limitText === undefined ? KEYS_PAGE_SIZE : parseFormInteger(limitText);
    const startingAfter = c.req.query("starting_after");
    const endingBefore = c.req.query("ending_before");
    const cursors = [startingAfter, endingBefore].filter((cursor) => cursor !== undefined);
    const firstPage = `/dashboard/apps/${app.id}/keys`;
    // A limit or cursor that is not one of ours (or both cursors): start again from the newest.
    if (
      limit === null || limit < 1 || limit > MAX_PAGE_LIMIT || cursors.length > 1 ||
      cursors.some((cursor) => !isPlausibleId(cursor!))
    ) {
      return c.redirect(firstPage, 303);
    }
    try {
      return c.html(await keysView(c, app, {}, { limit, startingAfter, endingBefore }));
    } catch (error) {
      if (!(error instanceof UnknownCursorError)) throw error;
      return c.redirect(firstPage, 303);
    }
  });

  /** Caps from a form of the keys tab: each of total, daily, monthly in USD, empty for none. */
  async function saveCaps(c: Context<DashboardEnv>, target: { keyId: string } | { endUser: true }) {
    const app = c.get("app");
    const form = c.get("form");
    const caps: Record<string, number | null> = {};
    for (const name of CAP_FIELDS) {
      const raw = (form[name] ?? "").trim().replace(/^\$/, "");
      try {
        caps[name] = raw === "" ? null : parseUsd(raw);
        if (caps[name] === 0) throw new RangeError("zero");
      } catch {
        const refused: CapsRefusal = {
          error: "A cap is an amount in USD above zero, such as 5.00, or empty for none.",
          target: "keyId" in target ? target.keyId : "end-user",
          field: name,
          typed: { total: form.total ?? "", daily: form.daily ?? "", monthly: form.monthly ?? "" },
        };
        return c.html(await keysView(c, app, { caps: refused }), 400);
      }
    }
    try {
      await setSpendCaps(kv, app.id, target, caps);
    } catch (error) {
      // The key was rotated or revoked since the route found it live.
      if (!(error instanceof NotFoundError)) throw error;
      return notFound(c);
    }
    const saved = "keyId" in target ? target.keyId : "end-user";
    return redirectSaved(c, `/dashboard/apps/${app.id}/keys`, "caps", `caps-${saved}`, saved);
  }

  r.post("/apps/:appId/keys/:keyId/spend-cap", async (c) => {
    const key = await ownedKey(c, c.get("app"));
    if (!key || key.revokedAt !== null) return notFound(c);
    return await saveCaps(c, { keyId: key.id });
  });

  r.post("/apps/:appId/end-user-spend-cap", (c) => saveCaps(c, { endUser: true }));

  r.post("/apps/:appId/keys", async (c) => {
    const app = c.get("app");
    const name = keyNameOf(String(c.get("form").name ?? ""));
    if (!name) {
      const error = `A key name has 1 to ${MAX_KEY_NAME_CHARS} characters.`;
      if (wantsJson(c)) throw new ApiError("invalid_parameter", error, { param: "name" });
      const refused = { error, name: c.get("form").name ?? "" };
      return c.html(await keysView(c, app, { key: refused }), 400);
    }
    let issued;
    try {
      issued = await issueKey(kv, app.id, name, deps.keyBound);
    } catch (error) {
      if (!(error instanceof KeyLimitError)) throw error;
      if (wantsJson(c)) throw new ApiError("api_key_limit_reached", error.message);
      return c.html(await keysView(c, app, { key: { error: error.message, name } }), 403);
    }
    if (wantsJson(c)) return c.json({ api_key: issued.apiKey, name });
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "new_key",
      appId: app.id,
      name,
      secret: issued.apiKey,
    });
  });

  /** The app's key, or null: a key id of another app is treated as unknown. */
  async function ownedKey(c: Context<DashboardEnv>, app: AppRecord): Promise<ApiKeyRecord | null> {
    const keyId = c.req.param("keyId") ?? "";
    if (!isPlausibleId(keyId)) return null;
    const key = (await kv.get<ApiKeyRecord>(keys.apiKey(keyId))).value;
    return key?.appId === app.id ? key : null;
  }

  /**
   * The keys page the owner revoked from (its cursor kept), when the browser says which: an owner
   * among hundreds of keys stays where they were. Anything else is the first page.
   */
  function sameKeysPage(referer: string | undefined, appId: string): string {
    const keysPath = `/dashboard/apps/${appId}/keys`;
    try {
      const from = new URL(referer ?? "");
      if (from.origin === new URL(publicUrl).origin && from.pathname === keysPath) {
        return keysPath + from.search;
      }
    } catch {
      // No referer, or not a URL.
    }
    return keysPath;
  }

  r.post("/apps/:appId/keys/:keyId/revoke", async (c) => {
    const app = c.get("app");
    const key = await ownedKey(c, app);
    if (!key) return notFound(c);
    await revokeKey(kv, key.id);
    return redirectSaved(c, sameKeysPage(c.req.header("referer"), app.id), "revoked");
  });

  r.post("/apps/:appId/keys/:keyId/rotate", async (c) => {
    const app = c.get("app");
    const key = await ownedKey(c, app);
    if (!key) return notFound(c);
    // A double click, or another tab, may revoke it between the read and the rotation's commit.
    const rotated = key.revokedAt === null
      ? await rotateKey(kv, key.id).catch((error) => {
        if (error instanceof NotFoundError) return null;
        throw error;
      })
      : null;
    if (!rotated) {
      const message = "This key is already revoked; create a new one instead.";
      if (wantsJson(c)) throw new ApiError("resource_not_found", message, { param: "key_id" });
      return c.redirect(`/dashboard/apps/${app.id}/keys`, 303);
    }
    const { issued } = rotated;
    if (wantsJson(c)) return c.json({ api_key: issued.apiKey, name: key.name });
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "rotated_key",
      appId: app.id,
      name: key.name,
      secret: issued.apiKey,
    });
  });

  /** Scans (of a few thousand records each) a filtered usage page may take to find something. */
  const USAGE_EMPTY_SCANS = 8;

  r.get("/apps/:appId/usage", async (c) => {
    const app = c.get("app");
    const cursor = c.req.query("cursor") ?? "";
    const user = c.req.query("user") || undefined;
    const userQuery = user === undefined ? "" : `?user=${encodeURIComponent(user)}`;
    const firstPage = `/dashboard/apps/${app.id}/usage${userQuery}`;
    // A cursor that is not one of ours, or not one of this app's records: start again from the
    // newest.
    if (cursor !== "" && !USAGE_ID_PATTERN.test(cursor)) return c.redirect(firstPage, 303);
    let page;
    try {
      // One pager for all and for one end user's requests; the cursor is the last record's id.
      // A filtered page scans a bounded number of records and may come back empty with more to
      // look at: an end user with a few requests among many others is looked for a while longer
      // before the page says so.
      let after = cursor || undefined;
      for (let scans = 0;; scans++) {
        page = await pageUsage(kv, app.id, { limit: USAGE_PAGE_SIZE, startingAfter: after }, {
          user,
        });
        if (page.data.length > 0 || !page.nextCursor || scans === USAGE_EMPTY_SCANS - 1) break;
        after = page.nextCursor;
      }
    } catch (error) {
      if (!(error instanceof UnknownCursorError)) throw error;
      return c.redirect(firstPage, 303);
    }
    const today = new Date().toISOString().slice(0, 10);
    const rows = await usageReport(kv, app.id, {
      groupBy: "user",
      from: new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10),
      to: today,
    });
    return c.html(
      usagePage(
        session(c),
        app,
        { records: page.data, nextCursor: page.nextCursor },
        await keyNames(kv, app.id, page.data.map((u) => u.keyId)),
        cursor === "",
        { rows, user },
      ),
    );
  });

  r.get("/apps/:appId/wallet", async (c) => {
    const app = c.get("app");
    const asked = {
      credits: c.req.query("credits_cursor") || undefined,
      charges: c.req.query("charges_cursor") || undefined,
    };
    // A cursor that is not one of ours, or names no entry of its list, starts that list again from
    // its newest; the other list stays where the owner had paged it.
    const ours = {
      credits: asked.credits && LEDGER_ID_PATTERN.test(asked.credits) ? asked.credits : undefined,
      charges: asked.charges && USAGE_ID_PATTERN.test(asked.charges) ? asked.charges : undefined,
    };
    if (ours.credits !== asked.credits || ours.charges !== asked.charges) {
      return c.redirect(walletPath(app, ours), 303);
    }
    try {
      const saved = takeSaved(c);
      return c.html(walletPage(session(c), { ...await walletView(app, ours), saved }));
    } catch (error) {
      if (!(error instanceof UnknownCursorError)) throw error;
      const known = {
        credits: error.cursor === ours.credits ? undefined : ours.credits,
        charges: error.cursor === ours.charges ? undefined : ours.charges,
      };
      return c.redirect(walletPath(app, known), 303);
    }
  });

  r.post("/apps/:appId/top-up-settings", async (c) => {
    const app = c.get("app");
    const form = c.get("form");
    const returnUrl = (form.return_url ?? "").trim();
    try {
      await updateTopUpSettings(kv, app.id, {
        returnUrl: returnUrl === "" ? null : returnUrl,
        showBalance: form.show_balance === "on",
      });
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      const topUpRefused = {
        // The message reads as a clause (the admin CLI puts it after the flag); here it is the alert.
        error: `${error.message[0].toUpperCase()}${error.message.slice(1)}.`,
        returnUrl: form.return_url ?? "",
        showBalance: form.show_balance === "on",
      };
      if (form.from === "overview") {
        return c.html(overviewPage(session(c), { ...await overview(app), topUpRefused }), 400);
      }
      return c.html(walletPage(session(c), { ...await walletView(app), topUpRefused }), 400);
    }
    return redirectSaved(c, topUpFormPage(c, app), "top-up-settings", "top-up-page");
  });

  r.post("/apps/:appId/limits", async (c) => {
    const app = c.get("app");
    const form = c.get("form");
    const change: { rpm?: number | null; tpm?: number | null } = {};
    const refuse = async (error: string, field: "rpm" | "tpm") => {
      const limitsRefused = { error, field, rpm: form.rpm ?? "", tpm: form.tpm ?? "" };
      return c.html(overviewPage(session(c), { ...await overview(app), limitsRefused }), 400);
    };
    for (const name of ["rpm", "tpm"] as const) {
      const raw = (form[name] ?? "").trim();
      const value = raw === "" ? null : parseFormInteger(raw);
      if (raw !== "" && !(value !== null && value >= 1)) {
        return await refuse(
          "Requests and tokens per minute are whole numbers of at least 1, or empty for the default.",
          name,
        );
      }
      // Too large to store: refused here, naming the app's ceiling as setRateLimits does below it.
      if (value !== null && value > MAX_LIMIT) {
        const { ceiling } = await getRateLimits(kv, deps.rateLimits, app.id);
        return await refuse(new LimitAboveCeilingError(name, ceiling[name], value).message, name);
      }
      change[name] = value;
    }
    try {
      await setRateLimits(kv, app.id, change, { by: "owner", defaults: deps.rateLimits });
    } catch (error) {
      if (!(error instanceof LimitAboveCeilingError)) throw error;
      return await refuse(error.message, error.limit);
    }
    return redirectSaved(c, `/dashboard/apps/${app.id}`, "rate-limits", "rate-limits");
  });

  return r;
}
