"""`memplane export markdown DIR` against the session server: the workspace's current
memories as AgentScope's Memory/ tree, read back with AgentScope's own frontmatter parser."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from agentscope.middleware import AgenticMemoryMiddleware
from google.protobuf import struct_pb2, timestamp_pb2

from memplane.cli.main import main
from memplane.v1 import memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace


async def test_export_markdown_writes_index_files_and_journal(
    server: str, workspace: TestWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    why = struct_pb2.Struct()
    why.update({"why": "CI broke", "how_to_apply": "before every push"})
    stored = [
        *await workspace.client.add_memories(
            [
                memory_pb2.MemoryInput(
                    content="Run the tests", type=memory_pb2.MEMORY_TYPE_FEEDBACK, name="Testing", metadata=why
                )
            ]
        ),
        *await workspace.client.add_memories(
            [memory_pb2.MemoryInput(content="Alice likes green tea", name="Tea", description="drinks")]
        ),
    ]
    now = int(datetime.now(UTC).timestamp())
    await workspace.client.add_memories(
        [
            memory_pb2.MemoryInput(
                content="old address",
                valid_from_time=timestamp_pb2.Timestamp(seconds=now - 2 * 86_400),
                valid_to_time=timestamp_pb2.Timestamp(seconds=now - 86_400),
            )
        ]
    )
    said = timestamp_pb2.Timestamp()
    said.FromDatetime(datetime(2026, 1, 2, 10, 30, tzinfo=UTC))
    turn = writeback_pb2.ConversationMessage(
        id="m1", role=memory_pb2.MESSAGE_ROLE_USER, name="Alice", content="hi", create_time=said
    )
    await workspace.client.write_conversation(memory_pb2.Scope(user_id="alice", session_id="s1"), [turn])

    argv = ["export", "markdown", str(tmp_path), "--target", server, "--api-key", workspace.key]
    code = await asyncio.get_running_loop().run_in_executor(None, main, argv)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "MEMORY.md lists 2 memory files" in err

    memory_dir = tmp_path / "Memory"
    files = sorted(p.relative_to(memory_dir).as_posix() for p in memory_dir.rglob("*.md"))
    assert files == sorted(
        [
            "MEMORY.md",
            f"feedback_testing_{stored[0].id.replace('-', '')[:8]}.md",
            f"user_tea_{stored[1].id.replace('-', '')[:8]}.md",
            "journal/2026-01-02.md",
        ]
    )  # the superseded memory is not in the view
    index = (memory_dir / "MEMORY.md").read_text().splitlines()
    assert index[0].startswith("- [Journal](journal/) — ")
    assert index[1:] == [
        f"- [Tea](user_tea_{stored[1].id.replace('-', '')[:8]}.md) — drinks",
        f"- [Testing](feedback_testing_{stored[0].id.replace('-', '')[:8]}.md) — Run the tests",
    ]  # the most recently updated first
    feedback = (memory_dir / f"feedback_testing_{stored[0].id.replace('-', '')[:8]}.md").read_text()
    fields = AgenticMemoryMiddleware._parse_frontmatter_fields(feedback)
    assert (fields["name"], fields["type"], fields["memplane_id"]) == ("Testing", "feedback", stored[0].id)
    assert feedback.endswith("Run the tests\n**Why:** CI broke\n**How to apply:** before every push\n")
    assert "- 10:30 Alice: hi\n" in (memory_dir / "journal/2026-01-02.md").read_text()
