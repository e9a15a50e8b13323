"""WriteConversation: the transcript keeps every message, and each message becomes one
EPISODIC memory carrying speaker, role, message id and time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.v1 import memory_pb2, retrieval_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import fields, list_all, ts

SCOPE = memory_pb2.Scope(user_id="caroline", agent_id="companion", session_id="session-1")
USER, ASSISTANT = memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT


def message(id: str, role: int, name: str, content: str, when: datetime | None = None) -> Any:
    out = writeback_pb2.ConversationMessage(id=id, role=role, name=name, content=content)  # type: ignore[arg-type]
    if when is not None:
        out.create_time.CopyFrom(ts(when))
    return out


async def test_each_message_becomes_an_episodic_memory(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    reply = await workspace.client.write_conversation(
        SCOPE,
        [
            message("D1:1", USER, "Caroline", "I went to an LGBTQ support group yesterday", when),
            message("D1:2", ASSISTANT, "Melanie", "That sounds powerful, how did it feel?", when),
        ],
    )
    assert reply.method == "episodic"
    assert reply.transcript_message_count == 2
    assert [m.content for m in reply.memories] == [
        "I went to an LGBTQ support group yesterday",
        "That sounds powerful, how did it feel?",
    ]
    first, second = reply.memories
    assert first.type == second.type == memory_pb2.MEMORY_TYPE_EPISODIC
    assert first.scope == second.scope == SCOPE
    assert dict(first.metadata) == {
        "role": "user",
        "speaker": "Caroline",
        "message_id": "D1:1",
        "turn_time": "2023-05-08T13:56:00+00:00",
    }
    assert (second.metadata["speaker"], second.metadata["role"], second.metadata["message_id"]) == (
        "Melanie",
        "assistant",
        "D1:2",
    )
    assert first.provenance == memory_pb2.Provenance(session_id="session-1", message_ids=["D1:1"])
    assert first.description == "[8 May 2023] Caroline"
    assert first.valid_from_time == ts(when)
    assert sorted(m.id for m in await list_all(workspace.client)) == sorted(m.id for m in reply.memories)
    assert (await admin_client.get_workspace_usage(workspace.name)).transcript_message_count == 2
    # The date in the description is searchable, and the speaker too.
    found = await workspace.client.search("Caroline May 2023 support group", mode=retrieval_pb2.SEARCH_MODE_LEXICAL)
    assert found.hits[0].memory.id == first.id


async def test_messages_without_ids_are_numbered_in_session_order(workspace: TestWorkspace) -> None:
    first = await workspace.client.write_conversation(
        SCOPE, [message("", USER, "", "one"), message("", ASSISTANT, "", "two")]
    )
    second = await workspace.client.write_conversation(SCOPE, [message("", USER, "", "three")])
    ids = [m.metadata["message_id"] for m in [*first.memories, *second.memories]]
    assert ids == ["#1", "#2", "#3"]
    assert second.memories[0].provenance.message_ids == ["#3"]
    unnamed = first.memories[0]
    assert "speaker" not in unnamed.metadata
    assert unnamed.metadata["role"] == "user"
    assert unnamed.description.endswith("] user")  # the role stands in for a missing speaker name


async def test_duplicate_message_ids_are_refused(workspace: TestWorkspace, admin_client: AsyncMemplaneClient) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.write_conversation(
            SCOPE, [message("D1:1", USER, "A", "x"), message("D1:2", USER, "A", "y"), message("D1:1", USER, "A", "z")]
        )
    assert fields(caught.value) == ["messages[2].id"]
    await workspace.client.write_conversation(SCOPE, [message("D1:1", USER, "A", "x")])
    with pytest.raises(InvalidArgumentError) as caught:  # already in the session's transcript
        await workspace.client.write_conversation(
            SCOPE, [message("D1:2", USER, "A", "y"), message("D1:1", USER, "A", "x again")]
        )
    assert fields(caught.value) == ["messages[1].id"]
    usage = await admin_client.get_workspace_usage(workspace.name)
    assert (usage.memory_count, usage.transcript_message_count) == (1, 1)
    # The same id in another session is fine.
    other = memory_pb2.Scope(user_id="caroline", session_id="session-2")
    reply = await workspace.client.write_conversation(other, [message("D1:1", USER, "A", "x")])
    assert reply.memories[0].provenance == memory_pb2.Provenance(session_id="session-2", message_ids=["D1:1"])


async def test_erasing_a_session_removes_its_transcript_and_memories(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    await workspace.client.write_conversation(SCOPE, [message("a", USER, "", "keep me out")])
    other = memory_pb2.Scope(user_id="caroline", session_id="session-2")
    kept = await workspace.client.write_conversation(other, [message("a", USER, "", "keep me")])
    reply = await workspace.client.delete_memories_by_scope(memory_pb2.Scope(session_id="session-1"))
    assert (reply.deleted_count, reply.deleted_message_count) == (1, 1)
    assert [m.id for m in await list_all(workspace.client)] == [kept.memories[0].id]
    usage = await admin_client.get_workspace_usage(workspace.name)
    assert (usage.memory_count, usage.transcript_message_count) == (1, 1)


async def test_concurrent_writers_of_one_message_id_store_it_once(workspace: TestWorkspace) -> None:
    """The duplicate check and the append hold the same session lock: a racing duplicate
    is INVALID_ARGUMENT naming the message, never a database error (was INTERNAL)."""
    for round_ in range(4):
        replies = await asyncio.gather(
            *(
                workspace.client.write_conversation(SCOPE, [message(f"R{round_}", USER, "", f"copy {i}")])
                for i in range(3)
            ),
            return_exceptions=True,
        )
        stored = [r for r in replies if isinstance(r, writeback_pb2.WriteConversationResponse)]
        refused = [r for r in replies if isinstance(r, InvalidArgumentError)]
        assert len(stored) == 1, replies
        assert len(refused) == 2, replies
        assert all(fields(r) == ["messages[0].id"] for r in refused)
    assert len(await list_all(workspace.client)) == 4


async def test_an_unnumbered_message_never_collides_with_an_explicit_id(workspace: TestWorkspace) -> None:
    await workspace.client.write_conversation(SCOPE, [message("2", USER, "", "client numbered this one 2")])
    reply = await workspace.client.write_conversation(SCOPE, [message("", USER, "", "server numbers this one")])
    [auto] = reply.memories
    assert auto.metadata["message_id"] != "2"
    assert len(await list_all(workspace.client)) == 2


async def test_client_ids_may_not_use_the_server_numbering_prefix(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.write_conversation(SCOPE, [message("#1", USER, "", "pretends to be server-numbered")])
    assert fields(caught.value) == ["messages[0].id"]
    assert await list_all(workspace.client) == []
