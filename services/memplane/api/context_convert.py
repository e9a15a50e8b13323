"""Wire form <-> domain form of context messages (CompactionService), with validation.

Every violation names its field as the client wrote it (`messages[3].content[1].tool_use.id`)
and all violations of a request are reported together (one INVALID_ARGUMENT).
"""

from __future__ import annotations

from collections.abc import Sequence

from memplane.api.convert import ROLES, timestamp, to_datetime
from memplane.domain.context import (
    Block,
    ContextMessage,
    ContextSplit,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Truncation,
)
from memplane.domain.models import MessageRole
from memplane.domain.validation import Violations, check_text
from memplane.settings import LimitsSettings
from memplane.v1 import compaction_pb2, memory_pb2

ROLE_VALUES: dict[MessageRole, memory_pb2.MessageRole.ValueType] = {
    MessageRole.SYSTEM: memory_pb2.MESSAGE_ROLE_SYSTEM,
    MessageRole.USER: memory_pb2.MESSAGE_ROLE_USER,
    MessageRole.ASSISTANT: memory_pb2.MESSAGE_ROLE_ASSISTANT,
    MessageRole.TOOL: memory_pb2.MESSAGE_ROLE_TOOL,
}

_NUL = "must not contain NUL characters (PostgreSQL text cannot store them)"


def _no_nul(v: Violations, field: str, value: str) -> None:
    if "\x00" in value:
        v.add(field, _NUL)


def _id(v: Violations, field: str, value: str, limits: LimitsSettings, *, required: bool) -> None:
    check_text(v, field, value, limits.max_id_bytes, required=required)


def _truncation_from_proto(v: Violations, field: str, t: compaction_pb2.ToolResultTruncation) -> Truncation | None:
    if not t.ref:
        v.add(f"{field}.ref", "must be set when truncation is given")
        return None
    try:
        expires = to_datetime(t.expire_time, f"{field}.expire_time")
    except Exception as exc:  # InvalidArgumentError: collected like the others
        v.add(f"{field}.expire_time", str(exc))
        return None
    return Truncation(
        ref=t.ref,
        total_bytes=t.total_bytes,
        total_lines=t.total_lines,
        kept_bytes=t.kept_bytes,
        resume_line=t.resume_line,
        resume_column=t.resume_column,
        expires_at=expires,
    )


def _block_from_proto(
    v: Violations, field: str, block: compaction_pb2.ContentBlock, limits: LimitsSettings
) -> Block | None:
    kind = block.WhichOneof("block")
    if kind == "text":
        _no_nul(v, f"{field}.text.text", block.text.text)
        return TextBlock(block.text.text)
    if kind == "tool_use":
        use = block.tool_use
        _id(v, f"{field}.tool_use.id", use.id, limits, required=True)
        check_text(v, f"{field}.tool_use.name", use.name, limits.max_id_bytes)
        _no_nul(v, f"{field}.tool_use.input_json", use.input_json)
        return ToolUseBlock(id=use.id, name=use.name, input_json=use.input_json or "{}")
    if kind == "tool_result":
        result = block.tool_result
        _id(v, f"{field}.tool_result.tool_use_id", result.tool_use_id, limits, required=True)
        check_text(v, f"{field}.tool_result.name", result.name, limits.max_id_bytes)
        _no_nul(v, f"{field}.tool_result.output", result.output)
        truncation = (
            _truncation_from_proto(v, f"{field}.tool_result.truncation", result.truncation)
            if result.HasField("truncation")
            else None
        )
        return ToolResultBlock(
            tool_use_id=result.tool_use_id, output=result.output, name=result.name, truncation=truncation
        )
    v.add(field, "must set one of text, tool_use or tool_result")
    return None


