"""Times round-trip exactly and in UTC, including across midnight and from clients in
other time zones (the server's sessions run in UTC; Timestamps carry UTC instants)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from memplane.v1 import filter_pb2, memory_pb2, writeback_pb2
from tests.fix_server import TestWorkspace
from tests.support import list_all, mem, ts, unit_vectors

BEFORE_MIDNIGHT = datetime(2024, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC)
AFTER_MIDNIGHT = datetime(2025, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
SHANGHAI = timezone(timedelta(hours=8))
LOS_ANGELES = timezone(timedelta(hours=-8))


def utc(value: object) -> datetime:
    return value.ToDatetime(tzinfo=UTC)  # type: ignore[attr-defined, no-any-return]


async def test_validity_and_expiry_round_trip_across_midnight(workspace: TestWorkspace) -> None:
    expires = datetime(2099, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    [m] = await workspace.client.add_memories(
        [
            mem(
                "New Year's Eve fact",
                embedding=unit_vectors(1, seed=21)[0],
                valid_from_time=ts(BEFORE_MIDNIGHT),
                valid_to_time=ts(AFTER_MIDNIGHT),
                expire_time=ts(expires),
            )
        ]
    )
    for got in (m, await workspace.client.get_memory(m.id)):
        assert utc(got.valid_from_time) == BEFORE_MIDNIGHT
        assert utc(got.valid_to_time) == AFTER_MIDNIGHT
        assert utc(got.expire_time) == expires
        assert got.valid_from_time.seconds == int(BEFORE_MIDNIGHT.timestamp())
        assert got.valid_from_time.nanos == 500_000_000
    listed = await list_all(workspace.client, filter_pb2.MemoryFilter(include_superseded=True))
    assert [utc(x.valid_from_time) for x in listed] == [BEFORE_MIDNIGHT]
    [event] = await workspace.client.list_memory_events(m.id)
    assert utc(event.after.valid_to_time) == AFTER_MIDNIGHT
    assert event.after == m


async def test_times_from_other_time_zones_are_the_same_instant(workspace: TestWorkspace) -> None:
    local = BEFORE_MIDNIGHT.astimezone(SHANGHAI)  # 2025-01-01 07:59:59.5 in Shanghai
    [m] = await workspace.client.add_memories(
        [mem("zone test", embedding=unit_vectors(1, seed=22)[0], valid_from_time=ts(local))]
    )
    assert utc(m.valid_from_time) == BEFORE_MIDNIGHT
    assert utc(m.valid_from_time).date().isoformat() == "2024-12-31"


async def test_create_time_filter_boundaries_are_exact(workspace: TestWorkspace) -> None:
    [m] = await workspace.client.add_memories([mem("boundary", embedding=unit_vectors(1, seed=23)[0])])
    created = m.create_time
    at = filter_pb2.MemoryFilter(create_time_start=created)
    assert [x.id for x in await list_all(workspace.client, at)] == [m.id]  # start is inclusive
    before = filter_pb2.MemoryFilter(create_time_end=created)
    assert await list_all(workspace.client, before) == []  # end is exclusive


async def test_message_just_before_midnight_keeps_its_date(workspace: TestWorkspace) -> None:
    said_at = datetime(2024, 12, 31, 23, 59, 59, 900_000, tzinfo=UTC)
    reply = await workspace.client.write_conversation(
        memory_pb2.Scope(user_id="u", session_id="nye"),
        [
            writeback_pb2.ConversationMessage(
                id="D1:1",
                role=memory_pb2.MESSAGE_ROLE_USER,
                name="Caroline",
                content="Happy new year!",
                create_time=ts(said_at.astimezone(LOS_ANGELES)),
            )
        ],
    )
    [m] = reply.memories
    assert utc(m.valid_from_time) == said_at
    assert m.metadata["turn_time"] == "2024-12-31T23:59:59.900000+00:00"
    assert "31 December 2024" in m.description
    assert "Caroline" in m.description
    assert await workspace.client.get_memory(m.id) == m
