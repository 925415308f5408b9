import assert from "node:assert/strict";
import { ApiError } from "@/lib/core/mod.ts";
import type { StreamEvent } from "../gateway.ts";
import type { ChatCompletionChunk } from "../providers/types.ts";
import { type ResponseEvent, ResponseEvents } from "./response.ts";
import { assistantTurn, inResponsesTerms, responseStreamEvents } from "./responses.ts";
import { parseResponsesBody, toChatRequest } from "./request.ts";
import { encryptedContentOf } from "../reasoning_details.ts";
import { parseChatRequest } from "../chat_request.ts";
import { testBody, testMeta } from "./test_support.ts";

const chunk = (content: string, finish: string | null = null): StreamEvent => ({
  type: "chunk",
  chunk: {
    id: "c",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: { content }, finish_reason: finish }],
  } as ChatCompletionChunk,
});

/** A converter that breaks on the chunk saying "boom", as a bug of ours would. */
class BreakingEvents extends ResponseEvents {
  override chunk(chunk: Parameters<ResponseEvents["chunk"]>[0]): ResponseEvent[] {
    if (chunk.choices?.[0]?.delta?.content === "boom") throw new TypeError("converter bug");
    return super.chunk(chunk);
  }
}

/** The upstream's answer as the gateway hands it on, counting how much of it was read. */
function source(contents: string[]) {
  const read = { count: 0 };
  async function* events(): AsyncGenerator<StreamEvent[]> {
    for (const [i, content] of contents.entries()) {
      read.count++;
      yield [chunk(content, i === contents.length - 1 ? "stop" : null)];
    }
  }
  return { events: events(), read };
}

async function run(converter: ResponseEvents, contents: string[]) {
  const logs: Record<string, unknown>[] = [];
  const upstream = source(contents);
  const out: ResponseEvent[] = [];
  for await (
    const batch of responseStreamEvents(upstream.events, converter, {
      requestId: "req_test",
      log: (fields) => logs.push(fields),
      beforeFinish: () => Promise.resolve(),
    })
  ) {
    out.push(...batch);
  }
  return { events: out, logs, read: upstream.read.count };
}

Deno.test("a conversion that throws mid-stream ends with error and response.failed, logged with the request id", async () => {
  const body = testBody({ stream: true });
  const { events, logs, read } = await run(new BreakingEvents(body, testMeta({ store: false })), [
    "Hello",
    "boom",
    " more",
    " and more",
  ]);
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
  assert.ok(!events.some((e) => e.type === "response.completed"));
  const failed = events.at(-1)!.response as { status: string; error: { code: string } };
  assert.equal(failed.status, "failed");
  assert.equal(failed.error.code, "internal_error");
  assert.match(String(events.at(-2)!.message), /req_test/);
  // What was converted before the break reached the client.
  assert.ok(events.some((e) => e.type === "response.output_text.delta" && e.delta === "Hello"));
  const sequence = events.map((e) => e.sequence_number);
  assert.deepEqual(sequence, [...sequence].sort((a, b) => a - b), "sequence numbers still rise");
  assert.equal(logs.length, 1);
  assert.equal(logs[0].event, "response_conversion_failed");
  assert.equal(logs[0].requestId, "req_test");
  assert.equal(logs[0].error, "converter bug");
  assert.equal(read, 4, "the upstream is read to its end, so its own usage is what is charged");
});

Deno.test("a conversion that throws at the end (after the last chunk) ends with error and response.failed too", async () => {
  class BreakingAtFinish extends ResponseEvents {
    override finish(): ResponseEvent[] {
      throw new RangeError("finish bug");
    }
  }
  const body = testBody({ stream: true });
  const { events, logs, read } = await run(new BreakingAtFinish(body, testMeta({ store: false })), [
    "Hi",
    " there",
  ]);
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["error", "response.failed"]);
  assert.equal(logs[0].error, "finish bug");
  assert.equal(read, 2);
});

Deno.test("a stream converted without a fault ends with response.completed and logs nothing", async () => {
  const body = testBody({ stream: true });
  const { events, logs } = await run(new ResponseEvents(body, testMeta({ store: false })), [
    "Hi",
    " there",
  ]);
  assert.equal(events.at(-1)!.type, "response.completed");
  assert.equal(logs.length, 0);
});

