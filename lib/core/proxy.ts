const PROXY_VARIABLES = new Set(["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]);

/**
 * Whether outgoing HTTP is to go through a proxy (HTTP_PROXY, HTTPS_PROXY or ALL_PROXY, which the
 * global fetch honours): clients of our own then leave their calls to fetch. Read from `env`, or
 * from the process's environment.
 */
export function proxyConfigured(env?: Record<string, string>): boolean {
  let variables = env;
  if (!variables) {
    // Without the permission (a prompt at import would surprise) a proxy cannot be ruled out.
    if (Deno.permissions.querySync({ name: "env" }).state !== "granted") return true;
    variables = Deno.env.toObject();
  }
  return Object.entries(variables).some(([name, value]) =>
    value !== "" && PROXY_VARIABLES.has(name.toUpperCase())
  );
}
