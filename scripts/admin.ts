/**
 * Operator commands. Each prints one JSON object on stdout; a bad command or argument prints a
 * message on stderr and exits non-zero. Safe to run beside a running service on the same KV.
 */
import { MAX_EMAIL_CHARS, ownerIdByEmail, resetPassword } from "@/lib/accounts/mod.ts";
import { countLiveManagementKeys, revokeAllManagementKeys } from "@/lib/management/mod.ts";
import {
  createApp as createAppRecord,
  getApp,
  getWallet,
  MAX_APP_NAME_CHARS,
  MAX_KEY_NAME_CHARS,
  topUpUrl,
} from "@/lib/tenants/mod.ts";
import {
  auditWallets,
  getRateLimits,
  MAX_LIMIT,
  revokeKey,
  setRateLimits,
  unchargedOf,
  validLimit,
  walletFigures,
  Wallets,
} from "@/lib/billing/mod.ts";
import {
  formatUsd,
  isPlausibleId,
  loadConfig,
  type Micros,
  openKv,
  parseUsd,
} from "@/lib/core/mod.ts";
import { issueKey, listAppKeys } from "@/lib/tenants/mod.ts";
import {
  operatorGiveBack,
  operatorTakeBack,
  updateTopUpSettings,
  validateReturnUrl,
} from "@/lib/payments/mod.ts";
import { WebhookWatcher } from "@/lib/webhooks/mod.ts";
import { type CreditMarkerRecord, keys, type LedgerEntry, type RateLimits } from "@/lib/db.ts";
import { ADMIN_COMMANDS, type AdminCommand } from "@/lib/ops/admin_commands.ts";

class UsageError extends Error {}

/**
 * The longest `credit --reason` and `debit --reason`: a note for the ledger, not a document (the
 * entry must stay within KV's 64 KiB per value).
 */
const MAX_REASON_CHARS = 500;

const USAGE = [
  "usage: deno task admin <command> [options]",
  ...ADMIN_COMMANDS.map((c) =>
    `  ${c.name} ${c.options}`.trimEnd() + ("note" in c ? `\n      ${c.note}` : "")
  ),
].join("\n");

