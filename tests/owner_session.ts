/** An app owner in the dashboard, as a browser is: a session cookie and the page's CSRF token. */
import assert from "node:assert/strict";
import { PUBLIC_URL, type TestService } from "./helpers.ts";

export const OWNER_PASSWORD = "correct horse battery";

export class OwnerSession {
  /** The cookies the pages set (the session's, a save's confirmation), by name. */
  readonly #jar = new Map<string, string>();
  constructor(readonly s: TestService, readonly headers: Record<string, string> = {}) {}

  /** The Cookie header this browser sends; set it to copy another's (a stolen cookie). */
  get cookie(): string {
    return [...this.#jar].map(([name, value]) => `${name}=${value}`).join("; ");
  }
  set cookie(header: string) {
    this.#jar.clear();
    for (const pair of header.split(/;\s*/)) {
      const at = pair.indexOf("=");
      if (at > 0) this.#jar.set(pair.slice(0, at), pair.slice(at + 1));
    }
  }

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers({ ...this.headers, ...init.headers as Record<string, string> });
    if (this.#jar.size > 0) headers.set("cookie", this.cookie);
    const res = await this.s.handle(new Request(PUBLIC_URL + path, { ...init, headers }));
    for (const set of res.headers.getSetCookie()) {
      const [pair] = set.split(";");
      const at = pair.indexOf("=");
      const [name, value] = [pair.slice(0, at), pair.slice(at + 1)];
      if (value === "" || /Max-Age=0/i.test(set)) this.#jar.delete(name);
      else this.#jar.set(name, value);
    }
    return res;
  }

  async page(path: string): Promise<string> {
    const res = await this.request(path);
    assert.equal(res.status, 200, `GET ${path}`);
    return await res.text();
  }

  async csrf(): Promise<string> {
    const match = /name="_csrf" value="([0-9a-z]+)"/.exec(await this.page("/dashboard"));
    assert.ok(match, "the dashboard has a CSRF field");
    return match[1];
  }

  post(
    path: string,
    fields: Record<string, string>,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    return this.request(path, {
      method: "POST",
      body: new URLSearchParams(fields),
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    });
  }

  async signUp(email: string): Promise<this> {
    const res = await this.post("/signup", { email, password: OWNER_PASSWORD });
    assert.equal(res.status, 303, `sign-up of ${email}`);
    assert.equal(res.headers.get("location"), "/dashboard");
    return this;
  }

  /** Posts the new-app form; the response is the redirect to the key's page, or the refusal. */
  async postNewApp(name: string, csrf?: string): Promise<Response> {
    return await this.post("/dashboard/apps", { name, _csrf: csrf ?? await this.csrf() });
  }

  /** Follows a form's redirect (303) to the page that shows what it made. */
  async followRedirect(res: Response): Promise<string> {
    assert.equal(res.status, 303);
    await res.body?.cancel();
    return await this.page(res.headers.get("location")!);
  }

  /** Creates an app through the form; returns its id and the key shown once. */
  async createApp(name: string) {
    const html = await this.followRedirect(await this.postNewApp(name));
    const appId = /\/dashboard\/apps\/(app_[0-9a-z]+)\/keys/.exec(html)?.[1];
    const apiKey = /value="(tb_[0-9a-z]{36})"/.exec(html)?.[1];
    assert.ok(appId && apiKey);
    return { appId, apiKey, html };
  }
}
