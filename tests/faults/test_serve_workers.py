"""`memplane serve --workers 2`: two server processes on one port (SO_REUSEPORT) under one
supervisor, on the embedded default. Clients on separate connections are served by both;
a signal to the supervisor stops both cleanly; a worker killed takes the rest down with a
failing status (for the service manager to restart), never leaves half a server."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable

import psutil  # type: ignore[import-untyped]

from memplane.cli.workers import ACCEPT_POLL_SECONDS
from memplane.client import AsyncMemplaneClient
from memplane.server.settings import GrpcSettings
from tests.faults.conftest import ServerProcess
from tests.fix_process import SERVICES_START_SECONDS
from tests.fix_server import random_workspace_name
from tests.support import mem

Serve = Callable[..., Awaitable[ServerProcess]]
_GRPC = GrpcSettings()
# The supervisor's bound on its workers' stop (memplane.cli.main), and the exits themselves
# on two busy cores.
STOP_BOUND_SECONDS = _GRPC.drain_seconds + _GRPC.grace_period + _GRPC.close_seconds + 5 + 10

CLIENTS = 48  # connections: the chance that all but 8 land on one worker is ~1e-6
SEARCHES = 5  # per client


async def _workers_listening(supervisor: int, port: int) -> list[psutil.Process]:
    """The supervisor's two worker processes, once both listen on *port*."""
    deadline = time.monotonic() + SERVICES_START_SECONDS
    while True:
        children = psutil.Process(supervisor).children()
        listening = [
            c for c in children
            if any(s.status == psutil.CONN_LISTEN and s.laddr.port == port for s in c.net_connections("tcp"))
        ]  # fmt: skip
        if len(listening) == 2:
            return listening
        assert time.monotonic() < deadline, f"workers listening: {len(listening)} of 2 ({children})"
        await asyncio.sleep(ACCEPT_POLL_SECONDS)  # polling the kernel's socket table


async def test_two_workers_share_the_port_and_stop_on_a_signal(serve: Serve, admin_key: str) -> None:
    server = await serve(None, args=["--workers", "2"])
    port = int(server.target.rsplit(":", 1)[1])
    workers = await _workers_listening(server.process.pid, port)
    before = {w.pid: sum(w.cpu_times()[:2]) for w in workers}
    name = random_workspace_name()
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(name)
        key = (await admin.create_api_key(name)).api_key
    async with AsyncMemplaneClient(server.target, key) as writer:
        await writer.add_memories([mem(f"the lighthouse keeper's note {i}") for i in range(20)])

    async def one_client(i: int) -> int:
        async with AsyncMemplaneClient(server.target, key) as client:  # a connection of its own
            return sum([len((await client.search(f"keeper note {i} {j}")).hits) for j in range(SEARCHES)])

    assert all(await asyncio.gather(*(one_client(i) for i in range(CLIENTS))))
    used = {w.pid: sum(w.cpu_times()[:2]) - before[w.pid] for w in workers}
    total = sum(used.values())
    # Each worker served its share of the connections: CPU time, not wall time, so a busy
    # machine does not change the split.
    assert min(used.values()) > total / 8, f"CPU seconds per worker during the searches: {used}"

    server.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(STOP_BOUND_SECONDS):
        assert await server.process.wait() == 0
    assert not any(psutil.pid_exists(w.pid) and w.status() != psutil.STATUS_ZOMBIE for w in workers)


async def test_a_killed_worker_stops_the_others_with_a_failing_status(serve: Serve) -> None:
    server = await serve(None, args=["--workers", "2"])
    port = int(server.target.rsplit(":", 1)[1])
    first, second = await _workers_listening(server.process.pid, port)
    second.kill()
    async with asyncio.timeout(STOP_BOUND_SECONDS):
        status = await server.process.wait()
    assert status == 128 + signal.SIGKILL
    assert not psutil.pid_exists(first.pid) or first.status() == psutil.STATUS_ZOMBIE
    assert "exited with status -9: stopping the others" in server.log.read_text()
