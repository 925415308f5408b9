export type Logger = (fields: Record<string, unknown>) => void;

/** One JSON object per line on stdout: what log shippers and `jq` read. */
export const jsonLogger: Logger = (fields) => {
  console.log(JSON.stringify({ time: new Date().toISOString(), level: "info", ...fields }));
};
