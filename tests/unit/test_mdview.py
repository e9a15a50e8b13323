"""The Markdown view (memplane.mdview): file names, memory files read by AgentScope's
own frontmatter parser, the bounded MEMORY.md index, the journal, and writing it into a
local sandbox (unchanged files left alone, stale rendered files removed, others kept)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from agentscope.middleware import AgenticMemoryMiddleware

from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.mdview import render_view, write_view
from memplane.mdview.names import file_name, file_names, slug
from memplane.mdview.render import INDEX_MAX_LINES, memory_file
from memplane.sandbox import LocalSandboxes
from memplane.text.tokens import token_counter

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
COUNT = token_counter("o200k_base").count_text
parse_frontmatter = AgenticMemoryMiddleware._parse_frontmatter_fields


def _memory(
    content: str = "Run the tests before pushing",
    *,
    type: MemoryType = MemoryType.FEEDBACK,
    name: str = "",
    description: str = "",
    age_minutes: int = 0,
    **fields: object,
) -> Memory:
    when = NOW - timedelta(minutes=age_minutes)
    memory = Memory(
        id=str(uuid.uuid4()),
        scope=Scope(user_id="u"),
        type=type,
        name=name,
        description=description,
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
    return replace(memory, **fields)  # type: ignore[arg-type]


def test_slugs_and_file_names_are_readable_and_stable() -> None:
    assert slug("Run the tests, before pushing!") == "run-the-tests-before-pushing"
    assert slug("喜欢 绿茶") == "喜欢-绿茶"
    assert slug("***") == "memory"
    assert len(slug("word " * 40)) <= 48
    m = _memory(name="Testing policy", id="3f2a9c1e-0000-4000-8000-000000000001")
    assert file_name(m) == "feedback_testing-policy_3f2a9c1e.md"
    assert file_name(replace(m, content="other", version=7)) == file_name(m)  # content edits keep the name
    twin = replace(m, id="3f2a9c1e-0000-4000-8000-000000000002")
    names = file_names([m, twin])
    assert len(set(names.values())) == 2
    assert names[twin.id] == "feedback_testing-policy_3f2a9c1e000040008000000000000002.md"


def test_memory_file_frontmatter_is_what_agentscope_reads() -> None:
    m = _memory(
        "Always run the suite.\nEven for docs.",
        name="Testing\npolicy",
        description="before any push: run tests",
        metadata={"why": "CI broke twice", "how_to_apply": "run pytest -q first"},
    )
    text = memory_file(m)
    assert parse_frontmatter(text) == {
        "name": "Testing policy",
        "description": "before any push: run tests",
        "type": "feedback",
        "memplane_id": m.id,
        "memplane_version": "1",
    }
    assert text.endswith(
        "---\n\nAlways run the suite.\nEven for docs.\n**Why:** CI broke twice\n**How to apply:** run pytest -q first\n"
    )
    already = memory_file(replace(m, content="Rule.\n**Why:** given\n**How to apply:** here"))
    assert already.count("**Why:**") == 1
    user = memory_file(replace(m, type=MemoryType.USER))
    assert "**Why:**" not in user  # only feedback and project memories are structured


def test_index_lists_newest_first_one_line_each() -> None:
    old = _memory("old fact", type=MemoryType.USER, name="Old", description="an old one", age_minutes=60)
    new = _memory("new fact", type=MemoryType.PROJECT, name="New", description="a new one")
    view = render_view([old, new], now=NOW, count_tokens=COUNT)
    index = view.files["Memory/MEMORY.md"].splitlines()
    assert index == [
        f"- [New]({file_name(new)}) — a new one",
        f"- [Old]({file_name(old)}) — an old one",
    ]
    assert (view.listed, view.unlisted) == (2, 0)
    assert set(view.files) == {"Memory/MEMORY.md", f"Memory/{file_name(old)}", f"Memory/{file_name(new)}"}
    long = _memory("x", name="N", description="word " * 100)
    (line,) = render_view([long], now=NOW, count_tokens=COUNT).files["Memory/MEMORY.md"].splitlines()
    assert len(line) == 150
    assert line.endswith("…")


def test_index_is_bounded_in_tokens_and_lines() -> None:
    many = [_memory(f"fact {i}", type=MemoryType.USER, name=f"fact {i}", age_minutes=i) for i in range(300)]
    view = render_view(many, now=NOW, count_tokens=COUNT, max_index_tokens=500)
    index = view.files["Memory/MEMORY.md"]
    assert COUNT(index) <= 500
    assert view.listed + view.unlisted == 300
    assert view.unlisted > 0
    assert index.splitlines()[-1] == f"- … {view.unlisted} more memory files in this directory, not listed here"
    assert index.splitlines()[0].startswith("- [fact 0](")  # the newest is kept
    assert len([p for p in view.files if p != "Memory/MEMORY.md"]) == 300  # every memory still has its file
    roomy = render_view(many, now=NOW, count_tokens=COUNT, max_index_tokens=100_000)
    assert len(roomy.files["Memory/MEMORY.md"].splitlines()) == INDEX_MAX_LINES


def test_superseded_and_expired_memories_are_left_out() -> None:
    gone = [
        _memory("superseded", valid_to=NOW - timedelta(seconds=1)),
        _memory("expired", expires_at=NOW),
    ]
    kept = _memory("later expiry", expires_at=NOW + timedelta(days=1), valid_to=NOW + timedelta(days=1))
    view = render_view([*gone, kept], now=NOW, count_tokens=COUNT)
    assert set(view.files) == {"Memory/MEMORY.md", f"Memory/{file_name(kept)}"}


def test_journal_groups_episodic_memories_by_day_and_session() -> None:
    def turn(text: str, at: datetime, session: str, speaker: str) -> Memory:
        return _memory(
            text,
            type=MemoryType.EPISODIC,
            description=f"[{at.day} March 2026] {speaker}",
            metadata={"speaker": speaker, "role": "user"},
            scope=Scope(user_id="u", session_id=session),
            valid_from=at,
        )

    day1 = datetime(2026, 3, 1, 9, 5, tzinfo=UTC)
    turns = [
        turn("hello\nsecond line", day1, "s1", "Ann"),
        turn("later in s2", day1 + timedelta(hours=2), "s2", "Bob"),
        turn("reply", day1 + timedelta(minutes=1), "s1", "assistant"),
        turn("next day", day1 + timedelta(days=1), "s1", "Ann"),
    ]
    view = render_view(turns, now=NOW, count_tokens=COUNT)
    assert sorted(view.files) == ["Memory/MEMORY.md", "Memory/journal/2026-03-01.md", "Memory/journal/2026-03-02.md"]
    text = view.files["Memory/journal/2026-03-01.md"]
    assert parse_frontmatter(text)["name"] == "Journal 2026-03-01"
    assert parse_frontmatter(text)["type"] == "episodic"
    assert text.split("---\n\n", 1)[1] == (
        "# 2026-03-01\n\n## Session s1\n\n- 09:05 Ann: hello\n  second line\n- 09:06 assistant: reply\n"
        "\n## Session s2\n\n- 11:05 Bob: later in s2\n"
    )
    assert view.files["Memory/MEMORY.md"] == (
        "- [Journal](journal/) — conversation turns and session summaries, one file per day "
        "(2 days, newest 2026-03-02)\n"
    )


async def test_write_view_into_a_sandbox(tmp_path: Path) -> None:
    backend = LocalSandboxes(tmp_path)
    handle = await backend.ensure("ws")
    a, b = _memory("a", name="A"), _memory("b", name="B", age_minutes=5)
    first = await write_view(backend, handle, render_view([a, b], now=NOW, count_tokens=COUNT))
    assert sorted(first.written) == sorted(["Memory/MEMORY.md", f"Memory/{file_name(a)}", f"Memory/{file_name(b)}"])
    await backend.write_file(handle, "Memory/agent_note.md", b"---\nname: mine\ntype: user\n---\n\nby the agent\n")

    a2 = replace(a, content="a, edited", version=2, updated_at=NOW + timedelta(minutes=1))
    second = await write_view(backend, handle, render_view([a2], now=NOW, count_tokens=COUNT))
    assert sorted(second.written) == sorted(["Memory/MEMORY.md", f"Memory/{file_name(a2)}"])
    assert second.removed == [f"Memory/{file_name(b)}"]  # b is gone from the view
    assert (
        await backend.read_file(handle, "Memory/agent_note.md") == b"---\nname: mine\ntype: user\n---\n\nby the agent\n"
    )
    assert (await backend.read_file(handle, f"Memory/{file_name(a2)}")).endswith(b"\n\na, edited\n")

    kept = tmp_path / "ws" / "Memory" / file_name(a2)
    stamp = kept.stat().st_mtime_ns
    third = await write_view(backend, handle, render_view([a2], now=NOW, count_tokens=COUNT))
    assert third.written == []
    assert third.removed == []
    assert sorted(third.unchanged) == sorted(["Memory/MEMORY.md", f"Memory/{file_name(a2)}"])
    assert kept.stat().st_mtime_ns == stamp  # an unchanged file is not rewritten (AgentScope ranks by mtime)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_bound_holds_for_cjk_text(encoding: str) -> None:
    count = token_counter(encoding).count_text
    many = [
        _memory("内容", type=MemoryType.USER, name=f"用户喜欢绿茶 {i}", description="中文描述" * 5) for i in range(100)
    ]
    index = render_view(many, now=NOW, count_tokens=count, max_index_tokens=300).files["Memory/MEMORY.md"]
    assert count(index) <= 300
