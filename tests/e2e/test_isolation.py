"""Two workspaces never see each other's memories, whatever the request names: search,
get, list, history, update and delete with the other workspace's ids are NOT_FOUND (the
same answer as for an id that never existed), and the other's data stays intact."""

from __future__ import annotations

import uuid

import pytest

from memplane.errors import NotFoundError
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import list_all, mem

SAME_TEXT = "The wifi password at the lake house is bluebird-42"


@pytest.fixture
async def pair(workspace_factory: WorkspaceFactory) -> tuple[TestWorkspace, TestWorkspace]:
    return await workspace_factory(), await workspace_factory()


async def test_search_and_list_return_only_the_callers_memories(pair: tuple[TestWorkspace, TestWorkspace]) -> None:
    a, b = pair
    # Same text, same scope in both: only the workspace from the key tells them apart.
    [in_a] = await a.client.add_memories([mem(SAME_TEXT, user_id="u1", metadata={"k": 1})])
    [in_b] = await b.client.add_memories([mem(SAME_TEXT, user_id="u1", metadata={"k": 1})])
    only_b = await b.client.add_memories([mem("Nothing to see in B but bluebird feathers", user_id="u1")])
    for mode in (retrieval_pb2.SEARCH_MODE_HYBRID, retrieval_pb2.SEARCH_MODE_VECTOR, retrieval_pb2.SEARCH_MODE_LEXICAL):
        hits = await a.client.search(["wifi password", "bluebird"], mode=mode, top_k=100)
        assert [h.memory.id for h in hits.hits] == [in_a.id], mode
    for flt in (None, filter_pb2.MemoryFilter(user_id="u1", include_expired=True, include_superseded=True)):
        assert [m.id for m in await list_all(a.client, flt)] == [in_a.id]
    assert sorted(m.id for m in await list_all(b.client)) == sorted([in_b.id, only_b[0].id])


async def test_naming_the_other_workspaces_ids_is_not_found(pair: tuple[TestWorkspace, TestWorkspace]) -> None:
    a, b = pair
    await a.client.add_memories([mem("A's own memory")])
    [theirs] = await b.client.add_memories([mem(SAME_TEXT, user_id="u1")])
    never = str(uuid.uuid4())
    for target in (theirs.id, never):
        with pytest.raises(NotFoundError) as caught:
            await a.client.get_memory(target)
        assert caught.value.resource_type == "memory"
        assert caught.value.resource_name == target
        with pytest.raises(NotFoundError):
            await a.client.update_memory(target, memory_pb2.MemoryInput(content="hijacked"), ["content"])
        with pytest.raises(NotFoundError):
            await a.client.update_memory(
                target, memory_pb2.MemoryInput(content="hijacked"), ["content"], expected_version=1
            )
        with pytest.raises(NotFoundError):
            await a.client.delete_memory(target)
        with pytest.raises(NotFoundError):
            await a.client.delete_memory(target, expected_version=1)
        with pytest.raises(NotFoundError):
            await a.client.list_memory_events(target)
    # Upper-case spelling of B's id is the same id, and still not A's.
    with pytest.raises(NotFoundError):
        await a.client.get_memory(theirs.id.upper())

    # B's memory is exactly as stored, with no event from A's attempts.
    assert await b.client.get_memory(theirs.id) == theirs
    events = await b.client.list_memory_events(theirs.id)
    assert [e.kind for e in events] == [memory_pb2.EVENT_KIND_ADD]
    assert (await b.client.search("wifi password")).hits[0].memory == theirs


async def test_delete_by_scope_in_one_workspace_leaves_the_same_scope_elsewhere(
    pair: tuple[TestWorkspace, TestWorkspace],
) -> None:
    a, b = pair
    await a.client.add_memories([mem("a1", user_id="u1", session_id="s1")])
    kept = await b.client.add_memories(
        [mem("b1", user_id="u1", session_id="s1"), mem("b2", user_id="u1", session_id="s2")]
    )
    reply = await a.client.delete_memories_by_scope(memory_pb2.Scope(user_id="u1"))
    assert reply.deleted_count == 1
    assert await list_all(a.client) == []
    assert sorted(m.id for m in await list_all(b.client)) == sorted(m.id for m in kept)
    # The scope fields are ANDed: session s1 of u1 only.
    reply = await b.client.delete_memories_by_scope(memory_pb2.Scope(user_id="u1", session_id="s1"))
    assert reply.deleted_count == 1
    assert [m.id for m in await list_all(b.client)] == [kept[1].id]


async def test_request_ids_are_per_workspace(pair: tuple[TestWorkspace, TestWorkspace]) -> None:
    a, b = pair
    [in_a] = await a.client.add_memories([mem("same body")], request_id="req-1")
    # The same id with the same body in another workspace is a new request, not a replay
    # of A's reply (which would leak A's memory id).
    [in_b] = await b.client.add_memories([mem("same body")], request_id="req-1")
    assert in_a.id != in_b.id
    assert [m.id for m in await list_all(b.client)] == [in_b.id]


async def test_event_ids_do_not_move_with_another_workspaces_writes(
    pair: tuple[TestWorkspace, TestWorkspace],
) -> None:
    # A shared id sequence would let B count A's writes live: the gap between B's two
    # event ids was exactly the number of A's events in between (37).
    a, b = pair
    [first] = await b.client.add_memories([mem("B's first memory")])
    [added] = await b.client.list_memory_events(first.id)
    await a.client.add_memories([mem(f"A's memory number {i}") for i in range(37)])
    [second] = await b.client.add_memories([mem("B's second memory")])
    [added_next] = await b.client.list_memory_events(second.id)
    assert added_next.id - added.id == 1
    assert added.id == 1  # a workspace's history starts at 1: it says nothing of other tenants
    # Ids still order a memory's history, and the whole workspace's, as they happened.
    await b.client.update_memory(first.id, memory_pb2.MemoryInput(content="B's first memory, amended"), ["content"])
    await b.client.delete_memory(first.id)
    events = await b.client.list_memory_events(first.id)
    assert [(e.id, e.kind) for e in events] == [
        (1, memory_pb2.EVENT_KIND_ADD),
        (3, memory_pb2.EVENT_KIND_UPDATE),
        (4, memory_pb2.EVENT_KIND_DELETE),
    ]
