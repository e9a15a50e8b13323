"""JSON form of content blocks, as stored in `transcript_messages.blocks` (jsonb).

One object per block, tagged by "type":

    {"type": "text", "text": "..."}
    {"type": "tool_use", "id": "...", "name": "...", "input_json": "{...}"}
    {"type": "tool_result", "tool_use_id": "...", "name": "...", "output": "...",
     "truncation": {"ref": "<uuid>", "total_bytes": 312345, "total_lines": 1,
                    "kept_bytes": 102400, "resume_line": 1, "resume_column": 102400,
                    "expires_at": "2026-12-03T10:00:00Z"}}

"truncation" is present only when the output was cut; sizes are UTF-8 bytes, lines
1-based, columns 0-based code points, `expires_at` ISO-8601 in UTC with a "Z" suffix.
Unknown keys are ignored when reading (room for later fields); a missing required key
or an unknown type raises `ValueError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from memplane.domain.context import Block, TextBlock, ToolResultBlock, ToolUseBlock, Truncation


def datetime_to_json(value: datetime) -> str:
    """ISO-8601 in UTC with a "Z" suffix ("2026-12-03T10:00:00Z", microseconds kept when
    non-zero). Raises `ValueError` for a naive datetime."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("naive datetime: times must be timezone-aware UTC")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def datetime_from_json(value: Any) -> datetime:
    """Parse what `datetime_to_json` writes (any ISO-8601 with an offset), as aware UTC.
    Raises `ValueError` for a non-string, a malformed value or one without an offset."""
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO-8601 string, got {type(value).__name__}")
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without a UTC offset: {value!r}")
    return parsed.astimezone(UTC)


def truncation_to_json(truncation: Truncation) -> dict[str, Any]:
    """JSON object of a `Truncation` (see the module docstring)."""
    return {
        "ref": truncation.ref,
        "total_bytes": truncation.total_bytes,
        "total_lines": truncation.total_lines,
        "kept_bytes": truncation.kept_bytes,
        "resume_line": truncation.resume_line,
        "resume_column": truncation.resume_column,
        "expires_at": datetime_to_json(truncation.expires_at),
    }


def truncation_from_json(data: Any) -> Truncation:
    """The `Truncation` of a JSON object. Raises `ValueError` when malformed."""
    obj = _object(data, "truncation")
    return Truncation(
        ref=_str(obj, "ref"),
        total_bytes=_int(obj, "total_bytes"),
        total_lines=_int(obj, "total_lines"),
        kept_bytes=_int(obj, "kept_bytes"),
        resume_line=_int(obj, "resume_line"),
        resume_column=_int(obj, "resume_column"),
        expires_at=datetime_from_json(obj.get("expires_at")),
    )


def block_to_json(block: Block) -> dict[str, Any]:
    """JSON object of one block."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input_json": block.input_json}
    out: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "name": block.name,
        "output": block.output,
    }
    if block.truncation is not None:
        out["truncation"] = truncation_to_json(block.truncation)
    return out


def block_from_json(data: Any) -> Block:
    """The block of one JSON object. Raises `ValueError` for an unknown "type" or a
    missing / mistyped field."""
    obj = _object(data, "block")
    kind = obj.get("type")
    if kind == "text":
        return TextBlock(text=_str(obj, "text"))
    if kind == "tool_use":
        return ToolUseBlock(id=_str(obj, "id"), name=_str(obj, "name"), input_json=_str(obj, "input_json", "{}"))
    if kind == "tool_result":
        raw = obj.get("truncation")
        return ToolResultBlock(
            tool_use_id=_str(obj, "tool_use_id"),
            output=_str(obj, "output"),
            name=_str(obj, "name", ""),
            truncation=None if raw is None else truncation_from_json(raw),
        )
    raise ValueError(f"unknown block type {kind!r}")


def blocks_to_json(blocks: Iterable[Block]) -> list[dict[str, Any]]:
    """JSON array of *blocks*, in order."""
    return [block_to_json(b) for b in blocks]


def blocks_from_json(data: Any) -> tuple[Block, ...]:
    """Blocks of a JSON array written by `blocks_to_json`. Raises `ValueError` when
    *data* is not a list or an element is malformed (the message names its index)."""
    if not isinstance(data, list):
        raise ValueError(f"blocks: expected a JSON array, got {type(data).__name__}")
    out: list[Block] = []
    for i, item in enumerate(data):
        try:
            out.append(block_from_json(item))
        except ValueError as exc:
            raise ValueError(f"blocks[{i}]: {exc}") from exc
    return tuple(out)


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


_MISSING = object()


def _str(obj: Mapping[str, Any], key: str, default: str | object = _MISSING) -> str:
    value = obj.get(key, default)
    if value is _MISSING:
        raise ValueError(f"missing {key!r}")
    if not isinstance(value, str):
        raise ValueError(f"{key!r}: expected a string, got {type(value).__name__}")
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r}: expected an integer, got {type(value).__name__}")
    return value
