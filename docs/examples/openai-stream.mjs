// npm install openai
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.TOLLBOOTH_URL ?? "http://localhost:8000"}/v1`,
  apiKey: process.env.TOLLBOOTH_API_KEY,
});

try {
  const { data: stream, response } = await client.chat.completions
    .create({
      model: "tollbooth/echo",
      messages: [{ role: "user", content: "Hello from a stream" }],
      max_tokens: 100,
      stream: true,
      // The last chunk then carries the usage and the exact cost.
      stream_options: { include_usage: true },
    })
    .withResponse();
  // A stream's balance header is read after its reservation, before the model runs.
  console.log("balance before settling:", response.headers.get("tollbooth-balance"), "USD");
  let answer = "";
  for await (const chunk of stream) {
    answer += chunk.choices[0]?.delta?.content ?? "";
    if (chunk.usage) console.log("cost:", chunk.usage.cost, "USD");
  }
  console.log("answer:", answer);
} catch (err) {
  if (!(err instanceof OpenAI.APIError) || err.status !== 402) throw err;
  // A stream that cannot be paid gets a real 402 before any event, never a 200.
  if (err.code === "insufficient_credits") {
    console.log("top up at:", err.error.top_up_url, `(balance ${err.error.balance} USD)`);
  } else {
    // A spend cap on this key or on the end user: key_spend_cap_exceeded, user_spend_cap_exceeded.
    console.log(`${err.code}: ${err.error.remaining} USD left under the ${err.error.cap} cap`);
  }
}
