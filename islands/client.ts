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
