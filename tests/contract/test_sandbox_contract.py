"""The contract every sandbox backend passes (tests/contract/conftest.py lists them):
lifecycle, file I/O, exec, and confinement of every path under the sandbox root."""

from __future__ import annotations

import asyncio

import pytest

from memplane.errors import InvalidArgumentError
from memplane.sandbox import (
    DirEntry,
    SandboxBackend,
    SandboxExecTimeoutError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    SandboxPathError,
)

BAD_PATHS = ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "", "a\0b"]


async def test_ensure_is_idempotent_and_keeps_files(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "Memory/MEMORY.md", b"# index\n")
    again = await backend.ensure(workspace)
    assert again == handle
    assert await backend.read_file(again, "Memory/MEMORY.md") == b"# index\n"


async def test_write_read_round_trip_any_bytes(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    data = bytes(range(256)) + "记忆 ✓".encode()
    await backend.write_file(handle, "a/b/c.bin", data)
    assert await backend.read_file(handle, "a/b/c.bin") == data
    await backend.write_file(handle, "a/b/c.bin", b"shorter")
    assert await backend.read_file(handle, "a/b/c.bin") == b"shorter"
    assert await backend.read_file(handle, "a/./b//c.bin") == b"shorter"  # same path, normalised
    assert await backend.read_file(handle, "a/x/../b/c.bin") == b"shorter"


async def test_list_dir_sorted_with_kinds_and_sizes(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "Memory/zeta.md", b"12345")
    await backend.write_file(handle, "Memory/alpha.md", b"")
    await backend.write_file(handle, "Memory/journal/2026-01-02.md", b"j")
    assert await backend.list_dir(handle, "Memory") == [
        DirEntry("alpha.md", False, 0),
        DirEntry("journal", True, None),
        DirEntry("zeta.md", False, 5),
    ]
    assert await backend.list_dir(handle) == [DirEntry("Memory", True, None)]


async def test_missing_files_and_directories(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "dir/file.md", b"x")
    with pytest.raises(SandboxFileNotFoundError, match=r"nothing\.md"):
        await backend.read_file(handle, "nothing.md")
    with pytest.raises(SandboxFileNotFoundError):
        await backend.read_file(handle, "dir")  # a directory is not a file
    with pytest.raises(SandboxFileNotFoundError):
        await backend.list_dir(handle, "no-such-dir")
    with pytest.raises(SandboxFileNotFoundError):
        await backend.list_dir(handle, "dir/file.md")  # a file is not a directory
    with pytest.raises(SandboxPathError, match="is a directory"):
        await backend.write_file(handle, "dir", b"x")
    with pytest.raises(SandboxPathError, match="directory must be"):
        await backend.write_file(handle, "dir/file.md/child", b"x")
    assert await backend.read_file(handle, "dir/file.md") == b"x"  # the refused writes changed nothing


async def test_delete_files_and_trees(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "Memory/a.md", b"a")
    await backend.write_file(handle, "Memory/journal/d.md", b"d")
    assert await backend.delete(handle, "Memory/a.md") is True
    assert await backend.delete(handle, "Memory/a.md") is False
    assert await backend.delete(handle, "Memory") is True
    assert await backend.list_dir(handle) == []
    for root in (".", "a/..", "./"):
        with pytest.raises(SandboxPathError, match="sandbox root itself"):
            await backend.delete(handle, root)


async def test_exec_runs_argv_without_a_shell_in_the_tree(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "sub/notes.txt", b"hello")
    echoed = await backend.exec(handle, ["printf", "%s", "a b; echo $HOME"])
    assert (echoed.exit_code, echoed.stdout) == (0, b"a b; echo $HOME")
    in_sub = await backend.exec(handle, ["cat", "notes.txt"], cwd="sub")
    assert in_sub.ok()
    assert in_sub.stdout == b"hello"
    failed = await backend.exec(handle, ["sh", "-c", "echo oops >&2; exit 3"])
    assert (failed.exit_code, failed.stderr) == (3, b"oops\n")
    missing = await backend.exec(handle, ["no-such-program-memplane"])
    assert missing.exit_code == 127
    # what a command writes (an agent's own tools) is what read_file sees
    wrote = await backend.exec(handle, ["sh", "-c", "printf edited > sub/notes.txt"])
    assert wrote.ok()
    assert await backend.read_file(handle, "sub/notes.txt") == b"edited"


async def test_exec_timeout_and_empty_argv(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    with pytest.raises(SandboxExecTimeoutError, match=r"'sleep' did not finish within 0\.2 s"):
        await backend.exec(handle, ["sleep", "30"], timeout_seconds=0.2)
    with pytest.raises(InvalidArgumentError, match="argv"):
        await backend.exec(handle, [])


@pytest.mark.parametrize("path", BAD_PATHS)
async def test_paths_outside_the_root_are_refused_naming_the_path(
    backend: SandboxBackend, workspace: str, path: str
) -> None:
    handle = await backend.ensure(workspace)
    neighbour = await backend.ensure(f"{workspace}-n")
    calls = [
        lambda: backend.read_file(handle, path),
        lambda: backend.write_file(handle, path, b"x"),
        lambda: backend.list_dir(handle, path),
        lambda: backend.delete(handle, path),
        lambda: backend.exec(handle, ["true"], cwd=path),
    ]
    for call in calls:
        with pytest.raises(SandboxPathError) as caught:
            await call()
        assert repr(path) in str(caught.value)
        assert caught.value.violations[0].field == "path"
    # nothing was written beside the sandbox either (a neighbour's tree stays empty)
    with pytest.raises(SandboxPathError):
        await backend.write_file(handle, f"../{neighbour.workspace}/planted.md", b"x")
    assert await backend.list_dir(neighbour) == []
    assert await backend.list_dir(handle) == []


async def test_symlink_escapes_are_refused(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "sub/notes.txt", b"inside")
    made = await backend.exec(
        handle,
        ["sh", "-c", "ln -s /etc out-dir; ln -s /etc/passwd out-file; ln -s /nonexistent/x dangling; ln -s sub in"],
    )
    assert made.ok(), made.stderr
    refusals = [
        lambda: backend.read_file(handle, "out-file"),
        lambda: backend.read_file(handle, "out-dir/passwd"),
        lambda: backend.write_file(handle, "out-dir/planted", b"x"),
        lambda: backend.write_file(handle, "dangling", b"x"),
        lambda: backend.write_file(handle, "out-file", b"x"),
        lambda: backend.list_dir(handle, "out-dir"),
        lambda: backend.delete(handle, "out-dir/passwd"),
        lambda: backend.exec(handle, ["true"], cwd="out-dir"),
    ]
    for call in refusals:
        with pytest.raises(SandboxPathError, match="through a symlink"):
            await call()
    assert await backend.read_file(handle, "in/notes.txt") == b"inside"  # a link inside is followed
    # deleting an escaping link removes the link, never its target
    assert await backend.delete(handle, "out-file") is True
    assert (await backend.exec(handle, ["test", "-f", "/etc/passwd"])).ok()
    names = [e.name for e in await backend.list_dir(handle)]
    assert "out-file" not in names
    assert "out-dir" in names


async def test_workspaces_are_separate(backend: SandboxBackend, workspace: str) -> None:
    one = await backend.ensure(workspace)
    two = await backend.ensure(f"{workspace}-two")
    await backend.write_file(one, "Memory/MEMORY.md", b"one")
    await backend.write_file(two, "Memory/MEMORY.md", b"two")
    assert await backend.read_file(one, "Memory/MEMORY.md") == b"one"
    assert await backend.read_file(two, "Memory/MEMORY.md") == b"two"


async def test_suspend_keeps_files_destroy_removes_them(backend: SandboxBackend, workspace: str) -> None:
    handle = await backend.ensure(workspace)
    await backend.write_file(handle, "kept.md", b"kept")
    await backend.suspend(handle)
    resumed = await backend.ensure(workspace)
    assert await backend.read_file(resumed, "kept.md") == b"kept"
    await backend.destroy(resumed)
    await backend.destroy(resumed)  # idempotent
    with pytest.raises(SandboxNotFoundError, match=workspace):
        await backend.read_file(resumed, "kept.md")
    with pytest.raises(SandboxNotFoundError):
        await backend.write_file(resumed, "new.md", b"x")
    fresh = await backend.ensure(workspace)
    assert await backend.list_dir(fresh) == []


@pytest.mark.parametrize("name", ["", "../etc", "Upper", "a/b", "-x"])
async def test_bad_workspace_names_are_refused(backend: SandboxBackend, name: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await backend.ensure(name)
    assert caught.value.violations[0].field == "workspace"


async def test_concurrent_ensures_give_one_sandbox(backend: SandboxBackend, workspace: str) -> None:
    handles = await asyncio.gather(*(backend.ensure(workspace) for _ in range(4)))
    assert len(set(handles)) == 1
    await backend.write_file(handles[0], "x.md", b"x")
    assert await backend.read_file(handles[3], "x.md") == b"x"
