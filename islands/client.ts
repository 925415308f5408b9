/// <reference lib="dom" />
import { h, hydrate } from "preact";
import { type IslandName, ISLANDS } from "./registry.ts";

for (const el of document.querySelectorAll<HTMLElement>("[data-island]")) {
  const Component = ISLANDS[el.dataset.island as IslandName];
  if (!Component) continue;
  const props = JSON.parse(el.dataset.props ?? "{}");
  // deno-lint-ignore no-explicit-any
  hydrate(h(Component as any, props), el);
}

// A form whose action cannot be undone (revoking a key, replacing an address) asks first: its
// data-confirm holds the question. Without JavaScript it submits as any form does.
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
  if (!confirm(form.dataset.confirm)) event.preventDefault();
});
