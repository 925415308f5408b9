import CopyButton from "./CopyButton.tsx";

/** Every island, by the name pages use; the browser bundle hydrates from this same table. */
export const ISLANDS = {
  CopyButton,
};

export type IslandName = keyof typeof ISLANDS;
