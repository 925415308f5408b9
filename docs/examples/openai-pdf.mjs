// npm install openai
// node openai-pdf.mjs report.pdf
import { readFile } from "node:fs/promises";
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.TOLLBOOTH_URL ?? "http://localhost:8000"}/v1`,
  apiKey: process.env.TOLLBOOTH_API_KEY,
});

const path = process.argv[2] ?? "report.pdf";
const pdf = await readFile(path);

try {
  // A Claude model, an OpenAI model (through its Responses API), or the built-in simulator.
  const { data, response } = await client.chat.completions
    .create({
      model: "tollbooth/echo",
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "Summarise this report." },
          {
            type: "file",
            file: {
              filename: path.split("/").at(-1),
              file_data: `data:application/pdf;base64,${pdf.toString("base64")}`,
            },
          },
        ],
      }],
      max_tokens: 300,
    })
    .withResponse();
  console.log("answer:", data.choices[0].message.content);
  console.log("prompt tokens:", data.usage.prompt_tokens);
  console.log("cost:", response.headers.get("tollbooth-request-cost"), "USD");
  console.log("balance:", response.headers.get("tollbooth-balance"), "USD");
} catch (err) {
  if (!(err instanceof OpenAI.APIError) || err.status !== 402) throw err;
  if (err.code === "insufficient_credits") {
    // The wallet cannot cover the PDF's counted tokens: send your user to the app's top-up page.
    console.log("top up at:", err.error.top_up_url, `(balance ${err.error.balance} USD)`);
  } else {
    // A spend cap on this key or on the end user: key_spend_cap_exceeded, user_spend_cap_exceeded.
    console.log(`${err.code}: ${err.error.remaining} USD left under the ${err.error.cap} cap`);
  }
}
