/**
 * `deno task soak` (second part): every paid path at once, with the chaos of scripts/soak.ts, and a
 * per-request check of the money. Concurrent clients send OpenAI-kind and Anthropic-kind chat
 * (thinking, tool calls), the Responses API (streamed or not, `store`, `previous_response_id`),
 * embeddings, Idempotency-Key retries (some after the key was rotated), gzip bodies and malformed
 * ones, from apps with key and end-user spend caps that are lowered mid-run, to two in-process
 * instances and one child process (`main.ts`) on one KV file, with WALLET_SLICES=on. The upstreams
 * fail a share of calls and cut a share of streams; clients disconnect at random moments; wallets
 * run dry and are topped up meanwhile. With SOAK_KILL=1 the child is SIGKILLed mid-run and
 * restarted on the same KV file, whose sweeper must release what it held.
 *
 * It ends by settling everything and checks, per app: spent equals the sum of its usage records;
 * every `Tollbooth-Request-Cost` and `usage.cost` a client saw equals the usage record of that
 * request id; no capped key or end user spent past its cap; nothing stays reserved; the audit is
 * clean; no 500 was served or logged. Exits non-zero on any discrepancy, printing it.
 *
 * SOAK_PATHS_SECONDS (default 25), SOAK_CLIENTS (default 24), SOAK_KILL=1 (the SIGKILL above),
 * SOAK_VERBOSE=1 (the 400s and the records behind a discrepancy on stderr). To widen the windows
 * of the cap checks: SOAK_SLOW_FACTOR (default 1) multiplies the upstreams' pauses between chunks,
 * SOAK_LOWER_EVERY_MS (default: once, at 40% of the run) lowers the caps again that often, each
 * time to SOAK_CAP_MARGIN (default 100000) micro-USD above what a scope has spent, never raising
 * one, and SOAK_ROTATE_MS (default 2000) is the pace of key rotations. SOAK_OPERATOR=1 adds an
 * operator at the command line meanwhile, each command a process of its own on the same KV file
 * (every SOAK_OPERATOR_MS, default 700): `admin credit`, `admin debit --reference` (sometimes two
 * at once of one reference), `admin credit --reversal-of` (sometimes two at once, or one racing
 * its debit) and a debit past what was credited, which must be refused; it checks that each
 * reference was taken at most once and given back at most once, never more than was taken, and
 * that no command failed otherwise. SOAK_LOCK_MS=N adds a process that takes the KV file's write
 * lock for up to N ms at a time, again and again (a backup, a vacuum, a long admin command).
 */
import {
  auditWallets,
  creditedOf,
  rotateKey,
  setSpendCaps,
  sweepExpiredReservations,
} from "@/lib/billing/mod.ts";
import {
  type CreditMarkerRecord,
  keys,
  type LedgerEntry,
  type SpendCapsRecord,
  type SpendCounter,
  type UsageRecord,
  type WalletRecord,
} from "@/lib/db.ts";
import { causedByBusyKv, formatUsd, NotFoundError, parseUsd } from "@/lib/core/mod.ts";
import { operatorTakeBack } from "@/lib/payments/mod.ts";
import type { CatalogFile } from "@/lib/catalog/catalog.ts";
import { startFakeOpenAi } from "@/tests/fake_openai.ts";
import { type AnthropicAnswer, startAnthropicUpstream } from "@/tests/fakes/anthropic_upstream.ts";
import { serveLoopback, startService } from "@/tests/helpers.ts";

const SECONDS = Number(Deno.env.get("SOAK_PATHS_SECONDS") ?? 25);
const CLIENTS = Number(Deno.env.get("SOAK_CLIENTS") ?? 24);
const KILL = Deno.env.get("SOAK_KILL") === "1";
const CHILD_PORT = Number(Deno.env.get("SOAK_CHILD_PORT") ?? 0);
const APPS = 6;
const USERS = ["u1", "u2", "u3"];
const ROOT = new URL("../", import.meta.url).pathname;
const SLOW_FACTOR = Number(Deno.env.get("SOAK_SLOW_FACTOR") ?? 1);
const LOWER_EVERY_MS = Number(Deno.env.get("SOAK_LOWER_EVERY_MS") ?? 0);
const CAP_MARGIN = Number(Deno.env.get("SOAK_CAP_MARGIN") ?? 100_000);
const ROTATE_MS = Number(Deno.env.get("SOAK_ROTATE_MS") ?? 2_000);
const OPERATOR = Deno.env.get("SOAK_OPERATOR") === "1";
const OPERATOR_MS = Number(Deno.env.get("SOAK_OPERATOR_MS") ?? 700);
const LOCK_MS = Number(Deno.env.get("SOAK_LOCK_MS") ?? 0);

const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)];
const chance = (p: number) => Math.random() < p;

const dir = await Deno.makeTempDir({ prefix: "tollbooth-soak-paths-" });
const kvPath = `${dir}/soak.sqlite3`;
const openai = startFakeOpenAi({ chaos: { failShare: 0.1, cutShare: 0.15 }, keepBodies: false });

