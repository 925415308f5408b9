import { CodeBlock, DocsLayout } from "@/components/DocsLayout.tsx";
import { MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_REQUEST_TOKENS } from "@/lib/gateway/mod.ts";
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
      "pricing": {
        "input_usd_per_mtok": "0.15",
        "output_usd_per_mtok": "0.60",
        "cache_read_usd_per_mtok": "0.075"
      }
    }
  ]
}`;

const EMBEDDINGS_EXAMPLE = `curl $TOLLBOOTH_URL/v1/embeddings -i \\
  -H "Authorization: Bearer $TOLLBOOTH_API_KEY" -H "Content-Type: application/json" \\
  -d '{"model": "tollbooth/embed", "input": ["first text", "second text"]}'`;

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
      <div class="table-scroll">
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
            <tr>
              <td>
                <code>POST /v1/responses</code>
              </td>
              <td>OpenAI's Responses API, for every chat model</td>
              <td>exactly like the chat completion it is served by</td>
            </tr>
            <tr>
              <td>
                <code>GET</code>, <code>DELETE /v1/responses/&#123;id&#125;</code>,{" "}
                <code>GET /v1/responses/&#123;id&#125;/input_items</code>
              </td>
              <td>A stored response read back or deleted; its request's input items</td>
              <td>free, not rate limited</td>
            </tr>
            <tr>
              <td>
                <code>POST /v1/embeddings</code>
              </td>
              <td>Embeddings of texts or token ids</td>
              <td>the input tokens at the model's input price</td>
            </tr>
          </tbody>
        </table>
      </div>

      <h2 id="models">Models</h2>
      <p>
        <code>GET /v1/models</code> lists every model of the catalog in OpenAI's list shape, so that
        {" "}
        <code>models.list()</code>{" "}
        of the OpenAI SDKs, LangChain and chat UIs work unchanged. Each model adds our own fields:
      </p>
      <ul>
        <li>
          <code>type</code>: <code>chat</code> (served by <code>/v1/chat/completions</code> and{" "}
          <code>/v1/responses</code>) or <code>embedding</code> (served by{" "}
          <code>/v1/embeddings</code>). A model sent to the other endpoint is{" "}
          <a href="/docs/errors#model_not_supported">
            <code>400 model_not_supported</code>
          </a>{" "}
          with <code>param: "model"</code>.
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
          for chat models; <code>cache_read_usd_per_mtok</code> and{" "}
          <code>cache_write_usd_per_mtok</code>{" "}
          when the catalog prices cached input apart, which otherwise costs the input price; a model
          an Anthropic route or a GPT-5.6 or later serves always lists its cache-write price, 1.25×
          the input price unless the catalog names another, and one an Anthropic route serves its
          {" "}
          <code>cache_write_1h_usd_per_mtok</code>{" "}
          for breakpoints kept an hour, twice the input price unless the catalog names another). A
          chat model whose provider bills large requests dearer lists them as{" "}
          <code>long_context</code>: a request whose input (cached and cache-written included)
          passes its <code>above_input_tokens</code>{" "}
          costs every token at its prices, output included, and is reserved at them when its input
          bound passes that size.
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

      <h2 id="embeddings">Embeddings</h2>
      <p>
        <code>POST /v1/embeddings</code> takes OpenAI's request: <code>model</code>{" "}
        (an embedding model), <code>input</code>{" "}
        (a string, an array of strings, an array of token ids, or an array of arrays of token ids;
        no input may be empty), <code>encoding_format</code> (<code>float</code>, the default, or
        {" "}
        <code>base64</code>: the little-endian float32 bytes), <code>dimensions</code> and{" "}
        <code>user</code>. Any other field is refused with <code>400 invalid_parameter</code>{" "}
        naming it. Limits, as OpenAI documents them: at most {MAX_EMBEDDING_INPUTS} inputs and{" "}
        {MAX_EMBEDDING_REQUEST_TOKENS.toLocaleString("en-US")}{" "}
        tokens per request; each input at most the model's <code>context_tokens</code>{" "}
        (<code>400 context_length_exceeded</code> names it, such as <code>input[3]</code>).
      </p>
      <CodeBlock caption="curl" code={EMBEDDINGS_EXAMPLE} />
      <p>It is paid like a chat completion without output:</p>
      <ul>
        <li>
          <strong>Reserve:</strong>{" "}
          the input as counted (each text at the larger of its o200k and cl100k counts, or its UTF-8
          bytes on a model of another family whose catalog entry says so; each token array by its
          length) at the model's input price; the same tokens count against the tokens-per-minute
          limit.
        </li>
        <li>
          <strong>Settle:</strong> to the provider's <code>usage.prompt_tokens</code>{" "}
          (our count when it reports none), rounded up once to the micro-dollar.{" "}
          <code>Tollbooth-Request-Cost</code> is what left the wallet and{" "}
          <code>Tollbooth-Balance</code>{" "}
          the wallet after it. A provider that counts more than was held (a model of another family
          the catalog does not mark so) is charged its count, down to a zero balance and never
          below.
        </li>
        <li>
          The same errors as chat completions: 401, 402 with <code>top_up_url</code>, 429 with{" "}
          <code>Retry-After</code>, 502 with nothing charged.
        </li>
      </ul>
      <p>
        Each vector comes back in the encoding you asked for, even from a compatible server that
        ignores <code>encoding_format</code>. The built-in <code>tollbooth/embed</code>{" "}
        needs no provider key: it hashes the tokens of each input into a 256-number unit vector (or
        {" "}
        <code>dimensions</code>, up to 3072), so equal texts embed equally and texts that share
        words lie closer together, which is enough to try a search or a cache locally. Embedding
        models are served by providers of kind <code>openai</code> (at{" "}
        <code>{"{base_url}"}/embeddings</code>) and by the simulator; Anthropic has no embeddings.
      </p>

      <h2 id="responses">Responses</h2>
      <p>
        <code>POST /v1/responses</code>{" "}
        is OpenAI's Responses API, which the Vercel AI SDK's default OpenAI provider (
        <code>createOpenAI(&#123; baseURL &#125;)(model)</code>) and{" "}
        <code>client.responses.create()</code>{" "}
        speak. Every chat model serves it, OpenAI-compatible and Anthropic alike: the request is
        translated to a chat completion, paid exactly like one (the same reservation: the input
        bound plus{" "}
        <code>max_output_tokens</code>, default 2048; the same settle, headers and errors), and the
        answer translated back.
      </p>
      <ul>
        <li>
          <strong>Input:</strong> a string, or items: messages (<code>input_text</code>,{" "}
          <code>input_image</code>, <code>input_file</code> (a PDF's bytes in{" "}
          <code>file_data</code>, as chat's{" "}
          <a href="/docs#dialect-pdf">PDFs</a>) and, for earlier answers, <code>output_text</code>
          {" "}
          parts), <code>function_call</code>, <code>function_call_output</code>,{" "}
          <code>item_reference</code> (an output item of a stored response) and{" "}
          <code>reasoning</code> (Claude's, sealed in its{" "}
          <code>encrypted_content</code>, goes back to Claude; any other is dropped). Files by{" "}
          <code>file_id</code> or <code>file_url</code> and the other item types are{" "}
          <code>400 unsupported_parameter</code>.
        </li>
        <li>
          <strong>Fields:</strong> <code>instructions</code>, function <code>tools</code>{" "}
          (Responses' flat shape), <code>tool_choice</code>, <code>parallel_tool_calls</code>,{" "}
          <code>max_output_tokens</code>, <code>text.format</code> (text, json_object, json_schema),
          {" "}
          <code>text.verbosity</code>, <code>reasoning.effort</code>, <code>temperature</code>,{" "}
          <code>top_p</code>, <code>metadata</code>, <code>user</code>, <code>store</code>,{" "}
          <code>previous_response_id</code>, <code>stream</code>, <code>max_tool_calls</code>{" "}
          (taken, and sent nowhere: it bounds built-in tools, and only function tools are served);
          {" "}
          <code>conversation</code> and <code>prompt</code> (state kept at OpenAI) are{" "}
          <code>400 unsupported_parameter</code>. Errors name the field by its Responses path
          (<code>
            input[2].content[0].image_url
          </code>, <code>max_output_tokens</code>).
        </li>
        <li>
          <strong>Streaming</strong> (<code>stream: true</code>): named events in OpenAI's order:
          {" "}
          <code>response.created</code>, <code>response.in_progress</code>, then per output item
          {" "}
          <code>response.output_item.added</code>, <code>response.content_part.added</code>,{" "}
          <code>response.output_text.delta</code> (or{" "}
          <code>response.function_call_arguments.delta</code>), their <code>.done</code> events and
          {" "}
          <code>response.output_item.done</code>, and last <code>response.completed</code> (or{" "}
          <code>response.incomplete</code> when the output cap was reached) with <code>usage</code>
          {" "}
          (<code>input_tokens_details.cached_tokens</code>, <code>cache_write_tokens</code>{" "}
          when the provider wrote its cache,{" "}
          <code>output_tokens_details.reasoning_tokens</code>) and{" "}
          <code>usage.cost</code>, what left the wallet. A stream the provider cuts ends with{" "}
          <code>error</code> (<code>stream_interrupted</code>) and{" "}
          <code>response.failed</code>; what was produced is charged, as for chat.
        </li>
        <li>
          <strong>Stored responses:</strong> as at OpenAI, <code>store</code>{" "}
          defaults to true. A stored response (its conversation and output) is kept 30 days, per
          app, so that <code>previous_response_id</code> continues it and{" "}
          <code>item_reference</code>{" "}
          sends an earlier answer back by its id (the AI SDK does so on every later turn).{" "}
          <code>store: false</code>{" "}
          keeps nothing; an id that is not stored (never, expired, or another app's) is{" "}
          <code>400 invalid_parameter</code>{" "}
          naming the field. A response over 8 MiB is answered but not stored (its <code>store</code>
          {" "}
          says false). <code>instructions</code>{" "}
          are not carried over to the next turn, as at OpenAI. <code>responses.retrieve</code>,{" "}
          <code>responses.delete</code> and <code>responses.inputItems.list</code>{" "}
          read back or delete the app's stored responses, free; <code>responses.cancel</code>{" "}
          is 404, as background responses are refused.
        </li>
      </ul>
    </DocsLayout>,
  );
}
