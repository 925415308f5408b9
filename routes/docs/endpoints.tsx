import { CodeBlock, DocsLayout } from "@/components/DocsLayout.tsx";
import { renderPage } from "@/routes/render.ts";

const MODEL_EXAMPLE = `{
  "object": "list",
  "data": [
    {
      "id": "openai/gpt-4o-mini",
      "object": "model",
      "created": 1785283200,
      "owned_by": "openai",
      "type": "chat",
      "context_tokens": 128000,
      "max_output_tokens": 16384,
      "pricing": { "input_usd_per_mtok": "0.15", "output_usd_per_mtok": "0.60" }
    }
  ]
}`;

/** GET /docs/endpoints: every endpoint beyond chat completions, on the same key and wallet. */
export function endpointsPage() {
  return renderPage(
    <DocsLayout title="Endpoints" path="/docs/endpoints">
      <h1>Endpoints</h1>
      <p>
        Every endpoint takes the same app API key (<code>Authorization: Bearer …</code>), answers
        with the same <code>Tollbooth-Request-Id</code> and <code>Tollbooth-Version</code>{" "}
        headers and the same{" "}
        <a href="/docs/errors">error shape</a>, and is paid from the same wallet.
      </p>
      <table>
        <thead>
          <tr>
            <th scope="col">Endpoint</th>
            <th scope="col">What it does</th>
            <th scope="col">Cost</th>
          </tr>
        </thead>
        <tbody>
          <tr>
            <td>
              <code>POST /v1/chat/completions</code>
            </td>
            <td>A chat completion, streamed or not</td>
            <td>
              <a href="/docs/billing">reserved, then settled</a>
            </td>
          </tr>
          <tr>
            <td>
              <code>GET /v1/models</code>, <code>GET /v1/models/&#123;model&#125;</code>
            </td>
            <td>The curated models</td>
            <td>free, not rate limited</td>
          </tr>
        </tbody>
      </table>

      <h2 id="models">Models</h2>
      <p>
        <code>GET /v1/models</code> lists every model of the catalog in OpenAI's list shape, so that
        {" "}
        <code>models.list()</code>{" "}
        of the OpenAI SDKs, LangChain and chat UIs work unchanged. Each model adds our own fields:
      </p>
      <ul>
        <li>
          <code>type</code>: <code>chat</code> (served by <code>/v1/chat/completions</code>) or{" "}
          <code>embedding</code>.
        </li>
        <li>
          <code>context_tokens</code>: a chat model's context window (prompt plus output); an
          embedding model's most tokens per input.
        </li>
        <li>
          <code>max_output_tokens</code>: a chat model's largest <code>max_tokens</code>.
        </li>
        <li>
          <code>pricing</code>: USD per million tokens as decimal strings, exactly as the catalog
          writes them (<code>input_usd_per_mtok</code>, and <code>output_usd_per_mtok</code>{" "}
          for chat models).
        </li>
        <li>
          <code>created</code>: the catalog records no release dates, so every model carries the
          date of the API version; <code>owned_by</code> is the <code>&lt;provider&gt;</code>{" "}
          part of the ID.
        </li>
      </ul>
      <CodeBlock caption="GET /v1/models" code={MODEL_EXAMPLE} />
      <p>
        <code>GET /v1/models/&#123;model&#125;</code>{" "}
        answers one model. The ID holds a slash and may be sent as is or percent-encoded (
        <code>/v1/models/openai%2Fgpt-4o-mini</code>, as the OpenAI SDKs send it). A model off the
        list is <code>404 not_found</code> with <code>param: "model"</code>.
      </p>
      <p>
        Listing models is free and does not count against the{" "}
        <a href="/docs/rate-limits">rate limits</a>: it reserves nothing and calls no provider. Its
        {" "}
        <code>x-ratelimit-*</code>{" "}
        headers show the key's current status, which a client may read before it starts paid
        requests. A revoked key is refused at once, as on every endpoint.
      </p>
    </DocsLayout>,
  );
}