/** Claude's answers: thinking, tool calls, text; a share of failures, cut streams, error events. */
function claudeAnswer(): AnthropicAnswer {
  const roll = Math.random();
  const pace = { chunkDelayMs: Math.floor(Math.random() * 20 * SLOW_FACTOR) };
  if (roll < 0.06) return { status: pick([500, 529, 429]) };
  if (roll < 0.12) return { text: "cut short here and there", cutAfterEvents: 3, ...pace };
  if (roll < 0.16) return { text: "an error arrives soon", errorEventAfter: 4, ...pace };
  if (roll < 0.45) {
    return {
      content: [
        { type: "thinking", thinking: "Which city? Paris, then the weather there." },
        { type: "tool_use", name: "weather", input: { city: "Paris" } },
      ],
      ...pace,
    };
  }
  return { text: "Sunny in Paris, around twenty degrees.", ...pace };
}
const claude = startAnthropicUpstream({ defaultAnswer: claudeAnswer });

const model = (id: string, provider: string, upstream: string, input: string, output: string) => ({
  id,
  provider,
  upstream_model: upstream,
  input_usd_per_mtok: input,
  output_usd_per_mtok: output,
  context_tokens: 200_000,
  max_output_tokens: 16_000,
});
const catalogFile: CatalogFile = {
  providers: {
    tollbooth: { kind: "simulator" },
    fake: {
      kind: "openai",
      base_url: openai.url,
      api_key_env: "FAKE_OPENAI_KEY",
      timeout_ms: 2000,
    },
    ant: { kind: "anthropic", base_url: claude.url, api_key_env: "ANT_KEY", timeout_ms: 2000 },
  },
  models: [
    model("tollbooth/lorem", "tollbooth", "lorem", "0.50", "1.50"),
    model("fake/gpt", "fake", "gpt-test", "2.00", "8.00"),
    model("ant/claude", "ant", "claude-sonnet-4-5", "3.00", "15.00"),
    {
      id: "tollbooth/embed",
      type: "embedding" as const,
      provider: "tollbooth",
      upstream_model: "embed",
      input_usd_per_mtok: "0.02",
      context_tokens: 8192,
    },
  ],
};
const modelsFile = `${dir}/models.json`;
await Deno.writeTextFile(modelsFile, JSON.stringify(catalogFile));
const env = {
  ANT_KEY: claude.apiKey,
  FAKE_OPENAI_KEY: "sk-fake-upstream",
  RESERVATION_TTL_SECONDS: "3",
  WALLET_SLICES: "on",
  RATE_LIMIT_RPM: "100000",
  RATE_LIMIT_TPM: "1000000000",
};

const logEvents: Record<string, number> = {};
const VERBOSE = Deno.env.get("SOAK_VERBOSE") !== undefined;
const logByRequest = new Map<string, Record<string, unknown>>();
const rotationLog: { appId: string; from: string; to: string; at: number }[] = [];
const unhandled: Record<string, number> = {};
const instances = await Promise.all([0, 1].map(() =>
  startService({
    catalogFile,
    kvPath,
    env,
    log: (fields) => {
      if (VERBOSE && fields.requestId) logByRequest.set(String(fields.requestId), fields);
      const event = String(fields.event ?? fields.errorCode ?? "request");
      logEvents[event] = (logEvents[event] ?? 0) + 1;
      if (fields.event === "unhandled_error" || fields.status === 500) {
        const message = String(fields.error ?? fields.errorCode).slice(0, 160);
        unhandled[message] = (unhandled[message] ?? 0) + 1;
      }
    },
  })
));
const service = instances[0];
const servers = instances.map((s) => serveLoopback(s.handle));

/** A real process on the same KV file: the one SOAK_KILL=1 kills and restarts. */
interface Child {
  url: string;
  process: Deno.ChildProcess;
  lines: string[];
}
async function startChild(): Promise<Child> {
  const process = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "main.ts"],
    cwd: ROOT,
    env: {
      ...env,
      KV_PATH: kvPath,
      MODELS_FILE: modelsFile,
      PORT: String(CHILD_PORT),
      PUBLIC_URL: "http://tollbooth.test",
      SERVE_WORKERS: "1",
      NO_COLOR: "1",
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const listening = Promise.withResolvers<string>();
  (async () => {
    let buffer = "";
    for await (const text of process.stdout.pipeThrough(new TextDecoderStream())) {
      buffer += text;
      const parts = buffer.split("\n");
      buffer = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (line.includes('"listening"')) {
          listening.resolve(`http://127.0.0.1:${JSON.parse(line).port}`);
        }
        let fields: Record<string, unknown> = {};
        try {
          fields = JSON.parse(line);
        } catch {
          // not a log line
        }
        if (fields.event === "unhandled_error" || fields.status === 500) {
          console.error(`child: ${line}`);
          unhandled[`child: ${line.slice(0, 160)}`] =
            (unhandled[`child: ${line.slice(0, 160)}`] ?? 0) + 1;
        }
      }
    }
  })();
  (async () => {
    for await (const _ of process.stderr) { /* drained */ }
  })();
  process.status.then((s) => listening.reject(new Error(`child exited (${s.code})`)));
  return { url: await listening.promise, process, lines };
}
let child: Child | null = await startChild();
const targets = () => [...servers.map((s) => s.url), ...(child ? [child.url] : [])];

