import { Layout } from "@/components/Layout.tsx";
import type { Catalog, Prices } from "@/lib/catalog/mod.ts";
import { renderPage } from "@/routes/render.ts";

/** GET /models: the curated list with prices, public. */
export function modelsPage(catalog: Catalog): string {
  return renderPage(
    <Layout title="Models">
      <h1>Models</h1>
      <p>
        Use the ID as <code>model</code> in <code>POST /v1/chat/completions</code> or{" "}
        <code>POST /v1/responses</code> (chat models) or <code>POST /v1/embeddings</code>{" "}
        (embedding models); <code>GET /v1/models</code>{" "}
        gives the same list as JSON. Prices are in USD per million tokens; a request costs its fresh
        prompt tokens at the input price, its cached ones (read from the provider's prompt cache) at
        the cached-input price, those written to the cache at the cache-write price (an hour's
        writes at the 1 h price), and its completion tokens at the output price, summed and rounded
        up once to the micro-dollar. A model without cache prices bills cached input at the input
        price. An embedding model has an input price only. A model with a long context price bills a
        whole request at it, output included, once the request's input passes the size shown.
      </p>
      <div class="table-scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Model ID</th>
              <th scope="col">Type</th>
              <th scope="col">Input / 1M tokens</th>
              <th scope="col">Cached input</th>
              <th scope="col">Cache write</th>
              <th scope="col">Output / 1M tokens</th>
              <th scope="col">Context</th>
              <th scope="col">Max output</th>
              <th scope="col">Long context</th>
            </tr>
          </thead>
          <tbody>
            {catalog.models.map((m) => (
              <tr>
                <td>
                  <code>{m.id}</code>
                </td>
                <td>{m.type}</td>
                <td>${m.inputUsdPerMTok}</td>
                <td>{m.cacheReadUsdPerMTok === null ? "—" : `$${m.cacheReadUsdPerMTok}`}</td>
                <td>{cacheWrites(m)}</td>
                <td>{m.outputUsdPerMTok === null ? "—" : `$${m.outputUsdPerMTok}`}</td>
                <td>{m.contextTokens.toLocaleString("en-US")}</td>
                <td>{m.type === "chat" ? m.maxOutputTokens.toLocaleString("en-US") : "—"}</td>
                <td>
                  {m.longContext === null
                    ? "—"
                    : `over ${
                      m.longContext.aboveInputTokens.toLocaleString("en-US")
                    } input tokens: $${m.longContext.inputUsdPerMTok} / $${m.longContext.outputUsdPerMTok}`}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Layout>,
  );
}

/** The 5-minute write price, and the hour's beside it where it differs. */
function cacheWrites(m: Prices): string {
  if (m.cacheWriteUsdPerMTok === null) return "—";
  const hour = m.cacheWrite1hUsdPerMTok;
  return hour === null || hour === m.cacheWriteUsdPerMTok
    ? `$${m.cacheWriteUsdPerMTok}`
    : `$${m.cacheWriteUsdPerMTok} (1 h: $${hour})`;
}
