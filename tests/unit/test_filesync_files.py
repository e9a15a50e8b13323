"""Reading memory files back (memplane.filesync.files): every rendered file parses to
what it shows, an edit changes exactly the fields it touched, and each kind of malformed
file is refused with a message saying what is wrong."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.filesync.files import MalformedFileError, diff, parse_file
from memplane.filesync.state import FileState, dump_state, load_state
from memplane.mdview.render import memory_file

T = datetime(2026, 1, 2, 10, 30, tzinfo=UTC)


def _memory(content: str, **fields: object) -> Memory:
    base = Memory(
        id="3f2a9c1e-0000-4000-8000-000000000001",
        scope=Scope(),
        type=MemoryType.USER,
        name="",
        description="",
        content=content,
        metadata={},
        valid_from=T,
        valid_to=None,
        expires_at=None,
        provenance=Provenance("", ()),
        version=3,
        created_at=T,
        updated_at=T,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


MEMORIES = [
    _memory("Alice likes green tea"),
    _memory("Alice likes green tea", name="Tea", description="drinks: hot ones"),
    _memory(
        "Run the tests",
        type=MemoryType.FEEDBACK,
        name="Testing",
        metadata={"why": "CI broke", "how_to_apply": "always"},
    ),
    _memory("Ship it\n**Why:** written by hand", type=MemoryType.PROJECT, metadata={"why": "other"}),
    _memory("line one\n\nline two\n", type=MemoryType.REFERENCE),
]


@pytest.mark.parametrize("memory", MEMORIES)
def test_an_unedited_rendered_file_changes_nothing(memory: Memory) -> None:
    parsed = parse_file(memory_file(memory).encode())
    assert parsed.memplane_id == memory.id
    assert parsed.memplane_version() == 3
    assert diff(memory, parsed, {"synced_by": "file-sync"}) is None


def test_an_edit_changes_only_the_fields_it_touched() -> None:
    memory = MEMORIES[1]
    text = memory_file(memory).replace("green tea", "oolong").replace("name: Tea", "name: Oolong")
    edit = diff(memory, parse_file(text.encode()), {"synced_by": "file-sync"})
    assert edit is not None
    assert (sorted(edit.mask), edit.content, edit.name, edit.description) == (
        ["content", "metadata", "name"],
        "Alice likes oolong",
        "Oolong",
        "drinks: hot ones",
    )
    assert edit.metadata == {"synced_by": "file-sync"}


def test_why_and_how_lines_are_the_metadata_they_were_rendered_from() -> None:
    memory = MEMORIES[2]
    text = memory_file(memory).replace("**Why:** CI broke", "**Why:** CI broke twice")
    text = text.replace("**How to apply:** always\n", "")
    edit = diff(memory, parse_file(text.encode()), {})
    assert edit is not None
    assert (edit.mask, edit.content, edit.metadata) == (["metadata"], "Run the tests", {"why": "CI broke twice"})


def test_crlf_and_quoted_values_are_read_as_written() -> None:
    parsed = parse_file(b'---\r\nname: "Tea"\r\ntype: user\r\n---\r\n\r\nAlice likes tea\r\n')
    assert (parsed.name, parsed.type, parsed.body) == ("Tea", MemoryType.USER, "Alice likes tea")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"Alice likes tea\n", "has no frontmatter"),
        (b"---\nname: Tea\ntype: user\nAlice likes tea\n", "has no frontmatter"),  # never closed
        (b"---\nname: Tea\ntype: user\njust words\n---\n\nx\n", "frontmatter line 4 'just words' is not 'key: value'"),
        (b"---\ntype: user\n---\n\nx\n", "frontmatter has no 'name' field"),
        (b"---\nname: Tea\n---\n\nx\n", "frontmatter has no 'type' field"),
        (b"---\nname: Tea\ntype: opinion\n---\n\nx\n", "type 'opinion' is not one of user, feedback"),
        (b"---\nname: Tea\ntype: user\n---\n\n  \n", "has no content after the frontmatter"),
        (b"---\nname: T\xe9a\ntype: user\n---\n\nx\n", "is not UTF-8 text (byte 11)"),
    ],
)
def test_malformed_files_are_refused_saying_why(data: bytes, problem: str) -> None:
    with pytest.raises(MalformedFileError) as caught:
        parse_file(data)
    assert str(caught.value).startswith(problem)


def test_a_bad_version_is_refused_when_it_is_needed() -> None:
    parsed = parse_file(b"---\nname: Tea\ntype: user\nmemplane_version: two\n---\n\nx\n")
    with pytest.raises(MalformedFileError, match="memplane_version 'two' is not a positive integer"):
        parsed.memplane_version()


def test_the_state_file_round_trips_and_unreadable_state_counts_as_none() -> None:
    files = {"Memory/MEMORY.md": FileState("ab"), "Memory/user_tea_3f2a9c1e.md": FileState("cd", MEMORIES[0].id, 3)}
    assert load_state(dump_state(files)) == files
    for data in (None, b"", b"{not json", b'{"format": 9, "files": {}}', b'{"format": 1, "files": {"a": {}}}', b"[]"):
        assert load_state(data) == {}