interface SoakApp {
  appId: string;
  apiKey: string;
  keyId: string;
  /** The key id the key's cap counts on (the first key's, through rotations). */
  counterKeyId: string;
  keyCap: number | null;
  userCap: number | null;
  /** After a cap was lowered: the counters right after, and the cap then. */
  lowered: {
    scope: string;
    id: string;
    cap: number;
    totalThen: number;
    heldThen: number;
    at: number;
  }[];
  lastResponseId?: string;
}
const apps: SoakApp[] = [];
for (let i = 0; i < APPS; i++) {
  const created = await service.newApp(`soak paths ${i}`);
  const app: SoakApp = {
    ...created,
    counterKeyId: created.keyId,
    keyCap: i % 3 === 0 ? 1_500_000 : null,
    userCap: i % 3 === 1 ? 400_000 : null,
    lowered: [],
  };
  if (app.keyCap !== null) {
    await setSpendCaps(service.kv, app.appId, { keyId: app.keyId }, { total: app.keyCap });
  }
  if (app.userCap !== null) {
    await setSpendCaps(service.kv, app.appId, { endUser: true }, { total: app.userCap });
  }
  apps.push(app);
}

const results: Record<string, number> = {};
const tally = (kind: string) => (results[kind] = (results[kind] ?? 0) + 1);
const problems: string[] = [];
/** Every cost a client saw, by the request id it belongs to. */
const seenCosts: {
  requestId: string;
  cost: number;
  where: string;
  url: string;
  /** When the request was sent, and when its answer was read. */
  sentAt: number;
  at: number;
}[] = [];
/** The killed child's address and when it died: its last charges may be lost (documented). */
const killedAt: { url: string; at: number } = { url: "", at: 0 };
/** Idempotency keys whose first request was charged (its request id), to prove retries replay. */
const chargedByIdempotencyKey = new Map<string, string[]>();
let requests = 0;

const BAD_BODIES = [
  "{",
  "[]",
  '{"model":"fake/gpt"}',
  '{"model":"ant/claude","messages":[{"role":"robot","content":"x"}]}',
  '{"model":"tollbooth/embed","input":[]}',
  '{"model":"fake/gpt","input":"x","previous_response_id":"resp_nope"}',
];

async function gzip(text: string): Promise<Blob> {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return await new Response(stream).blob();
}

const tools = [{
  type: "function",
  function: {
    name: "weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
}];

function words() {
  return Array.from({ length: 3 + Math.floor(Math.random() * 30) }, (_, i) => `w${i}`).join(" ");
}

/** One request's path and body; `stream` says how to read the answer. */
function requestFor(
  app: SoakApp,
): { path: string; body: Record<string, unknown>; stream: boolean } {
  const user = chance(0.7) ? pick(USERS) : undefined;
  const stream = chance(0.5);
  const kind = pick(["chat", "chat", "claude", "claude", "responses", "responses", "embeddings"]);
  const max = pick([50, 500, 4000]);
  if (kind === "embeddings") {
    return {
      path: "/v1/embeddings",
      body: { model: "tollbooth/embed", input: pick([words(), [words(), words()]]), user },
      stream: false,
    };
  }
  if (kind === "responses") {
    const body: Record<string, unknown> = {
      model: pick(["fake/gpt", "ant/claude", "tollbooth/lorem"]),
      input: `slow:${Math.floor(Math.random() * 5 * SLOW_FACTOR)} ${words()}`,
      stream,
      store: chance(0.6),
      max_output_tokens: max,
      user,
    };
    if (app.lastResponseId && chance(0.4)) body.previous_response_id = app.lastResponseId;
    if (body.model === "ant/claude" && max > 1024 && chance(0.5)) {
      body.reasoning = { effort: "low" };
    }
    return { path: "/v1/responses", body, stream };
  }
  const body: Record<string, unknown> = {
    model: kind === "claude" ? "ant/claude" : pick(["fake/gpt", "tollbooth/lorem"]),
    messages: [{
      role: "user",
      content: `slow:${Math.floor(Math.random() * 5 * SLOW_FACTOR)} ${words()}`,
    }],
    stream,
    max_tokens: max,
    user,
  };
  if (stream) body.stream_options = { include_usage: true };
  if (kind === "claude") {
    body.tools = tools;
    if (max > 1024 && chance(0.5)) body.reasoning_effort = "low";
  }
  return { path: "/v1/chat/completions", body, stream };
}

/** The cost an answer's body reports (`usage.cost`, streamed or not), if any. */
function costsInBody(text: string, stream: boolean): number[] {
  const out: number[] = [];
  const fromObject = (o: Record<string, unknown> | undefined) => {
    const usage = (o?.usage ?? (o?.response as Record<string, unknown> | undefined)?.usage) as
      | { cost?: string }
      | undefined;
    if (usage?.cost !== undefined) out.push(parseUsd(usage.cost));
  };
  if (!stream) {
    try {
      fromObject(JSON.parse(text));
    } catch {
      // not JSON: counted by the caller
    }
    return out;
  }
  for (const block of text.split("\n\n")) {
    const data = block.split("\n").find((l) => l.startsWith("data: "))?.slice(6);
    if (!data || data === "[DONE]") continue;
    try {
      fromObject(JSON.parse(data));
    } catch {
      // a partial event of a cut stream
    }
  }
  return out;
}

async function send(
  url: string,
  app: SoakApp,
  path: string,
  raw: string,
  headers: Record<string, string>,
  signal: AbortSignal,
) {
  const compressed = chance(0.2);
  return await fetch(`${url}${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${app.apiKey}`,
      "content-type": "application/json",
      ...(compressed ? { "content-encoding": "gzip" } : {}),
      ...headers,
    },
    body: compressed ? await gzip(raw) : raw,
    signal,
  });
}

