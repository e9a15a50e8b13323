"""The JSONL form of a workspace export (`memplane export jsonl`), written and checked
without a server. One JSON object per line, each with a ``kind``:

    {"kind": "header", "format": "memplane.workspace.v1", "export_time": "...Z", "history": false}
    {"kind": "memory", "memory": {...every field of memplane.v1.Memory...}}
    {"kind": "event", "event": {...memplane.v1.MemoryEvent...}}     (only with history)
    {"kind": "end", "memory_count": 2, "event_count": 0}

Messages are protobuf's JSON mapping with the proto field names (snake_case), enums by
name, times as RFC 3339 UTC, and every scalar printed even when it is its default. The
end line makes a truncated file detectable. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.v1 import memory_pb2

FORMAT = "memplane.workspace.v1"


class ImportLineError(InvalidArgumentError):
    """A line of an export file is malformed; `line` is its 1-based number and the one
    violation's field reads ``line <n>: <field>`` (e.g. ``line 3: memory.type``)."""

    reason = "IMPORT_LINE_INVALID"

    def __init__(self, line: int, field: str, description: str) -> None:
        self.line, self.field = line, field
        super().__init__(FieldViolation(f"line {line}: {field}", description))


def _to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def header_line(*, history: bool, now: datetime | None = None) -> str:
    """The first line: the format and whether history lines follow."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _line({"kind": "header", "format": FORMAT, "export_time": stamp, "history": history})


def memory_line(memory: memory_pb2.Memory) -> str:
    """One memory, every field."""
    return _line({"kind": "memory", "memory": _to_dict(memory)})


def event_line(event: memory_pb2.MemoryEvent) -> str:
    """One history event (after the line of its memory)."""
    return _line({"kind": "event", "event": _to_dict(event)})


def end_line(memory_count: int, event_count: int) -> str:
    """The last line: how many memory and event lines came before it."""
    return _line({"kind": "end", "memory_count": memory_count, "event_count": event_count})


@dataclass
class ParsedExport:
    """A checked export file: its memories in file order, each with its line number,
    and its history events (read and checked; import does not replay them)."""

    history: bool = False
    memories: list[tuple[int, memory_pb2.Memory]] = field(default_factory=list)
    events: list[tuple[int, memory_pb2.MemoryEvent]] = field(default_factory=list)


def _parse_message(number: int, key: str, value: object, message: Message) -> None:
    """Fill *message* from the JSON object *value*, one top-level field at a time so that
    an error names the field (``memory.type``). Raises `ImportLineError`."""
    if not isinstance(value, dict):
        raise ImportLineError(number, key, "must be a JSON object")
    for name, item in value.items():
        try:
            json_format.ParseDict({name: item}, message, ignore_unknown_fields=False)
        except json_format.ParseError as exc:
            if name not in message.DESCRIPTOR.fields_by_name:
                raise ImportLineError(number, f"{key}.{name}", f"is not a field of {message.DESCRIPTOR.name}") from None
            shown = json.dumps(item, ensure_ascii=False)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ImportLineError(number, f"{key}.{name}", f"{shown} does not parse: {exc}") from None


def _check_memory(number: int, memory: memory_pb2.Memory, seen: dict[str, int]) -> None:
    if not memory.content:
        raise ImportLineError(number, "memory.content", "is required (1 byte or more)")
    if memory.type == memory_pb2.MEMORY_TYPE_UNSPECIFIED:
        raise ImportLineError(number, "memory.type", "must be set (e.g. MEMORY_TYPE_USER)")
    if memory.id:
        if memory.id in seen:
            raise ImportLineError(number, "memory.id", f"{memory.id} is also on line {seen[memory.id]}")
        seen[memory.id] = number


def _object(number: int, text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportLineError(number, "(line)", f"is not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ImportLineError(number, "(line)", "must be a JSON object")
    return obj


class _Reader:
    """The state of `parse_export` between lines."""

    def __init__(self) -> None:
        self.parsed = ParsedExport()
        self.seen: dict[str, int] = {}
        self.header = self.end = 0

    def read(self, number: int, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        if self.end:
            raise ImportLineError(number, "kind", f"comes after the end line (line {self.end})")
        if not self.header:
            self._header(number, obj, kind)
            return
        handlers = {"memory": self._memory, "event": self._event, "end": self._end}
        if kind == "header":
            raise ImportLineError(number, "kind", f"a second header (the first is line {self.header})")
        if kind not in handlers:
            raise ImportLineError(number, "kind", f"{kind!r} is not one of header, memory, event, end")
        handlers[kind](number, obj)

    def _header(self, number: int, obj: dict[str, Any], kind: object) -> None:
        if kind != "header":
            raise ImportLineError(number, "kind", f"the first line must be the header, not {kind!r}")
        if obj.get("format") != FORMAT:
            raise ImportLineError(number, "format", f"{obj.get('format')!r} is not {FORMAT!r}")
        self.parsed.history, self.header = bool(obj.get("history")), number

    def _memory(self, number: int, obj: dict[str, Any]) -> None:
        memory = memory_pb2.Memory()
        _parse_message(number, "memory", obj.get("memory"), memory)
        _check_memory(number, memory, self.seen)
        self.parsed.memories.append((number, memory))

    def _event(self, number: int, obj: dict[str, Any]) -> None:
        event = memory_pb2.MemoryEvent()
        _parse_message(number, "event", obj.get("event"), event)
        self.parsed.events.append((number, event))

    def _end(self, number: int, obj: dict[str, Any]) -> None:
        counts = (obj.get("memory_count"), obj.get("event_count"))
        have = (len(self.parsed.memories), len(self.parsed.events))
        if counts != have:
            raise ImportLineError(
                number,
                "memory_count",
                f"the end line counts {counts[0]} memories and {counts[1]} events, the file {have[0]} and {have[1]}",
            )
        self.end = number


def parse_export(lines: Iterable[str]) -> ParsedExport:
    """Check every line of an export file (an iterable of its lines, e.g. an open text
    file) and return its content. Raises `ImportLineError` naming the first bad line and
    field: not JSON, no header first, an unknown ``kind``, a field that does not parse or
    is not a field, a memory without content or type, an id seen twice, a line after the
    end line, counts that disagree with the end line, or no end line (truncated)."""
    reader = _Reader()
    number = 0
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            reader.read(number, _object(number, raw))
    if not reader.header:
        raise ImportLineError(1, "kind", "the file is empty: the first line must be the header")
    if not reader.end:
        raise ImportLineError(number + 1, "kind", "no end line: the file is truncated")
    return reader.parsed


def memory_input(memory: memory_pb2.Memory) -> memory_pb2.MemoryInput:
    """What AddMemories stores again of an exported memory: every field but the
    server-assigned id, version, create_time and update_time."""
    item = memory_pb2.MemoryInput(
        scope=memory.scope,
        type=memory.type,
        name=memory.name,
        description=memory.description,
        content=memory.content,
        metadata=memory.metadata,
        provenance=memory.provenance,
    )
    for name in ("valid_from_time", "valid_to_time", "expire_time"):
        if memory.HasField(name):
            getattr(item, name).CopyFrom(getattr(memory, name))
    return item
