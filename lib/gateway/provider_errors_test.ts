import assert from "node:assert/strict";
import { apiErrorOfUpstream } from "./provider_errors.ts";
import { ProviderError } from "./providers/types.ts";

Deno.test("an upstream rate limit is a 429-class upstream_rate_limited with its Retry-After", () => {
  const { error, failure } = apiErrorOfUpstream(
    new ProviderError("rate_limited", "slow down", { upstreamStatus: 429, retryAfterMs: 7000 }),
  );
  assert.equal(failure, "rate_limited");
  assert.equal(error.code, "upstream_rate_limited");
  assert.equal(error.headers?.["retry-after"], "7");
  assert.match(error.message, /Nothing was charged/);
});

Deno.test("a rejected request that overflows the context is context_length_exceeded on messages", () => {
  const { error } = apiErrorOfUpstream(
    new ProviderError("bad_request", "This model's maximum context length is 8192 tokens"),
  );
  assert.equal(error.code, "context_length_exceeded");
  assert.equal(error.param, "messages");
});

Deno.test("the upstream's error code decides a context overflow when it gives one", () => {
  const named = apiErrorOfUpstream(
    new ProviderError("bad_request", "Please reduce the length of the messages or completion.", {
      upstreamStatus: 400,
      upstreamError: {
        type: "invalid_request_error",
        code: "context_length_exceeded",
        param: null,
      },
    }),
  );
  assert.equal(named.error.code, "context_length_exceeded");
  const other = apiErrorOfUpstream(
    new ProviderError("bad_request", "Flagged: 'this memo is too long to read'", {
      upstreamStatus: 400,
      upstreamError: {
        type: "invalid_request_error",
        code: "content_policy_violation",
        param: null,
      },
    }),
  );
  assert.equal(other.error.code, "upstream_rejected");
});

Deno.test("without a code, words of the prompt the upstream quotes do not make a context overflow", () => {
  const prompt = "Summarize the context of this memo, it is too long";
  const { error } = apiErrorOfUpstream(
    new ProviderError("bad_request", `Refused: '${prompt}'`, { upstreamStatus: 400 }),
    () => [prompt],
  );
  assert.equal(error.code, "upstream_rejected");
  assert.match(error.message, /it is too long/, "the client still reads the upstream's words");
});

Deno.test("any other rejected request is upstream_rejected, quoting the upstream", () => {
  const { error } = apiErrorOfUpstream(new ProviderError("bad_request", "temperature too high"));
  assert.equal(error.code, "upstream_rejected");
  assert.match(error.message, /temperature too high/);
});

Deno.test("a rejection naming a field carries it as param", () => {
  const { error } = apiErrorOfUpstream(
    new ProviderError("bad_request", "Invalid value for 'temperature'", {
      upstreamStatus: 400,
      upstreamError: { type: "invalid_request_error", code: "invalid_value", param: "temperature" },
    }),
  );
  assert.equal(error.code, "upstream_rejected");
  assert.equal(error.param, "temperature");
});

Deno.test("refused credentials are provider_unreachable and say nothing of the credentials", () => {
  const { error, failure } = apiErrorOfUpstream(
    new ProviderError("upstream_auth", "invalid x-api-key sk-ant-secret"),
  );
  assert.equal(failure, "upstream_auth");
  assert.equal(error.code, "provider_unreachable");
  assert.doesNotMatch(error.message, /sk-ant|x-api-key/);
});

Deno.test("timeouts, 5xx, malformed answers and cuts are provider_unreachable naming the kind", () => {
  for (const kind of ["timeout", "upstream_error", "malformed_response", "stream_cut"] as const) {
    const { error } = apiErrorOfUpstream(new ProviderError(kind, "x"));
    assert.equal(error.code, "provider_unreachable");
    assert.match(error.message, new RegExp(`\\(${kind}\\)`));
  }
});

Deno.test("an exception that is not a provider error counts as unreachable", () => {
  const { error, failure } = apiErrorOfUpstream(new TypeError("fetch failed"));
  assert.equal(failure, "unreachable");
  assert.equal(error.code, "provider_unreachable");
});

Deno.test("a schema error naming where it is ('In context=...') is no context overflow", () => {
  const { error } = apiErrorOfUpstream(
    new ProviderError(
      "bad_request",
      "Invalid schema for function 'f': In context=('properties', 'x'), 'additionalProperties' is required to be supplied and to be false.",
      { upstreamStatus: 400 },
    ),
  );
  assert.equal(error.code, "upstream_rejected");
  for (
    const overflow of [
      "This model's maximum context length is 8192 tokens.",
      "prompt is too long: 208310 tokens > 200000 maximum",
      "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
      "Requested tokens exceed context window of 131072",
    ]
  ) {
    const mapped = apiErrorOfUpstream(new ProviderError("bad_request", overflow));
    assert.equal(mapped.error.code, "context_length_exceeded", overflow);
  }
});
