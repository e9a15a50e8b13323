"""Two-way sync of the Markdown view with a local sandbox (issue 13, item 3), over real
gRPC against the session server: edits, new files and deletions in the sandbox flow
back, conflicts keep both sides, malformed files are reported and left alone, and a pass
with no edits writes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memplane.cli.main import main
from memplane.client import AsyncMemplaneClient
from memplane.errors import NotFoundError
from memplane.filesync import SyncReport, restore_deleted, sync_once
from memplane.filesync.convert import memory_from_proto
from memplane.filesync.state import ERRORS_FILE, STATE_FILE
from memplane.mdview.names import file_name
from memplane.sandbox import LocalSandboxes, SandboxHandle
from memplane.text.tokens import DEFAULT_ENCODING, token_counter
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory

COUNT = token_counter(DEFAULT_ENCODING).count_text


async def _sandbox(tmp_path: Path, workspace: TestWorkspace) -> tuple[LocalSandboxes, SandboxHandle]:
    backend = LocalSandboxes(tmp_path / "sandboxes")
    return backend, await backend.ensure(workspace.name)


async def _sync(workspace: TestWorkspace, backend: LocalSandboxes, handle: SandboxHandle) -> SyncReport:
    return await sync_once(workspace.client, backend, handle, count_tokens=COUNT)


async def _add(workspace: TestWorkspace, content: str, name: str, **fields: object) -> memory_pb2.Memory:
    return (await workspace.client.add_memories([memory_pb2.MemoryInput(content=content, name=name, **fields)]))[0]  # type: ignore[arg-type]


def _path(memory: memory_pb2.Memory) -> str:
    return f"Memory/{file_name(memory_from_proto(memory))}"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "Memory").rglob("*")) if p.is_file()}


async def test_edited_file_updates_the_memory_for_its_workspace_only(
    server: str,
    admin_client: AsyncMemplaneClient,
    workspace: TestWorkspace,
    workspace_factory: WorkspaceFactory,
    tmp_path: Path,
) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea", description="drinks")
    await _add(workspace, "Bob runs on Mondays", "Running")
    backend, handle = await _sandbox(tmp_path, workspace)
    first = await _sync(workspace, backend, handle)
    assert not first.changed_memories()
    assert not first.problems
    root = Path(handle.root)
    assert (root / STATE_FILE).is_file()
    assert (root / "Memory/MEMORY.md").is_file()

    path = root / _path(tea)
    path.write_text(path.read_text().replace("Alice likes green tea", "Alice now drinks smoked lapsang souchong"))
    report = await _sync(workspace, backend, handle)
    assert report.updated == [_path(tea)]
    assert not report.added
    assert not report.conflicts
    assert not report.problems

    stored = await workspace.client.get_memory(tea.id)
    assert (stored.content, stored.version, stored.name, stored.description) == (
        "Alice now drinks smoked lapsang souchong",
        2,
        "Tea",
        "drinks",
    )
    assert dict(stored.metadata) == {"synced_by": "file-sync"}
    assert "memplane_version: 2\n" in path.read_text()  # re-rendered

    other_key = await admin_client.create_api_key(workspace.name, "another agent")
    async with AsyncMemplaneClient(server, other_key.api_key) as other_agent:
        hits = (await other_agent.search("lapsang souchong", top_k=3)).hits
    assert hits
    assert hits[0].memory.id == tea.id
    stranger = await workspace_factory()
    await _add(stranger, "Carol collects stamps", "Stamps")
    foreign = (await stranger.client.search("lapsang souchong", top_k=10)).hits
    assert tea.id not in {h.memory.id for h in foreign}
    assert {h.memory.content for h in foreign} <= {"Carol collects stamps"}


async def test_a_second_sync_without_edits_changes_nothing(workspace: TestWorkspace, tmp_path: Path) -> None:
    why = {"why": "CI broke", "how_to_apply": "before every push"}
    memories = [
        await _add(workspace, "Run the tests", "Testing", type=memory_pb2.MEMORY_TYPE_FEEDBACK),
        await _add(workspace, "Alice likes green tea", ""),  # no name, no description: both derived
    ]
    item = memory_pb2.MemoryInput(content="Deploy on Fridays never", type=memory_pb2.MEMORY_TYPE_PROJECT)
    item.metadata.update(why)
    memories += await workspace.client.add_memories([item])
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    before = _files(Path(handle.root))
    events = [len(await workspace.client.list_memory_events(m.id)) for m in memories]

    report = await _sync(workspace, backend, handle)
    assert report == SyncReport()  # nothing updated, added, deleted, written or removed
    assert _files(Path(handle.root)) == before
    assert [(await workspace.client.get_memory(m.id)).version for m in memories] == [1, 1, 1]
    assert [len(await workspace.client.list_memory_events(m.id)) for m in memories] == events


async def test_new_file_becomes_a_memory_and_its_rendered_file(workspace: TestWorkspace, tmp_path: Path) -> None:
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    root = Path(handle.root)
    (root / "Memory/pushing.md").write_text(
        "---\nname: Push small\ndescription: how we push\ntype: feedback\n---\n\n"
        "Push small commits\n**Why:** reviews are faster\n**How to apply:** one change per commit\n"
    )
    report = await _sync(workspace, backend, handle)
    assert report.added == ["Memory/pushing.md"]
    assert not report.problems

    (stored,) = (await workspace.client.list_memories()).memories
    assert (stored.content, stored.name, stored.description, stored.type) == (
        "Push small commits",
        "Push small",
        "how we push",
        memory_pb2.MEMORY_TYPE_FEEDBACK,
    )
    assert dict(stored.metadata) == {
        "why": "reviews are faster",
        "how_to_apply": "one change per commit",
        "synced_by": "file-sync",
    }
    assert not (root / "Memory/pushing.md").exists()  # replaced by the memory's own file
    rendered = (root / _path(stored)).read_text()
    assert f"memplane_id: {stored.id}\n" in rendered
    assert rendered.endswith(
        "Push small commits\n**Why:** reviews are faster\n**How to apply:** one change per commit\n"
    )
    assert await _sync(workspace, backend, handle) == SyncReport()


async def test_deleted_file_deletes_the_memory_and_history_restores_it(
    workspace: TestWorkspace, tmp_path: Path
) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    root = Path(handle.root)
    (root / _path(tea)).unlink()

    report = await _sync(workspace, backend, handle)
    assert report.deleted == [_path(tea)]
    with pytest.raises(NotFoundError):
        await workspace.client.get_memory(tea.id)
    last = (await workspace.client.list_memory_events(tea.id))[-1]
    assert last.kind == memory_pb2.EVENT_KIND_DELETE
    assert last.before.content == "Alice likes green tea"
    assert "Tea" not in (root / "Memory/MEMORY.md").read_text()

    restored = await restore_deleted(workspace.client, tea.id)
    assert (restored.content, restored.name) == ("Alice likes green tea", "Tea")
    report = await _sync(workspace, backend, handle)
    assert _path(restored) in report.written
    assert (root / _path(restored)).is_file()


async def test_both_sides_changed_keeps_both(workspace: TestWorkspace, tmp_path: Path) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea", description="drinks")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    path = Path(handle.root) / _path(tea)
    path.write_text(path.read_text().replace("green tea", "black coffee"))
    await workspace.client.update_memory(tea.id, memory_pb2.MemoryInput(content="Alice likes jasmine tea"), ["content"])

    report = await _sync(workspace, backend, handle)
    assert report.conflicts == [_path(tea)]
    assert not report.updated
    memories = {m.id: m for m in (await workspace.client.list_memories()).memories}
    assert memories[tea.id].content == "Alice likes jasmine tea"  # memplane's side, untouched
    (copy,) = [m for m in memories.values() if m.id != tea.id]  # the file's side, as a new memory
    assert (copy.content, copy.name, copy.description) == ("Alice likes black coffee", "Tea", "drinks")
    assert dict(copy.metadata) == {
        "synced_by": "file-sync",
        "conflict": True,
        "conflict_with": tea.id,
        "conflict_file": _path(tea),
    }
    assert "Alice likes jasmine tea" in path.read_text()
    assert "Alice likes black coffee" in (Path(handle.root) / _path(copy)).read_text()
    assert await _sync(workspace, backend, handle) == SyncReport()


async def test_malformed_files_are_reported_and_left_as_they_are(workspace: TestWorkspace, tmp_path: Path) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    root = Path(handle.root)
    broken = "Alice likes black coffee (the frontmatter was cut away)\n"
    (root / _path(tea)).write_text(broken)
    odd = "---\nname: Odd\ntype: opinion\n---\n\nsomething\n"
    (root / "Memory/odd.md").write_text(odd)

    report = await _sync(workspace, backend, handle)
    assert set(report.problems) == {_path(tea), "Memory/odd.md"}
    assert not report.changed_memories()
    assert (root / _path(tea)).read_text() == broken
    assert (root / "Memory/odd.md").read_text() == odd
    note = (root / ERRORS_FILE).read_text()
    assert f"`{_path(tea)}`: has no frontmatter" in note
    assert "`Memory/odd.md`: type 'opinion' is not one of user, feedback" in note
    (only,) = (await workspace.client.list_memories()).memories
    assert (only.id, only.content, only.version) == (tea.id, "Alice likes green tea", 1)

    again = await _sync(workspace, backend, handle)  # still reported, still untouched
    assert set(again.problems) == set(report.problems)
    assert (root / _path(tea)).read_text() == broken

    (root / _path(tea)).write_text(f"---\nname: Tea\ntype: user\nmemplane_id: {tea.id}\n---\n\n{broken}")
    (root / "Memory/odd.md").unlink()
    fixed = await _sync(workspace, backend, handle)
    assert fixed.updated == [_path(tea)]
    assert not fixed.problems
    assert not (root / ERRORS_FILE).exists()
    assert (await workspace.client.get_memory(tea.id)).content == broken.strip()


async def test_sync_cli_syncs_a_local_sandbox_directory(
    server: str, workspace: TestWorkspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    directory = tmp_path / "my-sandbox"
    argv = ["sync", str(directory), "--target", server, "--api-key", workspace.key]
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, main, argv) == 0, capsys.readouterr().err
    path = directory / _path(tea)
    path.write_text(path.read_text().replace("green tea", "rooibos"))
    assert await loop.run_in_executor(None, main, argv) == 0
    assert "sync: 1 updated, 0 added" in capsys.readouterr().err
    assert (await workspace.client.get_memory(tea.id)).content == "Alice likes rooibos"
    bad = ["sync", str(tmp_path / "Not_A_Name"), "--target", server, "--api-key", workspace.key]
    assert await loop.run_in_executor(None, main, bad) == 2
    assert "must be named like a workspace" in capsys.readouterr().err


async def test_a_renamed_file_keeps_its_memory_and_takes_its_edit(workspace: TestWorkspace, tmp_path: Path) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    coffee = await _add(workspace, "Bob likes coffee", "Coffee")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    root = Path(handle.root)
    edited, untouched = root / "Memory/tea-notes.md", root / "Memory/zz-coffee.md"  # before and after the old names
    (root / _path(tea)).rename(edited)
    edited.write_text(edited.read_text().replace("green tea", "white tea"))
    (root / _path(coffee)).rename(untouched)

    report = await _sync(workspace, backend, handle)
    assert report.updated == ["Memory/tea-notes.md"]
    assert not report.deleted
    assert not report.conflicts
    assert (await workspace.client.get_memory(tea.id)).content == "Alice likes white tea"
    assert (await workspace.client.get_memory(coffee.id)).version == 1
    assert not edited.exists()  # back under their rendered names
    assert not untouched.exists()
    assert "Alice likes white tea" in (root / _path(tea)).read_text()
    assert (root / _path(coffee)).is_file()


async def test_a_file_put_in_the_journal_is_kept_and_reported(workspace: TestWorkspace, tmp_path: Path) -> None:
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    mine = Path(handle.root) / "Memory/journal/2026-01-02.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("---\nname: My day\ntype: episodic\n---\n\nI wrote this myself\n")

    report = await _sync(workspace, backend, handle)
    assert list(report.problems) == ["Memory/journal/2026-01-02.md"]
    assert mine.read_text().endswith("I wrote this myself\n")
    assert "journal" in (Path(handle.root) / ERRORS_FILE).read_text()


async def test_a_file_the_server_refuses_is_reported_and_nothing_is_half_written(
    workspace: TestWorkspace, tmp_path: Path
) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    root = Path(handle.root)
    path = root / _path(tea)
    too_long = path.read_text().replace("Alice likes green tea", "tea " * 10_000)  # 40,000 bytes > 32 KiB
    path.write_text(too_long)
    (root / "Memory/huge.md").write_text("---\nname: Huge\ntype: user\n---\n\n" + "x" * 40_000 + "\n")

    report = await _sync(workspace, backend, handle)
    assert set(report.problems) == {_path(tea), "Memory/huge.md"}
    assert "memory.content" in report.problems[_path(tea)]
    assert not report.changed_memories()
    assert path.read_text() == too_long
    assert (root / "Memory/huge.md").is_file()
    (only,) = (await workspace.client.list_memories()).memories
    assert (only.content, only.version) == ("Alice likes green tea", 1)


async def test_a_symlink_out_of_the_sandbox_is_reported_not_followed(workspace: TestWorkspace, tmp_path: Path) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    outside = tmp_path / "secret.md"
    outside.write_text("---\nname: Secret\ntype: user\n---\n\nnot for memplane\n")
    link = Path(handle.root) / "Memory/secret.md"
    link.symlink_to(outside)

    report = await _sync(workspace, backend, handle)
    assert list(report.problems) == ["Memory/secret.md"]
    assert "leaves the sandbox root through a symlink" in report.problems["Memory/secret.md"]
    assert not report.changed_memories()
    assert link.is_symlink()
    assert outside.read_text().endswith("not for memplane\n")
    assert [m.id for m in (await workspace.client.list_memories()).memories] == [tea.id]


async def test_a_file_deleted_here_whose_memory_changed_there_is_kept(workspace: TestWorkspace, tmp_path: Path) -> None:
    tea = await _add(workspace, "Alice likes green tea", "Tea")
    backend, handle = await _sandbox(tmp_path, workspace)
    await _sync(workspace, backend, handle)
    (Path(handle.root) / _path(tea)).unlink()
    await workspace.client.update_memory(tea.id, memory_pb2.MemoryInput(content="Alice likes mint tea"), ["content"])

    report = await _sync(workspace, backend, handle)
    assert report.conflicts == [_path(tea)]
    assert not report.deleted
    assert "changed in memplane since" in report.problems[_path(tea)]
    assert (await workspace.client.get_memory(tea.id)).content == "Alice likes mint tea"
    assert "Alice likes mint tea" in (Path(handle.root) / _path(tea)).read_text()  # rendered again
