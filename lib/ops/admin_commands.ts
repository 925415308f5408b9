/**
 * The commands of `deno task admin` (scripts/admin.ts), with their options (and what the usage text
 * must warn of, `note`): the script's usage text, its check for an unknown command and the
 * /docs/operations list are made from this table, so a command cannot be added to one and missed
 * by the others.
 */
export const ADMIN_COMMANDS = [
  { name: "create-app", options: "--name NAME [--owner EMAIL]" },
  { name: "create-key", options: "--app APP_ID [--name NAME]" },
  { name: "revoke-key", options: "--key KEY_ID" },
  { name: "show-app", options: "--app APP_ID" },
  {
    name: "credit",
    options: "--app APP_ID (--amount USD | --reversal-of STRIPE_ID) --reason TEXT",
    note: "with --reversal-of, gives back once what debit --reference STRIPE_ID took " +
      "(a refund that failed, a dispute won)",
  },
  {
    name: "debit",
    options: "--app APP_ID --amount USD --reason TEXT [--reference STRIPE_ID]",
    note: "takes it back once per --reference (a Stripe refund's or dispute's id), " +
      "and not if the webhook took it; without --reference, each run is a new debit",
  },
  {
    name: "set-top-up",
    options: "--app APP_ID [--return-url URL|none] [--show-balance true|false]",
  },
  {
    name: "set-limits",
    options: "--app APP_ID [--key KEY_ID] [--rpm N|default] [--tpm N|default]",
  },
  { name: "reset-password", options: "--email EMAIL [--revoke-management-keys true|false]" },
  { name: "audit", options: "" },
] as const;

export type AdminCommand = (typeof ADMIN_COMMANDS)[number]["name"];
