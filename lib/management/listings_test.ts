import { pageAppKeys, pageLedger, type TwoWayPageRequest } from "./listings.ts";

Deno.test("only the keys listing walks back: an endingBefore the ledger would ignore does not type-check", () => {
  const wayBack: TwoWayPageRequest = { limit: 1, endingBefore: "led_0" };
  // Compiled, never run: the checks are the type checker's.
  const _calls = (kv: Deno.Kv) => [
    pageAppKeys(kv, "app_1", wayBack),
    // @ts-expect-error the ledger pages one way only
    pageLedger(kv, "app_1", wayBack),
    // @ts-expect-error the ledger pages one way only
    pageLedger(kv, "app_1", { limit: 1, endingBefore: "led_0" }),
  ];
});
