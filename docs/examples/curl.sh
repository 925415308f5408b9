# -i prints the headers first: Tollbooth-Balance, Tollbooth-Request-Cost, ...
curl -sS -i "${TOLLBOOTH_URL:-http://localhost:8000}/v1/chat/completions" \
  -H "Authorization: Bearer $TOLLBOOTH_API_KEY" \
  -H "Content-Type: application/json" \
  -d '{"model": "tollbooth/echo", "max_tokens": 100,
       "messages": [{"role": "user", "content": "Hello from curl"}]}'
