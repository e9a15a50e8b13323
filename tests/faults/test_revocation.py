"""Revocation and deletion take effect on every server process within a second.

Two real `memplane serve` processes over one database: a key's verification is cached by
process 2 (a search), then revoked or its workspace deleted through process 1. Process 2
hears it from PostgreSQL (LISTEN/NOTIFY, `memplane.server.storage.invalidation`) and answers the
key UNAUTHENTICATED within PROPAGATION_SECONDS; every answer before that is the old one
(OK), never another code. Also when process 2's listener connection was killed
(pg_terminate_backend) before the revoke: it reconnects, and misses nothing.

On the code before the listener, process 2 kept accepting a revoked key and a deleted
workspace's key for the whole key cache time (30 s; each test failed at its 1 s
deadline), after the workspace was re-created under its name the old key's searches
answered OK (empty) and its AddMemories INTERNAL, and there was no listener to kill.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnauthenticatedError
from memplane.server.storage.invalidation import application_name
from memplane.v1 import retrieval_pb2
from tests.faults.conftest import ServerProcess
from tests.fix_replica import wait_until
from tests.fix_server import random_workspace_name
from tests.support import mem

PROPAGATION_SECONDS = 1.0  # the promise: a revoke or deletion applies everywhere within it
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL

Serve = Callable[..., Awaitable[ServerProcess]]


@pytest.fixture
async def two_servers(serve: Serve, pg_dsn: str) -> tuple[ServerProcess, ServerProcess]:
    """Two `memplane serve` processes over the session's database."""
    return await serve(pg_dsn), await serve(pg_dsn)


@pytest.fixture
async def admin(two_servers: tuple[ServerProcess, ServerProcess], admin_key: str) -> AsyncIterator[AsyncMemplaneClient]:
    """An admin client of process 1."""
    async with AsyncMemplaneClient(two_servers[0].target, admin_key) as client:
        yield client


async def _workspace_with_key(admin: AsyncMemplaneClient, target: str, name: str) -> tuple[str, str]:
    """Create workspace *name* with a key and one memory through *target*; (key id, key)."""
    await admin.create_workspace(name)
    created = await admin.create_api_key(name, "test")
    async with AsyncMemplaneClient(target, created.api_key) as client:
        await client.add_memories([mem("the harbour master keeps the ledger in the blue cabinet")])
    return created.key_id, created.api_key


async def _warm(target: str, key: str) -> None:
    """One search with *key* on *target*: its verification is now cached there."""
    async with AsyncMemplaneClient(target, key) as client:
        assert len((await client.search("harbour ledger", mode=LEXICAL)).hits) == 1


async def _refused_within(target: str, key: str, seconds: float = PROPAGATION_SECONDS) -> None:
    """Search with *key* on *target* until UNAUTHENTICATED; fail if a search sent more than
    *seconds* from now is still answered, or if any answer is neither a result nor
    UNAUTHENTICATED. (A search sent before the deadline may be answered after it: it was
    admitted in time.)"""
    deadline = time.monotonic() + seconds
    async with AsyncMemplaneClient(target, key, retry_reads=False) as client:
        while True:
            sent = time.monotonic()
            try:
                await client.search("harbour ledger", mode=LEXICAL)
            except UnauthenticatedError:
                return
            assert sent < deadline, f"{target} still accepts the key {sent - deadline + seconds:.2f} s later"


def _listener_backends(dsn: str, server: ServerProcess) -> list[int]:
    """Backend pids of *server*'s invalidation listener connection (by application_name)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name(server.process.pid),)
        ).fetchall()
    return [int(r[0]) for r in rows]


def _terminate_listener(dsn: str, server: ServerProcess) -> int:
    """pg_terminate_backend *server*'s listener connection; wait until its backend has
    exited and return that backend's pid."""
    [backend] = _listener_backends(dsn, server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone() == (True,)
    wait_until(lambda: backend not in _listener_backends(dsn, server), "the listener's backend exited")
    return backend


async def test_a_revoked_key_is_refused_by_every_process_within_a_second(
    two_servers: tuple[ServerProcess, ServerProcess], admin: AsyncMemplaneClient
) -> None:
    first, second = two_servers
    key_id, key = await _workspace_with_key(admin, first.target, random_workspace_name())
    await _warm(second.target, key)
    await admin.revoke_api_key(key_id)
    await _refused_within(second.target, key)


async def test_a_deleted_workspaces_key_is_refused_by_every_process_within_a_second(
    two_servers: tuple[ServerProcess, ServerProcess], admin: AsyncMemplaneClient
) -> None:
    first, second = two_servers
    name = random_workspace_name()
    _, key = await _workspace_with_key(admin, first.target, name)
    await _warm(second.target, key)
    await admin.delete_workspace(name)
    await _refused_within(second.target, key)


async def test_a_recreated_workspace_refuses_the_old_key_and_serves_the_new(
    two_servers: tuple[ServerProcess, ServerProcess], admin: AsyncMemplaneClient
) -> None:
    first, second = two_servers
    name = random_workspace_name()
    _, old_key = await _workspace_with_key(admin, first.target, name)
    await _warm(second.target, old_key)
    await admin.delete_workspace(name)
    _, new_key = await _workspace_with_key(admin, first.target, name)
    await _refused_within(second.target, old_key)
    async with AsyncMemplaneClient(second.target, old_key) as stale:
        with pytest.raises(UnauthenticatedError):  # was INTERNAL: a write to the dropped partition
            await stale.add_memories([mem("written with the old key")])
    await _warm(second.target, new_key)


async def test_revocation_still_applies_after_the_listener_connection_was_killed(
    two_servers: tuple[ServerProcess, ServerProcess], admin: AsyncMemplaneClient, pg_dsn: str
) -> None:
    first, second = two_servers
    key_id, key = await _workspace_with_key(admin, first.target, random_workspace_name())
    await _warm(second.target, key)
    killed = _terminate_listener(pg_dsn, second)
    await _warm(second.target, key)  # served while the listener reconnects
    wait_until(lambda: _listener_backends(pg_dsn, second) not in ([], [killed]), "process 2 listening again")
    await _warm(second.target, key)  # cached again, under the new listener
    await admin.revoke_api_key(key_id)
    await _refused_within(second.target, key)