function parseFlags(args: string[], allowed: string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument ${JSON.stringify(arg)}`);
    const [name, inline] = arg.slice(2).split(/=(.*)/s, 2);
    if (!allowed.includes(name)) throw new UsageError(`unknown option --${name}`);
    const value = inline ?? args[++i];
    if (value === undefined || (inline === undefined && value.startsWith("--"))) {
      throw new UsageError(`--${name} needs a value`);
    }
    flags[name] = value;
  }
  return flags;
}

function required(flags: Record<string, string>, name: string): string {
  const value = flags[name];
  if (!value) throw new UsageError(`--${name} is required`);
  return value;
}

/** A text flag, trimmed: refused when empty or longer than `max` characters. */
function textFlag(value: string, name: string, max: number): string {
  const text = value.trim();
  if (text.length === 0 || text.length > max) {
    throw new UsageError(`--${name} must have 1 to ${max} characters`);
  }
  return text;
}

/** An id flag: one of our ids is at most 64 characters, and a longer one cannot be a KV key. */
function idFlag(flags: Record<string, string>, name: string): string {
  const id = required(flags, name);
  if (!isPlausibleId(id)) throw new UsageError(`--${name} is not an id (at most 64 characters)`);
  return id;
}

/**
 * A Stripe id flag, trimmed: an id has no whitespace, and one pasted with some around it names the
 * same refund or dispute, whose marker must be the one its first taking wrote or it is taken twice.
 */
function stripeIdFlag(flags: Record<string, string>, name: string): string {
  const id = required(flags, name).trim();
  if (!isPlausibleId(id) || /\s/.test(id)) {
    throw new UsageError(`--${name} is not an id (at most 64 characters, without spaces)`);
  }
  return id;
}

/** `--amount`: a positive USD amount. */
function amountFlag(flags: Record<string, string>): Micros {
  let amount;
  try {
    amount = parseUsd(required(flags, "amount"));
  } catch {
    throw new UsageError(
      "--amount must be a positive USD amount with at most 6 decimals, such as 10.00",
    );
  }
  if (amount <= 0) throw new UsageError("--amount must be positive");
  return amount;
}

/** A debit's reference already taken back, by the webhook or an earlier run: what it took. */
async function takenBefore(kv: Deno.Kv, appId: string, marked: CreditMarkerRecord) {
  if (marked.appId !== appId) {
    throw new Error(
      `that reference was taken back from the app ${marked.appId}; nothing was taken`,
    );
  }
  const entry = (await kv.get<LedgerEntry>(keys.ledgerEntry(appId, marked.entryId))).value;
  const wallet = await getWallet(kv, appId);
  return {
    app_id: appId,
    already_taken: true,
    kind: entry?.kind ?? null,
    reference: entry?.reference ?? null,
    debited: entry ? formatUsd(entry.amount) : null,
    balance: formatUsd(wallet.available),
    owed: formatUsd(wallet.owed ?? 0),
    entry_id: marked.entryId,
  };
}

/**
 * `credit --reversal-of`: gives back what the debit of `reference` took (a refund that failed, a
 * dispute won), as the webhook does for one it took: a `refund_reversed` or `chargeback_reversed`
 * entry, once per reference whoever gives it back, what is still owed of it forgiven first.
 */
async function giveBack(
  kv: Deno.Kv,
  wallets: Wallets,
  appId: string,
  reference: string,
  reason: string,
) {
  await getApp(kv, appId);
  const { kind, taken, marker } = operatorGiveBack(reference);
  const debit = (await kv.get<CreditMarkerRecord>(keys.creditMarker(taken))).value;
  if (!debit) {
    throw new Error(
      `nothing was taken back with the reference ${reference}; nothing was given back`,
    );
  }
  if (debit.appId !== appId) {
    throw new Error(
      `that reference was taken back from the app ${debit.appId}; nothing was given back`,
    );
  }
  // Written in the debit's commit with its marker.
  const { amount } = (await kv.get<LedgerEntry>(keys.ledgerEntry(appId, debit.entryId))).value!;
  const result = await wallets.reverseDebit(appId, { amount, kind, reason, reference, marker });
  if (result.reversed) {
    // The service's sweep would announce it within a minute; at once, as its own are.
    await new WebhookWatcher(kv).observe(appId).catch(() => {});
  }
  const given = (await kv.get<CreditMarkerRecord>(keys.creditMarker(marker))).value!;
  const entry = (await kv.get<LedgerEntry>(keys.ledgerEntry(appId, given.entryId))).value;
  const wallet = await getWallet(kv, appId);
  return {
    app_id: appId,
    ...(result.reversed ? {} : { already_given_back: true }),
    kind: entry?.kind ?? kind,
    reference,
    debited: formatUsd(amount),
    given_back: entry ? formatUsd(entry.amount) : null,
    balance: formatUsd(wallet.available),
    owed: formatUsd(wallet.owed ?? 0),
    entry_id: given.entryId,
  };
}

/** A limit flag: a number sets it, `default` clears the override, absent leaves it. */
function limitFlag(flags: Record<string, string>, name: string): number | null | undefined {
  const value = flags[name];
  if (value === undefined) return undefined;
  if (value === "default") return null;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !validLimit(n)) {
    throw new UsageError(`--${name} must be an integer from 1 to ${MAX_LIMIT}, or default`);
  }
  return n;
}

export async function runAdmin(
  args: string[],
  kv: Deno.Kv,
  publicUrl: string,
  defaultLimits: RateLimits = defaultRateLimits(),
): Promise<{ output: unknown; exitCode: number }> {
  const [command, ...rest] = args;
  // Only the table's commands run: a case below that is not in it would be missing from the usage
  // text and /docs/operations, so it is unreachable until it is added there.
  if (!ADMIN_COMMANDS.some((c) => c.name === command)) {
    throw new UsageError(
      command ? `unknown command ${JSON.stringify(command)}` : "no command given",
    );
  }
  const wallets = new Wallets(kv, { leaseMs: 0 });
  switch (command as AdminCommand) {
    case "create-app": {
      const flags = parseFlags(rest, ["name", "owner"]);
      const name = textFlag(required(flags, "name"), "name", MAX_APP_NAME_CHARS);
      const owner = flags.owner === undefined
        ? undefined
        : textFlag(flags.owner, "owner", MAX_EMAIL_CHARS);
      const ownerId = owner ? await ownerIdByEmail(kv, owner) : null;
      // The operator is not held to an owner's bound of apps; the app still counts against it.
      const { app, wallet, key } = await createAppRecord(
        kv,
        ownerId ? { name, ownerId, bound: "operator" } : { name },
      );
      return {
        output: {
          app_id: app.id,
          api_key: key.apiKey,
          key_id: key.record.id,
          top_up_url: topUpUrl(publicUrl, app),
          balance: formatUsd(wallet.available),
        },
        exitCode: 0,
      };
    }
    case "create-key": {
      const flags = parseFlags(rest, ["app", "name"]);
      const appId = idFlag(flags, "app");
      // The dashboard's and the management API's rule for a key's name.
      const name = flags.name === undefined
        ? "admin"
        : textFlag(flags.name, "name", MAX_KEY_NAME_CHARS);
      // The operator is not held to the bound of live keys; the key still counts against it.
      const key = await issueKey(kv, appId, name, "operator");
      return { output: { key_id: key.record.id, api_key: key.apiKey }, exitCode: 0 };
    }
    case "revoke-key": {
      const flags = parseFlags(rest, ["key"]);
      const key = await revokeKey(kv, idFlag(flags, "key"));
      return {
        output: {
          key_id: key.id,
          app_id: key.appId,
          revoked_at: new Date(key.revokedAt!).toISOString(),
        },
        exitCode: 0,
      };
    }
    case "show-app": {
      const flags = parseFlags(rest, ["app"]);
      const appId = idFlag(flags, "app");
      const app = await getApp(kv, appId);
      const wallet = await getWallet(kv, appId);
      const keyList = await listAppKeys(kv, appId);
      const limits = await getRateLimits(kv, defaultLimits, appId);
      const uncharged = await unchargedOf(kv, appId);
      return {
        output: {
          app_id: app.id,
          name: app.name,
          owner: app.ownerId,
          ...walletFigures(wallet, uncharged),
          top_up_url: topUpUrl(publicUrl, app),
          top_up_return_url: app.topUpReturnUrl ?? null,
          top_up_show_balance: app.topUpShowBalance ?? false,
          rate_limits: limits.app,
          keys: keyList.map((k) => ({
            key_id: k.id,
            name: k.name,
            prefix: k.prefix,
            created_at: new Date(k.createdAt).toISOString(),
            last_used_at: k.lastUsedAt ? new Date(k.lastUsedAt).toISOString() : null,
            revoked_at: k.revokedAt ? new Date(k.revokedAt).toISOString() : null,
            rate_limits: limits.keys[k.id] ?? limits.app,
          })),
        },
        exitCode: 0,
      };
    }
    case "credit": {
      const flags = parseFlags(rest, ["app", "amount", "reason", "reversal-of"]);
      const appId = idFlag(flags, "app");
      if (flags["reversal-of"] !== undefined) {
        if (flags.amount !== undefined) {
          throw new UsageError("--reversal-of gives back what its debit took: give no --amount");
        }
        const reference = stripeIdFlag(flags, "reversal-of");
        const reason = textFlag(required(flags, "reason"), "reason", MAX_REASON_CHARS);
        return { output: await giveBack(kv, wallets, appId, reference, reason), exitCode: 0 };
      }
      const amount = amountFlag(flags);
      const reason = textFlag(required(flags, "reason"), "reason", MAX_REASON_CHARS);
      await getApp(kv, appId);
      const result = await wallets.credit(appId, { amount, kind: "operator_credit", reason });
      if (!result.credited) throw new Error("credit was not applied");
      return {
        output: {
          app_id: appId,
          credited: formatUsd(amount),
          balance: formatUsd(result.available),
          entry_id: result.entry.id,
        },
        exitCode: 0,
      };
    }
    case "debit": {
      const flags = parseFlags(rest, ["app", "amount", "reason", "reference"]);
      const appId = idFlag(flags, "app");
      const amount = amountFlag(flags);
      const reason = textFlag(required(flags, "reason"), "reason", MAX_REASON_CHARS);
      const reference = flags.reference === undefined ? null : stripeIdFlag(flags, "reference");
      await getApp(kv, appId);
      // Named, it is taken once, and not at all if the Stripe webhook took it back already; unnamed,
      // each run is a debit of its own.
      const { kind, marker } = reference
        ? operatorTakeBack(reference)
        : { kind: "refund" as const, marker: `operator_debit:${crypto.randomUUID()}` };
      const before = await kv.get<CreditMarkerRecord>(keys.creditMarker(marker));
      if (before.value) return { output: await takenBefore(kv, appId, before.value), exitCode: 0 };
      // A typo's guard, never more than was put in and not yet taken back, decided in the commit:
      // a read of the wallet here would let debits run at once each pass it alone.
      const result = await wallets.debit(appId, {
        amount,
        kind,
        reason,
        reference,
        marker,
        withinCredits: true,
      });
      if (!result.debited) {
        const marked = (await kv.get<CreditMarkerRecord>(keys.creditMarker(marker))).value!;
        return { output: await takenBefore(kv, appId, marked), exitCode: 0 };
      }
      // The service's sweep would announce it within a minute; at once, as its own debits are.
      await new WebhookWatcher(kv).observe(appId).catch(() => {});
      return {
        output: {
          app_id: appId,
          kind,
          reference,
          debited: formatUsd(amount),
          // What the balance could not give now is owed: taken as holds end and money comes in.
          taken_now: formatUsd(result.taken),
          owed_of_it: formatUsd(amount - result.taken),
          balance: formatUsd(result.available),
          owed: formatUsd(result.owed),
          entry_id: result.entry.id,
        },
        exitCode: 0,
      };
    }
    case "set-top-up": {
      const flags = parseFlags(rest, ["app", "return-url", "show-balance"]);
      const appId = idFlag(flags, "app");
      const show = flags["show-balance"];
      if (show !== undefined && show !== "true" && show !== "false") {
        throw new UsageError("--show-balance must be true or false");
      }
      const url = flags["return-url"];
      if (url === undefined && show === undefined) {
        throw new UsageError("give --return-url, --show-balance or both");
      }
      let returnUrl: string | null | undefined;
      try {
        returnUrl = url === undefined ? undefined : url === "none" ? null : validateReturnUrl(url);
      } catch (error) {
        throw new UsageError(`--return-url: ${(error as Error).message}`);
      }
      const app = await updateTopUpSettings(kv, appId, {
        returnUrl,
        showBalance: show === undefined ? undefined : show === "true",
      });
      return {
        output: {
          app_id: app.id,
          top_up_url: topUpUrl(publicUrl, app),
          return_url: app.topUpReturnUrl ?? null,
          show_balance: app.topUpShowBalance ?? false,
        },
        exitCode: 0,
      };
    }
    case "set-limits": {
      const flags = parseFlags(rest, ["app", "key", "rpm", "tpm"]);
      const appId = idFlag(flags, "app");
      const keyId = flags.key === undefined ? undefined : idFlag(flags, "key");
      const change = { rpm: limitFlag(flags, "rpm"), tpm: limitFlag(flags, "tpm") };
      if (change.rpm === undefined && change.tpm === undefined) {
        throw new UsageError("give --rpm, --tpm or both");
      }
      await setRateLimits(kv, appId, change, { by: "operator" }, keyId);
      const limits = await getRateLimits(kv, defaultLimits, appId);
      const scope = keyId ? limits.keys[keyId] ?? limits.app : limits.app;
      return {
        output: { app_id: appId, ...(keyId ? { key_id: keyId } : {}), ...scope },
        exitCode: 0,
      };
    }
    case "reset-password": {
      const flags = parseFlags(rest, ["email", "revoke-management-keys"]);
      const email = textFlag(required(flags, "email"), "email", MAX_EMAIL_CHARS);
      const revokeKeys = flags["revoke-management-keys"];
      if (revokeKeys !== undefined && revokeKeys !== "true" && revokeKeys !== "false") {
        throw new UsageError("--revoke-management-keys must be true or false");
      }
      // No account with the email: an AccountError naming it, exit 1.
      const reset = await resetPassword(kv, email);
      // A forgotten password leaves the owner's servers their keys; a suspected compromise asks
      // for all of them to go with it.
      const revoked = revokeKeys === "true" ? await revokeAllManagementKeys(kv, reset.owner.id) : 0;
      return {
        output: {
          owner_id: reset.owner.id,
          email: reset.owner.email,
          // Printed this once: KV keeps only its hash. The owner signs in with it and changes it.
          password: reset.password,
          sessions_ended: reset.sessionsEnded,
          management_keys_revoked: revoked,
          management_keys_live: await countLiveManagementKeys(kv, reset.owner.id),
        },
        exitCode: 0,
      };
    }
    case "audit": {
      parseFlags(rest, []);
      const report = await auditWallets(kv);
      // 3: nothing found wrong, but some wallets changed too fast to be read at one moment.
      const wrong = report.wallets.some((w) => w.consistent && !w.ok);
      return { output: report, exitCode: report.ok ? 0 : wrong ? 1 : 3 };
    }
    default:
      throw new UsageError(
        command ? `unknown command ${JSON.stringify(command)}` : "no command given",
      );
  }
}

function defaultRateLimits(): RateLimits {
  const config = loadConfig({});
  return { rpm: config.rateLimitRpm, tpm: config.rateLimitTpm };
}

if (import.meta.main) {
  let kv: Deno.Kv | undefined;
  let exitCode = 0;
  try {
    const config = loadConfig(Deno.env.toObject());
    kv = await openKv(config.kvPath);
    const result = await runAdmin(Deno.args, kv, config.publicUrl, {
      rpm: config.rateLimitRpm,
      tpm: config.rateLimitTpm,
    });
    console.log(JSON.stringify(result.output, null, 2));
    exitCode = result.exitCode;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`admin: ${error.message}\n${USAGE}`);
      exitCode = 2;
    } else {
      // Bad configuration, an unopenable KV, no such app or key: the message says which.
      console.error(`admin: ${(error as Error).message}`);
      exitCode = 1;
    }
  } finally {
    kv?.close();
  }
  Deno.exit(exitCode);
}
