"""UpdateMemory of a conversation turn's memory over real gRPC: whatever mask a client
sends, the memory stays that turn's — its neighbours' context (SearchMemoriesRequest.
context_turns) and named by the speaker term — or the update is refused naming the field
that would end it. A turn is what WriteConversation writes per message: EPISODIC, metadata
`message_id` naming the message (plus `speaker`, `role`, `turn_time`). Before this a
metadata replace (adding a tag) or a type change silently dropped the turn from its
neighbours' context and lost its speaker."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memplane.errors import InvalidArgumentError
from memplane.eval.runner import TERMS_OFF
from memplane.v1 import filter_pb2, memory_pb2
from tests.e2e.test_search_terms import MAY, message
from tests.fix_server import TestWorkspace
from tests.support import fields, mem, ts

OFF = TERMS_OFF
DORA = filter_pb2.MemoryFilter(user_id="dora")
TURNS = [
    ("t1", "I grow tomatoes in my garden"),
    ("t2", "I saw a quokka on the island today"),
    ("t3", "I sing in a choir on Fridays"),
]
STORED_KEYS = {"message_id": "t1", "speaker": "Dora", "role": "user", "turn_time": MAY.isoformat()}


async def _conversation(workspace: TestWorkspace) -> list[memory_pb2.Memory]:
    scope = memory_pb2.Scope(user_id="dora", session_id="s-dora")
    written = await workspace.client.write_conversation(scope, [message(i, "Dora", t, MAY) for i, t in TURNS])
    return list(written.memories)


async def _context_of_t2(workspace: TestWorkspace) -> list[tuple[str, str]]:
    """The turns around t2's hit (context_turns=1): t1's place holds t1 while it is a turn."""
    reply = await workspace.client.search("quokka island", top_k=1, context_turns=1, filter=DORA)
    assert reply.hits[0].memory.metadata.fields["message_id"].string_value == "t2"
    return [(c.message_id, c.content) for c in reply.hits[0].context]


async def _speaker_boost(workspace: TestWorkspace, memory_id: str, speaker: str) -> float:
    """The speaker term's boost of *memory_id* in a search naming *speaker* (other terms off)."""
    reply = await workspace.client.search(
        f"What does {speaker} grow?", top_k=20, filter=DORA, **{**OFF, "speaker_weight": 0.4}
    )
    (hit,) = [h for h in reply.hits if h.memory.id == memory_id]
    return hit.boosts.speaker


def _metadata(memory: memory_pb2.Memory) -> dict[str, Any]:
    return {k: v.string_value for k, v in memory.metadata.fields.items()}


# (mask, the new values, the metadata after, the content after, the speaker the term names)
KEPT: list[tuple[list[str], memory_pb2.MemoryInput, dict[str, Any], str, str]] = [
    (["metadata"], mem("", metadata={"tag": "garden"}), {"tag": "garden", **STORED_KEYS}, TURNS[0][1], "Dora"),
    (["metadata"], mem("", metadata={}), STORED_KEYS, TURNS[0][1], "Dora"),  # the user's keys cleared, the turn's kept
    (
        ["metadata"],
        mem("", metadata={"speaker": "Dorothy", "message_id": "t1"}),
        {**STORED_KEYS, "speaker": "Dorothy"},
        TURNS[0][1],
        "Dorothy",
    ),
    (["type"], mem("", type=memory_pb2.MEMORY_TYPE_EPISODIC), STORED_KEYS, TURNS[0][1], "Dora"),
    (["content"], mem("I grow peppers in my garden"), STORED_KEYS, "I grow peppers in my garden", "Dora"),
    (
        ["name", "description", "valid_from_time"],
        mem("", name="garden", description="about the garden", valid_from_time=ts(datetime(2023, 5, 9, tzinfo=UTC))),
        STORED_KEYS,
        TURNS[0][1],
        "Dora",
    ),
    (
        ["name", "description", "content", "type", "metadata", "valid_from_time"],
        mem(
            "I grow tomatoes in my garden",
            name="garden",
            description="[8 May 2023] Dora",
            type=memory_pb2.MEMORY_TYPE_EPISODIC,
            metadata={"tag": "garden"},
            valid_from_time=ts(MAY),
        ),
        {"tag": "garden", **STORED_KEYS},
        TURNS[0][1],
        "Dora",
    ),
]


