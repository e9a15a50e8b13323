"""UpdateMemory under contention, over real gRPC: a blind update (expected_version 0, "no
check") always applies, however many writers race it; ABORTED is only for a stale
expected version, and its details carry both versions to the client's error.

Before the row lock of `WriteBackService.update`, 32 blind updaters of one memory ended
with some calls ABORTED "memory <id> is at version 0, not 0" (8 optimistic attempts each)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from memplane.errors import VersionConflictError
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace
from tests.support import mem

UPDATERS = 32


async def test_every_blind_update_of_one_memory_applies_under_contention(workspace: TestWorkspace) -> None:
    client = workspace.client
    [original] = await client.add_memories([mem("the build runs nightly", name="build")])
    masks = (["content"], ["description"], ["content", "metadata"])  # text and non-text fields, mixed
    results = await asyncio.gather(
        *(
            client.update_memory(
                original.id,
                memory_pb2.MemoryInput(content=f"the build runs every {i} hours", description=f"writer {i}"),
                masks[i % len(masks)],
            )
            for i in range(UPDATERS)
        ),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, BaseException)]
    assert refused == []
    assert sorted(r.version for r in results if isinstance(r, memory_pb2.Memory)) == list(range(2, UPDATERS + 2))
    final = await client.get_memory(original.id)
    assert final.version == UPDATERS + 1
    events = await client.list_memory_events(original.id)
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD] + [memory_pb2.EVENT_KIND_UPDATE] * UPDATERS
    # Each update applied on top of the one before it: its `before` is the previous `after`.
    for earlier, later in itertools.pairwise(events):
        assert later.before == earlier.after
    assert events[-1].after == final


async def test_a_stale_expected_version_is_aborted_with_both_versions(workspace: TestWorkspace) -> None:
    client = workspace.client
    [original] = await client.add_memories([mem("the ferry leaves at nine")])
    for hour in ("ten", "eleven"):
        await client.update_memory(original.id, memory_pb2.MemoryInput(content=f"at {hour}"), ["content"])
    with pytest.raises(VersionConflictError) as caught:
        await client.update_memory(
            original.id, memory_pb2.MemoryInput(content="stale"), ["content"], expected_version=1
        )
    assert (caught.value.memory_id, caught.value.expected, caught.value.actual) == (original.id, 1, 3)
    assert "version 3, not 1" in str(caught.value)
    with pytest.raises(VersionConflictError) as deleting:
        await client.delete_memory(original.id, expected_version=2)
    assert (deleting.value.memory_id, deleting.value.expected, deleting.value.actual) == (original.id, 2, 3)
    assert (await client.get_memory(original.id)).content == "at eleven"
