import { type Context, Hono, type MiddlewareHandler } from "hono";
import { z } from "zod";
import {
  ApiError,
  formatUsd,
  type Logger,
  type Micros,
  NotFoundError,
  parseUsd,
} from "@/lib/core/mod.ts";
import type {
  ApiKeyRecord,
  AppRecord,
  SpendCaps,
  SpendCapsRecord,
  UsageRecord,
  WalletRecord,
} from "@/lib/db.ts";
import {
  getSpendCaps,
  issueKeyWithCaps,
  KeyCapNotStoredError,
  revokeKey,
  setSpendCaps,
  takesBack,
  unchargedOf,
  walletFigures,
} from "@/lib/billing/mod.ts";
import type { IdempotencyStore } from "@/lib/idempotency/mod.ts";
import {
  authenticateManagementKey,
  FIRST_REPORT_DAY,
  type LedgerItem,
  MAX_PAGE_LIMIT,
  MAX_REPORT_DAYS,
  type Page,
  pageAppKeys,
  pageLedger,
  pageOwnerApps,
  pageUsage,
  type ReportRow,
  UnknownCursorError,
  usageReport,
} from "@/lib/management/mod.ts";
import {
  getApp,
  getAppKey,
  getWallet,
  issueKey,
  type KeyIssueBound,
  KeyLimitError,
  MAX_KEY_NAME_CHARS,
  topUpUrl,
} from "@/lib/tenants/mod.ts";
import { apiBodyRefusal, bodyLimit } from "@/routes/body_limit.ts";
import { idempotency } from "@/routes/idempotency.ts";
import { bearerToken, type Env, requireSupportedVersion } from "@/routes/middleware.ts";
import { jsonBody } from "@/routes/json_body.ts";
import { managementRateLimit } from "@/routes/management_rate_limit.ts";

/** Management request bodies are small: a name and a few numbers. */
const MAX_BODY_BYTES = 16 * 1024;
const DEFAULT_PAGE_LIMIT = 20;

type ManagementEnv = { Variables: Env["Variables"] & { app: AppRecord } };

const seconds = (ms: number | null) => ms === null ? null : Math.floor(ms / 1000);

function appObject(app: AppRecord, wallet: WalletRecord, uncharged: Micros, publicUrl: string) {
  return {
    id: app.id,
    object: "app",
    name: app.name,
    ...walletFigures(wallet, uncharged),
    top_up_url: topUpUrl(publicUrl, app),
    created: seconds(app.createdAt),
  };
}

function capsObject(caps: SpendCaps | null | undefined) {
  // A rotated key's entry may carry only its counter, with no cap left.
  if (!caps || (caps.total === null && caps.daily === null && caps.monthly === null)) return null;
  const usd = (v: number | null) => v === null ? null : formatUsd(v);
  return { total: usd(caps.total), daily: usd(caps.daily), monthly: usd(caps.monthly) };
}

function keyObject(key: ApiKeyRecord & { lastUsedAt?: number | null }, caps: SpendCapsRecord) {
  return {
    id: key.id,
    object: "api_key",
    name: key.name,
    prefix: key.prefix,
    created: seconds(key.createdAt),
    last_used: seconds(key.lastUsedAt ?? null),
    revoked: seconds(key.revokedAt),
    // A revoked key's entry outlives it while its requests in flight settle: it caps nothing new.
    spend_cap: capsObject(key.revokedAt === null ? caps.keys[key.id] : undefined),
  };
}

function usageObject(u: UsageRecord) {
  return {
    id: u.id,
    object: "usage_record",
    request_id: u.requestId,
    key_id: u.keyId,
    user: u.user ?? null,
    model: u.model,
    provider: u.provider,
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    cost: formatUsd(u.cost),
    uncharged: formatUsd(u.uncharged),
    reserved: formatUsd(u.reserved),
    streamed: u.streamed,
    outcome: u.outcome,
    counted_locally: u.countedLocally,
    created: seconds(u.createdAt),
  };
}

