import type { MiddlewareHandler } from "hono";

/**
 * The pages load scripts only from our own origin (islands bundle), with no inline script, so the
 * policy needs no 'unsafe-inline' for scripts. Styles and images come from /static as well.
 */
const STRIPE_CHECKOUT_ORIGIN = "https://checkout.stripe.com";

export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  // Browsers apply form-action to the redirects that follow a submission: the top-up form's 303
  // to Stripe Checkout must be allowed, or real purchases stop at our own page.
  `form-action 'self' ${STRIPE_CHECKOUT_ORIGIN}`,
].join("; ");

/**
 * Hardening headers on every response: nosniff everywhere (API bodies are never to be sniffed into
 * HTML); the CSP, referrer policy and frame denial on HTML pages and static files.
 */
export const securityHeaders: MiddlewareHandler = async (c, next) => {
  await next();
  const headers = c.res.headers;
  headers.set("X-Content-Type-Options", "nosniff");
  const type = headers.get("content-type") ?? "";
  if (c.req.path.startsWith("/v1/") && !type.startsWith("text/html")) return;
  if (!headers.has("Content-Security-Policy")) {
    headers.set("Content-Security-Policy", CONTENT_SECURITY_POLICY);
  }
  // A page that asked for a stricter one (account pages: same-origin) keeps it.
  if (!headers.has("Referrer-Policy")) {
    headers.set("Referrer-Policy", "strict-origin-when-cross-origin");
  }
  headers.set("X-Frame-Options", "DENY");
};
