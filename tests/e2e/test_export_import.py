"""`memplane export jsonl` / `memplane import jsonl` against the session server (real
gRPC, real PostgreSQL): a round trip into a fresh workspace keeps every field but the
server-assigned ones; a bad line or a refused batch stores nothing."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf import struct_pb2, timestamp_pb2

from memplane.cli.main import main
from memplane.client.aio import AsyncMemplaneClient
from memplane.client.export_format import end_line, header_line, memory_line
from memplane.client.transfer import export_workspace, import_workspace
from memplane.errors import QuotaExceededError
from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory

# Fields the server assigns on import; every other field of Memory must come back equal.
REASSIGNED = ("id", "version", "create_time", "update_time")
ALL = filter_pb2.MemoryFilter(include_superseded=True, include_expired=True)


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)  # main() runs its own loop
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _ts(when: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when)
    return stamp


async def _everything(client: AsyncMemplaneClient) -> list[memory_pb2.Memory]:
    reply = await client.list_memories(filter=ALL, page_size=1000)
    assert not reply.next_page_token
    return list(reply.memories)


def _without_reassigned(memory: memory_pb2.Memory) -> memory_pb2.Memory:
    copy = memory_pb2.Memory()
    copy.CopyFrom(memory)
    for name in REASSIGNED:
        copy.ClearField(name)
    return copy


async def _seed(client: AsyncMemplaneClient) -> None:
    """Memories of every type with every field set, a superseded one, an expired one not
    yet erased, conversation turns, an updated one and a deleted one."""
    now = datetime.now(UTC).replace(microsecond=0)
    metadata = struct_pb2.Struct()
    metadata.update({"topic": "tea", "score": 0.25, "count": 3, "ok": True, "none": None, "tags": ["a", "绿"]})
    items = [
        memory_pb2.MemoryInput(
            scope=memory_pb2.Scope(user_id=f"u{i % 2}", agent_id="planner" if i % 3 else "", session_id=f"s{i}"),
            type=mtype,
            name=f"name {i}",
            description=f"description {i}",
            content=f"fact {i}: likes green tea 喜欢绿茶\n  with a second line\ttab",
            metadata=metadata,
            valid_from_time=_ts(now - timedelta(days=30 - i)),
            provenance=memory_pb2.Provenance(session_id=f"s{i}", message_ids=[f"D{i}:1", f"D{i}:2"]),
        )
        for i, mtype in enumerate(memory_pb2.MemoryType.values()[1:], start=1)
    ]
    items[0].valid_to_time.CopyFrom(_ts(now - timedelta(days=1)))  # superseded
    items[1].expire_time.CopyFrom(_ts(now - timedelta(minutes=1)))  # expired, not yet erased
    items[2].expire_time.CopyFrom(_ts(now + timedelta(days=7)))
    items.append(memory_pb2.MemoryInput(content="bare"))
    stored = await client.add_memories(items)
    await client.update_memory(
        stored[3].id, memory_pb2.MemoryInput(content="updated fact", name="renamed"), ["content", "name"]
    )
    await client.delete_memory(stored[4].id)
    messages = [
        writeback_pb2.ConversationMessage(id="m1", role=memory_pb2.MESSAGE_ROLE_USER, name="Ann", content="hi there"),
        writeback_pb2.ConversationMessage(id="m2", role=memory_pb2.MESSAGE_ROLE_ASSISTANT, content="hello Ann"),
    ]
    await client.write_conversation(memory_pb2.Scope(user_id="u0", session_id="chat"), messages)


async def test_round_trip_keeps_every_field_but_the_server_assigned_ones(
    server: str, workspace_factory: WorkspaceFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = await workspace_factory(), await workspace_factory()
    await _seed(source.client)
    started = datetime.now(UTC)
    exported, id_map = tmp_path / "ws.jsonl", tmp_path / "ids.tsv"

    code, _, err = await _run(
        ["export", "jsonl", str(exported), "--history", "--target", server, "--api-key", source.key], capsys
    )
    assert code == 0, err
    originals = await _everything(source.client)
    assert len(originals) == 9  # 7 typed + 1 bare - 1 deleted + 2 turns
    assert any(m.HasField("valid_to_time") for m in originals)  # the superseded one is there
    assert any(m.HasField("expire_time") and m.expire_time.ToDatetime(tzinfo=UTC) < started for m in originals)
    assert f"exported {len(originals)} memories" in err

    code, out, err = await _run(
        ["import", "jsonl", str(exported), "--id-map", str(id_map), "--target", server, "--api-key", target.key], capsys
    )
    assert code == 0, err
    events = sum([len(await source.client.list_memory_events(m.id)) for m in originals])
    assert events == len(originals) + 1  # an ADD each, and the UPDATE of the updated one
    assert out == f"imported {len(originals)} memories ({events} history events read, not replayed)\n"

    mapping = dict(line.split("\t") for line in id_map.read_text().splitlines())
    assert sorted(mapping) == sorted(m.id for m in originals)
    copies = {m.id: m for m in await _everything(target.client)}
    assert sorted(copies) == sorted(mapping.values())
    for original in originals:
        copy = copies[mapping[original.id]]
        assert _without_reassigned(copy) == _without_reassigned(original)  # every other field, bit for bit
        assert copy.id != original.id
        assert copy.version == 1
        assert copy.create_time.ToDatetime(tzinfo=UTC) >= started.replace(microsecond=0)
    updated = next(m for m in originals if m.name == "renamed")
    assert updated.version == 2
    # the imported memories are found by search (embedded again by the target's server)
    hits = await target.client.search("updated fact", top_k=3)
    assert hits.hits[0].memory.id == mapping[updated.id]


async def test_history_lines_hold_each_memorys_events(
    server: str, workspace: TestWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = await workspace.client.add_memories([memory_pb2.MemoryInput(content="v1")])
    await workspace.client.update_memory(stored[0].id, memory_pb2.MemoryInput(content="v2"), ["content"])
    out = tmp_path / "h.jsonl"
    conn = ["--target", server, "--api-key", workspace.key]
    assert (await _run(["export", "jsonl", str(out), "--history", *conn], capsys))[0] == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["header", "memory", "event", "event", "end"]
    assert lines[0]["history"] is True
    add, update = lines[2]["event"], lines[3]["event"]
    assert (add["kind"], add["after"]["content"]) == ("EVENT_KIND_ADD", "v1")
    assert (update["kind"], update["before"]["content"], update["after"]["content"]) == (
        "EVENT_KIND_UPDATE",
        "v1",
        "v2",
    )
    assert lines[4] == {"kind": "end", "memory_count": 1, "event_count": 2}
    # without --history: no event lines
    assert (await _run(["export", "jsonl", str(out), *conn], capsys))[0] == 0
    assert [json.loads(line)["kind"] for line in out.read_text().splitlines()] == ["header", "memory", "end"]


async def test_a_bad_line_imports_nothing_and_names_line_and_field(
    server: str, workspace: TestWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = memory_line(memory_pb2.Memory(type=memory_pb2.MEMORY_TYPE_USER, content="fine"))
    bad = json.loads(good)
    bad["memory"]["expire_time"] = "next week"
    path = tmp_path / "bad.jsonl"
    path.write_text(header_line(history=False) + good + json.dumps(bad) + "\n" + good + end_line(3, 0))
    code, _, err = await _run(["import", "jsonl", str(path), "--target", server, "--api-key", workspace.key], capsys)
    assert code == 1
    assert "line 3: memory.expire_time: " in err
    assert "next week" in err
    assert (await workspace.client.list_memories(filter=ALL)).total_size == 0


def _file(contents: list[str]) -> list[str]:
    lines = [memory_line(memory_pb2.Memory(type=memory_pb2.MEMORY_TYPE_PROJECT, content=c)) for c in contents]
    return [header_line(history=False), *lines, end_line(len(lines), 0)]


async def test_a_batch_the_server_refuses_rolls_back_the_batches_before_it(workspace: TestWorkspace) -> None:
    too_long = "x" * (32 * 1024 + 1)  # over the server's limits.max_content_bytes
    lines = _file(["one", "two", "three", too_long, "five"])
    with pytest.raises(Exception, match=r"^line 5: memory\.content: ") as caught:
        await import_workspace(workspace.client, lines, batch_size=2)  # batch 2 holds lines 4 and 5
    assert type(caught.value).__name__ == "ImportLineError"
    assert (await workspace.client.list_memories(filter=ALL)).total_size == 0


async def test_a_quota_hit_mid_import_rolls_back(workspace_factory: WorkspaceFactory) -> None:
    small = await workspace_factory(max_memories=3)
    with pytest.raises(QuotaExceededError):
        await import_workspace(small.client, _file(["a", "b", "c", "d"]), batch_size=2)
    assert (await small.client.list_memories(filter=ALL)).total_size == 0


async def test_export_pages_through_everything_oldest_first(workspace: TestWorkspace) -> None:
    ids = [(await workspace.client.add_memories([memory_pb2.MemoryInput(content=f"m{i}")]))[0].id for i in range(7)]
    out = io.StringIO()
    summary = await export_workspace(workspace.client, out, page_size=2)  # four pages
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["memory"]["id"] for line in lines if line["kind"] == "memory"] == ids
    assert (summary.memory_count, summary.event_count) == (7, 0)


async def test_a_failed_export_leaves_no_file(server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "never.jsonl"
    code, _, err = await _run(
        ["export", "jsonl", str(path), "--target", server, "--api-key", "mp_nokey_nosecret"], capsys
    )
    assert code == 1
    assert "UnauthenticatedError" in err
    assert not path.exists()
