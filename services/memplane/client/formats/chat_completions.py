"""OpenAI Chat Completions messages to and from `ContextMessage` (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memplane.client.formats._common import (
    ASSISTANT,
    PART_SEPARATOR,
    SYSTEM,
    SYSTEM_PROMPT_SEPARATOR,
    TOOL,
    USER,
    ContextMessage,
    required_str,
    text_block,
)
from memplane.v1 import compaction_pb2


def from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[ContextMessage]]:
    """OpenAI Chat Completions `messages` as (system prompt, `ContextMessage`s).

    Accepted shapes (OpenAI API reference, Chat Completions `messages`):

    * `{"role": "system" | "developer", "content": str | [text parts]}`: not a message;
      the texts of all system and developer messages, wherever they are, are joined
      with a blank line (`"\\n\\n"`) into the returned system prompt (their `name` is
      dropped).
    * `{"role": "user", "content": str | [text parts], "name"?}`: a USER message, one
      TextBlock per string or text part.
    * `{"role": "assistant", "content"?: str | [text parts] | None, "name"?,
      "tool_calls"?: [{"id", "type": "function", "function": {"name", "arguments"}}]}`:
      an ASSISTANT message, TextBlocks then one ToolUseBlock per call with
      `input_json` = `arguments` verbatim. `refusal`, `audio`, `annotations` may be
      present as null (as the SDK's `model_dump()` gives them); `annotations` is ignored.
    * `{"role": "tool", "tool_call_id", "content": str | [text parts], "name"?}`: a
      TOOL message with one ToolResultBlock (`tool_use_id` = `tool_call_id`, `output`
      = the content, text parts joined with `"\\n"`, `name` = the message's `name`, or
      when absent the name of the earlier tool call with that id).

    A text part is `{"type": "text", "text": str}`: content is text only. Ids and times
    are left empty (OpenAI messages have none).

    Normal form, which `to_openai(*from_openai(m)) == m` keeps exactly: at most one
    system message, first; content a string (a list only for two or more text parts,
    never for tool messages); `"content": None` on an assistant message with only tool
    calls; tool calls with `"type": "function"`; no empty `name`; no tool-message
    `name` equal to its call's name; no null keys (`refusal`, `function_call`...).

    Raises `ValueError` naming `messages[i].<field>` for: a non-text content part
    (`messages[i].content[j].type`, e.g. `image_url`, `input_audio`, `file`,
    `refusal`), an empty part list, a missing or non-string field, a tool message
    without `tool_call_id`, a tool call that is not `type: "function"` or whose
    `arguments` is not a string, an assistant message with neither content nor tool
    calls, a non-null `refusal` or `audio`, legacy function calling (`function_call`,
    role `function`) and unknown roles.
    """
    system_parts: list[str] = []
    out: list[ContextMessage] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise ValueError(f"{path}: expected a message object, got {type(message).__name__}")
        role = message.get("role")
        if role in ("system", "developer"):
            system_parts.append(PART_SEPARATOR.join(_openai_texts(message.get("content"), f"{path}.content")))
        elif role == "user":
            texts = _openai_texts(message.get("content"), f"{path}.content")
            out.append(
                ContextMessage(role=USER, name=_openai_name(message, path), content=[text_block(t) for t in texts])
            )
        elif role == "assistant":
            out.append(_from_openai_assistant(message, path, call_names))
        elif role == "tool":
            out.append(_from_openai_tool(message, path, call_names))
        elif role == "function":
            raise ValueError(
                f"{path}.role: 'function' messages (legacy function calling) are not supported; "
                "send tool messages with tool_call_id"
            )
        else:
            raise ValueError(
                f"{path}.role: unknown role {role!r} (expected system, developer, user, assistant or tool)"
            )
    return SYSTEM_PROMPT_SEPARATOR.join(system_parts), out


def to_openai(system_prompt: str, messages: Sequence[ContextMessage]) -> list[dict[str, Any]]:
    """`ContextMessage`s (and a system prompt) as OpenAI Chat Completions `messages`.

    The inverse of `from_openai`. Output shapes:

    * a non-empty `system_prompt` becomes `{"role": "system", "content": prompt}`
      first; a SYSTEM message becomes `{"role": "system", "content", "name"?}` in place.
    * USER / ASSISTANT messages become `{"role", "content", "name"?, "tool_calls"?}`:
      `content` is the text when the message has one TextBlock, a list of
      `{"type": "text", "text"}` parts when it has several, and `None` when an assistant
      message has only tool calls; each ToolUseBlock becomes `{"id", "type":
      "function", "function": {"name", "arguments": input_json}}`. `name` only when
      non-empty.
    * every ToolResultBlock becomes `{"role": "tool", "tool_call_id", "content":
      output}`, plus `"name"` when the block's name is set and differs from the name
      of the earlier tool call with that id. A message holding several results (as
      AgentScope keeps them) gives several tool messages, in order; a message mixing
      results with text or calls (AgentScope 2.x keeps a whole reasoning-acting reply
      in one assistant `Msg`) is cut before and after each result, as AgentScope's own
      OpenAI formatter does. Text after a tool call in the same run joins that
      assistant message's content (OpenAI has no order between the two).

    Message ids, times, SYSTEM/TOOL message names and `truncation` have no OpenAI
    form and are dropped (a cut output keeps its marker line in the text).

    Raises `ValueError` naming `messages[i].<field>` for a message without content, an
    unspecified role, an empty block, a tool call outside an ASSISTANT message, text
    in a TOOL message, or a tool result in a SYSTEM message.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        role = _openai_role(message, path)
        texts: list[str] = []  # the pending user / assistant / system message
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(message.content):
            bpath = f"{path}.content[{j}]"
            kind = block.WhichOneof("block")
            if kind == "text":
                if message.role == TOOL:
                    raise ValueError(f"{bpath}: a TOOL message holds only tool_result blocks, not text")
                texts.append(block.text.text)
            elif kind == "tool_use":
                if message.role != ASSISTANT:
                    raise ValueError(f"{bpath}: tool_use blocks belong in ASSISTANT messages")
                use = block.tool_use
                calls.append(
                    {"id": use.id, "type": "function", "function": {"name": use.name, "arguments": use.input_json}}
                )
                call_names[use.id] = use.name
            elif kind == "tool_result":
                if message.role == SYSTEM:
                    raise ValueError(f"{bpath}: a SYSTEM message cannot hold a tool_result")
                _flush_openai(out, role, message.name, texts, calls)
                result = block.tool_result
                tool: dict[str, Any] = {"role": "tool", "tool_call_id": result.tool_use_id, "content": result.output}
                if result.name and result.name != call_names.get(result.tool_use_id):
                    tool["name"] = result.name
                out.append(tool)
            else:
                raise ValueError(f"{bpath}: empty content block")
        _flush_openai(out, role, message.name, texts, calls)
    return out


def _openai_role(message: ContextMessage, path: str) -> str:
    if not message.content:
        raise ValueError(f"{path}.content: a message needs at least one content block")
    roles = {SYSTEM: "system", USER: "user", ASSISTANT: "assistant", TOOL: "tool"}
    if message.role not in roles:
        raise ValueError(f"{path}.role: must be SYSTEM, USER, ASSISTANT or TOOL")
    return roles[message.role]


def _flush_openai(
    out: list[dict[str, Any]], role: str, name: str, texts: list[str], calls: list[dict[str, Any]]
) -> None:
    """Append the pending message (if any) to *out* and empty *texts* and *calls*."""
    if not texts and not calls:
        return
    content: str | list[dict[str, Any]] | None
    if not texts:
        content = None
    elif len(texts) == 1:
        content = texts[0]
    else:
        content = [{"type": "text", "text": t} for t in texts]
    message: dict[str, Any] = {"role": role, "content": content}
    if name:
        message["name"] = name
    if calls:
        message["tool_calls"] = list(calls)
    out.append(message)
    texts.clear()
    calls.clear()


def _from_openai_assistant(message: Mapping[str, Any], path: str, call_names: dict[str, str]) -> ContextMessage:
    if message.get("function_call") is not None:
        raise ValueError(f"{path}.function_call: legacy function calling is not supported; send tool_calls instead")
    for key in ("refusal", "audio"):
        if message.get(key) is not None:
            raise ValueError(f"{path}.{key}: not supported (content is text only)")
    content = message.get("content")
    texts = [] if content is None else _openai_texts(content, f"{path}.content")
    blocks = [text_block(t) for t in texts]
    calls = message.get("tool_calls")
    if calls is None:
        calls = []
    if not isinstance(calls, list | tuple):
        raise ValueError(f"{path}.tool_calls: expected a list, got {type(calls).__name__}")
    for k, call in enumerate(calls):
        cpath = f"{path}.tool_calls[{k}]"
        if not isinstance(call, Mapping):
            raise ValueError(f"{cpath}: expected a tool call object, got {type(call).__name__}")
        kind = call.get("type", "function")
        if kind != "function":
            raise ValueError(f"{cpath}.type: {kind!r} tool calls are not supported (function only)")
        call_id = required_str(call, "id", cpath)
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f"{cpath}.function: missing")
        name = required_str(function, "name", f"{cpath}.function")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            raise ValueError(f"{cpath}.function.arguments: expected the arguments as a JSON string")
        blocks.append(
            compaction_pb2.ContentBlock(
                tool_use=compaction_pb2.ToolUseBlock(id=call_id, name=name, input_json=arguments)
            )
        )
        call_names[call_id] = name
    if not blocks:
        raise ValueError(f"{path}: an assistant message needs content or tool_calls")
    return ContextMessage(role=ASSISTANT, name=_openai_name(message, path), content=blocks)


