"""A write re-sent with the same request_id is stored once and answered with the first
reply (also when the copies race); the same id with another body is INVALID_ARGUMENT."""

from __future__ import annotations

import asyncio
import dataclasses

import psycopg
import pytest

from memplane import convert
from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, QuotaExceededError
from memplane.server.storage.idempotency import request_hash
from memplane.v1 import admin_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import fields, list_all, mem, unit_vectors

SCOPE = memory_pb2.Scope(user_id="u1", session_id="s1")


def turns(*texts: str) -> list[writeback_pb2.ConversationMessage]:
    return [
        writeback_pb2.ConversationMessage(id=f"m{i}", role=memory_pb2.MESSAGE_ROLE_USER, content=t)
        for i, t in enumerate(texts)
    ]


async def test_add_memories_retry_stores_once(workspace: TestWorkspace, admin_client: AsyncMemplaneClient) -> None:
    batch = [mem("Allergic to peanuts", user_id="u1"), mem("Owns a dog named Pixel", user_id="u1")]
    first = await workspace.client.add_memories(batch, request_id="add-1")
    again = await workspace.client.add_memories(batch, request_id="add-1")
    assert again == first
    assert sorted(m.id for m in await list_all(workspace.client)) == sorted(m.id for m in first)
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == 2
    for m in first:
        assert [e.request_id for e in await workspace.client.list_memory_events(m.id)] == ["add-1"]
    # Without a request id, the same body is a new write: of duplicates (migration 0013),
    # answered with the stored memories, a NOOP event each.
    reply = await workspace.client.add_memories_reply(batch)
    assert [m.id for m in reply.memories] == [m.id for m in first]
    assert list(reply.duplicate_indexes) == [0, 1]
    assert len(await list_all(workspace.client)) == 2


async def test_concurrent_copies_of_one_request_store_once(workspace: TestWorkspace) -> None:
    batch = [mem("Runs a marathon every April", user_id="u1")]
    replies = await asyncio.gather(*(workspace.client.add_memories(batch, request_id="race-1") for _ in range(5)))
    assert all(r == replies[0] for r in replies)
    assert [m.id for m in await list_all(workspace.client)] == [replies[0][0].id]

    conversations = await asyncio.gather(
        *(
            workspace.client.write_conversation(SCOPE, turns("hi", "I moved to Porto"), request_id="race-2")
            for _ in range(4)
        )
    )
    assert all(c == conversations[0] for c in conversations)
    assert conversations[0].transcript_message_count == 2
    assert len(await list_all(workspace.client)) == 3


