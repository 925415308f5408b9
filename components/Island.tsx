import type { ComponentType } from "preact";
import { type IslandName, ISLANDS } from "@/islands/registry.ts";

/**
 * Server-renders an island and marks it for hydration: the browser bundle finds the element by
 * `data-island` and hydrates the same component from the JSON props in `data-props`. No inline
 * script, so the pages keep a CSP without 'unsafe-inline'.
 */
export function Island<N extends IslandName>(
  { name, props }: { name: N; props: Parameters<(typeof ISLANDS)[N]>[0] },
) {
  const Component = ISLANDS[name] as ComponentType<typeof props>;
  return (
    <div data-island={name} data-props={JSON.stringify(props)}>
      <Component {...props} />
    </div>
  );
}
