/**
 * The code examples of the docs, read from docs/examples/ so that the page shows exactly the files
 * that tests/docs_examples_test.ts runs against a live service.
 */
export const EXAMPLE_FILES = {
  curl: "curl.sh",
  openai: "openai.mjs",
  openaiStream: "openai-stream.mjs",
  openaiPdf: "openai-pdf.mjs",
  python: "python-openai.py",
  aiSdk: "ai-sdk.mjs",
  management: "management.mjs",
  webhookVerify: "webhook-verify.mjs",
} as const;

export type Examples = Record<keyof typeof EXAMPLE_FILES, string>;

const DIR = new URL("../../docs/examples/", import.meta.url);

let loaded: Promise<Examples> | null = null;

export function loadExamples(): Promise<Examples> {
  loaded ??= (async () => {
    const entries = await Promise.all(
      Object.entries(EXAMPLE_FILES).map(async ([name, file]) =>
        [name, await Deno.readTextFile(new URL(file, DIR))] as const
      ),
    );
    return Object.fromEntries(entries) as Examples;
  })();
  return loaded;
}