@pytest.mark.parametrize(
    ("mask", "values", "metadata", "content", "speaker"),
    KEPT,
    ids=[
        "metadata-tag",
        "metadata-empty",
        "metadata-speaker",
        "type-same",
        "content",
        "name-description-valid-from",
        "every-field",
    ],
)
async def test_an_update_keeps_a_turn_its_neighbours_context_and_its_speakers(
    workspace: TestWorkspace,
    mask: list[str],
    values: memory_pb2.MemoryInput,
    metadata: dict[str, Any],
    content: str,
    speaker: str,
) -> None:
    """The user's update is kept (a tag added, a speaker or the words corrected) and the
    turn's own metadata keys the new metadata does not name are kept (as mem0's update
    keeps role and actor_id): t1 stays t2's context and the speaker term still names it."""
    first = (await _conversation(workspace))[0]
    updated = await workspace.client.update_memory(first.id, values, mask)
    assert updated.version == 2
    assert updated.type == memory_pb2.MEMORY_TYPE_EPISODIC
    assert _metadata(updated) == metadata
    assert updated.content == content
    assert await _context_of_t2(workspace) == [("t1", content), ("t3", TURNS[2][1])]
    assert await _speaker_boost(workspace, first.id, speaker) == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("mask", "values", "field"),
    [
        (["type"], mem("", type=memory_pb2.MEMORY_TYPE_USER), "memory.type"),
        (
            ["type", "metadata"],
            mem("", type=memory_pb2.MEMORY_TYPE_PROCEDURAL, metadata={"tag": "x"}),
            "memory.type",
        ),
        (["metadata"], mem("", metadata={"message_id": "t9"}), "memory.metadata.message_id"),
        (["metadata"], mem("", metadata={"message_id": None}), "memory.metadata.message_id"),
    ],
    ids=["type-user", "type-procedural-and-metadata", "metadata-other-message", "metadata-null-message"],
)
async def test_an_update_that_would_end_a_turn_is_refused_naming_the_field(
    workspace: TestWorkspace, mask: list[str], values: memory_pb2.MemoryInput, field: str
) -> None:
    """A type other than episodic, or a message_id naming another message (the memory's
    provenance names its turn and cannot change), would make the memory no turn's: the
    update is refused and nothing changes."""
    first = (await _conversation(workspace))[0]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.update_memory(first.id, values, mask)
    assert fields(caught.value) == [field]
    stored = await workspace.client.get_memory(first.id)
    assert (stored.version, stored.type, _metadata(stored)) == (1, memory_pb2.MEMORY_TYPE_EPISODIC, STORED_KEYS)
    assert await _context_of_t2(workspace) == [("t1", TURNS[0][1]), ("t3", TURNS[2][1])]
    history = await workspace.client.list_memory_events(first.id)
    assert [e.kind for e in history] == [memory_pb2.EVENT_KIND_ADD]


async def test_a_memory_that_is_no_turn_is_updated_as_asked(workspace: TestWorkspace) -> None:
    """Only a turn's memory keeps keys: another memory's metadata is replaced whole, and
    an episodic memory naming no message (a session summary, a note) may change type."""
    (fact, note) = await workspace.client.add_memories(
        [
            mem("Dora grows tomatoes", user_id="dora", metadata={"speaker": "Dora", "source": "chat"}),
            mem("Dora's week", user_id="dora", type=memory_pb2.MEMORY_TYPE_EPISODIC, metadata={"speaker": "Dora"}),
        ]
    )
    replaced = await workspace.client.update_memory(fact.id, mem("", metadata={"tag": "garden"}), ["metadata"])
    assert _metadata(replaced) == {"tag": "garden"}
    retyped = await workspace.client.update_memory(note.id, mem("", type=memory_pb2.MEMORY_TYPE_USER), ["type"])
    assert retyped.type == memory_pb2.MEMORY_TYPE_USER
