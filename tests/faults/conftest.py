"""The fault tier: real things killed under a real server.

`killable_postgres` is a PostgreSQL cluster of its own (initdb'd from the embedded
server's binaries, on a free loopback port, migrated) that a test may SIGKILL and start
again on the same port, so a server's DSN stays valid across the outage;
`fresh_postgres` is the same cluster left empty (no migration applied). `serve` starts
`memplane serve` as a process of its own over a DSN (or on the embedded default, with a
data directory of its own or one given again), with the session's admin key.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest

from memplane.server.storage.migrate import apply_migrations
from tests.fix_process import SERVICES_START_SECONDS, free_port, wait_serving
from tests.fix_replica import _pg, pg_ctl_start, server_owned_dir, wait_until


@dataclass
class KillablePostgres:
    """A cluster in *pgdata* on 127.0.0.1:*port*."""

    pgdata: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def accepting(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def start(self) -> None:
        """`pg_ctl start -w`; after a SIGKILL, retried until the dead server's backends
        have exited and released its shared memory."""

        def started() -> bool:
            try:
                pg_ctl_start(self.pgdata, self.port)
            except subprocess.CalledProcessError:
                return False
            return True

        wait_until(started, "PostgreSQL started")
        wait_until(self.accepting, "PostgreSQL accepting connections")

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend (the server crashed or its node died: no
        shutdown, no backend left to finish a query), and wait until all have exited."""
        postmaster = psutil.Process(int((self.pgdata / "postmaster.pid").read_text().splitlines()[0]))
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs(processes, timeout=30)
        assert not alive, f"still running after SIGKILL: {alive}"
        assert not self.accepting()

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _pg("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")


@pytest.fixture
def fresh_postgres(tmp_path: Path) -> Iterator[KillablePostgres]:
    """A new, empty cluster for one test (no migration applied); stopped after it."""
    pgdata = server_owned_dir(tmp_path / "pgdata")
    _pg("initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust", "--encoding=utf8")
    cluster = KillablePostgres(pgdata, free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def killable_postgres(fresh_postgres: KillablePostgres) -> KillablePostgres:
    """A fresh, migrated cluster for one test; stopped after it."""
    await apply_migrations(fresh_postgres.dsn)
    return fresh_postgres


POLL_SECONDS = 0.01  # between looks at pg_stat_activity (the states waited for live there)


async def wait_for_sql(dsn: str, query: str, params: tuple[Any, ...], what: str) -> Any:
    """Poll *query* (one value) until it is true; return it; fail naming *what* after 60 s."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        try:
            async with asyncio.timeout(60):
                while True:
                    row = await (await conn.execute(query, params)).fetchone()
                    if row is not None and row[0]:
                        return row[0]
                    await asyncio.sleep(POLL_SECONDS)
        except TimeoutError:
            pytest.fail(f"timed out waiting until {what}")


@dataclass
class ServerProcess:
    target: str
    log: Path
    process: asyncio.subprocess.Process
    data_dir: Path


@pytest.fixture
async def serve(admin_key: str, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[ServerProcess]]]:
    """`await serve(dsn, **env)` starts `memplane serve` on a free port over *dsn* (extra
    MEMPLANE_* settings in *env*; *unset* names variables to leave out, *args* are added
    to the command line, *cwd* is its working directory) and waits until it is SERVING;
    every one is killed after. `await serve(None, data_dir=...)` runs it on the embedded
    default (migrating on start) in *data_dir* (a fresh one under tmp_path when not given:
    give a server's `data_dir` again to restart on the same embedded PostgreSQL)."""
    started: list[asyncio.subprocess.Process] = []

    async def start(
        dsn: str | None,
        *,
        data_dir: Path | None = None,
        args: Sequence[str] = (),
        unset: Sequence[str] = (),
        cwd: Path | None = None,
        **env: str,
    ) -> ServerProcess:
        port = free_port()
        if data_dir is None:
            data_dir = tmp_path / f"server-{port}"
            data_dir.mkdir()
        database = (
            {"MEMPLANE_DATABASE__DSN": dsn, "MEMPLANE_DATABASE__MIGRATE_ON_START": "false"}
            if dsn is not None
            else {"MEMPLANE_DATABASE__MIGRATE_ON_START": "true"}
        )
        environment = {
            **{k: v for k, v in os.environ.items() if k != "MEMPLANE_DATABASE__DSN"},
            **database,
            "MEMPLANE_AUTH__ADMIN_KEY": admin_key,
            "MEMPLANE_AUTH__BOOTSTRAP_DEFAULT_WORKSPACE": "false",
            "MEMPLANE_DATA_DIR": str(data_dir),
            "MEMPLANE_GRPC__PORT": str(port),
            **env,
        }
        for name in unset:
            environment.pop(name, None)
        log = data_dir / f"serve-{port}.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memplane", "serve", *args,
                env=environment, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(process)
        target = f"127.0.0.1:{port}"
        try:
            await wait_serving(target, process, SERVICES_START_SECONDS)
        except (RuntimeError, TimeoutError) as error:
            pytest.fail(f"{error}\n{log.read_text(errors='replace')[-4000:]}", pytrace=False)
        return ServerProcess(target, log, process, data_dir)

    yield start
    for process in started:
        if process.returncode is None:
            process.kill()
            await process.wait()
