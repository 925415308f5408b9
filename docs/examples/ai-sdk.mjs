// npm install ai @ai-sdk/openai-compatible
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { APICallError, generateText } from "ai";

const tollbooth = createOpenAICompatible({
  name: "tollbooth",
  baseURL: `${process.env.TOLLBOOTH_URL ?? "http://localhost:8000"}/v1`,
  apiKey: process.env.TOLLBOOTH_API_KEY,
});

try {
  const { text, response } = await generateText({
    model: tollbooth("tollbooth/echo"),
    prompt: "Hello from the AI SDK",
    maxOutputTokens: 100,
  });
  console.log("answer:", text);
  console.log("cost:", response.headers["tollbooth-request-cost"], "USD");
  console.log("balance:", response.headers["tollbooth-balance"], "USD");
} catch (err) {
  if (!APICallError.isInstance(err) || err.statusCode !== 402) throw err;
  const { error } = JSON.parse(err.responseBody);
  if (error.code === "insufficient_credits") {
    // The wallet cannot cover the request: send your user to the app's top-up page.
    console.log("top up at:", error.top_up_url, `(balance ${error.balance} USD)`);
  } else {
    // A spend cap on this key or on the end user: key_spend_cap_exceeded, user_spend_cap_exceeded.
    console.log(`${error.code}: ${error.remaining} USD left under the ${error.cap} cap`);
  }
}
