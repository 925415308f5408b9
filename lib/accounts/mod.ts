/** Accounts: owners, their sign-in sessions and sign-in throttling. */
export {
  AccountError,
  changePassword,
  checkCredentials,
  EmailTakenError,
  getOwner,
  MAX_EMAIL_CHARS,
  newPasswordProblem,
  normalizeEmail,
  ownerIdByEmail,
  PASSWORD_MAX,
  PASSWORD_MIN,
  PasswordChangeError,
  resetPassword,
  signUp,
} from "./accounts.ts";
export {
  createSession,
  endOwnerSessions,
  endSession,
  findSession,
  isOfCurrentPassword,
  SESSION_TTL_MS,
} from "./sessions.ts";
export type { Session } from "./sessions.ts";
export {
  apiKeyRevealOf,
  isManagementKeyReveal,
  leaveReveal,
  REVEAL_TTL_MS,
  takeReveal,
  webhookSecretRevealOf,
} from "./reveals.ts";
export type { ApiKeyReveal, ManagementKeyReveal, Reveal, WebhookSecretReveal } from "./reveals.ts";
export {
  beginPasswordChange,
  beginSignIn,
  beginSignUp,
  countAttempt,
  signInSucceeded,
  takeAccountOfAddress,
} from "./sign_in_throttle.ts";
export type { AccountPermit } from "./sign_in_throttle.ts";
export { clientAddressOf } from "./client_address.ts";
export type { ProxyTrust } from "./client_address.ts";
