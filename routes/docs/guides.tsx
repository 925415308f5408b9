import { CodeBlock, DocsLayout } from "@/components/DocsLayout.tsx";
import { DEFAULT_MAX_TOKENS, PROVIDER_FAILURES } from "@/lib/gateway/mod.ts";
import {
  type Config,
  formatUsd,
  parsePricePerMTok,
  REQUEST_LOG_FIELDS,
  tokensCost,
} from "@/lib/core/mod.ts";
import { ADMIN_COMMANDS, RATE_LIMIT_HEADERS } from "@/lib/ops/mod.ts";
import { renderPage } from "@/routes/render.ts";
import type { Examples } from "./examples.ts";
import { DialectSection } from "./dialect.tsx";

/** GET /docs: from an API key to a paid request, in each client people use. */
export function quickStartPage(publicUrl: string, apiVersion: string, examples: Examples) {
  return renderPage(
    <DocsLayout title="Quick start" path="/docs">
      <h1>Quick start</h1>
      <p>
        Tollbooth speaks the OpenAI chat-completions format. Point any OpenAI client at{" "}
        <code>{publicUrl}/v1</code>, authenticate with your app's API key, and every request is paid
        from your app's USD wallet. New apps start with 5.00 USD of credits.
      </p>
      <ol>
        <li>
          Get an API key for your app: <a href="/signup">sign up</a>, create an app in the{" "}
          <a href="/dashboard">dashboard</a>, and copy its key (shown once; keep it server-side,
          never in a browser or a mobile app).
        </li>
        <li>
          Pick a model ID from the <a href="/models">models page</a>, such as{" "}
          <code>tollbooth/echo</code> (the built-in simulator, which answers with your message).
        </li>
        <li>
          Read two headers on each response: <code>Tollbooth-Request-Cost</code>{" "}
          (exactly what this request took from the wallet, in USD) and{" "}
          <code>Tollbooth-Balance</code> (the wallet after it).
        </li>
        <li>
          Handle <code>402 insufficient_credits</code>: the body's <code>top_up_url</code>{" "}
          is your app's hosted top-up page. Send your user there; the next request works as soon as
          they have paid.
        </li>
      </ol>
      <p>
        Each example below reads <code>TOLLBOOTH_API_KEY</code> and <code>TOLLBOOTH_URL</code>{" "}
        (default <code>http://localhost:8000</code>, a local{" "}
        <code>deno task dev</code>) from the environment; for this service, set them first. The Node
        examples and the curl one are run against a live Tollbooth by our test suite, exactly as
        shown.
      </p>
      <CodeBlock
        caption="environment"
        code={`export TOLLBOOTH_URL=${publicUrl}\nexport TOLLBOOTH_API_KEY=tb_…  # your app's API key`}
      />

      <h2 id="curl">curl</h2>
      <CodeBlock caption="curl.sh" code={examples.curl} />
      <p>
        The headers come first (<code>-i</code>). On a 402, the JSON body carries{" "}
        <code>error.balance</code> and <code>error.top_up_url</code>; with jq:{" "}
        <code>… | jq -r .error.top_up_url</code>.
      </p>

      <h2 id="openai-node">Node: the openai package</h2>
      <CodeBlock caption="openai.mjs" code={examples.openai} />
      <p>
        <code>.withResponse()</code>{" "}
        returns the parsed completion and the raw response, whose headers carry the cost and the
        balance. A 402 is an <code>OpenAI.APIError</code> whose <code>error</code>{" "}
        is the body's error object.
      </p>

      <h3 id="openai-node-stream">Streaming</h3>
      <CodeBlock caption="openai-stream.mjs" code={examples.openaiStream} />
      <p>
        A stream's cost is known only at its end, so it has no <code>Tollbooth-Request-Cost</code>
        {" "}
        header: ask for <code>stream_options.include_usage</code> and read <code>usage.cost</code>
        {" "}
        in the last chunk. Its <code>Tollbooth-Balance</code>{" "}
        is the balance after the reservation; the unused part of the reservation comes back when the
        stream ends.
      </p>

      <h3 id="openai-node-pdf">PDFs</h3>
      <CodeBlock caption="openai-pdf.mjs" code={examples.openaiPdf} />
      <p>
        A PDF goes as a <code>file</code>{" "}
        part with the file as a data URL. Its provider counts the request before the call and the
        reservation holds that count, so a PDF is taken by the models whose provider can count it
        (see <a href="/docs#dialect-pdf">PDFs</a>); the simulator bills 1,000 tokens a page.
      </p>

      <h2 id="python">Python: the openai package</h2>
      <CodeBlock caption="python-openai.py" code={examples.python} />
      <p>
        <code>with_raw_response</code> exposes the headers; a 402 raises{" "}
        <code>openai.APIStatusError</code> whose <code>body</code> is the error object.
      </p>

      <h2 id="ai-sdk">Vercel AI SDK</h2>
      <CodeBlock caption="ai-sdk.mjs" code={examples.aiSdk} />
      <p>
        <code>response.headers</code> of <code>generateText</code>{" "}
        carries Tollbooth's headers (lower-cased). A 402 is an <code>APICallError</code>{" "}
        with the JSON body in{" "}
        <code>responseBody</code>. The SDK does not retry a 402; it does retry 429 and 5xx.
      </p>
      <p>
        The SDK decides from a model's id whether it reasons, and an id such as{" "}
        <code>openai/o4-mini</code> is not one it knows: it drops <code>reasoningEffort</code>{" "}
        with a warning. For a reasoning model pass <code>forceReasoning: true</code> beside it in
        {" "}
        <code>providerOptions.openai</code>; the reasoning the model shows comes back as the SDK's
        reasoning parts.
      </p>

      <DialectSection />

      <h2 id="next">Next</h2>
      <ul>
        <li>
          <a href="/docs/billing">How billing works</a>: what a request, a stream or a disconnect
          costs, and the rounding rule.
        </li>
        <li>
          <a href="/docs/errors">Errors</a>: every code with its status, cause and fix. Branch on
          {" "}
          <code>error.code</code>, and quote <code>Tollbooth-Request-Id</code> to support.
        </li>
        <li>
          <a href="/docs/rate-limits">Rate limits</a> and <a href="/docs/versioning">versioning</a>
          {" "}
          (the current version is <code>{apiVersion}</code>).
        </li>
        <li>
          <a href="/docs/endpoints">Endpoints</a>: the models list and embeddings, on the same key
          and wallet.
        </li>
        <li>
          <a href="/openapi.json">The OpenAPI 3.1 document</a>{" "}
          of every endpoint, for code generators and API tools.
        </li>
      </ul>
    </DocsLayout>,
  );
}

