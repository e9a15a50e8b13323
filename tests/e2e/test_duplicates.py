"""Duplicates without an LLM (issue 11, item 4), over gRPC: AddMemories of a text whose
normalised form (NFKC, lower case, whitespace collapsed) is already a current memory of
the same scope stores nothing; the reply holds the stored memory and names the position
in `duplicate_indexes`; the stored memory's history gains a NOOP event."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.v1 import memory_pb2
from tests.fix_server import TestWorkspace
from tests.support import list_all, mem

# The "Why": a 600-character paragraph added twice to one scope stored two.
PARAGRAPH = (
    "Priya Raman leads the payments platform team in Bengaluru and has done so since March 2023. "
    "She prefers written design reviews over meetings, wants every incident summarised within "
    "24 hours, and asks that on-call handovers happen at 10:00 IST on Mondays. Her team owns the "
    "ledger service, the refunds pipeline and the reconciliation jobs that run nightly at 02:00. "
    "She is allergic to peanuts, cycles to the office from Whitefield, and is learning Kannada. "
    "For travel she books aisle seats, avoids red-eye flights, and keeps receipts in one folder. She reads "
    "status updates in English and replies in Tamil."
)


def kinds(events: list[memory_pb2.MemoryEvent]) -> list[str]:
    return [memory_pb2.EventKind.Name(e.kind) for e in events]


async def test_the_same_paragraph_added_twice_is_one_memory(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    assert len(PARAGRAPH) >= 600
    first = await workspace.client.add_memories_reply([mem(PARAGRAPH, user_id="priya")])
    again = await workspace.client.add_memories_reply([mem(PARAGRAPH, user_id="priya")])
    assert list(first.duplicate_indexes) == []
    assert list(again.duplicate_indexes) == [0]
    assert again.memories[0] == first.memories[0]  # the stored memory, unchanged
    assert [m.id for m in await list_all(workspace.client)] == [first.memories[0].id]
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == 1
    reply = await workspace.client.search("who leads the payments platform team", top_k=10)
    assert [h.memory.id for h in reply.hits] == [first.memories[0].id]
    events = await workspace.client.list_memory_events(first.memories[0].id)
    assert kinds(events) == ["EVENT_KIND_ADD", "EVENT_KIND_NOOP"]
    assert events[1].decision["outcome"] == "duplicate"


@pytest.mark.parametrize(
    ("stored", "again"),
    [
        ("I like green tea", "  i LIKE   green\ttea\n"),  # whitespace and case
        ("ＡＢＣ株式会社 uses Postgres", "ABC株式会社 uses postgres"),  # NFKC fullwidth
        ("我喜欢喝绿茶", "我喜欢喝绿茶 "),  # Chinese: trailing space only
        ("我在　上海　工作", "我在 上海 工作"),  # ideographic space (U+3000)
        ("Straße Ⅻ", "straße XII"),  # NFKC compatibility numeral, case
    ],
)
async def test_normalised_duplicates_are_noop(workspace: TestWorkspace, stored: str, again: str) -> None:
    [first] = await workspace.client.add_memories([mem(stored, user_id="u1")])
    reply = await workspace.client.add_memories_reply([mem(again, user_id="u1")])
    assert list(reply.duplicate_indexes) == [0]
    assert reply.memories[0].id == first.id
    assert reply.memories[0].content == stored  # the text as first stored is kept
    assert [m.id for m in await list_all(workspace.client)] == [first.id]


async def test_different_text_or_scope_is_not_a_duplicate(workspace: TestWorkspace) -> None:
    base = await workspace.client.add_memories([mem("我喜欢喝绿茶", user_id="u1")])
    reply = await workspace.client.add_memories_reply(
        [
            mem("我喜欢喝红茶", user_id="u1"),  # another character
            mem("我喜欢喝绿茶", user_id="u2"),  # another user
            mem("我喜欢喝绿茶", user_id="u1", agent_id="a1"),  # another agent
            mem("我喜欢喝绿茶", user_id="u1", session_id="s1"),  # another session
            mem("I like green tea.", user_id="u1"),
            mem("I like green tea", user_id="u1"),  # punctuation is content
        ]
    )
    assert list(reply.duplicate_indexes) == []
    assert len({m.id for m in reply.memories} | {base[0].id}) == 7
    assert len(await list_all(workspace.client)) == 7


async def test_raw_turns_are_never_duplicates(workspace: TestWorkspace) -> None:
    """Turns as a peer harness stores them (episodic, naming their message): two "ok"s are two turns."""
    turn = memory_pb2.MEMORY_TYPE_EPISODIC
    reply = await workspace.client.add_memories_reply(
        [mem("ok", user_id="u1", type=turn, metadata={"message_id": f"D1:{i}"}) for i in range(2)]
    )
    assert list(reply.duplicate_indexes) == []
    assert len(await list_all(workspace.client)) == 2
    # An episodic memory naming no message is an ordinary memory: deduplicated.
    notes = [mem("Session notes", user_id="u1", type=turn) for _ in range(2)]
    assert list((await workspace.client.add_memories_reply(notes)).duplicate_indexes) == [1]


async def test_duplicates_within_one_batch(workspace: TestWorkspace) -> None:
    reply = await workspace.client.add_memories_reply(
        [
            mem("Owns a dog named Pixel", user_id="u1"),
            mem("Likes jazz", user_id="u1"),
            mem("owns a DOG named pixel", user_id="u1"),
        ]
    )
    assert list(reply.duplicate_indexes) == [2]
    assert reply.memories[2].id == reply.memories[0].id
    stored = await list_all(workspace.client)
    assert sorted(m.id for m in stored) == sorted({reply.memories[0].id, reply.memories[1].id})
    assert kinds(await workspace.client.list_memory_events(reply.memories[0].id)) == [
        "EVENT_KIND_ADD",
        "EVENT_KIND_NOOP",
    ]


async def test_racing_adds_of_the_same_text_store_one(
    workspace: TestWorkspace, admin_client: AsyncMemplaneClient
) -> None:
    text = "Moved to Electronic City in May 2024"
    replies = await asyncio.gather(*(workspace.client.add_memories_reply([mem(text, user_id="u1")]) for _ in range(8)))
    ids = {r.memories[0].id for r in replies}
    assert len(ids) == 1
    assert sorted(len(r.duplicate_indexes) for r in replies) == [0] + [1] * 7
    assert [m.id for m in await list_all(workspace.client)] == list(ids)
    assert (await admin_client.get_workspace_usage(workspace.name)).memory_count == 1
    # Two batches with the same texts in opposite orders neither deadlock nor duplicate.
    a, b = (mem(f"fact {c}", user_id="u2") for c in "ab")
    pairs = await asyncio.gather(*(workspace.client.add_memories_reply([a, b] if i % 2 else [b, a]) for i in range(6)))
    assert len({m.id for p in pairs for m in p.memories}) == 2


async def test_a_retry_with_the_request_id_gets_the_same_reply(workspace: TestWorkspace) -> None:
    [first] = await workspace.client.add_memories([mem("Speaks Kannada", user_id="u1")])
    reply = await workspace.client.add_memories_reply(
        [mem("speaks kannada", user_id="u1"), mem("Plays chess", user_id="u1")], request_id="dup-retry"
    )
    again = await workspace.client.add_memories_reply(
        [mem("speaks kannada", user_id="u1"), mem("Plays chess", user_id="u1")], request_id="dup-retry"
    )
    assert reply == again
    assert reply.memories[0].id == first.id
    assert list(reply.duplicate_indexes) == [0]
    assert len(await list_all(workspace.client)) == 2


async def test_a_changed_or_closed_memory_no_longer_holds_its_text(workspace: TestWorkspace) -> None:
    [old] = await workspace.client.add_memories([mem("Lives in Whitefield", user_id="u1")])
    await workspace.client.update_memory(old.id, mem("Lives in Electronic City"), ["content"])
    [fresh] = await workspace.client.add_memories([mem("Lives in Whitefield", user_id="u1")])
    assert fresh.id != old.id
    # The updated text is not a key either (documented: UpdateMemory drops it).
    [other] = await workspace.client.add_memories([mem("Lives in Electronic City", user_id="u1")])
    assert other.id != old.id
    # A memory closed as superseded gives way: the fact can be stored anew.
    [trip] = await workspace.client.add_memories([mem("Trip to Goa", user_id="u1")])
    closed = mem("")
    closed.valid_to_time.FromDatetime(trip.valid_from_time.ToDatetime() + timedelta(days=1))
    await workspace.client.update_memory(trip.id, closed, ["valid_to_time"])
    [again] = await workspace.client.add_memories([mem("Trip to Goa", user_id="u1")])
    assert again.id != trip.id


async def test_content_key_normalisation_in_one_place(pg_dsn: str) -> None:
    """memplane_content_key (migration 0013) is the one normalisation; its Unicode cases."""
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:

        async def key(text: str) -> bytes:
            cur = await conn.execute("SELECT memplane_content_key(%s)", (text,))
            row = await cur.fetchone()
            assert row is not None
            return bytes(row[0])

        assert await key("ＡＢＣ") == await key("abc")
        assert await key("Σίσυφος") == await key("σίσυφος")
        assert await key("ÄÖÜ") == await key("äöü")
        assert await key("café") == await key("cafe\u0301")  # composed vs combining accent
        assert await key("a\u00a0b\u2003c\u3000d") == await key("a b c d")
        assert await key("\ufeffx") == await key("x")
        assert await key(" 你好世界 ") == await key("你好世界") != await key("你好，世界")
        assert await key("我喜欢喝绿茶") != await key("我喜欢喝红茶")
        assert await key("a b") != await key("ab")
