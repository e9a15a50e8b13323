"""The Markdown view written into every sandbox backend (tests/contract/conftest.py):
what is written reads back as rendered, an unchanged view writes nothing, and a file the
view dropped is removed while an agent's own file stays."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.mdview import render_view, write_view
from memplane.mdview.names import file_name
from memplane.sandbox import SandboxBackend
from memplane.text.tokens import token_counter

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
COUNT = token_counter("o200k_base").count_text


def _memory(content: str, mtype: MemoryType, minutes: int) -> Memory:
    when = NOW - timedelta(minutes=minutes)
    return Memory(
        id=str(uuid.uuid4()),
        scope=Scope(user_id="u", session_id="s"),
        type=mtype,
        name=content,
        description=f"about {content}",
        content=content,
        metadata={},
        valid_from=when,
        valid_to=None,
        expires_at=None,
        provenance=Provenance(),
        version=1,
        created_at=when,
        updated_at=when,
    )


async def test_view_round_trips_through_the_backend(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    keep, drop = _memory("tea", MemoryType.USER, 1), _memory("tests", MemoryType.FEEDBACK, 2)
    turn = _memory("hello", MemoryType.EPISODIC, 3)
    view = render_view([keep, drop, turn], now=NOW, count_tokens=COUNT)
    first = await write_view(backend, handle, view)
    assert sorted(first.written) == sorted(view.files)
    for path, text in view.files.items():
        assert (await backend.read_file(handle, path)).decode() == text
    agent_note = b"---\nname: mine\ntype: user\n---\n\nwritten by the agent\n"
    await backend.write_file(handle, "Memory/agent_note.md", agent_note)

    again = await write_view(backend, handle, view)
    assert (again.written, again.removed) == ([], [])

    smaller = render_view([keep], now=NOW, count_tokens=COUNT)
    last = await write_view(backend, handle, smaller)
    assert sorted(last.removed) == sorted([f"Memory/{file_name(drop)}", "Memory/journal/2026-03-04.md"])
    names = [e.name for e in await backend.list_dir(handle, "Memory")]
    assert names == sorted(["MEMORY.md", "agent_note.md", file_name(keep), "journal"])
    assert await backend.read_file(handle, "Memory/agent_note.md") == agent_note
