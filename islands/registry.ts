import CopyButton from "./CopyButton.tsx";
import TopUpForm from "./TopUpForm.tsx";

/** Every island, by the name pages use; the browser bundle hydrates from this same table. */
export const ISLANDS = {
  CopyButton,
  TopUpForm,
};

export type IslandName = keyof typeof ISLANDS;
