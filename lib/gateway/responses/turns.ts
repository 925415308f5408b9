/**
 * A Responses conversation's items as chat messages: the one conversion of the items a client sends
 * back in `input` (request.ts) and of an answer continued by `previous_response_id` (responses.ts),
 * so that an answer goes back to the model alike both ways.
 *
 * Items keep their order, with two exceptions chat requires: a call's output comes right after the
 * turn that made the call, before any message of the same answer written after the calls (OpenAI's
 * final answer after its preamble and calls); and the text a stream gave after a turn's calls alone
 * (Claude's text beside a call, held back while a `text.format` answer tool could still be called)
 * is that turn's text. Reasoning goes with the assistant turn after it; before any other item, or
 * at the end, it belongs to no turn and is dropped, as from a client that kept none.
 */
import { MAX_REASONING_DETAILS, type ReasoningDetail } from "../reasoning_details.ts";

/** An item as the conversion takes it, with where it came from (`S`), to name it in an error. */
export type ConversationItem<S> =
  | { type: "reasoning"; details: readonly ReasoningDetail[] }
  | { type: "function_call"; call: Record<string, unknown>; source: S }
  | { type: "function_call_output"; message: Record<string, unknown>; source: S }
  | { type: "message"; message: Record<string, unknown>; source: S };

/** A chat message and the items it came from. */
export interface ChatTurn<S> {
  message: Record<string, unknown>;
  /** The item of the message, or of its text; null for a turn of calls alone. */
  source: S | null;
  /** The item of each of the turn's tool calls, in order. */
  calls: S[];
}

/**
 * The items as chat turns, after the turns of the conversation before them (`earlier`, which none
 * of the items joins; a call of theirs still waiting for its output gets it right after it).
 * Message objects are taken, and those of the items grown in place.
 */
export function chatTurns<S>(
  items: Iterable<ConversationItem<S>>,
  earlier: ChatTurn<S>[] = [],
): ChatTurn<S>[] {
  const turns = [...earlier];
  const before = new Set(earlier);
  // Messages of an answer written after its calls, held until the calls' outputs are in.
  let held = heldAnswer(turns);
  const release = () => {
    turns.push(...held.turns);
    held = { turns: [], awaited: new Set(), callTurn: null };
  };
  // With the calls' outputs in, the answer goes before them (answerBeforeOutputs) whatever comes
  // next: the model went on from it sent there, so each step sends what the step before it did,
  // as previous_response_id's stored turns do.
  const answered = () => held.turns.length > 0 && turns.at(-1)?.message.role === "tool";
  const answerFirst = () => {
    answerBeforeOutputs(turns, held);
    held = { turns: [], awaited: new Set(), callTurn: null };
  };
  let thinking: ReasoningDetail[] = [];
  const think = (turn: ChatTurn<S>) => {
    if (thinking.length === 0) return;
    const own = turn.message.reasoning_details as ReasoningDetail[] | undefined ?? [];
    setReasoningDetails(turn.message, [...own, ...thinking]);
    thinking = [];
  };
  /** The assistant turn of these items that a call or text right after it joins, if any. */
  const open = () => {
    const last = turns.at(-1);
    return last?.message.role === "assistant" && !before.has(last) ? last : undefined;
  };
  for (const item of items) {
    if (item.type === "reasoning") {
      for (const detail of item.details) thinking.push(detail);
      continue;
    }
    if (item.type === "function_call") {
      // A call after the held messages is theirs. With the calls' outputs in (answered), or before
      // any of them (OpenAI's preamble before each of its calls: chat answers a turn's calls only
      // together, right after it), the answer goes before the outputs and the call joins it.
      if (answered() || (held.turns.length > 0 && turns.at(-1) === held.callTurn)) answerFirst();
      else release();
      const last = open();
      if (last) {
        const calls = last.message.tool_calls as unknown[] | undefined;
        if (calls) calls.push(item.call);
        else last.message.tool_calls = [item.call];
        last.calls.push(item.source);
        think(last);
      } else {
        const turn = {
          message: { role: "assistant", content: null, tool_calls: [item.call] },
          source: null,
          calls: [item.source],
        };
        think(turn);
        turns.push(turn);
      }
      continue;
    }
    const turn = { message: item.message, source: item.source, calls: [] };
    if (item.type === "function_call_output") {
      thinking = [];
      if (!held.awaited.has(item.message.tool_call_id as string)) release();
      turns.push(turn);
      continue;
    }
    if (item.message.role !== "assistant") {
      thinking = [];
      release();
      turns.push(turn);
      continue;
    }
    if (answered()) answerFirst();
    think(turn);
    if (held.turns.length > 0) {
      held.turns.push(turn);
      continue;
    }
    const last = open();
    const calls = last?.message.tool_calls as { id: string }[] | undefined;
    if (!last || !calls) {
      turns.push(turn);
    } else if (last.source === null && item.message.phase == null) {
      // Text a stream gave after the calls it was written beside (only OpenAI labels a message
      // with a phase, and its order is the one it wrote in).
      last.message.content = item.message.content;
      last.source = item.source;
      setReasoningDetails(last.message, [
        ...last.message.reasoning_details as ReasoningDetail[] | undefined ?? [],
        ...item.message.reasoning_details as ReasoningDetail[] | undefined ?? [],
      ]);
    } else {
      // Chat answers a call right after the turn that made it: the answer written after the
      // calls waits for their outputs, and the calls stay after the text written before them.
      held = { turns: [turn], awaited: new Set(calls.map((call) => call.id)), callTurn: last };
    }
  }
  if (answered()) answerFirst();
  else release();
  return turns;
}