/** Sends one request and records what its client saw: status, request id, every cost shown. */
async function oneRequest(app: SoakApp, attempt: {
  path: string;
  raw: string;
  stream: boolean;
  idempotencyKey?: string;
  disconnect: boolean;
}) {
  const controller = new AbortController();
  const timer = attempt.disconnect
    ? setTimeout(() => controller.abort(), Math.random() * 400)
    : undefined;
  requests++;
  const headers: Record<string, string> = attempt.idempotencyKey
    ? { "idempotency-key": attempt.idempotencyKey }
    : {};
  try {
    const url = pick(targets());
    const sentAt = Date.now();
    const res = await send(url, app, attempt.path, attempt.raw, headers, controller.signal);
    const text = await res.text();
    const replayed = res.headers.get("idempotent-replayed") === "true";
    const requestId = replayed
      ? res.headers.get("tollbooth-original-request-id")!
      : res.headers.get("tollbooth-request-id")!;
    const header = res.headers.get("tollbooth-request-cost");
    const where = `${attempt.path} ${res.status}${replayed ? " replay" : ""}`;
    if (header !== null && !(attempt.stream && res.status === 200)) {
      seenCosts.push({
        requestId,
        cost: parseUsd(header),
        where: `${where} header`,
        url,
        sentAt,
        at: Date.now(),
      });
    }
    if (res.status === 200 || res.status === 502) {
      for (const cost of costsInBody(text, attempt.stream && res.status === 200)) {
        seenCosts.push({ requestId, cost, where: `${where} body`, url, sentAt, at: Date.now() });
      }
    }
    if (attempt.idempotencyKey && !replayed && (res.status === 200 || header !== null)) {
      const ids = chargedByIdempotencyKey.get(attempt.idempotencyKey) ?? [];
      ids.push(requestId);
      chargedByIdempotencyKey.set(attempt.idempotencyKey, ids);
    }
    if (res.status === 500) problems.push(`500 on ${attempt.path}: ${text.slice(0, 200)}`);
    if (res.status !== 200) {
      let code = "unknown";
      try {
        code = JSON.parse(text).error?.code ?? "unknown";
      } catch {
        // not JSON
      }
      tally(`${attempt.path} ${res.status} ${code}${replayed ? " (replay)" : ""}`);
      if (Deno.env.get("SOAK_VERBOSE") && res.status === 400) console.error(text.slice(0, 300));
      return res.status;
    }
    if (attempt.path === "/v1/responses" && !attempt.stream) {
      const id = JSON.parse(text).id;
      if (JSON.parse(attempt.raw).store) app.lastResponseId = id;
    }
    if (attempt.path === "/v1/responses" && attempt.stream) {
      const done = /"type":"response.completed".*?"id":"(resp_[0-9a-zA-Z]+)"/.exec(text);
      if (done && JSON.parse(attempt.raw).store) app.lastResponseId = done[1];
    }
    tally(`${attempt.path} 200${attempt.stream ? " stream" : ""}${replayed ? " (replay)" : ""}`);
    return 200;
  } catch {
    tally(attempt.disconnect ? "client disconnected" : "network error");
    return 0;
  } finally {
    clearTimeout(timer);
  }
}

