"""The SDK retries idempotent calls by itself (gRPC's retry policy in the channel,
`memplane.client.retry`): a write whose reply was lost is retried with the request_id the
SDK gave it and stored exactly once; a DEADLINE_EXCEEDED answered by the server and a
hung attempt (attempt_timeout) are retried inside the call's deadline; and when every
call fails, the retry budget stops the retries. The faults are made by a real gRPC proxy
(`tests.fix_grpc_proxy`) in front of the session's server, which counts every attempt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.client.retry import MAX_ATTEMPTS, MAX_TOKENS
from memplane.errors import UnavailableError
from tests.fix_grpc_proxy import GrpcProxy
from tests.fix_server import TestWorkspace
from tests.support import list_all, mem, unit_vectors

ADD = "/memplane.v1.WriteBackService/AddMemories"
SEARCH = "/memplane.v1.RetrievalService/SearchMemories"
NOWHERE = "127.0.0.1:1"  # nothing listens on port 1

StartProxy = Callable[[str], Awaitable[tuple[GrpcProxy, str]]]


@pytest.fixture
async def proxy_to() -> AsyncIterator[StartProxy]:
    """`await proxy_to(upstream)` starts a proxy in front of *upstream*; (proxy, its target)."""
    started: list[GrpcProxy] = []

    async def start(upstream: str) -> tuple[GrpcProxy, str]:
        proxy = GrpcProxy(upstream)
        port = await proxy.start()
        started.append(proxy)
        return proxy, f"127.0.0.1:{port}"

    yield start
    for proxy in started:
        await proxy.stop()


async def test_a_write_whose_reply_was_lost_is_retried_and_stored_once(
    proxy_to: StartProxy, server: str, workspace: TestWorkspace
) -> None:
    proxy, target = await proxy_to(server)
    # The server stores the batch and answers; the answer is lost on its way back.
    proxy.fail(ADD, grpc.StatusCode.UNAVAILABLE, after_upstream=True)
    async with AsyncMemplaneClient(target, workspace.key, timeout=60) as client:
        stored = await client.add_memories(
            [mem(f"the lost reply number {i}", embedding=v) for i, v in enumerate(unit_vectors(3, seed=11))]
        )
    assert proxy.calls[ADD] == 2  # the first attempt and its retry, both reached the server
    rows = await list_all(workspace.client)
    assert sorted(m.id for m in rows) == sorted(m.id for m in stored)  # stored once, the retry replayed
    assert len(rows) == 3


async def test_a_server_deadline_and_a_hung_attempt_are_retried_within_the_call_deadline(
    proxy_to: StartProxy, server: str, workspace: TestWorkspace
) -> None:
    await workspace.client.add_memories([mem("the tide tables are pinned by the door")])
    proxy, target = await proxy_to(server)
    # DEADLINE_EXCEEDED answered by the server (a statement timeout) while the call has time.
    proxy.fail(SEARCH, grpc.StatusCode.DEADLINE_EXCEEDED)
    async with AsyncMemplaneClient(target, workspace.key, timeout=60) as client:
        assert len((await client.search("tide tables")).hits) == 1
    assert proxy.calls[SEARCH] == 2
    # An attempt that never answers: cut after attempt_timeout and sent again.
    proxy.fail(SEARCH, None)
    async with AsyncMemplaneClient(target, workspace.key, timeout=60, attempt_timeout=2.0) as client:
        assert len((await client.search("tide tables")).hits) == 1
    assert proxy.calls[SEARCH] == 4


async def test_the_retry_budget_stops_retries_when_every_call_fails(
    proxy_to: StartProxy, workspace: TestWorkspace
) -> None:
    proxy, target = await proxy_to(NOWHERE)  # every attempt answered UNAVAILABLE
    calls = 20
    async with AsyncMemplaneClient(target, workspace.key, timeout=30) as client:
        with pytest.raises(UnavailableError):
            await client.add_memories([mem("never stored")])
        first = proxy.calls[ADD]
        for _ in range(calls - 1):
            with pytest.raises(UnavailableError):
                await client.add_memories([mem("never stored")])
    assert first > 1  # a failing write is retried (it carries the SDK's request_id)
    # Without the budget every call would take MAX_ATTEMPTS attempts; with it, once the
    # tokens are spent (one per failure), each call is sent once.
    assert proxy.calls[ADD] <= calls + MAX_TOKENS
    assert proxy.calls[ADD] < calls * MAX_ATTEMPTS


async def test_retries_off_sends_every_call_once(proxy_to: StartProxy, server: str, workspace: TestWorkspace) -> None:
    proxy, target = await proxy_to(server)
    proxy.fail(ADD, grpc.StatusCode.UNAVAILABLE)
    async with AsyncMemplaneClient(target, workspace.key, timeout=30, retry_reads=False) as client:
        with pytest.raises(UnavailableError):
            await client.add_memories([mem("sent once")])
    assert proxy.calls[ADD] == 1
