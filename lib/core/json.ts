/** Whether a parsed JSON value is an object (not null, not an array): a record of fields. */
export const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);