def messages_from_proto(
    messages: Sequence[compaction_pb2.ContextMessage],
    limits: LimitsSettings,
    *,
    field: str = "messages",
    max_messages: int,
    required: bool = True,
) -> list[ContextMessage]:
    """Domain messages of a request. Raises `InvalidArgumentError` listing every bad field:
    a missing role, a message without content blocks, an empty block, a tool call without
    id, ids over `limits.max_id_bytes` or starting with "#", NUL characters, more than
    *max_messages* messages, or none when *required*."""
    v = Violations()
    if required and not messages:
        v.add(field, "must hold at least one message")
    if len(messages) > max_messages:
        v.add(field, f"holds {len(messages)} messages; the limit is {max_messages}")
        v.raise_if_any()
    out: list[ContextMessage] = []
    for i, message in enumerate(messages):
        path = f"{field}[{i}]"
        if message.role not in ROLES:
            v.add(f"{path}.role", "must be SYSTEM, USER, ASSISTANT or TOOL")
        _id(v, f"{path}.id", message.id, limits, required=False)
        if message.id.startswith("#"):
            v.add(f"{path}.id", "must not start with '#' (reserved for server-numbered transcript ids)")
        check_text(v, f"{path}.name", message.name, limits.max_id_bytes)
        if not message.content:
            v.add(f"{path}.content", "must hold at least one content block")
        blocks = [_block_from_proto(v, f"{path}.content[{j}]", b, limits) for j, b in enumerate(message.content)]
        created = None
        if message.HasField("create_time"):
            try:
                created = to_datetime(message.create_time, f"{path}.create_time")
            except Exception:
                v.add(f"{path}.create_time", "must be a valid Timestamp from 0001-01-01 to 9999-12-31 UTC")
        out.append(
            ContextMessage(
                role=ROLES.get(message.role, MessageRole.USER),
                blocks=tuple(b for b in blocks if b is not None),
                name=message.name,
                id=message.id,
                created_at=created,
            )
        )
    v.raise_if_any()
    return out


def _block_to_proto(block: Block) -> compaction_pb2.ContentBlock:
    if isinstance(block, TextBlock):
        return compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=block.text))
    if isinstance(block, ToolUseBlock):
        return compaction_pb2.ContentBlock(
            tool_use=compaction_pb2.ToolUseBlock(id=block.id, name=block.name, input_json=block.input_json)
        )
    out = compaction_pb2.ToolResultBlock(tool_use_id=block.tool_use_id, name=block.name, output=block.output)
    if block.truncation is not None:
        t = block.truncation
        out.truncation.CopyFrom(
            compaction_pb2.ToolResultTruncation(
                ref=t.ref,
                total_bytes=t.total_bytes,
                total_lines=t.total_lines,
                kept_bytes=t.kept_bytes,
                resume_line=t.resume_line,
                resume_column=t.resume_column,
                expire_time=timestamp(t.expires_at),
            )
        )
    return compaction_pb2.ContentBlock(tool_result=out)


def message_to_proto(message: ContextMessage) -> compaction_pb2.ContextMessage:
    """Wire form of a domain message."""
    return compaction_pb2.ContextMessage(
        id=message.id,
        role=ROLE_VALUES[message.role],
        name=message.name,
        content=[_block_to_proto(b) for b in message.blocks],
        create_time=timestamp(message.created_at),
    )


def split_to_proto(split: ContextSplit, encoding: str) -> compaction_pb2.ContextSplit:
    """Wire form of a context split."""
    return compaction_pb2.ContextSplit(
        total_tokens=split.total_tokens,
        system_prompt_tokens=split.system_prompt_tokens,
        previous_summary_tokens=split.previous_summary_tokens,
        message_tokens=list(split.message_tokens),
        needs_compaction=split.needs_compaction,
        keep_from_index=split.keep_from,
        kept_tokens=split.kept_tokens,
        over_reserve=split.over_reserve,
        valid=split.valid,
        problems=list(split.problems),
        encoding=encoding,
        threshold_tokens=split.threshold_tokens,
    )