async function oneClientTurn() {
  const app = pick(apps);
  if (chance(0.04)) {
    await oneRequest(app, {
      path: pick(["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]),
      raw: pick(BAD_BODIES),
      stream: false,
      disconnect: false,
    });
    return;
  }
  const { path, body, stream } = requestFor(app);
  const raw = JSON.stringify(body);
  if (!stream && chance(0.25)) {
    // A client that retries with an Idempotency-Key: the retries must replay, never charge again.
    const idempotencyKey = crypto.randomUUID();
    await oneRequest(app, { path, raw, stream, idempotencyKey, disconnect: chance(0.3) });
    for (let i = 0; i < 2; i++) {
      await oneRequest(app, { path, raw, stream, idempotencyKey, disconnect: false });
    }
    return;
  }
  await oneRequest(app, { path, raw, stream, disconnect: chance(0.15) });
}

const deadline = Date.now() + SECONDS * 1000;
const sweeper = setInterval(() => {
  const s = pick(instances);
  sweepExpiredReservations(s.kv, s.wallets).catch(() => tally("sweep failed"));
}, 750);
let toppedUp = 0;
const operator = setInterval(() => {
  const app = pick(apps);
  pick(instances).wallets.credit(app.appId, {
    amount: pick([1, 2, 5]) * 1_000_000,
    kind: "top_up",
    reason: "soak top-up",
    marker: `soak:${crypto.randomUUID()}`,
  }).then(() => toppedUp++, (error) => {
    if (LOCK_MS > 0 && causedByBusyKv(error)) tally("top-up refused: KV locked");
    else problems.push(`top-up failed: ${error}`);
  });
}, 1_500);
let rotations = 0;
/** Each app's rotation in flight: one at a time, as its key id is the one the next rotates. */
const rotating = new Map<SoakApp, Promise<void>>();
const rotator = setInterval(() => {
  // A rotation mid-run: the old secret's requests in flight settle; retries use the new one.
  const app = pick(apps);
  if (rotating.has(app)) return;
  rotating.set(
    app,
    (async () => {
      try {
        const from = app.keyId;
        const { issued } = await rotateKey(service.kv, app.keyId);
        rotationLog.push({ appId: app.appId, from, to: issued.record.id, at: Date.now() });
        app.apiKey = issued.apiKey;
        app.keyId = issued.record.id;
        rotations++;
      } catch (error) {
        // Refused while SOAK_LOCK_MS held the file past every try: nothing rotated.
        if (LOCK_MS > 0 && causedByBusyKv(error)) tally("rotation refused: KV locked");
        else problems.push(`rotation failed: ${error}`);
      } finally {
        rotating.delete(app);
      }
    })(),
  );
}, ROTATE_MS);
/** The operator's commands: what each ended with, and the references it took back. */
const operatorRuns: Record<string, number> = {};
const operatorReferences: { appId: string; reference: string }[] = [];
const operatorCommands = new Set<Promise<void>>();
async function admin(what: string, args: string[], refusal?: RegExp) {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/admin.ts", ...args],
    cwd: ROOT,
    env: { ...env, KV_PATH: kvPath, MODELS_FILE: modelsFile, NO_COLOR: "1" },
    stdin: "null",
  }).output();
  const err = new TextDecoder().decode(stderr).trim();
  const out = new TextDecoder().decode(stdout).trim();
  // Under SOAK_LOCK_MS a command may meet the lock held past its tries: it says so, nothing done.
  const refused = code === 1 &&
    (refusal?.test(err) || (LOCK_MS > 0 && /database is locked/.test(err)));
  operatorRuns[`${what} ${code === 0 ? "ok" : refused ? "refused" : `exit ${code}`}`] =
    (operatorRuns[`${what} ${code === 0 ? "ok" : refused ? "refused" : `exit ${code}`}`] ?? 0) + 1;
  if (code !== 0 && !refused) problems.push(`admin ${args.join(" ")}: exit ${code}: ${err}`);
  if (VERBOSE && code === 0) console.error(`admin ${what}: ${out.replaceAll(/\s+/g, " ")}`);
}
async function operatorTurn() {
  const app = pick(apps);
  const roll = Math.random();
  if (roll < 0.2) {
    await admin("credit", ["credit", "--app", app.appId, "--amount", "1", "--reason", "soak"]);
    return;
  }
  if (roll < 0.3) {
    // A typo: far more than any app was ever credited.
    await admin(
      "debit past credits",
      ["debit", "--app", app.appId, "--amount", "100000", "--reason", "soak typo"],
      /more than the wallet was credited/,
    );
    return;
  }
  if (roll < 0.4) {
    // Three debits at once of half what may still be taken back: no more than two may pass.
    const wallet = (await service.kv.get<WalletRecord>(keys.wallet(app.appId))).value!;
    const takeable = creditedOf(wallet) - (wallet.refunded ?? 0) - (wallet.owed ?? 0);
    if (takeable < 2) return;
    const amount = formatUsd(Math.floor(takeable / 2));
    await Promise.all([0, 1, 2].map(() =>
      admin(
        "debits at once",
        ["debit", "--app", app.appId, "--amount", amount, "--reason", "soak at once"],
        /more than the wallet was credited/,
      )
    ));
    return;
  }
  const reference = `${pick(["re", "dp"])}_soak${crypto.randomUUID().replaceAll("-", "")}`;
  operatorReferences.push({ appId: app.appId, reference });
  const debit = () =>
    admin("debit", [
      "debit",
      "--app",
      app.appId,
      "--amount",
      pick(["0.5", "1", "3", "5", "8"]),
      "--reason",
      "soak refund",
      "--reference",
      reference,
    ], /more than the wallet was credited/);
  const reverse = () =>
    admin(
      "reversal",
      ["credit", "--app", app.appId, "--reversal-of", reference, "--reason", "soak undone"],
      /nothing was taken back with the reference/,
    );
  const shape = Math.random();
  if (shape < 0.3) await Promise.all([debit(), debit()]);
  else if (shape < 0.5) await Promise.all([debit(), reverse()]);
  else await debit();
  if (chance(0.7)) {
    if (chance(0.4)) await Promise.all([reverse(), reverse()]);
    else await reverse();
  }
}
const operatorCli = OPERATOR
  ? setInterval(() => {
    // Each command is a process that first waits its turn at node_modules' lock: more at once
    // would pile up, starving the service of CPU rather than racing it.
    if (operatorCommands.size >= 3) return tally("operator turn skipped: 3 in flight");
    const turn = operatorTurn().catch((error) => {
      problems.push(`operator: ${error}`);
    });
    operatorCommands.add(turn);
    turn.finally(() => operatorCommands.delete(turn));
  }, OPERATOR_MS)
  : undefined;
