import { Layout } from "@/components/Layout.tsx";
import { renderPage } from "@/routes/render.ts";

export function homePage(publicUrl: string): string {
  return renderPage(
    <Layout title="Pay-as-you-go LLM gateway">
      <h1>One API, many models, paid from your app's wallet</h1>
      <p>
        Tollbooth speaks the OpenAI chat-completions format at{" "}
        <code>{publicUrl}/v1</code>. Every request is paid from your app's USD wallet: reserved
        before the model runs, settled to the exact usage after, to the micro-dollar. New apps start
        with 5.00 USD of credits.
      </p>
      <p>
        <a class="button" href="/signup">Create an account</a>{" "}
        to get an app, its API keys and its wallet; or <a href="/signin">sign in</a>.
      </p>
      <pre><code>{`curl ${publicUrl}/v1/chat/completions \\
  -H "Authorization: Bearer $TOLLBOOTH_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{"model": "tollbooth/echo", "messages": [{"role": "user", "content": "Hello"}]}'`}</code></pre>
      <p>
        See the <a href="/models">models and prices</a> and the{" "}
        <a href="/docs/errors">error reference</a>.
      </p>
    </Layout>,
  );
}
