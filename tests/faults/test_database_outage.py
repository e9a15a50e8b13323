"""PostgreSQL killed under a running server (SIGKILL of the postmaster), then started
again on the same port: while it is down every RPC answers UNAVAILABLE within half a second — not
after the pool's 30 s connection wait, so well inside a 10 s deadline — and each
service's health is NOT_SERVING (the process itself, "", stays SERVING: liveness); once
it is back the server serves again by itself, with nothing stored lost.

On the code before `memplane.server.storage.availability`, the second search after the kill
waited for a pooled connection until its deadline (DEADLINE_EXCEEDED), health stayed
SERVING throughout, and the server only recovered once the pool's reconnect loop did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane.v1 import retrieval_pb2
from tests.faults.conftest import KillablePostgres, ServerProcess
from tests.support import mem

DEADLINE = 10.0  # seconds: each RPC's own deadline while the database is down
RETRIEVAL = "memplane.v1.RetrievalService"
WATCH_SECONDS = 60.0


async def _statuses(target: str, service: str) -> AsyncGenerator[int, None]:
    """The health statuses of *service* as the server pushes them (grpc.health.v1 Watch)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service))
        async for reply in stream:
            yield reply.status


async def _until_status(statuses: AsyncIterator[int], wanted: int) -> None:
    async with asyncio.timeout(WATCH_SECONDS):
        async for status in statuses:
            if status == wanted:
                return


async def _check(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE
        )
        return int(reply.status)


async def test_a_killed_database_is_unavailable_at_once_and_the_server_recovers_by_itself(
    killable_postgres: KillablePostgres, serve: object, admin_key: str
) -> None:
    server: ServerProcess = await serve(killable_postgres.dsn)  # type: ignore[operator]
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace("outage")
        key = (await admin.create_api_key("outage", "test")).api_key
    client = AsyncMemplaneClient(server.target, key, timeout=DEADLINE)
    statuses = _statuses(server.target, RETRIEVAL)
    try:
        await client.add_memories([mem(f"the lighthouse keeper logged storm number {i}") for i in range(5)])
        lexical = retrieval_pb2.SEARCH_MODE_LEXICAL
        assert len((await client.search("lighthouse storm", mode=lexical)).hits) == 5
        await _until_status(statuses, health_pb2.HealthCheckResponse.SERVING)

        killable_postgres.kill()
        for _ in range(3):  # the first finds its pooled connection broken; the others are refused at once
            with pytest.raises(UnavailableError):
                await client.search("lighthouse storm", mode=lexical)
        with pytest.raises(UnavailableError):
            await client.add_memories([mem("written while the database is down")])
        await _until_status(statuses, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert await _check(server.target, "") == health_pb2.HealthCheckResponse.SERVING  # liveness

        killable_postgres.start()
        await _until_status(statuses, health_pb2.HealthCheckResponse.SERVING)
        hits = (await client.search("lighthouse storm", mode=lexical, top_k=20)).hits
        assert sorted(h.memory.content for h in hits) == sorted(
            f"the lighthouse keeper logged storm number {i}" for i in range(5)
        )
        await client.add_memories([mem("the lighthouse keeper logged storm number 5")])
        assert len((await client.search("lighthouse storm", mode=lexical, top_k=20)).hits) == 6
        assert server.process.returncode is None  # never restarted
    finally:
        await statuses.aclose()
        await client.close()


async def test_a_restart_nobody_saw_costs_a_read_no_error(
    killable_postgres: KillablePostgres, serve: object, admin_key: str
) -> None:
    """PostgreSQL killed and started again between two searches: the second finds its
    pooled connection broken (UNAVAILABLE on the server), and the SDK's channel retries it
    (client/retry.py) once the server's probe has the database back. On the code before,
    that search raised UnavailableError."""
    server: ServerProcess = await serve(killable_postgres.dsn)  # type: ignore[operator]
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace("blip")
        key = (await admin.create_api_key("blip", "test")).api_key
    async with AsyncMemplaneClient(server.target, key, timeout=DEADLINE) as client:
        await client.add_memories([mem("the ferry leaves at dawn")])
        lexical = retrieval_pb2.SEARCH_MODE_LEXICAL
        for _ in range(4):  # every pooled connection has been used and is idle in the pool
            assert len((await client.search("ferry dawn", mode=lexical)).hits) == 1
        killable_postgres.kill()
        killable_postgres.start()
        try:
            hits = (await client.search("ferry dawn", mode=lexical)).hits
        except UnavailableError as error:  # the server's own account of the outage, to see why
            pytest.fail(f"{error}\n{server.log.read_text(errors='replace')[-3000:]}", pytrace=False)
        assert len(hits) == 1
    assert "database unreachable" in server.log.read_text(errors="replace")  # the server did see it
