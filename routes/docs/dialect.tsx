import { FIELD_SUPPORT } from "@/lib/gateway/mod.ts";

const KIND_WORDS = {
  pass: "passed on",
  translate: "translated",
  ignore: "ignored",
  refuse: "refused (400)",
} as const;

/** The dialect section of /docs: every accepted field, and what each provider kind does with it. */
export function DialectSection() {
  return (
    <>
      <h2 id="dialect">The request dialect</h2>
      <p>
        Tollbooth speaks OpenAI's chat-completions format as the official clients send it: roles
        {" "}
        <code>system</code>, <code>developer</code>, <code>user</code>, <code>assistant</code> and
        {" "}
        <code>tool</code>; content as a string or parts (<code>text</code>, <code>image_url</code>
        {" "}
        with a data URL or an https URL and <code>detail</code>, <code>file</code>{" "}
        with a PDF, below); assistant <code>tool_calls</code> with <code>content</code>{" "}
        null or empty, answered by <code>tool</code> messages with their <code>tool_call_id</code>
        {" "}
        right after (a tool's output may hold images too, such as a screenshot, and PDFs; where the
        provider takes images in user messages only, as OpenAI's chat API does, they follow the tool
        messages in a user message); tools, structured output and reasoning. Validation is strict: a
        malformed field gets <code>400 invalid_parameter</code> with its exact path in{" "}
        <code>param</code>, and a field not listed below is refused rather than passed on.
        Response-only fields that clients push back with an assistant message (
        <code>annotations</code>, <code>parsed</code>, a tool call's{" "}
        <code>parsed_arguments</code>, which the openai SDK's parse helpers add) are accepted and
        dropped; so is <code>reasoning_content</code>, except to a provider the catalog marks{" "}
        <code>"forward_reasoning_content": true</code>{" "}
        (DeepSeek's thinking mode needs it back within a tool loop), where it is sent and held; and
        so are{" "}
        <code>reasoning_details</code>, except to Claude (the thinking it signed, below) and to a
        provider marked <code>"forward_reasoning_details": true</code> (OpenRouter). A tool call's
        {" "}
        <code>extra_content</code>{" "}
        (Gemini 3's thought signature) is kept on answers and sent back to Gemini models only. A
        tool message's <code>name</code>{" "}
        (LangChain's tools name the message they return) is accepted and passed on by the OpenAI
        kind; Claude and the Responses API have no such field and are sent none. A message's{" "}
        <code>name</code> or <code>tool_calls</code> sent as <code>null</code>{" "}
        (as clients that serialise every field send them) is taken as absent.{" "}
        <code>tool_choice</code> takes OpenAI's allowed tools too:{" "}
        <code>
          {'{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [{"type": "function", "function": {"name": …}}]}}'}
        </code>{" "}
        (on <code>/v1/responses</code>,{" "}
        <code>
          {'{"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}'}
        </code>): the model may call only the tools named, each of which must be one of{" "}
        <code>tools</code> (else <code>400 invalid_parameter</code> naming it).
      </p>
      <div class="table-scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">field</th>
              <th scope="col">OpenAI kind</th>
              <th scope="col">OpenAI Responses kind</th>
              <th scope="col">Anthropic kind</th>
              <th scope="col">simulator</th>
              <th scope="col">note</th>
            </tr>
          </thead>
          <tbody>
            {Object.entries(FIELD_SUPPORT).map(([field, row]) => (
              <tr>
                <td>
                  <code>{field}</code>
                </td>
                <td>{KIND_WORDS[row.openai]}</td>
                <td>{KIND_WORDS[row.openai_responses]}</td>
                <td>{KIND_WORDS[row.anthropic]}</td>
                <td>{KIND_WORDS[row.simulator]}</td>
                <td>{row.note}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <p>
        Refused everywhere with{" "}
        <code>400 unsupported_parameter</code>, because they would change the price beyond the
        catalog's or cannot be bounded before the call: <code>service_tier</code> other than{" "}
        <code>auto</code>/<code>default</code>, audio output (
        <code>audio</code>, <code>modalities</code> with audio), <code>web_search_options</code>,
        {" "}
        <code>input_audio</code> parts; and the deprecated <code>functions</code>/<code>
          function_call
        </code>.
      </p>
      <h3 id="dialect-pdf">PDFs</h3>
      <p>
        A PDF goes in a user's or a tool's message as a <code>file</code> part whose{" "}
        <code>file.file_data</code> is the file as a data URL (
        <code>data:application/pdf;base64,…</code>), as the openai SDK, the AI SDK and LangChain
        send it (on <code>/v1/responses</code>, an <code>input_file</code> with{" "}
        <code>file_data</code>, in a message or a{" "}
        <code>function_call_output</code>). A provider bills each page as its text and as an image
        of it, and nothing in the file bounds that text, so a PDF is served only where the provider
        counts the request before the call: models served through Anthropic's Messages API (as a
        {" "}
        <code>document</code> block, counted by{" "}
        <code>count_tokens</code>) and through OpenAI's Responses API (as an{" "}
        <code>input_file</code>, counted by its input token count), and by the built-in simulator
        (1,000 tokens a page, its own bill). The reservation holds that count plus 2% and 32 tokens.
        A count that fails is answered with the provider's own error (a 400 for a file it cannot
        open) and nothing is held. OpenAI's chat API has no count: a model served through it takes a
        PDF where its catalog entry names a <code>documents_provider</code>{" "}
        (the shipped catalog's GPT-4o, GPT-4o mini, GPT-4.1 mini and o4-mini do), and such a request
        then goes to OpenAI's Responses API alone (the <code>Tollbooth-Provider</code>{" "}
        header names it), with what that API takes (it refuses <code>stop</code>{" "}
        and penalties, for instance). Another model served through OpenAI's chat API, or one whose
        fallbacks are served by other providers or models, refuses a PDF with{" "}
        <code>400 unsupported_parameter</code>, as does a <code>file_id</code>{" "}
        (there is no files endpoint); data that is not a PDF is{" "}
        <code>400 invalid_parameter</code>. A file part takes <code>cache_control</code>{" "}
        (Claude's breakpoint: an agent loop that sends the PDF every turn reads it from the cache)
        and <code>prompt_cache_breakpoint</code>{" "}
        (OpenAI's). The file counts against the request body limit.
      </p>
      <h3 id="dialect-openai">OpenAI kind</h3>
      <p>
        The body reaches the upstream as sent: only <code>model</code>{" "}
        is renamed, the output cap is set (the client's, or 2048) and the call is always streamed
        with <code>stream_options.include_usage</code>{" "}
        forced, unless the provider's catalog entry says <code>"stream_options": false</code>{" "}
        (Mistral refuses the field and reports usage unasked); a non-streamed request is assembled
        into one completion. Models that refuse <code>max_tokens</code>{" "}
        (OpenAI's o-series and GPT-5, or any model with{" "}
        <code>"output_cap_param": "max_completion_tokens"</code> in the catalog) get the cap as{" "}
        <code>max_completion_tokens</code>. Completions and chunks come back whole:{" "}
        <code>tool_calls</code>, <code>refusal</code>, <code>logprobs</code>,{" "}
        <code>reasoning_content</code> and the usage details.
      </p>
      <h3 id="dialect-openai-responses">OpenAI Responses kind</h3>
      <p>
        For the models OpenAI serves only through its Responses API (o3-pro, GPT-5 pro, the Codex
        models), and for OpenAI reasoning models whose reasoning should carry across an agent loop,
        the chat request is sent to{" "}
        <code>POST /v1/responses</code>, always streamed and never stored at OpenAI (<code>
          store: false
        </code>):
      </p>
      <ul>
        <li>
          Messages become input items: <code>text</code> parts <code>input_text</code>,{" "}
          <code>image_url</code> parts <code>input_image</code>, <code>file</code> parts{" "}
          <code>input_file</code>; an assistant's text <code>output_text</code>, its{" "}
          <code>tool_calls</code> <code>function_call</code> items and <code>tool</code> messages
          {" "}
          <code>function_call_output</code> items (their images as <code>input_image</code>{" "}
          parts of the output). The cap goes as <code>max_output_tokens</code>{" "}
          (OpenAI's least is 16: a smaller one is refused before anything is reserved).
        </li>
        <li>
          <code>tools</code> become flat function tools, strict only when the client says{" "}
          <code>strict: true</code> (as in chat; the Responses API's own default is strict);{" "}
          <code>tool_choice</code> naming a function becomes{" "}
          <code>{"{"}"type": "function", "name"{"}"}</code>, allowed tools their flat shape;{" "}
          <code>response_format</code> becomes <code>text.format</code>, <code>verbosity</code>{" "}
          <code>text.verbosity</code>, <code>reasoning_effort</code> <code>reasoning.effort</code>,
          {" "}
          <code>logprobs</code> <code>include: ["message.output_text.logprobs"]</code>{" "}
          (each token's logprobs come back as chat gives them). Fields the Responses API does not
          have (<code>stop</code>, penalties other than 0, <code>logit_bias</code>,{" "}
          <code>prediction</code>, <code>top_k</code>) are refused with 400{" "}
          <code>unsupported_parameter</code>.
        </li>
        <li>
          Back: text deltas become <code>content</code>, refusals <code>refusal</code>,{" "}
          <code>function_call</code> items <code>delta.tool_calls</code>{" "}
          fragments as OpenAI's chat streams them; an incomplete response ends with{" "}
          <code>finish_reason: "length"</code> (or{" "}
          <code>"content_filter"</code>); the usage's input, cached, output and reasoning tokens
          become the chat usage's.
        </li>
        <li>
          A reasoning model's reasoning comes back encrypted (<code>
            include: ["reasoning.encrypted_content"]
          </code>) as one <code>reasoning_details</code> entry per reasoning item, format{" "}
          <code>openai-responses-v1</code>, <code>reasoning.encrypted</code>{" "}
          with the item's content as <code>data</code> and an <code>id</code>{" "}
          naming the model and the item. Send the assistant message back as it came and the model
          that made them gets its reasoning items back before it, so that it reasons on from them in
          a tool loop; another model is not sent them. The hold counts a token per byte of each
          item's content; where that would refuse the request (the context, or a balance it does not
          fit), OpenAI's own input token count decides. With a provider marked{" "}
          <code>"reasoning_summaries": true</code>{" "}
          (an organization OpenAI has verified), reasoning models are asked for summaries, streamed
          as <code>reasoning_content</code>.
        </li>
      </ul>
      <h3 id="dialect-anthropic">Anthropic kind</h3>
      <ul>
        <li>
          <code>system</code> and <code>developer</code> messages become{" "}
          <code>system</code>; turns of one role are merged, as Messages wants them to alternate.
        </li>
        <li>
          Blank text (such as the <code>"\n\n"</code>{" "}
          beside a GPT model's tool calls) is not sent, and a message left with nothing is dropped;
          a conversation that opens with the assistant (a greeting) is sent after a user turn of
          {" "}
          <code>"."</code>, which the reservation covers; a final assistant message (a prefill) is
          sent without trailing whitespace. A system prompt alone, or only blank user messages, is
          refused with 400 <code>invalid_parameter</code>.
        </li>
        <li>
          <code>tools</code> become tools with <code>input_schema</code> (parameters that are{" "}
          <code>{"{}"}</code> or lack a <code>type</code> as an object schema);{" "}
          <code>tool_choice</code> <code>auto</code>/<code>required</code>/named/<code>none</code>
          {" "}
          become{" "}
          <code>auto</code>/<code>any</code>/<code>tool</code>/<code>none</code>. Claude has no
          allowed tools, and may call any tool it is offered: with{" "}
          <code>
            allowed_tools
          </code>{" "}
          of mode <code>required</code>{" "}
          and one tool, it is made to call that tool (<code>tool</code>) with every tool sent, so
          the cached prompt stands; otherwise it is sent only the allowed tools (all of them when
          all are allowed), with <code>auto</code> or <code>any</code>{" "}
          as the mode says, and a dropped tool's <code>cache_control</code>{" "}
          moves to the last tool sent before it. The hold counts the tools sent.{" "}
          <code>parallel_tool_calls: false</code> becomes <code>disable_parallel_tool_use</code>.
        </li>
        <li>
          Assistant <code>tool_calls</code> become <code>tool_use</code> blocks; <code>tool</code>
          {" "}
          messages become <code>tool_result</code>{" "}
          blocks at the head of the next user turn; images become image blocks (base64 or URL), PDFs
          {" "}
          <code>document</code> blocks.
        </li>
        <li>
          <code>response_format</code> (<code>json_schema</code>,{" "}
          <code>json_object</code>) becomes a forced tool whose input is the answer, returned as the
          message's{" "}
          <code>content</code>. Text Claude writes beside it (possible with thinking, which leaves
          the tool unforced) is held back: dropped when the tool is called, the content when it is
          not; it is billed either way.
        </li>
        <li>
          <code>reasoning_effort</code>{" "}
          becomes thinking as the model's generation takes it. Claude 4.6 and earlier think with a
          budget (minimal 1024, low 2048, medium 8192, high 24576, xhigh 32768, max 65536 tokens,
          and at most 10, 20, 50, 80, 90 and 95% of the output cap, so the answer keeps room; never
          under Anthropic's least, 1024); a turn that answers tool calls, or ends with the assistant
          (a prefill), keeps its budget when the assistant message brings back the thinking block
          the model signed (<code>
            reasoning_details
          </code>, below; a client that drops it, as the openai SDK's{" "}
          <code>runTools</code>, the AI SDK's chat models and LangChain's <code>ChatOpenAI</code>
          {" "}
          do, is given back the one Tollbooth kept for the call, for an hour), and runs without
          thinking otherwise. A turn whose <code>tool_choice</code>{" "}
          forces a tool runs without thinking too: Anthropic takes no budget beside it, where
          OpenAI's reasoning models take both. With a budget, <code>temperature</code> below 1,{" "}
          <code>top_p</code> below 0.95 and <code>top_k</code> are refused with 400{" "}
          <code>unsupported_parameter</code> before anything is reserved, as Anthropic refuses them.
        </li>
        <li>
          Opus 4.7 and later think adaptively: <code>reasoning_effort</code> goes as{" "}
          <code>output_config.effort</code> (<code>minimal</code> as{" "}
          <code>low</code>), the thinking summarized into{" "}
          <code>reasoning_content</code>, tool turns included. Opus 4.7 and 4.8 think only when
          asked; Sonnet 5 and Opus 5 unless <code>reasoning_effort</code> is{" "}
          <code>none</code>; Fable 5, Mythos 5, Opus 5.5 and Fable 5.1 always (<code>none</code>
          {" "}
          is refused). These models take sampling parameters at their defaults only (others are
          refused); Opus 5.5 and Fable 5.1 cannot be made to call a tool, so a forcing{" "}
          <code>tool_choice</code> is refused, a strict <code>json_schema</code> format goes as{" "}
          <code>output_config.format</code>, and any other format offers the answer tool unforced.
          From the 4.6 models on, a conversation that ends with an assistant message (a prefill to
          Claude) is refused before anything is reserved.
        </li>
        <li>
          <code>stop</code> becomes <code>stop_sequences</code>{" "}
          (sequences of only whitespace, which Anthropic refuses, are left out);{" "}
          <code>temperature</code> is capped at 1; <code>top_p</code> is left out beside a{" "}
          <code>temperature</code>, as Claude 4.5 models take one of the two.
        </li>
        <li>
          <code>cache_control: {"{"}"type": "ephemeral"{"}"}</code>{" "}
          on a text, image or file part or a tool marks Anthropic's prompt-cache breakpoint (other
          kinds drop it). With <code>"ttl": "1h"</code>{" "}
          the entry is kept for an hour, written at the model's dearer 1-hour write price (twice the
          input price unless the catalog names one), and the request is held at that price; a 1-hour
          breakpoint after a 5-minute one, in the order Claude reads tools, system and messages, is
          refused before anything is reserved, as Anthropic refuses it.
        </li>
        <li>
          Back: <code>tool_use</code> becomes <code>message.tool_calls</code> with{" "}
          <code>finish_reason: "tool_calls"</code>; streamed <code>input_json_delta</code> becomes
          {" "}
          <code>delta.tool_calls</code> fragments (<code>index</code>, <code>id</code>,{" "}
          <code>function.name</code>, then <code>function.arguments</code>{" "}
          pieces) exactly as OpenAI streams them, a call without input ending with{" "}
          <code>"{"{}"}"</code>; thinking becomes <code>reasoning_content</code>;{" "}
          <code>cache_read_input_tokens</code> becomes{" "}
          <code>prompt_tokens_details.cached_tokens</code> and cache writes{" "}
          <code>prompt_tokens_details.cache_write_tokens</code>.
        </li>
        <li>
          Each thinking block is also one <code>reasoning_details</code>{" "}
          entry on the message, as OpenRouter carries it (streamed: all in one delta once the
          thinking is over): <code>reasoning.text</code> with its <code>signature</code>, or{" "}
          <code>reasoning.encrypted</code> with a redacted block's <code>data</code>, format{" "}
          <code>anthropic-claude-v1</code>, its <code>id</code>{" "}
          naming the model that signed it. Send the assistant message back as it came and a request
          that thinks gives Claude those blocks back first, so that in an agent loop it reasons on
          from its own thinking. Only the model that signed a block is sent it (Claude refuses a
          signature not its own); a block edited on the way is refused by Claude, and nothing is
          charged. The hold counts each block's text and a token per byte of its signature. For a
          model that thinks by budget, the blocks of an answer that calls tools are also kept per
          app for an hour (up to 512 KiB) under its first call's id, and a turn answering those
          calls without them is given them back: chat clients that keep only the fields they know
          think at every step too. In the Responses API they travel sealed in the reasoning item's
          {" "}
          <code>encrypted_content</code>: send the output items back as input, or continue with{" "}
          <code>previous_response_id</code>.
        </li>
      </ul>
      <h3 id="dialect-simulator">Simulator</h3>
      <p>
        Offered tools, <code>tollbooth/echo</code>{" "}
        calls one (the named one, or the first) with arguments made from its schema and your last
        message, streamed like OpenAI's; given the tool's result, it answers with it. An agent loop
        runs under <code>deno task dev</code> with no provider key.
      </p>
    </>
  );
}
