"""The embedded default's PostgreSQL belongs to the `memplane serve` that runs it: the
server restarts it when its postmaster dies (SIGKILL), serving again without a restart
of its own, and a crashed server (SIGKILL) never leaks it — its watchdog stops it, and
a server started again on the same data directory adopts one left behind anyway (the
watchdog killed too) and stops it on its own clean stop.

The outage is made to last, not hoped to be seen: a restart takes the data directory's
lock (`<data_dir>/pgdata.lock`), which the test holds while it looks.

On the code before `memplane.server.storage.embedded_supervisor`: nothing restarted the killed
postmaster, so health never returned to SERVING; a SIGKILLed server left its postmaster
running; and after a restart on the same data directory the dead server's PID in
`pgdata/.handle_pids.json` kept the clean stop from stopping PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import psutil  # type: ignore[import-untyped]
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memplane.client import AsyncMemplaneClient
from memplane.errors import UnavailableError
from memplane.v1 import retrieval_pb2
from tests.faults.conftest import ServerProcess
from tests.support import mem

DEADLINE = 10.0  # seconds: each RPC's own deadline
WAIT_SECONDS = 60.0  # for a process to exit, a status to be pushed: a loaded 2-core box
POLL = 0.05  # seconds between looks at the process table
RETRIEVAL = "memplane.v1.RetrievalService"
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL


def _postmasters(pgdata: Path) -> list[psutil.Process]:
    """The live (not zombie) postmasters of *pgdata*: processes named postgres started
    with `-D pgdata` (backends rename themselves and carry no `-D`). process_iter's cache
    is cleared first: it yields a cached Process of an earlier process whose PID was reused
    (pid_max is 32,768 here and the suite wraps it) with the new process's info, and that
    object's methods then raise NoSuchProcess (CI saw it on the postmaster's children())."""
    found = []
    psutil.process_iter.cache_clear()
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(pgdata) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _alive(process: psutil.Process) -> bool:
    """Whether *process* still runs (a zombie has exited)."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


async def _eventually(check: Callable[[], bool], what: str) -> None:
    """Poll *check* until it holds; fail naming *what* after WAIT_SECONDS."""
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            while not check():  # noqa: ASYNC110  # the process table raises no event
                await asyncio.sleep(POLL)
    except TimeoutError:
        pytest.fail(f"not within {WAIT_SECONDS} s: {what}", pytrace=False)