/** Lowers each cap mid-run to just above what its scopes have spent now. */
const lowerCaps = async () => {
  const counterOf = async (app: SoakApp, scope: "key" | "user", id: string) =>
    (await service.kv.get<SpendCounter>(keys.spendCounter(app.appId, scope, id))).value;
  for (const app of apps) {
    const scope = app.keyCap !== null ? "key" : app.userCap !== null ? "user" : null;
    if (!scope) continue;
    const ids = scope === "key" ? [app.counterKeyId] : USERS;
    let highest = 0;
    for (const id of ids) {
      highest = Math.max(highest, (await counterOf(app, scope, id))?.total ?? 0);
    }
    // Never above the cap in force: the check below holds every scope to its first cap too.
    const cap = Math.min(highest + CAP_MARGIN, (scope === "key" ? app.keyCap : app.userCap)!);
    if (scope === "key") {
      // A rotation committed meanwhile refuses the old key id: the cap goes on its replacement.
      for (;;) {
        await rotating.get(app);
        try {
          await setSpendCaps(service.kv, app.appId, { keyId: app.keyId }, { total: cap });
          break;
        } catch (error) {
          if (LOCK_MS > 0 && causedByBusyKv(error)) {
            tally("cap set refused: KV locked: set again");
            continue;
          }
          if (!(error instanceof NotFoundError)) throw error;
          tally("cap set on a key rotated meanwhile: set again");
        }
      }
      app.keyCap = cap;
    } else {
      for (;;) {
        try {
          await setSpendCaps(service.kv, app.appId, { endUser: true }, { total: cap });
          break;
        } catch (error) {
          if (!(LOCK_MS > 0 && causedByBusyKv(error))) throw error;
          tally("cap set refused: KV locked: set again");
        }
      }
      app.userCap = cap;
    }
    for (const id of ids) {
      const after = await counterOf(app, scope, id);
      app.lowered.push({
        scope,
        id,
        cap,
        totalThen: after?.total ?? 0,
        heldThen: after?.held ?? 0,
        at: Date.now(),
      });
    }
  }
};
let lowering: Promise<void> = Promise.resolve();
const lowerer = setTimeout(function lowerAgain() {
  lowering = lowerCaps().then(() => {
    if (LOWER_EVERY_MS > 0 && Date.now() < deadline) setTimeout(lowerAgain, LOWER_EVERY_MS);
  });
}, SECONDS * 400);
const killer = KILL
  ? setTimeout(async () => {
    const killed = child!;
    child = null;
    Object.assign(killedAt, { url: killed.url, at: Date.now() });
    killed.process.kill("SIGKILL");
    await killed.process.status;
    tally("child SIGKILLed");
  }, SECONDS * 600)
  : undefined;

/** Takes the write lock by turns until the run's deadline, each time for up to LOCK_MS. */
const locker = LOCK_MS > 0
  ? new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `import { DatabaseSync } from "node:sqlite";
       const db = new DatabaseSync(${JSON.stringify(kvPath)});
       db.exec("PRAGMA busy_timeout = 10000");
       let locks = 0;
       while (Date.now() < ${deadline}) {
         db.exec("BEGIN IMMEDIATE");
         await new Promise((r) => setTimeout(r, Math.random() * ${LOCK_MS}));
         db.exec("COMMIT");
         locks++;
         await new Promise((r) => setTimeout(r, Math.random() * ${LOCK_MS}));
       }
       console.log(locks);`,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output()
  : undefined;
const started = performance.now();
await Promise.all(Array.from({ length: CLIENTS }, async () => {
  while (Date.now() < deadline) await oneClientTurn();
}));
clearInterval(operator);
clearInterval(operatorCli);
await Promise.all(operatorCommands);
clearInterval(rotator);
clearTimeout(lowerer);
await lowering;
clearTimeout(killer);
const locks = locker ? Number(new TextDecoder().decode((await locker).stdout)) : 0;
const elapsed = (performance.now() - started) / 1000;

if (KILL) {
  // The restarted process's sweeper releases what the killed one held past its TTL.
  child = await startChild();
}

