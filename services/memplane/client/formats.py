"""Agent message formats to and from the compaction service's `ContextMessage`.

Two formats are converted, both ways:

* OpenAI Chat Completions messages (API reference, "Create chat completion",
  `messages`): `{"role": "system" | "developer" | "user" | "assistant" | "tool", ...}`
  dicts, as sent to `client.chat.completions.create(messages=...)`.
  `from_openai` / `to_openai`.
* AgentScope `Msg` dicts: AgentScope 2.x `Msg.model_dump()` (`created_at`, blocks
  `text` / `thinking` / `tool_call` / `tool_result` / `data` / `hint` of
  `agentscope.message`) and, on input, AgentScope 1.x `Msg.to_dict()` (`timestamp`,
  blocks `text` / `tool_use` / `tool_result` / `image` / `audio` / `video`).
  `from_agentscope` / `to_agentscope` (`version=2`, the default, or `version=1`).

Everything the model reads is carried losslessly: text, tool calls (id, name and the
input exactly as the model produced it) and tool outputs (call id, tool name, output
text). What the model never reads is not: OpenAI has no message ids or times, and
AgentScope's bookkeeping (block ids and times, tool-call and tool-result states,
`metadata`, `usage`, `finished_*`) is dropped and takes AgentScope's defaults on the
way back. Each function's docstring lists the exact normalisations; inputs already in
normal form round-trip exactly (`to_openai(*from_openai(m)) == m`,
`to_agentscope(from_agentscope(d)) == d`, `from_*(to_*(x)) == x`).

Content is text only: images, audio, files, video and AgentScope hint blocks have no
`ContextMessage` form and raise `ValueError`. Every `ValueError` names the offending
field as `messages[i].<field>` (OpenAI lists and `ContextMessage` lists) or
`msgs[i].<field>` (AgentScope lists), e.g. `messages[2].content[1].type`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from google.protobuf import json_format

from memplane.v1 import compaction_pb2, memory_pb2

__all__ = [
    "TRUNCATION_METADATA_KEY",
    "assistant",
    "from_agentscope",
    "from_openai",
    "to_agentscope",
    "to_openai",
    "user",
]

ContextMessage = compaction_pb2.ContextMessage

SYSTEM = memory_pb2.MESSAGE_ROLE_SYSTEM
USER = memory_pb2.MESSAGE_ROLE_USER
ASSISTANT = memory_pb2.MESSAGE_ROLE_ASSISTANT
TOOL = memory_pb2.MESSAGE_ROLE_TOOL

# Key of AgentScope 2.x `ToolResultBlock.metadata` that carries a `ToolResultTruncation`
# (proto3 JSON, field names as in the proto) so a cut output keeps its reference.
TRUNCATION_METADATA_KEY = "memplane_truncation"

# AgentScope 1.x `Msg.timestamp`: local time, milliseconds (`strftime(...)[:-3]`).
_AGENTSCOPE1_TIME = "%Y-%m-%d %H:%M:%S.%f"
_SYSTEM_PROMPT_SEPARATOR = "\n\n"
_PART_SEPARATOR = "\n"


# -- builders ---------------------------------------------------------------------------


def user(text: str, *, name: str = "", id: str = "") -> ContextMessage:
    """A USER `ContextMessage` with one text block."""
    return ContextMessage(id=id, role=USER, name=name, content=[_text(text)])


def assistant(text: str, *, name: str = "", id: str = "") -> ContextMessage:
    """An ASSISTANT `ContextMessage` with one text block."""
    return ContextMessage(id=id, role=ASSISTANT, name=name, content=[_text(text)])


# -- OpenAI Chat Completions --------------------------------------------------------------


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
            system_parts.append(_PART_SEPARATOR.join(_openai_texts(message.get("content"), f"{path}.content")))
        elif role == "user":
            texts = _openai_texts(message.get("content"), f"{path}.content")
            out.append(ContextMessage(role=USER, name=_openai_name(message, path), content=[_text(t) for t in texts]))
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
    return _SYSTEM_PROMPT_SEPARATOR.join(system_parts), out


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
    blocks = [_text(t) for t in texts]
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
        call_id = _required_str(call, "id", cpath)
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f"{cpath}.function: missing")
        name = _required_str(function, "name", f"{cpath}.function")
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
    output = _PART_SEPARATOR.join(_openai_texts(message.get("content"), f"{path}.content"))
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


# -- AgentScope ------------------------------------------------------------------------------


def from_agentscope(msgs: Sequence[Mapping[str, Any]], *, drop_thinking: bool = True) -> list[ContextMessage]:
    """AgentScope `Msg` dicts as `ContextMessage`s, one per `Msg`, in order.

    Pass `[m.model_dump() for m in msgs]` (AgentScope 2.x `Msg`, a pydantic model) or
    `[m.to_dict() for m in msgs]` (AgentScope 1.x); both shapes are recognised, per
    field, so lists may mix them.

    `Msg` fields: `id` (str, may be absent), `name` (str), `role` ("user" | "assistant"
    | "system"), `content` (a string, i.e. one text block, or a non-empty list of
    blocks), and the time: `created_at` (2.x, `datetime.now().isoformat()`) or
    `timestamp` (1.x, `"%Y-%m-%d %H:%M:%S.%f"` to the millisecond). AgentScope writes
    local naive times; they are read as UTC (a time with an offset keeps it). A
    missing or null time leaves `create_time` unset. `metadata` and other fields are
    ignored.

    Blocks (`agentscope.message`):

    * `{"type": "text", "text"}` → TextBlock.
    * 2.x `{"type": "tool_call", "id", "name", "input": str}` → ToolUseBlock with
      `input_json` = `input` (the raw JSON the model streamed) verbatim.
    * 1.x `{"type": "tool_use", "id", "name", "input": dict, "raw_input"?: str}` →
      ToolUseBlock with `input_json` = `raw_input` when present (the arguments as the
      model produced them), else `json.dumps(input, ensure_ascii=False)` (AgentScope
      1.x's own OpenAI formatter's serialisation).
    * `{"type": "tool_result", "id", "name", "output": str | [text blocks]}` →
      ToolResultBlock(tool_use_id=id, name, output); a list of text blocks is joined
      with `"\\n"` (as AgentScope 2.x's formatter joins them; 1.x's formatter prefixes
      each of several with "- "). In 2.x, `metadata[TRUNCATION_METADATA_KEY]` (as
      `to_agentscope` writes it) restores `truncation`.
    * `{"type": "thinking"}` is dropped, as AgentScope's OpenAI formatter drops it
      (`drop_thinking=False` raises instead).

    Normal form, which `to_agentscope(from_agentscope(d), version=v) == d` keeps
    exactly: the keys `to_agentscope` writes and no others (2.x: block `metadata` only
    for a truncation; 1.x: `"metadata": {}`, `raw_input` only when it differs from
    `json.dumps(input, ensure_ascii=False)`), tool outputs as one text block, a 1.x
    single text as a string, times written as `to_agentscope` writes them (UTC), no
    thinking blocks, and tool-result-only messages with the role `to_agentscope` gives
    TOOL messages (2.x "assistant", 1.x "system").

    Role: a message whose blocks are all tool results becomes TOOL (AgentScope 1.x's
    ReActAgent puts them in `Msg("system", [...], "system")`, 2.x in an assistant
    `Msg`); otherwise user/assistant/system map to USER/ASSISTANT/SYSTEM, and a 2.x
    assistant `Msg` keeps its text, tool calls and tool results together in order.

    Raises `ValueError` naming `msgs[i].<field>` for: media and hint blocks
    (`msgs[i].content[j].type`: image / audio / video / data / hint; content is text
    only), non-text blocks in a tool output (`msgs[i].content[j].output[k].type`), a
    thinking block with `drop_thinking=False`, a message left without blocks, unknown
    roles or block types, missing or mistyped fields, and unreadable times.
    """
    out: list[ContextMessage] = []
    for i, msg in enumerate(msgs):
        path = f"msgs[{i}]"
        if not isinstance(msg, Mapping):
            raise ValueError(
                f"{path}: expected a Msg dict (Msg.model_dump() or Msg.to_dict()), got {type(msg).__name__}"
            )
        role_name = msg.get("role")
        roles = {"user": USER, "assistant": ASSISTANT, "system": SYSTEM}
        if role_name not in roles:
            raise ValueError(f"{path}.role: expected 'user', 'assistant' or 'system', got {role_name!r}")
        content = msg.get("content")
        if isinstance(content, str):
            blocks = [_text(content)]
        elif isinstance(content, list | tuple):
            blocks = [
                b
                for j, raw in enumerate(content)
                if (b := _from_agentscope_block(raw, f"{path}.content[{j}]", drop_thinking)) is not None
            ]
        else:
            raise ValueError(f"{path}.content: expected a string or a list of blocks, got {type(content).__name__}")
        if not blocks:
            raise ValueError(f"{path}.content: no text, tool_call or tool_result block")
        role = TOOL if all(b.HasField("tool_result") for b in blocks) else roles[role_name]
        message = ContextMessage(
            id=_optional_str(msg, "id", path),
            role=role,
            name=_optional_str(msg, "name", path),
            content=blocks,
        )
        time_key = "created_at" if msg.get("created_at") is not None else "timestamp"
        created = _parse_agentscope_time(msg.get(time_key), f"{path}.{time_key}")
        if created is not None:
            message.create_time.FromDatetime(created)
        out.append(message)
    return out


def to_agentscope(messages: Sequence[ContextMessage], *, version: Literal[1, 2] = 2) -> list[dict[str, Any]]:
    """`ContextMessage`s as AgentScope `Msg` dicts, one per message, in order.

    `version=2` (default) gives dicts for AgentScope 2.x `Msg.model_validate(d)`:
    `{"id"?, "name", "role", "content": [blocks], "created_at"?}` with blocks
    `{"type": "text", "text"}`, `{"type": "tool_call", "id", "name", "input":
    input_json}` and `{"type": "tool_result", "id", "name", "output": [{"type":
    "text", "text": output}], "metadata"?: {TRUNCATION_METADATA_KEY: truncation}}`
    (truncation in proto3 JSON with the proto's field names). TOOL messages become
    role "assistant", the only 2.x role allowed tool results.

    `version=1` gives AgentScope 1.x `Msg.from_dict(d)` / `to_dict()` dicts: `{"id"?,
    "name", "role", "content", "metadata": {}, "timestamp"?}`, `content` a string for a
    single text block and a list of blocks otherwise; tool calls are `{"type":
    "tool_use", "id", "name", "input": dict, "raw_input"?}` with `raw_input` =
    `input_json` only when it is not exactly `json.dumps(input, ensure_ascii=False)`
    (`input` is `{}` when `input_json` is not a JSON object); TOOL messages become role
    "system" (1.x ReActAgent's convention). `truncation` is not carried.

    Both: `id` only when non-empty, the time only when `create_time` is set, in UTC
    written as AgentScope writes local time (2.x `isoformat()` without offset, 1.x
    `"%Y-%m-%d %H:%M:%S.%f"` cut to milliseconds); `name` as given (AgentScope requires
    one; it may be ""). A tool output always comes back as a one-text-block list
    (the shape AgentScope's toolkits produce), so a string output or several text
    blocks normalise to that.

    Raises `ValueError` naming `messages[i].<field>` for an unspecified role, a message
    without content, an empty block, and (version 2 only) blocks AgentScope 2.x
    refuses: non-text blocks in a USER or SYSTEM message.
    """
    if version not in (1, 2):
        raise ValueError(f"version: expected 1 or 2, got {version!r}")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if not message.content:
            raise ValueError(f"{path}.content: a message needs at least one content block")
        role = _agentscope_role(message, path, version)
        blocks = [
            _to_agentscope_block(block, message.role, f"{path}.content[{j}]", version)
            for j, block in enumerate(message.content)
        ]
        d: dict[str, Any] = {}
        if message.id:
            d["id"] = message.id
        d["name"] = message.name
        d["role"] = role
        if version == 1:
            single_text = len(blocks) == 1 and blocks[0]["type"] == "text"
            d["content"] = blocks[0]["text"] if single_text else blocks
            d["metadata"] = {}
        else:
            d["content"] = blocks
        if message.HasField("create_time"):
            when = message.create_time.ToDatetime(tzinfo=UTC).replace(tzinfo=None)
            if version == 1:
                # = strftime(_AGENTSCOPE1_TIME)[:-3], but with the year zero-padded: glibc's %Y
                # writes year 999 as "999", which no reader (ours included) parses back.
                d["timestamp"] = when.isoformat(" ", "milliseconds")
            else:
                d["created_at"] = when.isoformat()
        out.append(d)
    return out


def _agentscope_role(message: ContextMessage, path: str, version: int) -> str:
    if message.role == TOOL:
        return "system" if version == 1 else "assistant"
    roles = {SYSTEM: "system", USER: "user", ASSISTANT: "assistant"}
    if message.role not in roles:
        raise ValueError(f"{path}.role: must be SYSTEM, USER, ASSISTANT or TOOL")
    return roles[message.role]


def _to_agentscope_block(
    block: compaction_pb2.ContentBlock, role: memory_pb2.MessageRole.ValueType, path: str, version: int
) -> dict[str, Any]:
    kind = block.WhichOneof("block")
    if kind is None:
        raise ValueError(f"{path}: empty content block")
    if version == 2 and kind != "text" and role in (USER, SYSTEM):
        raise ValueError(
            f"{path}: AgentScope 2.x {'user' if role == USER else 'system'} messages hold only text, not {kind}"
        )
    if kind == "text":
        return {"type": "text", "text": block.text.text}
    if kind == "tool_use":
        use = block.tool_use
        if version == 2:
            return {"type": "tool_call", "id": use.id, "name": use.name, "input": use.input_json}
        try:
            value = json.loads(use.input_json)
        except json.JSONDecodeError:
            value = None
        out: dict[str, Any] = {"type": "tool_use", "id": use.id, "name": use.name}
        if isinstance(value, dict):
            out["input"] = value
            if _dumps_input(value) != use.input_json:
                out["raw_input"] = use.input_json
        else:
            out["input"] = {}
            out["raw_input"] = use.input_json
        return out
    result = block.tool_result
    out = {
        "type": "tool_result",
        "id": result.tool_use_id,
        "name": result.name,
        "output": [{"type": "text", "text": result.output}],
    }
    if version == 2 and result.HasField("truncation"):
        truncation = json_format.MessageToDict(result.truncation, preserving_proto_field_name=True)
        out["metadata"] = {TRUNCATION_METADATA_KEY: truncation}
    return out


def _from_agentscope_block(raw: Any, path: str, drop_thinking: bool) -> compaction_pb2.ContentBlock | None:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: expected a content block dict, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind == "text":
        return _text(_required_str(raw, "text", path, allow_empty=True))
    if kind in ("tool_call", "tool_use"):
        return compaction_pb2.ContentBlock(
            tool_use=compaction_pb2.ToolUseBlock(
                id=_required_str(raw, "id", path),
                name=_required_str(raw, "name", path),
                input_json=_agentscope_input(raw, path),
            )
        )
    if kind == "tool_result":
        result = compaction_pb2.ToolResultBlock(
            tool_use_id=_required_str(raw, "id", path),
            name=_optional_str(raw, "name", path),
            output=_agentscope_output(raw.get("output"), f"{path}.output"),
        )
        metadata = raw.get("metadata")
        if isinstance(metadata, Mapping) and metadata.get(TRUNCATION_METADATA_KEY) is not None:
            try:
                json_format.ParseDict(metadata[TRUNCATION_METADATA_KEY], result.truncation)
            except json_format.ParseError as e:
                raise ValueError(f"{path}.metadata.{TRUNCATION_METADATA_KEY}: {e}") from e
        return compaction_pb2.ContentBlock(tool_result=result)
    if kind == "thinking":
        if drop_thinking:
            return None
        raise ValueError(f"{path}.type: 'thinking' blocks have no ContextMessage form (drop_thinking=False)")
    if kind in ("image", "audio", "video", "data", "hint"):
        raise ValueError(f"{path}.type: {kind!r} blocks are not supported (content is text only)")
    raise ValueError(f"{path}.type: unknown block type {kind!r}")


def _agentscope_input(raw: Mapping[str, Any], path: str) -> str:
    """A tool call's input as JSON text: 2.x `input` string, 1.x `raw_input`, else
    1.x `input` dict serialised."""
    value = raw.get("input")
    if isinstance(value, str):
        return value
    raw_input = raw.get("raw_input")
    if isinstance(raw_input, str):
        return raw_input
    if isinstance(value, Mapping):
        try:
            return _dumps_input(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}.input: not serialisable as JSON: {e}") from e
    raise ValueError(f"{path}.input: expected a JSON string (2.x) or an object (1.x)")


def _agentscope_output(output: Any, path: str) -> str:
    if isinstance(output, str):
        return output
    if not isinstance(output, list | tuple):
        raise ValueError(f"{path}: expected a string or a list of text blocks, got {type(output).__name__}")
    texts: list[str] = []
    for k, block in enumerate(output):
        if not isinstance(block, Mapping):
            raise ValueError(f"{path}[{k}]: expected a content block dict, got {type(block).__name__}")
        kind = block.get("type")
        if kind != "text":
            raise ValueError(f"{path}[{k}].type: {kind!r} blocks in a tool output are not supported (text only)")
        texts.append(_required_str(block, "text", f"{path}[{k}]", allow_empty=True))
    return _PART_SEPARATOR.join(texts)


def _parse_agentscope_time(value: Any, path: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{path}: expected a time string, got {type(value).__name__}")
    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise ValueError(f"{path}: {value!r} is not an ISO 8601 or '{_AGENTSCOPE1_TIME}' time") from e
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


# -- shared ------------------------------------------------------------------------------------


def _text(text: str) -> compaction_pb2.ContentBlock:
    return compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=text))


def _dumps_input(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def _required_str(mapping: Mapping[str, Any], key: str, path: str, *, allow_empty: bool = False) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{path}.{key}: missing" if value in (None, "") else f"{path}.{key}: expected a string")
    return value


def _optional_str(mapping: Mapping[str, Any], key: str, path: str) -> str:
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path}.{key}: expected a string, got {type(value).__name__}")
    return value