/** GET /docs/billing: reserve, settle, streams, disconnects, the rounding rule. */
export function billingPage() {
  const input = parsePricePerMTok("0.15");
  const output = parsePricePerMTok("0.60");
  const example = { prompt: 1234, completion: 567, maxTokens: 1000 };
  const exact = `${example.prompt} × 0.15 + ${example.completion} × 0.60 = ${
    (example.prompt * 15 + example.completion * 60) / 100
  } µUSD`;
  const cost = tokensCost(example.prompt, example.completion, input, output);
  const reservation = tokensCost(example.prompt, example.maxTokens, input, output);
  return renderPage(
    <DocsLayout title="How billing works" path="/docs/billing">
      <h1>How billing works</h1>
      <p>
        Every request is paid from your app's wallet, in US dollars, exact to the micro-dollar
        (0.000001 USD). Amounts in headers and bodies are decimal strings with six decimals, such as
        {" "}
        <code>"4.998214"</code>. Prices are USD per million tokens, listed on the{" "}
        <a href="/models">models page</a>.
      </p>

      <h2 id="reserve">1. Reserve</h2>
      <p>
        Before the model runs, the wallet reserves the most the request can cost: an upper bound of
        the input the provider will bill, at the dearest price it may bill input at, plus{" "}
        <code>max_tokens</code>{" "}
        at the output price. The dearest input price is the cache-write price where the provider
        writes caches (Anthropic; OpenAI from GPT-5.6 on), the hour-long write price when a request
        asks for an hour's cache, and the long-context prices (below) when the bound passes the
        model's long-context size. Without <code>max_tokens</code>, the reservation uses{" "}
        {DEFAULT_MAX_TOKENS}{" "}
        tokens (or the model's maximum output, when lower). The input counts everything the provider
        bills as input: message text and names, tool calls and results, tool definitions, the
        response schema, and images by the provider's published rule (OpenAI: 85 tokens plus 170 per
        512-px tile after its scaling, 85 at low detail, on GPT-4o and its like; GPT-4o mini and the
        mini and nano models by their own figures, the latter up to 3,779 an image at any detail; a
        model without a known rule at the image's own 32-px patches, 2.46 tokens each, where more;
        Anthropic: 100 per image block plus width × height / 750, or its 28-px patches where more,
        after fitting 1568 px, or 2576 px from Opus 4.7 on; an https image whose size is unknown
        counts the most an image can cost). OpenAI-kind text is counted with the o200k tokenizer
        plus the chat framing; Anthropic-kind text with an upper bound of Claude's tokenizers. A
        {" "}
        <code>prediction</code>'s tokens are held as output too.
      </p>
      <p>
        Claude's tokenizers are not published, so the bound for Anthropic-kind text is pessimistic
        (English prose is held at about 3.8 times its real count). When that bound would not fit
        your balance, or would take more than half of it, Tollbooth asks Anthropic's free{" "}
        <code>count_tokens</code>{" "}
        endpoint for the exact count first and reserves that (plus 2% and 32 tokens) instead: an
        honest prompt is not refused because the estimate was cautious.
      </p>
      <p>
        When the balance cannot cover the reservation, the request is refused with{" "}
        <a href="/docs/errors#insufficient_credits">
          <code>402 insufficient_credits</code>
        </a>, carrying <code>balance</code> and{" "}
        <code>top_up_url</code>, and nothing changes. A smaller <code>max_tokens</code>{" "}
        makes a smaller reservation: an app with little credit left can still make short requests.
      </p>

      <h2 id="settle">2. Settle</h2>
      <p>
        When the model is done, the reservation is settled to the actual usage (as reported by the
        provider, or counted by Tollbooth when it reports none), and the rest of the reservation
        goes back to the balance. <code>Tollbooth-Request-Cost</code>{" "}
        is exactly what left the wallet; <code>Tollbooth-Balance</code> is the wallet after it.
      </p>

      <h2 id="rounding">The rounding rule</h2>
      <p>
        A request's cost is summed exactly over every usage component at its own price, then rounded
        {" "}
        <strong>up, once</strong>, to the next micro-dollar. Never per token, never twice. The
        components: fresh input at the input price, cached input (OpenAI's{" "}
        <code>cached_tokens</code>, Anthropic's cache reads) at the model's cache-read price, input
        written to the provider's cache (Anthropic's cache writes, and OpenAI's{" "}
        <code>cache_write_tokens</code>{" "}
        from GPT-5.6 on) at its cache-write price (Anthropic's hour-long writes at the hour's
        price), and output, reasoning included, at the output price. A model without cache prices
        bills cached input at the input price.
      </p>
      <p id="long-context">
        Some models cost more per token once a request is large: the{" "}
        <a href="/models">models page</a>{" "}
        shows their long-context size and prices. A request whose input (cached input included)
        passes that size costs every token at the long-context prices, output included, as the
        provider bills it; its reservation uses them whenever the input's upper bound passes the
        size.
      </p>
      <p>
        Example, at 0.15 USD input and 0.60 USD output per million tokens, with {example.prompt}
        {" "}
        prompt tokens, {example.completion} completion tokens and{" "}
        <code>max_tokens: {example.maxTokens}</code>:
      </p>
      <ul>
        <li>
          reservation: {example.prompt} × 0.15 + {example.maxTokens} × 0.60, rounded up ={" "}
          <code>{formatUsd(reservation)}</code> USD
        </li>
        <li>
          cost: {exact}, rounded up = <code>{formatUsd(cost)}</code> USD
        </li>
        <li>
          given back when settling: <code>{formatUsd(reservation - cost)}</code> USD
        </li>
      </ul>

      <h2 id="streams">Streams and disconnects</h2>
      <ul>
        <li>
          A stream is settled when it ends, to what it produced. Its 200 response carries{" "}
          <code>Tollbooth-Balance</code>{" "}
          after the reservation; the exact cost is in the last chunk's <code>usage.cost</code>{" "}
          when you send <code>stream_options: {"{"}"include_usage": true{"}"}</code>.
        </li>
        <li>
          A stream the provider cuts is charged for what was produced before the cut, and ends with
          an error event instead of <code>[DONE]</code>.
        </li>
        <li>
          A client that disconnects from a stream (or stops reading it) stops it: the model is
          stopped and only what was produced until then is charged, tool-call arguments and
          reasoning text included.
        </li>
        <li>
          Except where the provider bills work the stream does not show: OpenAI's reasoning models
          (the o-series and GPT-5, or a catalog model flagged as one, or any request with{" "}
          <code>reasoning_effort</code>) never stream their reasoning, and Claude's extended
          thinking streams a summary while the full thinking is billed. Such a stream is not stopped
          when you leave: Tollbooth reads it to its end (at most <code>max_tokens</code>{" "}
          of output, which the reservation covers) and charges the provider's usage, hidden
          reasoning included. Cancelling such a request saves nothing; a smaller{" "}
          <code>max_tokens</code> or <code>reasoning_effort</code> does.
        </li>
        <li>
          A client that disconnects from a non-streamed request does not stop it: the provider's
          work is done either way, so it is finished and charged.
        </li>
        <li>
          A non-streamed request is served from a streamed call to the provider, assembled into one
          completion, so the provider's timeout measures silence, not the answer's length: a long
          answer is never cut for being long. If the provider breaks off after it began answering,
          the request fails with{" "}
          <a href="/docs/errors#upstream_interrupted">
            <code>502 upstream_interrupted</code>
          </a>{" "}
          and what was produced is charged (the provider bills it); its{" "}
          <code>Tollbooth-Request-Cost</code> header says how much. It also says{" "}
          <code>x-should-retry: false</code>, so the official OpenAI and Anthropic SDKs do not run
          it again by themselves (a run is charged each time); the Vercel AI SDK and LangChain retry
          every 5xx, so send an <code>Idempotency-Key</code>{" "}
          with such requests: a repeat replays the 502 and is not charged.
        </li>
        <li>
          A stream's 200 is sent only once the provider has answered, so a refused request gets its
          real status (400, 402, 502), never a 200 followed by an error.
        </li>
      </ul>

      <h2 id="free">What costs nothing</h2>
      <ul>
        <li>
          Every 4xx refusal (bad request, bad key, no credit, rate limit): nothing is reserved.
        </li>
        <li>
          <code>502 provider_unreachable</code>, a provider's own 429 and a provider's refusal (
          <code>upstream_rejected</code>): the reservation is released whole.
        </li>
        <li>
          A request cut by the shutdown of a Tollbooth instance: its reservation is released whole
          once its lease runs out (10 minutes by default).
        </li>
      </ul>

      <h2 id="idempotency">Safe retries: Idempotency-Key</h2>
      <p>
        A request that timed out on your side may still have run and been charged. Send an{" "}
        <code>Idempotency-Key</code>{" "}
        header (a UUID per distinct request, 1 to 255 visible ASCII characters) and retry with the
        same key: it is never run or charged twice.
      </p>
      <pre><code>{`curl $BASE/v1/chat/completions -H "Authorization: Bearer $API_KEY" \\
  -H "Content-Type: application/json" -H "Idempotency-Key: 6f1c…-order-42" \\
  -d '{"model": "tollbooth/echo", "messages": [{"role": "user", "content": "Hi"}]}'`}</code></pre>
      <ul>
        <li>
          The first request runs and is charged. A repeat with the same key and the same body
          (compared as canonical JSON: key order and spacing do not matter) within 24 hours gets the
          same status and body, <code>Tollbooth-Request-Cost</code> and{" "}
          <code>Tollbooth-Balance</code> as they were then, and{" "}
          <code>Idempotent-Replayed: true</code>; nothing runs and nothing is charged. It has its
          own <code>Tollbooth-Request-Id</code>; <code>Tollbooth-Original-Request-Id</code>{" "}
          names the request that ran.
        </li>
        <li>
          Keys are private to the API key that sends them: two API keys of one app (a reseller's
          customers, say) never replay or block each other's requests. A key that replaced a rotated
          one shares the old key's, so a retry sent with the new secret is replayed, not charged
          again.
        </li>
        <li>
          The same key on another endpoint, or with another body:{" "}
          <code>422 idempotency_key_reused</code>. A repeat while the first is still running:{" "}
          <code>409 idempotency_key_in_use</code> (retry a moment later to get the answer).
        </li>
        <li>
          Answers up to 8 MiB are recorded (the server's{" "}
          <code>IDEMPOTENCY_REPLAY_MAX_BYTES</code>; every chat answer fits, a large batch of float
          embeddings may not). A larger one is answered once and recorded as too large: a repeat
          gets <code>422 idempotency_replay_too_large</code>{" "}
          naming the request that ran, and is neither run nor charged.
        </li>
        <li>
          Answers that were charged are recorded: every success, and a{" "}
          <code>502 upstream_interrupted</code>, which charged what the provider had produced (its
          <code>Tollbooth-Request-Cost</code>{" "}
          says so); a retry gets it again. Any other failure (400, 402, 429, 502, 500) charged
          nothing, so its key is free again and a retry with it runs afresh: retrying such a 502 or
          a 429 with the same key does what you want.
        </li>
        <li>
          Streams are not replayed: <code>stream: true</code> with a key is{" "}
          <code>400 idempotency_key_with_stream</code>. A stream is delivered live as the model
          produces it; send streams without the key, or non-streamed when a retry must not run
          twice.
        </li>
        <li>
          If a Tollbooth instance dies while running the first request, the key stays in use (409)
          until the request's hold lease has passed (10 minutes by default). Then a retry runs it,
          unless the first request had been charged before the instance died: that retry gets 422
          {" "}
          <code>idempotency_answer_lost</code>{" "}
          with the first request's id and cost, and is neither run nor charged again.
        </li>
      </ul>

      <h2 id="guarantees">Guarantees</h2>
      <ul>
        <li>
          A wallet is never overdrawn, whatever the concurrency and however many Tollbooth instances
          serve it.
        </li>
        <li>
          The reservation is meant to be an upper bound of the provider's bill. If a provider
          reports more usage than the reservation covers (it counted the prompt differently), the
          difference is taken from the balance down to zero, never below. What the reservation and
          the balance together cannot cover is{" "}
          <em>uncharged</em>: it is not taken and never becomes a debt. It is recorded, never
          silent. The dashboard shows it on the app's wallet page and in a “Not charged” column of
          its usage page. Operators see it per request as <code>uncharged</code>{" "}
          in the log line and the usage record, per app in{" "}
          <code>deno task admin show-app</code>, and for the whole service in{" "}
          <code>deno task admin audit</code> and the{" "}
          <code>tollbooth_uncharged_micro_usd_total</code> metric.
        </li>
        <li>
          Per app, at every moment: available + reserved + spent = starter credits + top-ups +
          operator credits. Operators check it with{" "}
          <code>deno task admin audit</code>. Uncharged usage left no wallet, so it is outside this
          sum.
        </li>
      </ul>
    </DocsLayout>,
  );
}

