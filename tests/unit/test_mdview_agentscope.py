"""AgentScope's own AgenticMemoryMiddleware (the installed `agentscope`, its LocalBackend)
pointed at a sandbox memplane rendered: its system prompt carries our MEMORY.md, and its
file scan reads our files' frontmatter (descriptions and types) and the journal."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentscope.middleware import AgenticMemoryMiddleware

from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.mdview import render_view, write_view
from memplane.mdview.names import file_name
from memplane.sandbox import LocalSandboxes
from memplane.text.tokens import token_counter

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


def _memory(content: str, mtype: MemoryType, name: str, description: str, minutes: int) -> Memory:
    when = NOW - timedelta(minutes=minutes)
    return Memory(
        id=str(uuid.uuid4()),
        scope=Scope(user_id="alice", session_id="s1" if mtype == MemoryType.EPISODIC else ""),
        type=mtype,
        name=name,
        description=description,
        content=content,
        metadata={"speaker": "alice"} if mtype == MemoryType.EPISODIC else {},
        valid_from=when,
        valid_to=None,
        expires_at=None,
        provenance=Provenance(),
        version=1,
        created_at=when,
        updated_at=when,
    )


async def test_agentscope_reads_the_rendered_view(tmp_path: Path) -> None:
    backend = LocalSandboxes(tmp_path)
    handle = await backend.ensure("team-a")
    tea = _memory("Alice drinks green tea", MemoryType.USER, "Tea", "when offering drinks", 5)
    tests = _memory("Run the tests first", MemoryType.FEEDBACK, "Testing", "before any push", 1)
    turn = _memory("I am in Lisbon this week", MemoryType.EPISODIC, "", "[4 March 2026] alice", 30)
    view = render_view([tea, tests, turn], now=NOW, count_tokens=token_counter("o200k_base").count_text)
    await write_view(backend, handle, view)

    middleware = AgenticMemoryMiddleware(workdir=handle.root)
    prompt = await middleware.on_system_prompt(None, "You are helpful.")  # type: ignore[arg-type] # unused there
    assert f"## MEMORY.md\n{view.files['Memory/MEMORY.md']}" in prompt
    assert f"- [Testing]({file_name(tests)}) — before any push" in prompt
    assert (await backend.read_file(handle, "Memory/MEMORY.md")).decode() == view.files["Memory/MEMORY.md"]  # kept

    headers = {h.filename: h for h in await middleware._list_md_files()}
    assert set(headers) == {file_name(tea), file_name(tests), "journal/2026-03-04.md"}
    assert (headers[file_name(tea)].description, headers[file_name(tea)].type) == ("when offering drinks", "user")
    assert (headers[file_name(tests)].description, headers[file_name(tests)].type) == ("before any push", "feedback")
    assert headers["journal/2026-03-04.md"].type == "episodic"
