"""Reads from a real streaming replica (database.read_dsn) over gRPC: read-your-writes by
the memplane-lsn token, the replica really serving reads, and a dead replica never a hang.

Replay paused with pg_wal_replay_pause() is the proof of where a read ran: a write made
after the pause is on the primary only, so a read that misses it ran on the replica.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, NotFoundError
from memplane.server.api.server import RunningServer
from memplane.server.app import App, build_app
from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.serving import serve
from memplane.server.settings import AuthSettings, DatabaseSettings, Settings
from memplane.v1 import memory_pb2
from tests.fix_replica import StreamingReplica
from tests.fix_server import random_workspace_name

WAIT_SECONDS = 0.3  # read_your_writes_wait of the test server
RETRY_SECONDS = 0.5  # replica_retry_seconds of the test server
NO_HANG_SECONDS = 5.0  # a read with the replica dead answers well within this (pool timeout 1 s)


@dataclass
class ReplicatedServer:
    """A server over `replica_primary` reading from `replica`, and a workspace's clients."""

    app: App
    replica: StreamingReplica
    writer: AsyncMemplaneClient  # keeps the tokens its writes return
    api_key: str
    target: str


@pytest.fixture
async def replicated(
    replica_primary: str, replica: StreamingReplica, embedder: CachedEmbedder, admin_key: str, tmp_path: Path
) -> AsyncIterator[ReplicatedServer]:
    settings = Settings(
        data_dir=tmp_path / "memplane",
        database=DatabaseSettings(
            dsn=replica_primary,
            read_dsn=replica.dsn,
            read_your_writes_wait=WAIT_SECONDS,
            replica_max_lag=3600.0,  # a paused replay must not count as stale: the test decides where reads go
            replica_lag_check_interval=0.05,
            replica_retry_seconds=RETRY_SECONDS,
        ),
        auth=AuthSettings(admin_key=SecretStr(admin_key), bootstrap_default_workspace=False),
    )
    app = await build_app(settings, embedder=embedder)
    app.start()
    running: RunningServer = await serve(app, host="127.0.0.1", port=0)
    target = f"127.0.0.1:{running.port}"
    name = random_workspace_name()
    async with AsyncMemplaneClient(target, admin_key) as admin:
        await admin.create_workspace(name)
        key = (await admin.create_api_key(name, "replica test")).api_key
    writer = AsyncMemplaneClient(target, key, timeout=30.0)
    try:
        yield ReplicatedServer(app, replica, writer, key, target)
    finally:
        await writer.close()
        await running.stop(0)
        await app.close()


def _ids(reply: object) -> set[str]:
    return {hit.memory.id for hit in reply.hits}  # type: ignore[attr-defined]


async def _add(client: AsyncMemplaneClient, content: str) -> str:
    (memory,) = await client.add_memories([memory_pb2.MemoryInput(content=content, type=memory_pb2.MEMORY_TYPE_USER)])
    return memory.id


async def test_writes_return_a_token_and_a_search_carrying_it_sees_the_write(replicated: ReplicatedServer) -> None:
    memory_id = await _add(replicated.writer, "I keep bees on the roof of the library")
    assert replicated.writer.lsn, "AddMemories returned no memplane-lsn token"
    reply = await replicated.writer.search("bees on the roof", top_k=5)
    assert memory_id in _ids(reply)
    assert replicated.app.reads.stats["replica"] >= 1  # served by the caught-up replica


async def test_paused_replica_serves_untokened_reads_and_tokened_ones_fall_back(replicated: ReplicatedServer) -> None:
    before = await _add(replicated.writer, "My sister plays the oboe in an orchestra")
    # The replica replays the workspace and the first write before the pause (a search carrying
    # the token only waits read_your_writes_wait for it, then reads the primary: under load the
    # replica could be paused short of the first write, and the untokened search below missed it).
    await asyncio.to_thread(replicated.replica.wait_replayed)
    assert before in _ids(await replicated.writer.search("oboe", top_k=5))
    replicated.replica.pause_replay()
    try:
        after = await _add(replicated.writer, "My brother repairs antique clocks in Lisbon")
        async with AsyncMemplaneClient(replicated.target, replicated.api_key) as stranger:  # holds no token
            blind = await stranger.search("antique clocks Lisbon", top_k=5)
            assert after not in _ids(blind), "an untokened search saw a write the paused replica has not replayed"
            assert before in _ids(await stranger.search("oboe orchestra", top_k=5))
            with pytest.raises(NotFoundError):
                await stranger.get_memory(after)

        stats = replicated.app.reads.stats
        lagging = stats["primary:lagging"]
        started = time.monotonic()
        seen = await replicated.writer.search("antique clocks Lisbon", top_k=5)
        assert after in _ids(seen), "a search carrying the write's token did not see it"
        assert time.monotonic() - started >= WAIT_SECONDS  # it waited for the replica first...
        assert stats["primary:lagging"] == lagging + 1  # ...then read from the primary
        assert (await replicated.writer.get_memory(after)).id == after
    finally:
        replicated.replica.resume_replay()

    served = replicated.app.reads.stats["replica"]
    reply = await replicated.writer.search("antique clocks Lisbon", top_k=5)
    assert after in _ids(reply)
    assert replicated.app.reads.stats["replica"] > served  # the replay caught up: the replica serves it again


