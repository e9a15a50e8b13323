"""The JSONL export format, checked without a server (memplane.client.export_format):
every malformed line is refused naming its number and field."""

from __future__ import annotations

import json

import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from memplane.client.export_format import (
    FORMAT,
    ImportLineError,
    end_line,
    event_line,
    header_line,
    memory_input,
    memory_line,
    parse_export,
)
from memplane.v1 import memory_pb2


def _memory(i: int = 1, **fields: object) -> memory_pb2.Memory:
    metadata = struct_pb2.Struct()
    metadata.update({"topic": "tea", "n": i, "tags": ["a", "b"], "nested": {"x": None}})
    memory = memory_pb2.Memory(
        id=f"00000000-0000-4000-8000-{i:012d}",
        scope=memory_pb2.Scope(user_id="u", agent_id="a", session_id="s"),
        type=memory_pb2.MEMORY_TYPE_FEEDBACK,
        name="tea",
        description="drinks",
        content=f"likes green tea 绿茶 #{i}\nsecond line",
        metadata=metadata,
        valid_from_time=timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=123_000),
        provenance=memory_pb2.Provenance(session_id="s", message_ids=["m1", "m2"]),
        version=3,
        create_time=timestamp_pb2.Timestamp(seconds=1_700_000_000),
        update_time=timestamp_pb2.Timestamp(seconds=1_700_000_100),
    )
    for name, value in fields.items():
        setattr(memory, name, value)
    return memory


def _file(*middle: str, history: bool = False, end: str | None = None) -> list[str]:
    memories = sum(1 for line in middle if json.loads(line).get("kind") == "memory")
    events = sum(1 for line in middle if json.loads(line).get("kind") == "event")
    return [header_line(history=history), *middle, end if end is not None else end_line(memories, events)]


def _error(lines: list[str]) -> ImportLineError:
    with pytest.raises(ImportLineError) as caught:
        parse_export(lines)
    return caught.value


def test_round_trip_keeps_every_field() -> None:
    one, two = _memory(1), _memory(2, type=memory_pb2.MEMORY_TYPE_EPISODIC)
    two.valid_to_time.FromSeconds(1_800_000_000)
    two.expire_time.FromSeconds(1_900_000_000)
    event = memory_pb2.MemoryEvent(id=7, memory_id=one.id, kind=memory_pb2.EVENT_KIND_UPDATE, actor="k1")
    event.before.CopyFrom(one)
    event.after.CopyFrom(one)
    parsed = parse_export(_file(memory_line(one), event_line(event), memory_line(two), history=True))
    assert parsed.history is True
    assert [(n, m) for n, m in parsed.memories] == [(2, one), (4, two)]
    assert parsed.events == [(3, event)]


def test_lines_are_snake_case_with_defaults_printed() -> None:
    bare = memory_pb2.Memory(id="x", type=memory_pb2.MEMORY_TYPE_USER, content="c")
    obj = json.loads(memory_line(bare))["memory"]
    assert obj["type"] == "MEMORY_TYPE_USER"
    assert obj["name"] == ""  # every scalar is there, even at its default
    assert obj["version"] == "0"  # int64 as a JSON string (protobuf's JSON mapping)
    assert "valid_to_time" not in obj  # an unset time stays unset
    assert json.loads(memory_line(_memory()))["memory"]["valid_from_time"] == "2023-11-14T22:13:20.000123Z"


def test_memory_input_keeps_all_but_the_server_assigned_fields() -> None:
    memory = _memory()
    memory.valid_to_time.FromSeconds(1_800_000_000)
    item = memory_input(memory)
    assert (item.scope, item.type, item.name, item.description, item.content) == (
        memory.scope,
        memory.type,
        memory.name,
        memory.description,
        memory.content,
    )
    assert (item.metadata, item.provenance) == (memory.metadata, memory.provenance)
    assert (item.valid_from_time, item.valid_to_time) == (memory.valid_from_time, memory.valid_to_time)
    assert not item.HasField("expire_time")


def _memory_obj(**changes: object) -> str:
    obj = json.loads(memory_line(_memory()))
    obj["memory"].update(changes)
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        ("not json", "(line)", "is not JSON"),
        ("[1, 2]", "(line)", "JSON object"),
        (_memory_obj(type="MEMORY_TYPE_COLOUR"), "memory.type", "MEMORY_TYPE_COLOUR"),
        (_memory_obj(colour="green"), "memory.colour", "is not a field of Memory"),
        (_memory_obj(valid_from_time="yesterday"), "memory.valid_from_time", "yesterday"),
        (_memory_obj(scope={"user": "u"}), "memory.scope", "user"),
        (_memory_obj(metadata=[1]), "memory.metadata", ""),
        (_memory_obj(version="many"), "memory.version", "many"),
        (_memory_obj(content=""), "memory.content", "is required"),
        (_memory_obj(type="MEMORY_TYPE_UNSPECIFIED"), "memory.type", "must be set"),
        (json.dumps({"kind": "memory", "memory": "text"}), "memory", "JSON object"),
        (json.dumps({"kind": "memo"}), "kind", "'memo' is not one of"),
        (json.dumps({"kind": "event", "event": {"kind": "EVENT_KIND_NOPE"}}), "event.kind", "EVENT_KIND_NOPE"),
        (header_line(history=False), "kind", "a second header (the first is line 1)"),
    ],
)
def test_a_bad_line_is_named_with_its_field(line: str, field: str, words: str) -> None:
    good = memory_line(_memory(9))
    error = _error([header_line(history=False), good, line, good, end_line(2, 0)])
    assert (error.line, error.field) == (3, field)
    assert words in str(error)
    assert str(error).startswith(f"line 3: {field}: ")


def test_the_header_must_come_first_and_be_this_format() -> None:
    assert _error([memory_line(_memory()), end_line(1, 0)]).line == 1
    wrong = json.dumps({"kind": "header", "format": "mem0.v1"})
    error = _error([wrong, end_line(0, 0)])
    assert (error.line, error.field) == (1, "format")
    assert FORMAT in str(error)
    assert "empty" in str(_error([]))
    assert "empty" in str(_error(["", "  "]))


def test_a_truncated_file_or_wrong_counts_are_refused() -> None:
    lines = _file(memory_line(_memory(1)), memory_line(_memory(2)))
    error = _error(lines[:-1])
    assert (error.line, error.field) == (4, "kind")
    assert "truncated" in str(error)
    assert "counts 3 memories" in str(_error(_file(memory_line(_memory(1)), end=end_line(3, 0))))
    after = _error([*lines, memory_line(_memory(3))])
    assert (after.line, after.field) == (5, "kind")
    assert "after the end line (line 4)" in str(after)


def test_an_id_twice_is_refused_naming_both_lines() -> None:
    error = _error(_file(memory_line(_memory(1)), memory_line(_memory(2)), memory_line(_memory(1))))
    assert (error.line, error.field) == (4, "memory.id")
    assert "also on line 2" in str(error)


def test_blank_lines_are_skipped_and_keep_numbering() -> None:
    lines = [header_line(history=False), "\n", memory_line(_memory()), "", end_line(1, 0)]
    assert [n for n, _ in parse_export(lines).memories] == [3]