/** GET /docs/rate-limits */
export function rateLimitsPage(
  config: Pick<Config, "rateLimitRpm" | "rateLimitTpm" | "managementRateLimitRpm">,
) {
  return renderPage(
    <DocsLayout title="Rate limits" path="/docs/rate-limits">
      <h1>Rate limits</h1>
      <p>
        Each API key and each app may send a number of requests and of tokens per minute; the
        tighter limit wins. On this deployment the defaults are{" "}
        <strong>{config.rateLimitRpm.toLocaleString("en-US")} requests</strong> and{" "}
        <strong>{config.rateLimitTpm.toLocaleString("en-US")} tokens</strong>{" "}
        per minute (the operator's <code>RATE_LIMIT_RPM</code> and{" "}
        <code>RATE_LIMIT_TPM</code>; an app may have its own limits). The limits are shared by all
        instances of the service.
      </p>
      <p>
        Tokens count when a request starts as its reservation does (the prompt plus{" "}
        <code>max_tokens</code>), and are corrected to the actual usage when it is settled. A burst
        of requests with large <code>max_tokens</code> is therefore limited before it runs.
      </p>

      <h2 id="headers">Headers</h2>
      <p>Every authenticated response, successes and errors alike, carries:</p>
      <table>
        <thead>
          <tr>
            <th scope="col">Header</th>
            <th scope="col">Meaning</th>
          </tr>
        </thead>
        <tbody>
          {Object.entries(RATE_LIMIT_HEADERS).map(([name, meaning]) => (
            <tr>
              <td>
                <code>{name}</code>
              </td>
              <td>{meaning.replace(/`/g, "")}</td>
            </tr>
          ))}
        </tbody>
      </table>

      <h2 id="429">When a limit is exceeded</h2>
      <p>
        The request gets{" "}
        <a href="/docs/errors#rate_limit_exceeded">
          <code>429 rate_limit_exceeded</code>
        </a>{" "}
        with{" "}
        <code>Retry-After</code>: the whole seconds until the window lets it through. Nothing is
        reserved or charged. Wait that long, then retry; the openai and AI SDK clients do so by
        themselves.
      </p>
      <p>
        Two other answers are not your app's limit: <code>402 insufficient_credits</code>{" "}
        is about money (top up, waiting does not help), and{" "}
        <a href="/docs/errors#upstream_rate_limited">
          <code>429 upstream_rate_limited</code>
        </a>{" "}
        means the model's provider is limiting Tollbooth (its <code>Retry-After</code>{" "}
        is passed on; another model may answer at once).
      </p>
      <p>
        The management API is limited apart: an account's management keys may make{" "}
        {config.managementRateLimitRpm.toLocaleString("en-US")}{" "}
        requests a minute between them, shown in the same <code>x-ratelimit-*-requests</code>{" "}
        headers (<a href="/docs/management#rate-limit">details</a>), and they never count against an
        app's limits.
      </p>
    </DocsLayout>,
  );
}

/** GET /docs/versioning */
export function versioningPage(apiVersion: string) {
  return renderPage(
    <DocsLayout title="Versioning" path="/docs/versioning">
      <h1>Versioning</h1>
      <ul>
        <li>
          The API version is a date. The current and only version is <code>{apiVersion}</code>.
        </li>
        <li>
          Every response, errors included, carries{" "}
          <code>Tollbooth-Version: {apiVersion}</code>, the version that served it.
        </li>
        <li>
          The base address carries the prefix <code>/v1</code>.
        </li>
        <li>
          A request to any <code>/v1</code> endpoint, the management API's included, may send a{" "}
          <code>Tollbooth-Version</code>{" "}
          header. Today it must be the current version; any other value is refused with{" "}
          <a href="/docs/errors#unsupported_version">
            <code>400 unsupported_version</code>
          </a>{" "}
          before anything is reserved.
        </li>
        <li>
          When a breaking change ships, it ships under a new date. You will pin a version per
          request with the <code>Tollbooth-Version</code>{" "}
          header, and integrations that do not change keep their behaviour. Changes that break
          nothing (a new model, a new optional field, a new header) come without a new version.
        </li>
      </ul>
      <p>Pinning now costs nothing, and documents what your code was written against:</p>
      <CodeBlock
        caption="openai (Node)"
        code={`const client = new OpenAI({
  baseURL: "https://your-tollbooth.example/v1",
  apiKey: process.env.TOLLBOOTH_API_KEY,
  defaultHeaders: { "Tollbooth-Version": "${apiVersion}" },
});`}
      />
    </DocsLayout>,
  );
}

/** GET /docs/operations: for whoever runs Tollbooth. */
export function operationsPage() {
  return renderPage(
    <DocsLayout title="Running Tollbooth" path="/docs/operations">
      <h1>Running Tollbooth</h1>
      <p>
        Tollbooth is one Deno program (<code>main.ts</code>) on Deno KV. Every instance is
        stateless: wallets, reservations, keys and rate limits live in KV, so any number of
        instances on one KV behave as one service: one wallet per app, never overdrawn, a revoked
        key refused by all at once.
      </p>

      <h2 id="deno-deploy">On Deno Deploy</h2>
      <ul>
        <li>
          Entry point <code>main.ts</code>, build command <code>deno task build</code>{" "}
          (bundles the browser islands). <code>deno.json</code> enables the <code>kv</code> and{" "}
          <code>cron</code> APIs.
        </li>
        <li>
          KV: leave <code>KV_PATH</code>{" "}
          unset; the deployment's own KV is used. Cron: the sweep of expired reservations is
          registered with <code>Deno.cron</code> at the top level of{" "}
          <code>main.ts</code>, so Deploy runs it every minute.
        </li>
        <li>
          Set <code>PUBLIC_URL</code> (base of <code>top_up_url</code> and{" "}
          <code>doc_url</code>), the provider keys named in the catalog (<code>OPENAI_API_KEY</code>
          …), <code>METRICS_TOKEN</code>, and optionally <code>RATE_LIMIT_RPM</code>,{" "}
          <code>RATE_LIMIT_TPM</code>, <code>RESERVATION_TTL_SECONDS</code>. <code>PORT</code>{" "}
          and signals are Deploy's business; an instance that Deploy stops mid-request leaves its
          reservations to the sweeper.
        </li>
        <li>
          Latency: Deploy's KV serves strongly consistent reads and every commit from its primary
          region. Tollbooth's money path is strong by design (key lookup, reserve, settle: a few
          round trips per request), so run the deployment in, or next to, the KV's primary region;
          instances far from it pay that distance on each of those round trips.
        </li>
      </ul>

      <h2 id="self-hosting">Self-hosting, one or many machines</h2>
      <ul>
        <li>
          One machine: <code>deno task start</code>. KV is a SQLite file (
          <code>KV_PATH</code>, default{" "}
          <code>./data/tollbooth.sqlite3</code>). It serves with one worker per core (
          <code>SERVE_WORKERS</code>, default <code>auto</code>{" "}
          on Linux): threads in one process, each with its own event loop, on one port. Several
          processes on the same machine may share that file too (<code>REUSE_PORT=on</code>{" "}
          to share a port).
        </li>
        <li>
          Several machines: run a <code>denokv</code> server (
          <code>denokv --sqlite-path /data/kv.sqlite3 serve --access-token $TOKEN</code>) and point
          every instance at it with <code>KV_PATH=http://denokv-host:4512</code> and{" "}
          <code>DENO_KV_ACCESS_TOKEN=$TOKEN</code>. Put the instances behind any HTTP load balancer
          that checks <code>/readyz</code>.
        </li>
        <li>
          What changes: every KV operation becomes an HTTP round trip to the denokv server (keep it
          close: same network, low single-digit milliseconds), and denokv is a single writer, so
          every read is strong. KV queues do not work over this connection; Tollbooth uses none
          (reservations are swept by <code>Deno.cron</code>{" "}
          and a timer in each process, and at once when an app would otherwise be refused for
          credits). denokv allows 10 checks per atomic operation; Tollbooth stays within that.
        </li>
        <li>
          Each process sweeps expired reservations on its own; a reservation is released once,
          whichever process gets there first (each release is decided inside the wallet's commit).
        </li>
      </ul>

      <h2 id="shutdown">Restarts and shutdown</h2>
      <p>
        On <code>SIGTERM</code> or <code>SIGINT</code>, an instance answers <code>503</code> on{" "}
        <code>/readyz</code>, stops accepting connections, lets the requests in flight (streams
        included) finish and settle for up to <code>SHUTDOWN_GRACE_MS</code>{" "}
        (default 10000), then exits 0. A request still running at that deadline is cut; its
        reservation stays with its lease (<code>RESERVATION_TTL_SECONDS</code>, default 600) and the
        sweeper of any instance releases it whole. A second signal exits at once. For rolling
        deploys, set the orchestrator's grace period a little above <code>SHUTDOWN_GRACE_MS</code>.
      </p>

      <h2 id="health">Health</h2>
      <ul>
        <li>
          <code>GET /healthz</code>: 200 while the process serves HTTP (liveness).
        </li>
        <li>
          <code>GET /readyz</code>: 200 when KV answers a strong read within 2 s, the model catalog
          is loaded and the instance is not shutting down; otherwise 503 with the failing check
          (readiness). A KV failure reads <code>"error"</code>{" "}
          there, as anyone may ask; its own words are in the log line{" "}
          <code>readiness_kv_failed</code>.
        </li>
      </ul>

      <h2 id="metrics">Metrics</h2>
      <p>
        <code>GET /metrics</code> serves Prometheus text. Set <code>METRICS_TOKEN</code>{" "}
        and scrape with <code>Authorization: Bearer $METRICS_TOKEN</code>{" "}
        (compared in constant time). Without <code>METRICS_TOKEN</code>{" "}
        the endpoint does not exist (404), so a deployment that forgot it exposes nothing; a wrong
        or missing token gets 401.
      </p>
      <ul>
        <li>
          <code>tollbooth_http_requests_total{"{status}"}</code>,{" "}
          <code>tollbooth_chat_completions_total{"{model,status,streamed}"}</code>
        </li>
        <li>
          <code>tollbooth_chat_completion_duration_seconds</code> (to the end of a stream) and{" "}
          <code>tollbooth_upstream_duration_seconds</code> (until the provider answered): histograms
        </li>
        <li>
          <code>tollbooth_upstream_failures_total{"{provider,kind}"}</code>, kind one of:
          <ul>
            {Object.entries(PROVIDER_FAILURES).map(([kind, meaning]) => (
              <li>
                <code>{kind}</code>: {meaning}
              </li>
            ))}
          </ul>
        </li>
        <li>
          <code>tollbooth_tokens_total{"{model,kind}"}</code>,{" "}
          <code>tollbooth_charged_micro_usd_total{"{model}"}</code>
        </li>
        <li>
          <code>tollbooth_reservations_outstanding</code>,{" "}
          <code>tollbooth_reservations_outstanding_micro_usd</code>,{" "}
          <code>tollbooth_reservations_expired</code>: read from KV at scrape time, so every
          instance reports the whole service (a bounded scan of 10,000 reservations;{" "}
          <code>tollbooth_reservations_scan_truncated</code> says when it was cut)
        </li>
        <li>
          <code>tollbooth_wallet_commits_total</code>, <code>_conflicts_total</code>,{" "}
          <code>_unknown_outcomes_total</code>,{" "}
          <code>_ops_committed_total</code>: the wallet's group commit in this process (ops per
          commit shows the batching; conflicts come only from other instances)
        </li>
        <li>
          <code>tollbooth_wallet_slice_fallbacks_total</code>, <code>_slice_recalls_total</code>,
          {" "}
          <code>_slice_give_backs_total</code>: reserves of a hot app that took a commit of their
          own; reserves refused for money that other processes' slices of the wallet held, which
          asked for it back; and slices of this process that gave their free money back (a request
          the balance covers is never refused for a slice)
        </li>
      </ul>
      <p>
        Counters and histograms are per process (whichever worker of a process answers the scrape
        adds what the others counted): scrape every instance and sum in Prometheus. The reservation
        gauges are already service-wide: take one instance's value, not the sum.
      </p>

      <h2 id="logs">Logs</h2>
      <p>
        Each request writes exactly one JSON line on stdout with <code>"event": "request"</code>
        {" "}
        when it is done (for a stream: when it is settled):{" "}
        <code>{REQUEST_LOG_FIELDS.filter((f) => f !== "event").join(", ")}</code>. Amounts are
        micro-USD (<code>uncharged</code>: usage the reservation and the balance could not cover,
        never charged); fields that do not apply are{" "}
        <code>null</code>. The API key itself is never logged, only its id.{" "}
        <code>upstreamError</code> is what a failed provider said: its HTTP{" "}
        <code>status</code>, its error's <code>type</code>, <code>code</code> and{" "}
        <code>param</code>, and its <code>message</code>{" "}
        with every run of 8 or more characters that the request (or the answer so far) also holds
        replaced by{" "}
        <code>[n chars]</code>, cut to 200 characters: a provider quoting the prompt back puts none
        of it in the logs. Other lines (<code>
          listening
        </code>, <code>reservations_swept</code>,{" "}
        <code>shutting_down</code>, warnings and errors) carry an <code>event</code>{" "}
        of their own and, when they concern a request, its <code>requestId</code>.
      </p>

      <h2 id="admin">Admin commands</h2>
      <p>
        <code>deno task admin {ADMIN_COMMANDS.map((c) => c.name).join(" | ")}</code>{" "}
        work beside running instances on the same <code>KV_PATH</code> (and{" "}
        <code>DENO_KV_ACCESS_TOKEN</code>). A revocation is seen by every instance on the next
        request. <code>audit</code> exits non-zero when any wallet's money does not add up.{" "}
        <code>reset-password --email EMAIL</code>{" "}
        is how an owner who forgot the password gets back in (the service sends no email): it prints
        a new random password once and signs the owner out everywhere. The owner's management keys
        keep working unless it is given <code>--revoke-management-keys true</code>{" "}
        (for a password someone else may have had); the owner can also revoke them all from the
        Account page. <code>debit</code>{" "}
        takes back a refund or dispute the Stripe webhook could not, such as one in another currency
        (logged as <code>stripe_reversal_not_usd</code>, with the command to run in{" "}
        <code>settle</code>): once per{" "}
        <code>--reference</code>; without one, each run is a new debit. What the balance does not
        have is owed, as for any refund. If that refund fails or the dispute is won,{" "}
        <code>credit --reversal-of</code>{" "}
        with the same id gives back what the debit took, once, as the webhook does in USD (the
        command is in that event's <code>settle</code>).
      </p>
    </DocsLayout>,
  );
}