async def _statuses(target: str, service: str) -> AsyncGenerator[int, None]:
    """The health statuses of *service* as the server pushes them (grpc.health.v1 Watch)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=service))
        async for reply in stream:
            yield reply.status


async def _until_status(statuses: AsyncIterator[int], wanted: int, log: Path) -> None:
    try:
        async with asyncio.timeout(WAIT_SECONDS):
            async for status in statuses:
                if status == wanted:
                    return
    except TimeoutError:
        pytest.fail(f"health never {wanted}\n{_tail(log)}", pytrace=False)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def _check(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE
        )
        return int(reply.status)


@contextlib.contextmanager
def _restarts_held(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's lock: no process can start (or stop) its PostgreSQL meanwhile."""
    with (data_dir / "pgdata.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


async def _migrate(data_dir: Path) -> str:
    """`memplane migrate` on the embedded default of *data_dir*; its output (exit 0 asserted)."""
    env = {k: v for k, v in os.environ.items() if k != "MEMPLANE_DATABASE__DSN"} | {"MEMPLANE_DATA_DIR": str(data_dir)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memplane", "migrate", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode(errors="replace")
    return output.decode(errors="replace")


async def _client(server: ServerProcess, admin_key: str, workspace: str) -> AsyncMemplaneClient:
    async with AsyncMemplaneClient(server.target, admin_key) as admin:
        await admin.create_workspace(workspace)
        key = (await admin.create_api_key(workspace, "test")).api_key
    return AsyncMemplaneClient(server.target, key, timeout=DEADLINE)


async def test_a_killed_postmaster_is_restarted_by_its_server(serve: object, admin_key: str) -> None:
    server: ServerProcess = await serve(None)  # type: ignore[operator]
    pgdata = server.data_dir / "pgdata"
    client = await _client(server, admin_key, "supervised")
    statuses = _statuses(server.target, RETRIEVAL)
    try:
        await client.add_memories([mem(f"the glacier moved {i} metres") for i in range(3)])
        await _until_status(statuses, health_pb2.HealthCheckResponse.SERVING, server.log)
        [postmaster] = _postmasters(pgdata)
        backends = postmaster.children(recursive=True)
        with _restarts_held(server.data_dir):
            postmaster.send_signal(signal.SIGKILL)
            await _eventually(lambda: not _postmasters(pgdata), "the killed postmaster gone")
            # Its backends outlive it until each notices (under load, long enough to serve a
            # query: CI saw the search below succeed on one): down means they are gone too.
            await _eventually(lambda: not any(_alive(b) for b in backends), "the postmaster's backends gone")
            with pytest.raises(UnavailableError):
                await client.search("glacier metres", mode=LEXICAL)
            with pytest.raises(UnavailableError):
                await client.add_memories([mem("written while PostgreSQL is down")])
            await _until_status(statuses, health_pb2.HealthCheckResponse.NOT_SERVING, server.log)
            assert await _check(server.target, "") == health_pb2.HealthCheckResponse.SERVING  # liveness
        await _until_status(statuses, health_pb2.HealthCheckResponse.SERVING, server.log)
        hits = (await client.search("glacier metres", mode=LEXICAL, top_k=20)).hits
        assert sorted(h.memory.content for h in hits) == [f"the glacier moved {i} metres" for i in range(3)]
        await client.add_memories([mem("the glacier moved 3 metres")])
        assert len((await client.search("glacier metres", mode=LEXICAL, top_k=20)).hits) == 4
        [restarted] = _postmasters(pgdata)
        assert restarted.pid != postmaster.pid
        assert server.process.returncode is None  # the server itself never restarted
        log = server.log.read_text(errors="replace")
        assert "WARNING" in log
        assert "restarting embedded PostgreSQL (attempt 1" in log
    finally:
        await statuses.aclose()
        await client.close()


async def test_a_killed_server_leaves_no_postgres_running(serve: object) -> None:
    server: ServerProcess = await serve(None)  # type: ignore[operator]
    pgdata = server.data_dir / "pgdata"
    [postmaster] = _postmasters(pgdata)
    server.process.kill()
    await server.process.wait()
    await _eventually(lambda: not _postmasters(pgdata), f"postmaster {postmaster.pid} of a SIGKILLed server gone")
    assert not (pgdata / "postmaster.pid").exists()  # stopped cleanly, not crashed


async def test_a_restart_after_a_crash_adopts_the_orphan_and_a_clean_stop_stops_it(
    serve: object, admin_key: str
) -> None:
    """Also: `memplane migrate` attaches to the server's PostgreSQL and leaves it running
    when it exits; run alone, it starts PostgreSQL and stops it again (the holder list:
    that part passes on the code before too)."""
    first: ServerProcess = await serve(None)  # type: ignore[operator]
    pgdata = first.data_dir / "pgdata"
    async with await _client(first, admin_key, "orphaned") as client:
        await client.add_memories([mem("the orchard has forty pear trees")])
    [orphan] = _postmasters(pgdata)
    # The server and everything it started but PostgreSQL die at once (its watchdog
    # too: an OOM kill, a kill -9 of the session), so PostgreSQL is left behind.
    crashed = psutil.Process(first.process.pid)
    for process in [crashed, *crashed.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    await first.process.wait()
    assert [p.pid for p in _postmasters(pgdata)] == [orphan.pid]

    again: ServerProcess = await serve(None, data_dir=first.data_dir)  # type: ignore[operator]
    assert [p.pid for p in _postmasters(pgdata)] == [orphan.pid]  # adopted: exactly one
    assert "applied 0 migration(s)" in await _migrate(first.data_dir)
    assert [p.pid for p in _postmasters(pgdata)] == [orphan.pid]  # another holder's exit left it running
    async with AsyncMemplaneClient(again.target, admin_key) as admin:
        key = (await admin.create_api_key("orphaned", "again")).api_key
    async with AsyncMemplaneClient(again.target, key, timeout=DEADLINE) as client:
        hits = (await client.search("orchard pear trees", mode=LEXICAL)).hits
        assert [h.memory.content for h in hits] == ["the orchard has forty pear trees"]

    again.process.send_signal(signal.SIGTERM)
    assert await again.process.wait() == 0
    await _eventually(lambda: not _postmasters(pgdata), "PostgreSQL stopped by the clean stop")

    assert "applied 0 migration(s)" in await _migrate(first.data_dir)
    await _eventually(lambda: not _postmasters(pgdata), "PostgreSQL stopped by `memplane migrate` run alone")
