"""What both message formats share: the `ContextMessage` type and roles, the builders
`user` / `assistant`, and field readers whose `ValueError`s name the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memplane.v1 import compaction_pb2, memory_pb2

ContextMessage = compaction_pb2.ContextMessage

SYSTEM = memory_pb2.MESSAGE_ROLE_SYSTEM
USER = memory_pb2.MESSAGE_ROLE_USER
ASSISTANT = memory_pb2.MESSAGE_ROLE_ASSISTANT
TOOL = memory_pb2.MESSAGE_ROLE_TOOL

# Key of AgentScope 2.x `ToolResultBlock.metadata` that carries a `ToolResultTruncation`
# (proto3 JSON, field names as in the proto) so a cut output keeps its reference.
TRUNCATION_METADATA_KEY = "memplane_truncation"

# AgentScope 1.x `Msg.timestamp`: local time, milliseconds (`strftime(...)[:-3]`).
AGENTSCOPE1_TIME = "%Y-%m-%d %H:%M:%S.%f"
SYSTEM_PROMPT_SEPARATOR = "\n\n"
PART_SEPARATOR = "\n"

# -- builders ---------------------------------------------------------------------------


def user(text: str, *, name: str = "", id: str = "") -> ContextMessage:
    """A USER `ContextMessage` with one text block."""
    return ContextMessage(id=id, role=USER, name=name, content=[text_block(text)])


def assistant(text: str, *, name: str = "", id: str = "") -> ContextMessage:
    """An ASSISTANT `ContextMessage` with one text block."""
    return ContextMessage(id=id, role=ASSISTANT, name=name, content=[text_block(text)])


def text_block(text: str) -> compaction_pb2.ContentBlock:
    return compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=text))


def dumps_input(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def required_str(mapping: Mapping[str, Any], key: str, path: str, *, allow_empty: bool = False) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ValueError(f"{path}.{key}: missing" if value in (None, "") else f"{path}.{key}: expected a string")
    return value


def optional_str(mapping: Mapping[str, Any], key: str, path: str) -> str:
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path}.{key}: expected a string, got {type(value).__name__}")
    return value