function ledgerObject(item: LedgerItem) {
  if (item.kind === "credit") {
    return {
      id: item.id,
      object: "ledger_entry",
      type: item.entry.kind,
      amount: formatUsd(takesBack(item.entry.kind) ? -item.entry.amount : item.entry.amount),
      reason: item.entry.reason,
      reference: item.entry.reference,
      request_id: null,
      model: null,
      created: seconds(item.at),
    };
  }
  return {
    id: item.id,
    object: "ledger_entry",
    type: "charge",
    amount: formatUsd(-item.usage.cost),
    reason: null,
    reference: null,
    request_id: item.usage.requestId,
    model: item.usage.model,
    created: seconds(item.at),
  };
}

function reportRowObject(row: ReportRow) {
  return {
    object: "usage_report_row",
    group: row.group,
    requests: row.requests,
    prompt_tokens: row.promptTokens,
    completion_tokens: row.completionTokens,
    cost: formatUsd(row.cost),
  };
}

function list<T, U>(page: Page<T>, map: (item: T, index: number) => U) {
  return {
    object: "list",
    data: page.data.map(map),
    has_more: page.hasMore,
    next_cursor: page.nextCursor,
  };
}

/** Parses query parameters with a schema; the first problem is a 400 naming the parameter. */
function query<T extends z.ZodType>(c: Context, schema: T): z.infer<T> {
  const parsed = schema.safeParse(c.req.query());
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const param = String(issue.path[0] ?? "query");
  throw new ApiError("invalid_parameter", `Invalid query parameter '${param}': ${issue.message}.`, {
    param,
  });
}

/** A page of a list, an unknown `starting_after` refused as the report refuses it. */
async function paged<T>(page: Promise<T>): Promise<T> {
  try {
    return await page;
  } catch (error) {
    if (!(error instanceof UnknownCursorError)) throw error;
    throw new ApiError(
      "invalid_parameter",
      "Unknown cursor for this list: pass the next_cursor of its previous page.",
      { param: "starting_after" },
    );
  }
}

const pageQuery = {
  // Digits only: a number's other spellings (1e1, 0x10, " 5") are not a page size anyone means.
  limit: z.string().regex(/^\d{1,6}$/, "a whole number").transform(Number)
    .pipe(z.number().min(1).max(MAX_PAGE_LIMIT)).default(DEFAULT_PAGE_LIMIT),
  starting_after: z.string().min(1).max(200).optional(),
};

/**
 * A report's cursor is its last row's group behind `g:`: an end user's name of up to 256
 * characters, or a model id as long as the catalog has it; longer than the lists' cursors, which
 * are record ids. It is only compared with the report's rows, never made a storage key.
 */
const reportCursorQuery = z.string().min(1).max(1_000).optional();

const usageFilterQuery = {
  user: z.string().min(1).max(256).optional(),
  key_id: z.string().min(1).max(100).optional(),
  model: z.string().min(1).max(200).optional(),
};

const DAY = /^\d{4}-\d{2}-\d{2}$/;
/**
 * A day that exists: Date.parse takes 2026-02-31 (as March 3), so the parsed day must come back as
 * the same string.
 */
function isCalendarDay(d: string): boolean {
  const time = Date.parse(`${d}T00:00:00Z`);
  return !Number.isNaN(time) && new Date(time).toISOString().slice(0, 10) === d;
}

const day = z.string().regex(DAY, "a UTC day as YYYY-MM-DD").refine(
  isCalendarDay,
  "not a calendar day",
).refine(
  // No usage is older than this service; a day before 1970 has no usage id to start a range at.
  (d) => d >= FIRST_REPORT_DAY,
  `a day from ${FIRST_REPORT_DAY} to 9999-12-31`,
);

const capAmount = z.string().regex(/^\d{1,9}(\.\d{1,6})?$/, 'a USD amount such as "5.00"')
  .transform((v) => parseUsd(v)).refine((v) => v > 0, "must be more than 0").nullable()
  .optional();