async def test_a_dead_replica_sends_reads_to_the_primary_without_hanging(replicated: ReplicatedServer) -> None:
    memory_id = await _add(replicated.writer, "The spare key is under the blue flower pot")
    replicated.replica.stop()
    async with AsyncMemplaneClient(replicated.target, replicated.api_key) as stranger:
        for client in (stranger, replicated.writer):  # without and with a token
            started = time.monotonic()
            reply = await client.search("where is the spare key", top_k=5)
            assert time.monotonic() - started < NO_HANG_SECONDS
            assert memory_id in _ids(reply)
    stats = replicated.app.reads.stats
    assert stats["primary:failed"] >= 1
    assert stats["replica"] == 0 or stats["primary:failed"] + stats["primary:down"] >= 2

    replicated.replica.start()  # back after replica_retry_seconds
    deadline = time.monotonic() + 30.0
    while not await _served_by_replica(replicated):
        assert time.monotonic() < deadline, f"reads never returned to the restarted replica: {dict(stats)}"
    assert memory_id in _ids(await replicated.writer.search("spare key", top_k=5))


async def _served_by_replica(replicated: ReplicatedServer) -> bool:
    served = replicated.app.reads.stats["replica"]
    await replicated.writer.get_memory((await replicated.writer.list_memories()).memories[0].id)
    return replicated.app.reads.stats["replica"] > served


async def test_a_malformed_token_is_invalid_argument_naming_it(replicated: ReplicatedServer) -> None:
    replicated.writer.lsn = "not-a-position"
    with pytest.raises(InvalidArgumentError) as caught:
        await replicated.writer.search("anything", top_k=1)
    assert "memplane-lsn" in str(caught.value)


async def test_tokens_tell_a_tenant_nothing_of_other_tenants_writes(
    replicated: ReplicatedServer, admin_key: str
) -> None:
    """Between two of B's writes another workspace writes 37 memories: B's tokens show only
    B's own progress (its event counter moves by 1), never the WAL position all tenants share
    (sealed, and 36 random-looking bytes of fixed length whatever the position)."""
    await _add(replicated.writer, "first note of tenant B")
    first = replicated.writer.lsn
    async with AsyncMemplaneClient(replicated.target, admin_key) as admin:
        other = random_workspace_name()
        await admin.create_workspace(other)
        try:
            other_key = (await admin.create_api_key(other, "neighbour")).api_key
            async with AsyncMemplaneClient(replicated.target, other_key) as neighbour:
                for i in range(37):
                    await _add(neighbour, f"neighbour's note {i}")
                neighbours_token = neighbour.lsn
        finally:
            await admin.delete_workspace(other)
    await _add(replicated.writer, "second note of tenant B")
    second = replicated.writer.lsn

    counter_1, dot_1, sealed_1 = first.partition(".")
    counter_2, dot_2, sealed_2 = second.partition(".")
    assert dot_1, f"not a '<counter>.<sealed>' token: {first!r}"
    assert dot_2, f"not a '<counter>.<sealed>' token: {second!r}"
    assert int(counter_2) - int(counter_1) == 1  # one ADD event of B's own, nothing of the neighbour's 37
    assert len(sealed_1) == len(sealed_2) == 48  # base64url of nonce 12 + position 8 + tag 16 bytes
    assert "/" not in first + second  # no "X/Y" WAL position in the clear
    assert neighbours_token.partition(".")[0] == "37"  # the neighbour's counter is its own too

    # a token opens only for the workspace it was sealed for, and only as it was sealed
    for foreign in (neighbours_token, f"{int(counter_2) + 5}.{sealed_2}", f"{counter_2}.{sealed_1}"):
        replicated.writer.lsn = foreign
        with pytest.raises(InvalidArgumentError) as caught:
            await replicated.writer.search("note", top_k=1)
        assert "memplane-lsn" in str(caught.value)
    replicated.writer.lsn = second
    assert (await replicated.writer.search("second note", top_k=1)).hits
