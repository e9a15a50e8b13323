"""AgentScope `Msg` dicts to and from `ContextMessage` (see the package docstring)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from google.protobuf import json_format

from memplane.client.formats._common import (
    AGENTSCOPE1_TIME,
    ASSISTANT,
    PART_SEPARATOR,
    SYSTEM,
    TOOL,
    TRUNCATION_METADATA_KEY,
    USER,
    ContextMessage,
    dumps_input,
    optional_str,
    required_str,
    text_block,
)
from memplane.v1 import compaction_pb2, memory_pb2


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
            blocks = [text_block(content)]
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
            id=optional_str(msg, "id", path),
            role=role,
            name=optional_str(msg, "name", path),
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
                # = strftime(AGENTSCOPE1_TIME)[:-3], but with the year zero-padded: glibc's %Y
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
            if dumps_input(value) != use.input_json:
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
        return text_block(required_str(raw, "text", path, allow_empty=True))
    if kind in ("tool_call", "tool_use"):
        return compaction_pb2.ContentBlock(
            tool_use=compaction_pb2.ToolUseBlock(
                id=required_str(raw, "id", path),
                name=required_str(raw, "name", path),
                input_json=_agentscope_input(raw, path),
            )
        )
    if kind == "tool_result":
        result = compaction_pb2.ToolResultBlock(
            tool_use_id=required_str(raw, "id", path),
            name=optional_str(raw, "name", path),
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
            return dumps_input(value)
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
        texts.append(required_str(block, "text", f"{path}[{k}]", allow_empty=True))
    return PART_SEPARATOR.join(texts)


def _parse_agentscope_time(value: Any, path: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{path}: expected a time string, got {type(value).__name__}")
    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise ValueError(f"{path}: {value!r} is not an ISO 8601 or '{AGENTSCOPE1_TIME}' time") from e
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