/** `{total, daily, monthly}` in USD; null or absent: no such cap. */
const CapsBody = z.object({ total: capAmount, daily: capAmount, monthly: capAmount }).strict();

const NewKeyBody = z.object({
  // A lone surrogate (JSON's `"\ud800"`) is no text: it would be shown as U+FFFD everywhere.
  name: z.string().trim().min(1).max(MAX_KEY_NAME_CHARS).refine(
    (name) => name.isWellFormed(),
    "must be Unicode text, without a lone surrogate",
  ),
  spend_cap: CapsBody.optional(),
}).strict();

function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new ApiError("invalid_json", "The request body must be a JSON object.");
  }
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  if (issue.code === "unrecognized_keys") {
    const field = [...issue.path, issue.keys[0].slice(0, 100)].join(".");
    throw new ApiError("invalid_parameter", `Unknown field '${field}'.`, { param: field });
  }
  const param = issue.path.join(".");
  const missing = issue.code === "invalid_type" &&
    (body as Record<string, unknown>)[String(issue.path[0])] === undefined;
  throw new ApiError(
    missing ? "missing_parameter" : "invalid_parameter",
    missing
      ? `Missing required field '${param}'.`
      : `Invalid value for '${param}': ${issue.message}.`,
    { param },
  );
}

/** `Authorization: Bearer tbm_…`: the owner the management key acts for. */
function requireManagementKey(kv: Deno.Kv): MiddlewareHandler<ManagementEnv> {
  return async (c, next) => {
    const token = bearerToken(c);
    const entry = token === null ? null : await authenticateManagementKey(kv, token);
    if (!entry) {
      throw new ApiError(
        "invalid_management_key",
        token !== null
          ? "Invalid management key: it is malformed, unknown or revoked."
          : "Missing management key. Send 'Authorization: Bearer <MANAGEMENT_KEY>'.",
      );
    }
    c.set("manager", { ownerId: entry.ownerId, keyId: entry.keyId });
    await next();
  };
}

