import type { Context } from "hono";
import { type Catalog, modelList, modelObject } from "@/lib/catalog/mod.ts";
import { ApiError } from "@/lib/core/mod.ts";
import type { Env } from "@/routes/middleware.ts";

/**
 * GET /v1/models and GET /v1/models/{model}: the catalog in OpenAI's list shape plus our fields.
 * Free, and not counted against the rate limits (it reserves nothing and calls no provider).
 */
export function modelRoutes(catalog: Catalog, options: { created: number }) {
  const list = modelList(catalog, options.created);
  return {
    list: (c: Context<Env>) => c.json(list),
    /** Ids hold a slash: `openai/gpt-4o` and the encoded `openai%2Fgpt-4o` (the SDKs') both work. */
    retrieve: (c: Context<Env>) => {
      const id = c.req.param("model") ?? "";
      const model = catalog.get(id);
      if (!model) {
        throw new ApiError("not_found", `The model '${id.slice(0, 200)}' does not exist.`, {
          param: "model",
        });
      }
      return c.json(modelObject(model, options.created));
    },
  };
}