def _from_openai_tool(message: Mapping[str, Any], path: str, call_names: Mapping[str, str]) -> ContextMessage:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"{path}.tool_call_id: missing (the id of the tool call this message answers)")
    output = PART_SEPARATOR.join(_openai_texts(message.get("content"), f"{path}.content"))
    name = message.get("name")
    if name is None:
        name = call_names.get(call_id, "")
    elif not isinstance(name, str):
        raise ValueError(f"{path}.name: expected a string, got {type(name).__name__}")
    result = compaction_pb2.ToolResultBlock(tool_use_id=call_id, name=name, output=output)
    return ContextMessage(role=TOOL, content=[compaction_pb2.ContentBlock(tool_result=result)])


def _openai_texts(content: Any, path: str) -> list[str]:
    """The texts of an OpenAI `content`: a string, or a non-empty list of text parts."""
    if isinstance(content, str):
        return [content]
    if content is None:
        raise ValueError(f"{path}: missing")
    if not isinstance(content, list | tuple):
        raise ValueError(f"{path}: expected a string or a list of text parts, got {type(content).__name__}")
    if not content:
        raise ValueError(f"{path}: empty list of content parts")
    texts: list[str] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise ValueError(f"{path}[{j}]: expected a content part object, got {type(part).__name__}")
        kind = part.get("type")
        if kind != "text":
            raise ValueError(f"{path}[{j}].type: {kind!r} parts are not supported (content is text only)")
        text = part.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{path}[{j}].text: expected a string")
        texts.append(text)
    return texts


def _openai_name(message: Mapping[str, Any], path: str) -> str:
    name = message.get("name")
    if name is None:
        return ""
    if not isinstance(name, str):
        raise ValueError(f"{path}.name: expected a string, got {type(name).__name__}")
    return name
