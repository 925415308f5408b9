// The management API with plain fetch (Node 18+): your apps, a new API key, usage per end user.
const base = `${process.env.TOLLBOOTH_URL ?? "http://localhost:8000"}/v1/management`;
const headers = { authorization: `Bearer ${process.env.TOLLBOOTH_MANAGEMENT_KEY}` };

async function api(path, init = {}) {
  const res = await fetch(base + path, { ...init, headers: { ...headers, ...init.headers } });
  const body = await res.json();
  if (!res.ok) throw new Error(`${res.status} ${body.error.code}: ${body.error.message}`);
  return body;
}

const { data: apps } = await api("/apps");
for (const app of apps) {
  console.log(`app ${app.name}: balance ${app.balance}, held ${app.reserved}`);
}
const app = apps[0];

// An Idempotency-Key makes the retry of a lost answer safe: one key is created, never two.
const key = await api(`/apps/${app.id}/keys`, {
  method: "POST",
  headers: { "content-type": "application/json", "idempotency-key": crypto.randomUUID() },
  body: JSON.stringify({ name: "customer 42" }),
});
console.log("new key:", key.id, key.api_key.slice(0, 6) + "…");

// Every usage record, a page at a time, newest first.
let cursor = null;
let records = 0;
do {
  const page = await api(
    `/apps/${app.id}/usage?limit=100${cursor ? `&starting_after=${cursor}` : ""}`,
  );
  records += page.data.length;
  cursor = page.has_more ? page.next_cursor : null;
} while (cursor);
console.log("usage records:", records);

// What each of your end users (the request's `user` field) cost over the last 30 days.
const report = await api(`/apps/${app.id}/usage/report?group_by=user`);
for (const row of report.data) {
  console.log(`user ${row.group ?? "(none)"}: ${row.requests} requests, ${row.cost} USD`);
}