/** Messages of an answer written after the calls of `callTurn`, waiting for their outputs. */
interface HeldAnswer<S> {
  turns: ChatTurn<S>[];
  awaited: Set<string>;
  callTurn: ChatTurn<S> | null;
}

/**
 * An answer written after its calls with nothing but their outputs after it cannot follow them:
 * the conversation would end on the assistant, which Claude continues as a prefill (and its newest
 * models refuse). Nor can one followed by calls of its own, before any output: chat answers a
 * turn's calls together. So it goes before the outputs (and stays there for the model's turns
 * after them), and the calls move onto its last message, which chat needs them answered right
 * after; a turn of calls alone (no content) is then left with nothing and goes, its reasoning to
 * the answer's first message.
 */
function answerBeforeOutputs<S>(turns: ChatTurn<S>[], held: HeldAnswer<S>): void {
  // Copies, not the messages changed: an earlier turn's are the stored conversation's.
  const callTurn = held.callTurn!;
  const answer = held.turns.at(-1)!;
  const { tool_calls, ...said } = callTurn.message;
  answer.message = { ...answer.message, tool_calls };
  answer.calls = [...answer.calls, ...callTurn.calls];
  const at = turns.indexOf(callTurn);
  if (said.content != null) {
    callTurn.message = said;
    callTurn.calls = [];
    turns.splice(at + 1, 0, ...held.turns);
    return;
  }
  const first = held.turns[0];
  first.message = { ...first.message };
  setReasoningDetails(first.message, [
    ...said.reasoning_details as ReasoningDetail[] | undefined ?? [],
    ...first.message.reasoning_details as ReasoningDetail[] | undefined ?? [],
  ]);
  turns.splice(at, 1, ...held.turns);
}

/**
 * The messages at the end of the earlier turns written after a turn's calls, whose outputs the
 * items may bring (an answer continued by `previous_response_id` ends so), taken out of them.
 */
function heldAnswer<S>(turns: ChatTurn<S>[]): HeldAnswer<S> {
  let at = turns.length;
  while (at > 0 && isAnswerText(turns[at - 1].message)) at--;
  const calls = turns[at - 1]?.message.tool_calls as { id: string }[] | undefined;
  if (at === turns.length || turns[at - 1].message.role !== "assistant" || !calls) {
    return { turns: [], awaited: new Set(), callTurn: null };
  }
  const callTurn = turns[at - 1];
  return { turns: turns.splice(at), awaited: new Set(calls.map((call) => call.id)), callTurn };
}

function isAnswerText(message: Record<string, unknown>): boolean {
  return message.role === "assistant" && !message.tool_calls;
}

/**
 * An assistant turn's reasoning details, joined from several reasoning items: items each within
 * the cap may pass it together, and a model refuses its reasoning cut short, so the turn then goes
 * on without any, as from a client that kept none.
 */
export function setReasoningDetails(turn: Record<string, unknown>, details: unknown[]): void {
  if (details.length > 0 && details.length <= MAX_REASONING_DETAILS) {
    turn.reasoning_details = details;
  } else delete turn.reasoning_details;
}
