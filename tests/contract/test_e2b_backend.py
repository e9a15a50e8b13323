"""What only the e2b backend has (the real `e2b` SDK against tests/fake_e2b.py): a
workspace's sandbox is found by its metadata from any process, created to pause at its
timeout, paused on suspend and resumed by the next connect, killed on destroy. The live
test at the end runs against E2B itself when E2B_API_KEY is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest

from memplane.sandbox import SandboxHandle, SandboxNotFoundError
from memplane.sandbox.e2b import METADATA_KEY, E2BSandboxes
from tests.fake_e2b import FakeE2B


@pytest.fixture
async def cleanup(fake_e2b: FakeE2B) -> AsyncIterator[list[SandboxHandle]]:
    """Handles to destroy at the end of the test."""
    handles: list[SandboxHandle] = []
    yield handles
    backend = E2BSandboxes(connection=fake_e2b.connection())
    for handle in handles:
        await backend.destroy(handle)


def _workspace() -> str:
    return f"ws-{uuid.uuid4().hex[:12]}"


async def test_new_sandbox_carries_workspace_metadata_and_pauses_at_timeout(
    fake_e2b: FakeE2B, cleanup: list[SandboxHandle]
) -> None:
    backend = E2BSandboxes(
        template="memplane-tpl", timeout_seconds=900, metadata={"memplane.namespace": "team-a"},
        connection=fake_e2b.connection(),
    )  # fmt: skip
    workspace = _workspace()
    handle = await backend.ensure(workspace)
    cleanup.append(handle)
    box = fake_e2b.sandboxes[handle.ref]
    assert box.metadata == {METADATA_KEY: workspace, "memplane.namespace": "team-a"}
    assert (box.template_id, box.timeout_seconds, box.auto_pause, box.allow_internet_access) == (
        "memplane-tpl", 900, True, False,
    )  # fmt: skip
    assert handle.root == str(box.home / "memplane")  # the relative root, under the user's home
    assert handle.backend == "e2b"


async def test_another_process_finds_the_same_sandbox_by_metadata(
    fake_e2b: FakeE2B, cleanup: list[SandboxHandle]
) -> None:
    workspace = _workspace()
    first = await E2BSandboxes(connection=fake_e2b.connection()).ensure(workspace)
    cleanup.append(first)
    other = E2BSandboxes(connection=fake_e2b.connection())  # a new instance: no cached connection
    await other.write_file(first, "note.md", b"from one")
    again = await other.ensure(workspace)
    assert again == first
    assert len([b for b in fake_e2b.sandboxes.values() if b.metadata.get(METADATA_KEY) == workspace]) == 1
    assert await other.read_file(again, "note.md") == b"from one"


async def test_backends_with_other_metadata_never_take_each_other_s_sandbox(
    fake_e2b: FakeE2B, cleanup: list[SandboxHandle]
) -> None:
    """Two operator SandboxClasses (metadata memplane.io/sandbox-class) of one workspace
    each get their own sandbox, and `find` sees only its own."""
    one = E2BSandboxes(metadata={"memplane.io/sandbox-class": "a"}, connection=fake_e2b.connection())
    two = E2BSandboxes(metadata={"memplane.io/sandbox-class": "b"}, connection=fake_e2b.connection())
    workspace = _workspace()
    assert await one.find(workspace) is None
    first = await one.ensure(workspace)
    cleanup.append(first)
    second = await two.ensure(workspace)
    cleanup.append(second)
    assert first.ref != second.ref
    assert await one.ensure(workspace) == first
    found = await two.find(workspace)
    assert found is not None
    assert (found.ref, found.workspace) == (second.ref, workspace)


async def test_suspend_pauses_and_ensure_resumes_destroy_kills(fake_e2b: FakeE2B) -> None:
    backend = E2BSandboxes(connection=fake_e2b.connection())
    handle = await backend.ensure(_workspace())
    await backend.write_file(handle, "kept.md", b"kept")
    await backend.suspend(handle)
    assert fake_e2b.sandboxes[handle.ref].state == "paused"
    await backend.suspend(handle)  # already paused (409): nothing to do
    fake_e2b.calls.clear()
    resumed = await backend.ensure(handle.workspace)
    assert resumed == handle
    assert ("POST", f"/v2/sandboxes/{handle.ref}/connect") in fake_e2b.calls
    assert fake_e2b.sandboxes[handle.ref].state == "running"
    assert await backend.read_file(resumed, "kept.md") == b"kept"
    await backend.destroy(resumed)
    assert handle.ref not in fake_e2b.sandboxes
    await backend.suspend(resumed)  # gone: nothing to do
    with pytest.raises(SandboxNotFoundError):
        await backend.exec(resumed, ["true"])


async def test_io_after_a_pause_by_another_process_resumes_the_sandbox(
    fake_e2b: FakeE2B, cleanup: list[SandboxHandle]
) -> None:
    services = E2BSandboxes(connection=fake_e2b.connection())
    operator = E2BSandboxes(connection=fake_e2b.connection())
    handle = await services.ensure(_workspace())
    cleanup.append(handle)
    await services.write_file(handle, "a.md", b"a")
    await operator.suspend(handle)  # the services' cached connection now meets a paused sandbox
    assert await services.read_file(handle, "a.md") == b"a"
    assert fake_e2b.sandboxes[handle.ref].state == "running"


async def test_a_handle_of_another_backend_is_refused(fake_e2b: FakeE2B) -> None:
    backend = E2BSandboxes(connection=fake_e2b.connection())
    with pytest.raises(SandboxNotFoundError):
        await backend.read_file(SandboxHandle("docker", "ws", "abc", "/sandbox"), "x.md")


@pytest.mark.skipif(not os.environ.get("E2B_API_KEY"), reason="live E2B: set E2B_API_KEY to run")
async def test_live_e2b_round_trip() -> None:
    """Against E2B itself (opt-in, billed): create, write, exec, suspend, resume, destroy."""
    backend = E2BSandboxes(timeout_seconds=300, metadata={"memplane.test": "live"})
    handle = await backend.ensure(_workspace())
    try:
        await backend.write_file(handle, "Memory/MEMORY.md", b"# index\n")
        assert (await backend.exec(handle, ["cat", "Memory/MEMORY.md"])).stdout == b"# index\n"
        await backend.suspend(handle)
        resumed = await backend.ensure(handle.workspace)
        assert resumed.ref == handle.ref
        assert await backend.read_file(resumed, "Memory/MEMORY.md") == b"# index\n"
    finally:
        await backend.destroy(handle)
