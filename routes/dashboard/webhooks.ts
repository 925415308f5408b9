import type { Context, Hono } from "hono";
import type { AppRecord } from "@/lib/db.ts";
import { parseUsd, within } from "@/lib/core/mod.ts";
import {
  deleteWebhookSettings,
  getWebhookSettings,
  listWebhookEvents,
  saveWebhookSettings,
  sendTestEvent,
  TestEventLimitError,
  validWebhookUrl,
  type WebhookDeliverer,
  WebhookUrlError,
  type WebhookWatcher,
} from "@/lib/webhooks/mod.ts";
import { takeReveal, webhookSecretRevealOf } from "@/lib/accounts/mod.ts";
import type { PageEnv } from "@/routes/session.ts";
import { type EndpointRefusal, webhooksPage } from "./pages/webhooks.tsx";
import { redirectToReveal } from "./reveals.ts";
import { redirectSaved, takeSaved } from "./saved_notice.ts";

type WebhooksEnv = { Variables: PageEnv["Variables"] & { app: AppRecord } };

/** Each is up to 12 attempts at the owner's endpoint: a few a minute is all a check needs. */
export const TEST_EVENTS_PER_MINUTE = 5;
/** How long the test button waits for its event's delivery before showing it queued. */
export const TEST_EVENT_WAIT_MS = 2_000;

export interface WebhookRouteDeps {
  kv: Deno.Kv;
  watcher: WebhookWatcher;
  deliverer: WebhookDeliverer;
  /** Plain http to loopback endpoints (development and tests). */
  allowLoopback: boolean;
}

/** /dashboard/apps/:appId/webhooks: added to the dashboard's router, behind its owner checks. */
export function addWebhookRoutes(r: Hono<WebhooksEnv>, deps: WebhookRouteDeps) {
  const { kv } = deps;
  const session = (c: Context<WebhooksEnv>) => c.get("session")!;
  const path = (app: AppRecord) => `/dashboard/apps/${app.id}/webhooks`;
  const view = async (app: AppRecord) => ({
    app,
    settings: await getWebhookSettings(kv, app.id),
    events: await listWebhookEvents(kv, app.id),
  });

  r.get("/apps/:appId/webhooks", async (c) => {
    const saved = takeSaved(c);
    return c.html(webhooksPage(session(c), { ...await view(c.get("app")), saved }));
  });

  r.get("/apps/:appId/webhooks/secret/:revealId", async (c) => {
    const app = c.get("app");
    const revealId = c.req.param("revealId");
    const revealed = await takeReveal(kv, session(c).id, revealId, webhookSecretRevealOf(app.id));
    return c.html(
      webhooksPage(session(c), { ...await view(app), secret: revealed ?? "already_shown" }),
    );
  });

  r.post("/apps/:appId/webhooks", async (c) => {
    const app = c.get("app");
    const form = c.get("form");
    const rawUrl = form.url ?? "";
    const typedThreshold = form.threshold ?? "";
    const rawThreshold = typedThreshold.trim();
    const refuse = async (field: EndpointRefusal["field"], error: string) =>
      c.html(
        webhooksPage(session(c), {
          ...await view(app),
          refused: { error, field, url: rawUrl, threshold: typedThreshold },
        }),
        400,
      );
    let url: string, threshold: number | null;
    try {
      url = validWebhookUrl(rawUrl, { allowLoopback: deps.allowLoopback });
    } catch (error) {
      if (!(error instanceof WebhookUrlError)) throw error;
      return await refuse("url", error.message);
    }
    try {
      // An empty field is no threshold; a "$" alone is an amount left out, not an empty field.
      threshold = rawThreshold === "" ? null : parseUsd(rawThreshold.replace(/^\$/, ""));
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      return await refuse(
        "threshold",
        "The threshold is an amount in USD with at most 6 decimals, such as 5.00, or empty.",
      );
    }
    const saved = await saveWebhookSettings(kv, app.id, { url, lowBalanceThreshold: threshold });
    deps.watcher.forget(app.id);
    // The balance may already be below the new threshold: that is a crossing too.
    await deps.watcher.observe(app.id);
    if (!saved.newSecret) return redirectSaved(c, path(app), "webhook", "endpoint");
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "new_webhook_secret",
      appId: app.id,
      secret: saved.newSecret,
    });
  });

  r.post("/apps/:appId/webhooks/rotate-secret", async (c) => {
    const app = c.get("app");
    const current = await getWebhookSettings(kv, app.id);
    if (!current) return c.redirect(path(app), 303);
    const saved = await saveWebhookSettings(kv, app.id, {
      url: current.url,
      lowBalanceThreshold: current.lowBalanceThreshold,
      rotateSecret: true,
    });
    return await redirectToReveal(c, kv, session(c).id, {
      kind: "replaced_webhook_secret",
      appId: app.id,
      secret: saved.newSecret!,
    });
  });

  r.post("/apps/:appId/webhooks/delete", async (c) => {
    const app = c.get("app");
    await deleteWebhookSettings(kv, app.id);
    return redirectSaved(c, path(app), "webhook-removed", "endpoint");
  });

  /**
   * Queues a test event and delivers what is due at once, so the page shows the result; but the
   * owner waits at most TEST_EVENT_WAIT_MS for it (a slow endpoint takes its whole timeout, and a
   * round already running may be busy with other apps' endpoints): the page then shows it queued.
   */
  r.post("/apps/:appId/webhooks/test", async (c) => {
    const app = c.get("app");
    if (await getWebhookSettings(kv, app.id)) {
      try {
        await sendTestEvent(kv, app.id, Date.now(), { perMinute: TEST_EVENTS_PER_MINUTE });
      } catch (error) {
        if (!(error instanceof TestEventLimitError)) throw error;
        const message =
          `At most ${error.perMinute} test events a minute: the next can be sent in ${error.retryAfterSeconds} s. The ones already sent are listed below.`;
        c.header("retry-after", String(error.retryAfterSeconds));
        return c.html(webhooksPage(session(c), { ...await view(app), testRefused: message }), 429);
      }
      await within(deps.deliverer.kick(), TEST_EVENT_WAIT_MS);
    }
    return c.redirect(path(app), 303);
  });
}