/** The path's app, when it is the owner's; another owner's app and no app are the same 404. */
function ownedApp(kv: Deno.Kv): MiddlewareHandler<ManagementEnv> {
  return async (c, next) => {
    const appId = c.req.param("app_id") ?? "";
    let app: AppRecord | null = null;
    try {
      app = await getApp(kv, appId);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
    if (!app || app.ownerId !== c.get("manager").ownerId) {
      throw new ApiError("resource_not_found", `No app '${appId.slice(0, 64)}'.`, {
        param: "app_id",
      });
    }
    c.set("app", app);
    await next();
  };
}

/** Blanks the raw key of a key-creation answer before it is kept for replays. */
function withoutSecret(body: Uint8Array): Uint8Array {
  const json = JSON.parse(new TextDecoder().decode(body));
  if (typeof json === "object" && json && "api_key" in json) json.api_key = null;
  return new TextEncoder().encode(JSON.stringify(json));
}

/** /v1/management: an owner's apps, keys, usage and ledger, for apps that resell AI. */
export function managementRoutes(
  deps: {
    kv: Deno.Kv;
    publicUrl: string;
    idempotencyStore: IdempotencyStore;
    log: Logger;
    keyBound: KeyIssueBound;
    /** Requests a minute of each owner's management keys, together. */
    requestsPerMinute: number;
    now: () => number;
  },
) {
  const { kv, publicUrl } = deps;
  const r = new Hono<ManagementEnv>();
  const ownerIdempotency = (
    options: { recordedBody?: (b: Uint8Array) => Uint8Array; bodyless?: boolean } = {},
  ) =>
    idempotency(deps.idempotencyStore, {
      scope: (c) => `owner:${c.get("manager").ownerId}`,
      log: deps.log,
      ...options,
    });
  const body = jsonBody;

  r.use(
    "*",
    requireManagementKey(kv),
    managementRateLimit(kv, deps.requestsPerMinute, deps.now),
    requireSupportedVersion,
    bodyLimit(MAX_BODY_BYTES, apiBodyRefusal, { readsJson: true }),
  );
  // Also matches /apps/:app_id itself.
  r.use("/apps/:app_id/*", ownedApp(kv));

  r.get("/apps", async (c) => {
    const q = query(c, z.object(pageQuery));
    const page = await paged(pageOwnerApps(kv, c.get("manager").ownerId, {
      limit: q.limit,
      startingAfter: q.starting_after,
    }));
    const uncharged = await Promise.all(page.data.map(({ app }) => unchargedOf(kv, app.id)));
    return c.json(
      list(page, ({ app, wallet }, i) => appObject(app, wallet, uncharged[i], publicUrl)),
    );
  });

  r.get("/apps/:app_id", async (c) => {
    const app = c.get("app");
    const [wallet, uncharged] = await Promise.all([getWallet(kv, app.id), unchargedOf(kv, app.id)]);
    return c.json(appObject(app, wallet, uncharged, publicUrl));
  });

  r.get("/apps/:app_id/keys", async (c) => {
    const q = query(c, z.object(pageQuery));
    const appId = c.get("app").id;
    const [page, caps] = await Promise.all([
      paged(pageAppKeys(kv, appId, { limit: q.limit, startingAfter: q.starting_after })),
      getSpendCaps(kv, appId),
    ]);
    return c.json(list(page, (k) => keyObject(k, caps)));
  });

  r.post("/apps/:app_id/keys", ownerIdempotency({ recordedBody: withoutSecret }), async (c) => {
    const input = parseBody(NewKeyBody, await body(c));
    const appId = c.get("app").id;
    let issued, caps;
    try {
      // Issued and capped in one commit: a key asked for with a cap is never live without it.
      ({ issued, caps } = input.spend_cap
        ? await issueKeyWithCaps(kv, appId, input.name, deps.keyBound, input.spend_cap)
        : { issued: await issueKey(kv, appId, input.name, deps.keyBound), caps: null });
    } catch (error) {
      if (error instanceof KeyLimitError) {
        throw new ApiError("api_key_limit_reached", error.message);
      }
      if (!(error instanceof KeyCapNotStoredError)) throw error;
      deps.log({
        level: "error",
        requestId: c.get("requestId"),
        event: "key_cap_not_stored",
        appId,
        error: String(error.cause),
      });
      throw new ApiError(
        "internal_error",
        "The key was not issued: its spend cap could not be stored. Nothing was created; retry.",
      );
    }
    caps ??= await getSpendCaps(kv, appId);
    return c.json({ ...keyObject(issued.record, caps), api_key: issued.apiKey }, 201);
  });

  r.post("/apps/:app_id/keys/:key_id/revoke", ownerIdempotency({ bodyless: true }), async (c) => {
    const keyId = c.req.param("key_id");
    const key = await getAppKey(kv, c.get("app").id, keyId);
    if (!key) {
      throw new ApiError("resource_not_found", `No key '${keyId.slice(0, 64)}' in this app.`, {
        param: "key_id",
      });
    }
    const revoked = { ...await revokeKey(kv, key.id), lastUsedAt: key.lastUsedAt };
    return c.json(keyObject(revoked, await getSpendCaps(kv, c.get("app").id)));
  });

  r.post("/apps/:app_id/keys/:key_id/spend_cap", ownerIdempotency(), async (c) => {
    const appId = c.get("app").id;
    const keyId = c.req.param("key_id");
    const input = parseBody(CapsBody, await body(c));
    const key = await getAppKey(kv, appId, keyId);
    const notLive = () =>
      new ApiError("resource_not_found", `No live key '${keyId.slice(0, 64)}' in this app.`, {
        param: "key_id",
      });
    // A revoked key can spend nothing more: a cap on it would only ever be shown, never used (the
    // dashboard refuses it alike).
    if (!key || key.revokedAt !== null) throw notLive();
    // A rotation or revocation committed since the look above: the write refuses the key.
    const caps = await setSpendCaps(kv, appId, { keyId }, input).catch((error) => {
      throw error instanceof NotFoundError ? notLive() : error;
    });
    return c.json(keyObject(key, caps));
  });

  r.get("/apps/:app_id/end_user_spend_cap", async (c) => {
    const caps = await getSpendCaps(kv, c.get("app").id);
    return c.json({ object: "end_user_spend_cap", spend_cap: capsObject(caps.endUser) });
  });

  r.post("/apps/:app_id/end_user_spend_cap", ownerIdempotency(), async (c) => {
    const input = parseBody(CapsBody, await body(c));
    const caps = await setSpendCaps(kv, c.get("app").id, { endUser: true }, input);
    return c.json({ object: "end_user_spend_cap", spend_cap: capsObject(caps.endUser) });
  });

  r.get("/apps/:app_id/usage", async (c) => {
    const q = query(c, z.object({ ...pageQuery, ...usageFilterQuery }));
    const page = await paged(pageUsage(kv, c.get("app").id, {
      limit: q.limit,
      startingAfter: q.starting_after,
    }, { user: q.user, keyId: q.key_id, model: q.model }));
    return c.json(list(page, usageObject));
  });

  r.get("/apps/:app_id/usage/report", async (c) => {
    const today = new Date().toISOString().slice(0, 10);
    const q = query(
      c,
      z.object({
        group_by: z.enum(["day", "model", "key", "user"]),
        from: day.optional(),
        to: day.optional(),
        limit: pageQuery.limit,
        starting_after: reportCursorQuery,
        ...usageFilterQuery,
      }),
    );
    const to = q.to ?? today;
    const from = q.from ??
      new Date(Date.parse(`${to}T00:00:00Z`) - 29 * 86_400_000).toISOString().slice(0, 10);
    const span = (Date.parse(to) - Date.parse(from)) / 86_400_000 + 1;
    if (span < 1 || span > MAX_REPORT_DAYS) {
      throw new ApiError(
        "invalid_parameter",
        `'from' must not be after 'to', and a report covers at most ${MAX_REPORT_DAYS} days.`,
        { param: "from" },
      );
    }
    const rows = await usageReport(kv, c.get("app").id, {
      groupBy: q.group_by,
      from,
      to,
      filter: { user: q.user, keyId: q.key_id, model: q.model },
    });
    const start = q.starting_after === undefined
      ? 0
      : rows.findIndex((row) => reportCursor(row) === q.starting_after) + 1;
    if (start === 0 && q.starting_after !== undefined) {
      // A group that no longer exists cannot be: groups only grow. The cursor is not ours.
      throw new ApiError("invalid_parameter", "Unknown cursor for this report.", {
        param: "starting_after",
      });
    }
    const data = rows.slice(start, start + q.limit);
    const hasMore = start + q.limit < rows.length;
    return c.json({
      object: "list",
      group_by: q.group_by,
      from,
      to,
      data: data.map(reportRowObject),
      has_more: hasMore,
      next_cursor: hasMore ? reportCursor(data[data.length - 1]) : null,
    });
  });

  r.get("/apps/:app_id/ledger", async (c) => {
    const q = query(c, z.object(pageQuery));
    const page = await paged(pageLedger(kv, c.get("app").id, {
      limit: q.limit,
      startingAfter: q.starting_after,
    }));
    return c.json(list(page, ledgerObject));
  });

  r.all("*", (c) => {
    throw new ApiError("not_found", `No endpoint ${c.req.method} ${c.req.path}.`);
  });
  return r;
}

/** A report row's cursor: its group, which is unique in the report (`null` for no end user). */
function reportCursor(row: ReportRow): string {
  return row.group === null ? "~none" : `g:${row.group}`;
}