async def test_write_conversation_retry_stores_once(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    first = await workspace.client.write_conversation(
        SCOPE, turns("hello", "my cat is called Miso"), request_id="conv-1"
    )
    again = await workspace.client.write_conversation(
        SCOPE, turns("hello", "my cat is called Miso"), request_id="conv-1"
    )
    assert again == first
    usage = await admin_client.get_workspace_usage(workspace.name)
    assert (usage.memory_count, usage.transcript_message_count) == (2, 2)


async def test_same_request_id_with_another_body_is_refused(workspace: TestWorkspace) -> None:
    [stored] = await workspace.client.add_memories([mem("original body")], request_id="dup-1")
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.add_memories([mem("another body")], request_id="dup-1")
    assert fields(caught.value) == ["request_id"]
    with pytest.raises(InvalidArgumentError) as caught:  # another method, same id
        await workspace.client.write_conversation(SCOPE, turns("hi"), request_id="dup-1")
    assert fields(caught.value) == ["request_id"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.delete_memory(stored.id, request_id="dup-1")
    assert fields(caught.value) == ["request_id"]
    assert [m.id for m in await list_all(workspace.client)] == [stored.id]
    assert await workspace.client.get_memory(stored.id) == stored


async def test_update_and_delete_retries_apply_once(workspace: TestWorkspace) -> None:
    [m] = await workspace.client.add_memories([mem("counter at one")])
    change = memory_pb2.MemoryInput(content="counter at two")
    first = await workspace.client.update_memory(m.id, change, ["content"], request_id="upd-1")
    again = await workspace.client.update_memory(m.id, change, ["content"], request_id="upd-1")
    assert first == again
    assert first.version == 2
    assert (await workspace.client.get_memory(m.id)).version == 2
    assert await workspace.client.delete_memory(m.id, request_id="del-1") == m.id
    assert await workspace.client.delete_memory(m.id, request_id="del-1") == m.id  # replayed, not NOT_FOUND
    kinds = [e.kind for e in await workspace.client.list_memory_events(m.id)]
    assert kinds == [memory_pb2.EVENT_KIND_ADD, memory_pb2.EVENT_KIND_UPDATE, memory_pb2.EVENT_KIND_DELETE]


async def test_a_request_that_failed_inside_its_transaction_does_not_burn_its_id(workspace: TestWorkspace) -> None:
    await workspace.client.write_conversation(SCOPE, turns("first"))  # message id m0 now taken
    with pytest.raises(InvalidArgumentError) as caught:  # refused after the id was claimed
        await workspace.client.write_conversation(SCOPE, turns("clashing"), request_id="conv-retry")
    assert fields(caught.value) == ["messages[0].id"]
    fixed = [writeback_pb2.ConversationMessage(id="m1", role=memory_pb2.MESSAGE_ROLE_USER, content="fixed")]
    reply = await workspace.client.write_conversation(SCOPE, fixed, request_id="conv-retry")
    assert [m.content for m in reply.memories] == ["fixed"]
    assert len(await list_all(workspace.client)) == 2


async def test_retries_of_a_write_with_given_vectors_store_once(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    # With every vector given, no lookup runs before the write: the write's own claim of the
    # request id (in the statement that stores the rows) answers retries, racing copies and
    # a reused id with another body; a claim refused by a quota is not burnt.
    ws = await workspace_factory(max_memories=3)
    vectors = unit_vectors(5, seed=901)
    batch = [mem("Sails on Sundays", user_id="u1", embedding=vectors[0])]
    replies = await asyncio.gather(*(ws.client.add_memories(batch, request_id="given-1") for _ in range(5)))
    assert all(r == replies[0] for r in replies)
    assert await ws.client.add_memories(batch, request_id="given-1") == replies[0]
    with pytest.raises(InvalidArgumentError) as caught:
        await ws.client.add_memories([mem("Sails on Sundays", embedding=vectors[1])], request_id="given-1")
    assert fields(caught.value) == ["request_id"]
    over = [mem(f"fact {i}", embedding=vectors[i + 1]) for i in range(3)]
    with pytest.raises(QuotaExceededError):
        await ws.client.add_memories(over, request_id="given-2")
    assert [m.id for m in await list_all(ws.client)] == [replies[0][0].id]
    assert (await admin_client.get_workspace_usage(ws.name)).memory_count == 1
    stored = await ws.client.add_memories(over[:2], request_id="given-3")
    assert len(await list_all(ws.client)) == 3
    for m in stored:
        assert [e.request_id for e in await ws.client.list_memory_events(m.id)] == ["given-3"]
    await admin_client.update_workspace(admin_pb2.Workspace(name=ws.name), ["quotas"])  # unlimited
    again = await ws.client.add_memories(over, request_id="given-2")  # the refused id is free
    assert [m.content for m in again] == ["fact 0", "fact 1", "fact 2"]


async def test_a_retry_matches_a_record_stored_by_the_earlier_digest(workspace: TestWorkspace, pg_dsn: str) -> None:
    # AddMemories used to hash its vectors as JSON numbers; a server of that version may have
    # stored the first copy of a request that a new server now sees retried (an upgrade).
    vector = unit_vectors(1, seed=902)[0]
    batch = [mem("Keeps bees", user_id="u1", embedding=vector)]
    first = await workspace.client.add_memories(batch, request_id="upgrade-1")
    items = [convert.new_memory_from_proto(m, "memories[0]") for m in batch]
    old_body = [
        {**dataclasses.asdict(dataclasses.replace(m, embedding=None)), "embedding": list(m.embedding or ())}
        for m in items
    ]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "UPDATE idempotency_keys SET request_hash = %s WHERE request_id = 'upgrade-1'"
            " AND workspace_key = (SELECT key FROM workspaces WHERE name = %s)",
            (request_hash("AddMemories", old_body), workspace.name),
        )
        assert cur.rowcount == 1
    assert await workspace.client.add_memories(batch, request_id="upgrade-1") == first
    with pytest.raises(InvalidArgumentError):  # and another body still does not
        await workspace.client.add_memories([mem("Keeps wasps", embedding=vector)], request_id="upgrade-1")
