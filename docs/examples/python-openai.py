# pip install openai
import os

import openai

client = openai.OpenAI(
    base_url=os.environ.get("TOLLBOOTH_URL", "http://localhost:8000") + "/v1",
    api_key=os.environ["TOLLBOOTH_API_KEY"],
)

try:
    # with_raw_response gives the HTTP headers too; parse() gives the completion.
    raw = client.chat.completions.with_raw_response.create(
        model="tollbooth/echo",
        messages=[{"role": "user", "content": "Hello from Python"}],
        max_tokens=100,
    )
    completion = raw.parse()
    print("answer:", completion.choices[0].message.content)
    print("cost:", raw.headers.get("tollbooth-request-cost"), "USD")
    print("balance:", raw.headers.get("tollbooth-balance"), "USD")
except openai.APIStatusError as err:
    if err.status_code != 402:
        raise
    if err.body["code"] == "insufficient_credits":
        # The wallet cannot cover the request: send your user to the app's top-up page.
        print("top up at:", err.body["top_up_url"], f"(balance {err.body['balance']} USD)")
    else:
        # A spend cap on this key or on the end user: key_spend_cap_exceeded, user_spend_cap_exceeded.
        print(f"{err.body['code']}: {err.body['remaining']} USD left under the {err.body['cap']} cap")
