import CopyButton from "./CopyButton.tsx";
import TopUpForm from "./TopUpForm.tsx";
import NewKeyForm from "./NewKeyForm.tsx";
import SpendChart from "./SpendChart.tsx";

/** Every island, by the name pages use; the browser bundle hydrates from this same table. */
export const ISLANDS = {
  CopyButton,
  TopUpForm,
  NewKeyForm,
  SpendChart,
};

export type IslandName = keyof typeof ISLANDS;
