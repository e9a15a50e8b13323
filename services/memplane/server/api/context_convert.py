"""Wire form <-> domain form of context messages (CompactionService), with validation.

Every violation names its field as the client wrote it (`messages[3].content[1].tool_use.id`)
and all violations of a request are reported together (one INVALID_ARGUMENT).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from memplane.convert import ROLES, timestamp, to_datetime
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
from memplane.server.settings import LimitsSettings
from memplane.server.validation import Violations, check_text
from memplane.v1 import compaction_pb2, memory_pb2

ROLE_VALUES: dict[MessageRole, memory_pb2.MessageRole.ValueType] = {
    role: memory_pb2.MessageRole.ValueType(value) for value, role in ROLES.items()
}

# "#<n>": server-numbered transcript ids; "~<hex>": content ids of id-less compacted messages.
RESERVED_ID_PREFIXES = ("#", "~")

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
    v: Violations, path: Callable[[], str], block: compaction_pb2.ContentBlock, max_id_bytes: int
) -> Block | None:
    """One block; *path* builds the block's field path only when a violation needs it
    (a 1M-token request holds ~10,000 blocks: formatting paths eagerly cost more than
    counting their tokens)."""
    kind = block.WhichOneof("block")
    if kind == "text":
        text = block.text.text
        if "\x00" in text:
            v.add(f"{path()}.text.text", _NUL)
        return TextBlock(text)
    if kind == "tool_use":
        use = block.tool_use
        uid, name, args = use.id, use.name, use.input_json
        if not uid.strip() or len(uid) > max_id_bytes // 4 or len(name) > max_id_bytes // 4 or "\x00" in args + uid:
            _check_tool_use(v, path(), uid, name, args, max_id_bytes=max_id_bytes)
        return ToolUseBlock(id=uid, name=name, input_json=args or "{}")
    if kind == "tool_result":
        result = block.tool_result
        uid, name, output = result.tool_use_id, result.name, result.output
        if not uid.strip() or len(uid) > max_id_bytes // 4 or len(name) > max_id_bytes // 4 or "\x00" in output:
            _check_tool_result(v, path(), uid, name, output, max_id_bytes=max_id_bytes)
        truncation = (
            _truncation_from_proto(v, f"{path()}.tool_result.truncation", result.truncation)
            if result.HasField("truncation")
            else None
        )
        return ToolResultBlock(tool_use_id=uid, output=output, name=name, truncation=truncation)
    v.add(path(), "must set one of text, tool_use or tool_result")
    return None


def _check_tool_use(v: Violations, field: str, uid: str, name: str, args: str, *, max_id_bytes: int) -> None:
    check_text(v, f"{field}.tool_use.id", uid, max_id_bytes, required=True)
    check_text(v, f"{field}.tool_use.name", name, max_id_bytes)
    _no_nul(v, f"{field}.tool_use.input_json", args)


def _check_tool_result(v: Violations, field: str, uid: str, name: str, output: str, *, max_id_bytes: int) -> None:
    check_text(v, f"{field}.tool_result.tool_use_id", uid, max_id_bytes, required=True)
    check_text(v, f"{field}.tool_result.name", name, max_id_bytes)
    _no_nul(v, f"{field}.tool_result.output", output)


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
    id, ids over `limits.max_id_bytes`, starting with "#" or "~" or repeated, NUL characters, more than
    `limits.max_content_blocks` blocks in a message, more than *max_messages* messages, or none
    when *required*. Linear in the request size; field
    paths are formatted only for violations."""
    v = Violations()
    if required and not messages:
        v.add(field, "must hold at least one message")
    if len(messages) > max_messages:
        v.add(field, f"holds {len(messages)} messages; the limit is {max_messages}")
        v.raise_if_any()
    max_id = limits.max_id_bytes
    out: list[ContextMessage] = []
    roles = ROLES
    seen: dict[str, int] = {}
    for i, message in enumerate(messages):
        role = roles.get(message.role)
        mid, name, content = message.id, message.name, message.content
        if mid:
            first = seen.setdefault(mid, i)
            if first != i:  # a transcript matches messages by id: two with one id would lose one
                v.add(f"{field}[{i}].id", f"repeats {field}[{first}].id; message ids are unique within a session")
        if (
            role is None
            or not content
            or mid.startswith(RESERVED_ID_PREFIXES)
            or len(mid) > max_id // 4  # a code point is at most 4 bytes: shorter ids surely fit
            or len(name) > max_id // 4
            or "\x00" in mid
            or "\x00" in name
        ):
            _check_message(v, f"{field}[{i}]", message, limits)
        blocks: list[Block] = []
        if len(content) > limits.max_content_blocks:
            v.add(f"{field}[{i}].content", f"holds {len(content)} blocks; the limit is {limits.max_content_blocks}")
            continue
        for j, b in enumerate(content):
            block = _block_from_proto(v, functools.partial(_block_path, field, i, j), b, max_id)
            if block is not None:
                blocks.append(block)
        created = None
        if message.HasField("create_time"):
            try:
                created = to_datetime(message.create_time, f"{field}[{i}].create_time")
            except Exception:
                v.add(f"{field}[{i}].create_time", "must be a valid Timestamp from 0001-01-01 to 9999-12-31 UTC")
        out.append(
            ContextMessage(role=role or MessageRole.USER, blocks=tuple(blocks), name=name, id=mid, created_at=created)
        )
    v.raise_if_any()
    return out


def _block_path(field: str, i: int, j: int) -> str:
    return f"{field}[{i}].content[{j}]"


def _check_message(v: Violations, path: str, message: compaction_pb2.ContextMessage, limits: LimitsSettings) -> None:
    """The slow, exact checks of one message's own fields (run when the fast test fails)."""
    if message.role not in ROLES:
        v.add(f"{path}.role", "must be SYSTEM, USER, ASSISTANT or TOOL")
    _id(v, f"{path}.id", message.id, limits, required=False)
    if message.id.startswith(RESERVED_ID_PREFIXES):
        v.add(f"{path}.id", "must not start with '#' or '~' (reserved for ids the server assigns in transcripts)")
    check_text(v, f"{path}.name", message.name, limits.max_id_bytes)
    if not message.content:
        v.add(f"{path}.content", "must hold at least one content block")


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