Deno.test("a chat error reads in the Responses API's names: its param and the field names in its words", () => {
  const terms = (error: ApiError, inputPath?: (path: string) => string) => {
    try {
      inResponsesTerms(error, inputPath);
    } catch (e) {
      assert.ok(e instanceof ApiError);
      return { param: e.param, message: e.message, code: e.code };
    }
    assert.fail("returned");
  };
  assert.deepEqual(
    terms(
      new ApiError(
        "unsupported_parameter",
        "Unsupported value for 'temperature': Claude models accept only 1 when reasoning_effort is set (Claude's extended thinking).",
        { param: "temperature" },
      ),
    ),
    {
      code: "unsupported_parameter",
      param: "temperature",
      message:
        "Unsupported value for 'temperature': Claude models accept only 1 when reasoning.effort is set (Claude's extended thinking).",
    },
  );
  assert.equal(
    terms(
      new ApiError(
        "unsupported_parameter",
        "Unsupported value for 'reasoning_effort' with an output cap of 900: raise max_tokens.",
        { param: "reasoning_effort" },
      ),
    ).message,
    "Unsupported value for 'reasoning.effort' with an output cap of 900: raise max_output_tokens.",
  );
  assert.deepEqual(
    terms(
      new ApiError(
        "invalid_parameter",
        "Invalid value for 'response_format.json_schema.schema': see max_completion_tokens.",
        { param: "response_format.json_schema.schema" },
      ),
    ),
    {
      code: "invalid_parameter",
      param: "text.format.schema",
      message: "Invalid value for 'text.format.schema': see max_output_tokens.",
    },
  );
  const mapped = terms(
    new ApiError(
      "invalid_parameter",
      "Invalid value for 'messages[2].content[0].image_url.url': must be an https URL or a data URL.",
      { param: "messages[2].content[0].image_url.url" },
    ),
    (path) =>
      path.replace(
        /^messages\[2\]\.content\[0\]\.image_url\.url$/,
        "input[1].content[0].image_url",
      ),
  );
  assert.equal(mapped.param, "input[1].content[0].image_url");
  assert.equal(
    mapped.message,
    "Invalid value for 'input[1].content[0].image_url': must be an https URL or a data URL.",
  );
  assert.deepEqual(
    terms(
      new ApiError(
        "invalid_parameter",
        "Invalid value for 'tool_choice.allowed_tools.tools[1].function.name': names no tool of 'tools'.",
        { param: "tool_choice.allowed_tools.tools[1].function.name" },
      ),
    ),
    {
      code: "invalid_parameter",
      param: "tool_choice.tools[1].name",
      message: "Invalid value for 'tool_choice.tools[1].name': names no tool of 'tools'.",
    },
  );
  assert.equal(
    terms(
      new ApiError("invalid_parameter", "Invalid value for 'tool_choice.allowed_tools.mode'.", {
        param: "tool_choice.allowed_tools.mode",
      }),
    ).param,
    "tool_choice.mode",
  );
  // Words that merely contain a name, and the upstream's own words, are left alone.
  const untouched = new ApiError(
    "upstream_rejected",
    "The upstream provider rejected the request: 'messages[1].content' max_tokens too large",
  );
  assert.throws(() => inResponsesTerms(untouched), (e) => e === untouched);
  assert.equal(
    terms(
      new ApiError("invalid_parameter", "my_max_tokens_x and response_formats stay.", {
        param: "max_tokens",
      }),
    ).message,
    "my_max_tokens_x and response_formats stay.",
  );
});

Deno.test("a stream whose client went away ends without response.completed and is not stored", async () => {
  const body = testBody({ stream: true });
  const upstream = source(["Hello", " there"]);
  let finished = 0;
  const out: ResponseEvent[] = [];
  for await (
    const batch of responseStreamEvents(upstream.events, new ResponseEvents(body, testMeta()), {
      requestId: "req_test",
      log: () => {},
      clientGone: () => true,
      beforeFinish: () => {
        finished++;
        return Promise.resolve();
      },
    })
  ) {
    out.push(...batch);
  }
  assert.equal(finished, 0, "nothing is stored");
  assert.ok(!out.some((e) => e.type === "response.completed"));
});

Deno.test("an answer's reasoning over the cap together goes back by previous_response_id as its items sent back in input do: its turn without details, not a refusal", () => {
  const sealed = (n: number, from: number) =>
    encryptedContentOf(
      Array.from({ length: n }, (_, i) => ({
        type: "reasoning.text",
        text: "Thinking.",
        signature: "sig",
        index: from + i,
      })),
    )!;
  const reasoning = (id: string, details: string) => ({
    type: "reasoning" as const,
    id,
    summary: [] as { type: "summary_text"; text: string }[],
    encrypted_content: details,
    status: "completed" as const,
  });
  const call = (id: string) => ({
    type: "function_call" as const,
    id: `fc_${id}`,
    call_id: id,
    name: "w",
    arguments: "{}",
    status: "completed" as const,
  });
  const answer = {
    type: "message" as const,
    id: "msg_1",
    role: "assistant" as const,
    status: "completed" as const,
    phase: "final_answer" as const,
    content: [
      { type: "output_text" as const, text: "Checking.", annotations: [] as [], logprobs: [] },
    ],
  };
  const outputs = [
    [
      reasoning("rs_1", sealed(200, 0)),
      call("c1"),
      reasoning("rs_2", sealed(100, 200)),
      call("c2"),
    ],
    [reasoning("rs_1", sealed(200, 0)), call("c1"), reasoning("rs_2", sealed(100, 200)), answer],
  ];
  for (const output of outputs) {
    const byPrevious = assistantTurn(output);
    const items = output.map(({ status: _, ...item }) =>
      item.type === "message"
        ? { ...item, content: item.content.map(({ logprobs: _, ...part }) => part) }
        : item
    );
    const byInput = toChatRequest(
      parseResponsesBody({ model: "m", input: items }),
      { previous: [], items: new Map() },
    ).chat.messages;
    assert.deepEqual(byPrevious, byInput);
    // The next turn, which sends the answer back with the calls' outputs, is a valid chat request.
    const outputsOfCalls = output.flatMap((item) =>
      item.type === "function_call"
        ? [{ type: "function_call_output", call_id: item.call_id, output: "ok" }]
        : []
    );
    const next = toChatRequest(
      parseResponsesBody({ model: "m", input: outputsOfCalls }),
      { previous: [{ role: "user", content: "Weather?" }, ...byPrevious], items: new Map() },
    );
    parseChatRequest(next.chat);
  }
});
