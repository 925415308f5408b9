// npm install openai
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.TOLLBOOTH_URL ?? "http://localhost:8000"}/v1`,
  apiKey: process.env.TOLLBOOTH_API_KEY,
});

try {
  // withResponse() gives the HTTP response too, for Tollbooth's headers.
  const { data, response } = await client.chat.completions
    .create({
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "Hello from the openai package" }],
      max_tokens: 100,
    })
    .withResponse();
  console.log("answer:", data.choices[0].message.content);
  console.log("cost:", response.headers.get("tollbooth-request-cost"), "USD");
  console.log("balance:", response.headers.get("tollbooth-balance"), "USD");
} catch (err) {
  if (!(err instanceof OpenAI.APIError) || err.status !== 402) throw err;
  if (err.code === "insufficient_credits") {
    // The wallet cannot cover the request: send your user to the app's top-up page.
    console.log("top up at:", err.error.top_up_url, `(balance ${err.error.balance} USD)`);
  } else {
    // A spend cap on this key or on the end user: key_spend_cap_exceeded, user_spend_cap_exceeded.
    console.log(`${err.code}: ${err.error.remaining} USD left under the ${err.error.cap} cap`);
  }
}
