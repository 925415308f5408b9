/**
 * OpenAI's `allowed_tools` choice for a server that has none (Claude, and the compatible servers
 * that take only OpenAI's older choices): the tools the model may call are the ones it is offered.
 */
import {
  allowedToolNames,
  type ChatRequest,
  type ToolChoiceSpec,
  type ToolDefinition,
} from "../chat_request.ts";

/**
 * The client's tools as a server without allowed tools is offered them. A model offered a tool may
 * call it, so the tools it may not call are not sent, which changes the cached prefix (tools come
 * first in it) only where that cannot be helped. Every tool is sent where the choice alone says it
 * all: every tool allowed, or one tool that must be called (a named choice, plainToolChoice),
 * keeping the prompt cached as OpenAI's allowed tools do. A dropped tool's cache breakpoint moves
 * to the last tool sent before it, which ends the same prefix less the dropped tools; a model does
 * not need the tools the conversation's earlier calls named to take them, only some tools (which
 * it has).
 */
export function offeredTools(request: ChatRequest): readonly ToolDefinition[] {
  const tools = request.params.tools ?? [];
  const choice = request.params.tool_choice;
  const allowed = allowedToolNames(choice);
  if (!allowed || allowed.length === tools.length || typeof plainToolChoice(choice) === "object") {
    return tools;
  }
  const kept: ToolDefinition[] = [];
  for (const tool of tools) {
    if (allowed.includes(tool.function.name)) kept.push(tool);
    else if (tool.cache_control && kept.length && !kept.at(-1)!.cache_control) {
      // Of the marks it gathers, the first: a 1-hour mark comes before any 5-minute one.
      kept.push({ ...kept.pop()!, cache_control: tool.cache_control });
    }
  }
  return kept;
}

/**
 * The client's choice over the tools offered (offeredTools): `allowed_tools` as the plain choice
 * it then comes to, any other as it is.
 */
export function plainToolChoice(
  choice: ToolChoiceSpec | null | undefined,
): ToolChoiceSpec | null | undefined {
  const allowed = allowedToolNames(choice);
  if (!allowed || !choice || typeof choice !== "object" || choice.type !== "allowed_tools") {
    return choice;
  }
  if (choice.allowed_tools.mode === "auto") return "auto";
  return allowed.length === 1 ? { type: "function", function: { name: allowed[0] } } : "required";
}