// Every reservation ends settled or released; slices are given back when their processes stop.
async function reservedNow() {
  let reserved = 0;
  for (const app of apps) {
    reserved += (await service.kv.get<WalletRecord>(keys.wallet(app.appId))).value!.reserved;
  }
  return reserved;
}
const settleDeadline = Date.now() + 30_000;
while (Date.now() < settleDeadline) {
  await Promise.all(instances.map((s) => s.wallets.drain()));
  if (!KILL && (await reservedNow()) === 0) break;
  if (KILL && (await reservedNow()) === 0) break;
  await new Promise((r) => setTimeout(r, 250));
}
clearInterval(sweeper);
// Stop the child (SIGTERM gives its slices back), then the in-process instances.
if (child) {
  child.process.kill("SIGTERM");
  await child.process.status;
}
for (const server of servers) await server.close();
for (const s of instances) await s.wallets.drain();
const kv = await Deno.openKv(kvPath);
const reservedLeft = await reservedNow();

// The checks, per app.
const usageByRequest = new Map<string, UsageRecord>();
for (const app of apps) {
  const wallet = (await kv.get<WalletRecord>(keys.wallet(app.appId))).value!;
  let sum = 0;
  const byKey = new Map<string, number>();
  const byUser = new Map<string, number>();
  for await (const e of kv.list<UsageRecord>({ prefix: keys.appUsage(app.appId) })) {
    const u = e.value;
    sum += u.cost;
    if (usageByRequest.has(u.requestId)) {
      problems.push(`${app.appId}: two usage records for ${u.requestId}`);
    }
    usageByRequest.set(u.requestId, u);
    byKey.set(u.keyId, (byKey.get(u.keyId) ?? 0) + u.cost);
    if (u.user !== undefined) byUser.set(u.user, (byUser.get(u.user) ?? 0) + u.cost);
  }
  if (wallet.spent !== sum) {
    problems.push(`${app.appId}: spent ${wallet.spent} but its usage records sum to ${sum}`);
  }
  if (wallet.reserved !== 0) problems.push(`${app.appId}: ${wallet.reserved} still reserved`);
  const checkCounter = async (scope: "key" | "user", id: string, firstCap: number) => {
    const counter = (await kv.get<SpendCounter>(keys.spendCounter(app.appId, scope, id))).value;
    const total = counter?.total ?? 0;
    if ((counter?.held ?? 0) !== 0) {
      problems.push(`${app.appId} ${scope} ${id}: ${counter!.held} held`);
    }
    const lowered = app.lowered.findLast((l) => l.scope === scope && l.id === id);
    // Past a lowering, a scope may end above the new cap only by what it had spent and held then.
    const bound = lowered ? Math.max(lowered.cap, lowered.totalThen + lowered.heldThen) : firstCap;
    if (total > Math.max(bound, 0) || total > firstCap) {
      problems.push(
        `${app.appId} ${scope} ${id}: spent ${total} past its cap (${bound}, first ${firstCap})`,
      );
      if (Deno.env.get("SOAK_VERBOSE")) {
        for await (const e of kv.list<UsageRecord>({ prefix: keys.appUsage(app.appId) })) {
          const u = e.value;
          if (scope === "user" && u.user !== id) continue;
          if (lowered && u.createdAt < lowered.at - 5_000) continue;
          console.error(
            JSON.stringify({ ...u, sinceLowered: lowered ? u.createdAt - lowered.at : null }),
          );
        }
      }
    }
    return total;
  };
  if (app.keyCap !== null) {
    // The cap the soak last set must be the one in force on the key it rotated to.
    const inForce = (await kv.get<SpendCapsRecord>(keys.spendCaps(app.appId))).value
      ?.keys[app.keyId];
    if (inForce?.total !== app.keyCap) {
      problems.push(
        `${app.appId}: key ${app.keyId} capped at ${inForce?.total}, not ${app.keyCap}`,
      );
    }
    const total = await checkCounter("key", app.counterKeyId, 1_500_000);
    // Every key of the app is one lineage of rotations, so its counter is the app's spend.
    if (total !== sum) {
      problems.push(`${app.appId}: key counter ${total} but usage sums to ${sum}`);
      if (VERBOSE) {
        console.error(JSON.stringify(rotationLog.filter((r) => r.appId === app.appId)));
        for await (const e of kv.list<UsageRecord>({ prefix: keys.appUsage(app.appId) })) {
          if (e.value.cost !== sum - total) continue;
          console.error(JSON.stringify(e.value));
          console.error(JSON.stringify(logByRequest.get(e.value.requestId) ?? "no in-process log"));
        }
      }
    }
  }
  if (app.userCap !== null) {
    for (const user of USERS) {
      const total = await checkCounter("user", user, 400_000);
      if (total !== (byUser.get(user) ?? 0)) {
        problems.push(
          `${app.appId}: user ${user} counter ${total} but usage sums to ${byUser.get(user) ?? 0}`,
        );
      }
    }
  }
}
let costsChecked = 0;
let lostCharges = 0;
/** Requests whose charge the SIGKILL lost: their idempotent replays show that cost again. */
const lostToKillIds = new Set<string>();
for (const seen of seenCosts) {
  const record = usageByRequest.get(seen.requestId);
  costsChecked++;
  // Charges a slice settled and answered but had not posted when its process was SIGKILLed are
  // lost (README "Speed": at most those of the last WALLET_SLICE_POST_MS and a commit or two).
  // Sent before the kill, the child answered it before dying, though the client may finish reading
  // the answer a few ms after (a run saw one 7 ms after). A replay, from any process, repeats the
  // answer: its idempotency record is stored apart from the slice's post.
  // Under SOAK_LOCK_MS a commit waits out the lock first: "what settles during two commits" then
  // spans two of its holds.
  const lostToKill = (seen.url === killedAt.url &&
    seen.sentAt <= killedAt.at && killedAt.at - seen.at < 2_000 + 2 * LOCK_MS) ||
    lostToKillIds.has(seen.requestId);
  if (!record && lostToKill) {
    if (!lostToKillIds.has(seen.requestId)) lostCharges++;
    lostToKillIds.add(seen.requestId);
  } else if (!record) {
    if (seen.cost !== 0) {
      problems.push(
        `${seen.where}: cost ${seen.cost} seen for ${seen.requestId}, no usage record (${
          seen.url === killedAt.url ? "killed child" : "not the killed child"
        }, ${seen.at - killedAt.at} ms from the kill)`,
      );
    }
  } else if (record.cost !== seen.cost) {
    problems.push(
      `${seen.where}: cost ${seen.cost} seen for ${seen.requestId}, recorded ${record.cost}`,
    );
    if (VERBOSE) {
      console.error(
        JSON.stringify({ seen, record, log: logByRequest.get(seen.requestId) ?? null }),
      );
    }
  }
}
for (const [key, ids] of chargedByIdempotencyKey) {
  const charged = ids.filter((id) => usageByRequest.get(id)?.cost);
  if (charged.length > 1) {
    problems.push(`Idempotency-Key ${key} charged ${charged.length} times: ${charged}`);
  }
}
// Each reference taken back once at most and given back once at most, never more than was taken.
for (const { appId, reference } of operatorReferences) {
  const entries: LedgerEntry[] = [];
  for await (const e of kv.list<LedgerEntry>({ prefix: keys.ledger(appId) })) {
    if (e.value.reference === reference) entries.push(e.value);
  }
  const taken = entries.filter((e) => e.kind === "refund" || e.kind === "chargeback");
  const given = entries.filter((e) => e.kind.endsWith("_reversed"));
  if (taken.length > 1 || given.length > 1) {
    problems.push(`${reference}: taken ${taken.length} times, given back ${given.length} times`);
  }
  if (given.length > 0 && (taken.length === 0 || given[0].amount > taken[0].amount)) {
    problems.push(`${reference}: given back ${given[0].amount} of ${taken[0]?.amount ?? 0} taken`);
  }
  const marker =
    (await kv.get<CreditMarkerRecord>(keys.creditMarker(operatorTakeBack(reference).marker))).value;
  if ((marker !== null) !== (taken.length === 1)) {
    problems.push(`${reference}: marker ${JSON.stringify(marker)} but ${taken.length} taken`);
  }
}
if (OPERATOR) {
  // Every debit here was held to what was credited: together they never take back more.
  for (const app of apps) {
    const wallet = (await kv.get<WalletRecord>(keys.wallet(app.appId))).value!;
    const takenBack = (wallet.refunded ?? 0) + (wallet.owed ?? 0);
    if (takenBack > creditedOf(wallet)) {
      problems.push(`${app.appId}: ${takenBack} taken back of ${creditedOf(wallet)} credited`);
    }
  }
}
const audit = await auditWallets(kv);
if (!audit.ok) {
  problems.push(`audit: ${JSON.stringify(audit.wallets?.filter((w) => w.problems.length))}`);
}
if (Object.keys(unhandled).length > 0) problems.push(`500s logged: ${JSON.stringify(unhandled)}`);
if (Object.keys(results).some((k) => / 500 /.test(k))) problems.push("a client saw a 500");

console.log(JSON.stringify(
  {
    seconds: Math.round(elapsed),
    clients: CLIENTS,
    apps: APPS,
    killed_child: KILL,
    requests,
    requests_per_second: Math.round(requests / elapsed),
    results,
    costs_checked: costsChecked,
    charges_lost_to_sigkill: lostCharges,
    idempotency_keys: chargedByIdempotencyKey.size,
    rotations,
    top_ups: toppedUp,
    ...(OPERATOR ? { operator: operatorRuns } : {}),
    ...(LOCK_MS > 0 ? { locks } : {}),
    caps_lowered: apps.flatMap((a) => a.lowered),
    upstream: { openai: openai.counts, claude: claude.tally },
    reserved_left: reservedLeft,
    audit: { ok: audit.ok, problems: audit.problems },
    log_events: logEvents,
    problems,
  },
  null,
  2,
));

kv.close();
for (const s of instances) await s.close();
await openai.close();
await claude.close();
await Deno.remove(dir, { recursive: true });
Deno.exit(problems.length === 0 && reservedLeft === 0 ? 0 : 1);
