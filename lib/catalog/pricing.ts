import type { Model } from "./catalog.ts";
import { type Micros, tokensCost } from "@/lib/core/mod.ts";

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

/** The hold taken before the model runs: the prompt as counted plus the whole output cap. */
export function reservationCost(model: Model, promptTokens: number, maxTokens: number): Micros {
  return tokensCost(promptTokens, maxTokens, model.inputPrice, model.outputPrice);
}

export function usageCost(model: Model, usage: Usage): Micros {
  return tokensCost(
    usage.promptTokens,
    usage.completionTokens,
    model.inputPrice,
    model.outputPrice,
  );
}
