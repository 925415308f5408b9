import {
  keys,
  type LedgerEntry,
  type WebhookSettingsRecord,
  type WebhookWatchRecord,
} from "@/lib/db.ts";
import { ipv4Octets, ipv6Groups, mappedIpv4, type Micros } from "@/lib/core/mod.ts";
import { newWebhookSecret } from "./signing.ts";

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

export class WebhookUrlError extends RangeError {}

/**
 * An endpoint is https. Plain http is accepted only for a loopback address and only when the
 * service allows it (`deno task dev`, tests): anywhere else it would send signed money events in
 * the clear. Loopback and private addresses are refused over https too unless allowed, so that
 * an owner cannot aim the service at its own internal network.
 */
export function validWebhookUrl(raw: string, options: { allowLoopback: boolean }): string {
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    throw new WebhookUrlError("The endpoint must be an absolute https:// address.");
  }
  if (url.username || url.password) {
    throw new WebhookUrlError("The endpoint must not carry a user name or password.");
  }
  const loopback = LOOPBACK_HOSTS.has(url.hostname);
  if (loopback || privateAddress(url.hostname)) {
    if (!(loopback && options.allowLoopback)) {
      throw new WebhookUrlError("The endpoint must be a public https:// address.");
    }
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      throw new WebhookUrlError("The endpoint must be an http(s) address.");
    }
    return url.href;
  }
  if (url.protocol !== "https:") {
    throw new WebhookUrlError("The endpoint must be an https:// address.");
  }
  if (url.href.length > 2000) throw new WebhookUrlError("The endpoint address is too long.");
  return url.href;
}

function privateAddress(hostname: string): boolean {
  const host = hostname.replace(/\.$/, "");
  if (ipv4Octets(host)) return privateIp(host);
  // A name without a dot is resolved inside the service's own network (search domains).
  return host.startsWith("[") || !host.includes(".") ||
    [".localhost", ".internal", ".local", ".svc", ".cluster.local"].some((end) =>
      host.endsWith(end)
    );
}

/**
 * Whether an IP address (v4, or v6 without brackets) is not on the public internet: loopback,
 * private, link-local (cloud metadata), carrier-grade NAT, benchmarking, multicast or reserved.
 */
export function privateIp(address: string): boolean {
  const v4 = ipv4Octets(address);
  if (v4) {
    const [a, b, c] = v4;
    return a === 10 || a === 127 || a === 0 || (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) ||
      (a === 192 && b === 0 && c === 0) || // IETF protocol assignments (DS-Lite, NAT64 discovery)
      (a === 192 && b === 0 && c === 2) || (a === 198 && b === 51 && c === 100) ||
      (a === 203 && b === 0 && c === 113) || // documentation
      (a === 192 && b === 88 && c === 99) || // 6to4 relays
      (a === 100 && b >= 64 && b <= 127) || (a === 198 && (b === 18 || b === 19)) || a >= 224;
  }
  const groups = ipv6Groups(address);
  if (!groups) return false;
  const mapped = mappedIpv4(groups);
  if (mapped) return privateIp(mapped);
  const [first, second, third] = groups;
  // 6to4 carries an IPv4 address in its next 32 bits, which a relay would reach.
  if (first === 0x2002) {
    return privateIp(`${second >> 8}.${second & 0xff}.${third >> 8}.${third & 0xff}`);
  }
  // ::/96 holds ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d, which some stacks still
  // route to the IPv4 address; ::ffff:0:a.b.c.d (IPv4-translated) likewise carries one.
  const ipv4Tail = groups.slice(0, 6).every((g) => g === 0) ||
    (groups.slice(0, 4).every((g) => g === 0) && groups[4] === 0xffff && groups[5] === 0);
  return ipv4Tail ||
    (first & 0xfe00) === 0xfc00 || // unique local
    (first & 0xffc0) === 0xfe80 || // link-local
    (first & 0xffc0) === 0xfec0 || // site-local (deprecated, still private where used)
    first >= 0xff00 || // multicast
    (first === 0x64 && second === 0xff9b) || // NAT64 of any IPv4, private ones included
    (first === 0x2001 && second === 0) || // Teredo: a tunnel to an IPv4 address it hides
    (first === 0x2001 && second === 0xdb8) || // documentation
    (first === 0x100 && second === 0 && groups[2] === 0 && groups[3] === 0); // discard-only
}

export async function getWebhookSettings(
  kv: Deno.Kv,
  appId: string,
): Promise<WebhookSettingsRecord | null> {
  return (await kv.get<WebhookSettingsRecord>(keys.webhookSettings(appId))).value;
}

/**
 * Sets an app's endpoint and threshold. A first setting makes a secret (returned, to be shown
 * once); later ones keep it unless `rotateSecret`. Top-ups credited before the endpoint existed
 * are not announced: the watch starts at the newest ledger entry.
 */
export async function saveWebhookSettings(
  kv: Deno.Kv,
  appId: string,
  input: { url: string; lowBalanceThreshold: Micros | null; rotateSecret?: boolean },
  now = Date.now(),
): Promise<{ settings: WebhookSettingsRecord; newSecret: string | null }> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const [current, watch] = await kv.getMany<[WebhookSettingsRecord, WebhookWatchRecord]>([
      keys.webhookSettings(appId),
      keys.webhookWatch(appId),
    ]);
    const newSecret = !current.value || input.rotateSecret ? newWebhookSecret() : null;
    const settings: WebhookSettingsRecord = {
      url: input.url,
      secret: newSecret ?? current.value!.secret,
      lowBalanceThreshold: input.lowBalanceThreshold,
      updatedAt: now,
    };
    const atomic = kv.atomic().check(current).check(watch).set(
      keys.webhookSettings(appId),
      settings,
    );
    if (!watch.value) {
      let ledgerSeen: string | null = null;
      for await (
        const e of kv.list<LedgerEntry>({ prefix: keys.ledger(appId) }, { reverse: true, limit: 1 })
      ) ledgerSeen = e.value.id;
      atomic.set(
        keys.webhookWatch(appId),
        {
          below: false,
          ledgerSeen,
          announceAfter: ledgerSeen,
        } satisfies WebhookWatchRecord,
      );
    }
    if ((await atomic.commit()).ok) return { settings, newSecret };
  }
  throw new Error("webhook settings conflicted; try again");
}

/** Stops all events of the app; deliveries already made stay listed. */
export async function deleteWebhookSettings(kv: Deno.Kv, appId: string): Promise<void> {
  await kv.atomic().delete(keys.webhookSettings(appId)).delete(keys.webhookWatch(appId)).commit();
}
